#!/usr/bin/env python3
"""planner_drift_sim.py [DYAD] — issue 13's drift benchmark at GPU scale, in `dyad sim run`:
the drifting trace of bench/drift_trace.py (Azure conversation arrivals, lengths switching
between the conversation distribution, long prompts / short answers and short prompts / long
answers; at 18 req/s, the only rate the trace's rows allow over 15 minutes, so its lengths are
scaled four times to make a 16-GPU budget matter) on the H100 Llama-3.1-8B FP8 roofline preset with a 16-GPU
budget of TP-1 workers. It compares, on the same trace:
  - the static deployments (1..16 aggregated; P prefill + D decode for P in SPLIT_P, D in
    SPLIT_D, P + D <= 16), run on the first phase alone and on the whole trace: the best for the first
    phase (what an operator tuning on the first traffic would deploy) and the best for the
    whole trace (what nobody could know in advance);
  - the reactive planner and the SLA planner, both starting from the first phase's best.
Goodput per worker-second: requests that met the objectives over the worker-seconds spent
(static: workers × the run's duration; a planner: what its slots spent starting, active or
draining). The simulation reads no clock: the figures do not depend on the machine's load.

  python3 bench/planner_drift_sim.py > docs/bench/planner_drift_sim.log

Environment: RATE, PHASES, LENGTH_SCALE, MAX_INPUT, MAX_OUTPUT (drift_trace.py's flags), SLO,
INTERVAL, PREDICTORS (the SLA planner runs once with each), STARTUP (a worker's start-up seconds), BUDGET. Standard library only."""
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import benchlib

ROOT = benchlib.ROOT
DYAD = benchlib.dyad_binary()
COST = os.path.join(ROOT, "sim", "costs", "h100-llama3.1-8b-fp8.json")
RATE = os.environ.get("RATE", "18")
PHASES = os.environ.get("PHASES", "conv:300,long_prompt:300,long_answer:300")
LENGTH_SCALE = os.environ.get("LENGTH_SCALE", "4")  # the Azure rows' lengths, four times over
MAX_INPUT = os.environ.get("MAX_INPUT", "32768")
MAX_OUTPUT = os.environ.get("MAX_OUTPUT", "8192")
SLO = os.environ.get("SLO", "ttft_ms=1000,tpot_ms=25")
INTERVAL = os.environ.get("INTERVAL", "30")
PREDICTORS = os.environ.get("PREDICTORS", "kalman last").split()
STARTUP = os.environ.get("STARTUP", "30")
BUDGET = int(os.environ.get("BUDGET", "16"))
# Goodput per worker-second alone rewards a deployment too small for the traffic that serves a
# share of it well; the comparison is also made among the static deployments that meet the
# objectives for at least this share of the requests.
FLOOR = float(os.environ.get("FLOOR", "0.9"))
# The splits tried (every aggregated size is): a grid, so the study takes minutes, not an hour.
SPLIT_P = (1, 2, 3, 4, 6, 8)
SPLIT_D = (1, 2, 3, 4, 6, 8, 10, 12)


def make_trace(tmp, duration, name):
    path = os.path.join(tmp, name)
    subprocess.run([sys.executable, os.path.join(ROOT, "bench", "drift_trace.py"),
                    "--phases", PHASES, "--duration", str(duration), "--rate", RATE,
                    "--length-scale", LENGTH_SCALE, "--max-input", MAX_INPUT,
                    "--max-output", MAX_OUTPUT, "--seed", "1", "-o", path],
                   check=True, capture_output=True)
    return path


def sim(trace, *args):
    out = subprocess.run([DYAD, "sim", "run", "--cost", COST, "--trace", trace, "--slo", SLO,
                          "--concurrency", "100000", "--json", *args],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"dyad sim run {' '.join(args)}: {out.stderr}")
    return json.loads(out.stdout)


def figures(r, workers):
    """(requests, met, worker-seconds, goodput per worker-second, attainment)."""
    n = r["completed"] + r["failed"]
    met = r["goodput"]["met"]
    p = r.get("planner")
    ws = p["worker_s"]["total"] if p else workers * r["duration_s"]
    return n, met, ws, met / ws if ws else 0, met / n if n else 0


def label(d):
    return f"{d[0]} agg" if d[1] == 0 else f"{d[0]}P+{d[1]}D"


def flags(d):
    return ["--workers", str(d[0])] if d[1] == 0 else ["--prefill-workers", str(d[0]),
                                                       "--decode-workers", str(d[1])]


def main():
    spans = [float(p.split(":")[1]) for p in PHASES.split(",")]
    duration = sum(spans)
    print(benchlib.env_header(f"planner drift benchmark in dyad sim: {os.path.basename(COST)}, "
                              f"budget {BUDGET} GPUs (TP 1 workers)"))
    statics = [(n, 0) for n in range(1, BUDGET + 1)] + \
              [(p, d) for p in SPLIT_P for d in SPLIT_D if p + d <= BUDGET]
    with tempfile.TemporaryDirectory() as tmp:
        whole = make_trace(tmp, duration, "whole.jsonl")
        first = make_trace(tmp, spans[0], "first.jsonl")
        n_req = sum(1 for _ in open(whole))
        print(f"# dyad: {benchlib.binary_id(DYAD)}; trace: drift_trace.py --phases {PHASES} "
              f"--rate {RATE} --length-scale {LENGTH_SCALE} --max-input {MAX_INPUT} --max-output "
              f"{MAX_OUTPUT} --seed 1 ({n_req} requests); objectives {SLO}; planners: interval "
              f"{INTERVAL} s, start-up {STARTUP} s, SLA predictors {' '.join(PREDICTORS)}\n")
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
            on_first = dict(zip(statics, ex.map(lambda d: figures(sim(first, *flags(d)), sum(d)),
                                                statics)))
            on_whole = dict(zip(statics, ex.map(lambda d: figures(sim(whole, *flags(d)), sum(d)),
                                                statics)))
        best_first = max(statics, key=lambda d: (on_first[d][3], -sum(d)))
        best_whole = max(statics, key=lambda d: (on_whole[d][3], -sum(d)))
        floored = [d for d in statics if on_whole[d][4] >= FLOOR]
        floored_first = [d for d in statics if on_first[d][4] >= FLOOR]
        best_whole_floor = max(floored, key=lambda d: (on_whole[d][3], -sum(d))) if floored else None
        best_first_floor = (max(floored_first, key=lambda d: (on_first[d][3], -sum(d)))
                            if floored_first else None)
        plan = ["--budget-workers", str(BUDGET), "--planner-interval", INTERVAL,
                "--startup-s", STARTUP, *flags(best_first)]
        runs = [
            (f"static {label(best_first)} (best for the first phase)", on_whole[best_first]),
            (f"static {label(best_whole)} (best for the whole trace)", on_whole[best_whole]),
            (f"static {BUDGET} agg (the whole budget)", on_whole[(BUDGET, 0)]),
        ]
        if best_whole_floor:
            runs.append((f"static {label(best_whole_floor)} (best for the whole trace with "
                         f">= {100 * FLOOR:.0f}% attainment)", on_whole[best_whole_floor]))
        planned = {}
        variants = [("reactive", "reactive", [])] + [
            (f"sla, {p}", "sla", ["--planner-predictor", p]) for p in PREDICTORS]
        for name, mode, extra in variants:
            r = sim(whole, "--planner", mode, *plan, *extra)
            planned[name] = r["planner"]
            runs.append((f"{name} planner (from {label(best_first)})", figures(r, 0)))
    print("## The best static deployments\n")
    print("| on | best | goodput / worker-s |")
    print("|---|---|---|")
    print(f"| first phase alone | {label(best_first)} | {on_first[best_first][3]:.4f} |")
    print(f"| whole trace | {label(best_whole)} | {on_whole[best_whole][3]:.4f} |")
    for name, d, table in (("first phase alone", best_first_floor, on_first),
                           ("whole trace", best_whole_floor, on_whole)):
        if d:
            print(f"| {name}, >= {100 * FLOOR:.0f}% attainment | {label(d)} | {table[d][3]:.4f} |")
    print("\n## The whole trace\n")
    print("| deployment | requests | met | worker-s | goodput / worker-s | SLO attainment |")
    print("|---|---|---|---|---|---|")
    for name, (n, met, ws, gpw, att) in runs:
        print(f"| {name} | {n} | {met} | {ws:.0f} | {gpw:.4f} | {100 * att:.1f}% |")
    base, top = runs[0][1][3], runs[1][1][3]
    floor = on_whole[best_whole_floor][3] if best_whole_floor else 0
    for name, f in runs:
        if "planner" not in name:
            continue
        line = (f"\n{name}: {f[3] / base if base else 0:.2f}x the first phase's best static "
                f"(target >= 1.2x), {f[3] / top if top else 0:.2f}x the whole trace's best "
                f"static (target >= 1x)")
        if floor:
            line += f", {f[3] / floor:.2f}x the whole trace's best static with >= {100 * FLOOR:.0f}% attainment"
        print(line + f"; attainment {100 * f[4]:.1f}%.")
    for mode, p in planned.items():
        print(f"\n### {mode}: the decisions that changed the pools (t s, action, target)\n")
        print("```")
        for d in p["decisions"]:
            if d["action"] != "hold":
                pools = f"{d['prefill']}P+{d['decode']}D" if d["split"] else f"{d['decode']} agg"
                print(f"{d['t']:.0f} {d['action']} {pools}")
        print("```")


if __name__ == "__main__":
    main()
