#!/usr/bin/env python3
"""bench/serve_target.py OLD NEW [MODEL] — the serving figure users see, against the engine's own
bound (docs/engine.md, "Serving against the engine's bound"): `dyad bench --isl 256 --osl 128
--concurrency 16` on one aggregated worker with 2 threads, for the OLD binary with its f32 KV
cache and the NEW binary with each KV type, arms alternated (the order reversed every round),
a fresh server each run; then, from NEW's `dyad bench engine` on the same model and KV type,
the bound those lengths allow:

  a request costs one 256-token prefill (interpolated between the engine's P = 128 and
  P = 512 figures) and 128 decode steps shared by the 16 requests in flight (the batch table
  with private KV at contexts 256 and 384, averaged: the request's context over its answer),
  so one worker delivers at most 128 / (prefill_ms + 128 / 16 · step_ms) × 1000 tokens/s.

Where the rest goes: the worker's busy share of the run (dyad_worker_step_seconds_total over
the run's wall time, from /metrics) and the mean tokens per engine step.

MODEL defaults to models/generated/110m-q8_0.gguf (made with NEW's gen-model if missing).
Environment: ROUNDS (3), REQUESTS (64 a run, after 16 of warm-up), TYPES (NEW's KV types,
default "f16 q8_0 f32"), OUT (default docs/bench/serve_target.log). QUICK=1: the bundled
stories260K, 1 round, 8 requests, ISL 32 / OSL 16 (a smoke run; the figures mean nothing).
A benchmark: it prints figures and asserts nothing."""
import json
import os
import statistics
import subprocess
import sys
import time

import benchlib
from benchlib import ROOT

QUICK = bool(os.environ.get("QUICK"))
ROUNDS = 1 if QUICK else int(os.environ.get("ROUNDS", "3"))
REQUESTS = 8 if QUICK else int(os.environ.get("REQUESTS", "64"))
ISL, OSL, CONC = (32, 16, 4) if QUICK else (256, 128, 16)
TYPES = os.environ.get("TYPES", "f16 q8_0 f32").split()


def model_path(new):
    if len(sys.argv) > 3:
        return sys.argv[3]
    if QUICK:
        return os.path.join(ROOT, "models", "stories260K.bin")
    return benchlib.generated_model(new, "110m-q8_0")


def serve_args(model, kv_type):
    args = ["--model", model, "--workers", "1", "--threads-per-worker", "2", "--kv-type", kv_type]
    if model.endswith(".bin"):
        args += ["--tokenizer", os.path.join(ROOT, "models", "tok512.bin")]
    return args


def counter(metrics, name):
    """A counter summed over its label sets (one per worker)."""
    return sum(v for k, v in metrics.items() if k == name or k.startswith(name + "{"))


def serve_run(binary, model, kv_type, vocab, seed):
    """One run on a fresh server: the bench report, the worker's busy share, tokens a step."""
    server, _ = benchlib.serve(binary, *serve_args(model, kv_type))
    try:
        args = ["--isl", str(ISL), "--osl", str(OSL), "--vocab-size", str(vocab),
                "--seed", str(seed)]
        benchlib.bench(binary, server, "--concurrency", str(CONC), "--requests", str(CONC), *args)
        m0, t0 = server.metrics(), time.monotonic()
        report = benchlib.bench(binary, server, "--concurrency", str(CONC), "--requests",
                                str(REQUESTS), *args)[-1]
        m1 = server.metrics()
        wall = time.monotonic() - t0
        busy = (counter(m1, "dyad_worker_step_seconds_total")
                - counter(m0, "dyad_worker_step_seconds_total")) / wall
        steps = counter(m1, "dyad_worker_steps_total") - counter(m0, "dyad_worker_steps_total")
        tokens = sum(counter(m1, n) - counter(m0, n)
                     for n in ("dyad_prompt_tokens_total", "dyad_generation_tokens_total"))
        return report, busy, tokens / steps if steps else 0.0
    finally:
        server.stop()


def engine_bound(new, model, kv_type):
    """Output tokens/s the engine's own figures allow at these lengths and concurrency."""
    lo, hi = ISL, ISL + OSL
    out = subprocess.run([new, "bench", "engine", "--json", "--reps", "3", "--threads", "2",
                          "--kv-type", kv_type, "--batch-context", str(lo), "--batch-context",
                          str(hi), "--model", model] + (["--quick"] if QUICK else []),
                         capture_output=True, text=True, check=True)
    d = json.loads(out.stdout.strip().splitlines()[-1])
    pre = {p["p"]: p["ms"] for p in d["prefill"]}
    p_lo, p_hi = (16, 64) if QUICK else (128, 512)
    prefill_ms = pre[p_lo] + (pre[p_hi] - pre[p_lo]) * (ISL - p_lo) / (p_hi - p_lo)
    steps = [next(x["ms"] for x in t["batch"] if x["b"] == CONC) for t in d["batch_at"]]
    step_ms = sum(steps) / len(steps)
    return OSL / (prefill_ms + OSL / CONC * step_ms) * 1e3, prefill_ms, step_ms


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    old, new = sys.argv[1], sys.argv[2]
    model = model_path(new)
    vocab = 512 if model.endswith(".bin") else 32000
    arms = [("old f32", old, "f32")] + [(f"new {t}", new, t) for t in TYPES]
    lines = [benchlib.env_header(f"bench/serve_target.py: ISL {ISL}, OSL {OSL}, concurrency "
                                 f"{CONC}, {REQUESTS} requests a run, 1 aggregated worker x 2 "
                                 f"threads, {ROUNDS} rounds alternated"),
             f"# old = {benchlib.binary_id(old)}", f"# new = {benchlib.binary_id(new)}",
             f"# model {model}", "",
             "| round | arm | output tok/s | TTFT p50 ms | TPOT p50 ms | worker busy | tokens/step |",
             "|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    seen = {}
    for rnd in range(1, ROUNDS + 1):
        for label, binary, kv in (arms if rnd % 2 else arms[::-1]):
            r, busy, per_step = serve_run(binary, model, kv, vocab, seed=100 + rnd)
            row = (r["output_throughput"], r["ttft_ms"]["p50"], r["tpot_ms"]["p50"], busy, per_step)
            seen.setdefault(label, []).append(row)
            lines.append(f"| {rnd} | {label} | {row[0]:.1f} | {row[1]:.1f} | {row[2]:.2f} | "
                         f"{busy:.0%} | {per_step:.1f} |")
            print(lines[-1], flush=True)
    lines += ["", "medians over the rounds, against the old build and the engine's bound:", "",
              "| arm | output tok/s | ÷ old f32 | engine bound tok/s (prefill ms, step ms at B) "
              "| share of bound | worker busy |", "|---|---|---|---|---|---|"]
    old_tps = statistics.median(r[0] for r in seen["old f32"])
    for label, binary, kv in arms:
        tps = statistics.median(r[0] for r in seen[label])
        busy = statistics.median(r[3] for r in seen[label])
        bound, pre_ms, step_ms = engine_bound(binary, model, kv) if binary == new else (0, 0, 0)
        bound_txt = f"{bound:.1f} ({pre_ms:.1f}, {step_ms:.2f})" if bound else "-"
        share = f"{tps / bound:.0%}" if bound else "-"
        lines.append(f"| {label} | {tps:.1f} | {tps / old_tps:.2f}× | {bound_txt} | {share} | "
                     f"{busy:.0%} |")
        print(lines[-1], flush=True)
    if not QUICK:
        path = os.environ.get("OUT", os.path.join(ROOT, "docs", "bench", "serve_target.log"))
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")


main()
