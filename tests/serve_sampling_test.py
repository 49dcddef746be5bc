#!/usr/bin/env python3
"""serve_sampling_test.py DYAD SOURCE_DIR — repeated sampling inside `dyad serve`.

The n samples of a prompt are prefilled once (the prompt-token counter grows by the prompt
once plus one last-prompt-token per sample, not n prompts), their forked KV blocks are all
freed when the last sample ends, samples differ at temperature > 0 and repeat with the same
seed, majority voting and log-probability selection return what their tables say, best_of
returns the best n, the limits are clear 400s, and with disaggregation the KV of one prompt
moves once for all its samples. Standard library only; prints 'N passed, N failed'."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dyad_http import MODEL, Server, run_tests  # noqa: E402

DYAD, SRC = sys.argv[1], sys.argv[2]
_unique = [0]


def unique_prompt():
    """A prompt no earlier request shares a block with (so nothing comes from the cache)."""
    _unique[0] += 1
    words = " ".join(f"word{_unique[0]}x{i}" for i in range(12))
    return f"{words}. Once upon a time, there was a little girl named Lily. She loved to play."


def complete(s, **kw):
    body = {"model": MODEL, "prompt": unique_prompt(), "max_tokens": 12, "temperature": 1.0,
            "seed": 3, **kw}
    st, r, _ = s.request("POST", "/v1/completions", body)
    assert st == 200, (st, r)
    return r


def prompt_tokens_computed(s):
    return s.metrics()["dyad_prompt_tokens_total"]


# ---------------------------------------------------------------- aggregated

def test_prompt_computed_once(agg):
    for n in (1, 4, 9):
        before = agg.settled("dyad_prompt_tokens_total")
        r = complete(agg, n=n)
        p = r["usage"]["prompt_tokens"]
        assert len(r["choices"]) == n and r["usage"]["completion_tokens"] == 12 * n
        assert agg.wait_for(lambda: prompt_tokens_computed(agg) - before == (p - 1) + n), \
            (n, p, prompt_tokens_computed(agg) - before)


def test_forked_blocks_freed(agg):
    complete(agg, n=8, max_tokens=40)
    assert agg.wait_for(lambda: agg.metrics()['dyad_kv_cache_usage_ratio{worker="0"}'] == 0)
    assert agg.metrics()["dyad_requests_running"] == 0


def test_samples_differ_and_repeat(agg):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a story."}],
            "max_tokens": 16, "temperature": 1.0, "seed": 21, "n": 4}
    a = agg.request("POST", "/v1/chat/completions", body)[1]
    b = agg.request("POST", "/v1/chat/completions", body)[1]
    ta = [c["message"]["content"] for c in a["choices"]]
    assert len(set(ta)) > 1, ta
    assert ta == [c["message"]["content"] for c in b["choices"]]
    assert [c["index"] for c in a["choices"]] == [0, 1, 2, 3]
    # the same samples one by one (n = 1 takes stream 0 only): sample 0 matches
    one = agg.request("POST", "/v1/chat/completions", {**body, "n": 1})[1]
    assert one["choices"][0]["message"]["content"] == ta[0]


def test_majority_vote(agg):
    regex = r"\b([a-z]+)\b"  # the first lowercase word is the "answer"
    r = complete(agg, n=7, dyad={"select": "majority", "answer_regex": regex}, max_tokens=10)
    assert len(r["choices"]) == 1 and r["choices"][0]["index"] == 0
    sel = r["dyad"]["selection"][0]
    assert sel["mode"] == "majority" and len(sel["samples"]) == 7
    vote = sel["vote"]
    answers = [smp["answer"] for smp in sel["samples"]]
    counted = {}
    for i, a in enumerate(answers):
        if a is not None:
            counted.setdefault(a, []).append(i)
    assert {a: v["samples"] for a, v in vote["votes"].items()} == counted
    assert all(v["count"] == len(v["samples"]) for v in vote["votes"].values())
    best = max(counted.items(), key=lambda kv: (len(kv[1]), -kv[1][0]))
    assert vote["winner"] == best[0]
    assert sel["chosen"] == [best[1][0]]
    m = re.search(regex, r["choices"][0]["text"])
    assert m and m.group(1) == vote["winner"], (r["choices"][0]["text"], vote)
    assert r["usage"]["completion_tokens"] == sum(smp["completion_tokens"] for smp in sel["samples"])


def test_majority_vote_streams_the_winner(agg):
    body = {"model": MODEL, "prompt": unique_prompt(), "max_tokens": 8, "temperature": 1.0,
            "seed": 4, "n": 5, "stream": True, "dyad": {"select": "majority"}}
    ev = agg.stream("/v1/completions", body)
    assert ev[-1] == "[DONE]"
    chunks = ev[:-1]
    assert all(c["choices"][0]["index"] == 0 for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    assert chunks[-1]["dyad"]["selection"][0]["mode"] == "majority"


def test_logprob_selection_and_best_of(agg):
    r = complete(agg, n=4, dyad={"select": "logprob"})
    sel = r["dyad"]["selection"][0]
    means = [smp["mean_logprob"] for smp in sel["samples"]]
    assert len(r["choices"]) == 1 and sel["chosen"] == [means.index(max(means))]
    assert "logprobs" not in r["choices"][0] or r["choices"][0]["logprobs"] is None
    r = complete(agg, n=2, best_of=5)
    sel = r["dyad"]["selection"][0]
    assert sel["mode"] == "best_of" and len(sel["samples"]) == 5 and len(r["choices"]) == 2
    means = [smp["mean_logprob"] for smp in sel["samples"]]
    want = sorted(range(5), key=lambda i: (-means[i], i))[:2]
    assert sel["chosen"] == want, (sel["chosen"], means)
    assert r["usage"]["completion_tokens"] == 12 * 5  # every candidate is paid for


def test_limits(agg):
    base = {"model": MODEL, "prompt": "Once", "max_tokens": 4}
    for extra, param in (({"n": 0}, "n"), ({"n": 129}, "n"), ({"n": 3, "best_of": 2}, "best_of"),
                         ({"best_of": 3, "stream": True}, "best_of"),
                         ({"dyad": {"select": "mode"}}, "dyad.select"),
                         ({"n": 3, "dyad": {"select": "majority", "answer_regex": "(x"}},
                          "dyad.answer_regex")):
        st, r, _ = agg.request("POST", "/v1/completions", {**base, **extra})
        assert st == 400 and r["error"]["param"] == param, (extra, st, r)


# ---------------------------------------------------------------- disaggregated

def test_disagg_moves_kv_once(agg, dis):
    body = {"model": MODEL, "prompt": unique_prompt() * 3, "max_tokens": 10, "temperature": 0.8,
            "seed": 8, "n": 4}
    before = dis.settled("dyad_kv_transfers_total")
    r = dis.request("POST", "/v1/completions", body)[1]
    assert dis.metrics()["dyad_kv_transfers_total"] - before == 1
    for c in r["dyad"]["choices"]:
        assert c["prefill_worker"] == 0 and c["kv_transfer"]["bytes"] > 0, r["dyad"]
    want = agg.request("POST", "/v1/completions", body)[1]
    assert [c["text"] for c in r["choices"]] == [c["text"] for c in want["choices"]]


def test_threads_draw_the_same(agg, dis, threaded):
    """A batch's draws split across 3 engine threads give 1 thread's samples."""
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 12,
            "temperature": 1.0, "seed": 33, "n": 8}
    one = agg.request("POST", "/v1/completions", body)[1]
    three = threaded.request("POST", "/v1/completions", body)[1]
    ta = [c["text"] for c in one["choices"]]
    assert len(set(ta)) > 1, ta
    assert ta == [c["text"] for c in three["choices"]], (ta, three["choices"])


def main():
    run_tests(globals(), [Server(DYAD, "--workers", "1", "--threads-per-worker", "1"),
                          Server(DYAD, "--prefill-workers", "1", "--decode-workers", "1",
                                 "--disagg-min-tokens", "16"),
                          Server(DYAD, "--workers", "1", "--threads-per-worker", "3")])


main()
