#!/usr/bin/env python3
"""quality_bench_smoke.py DYAD SOURCE_DIR — bench/quality.py --smoke against the built dyad
(s-f32, 3 held-out problems per task, k 1 and 2, the separate requests at k 2), then the
JSON it wrote: every point present once with every field, figures in range, pass@k not
decreasing in k, n=2 costing about twice n=1's completion tokens and the same prompt tokens
(one shared prefill), k separate requests k times the prompt tokens, the server's majority
vote equal to the client's over the same seeded samples; and the bench's estimators on known
cases. Standard library only; prints 'N passed, N failed'."""
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile

DYAD, SRC = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(SRC, "tests"))
sys.path.insert(0, os.path.join(SRC, "bench"))
sys.path.insert(0, os.path.join(SRC, "train"))
import tasks  # noqa: E402
from dyad_http import run_tests  # noqa: E402

FIELDS = {"model": str, "size": str, "type": str, "params": int, "task": str, "method": str,
          "k": int, "one_request": bool, "accuracy": (int, float), "problems": int,
          "prompt_tokens": (int, float), "completion_tokens": (int, float),
          "core_seconds": (int, float), "latency_ms_p50": (int, float),
          "latency_ms_p90": (int, float)}
KS = [1, 2]
EXPECTED = ({(t, "greedy", 1, True) for t in tasks.TASK_NAMES}
            | {(t, m, k, True) for t in tasks.TASK_NAMES for m in ("pass", "majority", "logprob",
                                                                    "majority_server") for k in KS}
            | {(t, m, 2, False) for t in tasks.TASK_NAMES for m in ("pass", "majority", "logprob")})

OUT = tempfile.NamedTemporaryFile(prefix="dyad-quality-smoke-", suffix=".json", delete=False).name
run = subprocess.run([sys.executable, os.path.join(SRC, "bench", "quality.py"), DYAD, "--smoke",
                      "--out", OUT], capture_output=True, text=True, timeout=300)
REPORT = None
if run.returncode == 0:
    with open(OUT) as f:
        REPORT = json.load(f)
os.unlink(OUT)


def points():
    assert run.returncode == 0, f"bench/quality.py --smoke: exit {run.returncode}: {run.stderr[-3000:]}"
    return REPORT["points"]


def get(task, method, k, one_request=True):
    hits = [p for p in points() if (p["task"], p["method"], p["k"], p["one_request"])
            == (task, method, k, one_request)]
    assert len(hits) == 1, (task, method, k, one_request, len(hits))
    return hits[0]


def test_bench_runs():
    points()
    assert "| model | task | method |" in run.stdout, run.stdout[-2000:]
    rows = [line for line in run.stdout.splitlines() if line.startswith("| s-f32 |")]
    assert len(rows) == len(EXPECTED), len(rows)


def test_machine_header():
    points()
    m = REPORT["machine"]
    for key in ("header", "date", "tree", "cpu", "cores", "kernel"):
        assert key in m, (key, m)
    assert m["cores"] >= 1 and m["tree"], m
    assert REPORT["config"]["ks"] == KS, REPORT["config"]


def test_every_point_present_once():
    keys = [(p["task"], p["method"], p["k"], p["one_request"]) for p in points()]
    assert len(keys) == len(set(keys)), "a point is there twice"
    assert set(keys) == EXPECTED, (EXPECTED - set(keys), set(keys) - EXPECTED)


def test_fields_and_ranges():
    for p in points():
        for key, kind in FIELDS.items():
            assert isinstance(p.get(key), kind), (key, p)
        assert (p["model"], p["size"], p["type"]) == ("s-f32", "s", "f32"), p
        assert p["params"] > 0 and p["problems"] == 3, p
        assert 0 <= p["accuracy"] <= 1, p
        assert p["prompt_tokens"] > 0 and p["completion_tokens"] > 0, p
        assert p["core_seconds"] > 0, p
        assert 0 < p["latency_ms_p50"] <= p["latency_ms_p90"], p
        assert all(math.isfinite(p[k]) for k in FIELDS if isinstance(p[k], float)), p


def test_pass_at_k_not_decreasing():
    for t in tasks.TASK_NAMES:
        acc = [get(t, "pass", k)["accuracy"] for k in KS]
        assert acc == sorted(acc), (t, acc)
        # pass@max k counts a problem when any of its samples is right: at least as often as the
        # vote and the best log-probability over the same samples are right.
        assert acc[-1] >= get(t, "majority", KS[-1])["accuracy"], t
        assert acc[-1] >= get(t, "logprob", KS[-1])["accuracy"], t


def test_one_sample_methods_agree():
    for t in tasks.TASK_NAMES:  # k=1: majority and logprob both pick the one sample
        assert get(t, "majority", 1)["accuracy"] == get(t, "logprob", 1)["accuracy"], t


def test_greedy_sort_right():
    # The s model sorts every held-out problem right (models/quality/README.md): an answer
    # read wrongly from the completion (a space, EOS text) would show here first.
    assert get("sort", "greedy", 1)["accuracy"] == 1.0


def test_tokens_scale_with_k():
    one = sum(get(t, "pass", 1)["completion_tokens"] for t in tasks.TASK_NAMES)
    two = sum(get(t, "pass", 2)["completion_tokens"] for t in tasks.TASK_NAMES)
    assert 1.4 <= two / one <= 2.8, (one, two)
    for t in tasks.TASK_NAMES:
        n1, n2, sep = get(t, "pass", 1), get(t, "pass", 2), get(t, "pass", 2, False)
        assert n2["prompt_tokens"] == n1["prompt_tokens"], (t, "n=2 shares one prompt")
        assert abs(sep["prompt_tokens"] - 2 * n1["prompt_tokens"]) < 1e-9, (t, "2 requests, 2 prompts")
        assert 0.5 <= sep["completion_tokens"] / n2["completion_tokens"] <= 2, t


def test_server_vote_equals_client_vote():
    for t in tasks.TASK_NAMES:
        for k in KS:
            p = get(t, "majority_server", k)
            assert p["agrees_with_majority"] == 1.0, (t, k, p)
            assert p["accuracy"] == get(t, "majority", k)["accuracy"], (t, k)


def test_estimators():
    spec = importlib.util.spec_from_file_location("quality_bench", os.path.join(SRC, "bench", "quality.py"))
    q = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(q)
    assert q.pass_at_k(4, 0, 1) == 0 and q.pass_at_k(4, 4, 1) == 1
    assert abs(q.pass_at_k(4, 1, 1) - 0.25) < 1e-12
    assert abs(q.pass_at_k(5, 2, 2) - 0.7) < 1e-12  # 1 - C(3,2)/C(5,2)
    assert q.pass_at_k(4, 1, 4) == 1 and q.pass_at_k(8, 5, 4) == 1
    assert q.majority(["x", "y"]) == "x"  # tie: the answer given first
    assert q.majority(["y", "x", "x", "y", "z"]) == "y"
    assert q.majority(["b", "a", "a"]) == "a"
    assert q.best_logprob([{"answer": "x", "logprob": -2.0}, {"answer": "y", "logprob": -1.0},
                           {"answer": "z", "logprob": -1.0}]) == "y"


def written_report():
    """The smoke run's report in a file of its own (the bench's was removed)."""
    points()
    f = tempfile.NamedTemporaryFile("w", prefix="dyad-quality-smoke-", suffix=".json", delete=False)
    json.dump(REPORT, f)
    f.close()
    return f.name


def test_verdict_report_reads_it():
    path = written_report()
    svg = path + ".svg"
    try:
        out = subprocess.run([sys.executable, os.path.join(SRC, "bench", "quality_verdict.py"), path,
                              "--svg", svg], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr[-2000:]
        assert "## The claim, per task" in out.stdout and "| s | f32 |" in out.stdout, out.stdout
        with open(svg) as f:
            assert f.read().startswith("<svg"), "the plot is no SVG"
    finally:
        os.unlink(path)
        if os.path.exists(svg):
            os.unlink(svg)


def test_plan_quality_reads_it():
    path = written_report()
    try:
        out = subprocess.run([DYAD, "plan", "quality", "--file", path, "--accuracy", "0",
                              "--task", "sort"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.count("choice: s-f32 (f32") == 1, out.stdout
    finally:
        os.unlink(path)


run_tests(dict(globals()), [])
