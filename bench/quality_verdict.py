#!/usr/bin/env python3
"""bench/quality_verdict.py [QUALITY_JSON] [--svg PATH] — the quality claim tested per task, from
a quality bench's file (bench/quality.py --out; default docs/bench/quality.json): markdown
tables on stdout and, with --svg, the accuracy-against-cost plot of docs/quality.md.

1. The claim: for each task and each pair of sizes (s → m, m → l, f32 weights), the target is
   the larger size's greedy accuracy; the table gives the smallest k at which the smaller size
   reaches it with the server's vote (majority_server, else the client's majority), with the
   best log-probability, and with pass@k (a checker selects), and the cost of that point
   against the larger size's greedy cost (worker core-seconds per problem). "—" where no
   measured k reaches it. The binomial standard error of each accuracy, sqrt(p(1−p)/n),
   is beside the target: a gap smaller than about twice it is noise.
2. Quantization's cost: greedy accuracy per task and core-milliseconds per problem (the mean
   over the tasks) for every size × weight type.

Standard library only; reads nothing but the file. A report: it asserts nothing."""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from svgplot import Panel, Series, write_svg  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = ["s", "m", "l"]
TYPES = ["f32", "q8_0", "q4_0", "q4_k"]


def index(points):
    """{(model, kv_type, task, method, k, one_request): point}."""
    return {(p["model"], p.get("kv_type", "f32"), p["task"], p["method"], p["k"], p["one_request"]): p
            for p in points}


def tasks_of(points):
    seen = []
    for p in points:
        if p["task"] not in seen:
            seen.append(p["task"])
    return seen


def ks_of(points, method):
    return sorted({p["k"] for p in points if p["method"] == method and p["one_request"]})


def stderr(p):
    return math.sqrt(max(p["accuracy"] * (1 - p["accuracy"]), 1e-12) / p["problems"])


def first_k_reaching(ix, model, task, method, ks, target):
    """The first measured point of the method whose accuracy reaches target, or None."""
    for k in ks:
        p = ix.get((model, "f32", task, method, k, True))
        if p and p["accuracy"] >= target:
            return p
    return None


def cell(p, base):
    if p is None:
        return "—"
    ratio = p["core_seconds"] / base["core_seconds"] if base["core_seconds"] > 0 else float("nan")
    return f"k={p['k']}: {p['accuracy']:.2f}, {ratio:.2f}× cost"


def claim_table(points):
    ix = index(points)
    vote = "majority_server" if any(p["method"] == "majority_server" for p in points) else "majority"
    rows = ["| task | small → large | large greedy (± s.e.) | small greedy | vote@k "
            f"({vote}) | best log-prob@k | pass@k (checker) |", "|---|---|---|---|---|---|---|"]
    for task in tasks_of(points):
        for small, large in zip(SIZES, SIZES[1:]):
            base = ix.get((f"{large}-f32", "f32", task, "greedy", 1, True))
            own = ix.get((f"{small}-f32", "f32", task, "greedy", 1, True))
            if not base or not own:
                continue
            target = base["accuracy"]
            got = [first_k_reaching(ix, f"{small}-f32", task, m, ks_of(points, m), target)
                   for m in (vote, "logprob", "pass")]
            rows.append(f"| {task} | {small} → {large} | {target:.2f} (± {stderr(base):.2f}) | "
                        f"{own['accuracy']:.2f} | " + " | ".join(cell(p, base) for p in got) + " |")
    return "\n".join(rows)


def quant_table(points):
    ix = index(points)
    tasks = tasks_of(points)
    rows = ["| size | type | " + " | ".join(tasks) + " | core-ms / problem |",
            "|---|---|" + "---|" * len(tasks) + "---|"]
    for size in SIZES:
        for t in TYPES:
            got = [ix.get((f"{size}-{t}", "f32", task, "greedy", 1, True)) for task in tasks]
            if not all(got):
                continue
            cost = sum(p["core_seconds"] for p in got) / len(got) * 1e3
            rows.append(f"| {size} | {t} | " + " | ".join(f"{p['accuracy']:.2f}" for p in got) +
                        f" | {cost:.3f} |")
    return "\n".join(rows)


def plot(points, path):
    """Per task: accuracy against core-ms per problem, one line per size and method over k."""
    panels = []
    for task in tasks_of(points):
        series = []
        for size in SIZES:
            for method, dashed in (("majority_server", False), ("pass", True)):
                pts = sorted((p["core_seconds"] * 1e3, p["accuracy"]) for p in points
                             if p["model"] == f"{size}-f32" and p.get("kv_type", "f32") == "f32"
                             and p["task"] == task and p["method"] == method and p["one_request"])
                if pts:
                    series.append(Series(f"{size} {method}", pts, dashed=dashed))
        panels.append(Panel(task, series, xlabel="core-ms per problem", ylabel="accuracy",
                            xlog=True, ymin=0, ymax=1))
    write_svg(path, "accuracy against cost per problem (f32 weights; points are k = 1 … 32)",
              panels, columns=2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", default=os.path.join(ROOT, "docs", "bench", "quality.json"))
    ap.add_argument("--svg", help="also write the plot here")
    args = ap.parse_args()
    try:
        with open(args.file) as f:
            points = json.load(f)["points"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"quality_verdict: {args.file}: {e}")
    print("## The claim, per task\n")
    print(claim_table(points))
    print("\n## Quantization (greedy accuracy, f32 KV)\n")
    print(quant_table(points))
    if args.svg:
        plot(points, args.svg)


if __name__ == "__main__":
    main()
