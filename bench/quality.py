#!/usr/bin/env python3
"""bench/quality.py [DYAD] [options] — answer quality against serving cost on the quality family
(models/quality/: small llamas trained on train/tasks.py's four task families), through the
OpenAI API of `dyad serve`.

For each model × task × k it sends the held-out problems (train/tasks.py `heldout`) to a
fresh `dyad serve` (one aggregated worker, one engine thread, a small KV cache) and measures
per problem, averaged over the problems:

  greedy           one request, temperature 0, n=1 (k=1)
  pass             pass@k: the unbiased estimator 1 - C(n-c,k)/C(n,k) over the n = max k samples
                   of one request (c of them correct by the task's checker)
  majority         the most frequent answer among the k samples of one n=k request (ties: the
                   answer given first, by the lowest sample index — the server's rule)
  majority_server  one n=k request with dyad.select "majority": the choice the server returns
  logprob          of the k samples of one n=k request, the one with the highest total
                   log-probability (the sum of its tokens' logprobs; the end-of-sequence token
                   is not in the response's logprobs, so it is not counted); ties: lowest index

Sampled requests use temperature TEMPERATURE (0.8), a seed fixed per problem, max_tokens 16
(train/train.py's MAX_ANSWER) and, for majority and logprob, logprobs 0. An answer is the
completion text stripped (the model writes the answer and then its end-of-sequence token).
The cost of a point is the cost of the requests it came from, as served: prompt and completion
tokens (usage), the worker's core-seconds (`dyad_worker_step_seconds_total` before and after
the problems of a point, times the engine threads: time inside engine steps, an upper bound on
busy cores), and each problem's end-to-end latency (p50, p90; linear interpolation). pass@k is
computed from the n = max k samples but charged the cost of its n=k request. With
`one_request: false` (--separate-ks, default 4 and 8) the k samples are k concurrent requests
of n=1 with distinct seeds instead of one request with n=k (one prefill shared): pass is then
whether any of the k is correct, and the latency the time until the last one ends.

Output: a JSON file (--out, default docs/bench/quality.json) with the machine header and a
flat `points` list (docs/quality.md gives the schema), and a markdown table on stdout.
A benchmark: it prints figures and asserts nothing. Standard library only.

  bench/quality.py build/dyad --models s-f32,l-q4_0 --tasks add,prog --ks 1,4,16 --problems 50
  bench/quality.py build/dyad --smoke --out /tmp/q.json    # s-f32, 3 problems, k 1 and 2"""
import argparse
import glob
import json
import math
import os
import re
import sys
import tempfile
import threading
import time

import benchlib
from benchlib import ROOT, dyad_http

sys.path.insert(0, os.path.join(ROOT, "train"))
import tasks  # noqa: E402

QUALITY = os.path.join(ROOT, "models", "quality")
TEMPERATURE = 0.8
MAX_TOKENS = 16
KV_BLOCKS = 512  # 64 positions of context are 4 blocks of 16: 32 samples need 128
ANSWER_REGEX = r"(?s)^\s*(.*?)\s*$"  # the whole text, stripped: what tasks.check compares
SIZE_ORDER = {"s": 0, "m": 1, "l": 2}
TYPE_ORDER = {"f32": 0, "f16": 1, "q8_0": 2, "q4_k": 3, "q4_0": 4}
STEP_SECONDS = 'dyad_worker_step_seconds_total{worker="0"}'


def parse_ints(text):
    return [int(x) for x in text.split(",") if x]


def model_info(path):
    """name, size, type and parameter count of a quality-family GGUF (SIZE-TYPE.gguf)."""
    name = os.path.splitext(os.path.basename(path))[0]
    size, _, wtype = name.partition("-")
    params = None
    summary = os.path.join(os.path.dirname(path), f"{size}.summary.json")
    if os.path.exists(summary):
        with open(summary) as f:
            params = json.load(f).get("params")
    return {"model": name, "size": size, "type": wtype or None, "params": params}


def resolve_models(spec):
    if not spec:
        paths = glob.glob(os.path.join(QUALITY, "*.gguf"))
        return sorted(paths, key=lambda p: (SIZE_ORDER.get(model_info(p)["size"], 9),
                                            TYPE_ORDER.get(model_info(p)["type"], 9)))
    out = []
    for m in spec.split(","):
        out.append(m if os.path.sep in m or m.endswith(".gguf") else os.path.join(QUALITY, m + ".gguf"))
    return out


def machine(header):
    m = re.match(r"# (\S+), tree (.*?), CPU (.*), (\d+) cores, kernel (\S+), load before: ([\d. ]+)",
                 header)
    if not m:
        return {"header": header}
    return {"header": header, "date": m.group(1), "tree": m.group(2), "cpu": m.group(3),
            "cores": int(m.group(4)), "kernel": m.group(5), "load_before": m.group(6).strip()}


def percentile(xs, q):
    xs = sorted(xs)
    if not xs:
        return None
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def pass_at_k(n, c, k):
    """The unbiased pass@k estimator over n samples of which c are correct."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def majority(answers):
    """The most frequent answer; ties go to the answer that appears first."""
    counts = {}
    for a in answers:
        counts[a] = counts.get(a, 0) + 1
    best = max(counts.values())
    return next(a for a in answers if counts[a] == best)


def best_logprob(samples):
    """The answer of the sample with the highest total log-probability (first on ties)."""
    best = max(s["logprob"] for s in samples)
    return next(s["answer"] for s in samples if s["logprob"] == best)


class Bench:
    def __init__(self, dyad, path, threads, kv_type):
        self.info = {**model_info(path), "kv_type": kv_type}
        self.threads = threads
        self.server = dyad_http.Server(dyad, "--model", path, "--workers", "1",
                                       "--threads-per-worker", str(threads),
                                       "--kv-blocks", str(KV_BLOCKS), "--kv-type", kv_type)

    def complete(self, body):
        """One completions request: (response, seconds)."""
        t0 = time.perf_counter()
        status, resp, _ = self.server.request("POST", "/v1/completions",
                                              {"model": self.info["model"], **body})
        dt = time.perf_counter() - t0
        if status != 200:
            raise RuntimeError(f"{self.info['model']}: HTTP {status}: {resp}")
        return resp, dt

    def core_seconds(self):
        return self.server.settled(STEP_SECONDS) * self.threads


def samples_of(resp):
    out = []
    for ch in sorted(resp["choices"], key=lambda c: c["index"]):
        lp = ch.get("logprobs") or {}
        out.append({"answer": ch["text"].strip(), "logprob": sum(lp.get("token_logprobs") or [])})
    return out


def run_point(bench, problems, one):
    """Runs one(problem index, prompt) -> (samples or answer, [responses], seconds) over the
    problems; returns the per-problem results and the averaged cost."""
    before = bench.core_seconds()
    results, lat, ptok, ctok = [], [], 0, 0
    for i, (prompt, _) in enumerate(problems):
        value, resps, seconds = one(i, prompt)
        results.append(value)
        lat.append(seconds * 1000)
        ptok += sum(r["usage"]["prompt_tokens"] for r in resps)
        ctok += sum(r["usage"]["completion_tokens"] for r in resps)
    core = bench.core_seconds() - before
    n = len(problems)
    return results, {"problems": n, "prompt_tokens": ptok / n, "completion_tokens": ctok / n,
                     "core_seconds": core / n, "latency_ms_p50": percentile(lat, 0.5),
                     "latency_ms_p90": percentile(lat, 0.9)}


def problem_seed(seed, task, i):
    return seed * 1_000_000 + tasks.TASK_NAMES.index(task) * 10_000 + i


def bench_task(bench, task, problems, subset, args, log):
    """All points of one model and task."""
    points = []
    correct = lambda prompt, answer: tasks.check(task, prompt, answer)  # noqa: E731

    def point(method, k, one_request, accuracy, cost):
        p = {**bench.info, "task": task, "method": method, "k": k, "one_request": one_request,
             "accuracy": accuracy, **cost}
        points.append(p)
        log(f"{bench.info['model']} {task} {method} k={k} one_request={one_request}: "
            f"accuracy {accuracy:.3f}, {cost['completion_tokens']:.1f} completion tokens, "
            f"{cost['core_seconds'] * 1000:.2f} core-ms, p50 {cost['latency_ms_p50']:.1f} ms")

    def greedy(i, prompt):
        resp, dt = bench.complete({"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0})
        return samples_of(resp)[0]["answer"], [resp], dt

    answers, cost = run_point(bench, problems, greedy)
    point("greedy", 1, True, sum(map(correct, [p for p, _ in problems], answers)) / len(problems), cost)

    sampled = {}
    for k in sorted(args.ks):
        def one(i, prompt, k=k):
            resp, dt = bench.complete({"prompt": prompt, "n": k, "max_tokens": MAX_TOKENS,
                                       "temperature": TEMPERATURE, "logprobs": 0,
                                       "seed": problem_seed(args.seed, task, i)})
            return samples_of(resp), [resp], dt
        sampled[k] = run_point(bench, problems, one)
    n = max(args.ks)
    counts = [sum(correct(prompt, s["answer"]) for s in samples)
              for (prompt, _), samples in zip(problems, sampled[n][0])]
    voted = {}  # k: the client's majority answer per problem
    for k in sorted(args.ks):
        samples, cost = sampled[k]
        prompts = [p for p, _ in problems]
        voted[k] = [majority([s["answer"] for s in ss]) for ss in samples]
        point("pass", k, True, sum(pass_at_k(n, c, k) for c in counts) / len(problems), cost)
        point("majority", k, True, sum(map(correct, prompts, voted[k])) / len(problems), cost)
        point("logprob", k, True, sum(correct(p, best_logprob(ss))
                                      for p, ss in zip(prompts, samples)) / len(problems), cost)

    sub = problems[:subset]
    for k in sorted(args.server_ks):
        def vote(i, prompt, k=k):
            resp, dt = bench.complete({"prompt": prompt, "n": k, "max_tokens": MAX_TOKENS,
                                       "temperature": TEMPERATURE,
                                       "seed": problem_seed(args.seed, task, i),
                                       "dyad": {"select": "majority", "answer_regex": ANSWER_REGEX}})
            return samples_of(resp)[0]["answer"], [resp], dt
        answers, cost = run_point(bench, sub, vote)
        point("majority_server", k, True,
              sum(map(correct, [p for p, _ in sub], answers)) / len(sub), cost)
        if k in voted:  # the same seeded samples: the server's vote should be the client's
            points[-1]["agrees_with_majority"] = sum(
                a == b for a, b in zip(answers, voted[k])) / len(sub)

    for k in sorted(args.separate_ks):
        def separate(i, prompt, k=k):
            resps = [None] * k

            def send(j):
                resps[j] = bench.complete({"prompt": prompt, "n": 1, "max_tokens": MAX_TOKENS,
                                           "temperature": TEMPERATURE, "logprobs": 0,
                                           "seed": problem_seed(args.seed, task, i) * 100 + j})[0]
            t0 = time.perf_counter()
            threads = [threading.Thread(target=send, args=(j,)) for j in range(k)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            dt = time.perf_counter() - t0
            if any(r is None for r in resps):
                raise RuntimeError(f"{bench.info['model']} {task}: a separate request failed")
            return [samples_of(r)[0] for r in resps], resps, dt
        samples, cost = run_point(bench, sub, separate)
        prompts = [p for p, _ in sub]
        point("pass", k, False, sum(any(correct(p, s["answer"]) for s in ss)
                                    for p, ss in zip(prompts, samples)) / len(sub), cost)
        point("majority", k, False, sum(correct(p, majority([s["answer"] for s in ss]))
                                        for p, ss in zip(prompts, samples)) / len(sub), cost)
        point("logprob", k, False, sum(correct(p, best_logprob(ss))
                                       for p, ss in zip(prompts, samples)) / len(sub), cost)
    return points


def table(points):
    lines = ["| model | task | method | k | one request | accuracy | problems | prompt tok | "
             "completion tok | core-ms | p50 ms | p90 ms |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        lines.append(f"| {p['model']} | {p['task']} | {p['method']} | {p['k']} | "
                     f"{'yes' if p['one_request'] else 'no'} | {p['accuracy']:.3f} | {p['problems']} | "
                     f"{p['prompt_tokens']:.1f} | {p['completion_tokens']:.1f} | "
                     f"{p['core_seconds'] * 1000:.2f} | {p['latency_ms_p50']:.1f} | "
                     f"{p['latency_ms_p90']:.1f} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dyad", nargs="?", default=os.path.join(ROOT, "build", "dyad"))
    ap.add_argument("--models", default=os.environ.get("MODELS", ""),
                    help="comma list of GGUF paths or quality-family names (s-f32, l-q4_k); "
                         "default every models/quality/*.gguf")
    ap.add_argument("--tasks", default=os.environ.get("TASKS", ",".join(tasks.TASK_NAMES)))
    ap.add_argument("--ks", default=os.environ.get("KS", "1,2,4,8,16,32"))
    ap.add_argument("--server-ks", default=os.environ.get("SERVER_KS"),
                    help="k values of the dyad.select majority requests (default: --ks)")
    ap.add_argument("--separate-ks", default=os.environ.get("SEPARATE_KS", "4,8"),
                    help="k values also sent as k requests of n=1 (default 4,8)")
    ap.add_argument("--problems", type=int, default=int(os.environ.get("PROBLEMS", "100")))
    ap.add_argument("--subset", type=int, default=int(os.environ.get("SUBSET", "0")),
                    help="problems for majority_server and the separate requests (default all)")
    ap.add_argument("--threads", type=int, default=1, help="engine threads of the worker")
    ap.add_argument("--kv-type", default="f32", choices=("f32", "f16", "q8_0"),
                    help="element type of the worker's KV cache (each point records it)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=None, help="JSON file (default docs/bench/quality.json; "
                    "with --smoke a file in the temporary directory)")
    ap.add_argument("--smoke", action="store_true",
                    help="s-f32, 3 problems per task, k 1 and 2, separate k 2")
    args = ap.parse_args()
    if args.smoke:
        args.models, args.problems, args.ks, args.separate_ks = "s-f32", 3, "1,2", "2"
        args.server_ks, args.subset = None, 0
        args.out = args.out or os.path.join(tempfile.gettempdir(), "dyad-quality-smoke.json")
    args.out = args.out or os.path.join(ROOT, "docs", "bench", "quality.json")
    args.ks = parse_ints(args.ks)
    args.server_ks = parse_ints(args.server_ks) if args.server_ks else list(args.ks)
    args.separate_ks = parse_ints(args.separate_ks)
    args.subset = args.subset or args.problems
    task_names = [t for t in args.tasks.split(",") if t]
    for t in task_names:
        if t not in tasks.TASKS:
            ap.error(f"unknown task {t!r} (tasks: {', '.join(tasks.TASK_NAMES)})")
    for k in args.ks + args.server_ks + args.separate_ks:
        if not 1 <= k <= 64:
            ap.error(f"k {k} is outside 1..64 (the server's n)")
    models = resolve_models(args.models)
    for m in models:
        if not os.path.exists(m):
            ap.error(f"no model {m}")

    header = benchlib.env_header(
        f"quality bench: models {','.join(model_info(m)['model'] for m in models)}, tasks "
        f"{','.join(task_names)}, ks {','.join(map(str, args.ks))}, {args.problems} problems")
    print(header)

    def log(text):
        print(f"# {text}", file=sys.stderr, flush=True)

    points, t_start = [], time.monotonic()
    for path in models:
        bench = Bench(args.dyad, path, args.threads, args.kv_type)
        log(bench.server.banner)
        try:
            for task in task_names:
                problems = tasks.heldout(task, args.problems)
                points += bench_task(bench, task, problems, args.subset, args, log)
        finally:
            rc = bench.server.stop()
            if rc != 0:
                log(f"{bench.info['model']}: server exit status {rc}")
    report = {"machine": machine(header), "command": [os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]],
              "config": {"temperature": TEMPERATURE, "max_tokens": MAX_TOKENS, "seed": args.seed,
                         "ks": args.ks, "server_ks": args.server_ks,
                         "separate_ks": args.separate_ks, "problems": args.problems,
                         "subset": args.subset, "threads_per_worker": args.threads,
                         "kv_type": args.kv_type,
                         "kv_blocks": KV_BLOCKS, "answer_regex": ANSWER_REGEX,
                         "dyad": benchlib.binary_id(args.dyad)},
              "seconds": round(time.monotonic() - t_start, 1), "points": points}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    print(table(points))
    print(f"# {len(points)} points in {report['seconds']} s, written to {args.out}")


if __name__ == "__main__":  # tests/quality_bench_smoke.py imports the estimators
    main()
