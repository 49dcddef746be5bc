#!/usr/bin/env python3
"""bench/ab_xfer.py OLD NEW — what one KV transfer costs in serving, binary OLD against NEW:
the measurement behind docs/bench/xfer_populate.log and xfer_populate_bg.log (the "Transfer
cost" part of docs/disaggregation-results.md). Each round starts a fresh disagg 1+1 server
from OLD, then one from NEW (`--prefill-workers 1 --decode-workers 1 --threads-per-worker 1
--kv-mem 1536`, generated 110m q8_0 with a 4096 context), notes the seconds until it listens
(the pool is allocated at start), and runs `dyad bench --concurrency 1 --requests 6 --osl 8`
with each ISL in turn against it (every prompt is prefilled remotely at these lengths). Per
run it prints TTFT p50 and the `KV transfer` figures of the report: prompts sent away, ms per
transfer, GB/s, share of TTFT. WARMUP=1 (default) sends one request first; WARMUP=0 lets the
first transfers count (xfer_populate_bg.log). The load generator is NEW's `dyad bench`.
A benchmark: it asserts nothing.

  ROUNDS=2 ISLS="512 2048" WARMUP=1 bench/ab_xfer.py old/dyad build/dyad
  MODEL=models/stories260K.bin SERVE_ARGS="--tokenizer models/tok512.bin" VOCAB_SIZE=512 \
    KV_MEM=64 ISLS="64 128" REQUESTS=2 bench/ab_xfer.py build/dyad build/dyad   (a quick check)"""
import os
import subprocess
import sys

import benchlib
from benchlib import ROOT

ROUNDS = int(os.environ.get("ROUNDS", "2"))
ISLS = os.environ.get("ISLS", "512 2048").split()
WARMUP = os.environ.get("WARMUP", "1")
REQUESTS = os.environ.get("REQUESTS", "6")
MODEL = os.environ.get("MODEL", os.path.join(ROOT, "models", "generated", "110m-q8_0-ctx4k.gguf"))
VOCAB = os.environ.get("VOCAB_SIZE", "32000")  # stories260K: 512
SERVER = ["--kv-mem", os.environ.get("KV_MEM", "1536"), "--prefill-workers", "1",
          "--decode-workers", "1", "--threads-per-worker", "1", *os.environ.get("SERVE_ARGS", "").split()]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    binaries = {"old": sys.argv[1], "new": sys.argv[2]}
    if not os.path.exists(MODEL):
        os.makedirs(os.path.dirname(MODEL), exist_ok=True)
        subprocess.run([binaries["new"], "gen-model", "--shape", "110m", "--type", "q8_0",
                        "--ctx", "4096", "-o", MODEL], check=True)
    print(benchlib.env_header(f"disagg 1+1 ({' '.join(SERVER)}), dyad bench --concurrency 1 "
                              f"--requests {REQUESTS} --warmup {WARMUP} --osl 8; rounds alternate "
                              "old/new; start = seconds until the server listens"))
    for label, path in binaries.items():
        print(f"# {label} = {benchlib.binary_id(path)}")
    print(f"# model {MODEL}")
    print("\n| round | binary | ISL | start s | TTFT p50 ms | prefilled remotely | MB moved | "
          "ms per transfer | GB/s | share of TTFT |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for rnd in range(1, ROUNDS + 1):
        for label, path in binaries.items():
            server, start = benchlib.serve(path, "--model", MODEL, *SERVER)
            try:
                for isl in ISLS:
                    r = benchlib.bench(binaries["new"], server, "--isl", isl, "--osl", "8",
                                       "--concurrency", "1", "--requests", REQUESTS,
                                       "--warmup", WARMUP, "--vocab-size", VOCAB,
                                       "--seed", f"{rnd}{isl}")[-1]  # no prompt shares a prefix
                    kv = r["kv_transfer"]
                    print(f"| {rnd} | {label} | {isl} | {start:.2f} | {r['ttft_ms']['p50']:.1f} | "
                          f"{kv['remote_prefills']} of {kv['placed']} | {kv['bytes'] / 1e6:.1f} | "
                          f"{kv['mean_ms']:.2f} | {kv['gb_per_s']:.2f} | {kv['ttft_share']:.1%} |",
                          flush=True)
            finally:
                server.stop()


main()
