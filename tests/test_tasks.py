#!/usr/bin/env python3
"""test_tasks.py [DYAD] [SOURCE_DIR] — unit tests of train/tasks.py, the quality axis's task
families: the generators are deterministic from a seed (and equal to the prompts the trained
models were evaluated on), `solve` agrees with every generator, `check` accepts the right answer
and rejects near misses, the held-out sets and the training stream never overlap, and `heldout`
refuses more than HELDOUT_MAX problems. Standard library only, no server: DYAD is ignored (ctest
passes it to every tests/*.py). Prints 'N passed, N failed'."""
import hashlib
import json
import os
import random
import sys

SRC = sys.argv[2] if len(sys.argv) > 2 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(SRC, "train"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tasks  # noqa: E402
from dyad_http import run_tests  # noqa: E402

DRAWS = 5000  # per task, for solve and check

# The first held-out problems of each task, and a digest of all HELDOUT_MAX of them: the trained
# models (models/quality/) were trained around exactly these sets, so a change to a generator,
# to the seeding or to the de-duplication must show here.
HELDOUT_HEAD = {
    "add": [("add 7+9=", "16"), ("add 36+786=", "822"), ("add 197+2=", "199")],
    "sort": [("sort 4 6 7 6 7 5=", "4 5 6 6 7 7"), ("sort 6 0 9 3 4 4=", "0 3 4 4 6 9"),
             ("sort 5 7 9 8=", "5 7 8 9")],
    "expr": [("expr (3*8)*2=", "48"), ("expr 2+(9+3)=", "14"), ("expr 1*(4+4)=", "8")],
    "prog": [("prog c=4-0;a=c-3;b=a+a;a?", "1"), ("prog b=7+6;c=b+b;a=3-1;b?", "13"),
             ("prog c=4-5;c=c+7;a=1-6;a?", "-5")],
}
HELDOUT_DIGEST = {"add": "a649284883b45475", "sort": "4312b4eb8422465b",
                  "expr": "87ad66e5e3faa6c9", "prog": "860cef5b8c761ab7"}
# Each generator from random.Random(7), two draws.
SEEDED = {
    "add": [("add 19+83=", "102"), ("add 1+96=", "97")],
    "sort": [("sort 2 6 0 1 8 1=", "0 1 1 2 6 8"), ("sort 9 0 8 3 0 1=", "0 0 1 3 8 9")],
    "expr": [("expr 5*2+6=", "16"), ("expr 8*(1+5)=", "48")],
    "prog": [("prog b=2+6;a=1+b;a=b-a;a?", "-1"), ("prog c=1+3;c=c+0;b=c+8;b?", "12")],
}
# ... and a digest of its first 500 draws.
SEEDED_DIGEST = {"add": "12a5738f92b3bcf0", "sort": "892ab6b4773784a5",
                 "expr": "dd37cc3f281b778c", "prog": "6b31f25eb60b2156"}
TRAIN_HEAD = [("prog", "prog b=1-0;c=7-6;b=0+8;b?", "8"), ("prog", "prog b=4+3;a=b-b;c=a+0;c?", "0"),
              ("sort", "sort 7 3 4 4 1=", "1 3 4 4 7"), ("expr", "expr (8*9)+9=", "81")]


def digest(problems):
    return hashlib.sha256("\n".join(p + "\t" + a for p, a in problems).encode()).hexdigest()[:16]


def draws(task, count, seed="solve"):
    rng = random.Random(f"{seed}/{task}")
    return [tasks.TASKS[task](rng) for _ in range(count)]


def test_task_names():
    assert tasks.TASK_NAMES == ["add", "sort", "expr", "prog"], tasks.TASK_NAMES
    assert set(tasks.TASKS) == set(tasks.TASK_NAMES)


def test_generators_deterministic():
    for t in tasks.TASK_NAMES:
        rng = random.Random(7)
        got = [tasks.TASKS[t](rng) for _ in range(2)]
        assert got == SEEDED[t], (t, got)
        rng = random.Random(7)
        got = digest([tasks.TASKS[t](rng) for _ in range(500)])
        assert got == SEEDED_DIGEST[t], (t, got)
        assert draws(t, 200, "again") == draws(t, 200, "again"), t  # same seed, same prompts
        assert draws(t, 200, "one") != draws(t, 200, "two"), t  # the seed matters


def test_heldout_fixed():
    for t in tasks.TASK_NAMES:
        h = tasks.heldout(t, tasks.HELDOUT_MAX)
        assert h[:3] == HELDOUT_HEAD[t], (t, h[:3])
        assert digest(h) == HELDOUT_DIGEST[t], (t, digest(h))
        assert tasks.heldout(t, 10) == h[:10], t  # a shorter set is a prefix of a longer one
        assert len({p for p, _ in h}) == len(h), t  # distinct prompts


def test_heldout_matches_trained_models():
    """The prompts models/quality/SIZE.greedy.json were evaluated on are the held-out sets."""
    for size in ("s", "m", "l"):
        path = os.path.join(SRC, "models", "quality", f"{size}.greedy.json")
        with open(path) as f:
            greedy = json.load(f)
        for t in tasks.TASK_NAMES:
            prompts = [item["prompt"] for item in greedy[t]]
            assert prompts == [p for p, _ in tasks.heldout(t, len(prompts))], (size, t)


def test_train_stream_fixed():
    stream = tasks.TrainStream(1, tasks.HELDOUT_MAX)
    got = [stream.next() for _ in range(len(TRAIN_HEAD))]
    assert got == TRAIN_HEAD, got


def test_solve_agrees_with_generators():
    for t in tasks.TASK_NAMES:
        for prompt, answer in draws(t, DRAWS):
            assert tasks.solve(t, prompt) == answer, (t, prompt, answer, tasks.solve(t, prompt))
            assert tasks.check(t, prompt, answer), (t, prompt, answer)


def test_solve_known_answers():
    cases = [("add", "add 999+999=", "1998"), ("add", "add 0+0=", "0"),
             ("sort", "sort 9 0 9 1=", "0 1 9 9"), ("expr", "expr 2+3*4=", "14"),
             ("expr", "expr (2+3)*4=", "20"), ("expr", "expr 2-3-4=", "-5"),
             ("expr", "expr 2-(3-4)=", "3"), ("expr", "expr 0-9*9=", "-81"),
             ("prog", "prog a=1+2;b=a-5;a=b+a;a?", "1"), ("prog", "prog c=3-9;c=c-c;b=c+1;b?", "1"),
             ("prog", "prog a=0-9;b=a-a;a=a-1;a?", "-10")]
    for t, prompt, want in cases:
        assert tasks.solve(t, prompt) == want, (t, prompt, tasks.solve(t, prompt), want)


def near_misses(task, answer):
    """Wrong answers a model could write: off by one, empty, the spaces that matter wrong."""
    wrong = ["", " ", answer + answer[-1], answer[:-1]]
    if task == "sort":
        xs = answer.split()
        wrong += [answer.replace(" ", ""), answer.replace(" ", "  "), " ".join(xs[:-1]),
                  " ".join(xs + [xs[-1]]), " ".join(reversed(xs)) if xs != xs[::-1] else answer + " 0"]
        i = next((i for i in range(len(xs) - 1) if xs[i] != xs[i + 1]), None)
        if i is not None:  # two different neighbours swapped
            wrong.append(" ".join(xs[:i] + [xs[i + 1], xs[i]] + xs[i + 2:]))
    else:
        v = int(answer)
        wrong += [str(v + 1), str(v - 1), str(-v) if v else "-1", "0" + answer, answer + " 0",
                  answer[0] + " " + answer[1:] if len(answer) > 1 else answer + " 1"]
    return [w for w in wrong if w != answer]


def test_check_accepts_and_rejects():
    for t in tasks.TASK_NAMES:
        for prompt, answer in draws(t, DRAWS // 5, "check"):
            assert tasks.check(t, prompt, answer), (t, prompt, answer)
            assert tasks.check(t, prompt, f"  {answer} "), (t, prompt, answer)  # surrounding spaces
            for w in near_misses(t, answer):
                assert not tasks.check(t, prompt, w), (t, prompt, answer, w)


def test_check_unknown_task():
    for bad in ("mul", "", "ADD"):
        try:
            tasks.check(bad, "add 1+1=", "2")
        except ValueError:
            continue
        raise AssertionError(f"check accepted task {bad!r}")


def test_heldout_and_training_disjoint():
    heldout = {p for t in tasks.TASK_NAMES for p, _ in tasks.heldout(t, tasks.HELDOUT_MAX)}
    stream = tasks.TrainStream(1, tasks.HELDOUT_MAX)
    seen = set()
    for _ in range(20000):
        _, prompt, _ = stream.next()
        assert prompt not in heldout, prompt
        seen.add(prompt)
    # expr has 2430 distinct prompts, 1000 of them held out: the stream must have met and
    # skipped some, else the filter was never exercised.
    assert stream.skipped > 0, "the training stream skipped no held-out prompt"
    # Another training seed, and a stream holding out fewer: still disjoint from what it holds out.
    small = tasks.TrainStream(2, 50)
    held50 = {p for t in tasks.TASK_NAMES for p, _ in tasks.heldout(t, 50)}
    for _ in range(5000):
        assert small.next()[1] not in held50


def test_heldout_refuses_too_many():
    for t in tasks.TASK_NAMES:
        assert len(tasks.heldout(t, tasks.HELDOUT_MAX)) == tasks.HELDOUT_MAX
        assert tasks.heldout(t, 0) == []
        for bad in (tasks.HELDOUT_MAX + 1, 5000, -1):
            try:
                tasks.heldout(t, bad)
            except ValueError:
                continue
            raise AssertionError(f"heldout({t!r}, {bad}) did not refuse")
    assert tasks.HELDOUT_MAX == 1000


run_tests(dict(globals()), [])
