#!/usr/bin/env python3
"""fuzz/make_corpus.py [DYAD] — writes the committed seed corpus of every fuzz target,
fuzz/corpus-NAME/, from the repository's real formats: request bodies as docs/api.md
documents them, KV-transfer frames and wire frames laid out as the C encoders write them, the
bundled traces and cost models, grammars and schemas from the tests, a tiny llama2.c model and
its GGUF conversion (made with DYAD, default build/dyad), plus a few edge cases per format. Each
target's first input byte, where it has one, is the mode its fuzz/fuzz_NAME.c describes.
Rerun it after a format changes; its output is committed."""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write(target, name, data):
    d = os.path.join(ROOT, "fuzz", "corpus-" + target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def fresh(target):
    shutil.rmtree(os.path.join(ROOT, "fuzz", "corpus-" + target), ignore_errors=True)


def repo_file(path, max_lines=None):
    with open(os.path.join(ROOT, path), "rb") as f:
        data = f.read()
    if max_lines is not None:
        data = b"".join(data.splitlines(keepends=True)[:max_lines])
    return data


# ---------------------------------------------------------------- fuzz_api: request bodies

COMPLETIONS = {
    "simple": {"model": "stories260K", "prompt": "Once upon a time", "max_tokens": 8},
    "list": {"model": "m", "prompt": ["a", "b c"], "max_tokens": 4, "temperature": 0,
             "stop": ["\n", "The"], "seed": 7},
    "ids": {"model": "m", "prompt": [1, 403, 407], "max_tokens": 3, "logprobs": 2},
    "ids_list": {"model": "m", "prompt": [[1, 2], [3]], "n": 2, "best_of": 3, "max_tokens": 2},
    "echo": {"model": "m", "prompt": "x", "echo": True, "max_tokens": 0},
    "stream": {"model": "m", "prompt": "hi", "stream": True,
               "stream_options": {"include_usage": True}, "top_p": 0.9, "top_k": 40,
               "min_p": 0.05},
    "vote": {"model": "m", "prompt": "2+2=", "n": 4, "max_tokens": 4,
             "dyad": {"select": "majority", "answer_regex": "[0-9]+"}},
    "logprob_select": {"model": "m", "prompt": "q", "n": 3, "dyad": {"select": "logprob"}},
    "session": {"model": "m", "prompt": "turn 2", "dyad": {"session": "s-1",
                                                           "hold": {"expected_ms": 1500}}},
    "grammar": {"model": "m", "prompt": "json:", "max_tokens": 16,
                "dyad": {"grammar": {"type": "json_schema", "json_schema": {
                    "name": "p", "schema": {"type": "object", "properties": {
                        "n": {"type": "integer"}}, "required": ["n"]}}}}},
    "ignored": {"model": "m", "prompt": "p", "frequency_penalty": 0, "logit_bias": {},
                "user": "u", "ignore_eos": True, "suffix": None},
}

CHAT = {
    "simple": {"model": "m", "messages": [{"role": "user", "content": "Hello"}]},
    "turns": {"model": "m", "max_tokens": 5, "messages": [
        {"role": "system", "content": "You tell stories."},
        {"role": "user", "content": "A story?"},
        {"role": "assistant", "content": "Once upon a time"},
        {"role": "user", "content": [{"type": "text", "text": "go "}, {"type": "text", "text": "on"}]}]},
    "json_object": {"model": "m", "response_format": {"type": "json_object"},
                    "messages": [{"role": "user", "content": "json"}]},
    "json_schema": {"model": "m", "messages": [{"role": "user", "content": "a person"}],
                    "response_format": {"type": "json_schema", "json_schema": {
                        "name": "person", "strict": True, "schema": {
                            "type": "object", "additionalProperties": False,
                            "properties": {"name": {"type": "string", "maxLength": 20},
                                           "age": {"type": "integer", "minimum": 0},
                                           "tags": {"type": "array", "items": {"enum": ["a", "b"]}}},
                            "required": ["name", "age"]}}}},
    "tools_auto": {"model": "m", "messages": [{"role": "user", "content": "weather?"}],
                   "tools": [{"type": "function", "function": {
                       "name": "get_weather", "description": "Weather of a city",
                       "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                      "required": ["city"]}}}]},
    "tools_required": {"model": "m", "tool_choice": "required", "parallel_tool_calls": False,
                       "messages": [{"role": "user", "content": "x"}],
                       "tools": [{"type": "function", "function": {"name": "f"}},
                                 {"type": "function", "function": {"name": "g", "parameters": {
                                     "type": "object", "properties": {"n": {"type": "number"}}}}}]},
    "tools_named": {"model": "m", "messages": [{"role": "user", "content": "x"}],
                    "tool_choice": {"type": "function", "function": {"name": "f"}},
                    "tools": [{"type": "function", "function": {"name": "f"}}]},
    "tool_result": {"model": "m", "tools": [{"type": "function", "function": {"name": "f"}}],
                    "messages": [
                        {"role": "user", "content": "call f"},
                        {"role": "assistant", "content": None, "tool_calls": [
                            {"id": "call_1", "type": "function",
                             "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
                        {"role": "tool", "tool_call_id": "call_1", "content": "42"}]},
    "sampling": {"model": "m", "messages": [{"role": "user", "content": "s"}], "n": 2,
                 "logprobs": True, "top_logprobs": 3, "temperature": 1.5, "seed": -1,
                 "max_completion_tokens": 9, "stop": "."},
}

EDGE_BODIES = [b"", b"{}", b"[]", b"{\"model\":", b"{\"model\":\"m\",\"model\":\"m\"}",
               b"{\"model\":\"m\",\"prompt\":\"\\u0000\\ud800\"}",
               b"{\"model\":\"m\",\"prompt\":" + b"[" * 70 + b"]" * 70 + b"}",
               b"{\"model\":\"m\",\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}",
               b"{\"model\":\"m\",\"prompt\":\"p\",\"top_p\":1e-300,\"max_tokens\":1e400}"]


def api_seeds():
    fresh("api")
    for name, body in COMPLETIONS.items():
        write("api", "cmpl_" + name, b"\x00" + json.dumps(body).encode())
    # Chat bodies go to dy_gen_new with a few different families (the byte's other bits).
    for i, (name, body) in enumerate(CHAT.items()):
        write("api", "chat_" + name, bytes([1 | (2 * i) % 28]) + json.dumps(body).encode())
    for i, body in enumerate(EDGE_BODIES):
        write("api", "edge_%d" % i, bytes([i & 1]) + body)


# ---------------------------------------------------------------- fuzz_xfer: KV frames

XFER_MAGIC = 0x564B5944
BLOCK = 16  # the target's pool: 1 position x 1 layer x (keys, values) x 2 floats


def xfer_frame(seq, dst, nbytes=BLOCK, magic=XFER_MAGIC, body=None, kv_type=0):
    hdr = struct.pack("<IIQiI", magic, nbytes, seq, dst, kv_type)  # kv_type 0: f32
    return hdr + (body if body is not None else bytes([dst & 0xff]) * nbytes)


def xfer_seeds():
    fresh("xfer")
    every = b"".join(xfer_frame(s, d) for s, d in [(7, 1), (7, 2), (7, 3), (9, 5)])
    write("xfer", "all_blocks", every)
    write("xfer", "one_block", xfer_frame(9, 5))
    write("xfer", "half_body", xfer_frame(7, 2)[:24 + BLOCK // 2])
    write("xfer", "half_header", xfer_frame(7, 1)[:10])
    write("xfer", "bad_magic", xfer_frame(7, 1, magic=0x12345678))
    write("xfer", "bad_size", xfer_frame(7, 1, nbytes=BLOCK * 2))
    write("xfer", "unexpected", xfer_frame(7, 5) + xfer_frame(7, 1))
    write("xfer", "duplicate", xfer_frame(7, 3) + xfer_frame(7, 3))
    write("xfer", "other_seq", xfer_frame(8, 1) + xfer_frame(9, 5))
    write("xfer", "negative_dst", xfer_frame(7, -1))
    write("xfer", "other_kv_type", xfer_frame(7, 1, kv_type=1) + xfer_frame(9, 5))


# ---------------------------------------------------------------- fuzz_wire: frames

WIRE_MAGIC, WIRE_VERSION = 0x44415944, 6


def wire_frame(mtype, payload):
    return struct.pack("<IHHI", WIRE_MAGIC, WIRE_VERSION, mtype, len(payload)) + payload


def wire_bytes(s):
    return struct.pack("<I", len(s)) + s


def wire_frames():
    """One valid frame of a few types, by name: fuzz_wire's seeds, and fuzz_cluster's (a NATS
    message carries one frame)."""
    hello = struct.pack("<IIQIIIIBI", 0, 1234, 0xABCDEF, 512, 512, 64, 16, 2, 4096)
    hello += wire_bytes(b"dyad-kv-1234-0") + wire_bytes(b"127.0.0.1:7411")
    request = struct.pack("<QIfffiQIIBBBBBQI", 1, 16, 0.8, 0.95, 0.0, 40, 7, 0, 2, 0, 1, 2, 1, 0,
                          0x5E55, 1500)
    request += wire_bytes(b"\n") + wire_bytes(b"root ::= \"a\"+") + struct.pack("<I3i", 3, 1, 2, 3)
    token = struct.pack("<QifB", 1, 42, -0.5, 1) + struct.pack("<if", 43, -1.5) + wire_bytes(b"ab")
    cancel = struct.pack("<Q", 1)
    hold = struct.pack("<QIB", 0x5E55, 2000, 0)
    return {"hello": wire_frame(1, hello), "request": wire_frame(2, request),
            "cancel": wire_frame(3, cancel), "hold": wire_frame(17, hold),
            "token": wire_frame(4, token), "short": wire_frame(2, request[:20])}


def wire_seeds():
    fresh("wire")
    f = wire_frames()
    for name in ("hello", "request", "cancel", "hold", "token", "short"):
        write("wire", name, f[name])
    write("wire", "stream", f["request"] + f["token"] + wire_frame(7, b""))
    write("wire", "bad_version", struct.pack("<IHHI", WIRE_MAGIC, 99, 2, 0))


# ---------------------------------------------------------------- fuzz_trace: workload files

def trace_seeds():
    fresh("trace")
    write("trace", "mooncake", b"\x01" + repo_file("bench/data/mooncake_conversation_300.jsonl", 12))
    write("trace", "azure", b"\x01" + repo_file("bench/data/azure2023_conv.csv", 12))
    write("trace", "azure_lengths", b"\x00" + repo_file("bench/data/azure2023_conv.csv", 12))
    write("trace", "mooncake_bad_line", b"\x03" + b'{"timestamp": 5, "input_length": 10, '
          b'"output_length": 2}\n{"timestamp": -1}\nnot json\n{"timestamp": 1, '
          b'"input_length": 3, "output_length": 4, "hash_ids": [0, 1]}\n')
    write("trace", "azure_crlf_quoted", b"\x01GeneratedTokens,\"TIMESTAMP\",ContextTokens\r\n"
          b"5,\"2023-11-16T18:15:46.5\",10\r\n7,2023-11-16 18:15:46,20\r\n")
    write("trace", "lengths_named", b"\x04input_length,output_length\n100,20\n0,0\n100000000,1\n")
    write("trace", "lengths_custom", b"\x08id,in,out\n1,5,6\n2,7,8\n")
    write("trace", "lengths_skip", b"\x0eoutput_tokens,input_tokens\n3,4\nx,5\n6\n")
    write("trace", "sharegpt", b"\x00num_prefill_tokens,num_decode_tokens\n512,128\n77,300\n")
    write("trace", "empty", b"\x01")
    write("trace", "header_only", b"\x00prompt_len,output_len\n")


# ---------------------------------------------------------------- fuzz_cost: cost models

def cost_seeds():
    fresh("cost")
    for name in sorted(os.listdir(os.path.join(ROOT, "sim", "costs"))):
        if name.endswith(".json"):
            write("cost", name[:-5], repo_file(os.path.join("sim", "costs", name)))
    write("cost", "measured", repo_file("docs/bench/sim_cost_110m_1t.json"))
    roof = json.loads(repo_file("sim/costs/h100-llama3.1-8b-fp8.json"))
    roof["tp"] = 8
    write("cost", "roofline_tp8", json.dumps(roof))
    roof["tp"] = 3
    write("cost", "roofline_tp3", json.dumps(roof))
    write("cost", "unknown_kind", b'{"kind": "guess"}')
    write("cost", "not_object", b"[1, 2]")


# ---------------------------------------------------------------- fuzz_cluster: registry values

REG_ENTRY = {"id": 3735928559, "incarnation": "5f0c9a", "host": "hostA", "pid": 4242,
             "role": "decode", "model": "stories260K.bin", "fingerprint": "0123456789abcdef",
             "block_size": 16, "kv_blocks": 4096, "kv_type": "f32",
             "kv_addr": "10.0.0.2:39211", "kv_transfer": "tcp", "threads": 2, "lease_s": 3.0,
             "draining": False,
             "load": {"running": 2, "waiting": 0, "kv_used": 120, "kv_total": 4096}}

NODE_ENTRY = {"id": 305419896, "incarnation": "5f0c9a", "host": "hostA", "pid": 4242,
              "cores": 8, "cores_used": 5, "lease_s": 3.0,
              "workers": [{"key": "w0a0b0c0d", "role": "agg", "threads": 2, "pid": 4250},
                          {"key": "w00000001", "role": "decode", "threads": 3, "pid": 4251}]}


def cluster_seeds():
    """Values as serve/cluster/registry.c writes them (the example of registry.h), a few
    refused ones, and a bucket key (the input is also read as a key and a --cluster URL)."""
    fresh("cluster")
    write("cluster", "decode", json.dumps(REG_ENTRY))
    prefill = dict(REG_ENTRY, id=1, role="prefill", kv_addr="", kv_transfer="", kv_type="q8_0",
                   draining=True)
    write("cluster", "prefill", json.dumps(prefill))
    write("cluster", "bad_role", json.dumps(dict(REG_ENTRY, role="worker")))
    write("cluster", "kv_over_total", json.dumps(dict(REG_ENTRY, load=dict(
        REG_ENTRY["load"], kv_used=5000))))
    write("cluster", "not_json", b'{"id": 1, "host": "a')
    write("cluster", "key", b"wdeadbeef")
    write("cluster", "url", b"nats://127.0.0.1:4222,nats://[::1]:4223")
    # the node agents' (serve/cluster/node.h): an entry, requests, answers
    write("cluster", "node", json.dumps(NODE_ENTRY))
    write("cluster", "node_over_budget", json.dumps(dict(NODE_ENTRY, cores=2)))
    write("cluster", "req_start", b'{"op":"start","role":"decode","threads":3}')
    write("cluster", "req_stop", b'{"op":"stop","worker":"w0000abcd"}')
    write("cluster", "req_list", b'{"op":"list"}')
    write("cluster", "answer_ok", b'{"ok":true,"worker":"w0000abcd","pid":77}')
    write("cluster", "answer_refused", b'{"ok":false,"error":"threads: 3 is more"}')
    write("cluster", "answer_list", json.dumps({"ok": True, "key": "n12345678",
                                                 "node": NODE_ENTRY}))
    for name, frame in wire_frames().items():  # what the links carry
        write("cluster", "frame_" + name, frame)


# ---------------------------------------------------------------- fuzz_grammar

GRAMMARS = [
    ('root ::= "ab" [0-9x] | "c"', "ab7"),
    ('root ::= "a"{2,4} "b"* "c"+ "d"? "e"{3,}', "aabccdeee"),
    ('root ::= ( "a"? )* "b" ( | "c" | x )*\nx ::= "d"?', "aabcd"),
    ('root ::= item*\nitem ::= [a-z]+ ","', "ab,c,"),
    ('root ::= [^"a-c] "\\u00e9" [\\x80-\\xbf]', "x\u00e9"),
    ('root ::= .+', "anything"),
]
SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
    {"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 5}, "maxItems": 3},
    {"anyOf": [{"type": "null"}, {"type": "boolean"}, {"const": "x"}]},
    {"type": "string", "pattern": "^[a-z]{2,4}-[0-9]+$"},
    {"$defs": {"n": {"type": "object", "properties": {"k": {"$ref": "#/$defs/n"}}}},
     "$ref": "#/$defs/n"},
]


def grammar_seeds():
    fresh("grammar")
    for i, (g, text) in enumerate(GRAMMARS):
        g, text = g.encode(), text.encode()
        width = max(len(g), len(text))  # the target cuts the input in half
        write("grammar", "grammar_%d" % i, b"\x00" + g.ljust(width, b" ") + text.ljust(width, b" "))
    for i, s in enumerate(SCHEMAS):
        write("grammar", "schema_%d" % i, b"\x01" + json.dumps(s).encode())
    for name in ("schema-nested.json", "schema-50-properties.json"):
        write("grammar", name[:-5], b"\x01" + repo_file(os.path.join("bench", "data", name)))
    # Inputs that found a bug, kept so that every smoke run replays them.
    write("grammar", "regress_empty_root", b"\x00root ::= maxLeg   ")  # grammar_match.c NULL + 0


# ---------------------------------------------------------------- fuzz_model, fuzz_tokenizer_bin

def tiny_llama2c():
    """A llama2.c checkpoint with the bundled 512-token vocabulary and the smallest shapes."""
    dim, hidden, layers, heads, kv_heads, vocab, seq = 8, 16, 1, 2, 2, 512, 16
    head = dim // heads
    floats = (vocab * dim + layers * dim + layers * dim * dim + 2 * layers * kv_heads * head * dim
              + layers * dim * dim + layers * dim + 3 * layers * hidden * dim + dim + seq * head)
    weights = struct.pack("<%df" % floats, *[((i * 37) % 101 - 50) / 500.0 for i in range(floats)])
    return struct.pack("<7i", dim, hidden, layers, heads, kv_heads, vocab, seq) + weights


def model_seeds(dyad):
    fresh("model")
    ckpt = tiny_llama2c()
    write("model", "tiny_llama2c", ckpt)
    write("model", "truncated_llama2c", ckpt[:100])
    write("model", "bad_header", struct.pack("<7i", 8, 16, 1, 3, 2, 512, 16))
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "tiny.bin"), os.path.join(tmp, "tiny.gguf")
        with open(src, "wb") as f:
            f.write(ckpt)
        subprocess.run([dyad, "convert", src, dst, "--type", "f32", "--tokenizer",
                        os.path.join(ROOT, "models", "tok512.bin")], check=True,
                       stdout=subprocess.DEVNULL)
        with open(dst, "rb") as f:
            gguf = f.read()
    write("model", "tiny_gguf", gguf)
    write("model", "gguf_header_only", gguf[:24])


def tokenizer_seeds():
    fresh("tokenizer_bin")
    tok = repo_file("models/tok512.bin")
    write("tokenizer_bin", "tok512", tok)
    write("tokenizer_bin", "truncated", tok[:64])
    write("tokenizer_bin", "empty", b"")


def main():
    dyad = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "dyad")
    api_seeds()
    xfer_seeds()
    wire_seeds()
    trace_seeds()
    cost_seeds()
    cluster_seeds()
    grammar_seeds()
    model_seeds(dyad)
    tokenizer_seeds()


if __name__ == "__main__":
    main()
