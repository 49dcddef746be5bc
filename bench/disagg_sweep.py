#!/usr/bin/env python3
"""bench/disagg_sweep.py [DYAD] — aggregated vs disaggregated serving on equal cores, each
ISL x OSL cell swept over the request rate (open loop, Poisson) up to saturation: the
measurement of docs/disaggregation-results.md ("Rate sweeps").

Configurations (2 cores in all): agg 1x2 (one worker, 2 threads), agg 2x1 (two workers, 1
thread each), disagg 1+1 (one prefill + one decode worker, 1 thread each, the default
conditional disaggregation). Model: generated 110m q8_0 with a 4096-token context. For each
cell and configuration, `dyad bench --sweep rate=...` at RATES x the cell's capacity, each
point bounded by --duration and --requests; goodput per request under the SLO (TTFT and
TPOT, stated on the first line). The capacity is measured first, in the same sitting: the
request rate one agg 1x2 server sustains in a short closed-loop run of the cell
(CAP_CONCURRENCY clients, CAP_REQUESTS requests); CAPACITY="512x16=2.0 64x16=13" passes
measured values in instead (cells not named are measured).

Writes docs/bench/disagg_sweep.csv (one row per point; rows of cells and configurations not
run this time are kept from the file already there, so cells can be run in several sittings;
each row's `sitting` column names the run that made it, its start time and source tree, so a
table that mixes sittings can say so),
docs/bench/disagg_sweep.svg (small
multiples: one panel per cell, output tok/s per core against tok/s per user, one line per
configuration, the Pareto frontier of each), and prints the win / tie / lose table: per cell,
the best goodput and the best frontier throughput of each configuration, and disagg's ratio
to the best aggregated one. A benchmark: it asserts nothing. Standard library only.

  CELLS="512x128 2048x512" RATES="0.25,0.5,1,2" DURATION=30 bench/disagg_sweep.py"""
import json
import os
import subprocess
import sys

import benchlib
from benchlib import ROOT, dyad_http

DYAD = benchlib.dyad_binary()
MODEL = os.environ.get("MODEL", os.path.join(ROOT, "models", "generated", "110m-q8_0-ctx4k.gguf"))
OUT = os.environ.get("OUT", os.path.join(ROOT, "docs", "bench"))
ALL_CELLS = "64x16 64x128 64x512 512x16 512x128 512x512 2048x16 2048x128 2048x512"
CELLS = [tuple(int(x) for x in c.split("x")) for c in os.environ.get("CELLS", ALL_CELLS).split()]
# Capacities passed in (requests/s of agg 1x2 per cell); the other cells' are measured.
GIVEN = {tuple(int(x) for x in c.split("=")[0].split("x")): float(c.split("=")[1])
         for c in os.environ.get("CAPACITY", "").split()}
CAP_CONC = int(os.environ.get("CAP_CONCURRENCY", "8"))
CAP_REQ = int(os.environ.get("CAP_REQUESTS", "16"))
RATES = [float(x) for x in os.environ.get("RATES", "0.25,0.5,1,2").split(",")]
DURATION = float(os.environ.get("DURATION", "30"))
MAX_REQ = int(os.environ.get("REQUESTS", "32"))
SLO_TTFT, SLO_TPOT = float(os.environ.get("SLO_TTFT_MS", "5000")), float(os.environ.get("SLO_TPOT_MS", "50"))
BASELINE = "agg 1x2"
CONFIGS = {
    "agg 1x2": ["--workers", "1", "--threads-per-worker", "2"],
    "agg 2x1": ["--workers", "2", "--threads-per-worker", "1"],
    "disagg 1+1": ["--prefill-workers", "1", "--decode-workers", "1", "--threads-per-worker", "1"],
}
# ONLY="disagg 1+1" re-runs one configuration (after a change to it); the others' rows stay.
RUN = [c for c in CONFIGS if c in os.environ.get("ONLY", ",".join(CONFIGS)).split(",")]


def start(name):
    return dyad_http.Server(DYAD, "--model", MODEL, "--kv-mem", "1536", *CONFIGS[name])


def capacities():
    """Requests/s the baseline sustains per cell: given, or a closed-loop run measured now."""
    caps = {c: GIVEN[c] for c in CELLS if c in GIVEN}
    todo = [c for c in CELLS if c not in caps]
    if todo:
        server = start(BASELINE)
        try:
            for isl, osl in todo:
                r = benchlib.bench(DYAD, server, "--isl", str(isl), "--osl", str(osl),
                                   "--concurrency", str(CAP_CONC), "--requests", str(CAP_REQ),
                                   "--cores", "2", "--seed", f"9{isl}{osl}")[-1]
                caps[(isl, osl)] = r["request_throughput"]
        finally:
            server.stop()
    for (isl, osl), cap in sorted(caps.items()):
        how = "given" if (isl, osl) in GIVEN else f"measured, {CAP_CONC} clients, {CAP_REQ} requests"
        print(f"# capacity {isl}x{osl}: {cap:.4g} req/s ({BASELINE}, {how})", flush=True)
    return caps


def sweep(server, isl, osl, cap):
    rates = ",".join(f"{cap * r:.4g}" for r in RATES)
    return benchlib.bench(DYAD, server, "--isl", str(isl), "--osl", str(osl),
                          "--sweep", f"rate={rates}", "--duration", str(DURATION),
                          "--requests", str(MAX_REQ), "--cores", "2", "--seed", f"{isl}{osl}",
                          "--slo", f"ttft_ms={SLO_TTFT:g},tpot_ms={SLO_TPOT:g}")


def frontier(points):
    """Points (per user, per core) not dominated by another, sorted by per-user speed."""
    pts = sorted(points, key=lambda p: (-p[0], -p[1]))
    front, best = [], -1.0
    for u, c in pts:
        if c > best:
            front.append((u, c))
            best = c
    return sorted(front)


def svg(rows, path):
    cells = sorted({(r["isl"], r["osl"]) for r in rows})
    cols, pw, ph, m = 3, 260, 190, 42
    W, H = cols * pw + 20, ((len(cells) + cols - 1) // cols) * ph + 40
    colors = {"agg 1x2": "#1f77b4", "agg 2x1": "#ff7f0e", "disagg 1+1": "#2ca02c"}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="10">',
           f'<text x="10" y="14" font-size="12">output tok/s per core (y) against tok/s per user (x); '
           f'lines: Pareto frontiers</text>']
    for k, name in enumerate(CONFIGS):
        out.append(f'<text x="{W - 260 + 85 * k}" y="14" fill="{colors[name]}">{name}</text>')
    for i, (isl, osl) in enumerate(cells):
        x0, y0 = 10 + (i % cols) * pw, 24 + (i // cols) * ph
        rs = [r for r in rows if (r["isl"], r["osl"]) == (isl, osl) and r["tok_s_per_user"] > 0]
        xmax = max([r["tok_s_per_user"] for r in rs] + [1]) * 1.1
        ymax = max([r["out_tok_s_per_core"] for r in rs] + [1]) * 1.1
        px = lambda v: x0 + m + (pw - m - 10) * v / xmax  # noqa: E731
        py = lambda v: y0 + ph - 28 - (ph - 50) * v / ymax  # noqa: E731
        out.append(f'<text x="{x0 + m}" y="{y0 + 12}">ISL {isl}, OSL {osl}</text>')
        out.append(f'<line x1="{px(0)}" y1="{py(0)}" x2="{px(xmax)}" y2="{py(0)}" stroke="black"/>')
        out.append(f'<line x1="{px(0)}" y1="{py(0)}" x2="{px(0)}" y2="{py(ymax)}" stroke="black"/>')
        out.append(f'<text x="{px(xmax)}" y="{py(0) + 12}" text-anchor="end">{xmax:.0f}</text>')
        out.append(f'<text x="{px(0) - 3}" y="{py(ymax) + 8}" text-anchor="end">{ymax:.0f}</text>')
        for name in CONFIGS:
            pts = [(r["tok_s_per_user"], r["out_tok_s_per_core"]) for r in rs if r["config"] == name]
            for u, c in pts:
                out.append(f'<circle cx="{px(u):.1f}" cy="{py(c):.1f}" r="2.5" fill="{colors[name]}"/>')
            f = frontier(pts)
            if len(f) > 1:
                d = " ".join(f"{px(u):.1f},{py(c):.1f}" for u, c in f)
                out.append(f'<polyline points="{d}" fill="none" stroke="{colors[name]}"/>')
    out.append("</svg>")
    open(path, "w").write("\n".join(out))


def number(text):
    """A CSV cell as a number; empty (a column older rows lack) stays empty."""
    if text == "":
        return text
    try:
        return int(text)
    except ValueError:
        return float(text)


def kept_rows(path):
    """The rows of an earlier run for the cells this run does not measure."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        lines = f.read().splitlines()
    keys, kept = lines[0].split(","), []
    for line in lines[1:]:
        r = dict(zip(keys, line.split(",")))
        for k in r:
            if k not in ("config", "sitting"):
                r[k] = number(r[k])
        if (r["isl"], r["osl"]) not in CELLS or r["config"] not in RUN:
            kept.append(r)
    return kept


def main():
    if not os.path.exists(MODEL):
        subprocess.run([DYAD, "gen-model", "--shape", "110m", "--type", "q8_0", "--ctx", "4096",
                        "-o", MODEL], check=True)
    header = benchlib.env_header(f"SLO TTFT <= {SLO_TTFT:g} ms, TPOT <= {SLO_TPOT:g} ms; rates {RATES} "
                              f"x capacity; {DURATION:g} s or {MAX_REQ} requests a point")
    print(header, flush=True)
    sitting = benchlib.sitting(header)
    caps = capacities()
    rows = []
    for name in RUN:
        server = start(name)
        try:
            for isl, osl in CELLS:
                for p in sweep(server, isl, osl, caps[(isl, osl)]):
                    g = p.get("goodput") or {}
                    row = {"config": name, "isl": isl, "osl": osl, "rate": p["load"]["rate"],
                           "capacity_req_s": caps[(isl, osl)], "sitting": sitting,
                           "completed": p["completed"], "failed": p["failed"],
                           "ttft_p50_ms": p["ttft_ms"]["p50"], "ttft_p99_ms": p["ttft_ms"]["p99"],
                           "itl_p50_ms": p["itl_ms"]["p50"], "itl_p99_ms": p["itl_ms"]["p99"],
                           "tpot_mean_ms": p["tpot_ms"]["mean"],
                           "out_tok_s_per_core": p["output_throughput_per_core"],
                           "tok_s_per_user": p["tokens_per_s_per_user"],
                           "goodput_req_s": g.get("request_throughput", 0.0),
                           "slo_met": g.get("met", 0)}
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
        finally:
            server.stop()
    os.makedirs(OUT, exist_ok=True)
    rows = kept_rows(os.path.join(OUT, "disagg_sweep.csv")) + rows
    rows.sort(key=lambda r: list(CONFIGS).index(r["config"]))
    keys = list(dict.fromkeys(k for r in rows for k in r))  # rows kept from older runs may lack a column
    with open(os.path.join(OUT, "disagg_sweep.csv"), "w") as f:
        f.write(",".join(keys) + "\n")
        for r in rows:
            f.write(",".join(str(r.get(k, "")) for k in keys) + "\n")
    svg(rows, os.path.join(OUT, "disagg_sweep.svg"))
    print("| ISL | OSL | best goodput req/s: agg 1x2 / agg 2x1 / disagg 1+1 | disagg ÷ best agg | "
          "max tok/s/core: agg 1x2 / agg 2x1 / disagg 1+1 | disagg ÷ best agg | verdict |")
    print("|---|---|---|---|---|---|---|")
    for isl, osl in sorted({(r["isl"], r["osl"]) for r in rows}):
        def best(name, key):
            return max([r[key] for r in rows if (r["isl"], r["osl"], r["config"]) == (isl, osl, name)] + [0.0])
        gp = [best(n, "goodput_req_s") for n in CONFIGS]
        tp = [best(n, "out_tok_s_per_core") for n in CONFIGS]
        rg = gp[2] / max(gp[0], gp[1]) if max(gp[0], gp[1]) > 0 else float("inf") if gp[2] > 0 else 1.0
        rt = tp[2] / max(tp[0], tp[1]) if max(tp[0], tp[1]) > 0 else 1.0
        verdict = "wins" if rg > 1.1 else "loses" if rg < 0.9 else "ties"
        print(f"| {isl} | {osl} | {gp[0]:.3f} / {gp[1]:.3f} / {gp[2]:.3f} | {rg:.2f} | "
              f"{tp[0]:.1f} / {tp[1]:.1f} / {tp[2]:.1f} | {rt:.2f} | {verdict} (goodput) |")
    sittings = {}
    for r in rows:
        sittings.setdefault(r.get("sitting") or "unknown", set()).add(f"{r['config']} {r['isl']}x{r['osl']}")
    if len(sittings) > 1:
        print("\nThe table merges sittings:")
        for name, cells in sorted(sittings.items()):
            print(f"- {name}: {', '.join(sorted(cells))}")


main()
