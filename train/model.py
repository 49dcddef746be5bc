"""model.py — the llama architecture exactly as dyad's engine runs it, in PyTorch: RMSNorm
(eps 1e-5), rotary embeddings on adjacent pairs of each head (base 10000, llama2.c's order),
grouped-query attention (query head h reads KV head h // (heads / kv_heads)), a SwiGLU
feed-forward w2(silu(w1 x) * w3 x), and an output matrix tied to the token embedding.

`export_llama2c` writes the weights in llama2.c's legacy checkpoint layout, which
`dyad convert` turns into GGUF; nothing is permuted on the way, because both sides rotate
adjacent pairs.
"""

import math
import struct
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    seq_len: int

    def params(self):
        d, h, kvd = self.dim, self.hidden_dim, self.dim // self.n_heads * self.n_kv_heads
        per_layer = 2 * d * d + 2 * d * kvd + 3 * d * h + 2 * d
        return self.vocab_size * d + self.n_layers * per_layer + d


# The family: each about 4x the parameters of the one before.
SIZES = {
    "s": Config(dim=64, hidden_dim=192, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=0, seq_len=64),
    "m": Config(dim=128, hidden_dim=384, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=0, seq_len=64),
    "l": Config(dim=256, hidden_dim=768, n_layers=2, n_heads=8, n_kv_heads=4, vocab_size=0, seq_len=64),
}


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(head_dim, seq_len, base=10000.0):
    i = torch.arange(0, head_dim, 2, dtype=torch.float32)
    freq = 1.0 / base ** (i / head_dim)
    angle = torch.outer(torch.arange(seq_len, dtype=torch.float32), freq)
    return torch.cos(angle), torch.sin(angle)


def apply_rope(x, cos, sin):
    """x: (batch, heads, time, head_dim); rotates pairs (2i, 2i+1) by position x frequency i."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)
    return out.flatten(-2)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = c.n_heads, c.n_kv_heads, c.dim // c.n_heads
        kvd = self.head_dim * c.n_kv_heads
        self.attention_norm = RMSNorm(c.dim)
        self.wq = nn.Linear(c.dim, c.dim, bias=False)
        self.wk = nn.Linear(c.dim, kvd, bias=False)
        self.wv = nn.Linear(c.dim, kvd, bias=False)
        self.wo = nn.Linear(c.dim, c.dim, bias=False)
        self.ffn_norm = RMSNorm(c.dim)
        self.w1 = nn.Linear(c.dim, c.hidden_dim, bias=False)
        self.w2 = nn.Linear(c.hidden_dim, c.dim, bias=False)
        self.w3 = nn.Linear(c.dim, c.hidden_dim, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        h = self.attention_norm(x)
        q = self.wq(h).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(h).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(h).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        group = self.n_heads // self.n_kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim) + mask
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, -1)
        x = x + self.wo(y)
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Transformer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.tok_embeddings = nn.Embedding(c.vocab_size, c.dim)
        self.layers = nn.ModuleList(Block(c) for _ in range(c.n_layers))
        self.norm = RMSNorm(c.dim)
        cos, sin = rope_tables(c.dim // c.n_heads, c.seq_len)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.apply(self._init)
        for name, p in self.named_parameters():  # scaled residual projections (GPT-2)
            if name.endswith("wo.weight") or name.endswith("w2.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * c.n_layers))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)

    def forward(self, ids):
        T = ids.shape[1]
        mask = torch.full((T, T), float("-inf")).triu(1)
        x = self.tok_embeddings(ids)
        cos, sin = self.cos[:T], self.sin[:T]
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.norm(x) @ self.tok_embeddings.weight.T


@torch.no_grad()
def greedy(model, prompts_ids, max_new, eos):
    """Greedy continuations of a batch of token-id prompts, recomputing the whole sequence each
    step (the models are tiny); stops each at `eos`. Returns the generated ids without eos."""
    outs = []
    for ids in prompts_ids:  # one at a time: prompts differ in length, and no padding leaks in
        seq = list(ids)
        gen = []
        for _ in range(max_new):
            if len(seq) >= model.config.seq_len:
                break
            logits = model(torch.tensor([seq]))[0, -1]
            t = int(logits.argmax())
            if t == eos:
                break
            gen.append(t)
            seq.append(t)
        outs.append(gen)
    return outs


def export_llama2c(model, path):
    """The legacy llama2.c checkpoint: seven int32s (vocab_size positive = tied output), then
    f32 tensors: embedding, per-layer rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3 (each
    stacked over layers), rms_final, and the RoPE tables llama2.c used to carry."""
    c = model.config
    L = model.layers

    def write(f, t):
        f.write(t.detach().to(torch.float32).contiguous().numpy().tobytes())

    with open(path, "wb") as f:
        f.write(struct.pack("<7i", c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads,
                            c.vocab_size, c.seq_len))
        write(f, model.tok_embeddings.weight)
        for name in ["attention_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w1", "w2", "w3"]:
            for layer in L:
                write(f, getattr(layer, name).weight)
        write(f, model.norm.weight)
        write(f, model.cos)
        write(f, model.sin)


def config_dict(c):
    return asdict(c)
