#!/usr/bin/env python3
"""serve_disagg_test.py DYAD SOURCE_DIR — disaggregated serving over real HTTP.

Same answers as aggregated serving (greedy and sampled, shared memory and TCP), short prompts
kept local, transfer bytes and time reported, and the faults: a prefill worker killed while
prefilling (no token lost or duplicated), a decode worker killed (clear error, replaced), a
stalled prefill worker (falls back to local prefill after --xfer-timeout); the transfer in
the request log and in `dyad bench` reports. Standard library
only; prints 'N passed, N failed'."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dyad_http import MODEL, Server, run_tests  # noqa: E402

DYAD, SRC = sys.argv[1], sys.argv[2]
LONG = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. " * 6
SHORT = "Once upon a time"
_fresh = [0]


def fresh():
    """A long prompt no server has seen: a cached one would (rightly) be prefilled locally."""
    _fresh[0] += 1
    return f"Story {_fresh[0]}. " + LONG


def ask(s, prompt=LONG, **kw):
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 40, "temperature": 0, **kw}
    st, r, _ = s.request("POST", "/v1/completions", body)
    assert st == 200, (st, r)
    return r


def health(s):
    return s.request("GET", "/health")[1]


def test_same_answers_and_transfer(agg, dis, tcp):
    for kw in ({}, {"temperature": 0.9, "seed": 5}, {"temperature": 1.2, "top_k": 20, "seed": 9, "n": 2}):
        p = fresh()
        want = [c["text"] for c in ask(agg, prompt=p, **kw)["choices"]]
        for s in (dis, tcp):
            r = ask(s, prompt=p, **kw)
            assert [c["text"] for c in r["choices"]] == want, (kw, r["choices"], want)
            for c in r["dyad"]["choices"]:
                assert c["prefill_worker"] == 0, r["dyad"]
                assert c["kv_transfer"]["bytes"] > 0 and c["kv_transfer"]["seconds"] >= 0
    for s in (dis, tcp):
        m = s.metrics()
        # three requests, one transfer each: the n = 2 samples share theirs
        assert m["dyad_kv_transfers_total"] >= 3 and m["dyad_kv_transfer_bytes_total"] > 0
        assert m['dyad_prefill_total{where="remote"}'] >= 3


def test_streaming_same_answers(agg, dis, tcp):
    body = {"model": MODEL, "prompt": fresh(), "max_tokens": 30, "temperature": 0, "stream": True}
    want = "".join(e["choices"][0]["text"] for e in agg.stream("/v1/completions", body)[:-1])
    ev = dis.stream("/v1/completions", body)
    assert "".join(e["choices"][0]["text"] for e in ev[:-1]) == want
    assert ev[-2]["dyad"]["choices"][0]["prefill_worker"] == 0


def test_short_prompt_stays_local(agg, dis, tcp):
    before = dis.metrics()['dyad_prefill_total{where="local"}']
    r = ask(dis, prompt=SHORT)
    assert r["dyad"]["choices"][0]["prefill_worker"] is None
    assert r["choices"][0]["text"] == ask(agg, prompt=SHORT)["choices"][0]["text"]
    assert dis.metrics()['dyad_prefill_total{where="local"}'] == before + 1


def test_prefill_worker_dies_mid_request(agg, dis, tcp):
    p = fresh()
    want = ask(agg, prompt=p, max_tokens=60)["choices"][0]["text"]
    pid = health(dis)["workers"][0]["pid"]
    results, errors = [], []

    def one(i):
        try:
            results.append(ask(dis, prompt=p + " " * i, max_tokens=60))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=one, args=(0,)) for _ in range(6)]
    for t in threads:
        t.start()
    time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert len(results) == 6
    for r in results:  # every token exactly once, the same text as aggregated serving
        assert r["choices"][0]["text"] == want, r["choices"][0]["text"]
        assert r["usage"]["completion_tokens"] == 60
    assert dis.wait_for(lambda: health(dis)["workers"][0]["pid"] != pid and health(dis)["workers"][0]["up"])


def test_decode_worker_dies(agg, dis, tcp):
    """A decode worker killed mid-stream: the stream ends with an error event (tokens already
    sent stay sent; nothing is rerun), and the worker is replaced."""
    pid = health(dis)["workers"][1]["pid"]
    c = dis.conn()
    c.request("POST", "/v1/completions", body=json.dumps(
        {"model": MODEL, "prompt": fresh(), "max_tokens": 300, "ignore_eos": True, "stream": True}),
        headers={"Content-Type": "application/json"})
    r = c.getresponse()
    first = r.read1(4096).decode()
    assert first.startswith("data: {")
    os.kill(pid, signal.SIGKILL)
    rest = r.read().decode()
    c.close()
    events = [f[len("data: "):] for f in (first + rest).split("\n\n") if f.startswith("data: ")]
    assert events[-1] == "[DONE]"
    err = json.loads(events[-2])
    assert "error" in err and "died" in err["error"]["message"], events[-3:]
    assert dis.wait_for(lambda: health(dis)["workers"][1]["pid"] != pid and health(dis)["workers"][1]["up"])
    p = fresh()
    assert ask(dis, prompt=p)["choices"][0]["text"] == ask(agg, prompt=p)["choices"][0]["text"]


def test_stalled_prefill_falls_back():
    s = Server(DYAD, "--xfer-timeout", "1")
    agg = Server(DYAD, "--workers", "1")
    try:
        ask(s)  # warm up
        pid = health(s)["workers"][0]["pid"]
        os.kill(pid, signal.SIGSTOP)
        t0 = time.time()
        p = fresh()
        r = ask(s, prompt=p)
        assert time.time() - t0 < 20
        assert r["dyad"]["choices"][0]["prefill_worker"] is None
        assert r["choices"][0]["text"] == ask(agg, prompt=p)["choices"][0]["text"]
        m = s.metrics()
        assert m["dyad_kv_transfer_timeouts_total"] >= 1
        assert s.wait_for(lambda: health(s)["workers"][0]["pid"] != pid)
        assert ask(s, prompt=fresh())["dyad"]["choices"][0]["prefill_worker"] == 0  # the new one serves
    finally:
        s.stop()
        agg.stop()


def test_request_log_and_bench_report():
    """--request-log writes a line per request with where it ran and its KV transfer (rejected
    requests too); `dyad bench` reports the transfers of the prompts it sent."""
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl") as log:
        s = Server(DYAD, "--request-log", log.name)
        try:
            ask(s, prompt=fresh())
            ask(s, prompt=SHORT)
            st, _, _ = s.request("POST", "/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": -1})
            assert st == 400
            out = subprocess.run([DYAD, "bench", "--url", f"http://{s.host}:{s.port}", "--isl", "200",
                                  "--osl", "4", "--vocab-size", "512", "--requests", "3", "--json"],
                                 capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, out.stderr
            kv = json.loads(out.stdout)["kv_transfer"]
            assert kv["placed"] == 3 and kv["remote_prefills"] == 3, kv
            assert kv["bytes"] > 0 and kv["gb_per_s"] > 0 and 0 < kv["ttft_share"] < 1, kv
        finally:
            rc = s.stop()
        assert rc == 0, rc
        lines = [json.loads(line) for line in log.read().splitlines()]
    assert len(lines) == 6, lines  # 2 asked, 1 rejected, 3 from the bench
    remote, local, bad = lines[0], lines[1], lines[2]
    for e in lines:
        assert e["time"].endswith("Z"), e
    assert remote["status"] == 200 and remote["outcome"] == "length" and remote["endpoint"] == "completions"
    assert remote["completion_tokens"] == 40 and remote["ttft_ms"] > 0 and remote["e2e_ms"] >= remote["ttft_ms"]
    x = remote["samples"][0]
    assert x["worker"] == 1 and x["prefill_worker"] == 0, x
    assert x["kv_transfer"]["bytes"] > 0 and x["kv_transfer"]["gb_per_s"] > 0, x
    assert local["samples"][0]["prefill_worker"] is None and "kv_transfer" not in local["samples"][0]
    assert bad["status"] == 400 and bad["outcome"] == "rejected" and bad["error"]["param"] == "max_tokens", bad
    assert all(e["samples"][0]["prefill_worker"] == 0 and e["stream"] for e in lines[3:]), lines[3:]


def main():
    run_tests(globals(), [Server(DYAD, "--workers", "1"),
                          Server(DYAD),  # the default: 1 prefill + 1 decode, conditional disaggregation
                          Server(DYAD, "--kv-transfer", "tcp")])


main()
