#!/usr/bin/env python3
"""disagg_table.py CSV... — renders bench/disagg.sh's CSV rows as the markdown table of
docs/disaggregation-results.md: per cell, each configuration's output tok/s per core, TTFT p50, ITL p50,
TPOT mean; the throughput ratio of disaggregated to the best aggregated configuration; and
which configurations meet a TTFT p50 and TPOT mean objective (SLO_TTFT_MS, default 5000, and
SLO_TPOT_MS, default 40)."""
import csv
import os
import sys

SLO_TTFT, SLO_TPOT = float(os.environ.get("SLO_TTFT_MS", "5000")), float(os.environ.get("SLO_TPOT_MS", "40"))

rows = []
for f in sys.argv[1:]:
    rows += list(csv.DictReader(open(f)))
cells = {}
for r in rows:
    cells.setdefault((int(r["isl"]), int(r["osl"]), int(r["concurrency"])), {})[r["config"]] = r


def ok(r):
    return float(r["ttft_p50_ms"]) <= SLO_TTFT and float(r["tpot_mean_ms"]) <= SLO_TPOT


print("| ISL | OSL | conc | agg 1×2 | agg 2×1 | disagg 1+1 | tok/s/core: disagg ÷ best agg | meets SLO |")
print("|---|---|---|---|---|---|---|---|")
for (isl, osl, c), cfg in sorted(cells.items()):
    def fmt(k):
        r = cfg[k]
        return (f"{float(r['out_tok_s_per_core']):.1f} t/s/core, TTFT {float(r['ttft_p50_ms']):.0f}, "
                f"ITL {float(r['itl_p50_ms']):.1f}, TPOT {float(r['tpot_mean_ms']):.1f}")
    best = max(float(cfg[k]["out_tok_s_per_core"]) for k in ("agg1x2", "agg2x1"))
    ratio = float(cfg["disagg1+1"]["out_tok_s_per_core"]) / best
    meets = ", ".join(k for k in ("agg1x2", "agg2x1", "disagg1+1") if ok(cfg[k])) or "none"
    print(f"| {isl} | {osl} | {c} | {fmt('agg1x2')} | {fmt('agg2x1')} | {fmt('disagg1+1')} | "
          f"{ratio:.2f} | {meets} |")
