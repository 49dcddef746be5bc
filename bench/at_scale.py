#!/usr/bin/env python3
"""bench/at_scale.py [DYAD] — issue 12's item 4: where disaggregation pays at GPU scale, on the
simulator (`dyad sim run`) and the H100 roofline preset for Llama-3.1-70B FP8 (numbers are the
preset's: datasheet hardware x sourced or assumed efficiency factors, docs/sim-costs.md; not a
measurement of a GPU).

For each cell ISL x OSL, on 16 GPUs: every aggregated deployment (16/TP workers) and every
disaggregated one (P + D = 16/TP workers, P = 1 .. 16/TP - 1, every prompt prefilled remotely),
for TP in TPS, each under bench's closed loop at each concurrency of CONCS (requests: 3 x the
concurrency, at least MIN_REQUESTS). A point is (tokens/s per user = 1000 / mean TPOT, output
tokens/s per GPU), and counts only if its p90 TTFT is at most TTFT_MAX_MS (3 s). A kind's
frontier at x is the best tokens/s per GPU among its points with at least x tokens/s per user;
the table compares the two frontiers at 20, 50, 100 and 200 tokens/s per user (win:
disaggregated ahead by more than 10 %, lose: behind by more than 10 %, else tie), and names
the best P:D and the KV transfer's share of its TTFT.

Then, per cell, `dyad plan` (the balance criterion and the simulator's search) for TTFT <= 2 s
and ITL <= 20 ms (p90) at a rate that needs about half the 16 GPUs: its sizes against the
search's. Writes the markdown tables to stdout and the frontier plot to PLOT (SVG).

  python3 bench/at_scale.py > docs/bench/at_scale.log
  CELLS="2048x256" TPS="2 4" python3 bench/at_scale.py      (one cell, fewer degrees)"""
import json
import os
import subprocess
import sys

import benchlib
from benchlib import ROOT

DYAD = benchlib.dyad_binary()
COST = os.path.join(ROOT, "sim", "costs", os.environ.get("COST", "h100-llama3.1-70b-fp8.json"))
GPUS = int(os.environ.get("GPUS", "16"))
TPS = [int(t) for t in os.environ.get("TPS", "2 4 8").split()]
CONCS = [int(c) for c in os.environ.get("CONCS", "1 2 4 8 16 32 64 128 256 512").split()]
MIN_REQUESTS = int(os.environ.get("MIN_REQUESTS", "48"))
MAX_REQUESTS = int(os.environ.get("MAX_REQUESTS", "1536"))
ISLS = [128, 512, 2048, 8192]
OSLS = [64, 256, 1024]
CELLS = [tuple(int(v) for v in c.split("x")) for c in os.environ["CELLS"].split()] \
    if "CELLS" in os.environ else [(i, o) for i in ISLS for o in OSLS]
TARGETS = [20, 50, 100, 200]
BAND = 0.10
# Every worker as vLLM and SGLang run on an H100: up to 256 sequences a batch, 8192-token steps.
WORKER = ["--max-running", "256", "--max-batch-tokens", "8192", "--max-queue", "65536"]
SPLIT = ["--disagg-min-tokens", "0", "--prefill-busy-tokens", str(1 << 30)]
PLAN_SLO = "ttft_ms=2000,itl_ms=20"
# A point counts only if its p90 TTFT is at most this: 1000 / TPOT alone would reward a closed
# loop that queues requests past the workers' batch (their TPOT stays low, their wait does not).
TTFT_MAX_MS = float(os.environ.get("TTFT_MAX_MS", "3000"))
PLOT = os.environ.get("PLOT", os.path.join(ROOT, "docs", "at-scale-frontier.svg"))


def deployments():
    """(label, kind, tp, dyad sim run flags) for every deployment on GPUS GPUs."""
    for tp in TPS:
        n = GPUS // tp
        yield f"TP{tp} {n} agg", "agg", tp, ["--tp", str(tp), "--workers", str(n)]
        for p in range(1, n):
            yield (f"TP{tp} {p}P+{n - p}D", "disagg", tp,
                   ["--tp", str(tp), "--prefill-workers", str(p), "--decode-workers", str(n - p)]
                   + SPLIT)


def simulate(flags, isl, osl, conc):
    requests = min(MAX_REQUESTS, max(MIN_REQUESTS, 3 * conc))
    out = subprocess.run([DYAD, "sim", "run", "--cost", COST, *WORKER, *flags, "--isl", str(isl),
                          "--osl", str(osl), "--concurrency", str(conc), "--requests",
                          str(requests), "--seed", "1", "--json"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        return None, out.stderr.strip()
    return json.loads(out.stdout), None


def frontier(points, x):
    """The best point (by tokens/s per GPU) with at least x tokens/s per user, or None."""
    ok = [p for p in points if p["user"] >= x]
    return max(ok, key=lambda p: p["gpu"]) if ok else None


def verdict(a, d):
    if a is None and d is None:
        return "neither", None
    if a is None:
        return "win (agg cannot)", None
    if d is None:
        return "lose (disagg cannot)", None
    r = d["gpu"] / a["gpu"]
    return ("win" if r > 1 + BAND else "lose" if r < 1 - BAND else "tie"), r


def run_cell(isl, osl):
    points = {"agg": [], "disagg": []}
    skipped = []
    for label, kind, tp, flags in deployments():
        for conc in CONCS:
            r, err = simulate(flags, isl, osl, conc)
            if r is None:
                skipped.append(f"{label} c={conc}: {err}")
                break
            if r["completed"] == 0 or r["tpot_ms"]["n"] == 0 or r["ttft_ms"]["p90"] > TTFT_MAX_MS:
                continue
            points[kind].append({"label": label, "conc": conc, "user": r["tokens_per_s_per_user"],
                                 "gpu": r["output_throughput"] / GPUS,
                                 "ttft_p90": r["ttft_ms"]["p90"],
                                 "kv_share": r["kv_transfer"]["ttft_share"]})
    return points, skipped


def plan_cell(isl, osl, points):
    """`dyad plan` at a rate that half the GPUs serve at 50 tokens/s per user (the best of
    either kind's frontier there), or None when neither reaches it."""
    best = [p for p in (frontier(points["agg"], 50), frontier(points["disagg"], 50)) if p]
    if not best:
        return None
    rate = max(p["gpu"] for p in best) * GPUS / 2 / osl
    out = subprocess.run([DYAD, "plan", "--hardware", COST, "--tp", ",".join(map(str, TPS)),
                          "--slo", PLAN_SLO, "--rate", f"{rate:.4g}", "--isl", str(isl), "--osl",
                          str(osl), "--requests", "400", "--seed", "1", "--no-frontier", "--json",
                          *WORKER[:4], "--max-queue", "65536", "--disagg-min-tokens", "0"],
                         capture_output=True, text=True)
    if out.returncode not in (0, 1):
        return {"rate": rate, "error": out.stderr.strip()}
    return {"rate": rate, **json.loads(out.stdout)}


def pools(x):
    if x is None:
        return "-"
    return f"{x['workers']} agg" if x["workers"] else f"{x['prefill']}P+{x['decode']}D"


def crit_pools(c):
    if not c["ok"]:
        return "-"
    return f"{c['decode']} agg" if c["prefill"] == 0 else f"{c['prefill']}P+{c['decode']}D"


def svg_plot(results, path):
    """The two frontiers per cell, one panel each (x: tokens/s per user, log; y: tokens/s per GPU)."""
    import math
    cols, rows = len(OSLS), len(ISLS)
    pw, ph, m = 260, 190, 45
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{cols * pw + m}" '
           f'height="{rows * ph + m}" font-family="sans-serif" font-size="10">',
           f'<text x="{m}" y="14" font-size="12">Llama-3.1-70B FP8, {GPUS} GPUs (roofline preset '
           f'{os.path.basename(COST)}): frontier of the aggregated (blue) and disaggregated '
           f'(orange) deployments</text>']
    for (isl, osl), (points, _) in results.items():
        if isl not in ISLS or osl not in OSLS:
            continue
        x0, y0 = m + OSLS.index(osl) * pw, 25 + ISLS.index(isl) * ph
        w, h = pw - 40, ph - 45
        allp = points["agg"] + points["disagg"]
        if not allp:
            continue
        ymax = max(p["gpu"] for p in allp) * 1.1
        lx0, lx1 = math.log10(5), math.log10(max(1000, max(p["user"] for p in allp) * 1.2))

        def px(u):
            return x0 + (math.log10(max(u, 5)) - lx0) / (lx1 - lx0) * w

        def py(g):
            return y0 + h - g / ymax * h
        out.append(f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#999"/>')
        out.append(f'<text x="{x0 + 4}" y="{y0 + 12}">ISL {isl} / OSL {osl}</text>')
        for t in TARGETS:
            out.append(f'<line x1="{px(t):.1f}" y1="{y0}" x2="{px(t):.1f}" y2="{y0 + h}" '
                       f'stroke="#eee"/><text x="{px(t) - 6:.1f}" y="{y0 + h + 11}">{t}</text>')
        out.append(f'<text x="{x0 - 4}" y="{y0 + 8}" text-anchor="end">{ymax:.0f}</text>')
        for kind, colour in (("agg", "#1f77b4"), ("disagg", "#ff7f0e")):
            xs = sorted({p["user"] for p in points[kind]})
            env = [(x, frontier(points[kind], x)["gpu"]) for x in xs]
            if env:
                d = " ".join(f"{px(x):.1f},{py(g):.1f}" for x, g in env)
                out.append(f'<polyline points="{d}" fill="none" stroke="{colour}" '
                           f'stroke-width="1.5"/>')
    out.append(f'<text x="{m + cols * pw / 2 - 80}" y="{rows * ph + m - 8}">tokens/s per user '
               f'(log) — y: output tokens/s per GPU</text></svg>')
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    print(benchlib.env_header(f"at scale: {os.path.basename(COST)}, {GPUS} GPUs, TP {TPS}, "
                              f"concurrency {CONCS}"))
    print(f"# dyad: {benchlib.binary_id(DYAD)}; every worker: {' '.join(WORKER)}; "
          f"disaggregated: {' '.join(SPLIT)}; requests per point: 3 x concurrency, "
          f"{MIN_REQUESTS} to {MAX_REQUESTS}; seed 1; a point counts if its p90 TTFT <= "
          f"{TTFT_MAX_MS:g} ms\n", flush=True)
    results = {}
    for isl, osl in CELLS:
        results[(isl, osl)] = run_cell(isl, osl)
        print(f"# cell {isl}/{osl} done", file=sys.stderr, flush=True)

    print("## Frontier ratio (disaggregated / aggregated tokens/s per GPU at a per-user speed)\n")
    print("| ISL | OSL | " + " | ".join(f"{t} tok/s/user" for t in TARGETS)
          + " | best P:D at 50 | KV share of TTFT there |")
    print("|---|---|" + "---|" * len(TARGETS) + "---|---|")
    for (isl, osl), (points, _) in results.items():
        cells = []
        for t in TARGETS:
            a, d = frontier(points["agg"], t), frontier(points["disagg"], t)
            v, r = verdict(a, d)
            cells.append(f"{r:.2f} {v}" if r is not None else v)
        d50 = frontier(points["disagg"], 50)
        tail = f"{d50['label']} | {100 * d50['kv_share']:.1f} % |" if d50 else "- | - |"
        print(f"| {isl} | {osl} | " + " | ".join(cells) + " | " + tail)

    print("\n## The frontier points behind each ratio (tokens/s per GPU; deployment, concurrency)\n")
    print("| ISL | OSL | at | aggregated | disaggregated |")
    print("|---|---|---|---|---|")
    for (isl, osl), (points, _) in results.items():
        for t in TARGETS:
            a, d = frontier(points["agg"], t), frontier(points["disagg"], t)
            fa = (f"{a['gpu']:.0f} ({a['label']}, c={a['conc']}, TTFT p90 {a['ttft_p90']:.0f} ms)"
                  if a else "-")
            fd = (f"{d['gpu']:.0f} ({d['label']}, c={d['conc']}, TTFT p90 {d['ttft_p90']:.0f} ms)"
                  if d else "-")
            print(f"| {isl} | {osl} | {t} | {fa} | {fd} |")

    print("\n## Balance criterion against the simulator's search (dyad plan, p90 "
          f"{PLAN_SLO.replace(',', ', ')})\n")
    print("| ISL | OSL | rate req/s | criterion agg | search agg | criterion disagg | "
          "search disagg | plan's choice |")
    print("|---|---|---|---|---|---|---|---|")
    for (isl, osl), (points, _) in results.items():
        p = plan_cell(isl, osl, points)
        if p is None or "error" in p:
            print(f"| {isl} | {osl} | - | {p['error'] if p else 'no frontier at 50 tok/s/user'} "
                  "| | | | |")
            continue
        rows = []
        for t in p["tp"]:
            if "skipped" in t:
                continue
            ca, cd = t["criterion"]["agg"], t["criterion"]["disagg"]
            sa, sd = t["agg"]["best"], t["disagg"]["best"]
            rows.append(f"TP{t['tp']}: {crit_pools(ca)} / {pools(sa)} / {crit_pools(cd)} / "
                        f"{pools(sd)}")
        best = p["best"]
        choice = f"TP{p['best_tp']} {pools(best)} ({best['units']} GPUs)" if best else "none"
        for k, row in enumerate(rows):
            parts = row.split(" / ")
            tp, ca = parts[0].split(": ")
            print(f"| {isl if k == 0 else ''} | {osl if k == 0 else ''} | "
                  f"{p['rate']:.3g} | {tp}: {ca} | {parts[1]} | {parts[2]} | {parts[3]} | "
                  f"{choice if k == 0 else ''} |")

    skipped = [s for _, (_, sk) in results.items() for s in sk]
    if skipped:
        print("\nskipped (the simulator refused the deployment):\n")
        for s in skipped:
            print(f"- {s}")
    svg_plot(results, PLOT)
    print(f"\nplot: {os.path.relpath(PLOT, ROOT)}")


main()
