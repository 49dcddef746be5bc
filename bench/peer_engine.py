#!/usr/bin/env python3
"""bench/peer_engine.py [DYAD] — dyad's engine against llama.cpp's, side by side in one sitting
(docs/engine.md, "Against llama.cpp"): for each model, ROUNDS rounds of llama.cpp then dyad on
the same GGUF file and thread count, each run started only once the machine is idle, and one
table of medians over the rounds with the ratio dyad ÷ llama.cpp.

What is compared (every figure tokens/s, the best of a run's repetitions, then the median
of the rounds):
  pp128, pp512   prefill of a 128- / 512-token prompt: `llama-bench -p 128,512` against
                 `dyad bench engine` (P = 128, 512)
  tg32           generating 32 tokens from an empty context: `llama-bench -n 32` against dyad's
                 decode at context 16 (the middle of those 32 positions)
  tgB@128        decode of B sequences with their own KV after 128-token prompts:
                 `llama-batched-bench -npp 128 -ntg 32 -npl B` (its TG speed) against
                 `dyad bench engine --batch-context 144` (the middle of positions 128…160)

Builds the peer from ../shared/peers if PEER_DIR lacks it. Environment: MODELS (default
"15m-q8_0 110m-f32 110m-q8_0 110m-q4_k 1b-q8_0 1b-q4_k", each `SHAPE-TYPE` made by
`dyad gen-model` into models/generated/ if missing, or a path to a GGUF file), ROUNDS (3),
THREADS (2), BATCH (B values, default 1,4,16,64), OUT (docs/bench/peer_engine.log), PEER_DIR
(/tmp/llama.cpp-peer), IDLE (the busy share of all cores under which a run may start,
default 0.10; the script waits at most 10 minutes for it and logs the share it started at).
QUICK=1: one round on 15m-q8_0, B = 1,4 (a smoke run; the figures mean nothing).
A benchmark: it prints figures and asserts nothing."""
import json
import os
import statistics
import subprocess
import sys

import benchlib

PEERS = os.path.join(benchlib.ROOT, "..", "shared", "peers")


def peer_bin(peer_dir):
    """The peer's bin folder, built first if it is not there yet."""
    bin_dir = os.path.join(peer_dir, "bin")
    if not os.path.exists(os.path.join(bin_dir, "llama-bench")):
        script = os.path.join(PEERS, "build-llama-cpp.sh")
        if not os.path.exists(script):
            sys.exit(f"peer_engine: {script} is missing: cannot build llama.cpp")
        subprocess.run(["bash", script, peer_dir], check=True, stdout=subprocess.DEVNULL)
    return bin_dir


def model_path(dyad, name):
    """A GGUF path for MODELS entry `name`, generated with `dyad gen-model` if needed."""
    return name if name.endswith(".gguf") else benchlib.generated_model(dyad, name)


def run_json_lines(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"peer_engine: {' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return out.stdout


def llama_round(bin_dir, model, threads, batch):
    """{metric: tokens/s} from llama-bench and llama-batched-bench."""
    got = {}
    text = run_json_lines([os.path.join(bin_dir, "llama-bench"), "-m", model, "-t", str(threads),
                           "-p", "128,512", "-n", "32", "-r", "3", "-o", "json"])
    for row in json.loads(text):
        key = f"pp{row['n_prompt']}" if row["n_gen"] == 0 else f"tg{row['n_gen']}"
        got[key] = max(row["samples_ts"])
    text = run_json_lines([os.path.join(bin_dir, "llama-batched-bench"), "-m", model,
                           "-t", str(threads), "-c", str(max(batch) * 160 + 64),
                           "-npp", "128", "-ntg", "32", "-npl", ",".join(map(str, batch)),
                           "--output-format", "jsonl"])
    for line in text.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            got[f"tg{row['pl']}@128"] = row["speed_tg"]
    return got


def dyad_round(dyad, model, threads, batch):
    """{metric: tokens/s} from `dyad bench engine --json`, and the kernel level it used."""
    text = run_json_lines([dyad, "bench", "engine", "--json", "--reps", "3", "--threads",
                           str(threads), "--batch-context", "144", "--model", model])
    d = json.loads(text.strip().splitlines()[-1])
    got = {f"pp{p['p']}": p["p"] * 1e3 / p["ms"] for p in d["prefill"] if p["p"] in (128, 512)}
    got["tg32"] = next(1e3 / x["ms_per_token"] for x in d["decode"] if x["context"] == 16)
    for point in d["batch_at"][0]["batch"]:
        if point["b"] in batch:
            got[f"tg{point['b']}@128"] = point["tokens_per_s"]
    return got, d["kernels"]


def main():
    dyad = benchlib.dyad_binary()
    quick = bool(os.environ.get("QUICK"))
    names = os.environ.get("MODELS", "15m-q8_0" if quick else
                           "15m-q8_0 110m-f32 110m-q8_0 110m-q4_k 1b-q8_0 1b-q4_k").split()
    rounds = 1 if quick else int(os.environ.get("ROUNDS", "3"))
    threads = int(os.environ.get("THREADS", "2"))
    batch = [int(b) for b in os.environ.get("BATCH", "1,4" if quick else "1,4,16,64").split(",")]
    idle = float(os.environ.get("IDLE", "0.10"))
    bin_dir = peer_bin(os.environ.get("PEER_DIR", "/tmp/llama.cpp-peer"))
    out_path = os.environ.get("OUT", os.path.join(benchlib.ROOT, "docs", "bench",
                                                  "peer_engine.log"))
    metrics = ["pp128", "pp512", "tg32"] + [f"tg{b}@128" for b in batch]
    lines = [benchlib.env_header(f"bench/peer_engine.py: llama.cpp (then) dyad, {threads} "
                                 f"threads, {rounds} rounds, median of the rounds' bests")]
    rows = []
    for name in names:
        model = model_path(dyad, name)
        seen = {"llama.cpp": {m: [] for m in metrics}, "dyad": {m: [] for m in metrics}}
        level = "?"
        for r in range(rounds):
            busy = benchlib.wait_idle(idle)
            for m, v in llama_round(bin_dir, model, threads, batch).items():
                seen["llama.cpp"].setdefault(m, []).append(v)
            busy2 = benchlib.wait_idle(idle)
            got, level = dyad_round(dyad, model, threads, batch)
            for m, v in got.items():
                seen["dyad"].setdefault(m, []).append(v)
            lines.append(f"# {name} round {r + 1}: busy before llama.cpp {busy:.0%}, "
                         f"before dyad {busy2:.0%}")
        for m in metrics:
            a, b = seen["llama.cpp"][m], seen["dyad"][m]
            if a and b:
                ma, mb = statistics.median(a), statistics.median(b)
                rows.append((name, m, ma, mb, mb / ma, level))
    lines.append(f"| model | metric | llama.cpp tok/s | dyad tok/s | dyad ÷ llama.cpp | "
                 f"dyad kernels |")
    lines.append("|---|---|---|---|---|---|")
    for name, m, ma, mb, ratio, level in rows:
        lines.append(f"| {name} | {m} | {ma:,.1f} | {mb:,.1f} | {ratio:.2f}× | {level} |")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if not quick:
        os.makedirs(os.path.dirname(out_path), exist_ok=True)
        with open(out_path, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
