#!/usr/bin/env python3
"""serve_kv_tiers_test.py DYAD SOURCE_DIR — the lower KV tiers (docs/kv-tiers.md), end to end.

A worker with a small KV cache serves a prompt, then enough other prompts to push it out of
the cache; asked again, the prompt's blocks come back from the host tier (or the disk tier)
and the answer is the same text as the first time. Faults: a disk tier whose directory
cannot be written is off from the start, one that hits a file-size limit mid-way switches
itself off, a disk block overwritten on disk is never used (the prompt is recomputed), and a
worker killed with its tiers is replaced with empty ones. Standard library only; prints
'N passed, N failed'."""
import os
import resource
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dyad_http import MODEL, run_tests  # noqa: E402
from dyad_http import Server as _Server  # noqa: E402

DYAD = sys.argv[1]
STORY = "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun with her friends. " * 2


def Server(*args):
    return _Server(DYAD, *args)


SMALL = ["--workers", "1", "--kv-blocks", "24"]  # the prompts below fill it three times over


def complete(s, prompt, n=8):
    st, r, _ = s.request("POST", "/v1/completions",
                         {"model": MODEL, "prompt": prompt, "max_tokens": n, "temperature": 0})
    assert st == 200, r
    return r


def push_out(s, k=10):
    """Prompts that share nothing with STORY, enough to evict it from a 24-block cache."""
    for i in range(k):
        complete(s, f"{i} The big dog ran fast to the park and saw a bird and a cat by the lake. " * 2)


def kv_tier(r):
    return r["dyad"]["choices"][0].get("kv_tier")


def metric(s, name, **labels):
    want = name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
    return s.metrics().get(want, 0)


def settle(s, name, minimum, **labels):
    """Waits (bounded) until a worker counter reported by STATS reaches minimum."""
    for _ in range(100):
        if metric(s, name, **labels) >= minimum:
            return
        time.sleep(0.05)
    raise AssertionError(f"{name}{labels} stayed below {minimum}: {metric(s, name, **labels)}")


def worker_pid(s):
    st, h, _ = s.request("GET", "/health")
    return h["workers"][0]["pid"]


def disk_file_fd(pid):
    """The worker's (unlinked) disk-tier file, as a path under /proc that can be opened."""
    d = f"/proc/{pid}/fd"
    for fd in os.listdir(d):
        target = os.readlink(os.path.join(d, fd))
        if "dyad-kv-" in target and target.endswith("(deleted)"):
            return os.path.join(d, fd)
    raise AssertionError("no disk-tier file among the worker's descriptors")


def test_host_tier_brings_a_prefix_back():
    s = Server(*SMALL, "--kv-host-mem", "16")
    try:
        first = complete(s, STORY)
        assert kv_tier(first) is None, first["dyad"]
        push_out(s)
        again = complete(s, STORY)
        t = kv_tier(again)
        assert t and t["outcome"] == "loaded", again["dyad"]
        assert t["loaded_tokens"] >= 48 and t["loaded_tokens"] % 16 == 0, t
        assert t["load_ms_estimate"] is not None and t["load_ms"] >= 0
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= t["loaded_tokens"]
        assert again["choices"][0]["text"] == first["choices"][0]["text"]
        settle(s, "dyad_kv_tier_prompts_total", 1, worker=0, outcome="loaded")
        m = s.metrics()
        assert m["dyad_kv_tier_load_seconds_count"] == 1, m["dyad_kv_tier_load_seconds_count"]
        assert m["dyad_kv_tier_recompute_estimate_seconds_count"] == 1
        assert metric(s, "dyad_kv_tier_up", worker=0, tier="host") == 1
        assert metric(s, "dyad_kv_tier_up", worker=0, tier="disk") == 0
        assert metric(s, "dyad_kv_tier_copies_total", worker=0, tier="host", direction="out") >= 3
        assert metric(s, "dyad_kv_tier_bytes_total", worker=0, tier="host", direction="in") > 0
    finally:
        assert s.stop() == 0


def test_router_follows_a_prefix_into_the_host_tier():
    # Two workers: after STORY left the first one's KV cache for its host tier, the router's
    # index (fed by tier-tagged events) still sends STORY back there, credited as a host hit.
    s = Server("--workers", "2", "--threads-per-worker", "1", "--kv-blocks", "24",
               "--kv-host-mem", "16")
    try:
        first = complete(s, STORY)
        home = first["dyad"]["choices"][0]["worker"]
        # Prompts with nothing in common tie between the workers and go either way at random;
        # 40 of them leave fewer than 7 (which would not fill a 24-block cache) with `home`
        # about once in 10^5 runs.
        push_out(s, 40)
        again = complete(s, STORY)
        assert again["dyad"]["choices"][0]["worker"] == home, (first["dyad"], again["dyad"])
        t = kv_tier(again)
        assert t and t["outcome"] == "loaded", again["dyad"]
        assert again["choices"][0]["text"] == first["choices"][0]["text"]
        assert s.metrics()['dyad_router_overlap_tier_blocks_total{tier="host"}'] >= 3
    finally:
        assert s.stop() == 0


def test_write_back_copies_before_eviction():
    s = Server(*SMALL, "--kv-host-mem", "16", "--kv-offload", "write-back")
    try:
        first = complete(s, STORY)
        push_out(s)
        again = complete(s, STORY)
        assert kv_tier(again) and kv_tier(again)["outcome"] == "loaded", again["dyad"]
        assert again["choices"][0]["text"] == first["choices"][0]["text"]
    finally:
        assert s.stop() == 0


def disk_server(d, *extra):
    # 1 MiB of host tier is about 51 blocks of this model: a dozen other prompts push STORY
    # out of it too, and it is asked for once, so --kv-disk-min-uses 1.
    return Server(*SMALL, "--kv-host-mem", "1", "--kv-disk-dir", d, "--kv-disk-mem", "0.01",
                  "--kv-disk-min-uses", "1", *extra)


def test_disk_tier_brings_a_prefix_back():
    with tempfile.TemporaryDirectory() as d:
        s = disk_server(d)
        try:
            assert os.listdir(d) == [], "the disk file is unlinked once open"
            first = complete(s, STORY)
            push_out(s, 14)
            settle(s, "dyad_kv_tier_copies_total", 3, worker=0, tier="disk", direction="in")
            again = complete(s, STORY)
            assert kv_tier(again) and kv_tier(again)["outcome"] == "loaded", again["dyad"]
            assert again["choices"][0]["text"] == first["choices"][0]["text"]
            settle(s, "dyad_kv_tier_copies_total", 1, worker=0, tier="disk", direction="out")
            assert metric(s, "dyad_kv_tier_up", worker=0, tier="disk") == 1
        finally:
            assert s.stop() == 0


def test_corrupt_disk_block_is_recomputed():
    with tempfile.TemporaryDirectory() as d:
        s = disk_server(d)
        try:
            first = complete(s, STORY)
            push_out(s, 14)
            settle(s, "dyad_kv_tier_copies_total", 3, worker=0, tier="disk", direction="in")
            with open(disk_file_fd(worker_pid(s)), "r+b") as f:  # every block overwritten
                size = f.seek(0, os.SEEK_END)
                f.seek(0)
                f.write(b"\x5a" * size)
            again = complete(s, STORY)
            t = kv_tier(again)
            assert t and t["outcome"] == "load_failed" and t["loaded_tokens"] == 0, again["dyad"]
            assert again["choices"][0]["text"] == first["choices"][0]["text"]
            settle(s, "dyad_kv_tier_bad_blocks_total", 1, worker=0, tier="disk")
            settle(s, "dyad_kv_tier_prompts_total", 1, worker=0, outcome="load_failed")
            # The bad blocks are gone: the next time the prompt is simply computed (or found
            # in the KV cache), never loaded from them.
            third = complete(s, STORY)
            assert kv_tier(third) is None or kv_tier(third)["outcome"] != "load_failed"
            assert third["choices"][0]["text"] == first["choices"][0]["text"]
        finally:
            assert s.stop() == 0


def test_unwritable_disk_dir_switches_the_tier_off():
    s = Server(*SMALL, "--kv-host-mem", "1", "--kv-disk-dir", "/nonexistent/dyad-kv")
    try:
        first = complete(s, STORY)
        push_out(s)
        assert complete(s, STORY)["choices"][0]["text"] == first["choices"][0]["text"]
        assert metric(s, "dyad_kv_tier_up", worker=0, tier="disk") == 0
        assert metric(s, "dyad_kv_tier_up", worker=0, tier="host") == 1
    finally:
        assert s.stop() == 0
    s.log.seek(0)
    assert "disk tier off: cannot create /nonexistent/dyad-kv/" in s.log.read()


def test_full_disk_switches_the_tier_off():
    with tempfile.TemporaryDirectory() as d:
        s = disk_server(d)
        try:
            # A file-size limit of one block: the second block written fails as a full disk would.
            resource.prlimit(worker_pid(s), resource.RLIMIT_FSIZE, (20480, 20480))
            first = complete(s, STORY)
            push_out(s, 14)
            settle(s, "dyad_kv_tier_errors_total", 1, worker=0, tier="disk")
            assert metric(s, "dyad_kv_tier_up", worker=0, tier="disk") == 0
            assert metric(s, "dyad_kv_tier_blocks", worker=0, tier="disk") == 0
            assert complete(s, STORY)["choices"][0]["text"] == first["choices"][0]["text"]
        finally:
            assert s.stop() == 0
        s.log.seek(0)
        assert "disk tier off: File too large" in s.log.read()


def test_killed_worker_comes_back_with_empty_tiers():
    s = Server(*SMALL, "--kv-host-mem", "16")
    try:
        first = complete(s, STORY)
        settle(s, "dyad_kv_tier_blocks", 3, worker=0, tier="host")
        old = worker_pid(s)
        os.kill(old, 9)
        for _ in range(200):
            st, h, _ = s.request("GET", "/health")
            if st == 200 and h["workers"][0]["pid"] != old and h["workers"][0]["up"]:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the worker was not replaced")
        again = complete(s, STORY)
        assert kv_tier(again) is None, again["dyad"]  # nothing survived in the new worker
        assert again["choices"][0]["text"] == first["choices"][0]["text"]
    finally:
        s.stop()


if __name__ == "__main__":
    run_tests(globals(), [])
