#!/usr/bin/env python3
"""bench/disagg_policy.py [DYAD] — the conditional-disaggregation thresholds, measured: the
disagg 1+1 server (110m q8_0, 4096 context, one thread a worker) with different
--prefill-busy-tokens and --disagg-min-tokens, each under the same open-loop load, variants
alternated over ROUNDS rounds so drift on a shared machine hits them all alike. Prints one row
per run (goodput under TTFT <= 5 s and TPOT <= 50 ms, TTFT p50, TPOT mean, ITL p99, and the
share of prompts prefilled remotely, from `dyad bench`'s KV transfer report) and the median per
variant. The numbers behind the defaults (docs/disaggregation-results.md). A benchmark: it asserts
nothing. Standard library only.

  ROUNDS=3 DURATION=30 bench/disagg_policy.py"""
import os
import statistics

import benchlib
from benchlib import ROOT, dyad_http

DYAD = benchlib.dyad_binary()
MODEL = os.path.join(ROOT, "models", "generated", "110m-q8_0-ctx4k.gguf")
ROUNDS = int(os.environ.get("ROUNDS", "3"))
DURATION = os.environ.get("DURATION", "30")
SLO = "ttft_ms=5000,tpot_ms=50"
# (experiment, ISL, OSL, requests/s, {variant: server flags})
EXPERIMENTS = [
    ("prefill busy threshold", 512, 16, 1.5, {
        "--prefill-busy-tokens 0 (never remote)": ["--prefill-busy-tokens", "0"],
        "--prefill-busy-tokens 1024": ["--prefill-busy-tokens", "1024"],
        "--prefill-busy-tokens unlimited": ["--prefill-busy-tokens", str(1 << 30)],
    }),
] + [("minimum remote prompt", 64, 128, rate, {
        "--disagg-min-tokens 32 (64-token prompts remote)": ["--disagg-min-tokens", "32"],
        "--disagg-min-tokens 128 (64-token prompts local)": ["--disagg-min-tokens", "128"],
    }) for rate in (0.8, 1.65)]


def run(flags, isl, osl, rate, seed):
    server = dyad_http.Server(DYAD, "--model", MODEL, "--kv-mem", "1536", "--prefill-workers", "1",
                              "--decode-workers", "1", "--threads-per-worker", "1", *flags)
    try:
        return benchlib.bench(DYAD, server, "--isl", str(isl), "--osl", str(osl), "--rate", str(rate),
                              "--duration", DURATION, "--requests", "200", "--cores", "2",
                              "--seed", str(seed), "--slo", SLO)[-1]
    finally:
        server.stop()


def main():
    print(benchlib.env_header(f"disagg 1+1; SLO {SLO}; {DURATION} s of Poisson arrivals a run; "
                              f"{ROUNDS} rounds, variants alternated"))
    print("| experiment | ISL | OSL | req/s | variant | round | goodput req/s | TTFT p50 ms | "
          "TPOT mean ms | ITL p99 ms | prompts prefilled remotely |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    results = {}
    for name, isl, osl, rate, variants in EXPERIMENTS:
        for rnd in range(ROUNDS):
            for label, flags in variants.items():
                r = run(flags, isl, osl, rate, seed=1000 * rnd + isl + osl)
                kv = r.get("kv_transfer") or {}
                remote = kv.get("remote_prefills", 0) / max(kv.get("placed", 0), 1)
                row = (r["goodput"]["request_throughput"], r["ttft_ms"]["p50"],
                       r["tpot_ms"]["mean"], r["itl_ms"]["p99"], remote)
                results.setdefault((name, isl, osl, rate, label), []).append(row)
                print(f"| {name} | {isl} | {osl} | {rate} | {label} | {rnd + 1} | {row[0]:.3f} | "
                      f"{row[1]:.0f} | {row[2]:.1f} | {row[3]:.0f} | {row[4]:.0%} |", flush=True)
    print("\nmedians over the rounds:\n")
    print("| experiment | ISL | OSL | req/s | variant | goodput req/s | TTFT p50 ms | TPOT mean ms | "
          "ITL p99 ms | prompts prefilled remotely |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (name, isl, osl, rate, label), rows in results.items():
        med = [statistics.median(col) for col in zip(*rows)]
        print(f"| {name} | {isl} | {osl} | {rate} | {label} | {med[0]:.3f} | {med[1]:.0f} | "
              f"{med[2]:.1f} | {med[3]:.0f} | {med[4]:.0%} |")


main()
