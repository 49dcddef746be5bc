#!/usr/bin/env python3
"""bench/disagg_balance.py [DYAD] — how busy each pool of a 1:1 disaggregated server is, and
the prefill:decode worker ratio that would keep both busy: the "Balance" measurement of
docs/disaggregation-results.md.

For each ISL x OSL cell, one `dyad serve --prefill-workers 1 --decode-workers 1` (110m q8_0,
4096-token context, one thread a worker; every prompt prefilled remotely however long the
prefill backlog, so the split itself is measured) takes a closed-loop load (`dyad bench
--concurrency C`), and /metrics is read before and after. Worker 0 is the prefill worker,
worker 1 the decode worker (`dyad_worker_step_seconds_total{worker}`). Per cell it prints:
each worker's busy share of the wall time, its engine seconds per request, the rates it ran
at while busy (prompt tokens per prefill-busy second, output tokens per decode-busy second),
TTFT and TPOT, and the ratio prefill seconds / decode seconds per request = the number of
prefill workers one decode worker needs at this load for both to be busy all the time.
A benchmark: it asserts nothing. Standard library only.

  CELLS="512x128 2048x128" CONCURRENCY=8 REQUESTS=24 bench/disagg_balance.py"""
import json
import os
import sys
import time

import benchlib
from benchlib import ROOT, dyad_http

DYAD = benchlib.dyad_binary()
MODEL = os.path.join(ROOT, "models", "generated", "110m-q8_0-ctx4k.gguf")
CELLS = [tuple(int(x) for x in c.split("x")) for c in
         os.environ.get("CELLS", "512x16 512x128 2048x128").split()]
CONC = int(os.environ.get("CONCURRENCY", "8"))
REQUESTS = int(os.environ.get("REQUESTS", "24"))


def start():
    return dyad_http.Server(DYAD, "--model", MODEL, "--kv-mem", "1536", "--prefill-workers", "1",
                            "--decode-workers", "1", "--threads-per-worker", "1",
                            "--prefill-busy-tokens", str(1 << 30))


def measure(server, isl, osl):
    before, t0 = server.metrics(), time.monotonic()
    r = benchlib.bench(DYAD, server, "--isl", str(isl), "--osl", str(osl), "--concurrency", str(CONC),
                       "--requests", str(REQUESTS), "--cores", "2", "--seed", f"{isl}{osl}")[-1]
    wall, after = time.monotonic() - t0, server.metrics()
    d = lambda k: after.get(k, 0.0) - before.get(k, 0.0)  # noqa: E731
    pre, dec = d('dyad_worker_step_seconds_total{worker="0"}'), d('dyad_worker_step_seconds_total{worker="1"}')
    n = r["completed"]
    return {"isl": isl, "osl": osl, "concurrency": CONC, "completed": n, "wall_s": wall,
            "remote_prefills": d('dyad_prefill_total{where="remote"}'),
            "prefill_busy": pre / wall, "decode_busy": dec / wall,
            "prefill_s_per_req": pre / n, "decode_s_per_req": dec / n,
            "prompt_tok_s_busy": d("dyad_prompt_tokens_total") / pre if pre else 0.0,
            "out_tok_s_busy": d("dyad_generation_tokens_total") / dec if dec else 0.0,
            "ttft_p50_ms": r["ttft_ms"]["p50"], "tpot_mean_ms": r["tpot_ms"]["mean"],
            "prefill_per_decode": pre / dec if dec else 0.0}


def main():
    print(benchlib.env_header(f"disagg 1+1, closed loop concurrency {CONC}, {REQUESTS} requests a cell"))
    print("| ISL | OSL | busy: prefill / decode worker | engine s per request: prefill / decode | "
          "prompt tok/s per busy s | output tok/s per busy s | TTFT p50 ms | TPOT ms | "
          "prefill workers per decode worker |")
    print("|---|---|---|---|---|---|---|---|---|")
    server = start()
    try:
        for isl, osl in CELLS:
            m = measure(server, isl, osl)
            print(json.dumps(m), file=sys.stderr, flush=True)
            print(f"| {isl} | {osl} | {m['prefill_busy']:.0%} / {m['decode_busy']:.0%} | "
                  f"{m['prefill_s_per_req']:.3f} / {m['decode_s_per_req']:.3f} | "
                  f"{m['prompt_tok_s_busy']:.0f} | {m['out_tok_s_busy']:.0f} | "
                  f"{m['ttft_p50_ms']:.0f} | {m['tpot_mean_ms']:.1f} | "
                  f"{m['prefill_per_decode']:.1f} |", flush=True)
    finally:
        server.stop()


main()
