#!/usr/bin/env python3
"""bench/routing.py [DYAD] — the Mooncake conversation trace (Kimi production traffic) replayed
against `dyad serve` under each routing policy, aggregated (4 workers x 1 thread) and
disaggregated (2 prefill + 2 decode workers x 1 thread), on 2 cores.

Scaling to fit this machine (stated in docs/routing.md): the first ROWS rows of the trace
(default 1000), --length-scale 1/32 (a trace block of 512 tokens becomes 16 tokens, one KV
block; prompts average ~430 tokens, outputs ~11), --time-scale 0.5 (twice as fast as
recorded). Model: generated 15m q8_0 with a 4096-token context; --kv-mem 512 MiB per worker.

Per run it reports the prefix hit rate (prompt tokens the chosen workers found cached / prompt
tokens sent) against the trace's upper bound (the share of block references seen earlier
anywhere in the replayed rows), TTFT p50/p90, output throughput, and the spread of work across
the workers (max/min of their engine busy time, and of routing decisions). Prints a Markdown
table, --json lines on stderr, and writes docs/bench/routing.csv (and routing.svg). A
benchmark: it asserts nothing. Standard library only."""
import json
import os
import subprocess
import sys
import tempfile
import time

import benchlib
from benchlib import ROOT, dyad_http

DYAD = benchlib.dyad_binary()
TRACE = os.environ.get("TRACE", os.path.join(ROOT, "..", "shared", "traces",
                                             "mooncake_conversation_trace.jsonl"))
MODEL = os.path.join(ROOT, "models", "generated", "15m-q8_0-ctx4k.gguf")
ROWS = int(os.environ.get("ROWS", "1000"))
TIME_SCALE, LENGTH_SCALE = float(os.environ.get("TIME_SCALE", "0.5")), 1 / 32
POLICIES = os.environ.get("POLICIES", "round-robin,least-loaded,kv-aware").split(",")
OUT = os.environ.get("OUT", os.path.join(ROOT, "docs", "bench"))
DEPLOYMENTS = {
    "agg 4x1": ["--workers", "4", "--threads-per-worker", "1"],
    "disagg 2+2": ["--prefill-workers", "2", "--decode-workers", "2", "--threads-per-worker", "1"],
}


def upper_bound(path):
    seen, refs, hits = set(), 0, 0
    for line in open(path):
        for h in json.loads(line)["hash_ids"]:
            refs += 1
            hits += h in seen
            seen.add(h)
    return hits / refs


def Server(args):
    return dyad_http.Server(DYAD, "--model", MODEL, "--kv-mem", "512", *args)


def per_worker(m, name):
    return [v for k, v in sorted(m.items()) if k.startswith(name + "{")]


def spread(xs):
    xs = [x for x in xs]
    return max(xs) / min(xs) if xs and min(xs) > 0 else float("inf")


def run(deploy, policy, trace):
    s = Server(DEPLOYMENTS[deploy] + ["--router", policy])
    try:
        time.sleep(1)
        before = s.metrics()
        b = benchlib.bench(DYAD, s, "--trace", trace, "--time-scale", str(TIME_SCALE),
                           "--length-scale", str(LENGTH_SCALE), "--concurrency", "256")[-1]
        time.sleep(0.5)  # the workers' last reports
        after = s.metrics()
    finally:
        s.stop()
    d = lambda k: after.get(k, 0) - before.get(k, 0)  # noqa: E731
    busy = [a - b for a, b in zip(per_worker(after, "dyad_worker_step_seconds_total"),
                                  per_worker(before, "dyad_worker_step_seconds_total"))]
    routed = [a - b for a, b in zip(per_worker(after, "dyad_router_worker_decisions_total"),
                                    per_worker(before, "dyad_router_worker_decisions_total"))]
    if deploy.startswith("disagg"):  # the pools do different work: spread within each pool
        busy_spread = max(spread(busy[:2]), spread(busy[2:]))
        routed = routed[2:]
    else:
        busy_spread = spread(busy)
    return {"deployment": deploy, "policy": policy, "completed": b["completed"], "failed": b["failed"],
            "input_tokens": b["input_tokens"], "cached_tokens": int(d("dyad_router_cached_tokens_total")),
            "hit_rate": d("dyad_router_cached_tokens_total") / max(1, b["input_tokens"]),
            "ttft_p50_ms": b["ttft_ms"]["p50"], "ttft_p90_ms": b["ttft_ms"]["p90"],
            "output_tok_s": b["output_throughput"], "duration_s": b["duration_s"],
            "busy_s": [round(x, 1) for x in busy], "busy_spread": busy_spread,
            "routed": [int(x) for x in routed], "routed_spread": spread(routed)}


def svg(rows, path):
    """TTFT p50 against hit rate, one marker per run (small and dependency-free)."""
    W, H, L, B = 560, 320, 60, 40
    xs = [r["hit_rate"] for r in rows]
    ys = [r["ttft_p50_ms"] for r in rows]
    xmax, ymax = max(xs + [0.01]) * 1.15, max(ys + [1]) * 1.15
    px = lambda x: L + (W - L - 20) * x / xmax  # noqa: E731
    py = lambda y: H - B - (H - B - 20) * y / ymax  # noqa: E731
    colors = {"round-robin": "#d62728", "least-loaded": "#ff7f0e", "kv-aware": "#2ca02c", "random": "#7f7f7f"}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
             f'<line x1="{L}" y1="{H-B}" x2="{W-10}" y2="{H-B}" stroke="black"/>',
             f'<line x1="{L}" y1="{H-B}" x2="{L}" y2="10" stroke="black"/>',
             f'<text x="{(W+L)/2}" y="{H-8}" text-anchor="middle">prefix hit rate (cached / prompt tokens)</text>',
             f'<text x="14" y="{(H-B)/2}" transform="rotate(-90 14 {(H-B)/2})" text-anchor="middle">TTFT p50 (ms)</text>']
    for i in range(5):
        x, y = xmax * i / 4, ymax * i / 4
        parts.append(f'<text x="{px(x)}" y="{H-B+14}" text-anchor="middle">{x:.2f}</text>')
        parts.append(f'<text x="{L-4}" y="{py(y)+4}" text-anchor="end">{y:.0f}</text>')
    for r in rows:
        x, y, c = px(r["hit_rate"]), py(r["ttft_p50_ms"]), colors.get(r["policy"], "black")
        shape = (f'<circle cx="{x}" cy="{y}" r="5" fill="{c}"/>' if r["deployment"].startswith("agg")
                 else f'<rect x="{x-5}" y="{y-5}" width="10" height="10" fill="{c}"/>')
        parts.append(shape)
        parts.append(f'<text x="{x+8}" y="{y+4}">{r["policy"]} ({r["deployment"]})</text>')
    parts.append("</svg>")
    open(path, "w").write("\n".join(parts))


def report(rows, ub):
    print("| deployment | router | hit rate (bound %.3f) | TTFT p50 ms | TTFT p90 ms | out tok/s | "
          "engine busy s (sum) | busy max/min | decisions max/min | failed |" % ub)
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['deployment']} | {r['policy']} | {r['hit_rate']:.3f} | {r['ttft_p50_ms']:.0f} | "
              f"{r['ttft_p90_ms']:.0f} | {r['output_tok_s']:.1f} | {sum(r['busy_s']):.1f} | "
              f"{r['busy_spread']:.2f} | {r['routed_spread']:.2f} | {r['failed']} |")
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "routing.csv"), "w") as f:
        keys = ["deployment", "policy", "hit_rate", "upper_bound", "ttft_p50_ms", "ttft_p90_ms",
                "output_tok_s", "busy_spread", "routed_spread", "completed", "failed"]
        f.write(",".join(keys) + "\n")
        for r in rows:
            f.write(",".join(str(r[k]) for k in keys) + "\n")
    svg(rows, os.path.join(OUT, "routing.svg"))


def main():
    if os.environ.get("FROM_JSON"):  # re-render saved runs (the JSON lines printed on stderr)
        rows = [json.loads(line) for f in os.environ["FROM_JSON"].split(",") for line in open(f)
                if line.startswith("{")]
        report(rows, rows[0]["upper_bound"])
        return
    if not os.path.exists(MODEL):
        subprocess.run([DYAD, "gen-model", "--shape", "15m", "--type", "q8_0", "--ctx", "4096",
                        "-o", MODEL], check=True)
    trace = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False)
    with open(TRACE) as f:
        for i, line in enumerate(f):
            if i >= ROWS:
                break
            trace.write(line)
    trace.close()
    ub = upper_bound(trace.name)
    print(benchlib.env_header())
    print(f"# trace: first {ROWS} rows of {os.path.basename(TRACE)}, time scale {TIME_SCALE}, "
          f"length scale 1/32; upper bound of the prefix hit rate: {ub:.3f}")
    rows = []
    try:
        for deploy in [d for d in DEPLOYMENTS if d in os.environ.get("DEPLOY", ",".join(DEPLOYMENTS))]:
            for policy in POLICIES:
                r = run(deploy, policy, trace.name)
                r["upper_bound"] = ub
                rows.append(r)
                print(json.dumps(r), file=sys.stderr, flush=True)
    finally:
        os.unlink(trace.name)
    report(rows, ub)


main()
