#!/usr/bin/env python3
"""bench/kv_tiers.py [DYAD] — what a host-tier hit saves (docs/kv-tiers.md): a 2,048-token
prefix brought back from the host tier against computing it again, on one worker.

Each rep sends a fresh prompt of PREFIX random tokens plus a short tail (computed in full:
the cold time), then two other prompts of the same length that push it out of a KV cache too
small for three, then the same prefix with another tail: its blocks come back from the host
tier. Reported per rep and as medians: the cold TTFT, the warm TTFT, the measured load time
(`dyad.kv_tier.load_ms`), the worker's two estimates, and the ratios. The same server serves
every rep, so the rates the worker chooses on are measured by then.

MODEL defaults to a generated 110m q8_0 with a 4,096 context (models/generated/
110m-q8_0-ctx4k.gguf, made with `dyad gen-model` when missing). Environment: PREFIX (2048),
REPS (5), THREADS (2). A benchmark: it asserts nothing but that each warm prompt loaded."""
import json
import os
import random
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

ROOT = benchlib.ROOT
PREFIX = int(os.environ.get("PREFIX", "2048"))
REPS = int(os.environ.get("REPS", "5"))
THREADS = os.environ.get("THREADS", "2")


def model_path(dyad):
    path = os.environ.get("MODEL", os.path.join(ROOT, "models", "generated", "110m-q8_0-ctx4k.gguf"))
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        subprocess.run([dyad, "gen-model", "--shape", "110m", "--type", "q8_0", "--ctx", "4096",
                        "-o", path], check=True)
    return path


def timed(server, prompt):
    """TTFT (streamed) and the final chunk's dyad object."""
    c = server.conn(timeout=600)
    body = {"model": benchlib.dyad_http.MODEL, "prompt": prompt, "max_tokens": 1,
            "temperature": 0, "stream": True}
    t0 = time.monotonic()
    c.request("POST", "/v1/completions", body=json.dumps(body),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    ttft, dyad = None, None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if ttft is None and ev.get("choices"):
            ttft = time.monotonic() - t0
        dyad = ev.get("dyad", dyad)
    c.close()
    return ttft, (dyad or {}).get("choices", [{}])[0].get("kv_tier")


def main():
    dyad = benchlib.dyad_binary()
    model = model_path(dyad)
    print(benchlib.env_header(f"bench/kv_tiers.py: a {PREFIX}-token prefix from the host tier vs "
                              f"recomputed; {model}, 1 worker x {THREADS} threads"))
    # Room for two such prompts, not three: the third evicts the first.
    blocks = (PREFIX + 64) // 16 * 2 + 8
    server = benchlib.dyad_http.Server(dyad, "--model", model, "--model-name",
                                       benchlib.dyad_http.MODEL, "--workers", "1",
                                       "--threads-per-worker", THREADS, "--kv-blocks",
                                       str(blocks), "--kv-host-mem", "2048",
                                       "--max-batch-tokens", "512")
    rng = random.Random(7)
    vocab = 32000
    rows = []
    try:
        timed(server, [rng.randrange(1, vocab) for _ in range(64)])  # warm the engine
        for rep in range(REPS):
            prefix = [rng.randrange(1, vocab) for _ in range(PREFIX)]
            cold, t_cold = timed(server, prefix + [rng.randrange(1, vocab) for _ in range(8)])
            for _ in range(2):
                timed(server, [rng.randrange(1, vocab) for _ in range(PREFIX + 8)])
            warm, t = timed(server, prefix + [rng.randrange(1, vocab) for _ in range(8)])
            assert t and t["outcome"] == "loaded", t
            rows.append((cold, warm, t["load_ms"] / 1e3, t["load_ms_estimate"],
                         t["recompute_ms_estimate"], t["loaded_tokens"]))
            print(f"rep {rep}: cold TTFT {cold * 1e3:8.1f} ms  warm TTFT {warm * 1e3:7.1f} ms  "
                  f"load {t['load_ms']:6.2f} ms of {t['loaded_tokens']} tokens  estimates: load "
                  f"{t['load_ms_estimate']} ms, recompute {t['recompute_ms_estimate']} ms")
    finally:
        server.stop()
    med = lambda i: statistics.median(r[i] for r in rows)  # noqa: E731
    print(f"medians over {REPS} reps: cold TTFT {med(0) * 1e3:.1f} ms, warm TTFT "
          f"{med(1) * 1e3:.1f} ms, load {med(2) * 1e3:.2f} ms")
    print(f"the prefix from the host tier: {med(0) / med(2):.0f}x faster than the cold prompt's "
          f"whole TTFT (load alone), {med(0) / med(1):.1f}x on TTFT (load + the tail + the first "
          f"token)")


if __name__ == "__main__":
    main()
