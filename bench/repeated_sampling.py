#!/usr/bin/env python3
"""bench/repeated_sampling.py [DYAD] — n samples of one prompt: inside the server (one request
with n, one prefill, forked KV blocks) against the same n sent as separate client requests,
with the prefix cache off and on. Model: generated 110m q8_0; ISL 512, OSL 128 (ignore EOS),
temperature 0.8; one aggregated worker with 2 threads per server.

For every n in {1, 2, 4, 8, 16} and each way, in alternation (A B C, A B C), it reports
prompt tokens computed (the workers' counter), TTFT (median and last sample), end-to-end time
(until the last sample ends), output tokens/s, and KV blocks held at peak (the worker's pool
use, polled every 20 ms). A benchmark: it prints figures (and --json lines), asserts nothing.
Standard library only. Figures are in docs/repeated-sampling.md."""
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time

import benchlib
from benchlib import ROOT, dyad_http

DYAD = benchlib.dyad_binary()
MODEL = os.path.join(ROOT, "models", "generated", "110m-q8_0-ctx4k.gguf")
ISL, OSL, KV_BLOCKS = 512, 128, 1024
NS = [int(x) for x in os.environ.get("NS", "1,2,4,8,16").split(",")]
REPS = int(os.environ.get("REPS", "2"))


def Server(*args):
    return dyad_http.Server(DYAD, "--model", MODEL, "--workers", "1", "--threads-per-worker", "2",
                            "--kv-blocks", str(KV_BLOCKS), *args)


def stream(srv, body, t0, ttft, ends):
    """One streaming completion; records each choice's first-token time and the end time."""
    c = http.client.HTTPConnection(srv.host, srv.port, timeout=600)
    c.request("POST", "/v1/completions", body=json.dumps(body),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, r.read()
    seen, buf, tokens = set(), b"", 0
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            frame, buf = buf.split(b"\n\n", 1)
            data = frame[6:]
            if data == b"[DONE]":
                continue
            ev = json.loads(data)
            for ch in ev["choices"]:
                if ch.get("text") and (ch["index"]) not in seen:
                    seen.add(ch["index"])
                    ttft.append(time.perf_counter() - t0)
            if ev.get("usage"):
                tokens = ev["usage"]["completion_tokens"]
    ends.append(time.perf_counter() - t0)
    c.close()
    return tokens


def run(srv, way, n, seed):
    rng = random.Random(seed)
    prompt = [1] + [rng.randrange(3, 30000) for _ in range(ISL - 1)]  # fresh: nothing cached
    base = {"model": os.path.splitext(os.path.basename(MODEL))[0], "prompt": prompt,
            "max_tokens": OSL, "ignore_eos": True, "temperature": 0.8, "stream": True,
            "stream_options": {"include_usage": True}}
    before = srv.settled("dyad_prompt_tokens_total")
    peak, stop = [0.0], threading.Event()

    def poll():
        while not stop.is_set():
            try:
                peak[0] = max(peak[0], srv.metrics()['dyad_kv_cache_usage_ratio{worker="0"}'])
            except OSError:
                pass
            time.sleep(0.02)

    poller = threading.Thread(target=poll)
    poller.start()
    ttft, ends, toks = [], [], []
    t0 = time.perf_counter()
    if way == "server":
        toks.append(stream(srv, {**base, "n": n, "seed": seed}, t0, ttft, ends))
    else:
        threads = [threading.Thread(target=lambda i=i: toks.append(
            stream(srv, {**base, "seed": seed, "n": 1, "prompt": prompt}, t0, ttft, ends)))
            for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    stop.set()
    poller.join()
    e2e = max(ends)
    computed = srv.settled("dyad_prompt_tokens_total") - before
    return {"way": way, "n": n, "prompt_tokens_computed": int(computed),
            "ttft_p50_ms": 1000 * statistics.median(ttft), "ttft_last_ms": 1000 * max(ttft),
            "e2e_ms": 1000 * e2e, "out_tok_s": sum(toks) / e2e,
            "kv_blocks_peak": round(peak[0] * KV_BLOCKS)}


def main():
    if not os.path.exists(MODEL):
        subprocess.run([DYAD, "gen-model", "--shape", "110m", "--type", "q8_0", "--ctx", "4096",
                        "-o", MODEL], check=True)
    cached, nocache = Server(), Server("--no-prefix-cache")
    print(f"# {cached.banner}")
    print(benchlib.env_header())
    print(f"# ISL {ISL}, OSL {OSL}, one worker x 2 threads, {KV_BLOCKS} KV blocks of 16 positions")
    ways = [("server", cached), ("client, cache off", nocache), ("client, cache on", cached)]
    results = {}
    try:
        run(cached, "server", 1, 999)  # warm-up: page in the weights
        for n in NS:
            for rep in range(REPS):
                for k, (way, srv) in enumerate(ways):  # distinct seeds: distinct prompts
                    r = run(srv, way, n, seed=100000 * n + 100 * rep + k)
                    results.setdefault((n, way), []).append(r)
                    print(json.dumps(r), file=sys.stderr)
    finally:
        cached.stop()
        nocache.stop()
    print("| n | way | prompt tokens computed | TTFT p50 ms | TTFT last ms | E2E ms | out tok/s | KV blocks peak |")
    print("|---|---|---|---|---|---|---|---|")
    for n in NS:
        for way, _ in ways:
            rs = results[(n, way)]
            med = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731
            print(f"| {n} | {way} | {med('prompt_tokens_computed'):.0f} | {med('ttft_p50_ms'):.0f} | "
                  f"{med('ttft_last_ms'):.0f} | {med('e2e_ms'):.0f} | {med('out_tok_s'):.1f} | "
                  f"{med('kv_blocks_peak'):.0f} |")


main()
