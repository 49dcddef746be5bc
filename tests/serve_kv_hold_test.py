#!/usr/bin/env python3
"""serve_kv_hold_test.py DYAD SOURCE_DIR — the tool-call hold (docs/kv-tiers.md), end to end.

A conversation (dyad.session) ends a turn; other prompts push its KV out of a small KV cache
into the host tier; then:
- with dyad.hold.expected_ms, the worker brings the blocks back into the KV cache before the
  next turn is due, which then finds them there (no load at its arrival);
- without a hint, an answer that called a tool teaches the frontend that tool's duration, and
  the next call of it is prefetched on that estimate;
- a hold expected back later than --kv-hold-disk-after waits on disk and comes up from there;
- --kv-hold pin keeps the blocks in the KV cache instead; a hold past --kv-hold-ttl is let go.
Bad hints are 400s naming the parameter. Standard library only; prints 'N passed, N failed'."""
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dyad_http import MODEL, run_tests  # noqa: E402
from dyad_http import Server as _Server  # noqa: E402

DYAD = sys.argv[1]
STORY = "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun with her friends. " * 2
TIERS = ["--workers", "1", "--kv-blocks", "24", "--kv-host-mem", "16"]
ALARM = {"type": "function", "function": {"name": "alarm", "parameters": {
    "type": "object", "properties": {"hour": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["hour"]}}}


def Server(*args):
    return _Server(DYAD, *args)


def complete(s, prompt, n=8, **dyad):
    body = {"model": MODEL, "prompt": prompt, "max_tokens": n, "temperature": 0}
    if dyad:
        body["dyad"] = dyad
    st, r, _ = s.request("POST", "/v1/completions", body)
    assert st == 200, r
    return r


def push_out(s, k=10):
    for i in range(k):
        complete(s, f"{i} The big dog ran fast to the park and saw a bird and a cat by the lake. " * 2)


def counter(s, name):
    return s.metrics().get(name + '{worker="0"}', 0)


def kv_tier(r):
    return r["dyad"]["choices"][0].get("kv_tier")


def settle(s, name, want):
    """Waits (bounded) for a worker gauge reported by STATS to read `want`."""
    for _ in range(100):
        if counter(s, name) == want:
            return
        time.sleep(0.05)
    raise AssertionError(f"{name} = {counter(s, name)}, not {want}")


def at_least(s, name, want, tries=100):
    """Waits (bounded) for a worker counter or gauge reported by STATS to reach `want`."""
    for _ in range(tries):
        if counter(s, name) >= want:
            return
        time.sleep(0.05)
    raise AssertionError(f"{name} = {counter(s, name)}, not >= {want}")


def until(t0, seconds):
    time.sleep(max(0.0, t0 + seconds - time.monotonic()))


def test_hinted_hold_is_prefetched_before_the_next_turn():
    s = Server(*TIERS)
    try:
        t0 = time.monotonic()
        first = complete(s, STORY, session="a", hold={"expected_ms": 2500})
        settle(s, "dyad_kv_hold_sessions", 1)  # (STATS follow the answer by a moment)
        at_least(s, "dyad_kv_hold_pinned", 3)  # its host-tier copies, as their copies end
        push_out(s)
        if time.monotonic() - t0 < 2.0:  # (a slow build may be past it already)
            assert counter(s, "dyad_kv_hold_prefetched_blocks_total") == 0  # not due yet
        until(t0, 3.0)
        assert counter(s, "dyad_kv_hold_prefetched_blocks_total") >= 3
        again = complete(s, STORY + first["choices"][0]["text"], session="a")
        assert kv_tier(again) is None, again["dyad"]  # in the KV cache already: nothing to load
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= 48, again["usage"]
        # This turn called no tool and gave no hint: the frontend lets its hold go.
        settle(s, "dyad_kv_hold_sessions", 0)
        settle(s, "dyad_kv_hold_pinned", 0)
        # The same without a hint: no prefetch, so the next turn loads its blocks itself.
        complete(s, STORY.replace("Lily", "Anna"), session="b")
        push_out(s)
        later = complete(s, STORY.replace("Lily", "Anna") + " And", session="b")
        assert kv_tier(later) and kv_tier(later)["outcome"] == "loaded", later["dyad"]
    finally:
        assert s.stop() == 0


def test_long_wait_is_parked_on_disk():
    """A hold expected back later than --kv-hold-disk-after waits on disk: its host copies
    are let go (other prompts then push them out of a 1 MiB host tier), its blocks come back
    up from disk ahead of the next turn, which finds them in the KV cache."""
    with tempfile.TemporaryDirectory() as d:
        s = Server("--workers", "1", "--kv-blocks", "24", "--kv-host-mem", "1",
                   "--kv-disk-dir", d, "--kv-hold-disk-after", "1")
        try:
            t0 = time.monotonic()
            first = complete(s, STORY, session="p", hold={"expected_ms": 7000})
            settle(s, "dyad_kv_hold_sessions", 1)
            at_least(s, "dyad_kv_hold_parked_blocks_total", 3)
            at_least(s, "dyad_kv_hold_pinned", 3)  # now disk slots
            disk_out = 'dyad_kv_tier_copies_total{worker="0",tier="disk",direction="out"}'
            before = s.metrics().get(disk_out, 0)
            push_out(s, 16)  # the host tier's unpinned slots are reclaimed
            assert time.monotonic() - t0 < 6.0, "too slow to test the timing"
            until(t0, 7.0)
            at_least(s, "dyad_kv_hold_prefetched_blocks_total", 3, 40)  # copies end a moment later
            assert s.metrics().get(disk_out, 0) - before >= 1  # (some) came up from disk
            again = complete(s, STORY + first["choices"][0]["text"], session="p")
            assert kv_tier(again) is None, again["dyad"]
            assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= 48, again["usage"]
        finally:
            assert s.stop() == 0


def chat(s, messages, **kw):
    body = {"model": MODEL, "messages": messages, "max_tokens": 160, "temperature": 0, **kw}
    st, r, _ = s.request("POST", "/v1/chat/completions", body)
    assert st == 200, (st, r)
    return r


def test_tool_duration_is_learned_and_prefetched():
    s = Server(*TIERS)
    try:
        ask = [{"role": "user", "content": "Wake me up early, please. Set the alarm."}]
        forced = {"tools": [ALARM], "tool_choice": "required", "parallel_tool_calls": False,
                  "dyad": {"session": "c"}}
        r = chat(s, ask, **forced)
        assert r["choices"][0]["finish_reason"] == "tool_calls", r
        call = r["choices"][0]["message"]["tool_calls"][0]
        turn = ask + [{"role": "assistant", "content": None, "tool_calls": [call]},
                      {"role": "tool", "tool_call_id": call["id"], "content": "set"}]
        t0 = time.monotonic()
        time.sleep(0.8)  # the "tool" runs 0.8 s: the frontend learns it at the next turn
        r = chat(s, turn, **forced)
        assert r["choices"][0]["finish_reason"] == "tool_calls", r
        t1 = time.monotonic()
        assert t1 - t0 < 1.6
        # This call is expected back in about 0.8 s: prefetched around then.
        push_out(s)
        until(t1, 1.5)
        assert counter(s, "dyad_kv_hold_prefetched_blocks_total") >= 3
    finally:
        assert s.stop() == 0


def test_pin_keeps_the_blocks_in_the_kv_cache():
    s = Server(*TIERS, "--kv-hold", "pin")
    try:
        first = complete(s, STORY, session="p", hold={"expected_ms": 60000})
        settle(s, "dyad_kv_hold_sessions", 1)
        assert counter(s, "dyad_kv_hold_pinned") >= 3
        push_out(s)  # the rest of the pool churns around the pinned blocks
        again = complete(s, STORY + first["choices"][0]["text"], session="p")
        assert kv_tier(again) is None, again["dyad"]
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= 48
        settle(s, "dyad_kv_hold_pinned", 0)
    finally:
        assert s.stop() == 0


def test_ttl_lets_a_hold_go():
    s = Server(*TIERS, "--kv-hold-ttl", "0.3")
    try:
        complete(s, STORY, session="t", hold={"expected_ms": 60000})
        for _ in range(100):
            if counter(s, "dyad_kv_hold_expired_total") == 1:
                break
            time.sleep(0.05)
        assert counter(s, "dyad_kv_hold_expired_total") == 1
        assert counter(s, "dyad_kv_hold_sessions") == 0 and counter(s, "dyad_kv_hold_pinned") == 0
    finally:
        assert s.stop() == 0


def test_bad_hints_are_400(s):
    cases = [
        ({"session": "x", "hold": {"expected_ms": -1}}, "dyad.hold.expected_ms"),
        ({"session": "x", "hold": {"expected_ms": 1e12}}, "dyad.hold.expected_ms"),
        ({"session": "x", "hold": {"expected_ms": "soon"}}, "dyad.hold.expected_ms"),
        ({"session": "x", "hold": {}}, "dyad.hold.expected_ms"),
        ({"session": "x", "hold": {"expected_ms": 5, "when": 1}}, "dyad.hold.when"),
        ({"hold": {"expected_ms": 5}}, "dyad.hold"),
        ({"session": ""}, "dyad.session"),
        ({"session": "x" * 300}, "dyad.session"),
        ({"session": 7}, "dyad.session"),
    ]
    for dyad, param in cases:
        st, r, _ = s.request("POST", "/v1/completions",
                             {"model": MODEL, "prompt": "Hi", "max_tokens": 2, "dyad": dyad})
        assert st == 400 and r["error"]["param"] == param, (dyad, st, r)
    st, r, _ = s.request("POST", "/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 2,
                                                     "n": 2, "dyad": {"session": "x"}})
    assert st == 400 and r["error"]["param"] == "dyad.session", r


def test_bench_agentic_runs_sessions_with_holds():
    import json
    import subprocess
    s = Server(*TIERS)
    try:
        out = subprocess.run([DYAD, "bench", "agentic", "--url", f"http://{s.host}:{s.port}",
                              "--sessions", "3", "--turns", "3", "--isl", "64", "--turn-tokens",
                              "32", "--osl", "4", "--tool-ms", "300", "--tool-dist", "fixed",
                              "--vocab-size", "512", "--background-rate", "4",
                              "--background-isl", "64", "--background-osl", "8", "--json"],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        r = json.loads(out.stdout)
        assert r["turns_done"] == 9 and r["turns_failed"] == 0, r
        assert r["continuation_ttft_ms"]["n"] == 6 and r["first_ttft_ms"]["n"] == 3, r
        assert r["moved"]["host_in"] > 0, r  # write-through to the host tier
        # every hinted hold was either prefetched or found its blocks still in the cache
        assert r["moved"]["prefetched_blocks"] >= 0 and r["moved"]["failed_loads"] == 0, r
        bad = subprocess.run([DYAD, "bench", "agentic", "--tool-dist", "pareto", "--tool-shape",
                              "1"], capture_output=True, text=True, timeout=30)
        assert bad.returncode == 2 and "--tool-shape" in bad.stderr, bad
    finally:
        assert s.stop() == 0


def test_pin_needs_the_tiers():
    import subprocess
    out = subprocess.run([DYAD, "serve", "--kv-hold", "pin"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 2 and "--kv-hold pin needs --kv-host-mem" in out.stderr, out


if __name__ == "__main__":
    run_tests(globals(), [Server(*TIERS)])
