#!/usr/bin/env python3
"""planner_drift.py [DYAD] — issue 13's drift benchmark, for real on this machine: one
drifting trace (bench/drift_trace.py: Azure conversation arrivals whose lengths switch between
phases) replayed by `dyad bench --trace` against `dyad serve` with the same core budget in five
ways: the three static deployments the budget allows (1 aggregated, 2 aggregated, 1 prefill +
1 decode), the reactive planner and the SLA planner (both starting from 1 aggregated worker).
Per deployment: goodput (requests within the objectives), worker-seconds by role (the pools
polled every POLL_S from GET /v1/admin/pools), goodput per worker-second over the whole trace
and over its first phase, SLO attainment per window, and the planner's decisions; an SVG of the
pool sizes against the demand ratio over time.

  python3 bench/planner_drift.py > docs/bench/planner_drift.log

Environment: MODEL (default models/generated/110m-q8_0-ctx4k.gguf), COST (a cost model of MODEL
at 1 thread; default: fitted now with `dyad sim fit --reps 1`), PHASES (drift_trace.py
--phases), RATE (its --rate), LENGTH_SCALE, DURATION, SLO (ttft_ms=X,tpot_ms=Y), INTERVAL (planner
interval, s), PREDICTOR (the SLA planner's), CORES (budget), PLOT (the SVG's path), ONLY (comma-separated deployment names).
Standard library only."""
import calendar
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

import benchlib

ROOT = benchlib.ROOT
DYAD = benchlib.dyad_binary()
MODEL = os.environ.get("MODEL", os.path.join(ROOT, "models/generated/110m-q8_0-ctx4k.gguf"))
KV_MEM = os.environ.get("KV_MEM", "1536")
VOCAB = os.environ.get("VOCAB", "32000")
PHASES = os.environ.get("PHASES", "conv:60,long_prompt:60,long_answer:60")
RATE = os.environ.get("RATE", "0.5")
LENGTH_SCALE = os.environ.get("LENGTH_SCALE", "0.25")
DURATION = os.environ.get("DURATION", "180")
SLO = os.environ.get("SLO", "ttft_ms=4000,tpot_ms=120")
INTERVAL = os.environ.get("INTERVAL", "5")
PREDICTOR = os.environ.get("PREDICTOR", "kalman")
MAX_INPUT = os.environ.get("MAX_INPUT", "1024")
MAX_OUTPUT = os.environ.get("MAX_OUTPUT", "256")
CORES = os.environ.get("CORES", "2")
PLOT = os.environ.get("PLOT", os.path.join(ROOT, "docs", "planner-drift.svg"))
POLL_S = 0.5
WINDOW_S = 20
WORKER = ["--model", MODEL, "--threads-per-worker", "1", "--kv-mem", KV_MEM]


def slo_ms():
    d = dict(kv.split("=") for kv in SLO.split(","))
    return float(d["ttft_ms"]), float(d["tpot_ms"])


def phases():
    """[(name, start_s, end_s)] over DURATION, repeating PHASES as drift_trace.py does."""
    spec = [(n, float(s)) for n, s in (p.split(":")[:2] for p in PHASES.split(","))]
    out, t, i = [], 0.0, 0
    while t < float(DURATION):
        name, span = spec[i % len(spec)]
        out.append((name, t, min(t + span, float(DURATION))))
        t += span
        i += 1
    return out


def cost_model(tmp):
    if os.environ.get("COST"):
        return os.environ["COST"]
    path = os.path.join(tmp, "cost.json")
    subprocess.run([DYAD, "sim", "fit", "-o", path, "--model", MODEL, "--threads", "1",
                    "--kv-mem", KV_MEM, "--reps", "1"], check=True, capture_output=True)
    return path


def make_trace(tmp):
    path = os.path.join(tmp, "drift.jsonl")
    subprocess.run([sys.executable, os.path.join(ROOT, "bench", "drift_trace.py"),
                    "--csv", os.path.join(ROOT, "bench", "data", "azure2023_conv.csv"),
                    "--phases", PHASES, "--duration", DURATION, "--rate", RATE,
                    "--length-scale", LENGTH_SCALE, "--max-input", MAX_INPUT, "--max-output",
                    MAX_OUTPUT, "--seed", "1", "-o", path], check=True)
    return path


def read_trace(path):
    rows = []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            rows.append((r["timestamp"] / 1e3, r["input_length"], r["output_length"]))
    return rows


def deployments(cost):
    plan = ["--cores", CORES, "--slo", SLO.replace("tpot_ms", "itl_ms"),
            "--planner-interval", INTERVAL]
    sla = [*plan, "--cost-model", cost, "--planner-predictor", PREDICTOR]
    all_ = [
        ("static 1 agg", ["--workers", "1", "--cores", CORES]),
        ("static 2 agg", ["--workers", "2", "--cores", CORES]),
        ("static 1P+1D", ["--prefill-workers", "1", "--decode-workers", "1", "--cores", CORES]),
        ("reactive", ["--workers", "1", "--planner", "reactive", *plan]),
        ("sla", ["--workers", "1", "--planner", "sla", *sla]),
    ]
    only = os.environ.get("ONLY")
    return [d for d in all_ if not only or d[0] in only.split(",")]


class Poller:
    """The pools every POLL_S: [(t, {role: workers running (starting, active or draining)})]."""

    def __init__(self, server, t0):
        self.server, self.t0, self.samples, self.stop = server, t0, [], False
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self):
        while not self.stop:
            try:
                st, r, _ = self.server.request("GET", "/v1/admin/pools")
                counts = {"aggregated": 0, "prefill": 0, "decode": 0}
                for s in r["slots"]:
                    if s["state"] != "parked":
                        counts[s["role"]] += 1
                self.samples.append((time.time() - self.t0, counts))
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(POLL_S)

    def finish(self):
        self.stop = True
        self.thread.join()

    def worker_seconds(self, start=0.0, end=float("inf")):
        ws = {"aggregated": 0.0, "prefill": 0.0, "decode": 0.0}
        for (t, c), (t2, _) in zip(self.samples, self.samples[1:]):
            a, b = max(t, start), min(t2, end)
            if b > a:
                for k in ws:
                    ws[k] += c[k] * (b - a)
        return ws


def request_log(path, t0):
    """[(arrival_s, ok, ttft_ms, tpot_ms)] from the server's request log."""
    out = []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("endpoint") != "completions":
                continue
            end = calendar.timegm(time.strptime(r["time"][:19], "%Y-%m-%dT%H:%M:%S"))
            end += float(r["time"][20:23]) / 1e3
            arrival = end - r["e2e_ms"] / 1e3 - t0
            toks = r.get("completion_tokens", 0)
            ttft = r.get("ttft_ms", -1)
            tpot = (r["e2e_ms"] - ttft) / (toks - 1) if toks > 1 and ttft >= 0 else 0
            out.append((arrival, r.get("status") == 200 and r.get("outcome") != "error", ttft, tpot))
    return out


def good(req, ttft_max, tpot_max):
    return req[1] and 0 <= req[2] <= ttft_max and req[3] <= tpot_max


def run(name, args, trace):
    log = tempfile.NamedTemporaryFile("w+", suffix=".jsonl", delete=False)
    server = benchlib.dyad_http.Server(DYAD, *WORKER, *args, "--request-log", log.name)
    t0 = time.time()
    poll = Poller(server, t0)
    try:
        report = benchlib.bench(DYAD, server, "--trace", trace, "--slo", SLO,
                                "--vocab-size", VOCAB)[-1]
    finally:
        poll.finish()
        server.stop()
    server.log.seek(0)
    text = server.log.read()
    decisions = re.findall(r"planner \(\w+\) interval \d+: (\w+) to ([^;]+);", text)
    trail = [line.split("dyad serve: ", 1)[1] for line in text.splitlines()
             if "planner (" in line and ": hold to" not in line]
    moves = re.findall(r"planner: (start|switch|stop|resume) worker", text)
    reqs = request_log(log.name, t0)
    os.unlink(log.name)
    return {"name": name, "report": report, "poll": poll, "reqs": reqs,
            "decisions": decisions, "moves": moves, "trail": trail}


def summarize(res, ph):
    ttft_max, tpot_max = slo_ms()
    reqs, poll = res["reqs"], res["poll"]
    end = max((t for t, _ in poll.samples), default=0)
    ws = poll.worker_seconds()
    total_ws = sum(ws.values())
    n_good = sum(good(r, ttft_max, tpot_max) for r in reqs)
    _, p1s, p1e = ph[0]
    p1_good = sum(good(r, ttft_max, tpot_max) for r in reqs if p1s <= r[0] < p1e)
    p1_ws = sum(poll.worker_seconds(p1s, p1e).values())
    return {"good": n_good, "n": len(reqs), "ws": ws, "total_ws": total_ws, "span": end,
            "gpws": n_good / total_ws if total_ws else 0,
            "p1_gpws": p1_good / p1_ws if p1_ws else 0, "p1_good": p1_good}


def windows(res, ttft_max, tpot_max, span):
    out = []
    for w0 in range(0, int(span) + 1, WINDOW_S):
        rs = [r for r in res["reqs"] if w0 <= r[0] < w0 + WINDOW_S]
        out.append(f"{100 * sum(good(r, ttft_max, tpot_max) for r in rs) / len(rs):.0f}%"
                   if rs else "-")
    return out


def svg(results, trace_rows, ph, path):
    """Pool sizes over time per deployment (one panel each) under the trace's demand ratio."""
    span = float(DURATION) + 30
    pw, ph_h, m = 700, 90, 50
    rows = len(results) + 1
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{pw + 2 * m}" height="{rows * ph_h + 60}"'
           f' font-family="sans-serif" font-size="10">',
           f'<text x="{m}" y="14" font-size="12">Drift benchmark: workers by role over time '
           f'(prefill orange, decode green, aggregated blue) under the demand ratio</text>']

    def px(t):
        return m + t / span * pw
    # demand ratio: prompt tokens / output tokens of the arrivals per window
    y0 = 25
    ratios = []
    for w0 in range(0, int(span), WINDOW_S // 2):
        rs = [r for r in trace_rows if w0 <= r[0] < w0 + WINDOW_S // 2]
        if rs:
            ratios.append((w0 + WINDOW_S / 4, sum(r[1] for r in rs) / max(1, sum(r[2] for r in rs))))
    rmax = max((r for _, r in ratios), default=1) * 1.1
    out.append(f'<rect x="{m}" y="{y0}" width="{pw}" height="{ph_h - 20}" fill="none" stroke="#999"/>')
    out.append(f'<text x="{m + 4}" y="{y0 + 11}">demand: prompt tokens / output tokens '
               f'(max {rmax:.1f})</text>')
    pts = " ".join(f"{px(t):.1f},{y0 + (ph_h - 20) * (1 - r / rmax):.1f}" for t, r in ratios)
    out.append(f'<polyline points="{pts}" fill="none" stroke="#444"/>')
    for name, s, e in ph:
        out.append(f'<text x="{px(s) + 2:.1f}" y="{y0 + ph_h - 24}">{name}</text>')
    for i, res in enumerate(results):
        y = 25 + (i + 1) * ph_h
        h = ph_h - 20
        out.append(f'<rect x="{m}" y="{y}" width="{pw}" height="{h}" fill="none" stroke="#999"/>')
        out.append(f'<text x="{m + 4}" y="{y + 11}">{res["name"]}</text>')
        top = int(CORES)
        for role, colour in (("prefill", "#ff7f0e"), ("decode", "#2ca02c"), ("aggregated", "#1f77b4")):
            pts = " ".join(f"{px(t):.1f},{y + h - c[role] / top * (h - 14):.1f}"
                           for t, c in res["poll"].samples)
            out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
        for _, s, _ in ph:
            out.append(f'<line x1="{px(s):.1f}" y1="{y}" x2="{px(s):.1f}" y2="{y + h}" stroke="#ddd"/>')
    out.append(f'<text x="{m + pw / 2 - 40}" y="{rows * ph_h + 50}">seconds (0 to {span:.0f})'
               f'</text></svg>')
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    print(benchlib.env_header(f"planner drift benchmark: {os.path.basename(MODEL)}, budget "
                              f"{CORES} cores (workers of 1 thread)"))
    ttft_max, tpot_max = slo_ms()
    with tempfile.TemporaryDirectory() as tmp:
        cost = cost_model(tmp)
        trace = make_trace(tmp)
        rows = read_trace(trace)
        ph = phases()
        print(f"# dyad: {benchlib.binary_id(DYAD)}; cost model: {cost}; trace: drift_trace.py "
              f"--phases {PHASES} --duration {DURATION} --rate {RATE} "
              f"--length-scale {LENGTH_SCALE} --seed 1 ({len(rows)} requests); objectives "
              f"{SLO}; planner interval {INTERVAL} s, SLA predictor {PREDICTOR}; each deployment "
              f"run once, in the order below\n")
        print("## Phases of the trace\n")
        print("| phase | from s | to s | requests | mean ISL | mean OSL |")
        print("|---|---|---|---|---|---|")
        for name, s, e in ph:
            rs = [r for r in rows if s <= r[0] < e]
            if rs:
                print(f"| {name} | {s:.0f} | {e:.0f} | {len(rs)} | "
                      f"{sum(r[1] for r in rs) / len(rs):.0f} | {sum(r[2] for r in rs) / len(rs):.0f} |")
        results = []
        for name, args in deployments(cost):
            print(f"# running {name}", file=sys.stderr, flush=True)
            res = run(name, args, trace)
            res["sum"] = summarize(res, ph)
            results.append(res)
    print("\n## Goodput per worker-second\n")
    print("| deployment | requests | within objectives | worker-s (agg / prefill / decode) | "
          "goodput / worker-s | first phase: goodput / worker-s | decisions | moves |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        s = r["sum"]
        ws = s["ws"]
        acts = {}
        for a, _ in r["decisions"]:
            acts[a] = acts.get(a, 0) + 1
        moves = {}
        for k in r["moves"]:
            moves[k] = moves.get(k, 0) + 1
        print(f"| {r['name']} | {s['n']} | {s['good']} | {ws['aggregated']:.0f} / "
              f"{ws['prefill']:.0f} / {ws['decode']:.0f} | {s['gpws']:.4f} | {s['p1_gpws']:.4f} | "
              f"{', '.join(f'{k} {v}' for k, v in sorted(acts.items())) or '-'} | "
              f"{', '.join(f'{k} {v}' for k, v in sorted(moves.items())) or '-'} |")
    span = max(r["sum"]["span"] for r in results)
    print(f"\n## SLO attainment per {WINDOW_S} s window of arrival\n")
    cols = list(range(0, int(span) + 1, WINDOW_S))
    print("| deployment | " + " | ".join(f"{c}s" for c in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for r in results:
        print(f"| {r['name']} | " + " | ".join(windows(r, ttft_max, tpot_max, span)) + " |")
    statics = [r for r in results if r["name"].startswith("static")]
    sla = next((r for r in results if r["name"] == "sla"), None)
    if statics and sla:
        first = max(statics, key=lambda r: r["sum"]["p1_gpws"])
        whole = max(statics, key=lambda r: r["sum"]["gpws"])
        g = sla["sum"]["gpws"]
        print(f"\nBest static split for the first phase: {first['name']} "
              f"({first['sum']['gpws']:.4f} goodput / worker-s over the whole trace); best static "
              f"for the whole trace: {whole['name']} ({whole['sum']['gpws']:.4f}).")
        print(f"SLA planner: {g:.4f} = {g / first['sum']['gpws'] if first['sum']['gpws'] else 0:.2f}x "
              f"the first phase's best static (target >= 1.2x), "
              f"{g / whole['sum']['gpws'] if whole['sum']['gpws'] else 0:.2f}x the whole trace's "
              f"best static (target >= 1x).")
    for r in results:
        if r["trail"]:
            print(f"\n### {r['name']}: the decisions that changed the pools\n")
            print("```")
            print("\n".join(r["trail"]))
            print("```")
    svg(results, rows, ph, PLOT)
    print(f"\nPlot: {os.path.relpath(PLOT, ROOT)}")


if __name__ == "__main__":
    main()
