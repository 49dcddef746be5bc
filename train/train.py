#!/usr/bin/python3
"""train.py — trains one model of the quality family from scratch on the task mix, on the CPU.

    /usr/bin/python3 train/train.py --size s --steps 3000 --out train/runs/s

Each step draws `--batch` problems from tasks.TrainStream (uniform over the four tasks, never a
held-out prompt), feeds `<s> prompt answer </s>` and takes the loss on the answer and the
closing </s> only: the prompt is given, the model is asked for the answer. AdamW, a linear
warm-up then a cosine decay to a tenth of the peak rate.

The run directory gets: `log.jsonl` (one line per logged step: loss, tokens, seconds; and the
held-out greedy accuracy per task every `--eval-every` steps), `checkpoint.pt` (model, optimiser
and data-stream state every `--checkpoint-every` steps; `--resume` goes on from it, so a killed
run loses at most that much), and at the end `model.bin` + `tokenizer.bin` (llama2.c, for
`dyad convert`), `summary.json` (config, parameters, time, final accuracy) and `greedy.json`
(the PyTorch forward pass's greedy answers to the first held-out problems of each task: the
expected outputs of tests/quality_engine_test.py).
"""

import argparse
import json
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tasks  # noqa: E402
import tokenizer as tok  # noqa: E402
from model import SIZES, Transformer, export_llama2c, greedy, config_dict  # noqa: E402

MAX_ANSWER = 16  # generated tokens allowed at evaluation: the longest answer (sort of 7) is 13


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", choices=sorted(SIZES), required=True)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--eval-every", type=int, default=500)
    p.add_argument("--eval-problems", type=int, default=100, help="held-out problems per task at each evaluation")
    p.add_argument("--final-problems", type=int, default=500, help="held-out problems per task at the end")
    p.add_argument("--greedy-problems", type=int, default=20, help="greedy answers kept per task for the engine test")
    p.add_argument("--checkpoint-every", type=int, default=250)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--out", required=True, help="run directory")
    a = p.parse_args(argv)
    for name in ["steps", "batch", "threads", "eval_every", "checkpoint_every", "log_every"]:
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    for name in ["eval_problems", "final_problems", "greedy_problems"]:
        if not 0 <= getattr(a, name) <= tasks.HELDOUT_MAX:
            p.error(f"--{name.replace('_', '-')} must be 0 to {tasks.HELDOUT_MAX}")
    if a.lr <= 0 or a.warmup < 0:
        p.error("--lr must be positive and --warmup not negative")
    return a


def batch_tensors(problems, seq_len):
    """Inputs, targets and the loss mask of a batch: each row <s> prompt answer </s>, padded
    with </s>; the mask is 1 where the target is an answer token or the closing </s>."""
    rows, masks = [], []
    for _, prompt, answer in problems:
        p = tok.encode(prompt)
        a = tok.encode_continuation(answer) + [tok.EOS]
        seq = (p + a)[:seq_len + 1]
        rows.append(seq)
        masks.append([0] * (len(p) - 1) + [1] * (len(seq) - len(p)))
    T = max(len(r) for r in rows)
    ids = torch.full((len(rows), T), tok.EOS, dtype=torch.long)
    mask = torch.zeros((len(rows), T - 1))
    for i, (r, m) in enumerate(zip(rows, masks)):
        ids[i, :len(r)] = torch.tensor(r)
        mask[i, :len(m)] = torch.tensor(m, dtype=torch.float32)
    return ids[:, :-1], ids[:, 1:], mask


def lr_at(step, a):
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    t = (step - a.warmup) / max(1, a.steps - a.warmup)
    return a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def answers(model, problems):
    outs = greedy(model, [tok.encode(p) for p, _ in problems], MAX_ANSWER, tok.EOS)
    return [tok.decode(o) for o in outs]


def evaluate(model, count):
    """Held-out greedy accuracy per task over the first `count` problems of each."""
    model.eval()
    acc = {}
    for t in tasks.TASK_NAMES:
        probs = tasks.heldout(t, count)
        outs = answers(model, probs)
        acc[t] = sum(tasks.check(t, p, o) for (p, _), o in zip(probs, outs)) / max(1, count)
    model.train()
    return acc


def save_checkpoint(path, model, opt, stream, step, elapsed):
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                "elapsed": elapsed, "stream": stream.rng.getstate(), "torch_rng": torch.get_rng_state()}, tmp)
    os.replace(tmp, path)


def main(argv):
    a = parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    os.makedirs(a.out, exist_ok=True)
    cfg = SIZES[a.size]
    cfg.vocab_size = len(tok.VOCAB)
    model = Transformer(cfg)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95))
    stream = tasks.TrainStream(a.seed, tasks.HELDOUT_MAX)
    ckpt = os.path.join(a.out, "checkpoint.pt")
    log_path = os.path.join(a.out, "log.jsonl")
    step, elapsed = 0, 0.0
    if a.resume and os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        stream.rng.setstate(state["stream"])
        torch.set_rng_state(state["torch_rng"])
        step, elapsed = state["step"], state["elapsed"]
    elif os.path.exists(log_path):
        os.remove(log_path)
    log = open(log_path, "a")
    tokens_seen = 0
    t0 = time.monotonic() - elapsed
    while step < a.steps:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a)
        x, y, mask = batch_tensors([stream.next() for _ in range(a.batch)], cfg.seq_len)
        logits = model(x)
        loss = (F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                reduction="none") * mask.reshape(-1)).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens_seen += x.numel()
        if step % a.log_every == 0 or step == a.steps:
            rec = {"step": step, "loss": round(loss.item(), 5), "lr": lr_at(step - 1, a),
                   "seconds": round(time.monotonic() - t0, 2), "tokens": tokens_seen}
            if step % a.eval_every == 0 or step == a.steps:
                rec["heldout_greedy"] = evaluate(model, a.eval_problems)
            log.write(json.dumps(rec) + "\n")
            log.flush()
            if sys.stderr.isatty():
                print(f"\r{a.size} step {step}/{a.steps} loss {loss.item():.4f}", end="", file=sys.stderr)
        if step % a.checkpoint_every == 0 or step == a.steps:
            save_checkpoint(ckpt, model, opt, stream, step, time.monotonic() - t0)
    train_seconds = time.monotonic() - t0
    if sys.stderr.isatty():
        print(file=sys.stderr)
    finish(a, model, cfg, train_seconds)


def finish(a, model, cfg, train_seconds):
    model.eval()
    export_llama2c(model, os.path.join(a.out, "model.bin"))
    tok.write_llama2c(os.path.join(a.out, "tokenizer.bin"))
    final = evaluate(model, a.final_problems)
    kept = {}
    for t in tasks.TASK_NAMES:
        probs = tasks.heldout(t, a.greedy_problems)
        kept[t] = [{"prompt": p, "output": o} for (p, _), o in zip(probs, answers(model, probs))]
    with open(os.path.join(a.out, "greedy.json"), "w") as f:
        json.dump(kept, f, indent=1)
    summary = {"size": a.size, "config": config_dict(cfg), "params": cfg.params(),
               "steps": a.steps, "batch": a.batch, "lr": a.lr, "seed": a.seed,
               "threads": a.threads, "train_seconds": round(train_seconds, 1),
               "heldout_greedy_accuracy": final, "heldout_problems": a.final_problems,
               "command": "/usr/bin/python3 train/train.py " + " ".join(sys.argv[1:])}
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
