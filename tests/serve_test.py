#!/usr/bin/env python3
"""serve_test.py DYAD SOURCE_DIR — integration tests of `dyad serve` over real HTTP.

Starts the server on a free port with the bundled model and checks completions, chat,
streaming (SSE framing and per-token chunks), n > 1, stop strings, logprobs, the error cases,
prefix caching (cached_tokens), disconnect mid-stream (sequences cancelled, blocks freed),
a killed worker being replaced (and the requests it had not started answered by its
replacement), metrics, and a clean shutdown on SIGTERM. Standard library
only. Prints 'N passed, N failed' and exits non-zero on any failure."""
import json
import os
import signal
import socket
import subprocess
import tempfile
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dyad_http import MODEL, Server as _Server, run_tests  # noqa: E402

DYAD, SRC = sys.argv[1], sys.argv[2]


def Server(*args):
    return _Server(DYAD, *args)


def completion(s, **kw):
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 20, "temperature": 0, **kw}
    return s.request("POST", "/v1/completions", body)


# ---------------------------------------------------------------- tests

def test_completion_matches_dyad_run(s):
    status, r, _ = completion(s, max_tokens=40)
    assert status == 200, r
    assert r["object"] == "text_completion" and r["model"] == MODEL
    ch = r["choices"][0]
    assert ch["finish_reason"] == "length" and ch["index"] == 0
    want = subprocess.run([DYAD, "run", "--temperature", "0", "--prompt", "Once upon a time",
                           "--max-tokens", "40", "--no-echo"], capture_output=True, text=True).stdout
    assert ch["text"] == want.rstrip("\n"), (ch["text"], want)
    u = r["usage"]
    assert u["prompt_tokens"] == 5 and u["completion_tokens"] == 40
    assert u["total_tokens"] == 45 and "cached_tokens" in u["prompt_tokens_details"]


def test_prompt_forms(s):
    ids = [1, 403, 407, 261, 378]
    a = completion(s, prompt=ids)[1]["choices"][0]["text"]
    b = completion(s)[1]["choices"][0]["text"]
    assert a == b
    status, r, _ = completion(s, prompt=["Once upon a time", "Lily went"])
    assert status == 200 and len(r["choices"]) == 2
    assert [c["index"] for c in r["choices"]] == [0, 1]
    assert r["choices"][0]["text"] == b


def test_chat(s):
    body = {"model": MODEL, "messages": [{"role": "system", "content": "Tell stories."},
                                         {"role": "user", "content": "Once upon a time"}],
            "max_tokens": 12, "temperature": 0}
    status, r, _ = s.request("POST", "/v1/chat/completions", body)
    assert status == 200, r
    assert r["object"] == "chat.completion"
    msg = r["choices"][0]["message"]
    assert msg["role"] == "assistant" and isinstance(msg["content"], str) and msg["content"]
    assert r["usage"]["completion_tokens"] == 12


def test_streaming_completion(s):
    whole = completion(s, max_tokens=25)[1]["choices"][0]["text"]
    ev = s.stream("/v1/completions", {"model": MODEL, "prompt": "Once upon a time",
                                      "max_tokens": 25, "temperature": 0, "stream": True,
                                      "stream_options": {"include_usage": True}})
    assert ev[-1] == "[DONE]"
    usage = ev[-2]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 25
    chunks = ev[:-2]
    assert all(c["object"] == "text_completion" for c in chunks)
    assert len(chunks) >= 20  # flushed per token, not in one piece
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert all("usage" in c and c["usage"] is None for c in chunks)


def test_streaming_chat(s):
    ev = s.stream("/v1/chat/completions", {"model": MODEL, "stream": True, "max_tokens": 8,
                                           "messages": [{"role": "user", "content": "Hi"}]})
    assert ev[-1] == "[DONE]"
    first = ev[0]["choices"][0]["delta"]
    assert first.get("role") == "assistant"
    assert ev[0]["object"] == "chat.completion.chunk"
    assert ev[-2]["choices"][0]["finish_reason"] in ("length", "stop")


def test_n_samples_and_seed(s):
    status, r, _ = completion(s, n=3, temperature=1.0, seed=11, max_tokens=30)
    assert status == 200 and len(r["choices"]) == 3
    texts = [c["text"] for c in r["choices"]]
    assert len(set(texts)) > 1, texts  # each sample has its own random stream
    again = [c["text"] for c in completion(s, n=3, temperature=1.0, seed=11, max_tokens=30)[1]["choices"]]
    assert again == texts
    assert r["usage"]["completion_tokens"] == 90 and r["usage"]["prompt_tokens"] == 5


def test_stop_string(s):
    status, r, _ = completion(s, max_tokens=60, stop=["Lily"])
    ch = r["choices"][0]
    assert ch["finish_reason"] == "stop" and "Lily" not in ch["text"]
    assert ch["text"] == ", there was a little girl named ", ch["text"]


def test_logprobs(s):
    status, r, _ = completion(s, max_tokens=5, logprobs=3)
    lp = r["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == 5 and len(lp["token_logprobs"]) == 5
    assert all(len(t) == 3 for t in lp["top_logprobs"])
    assert all(v <= 0 for v in lp["token_logprobs"])
    # greedy: the chosen token is the most likely one
    first_top = lp["top_logprobs"][0]
    assert abs(max(first_top.values()) - lp["token_logprobs"][0]) < 1e-4
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3,
            "logprobs": True, "top_logprobs": 2}
    r = s.request("POST", "/v1/chat/completions", body)[1]
    content = r["choices"][0]["logprobs"]["content"]
    assert len(content) == 3 and len(content[0]["top_logprobs"]) == 2


def test_errors(s):
    st, r, _ = s.request("POST", "/v1/completions", raw="{not json")
    assert st == 400 and r["error"]["type"] == "invalid_request_error"
    st, r, _ = completion(s, temperature="hot")
    assert st == 400 and r["error"]["param"] == "temperature"
    st, r, _ = completion(s, max_tokens=-3)
    assert st == 400 and r["error"]["param"] == "max_tokens"
    st, r, _ = completion(s, model="gpt-9")
    assert st == 404 and r["error"]["code"] == "model_not_found"
    st, r, _ = s.request("GET", "/v1/nothing")
    assert st == 404
    st, r, _ = completion(s, prompt="x " * 3000)
    assert st == 400  # longer than the context
    st, r, _ = s.request("POST", "/v1/completions", raw="{" + " " * (5 << 20) + "}")
    assert st == 413
    st, r, _ = s.request("GET", "/v1/completions")
    assert st == 405
    st, r, _ = s.request("POST", "/v1/chat/completions", {"model": MODEL, "messages": []})
    assert st == 400 and r["error"]["param"] == "messages"


def test_bench_replays_trace_times(s):
    """dyad bench replays a timed trace at its (scaled) times even with --concurrency, which
    then only caps the requests in flight."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl") as f:
        for i, t in enumerate((0, 400, 800)):
            f.write(json.dumps({"timestamp": t, "input_length": 20, "output_length": 2,
                                "hash_ids": [i % 2]}) + "\n")
        f.flush()
        out = subprocess.run([DYAD, "bench", "--url", f"http://{s.host}:{s.port}", "--trace", f.name,
                              "--vocab-size", "512", "--concurrency", "4", "--json"],
                             capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["load"]["mode"] == "trace replay" and r["completed"] == 3, r
    assert r["duration_s"] >= 0.8, r["duration_s"]


def test_models_health_metrics(s):
    st, r, _ = s.request("GET", "/v1/models")
    assert st == 200 and r["data"][0]["id"] == MODEL
    st, r, _ = s.request("GET", "/health")
    assert st == 200 and r["status"] == "ok"
    m = s.metrics()
    for name in ["dyad_time_to_first_token_seconds_count", "dyad_inter_token_latency_seconds_count",
                 "dyad_e2e_request_latency_seconds_count", "dyad_request_queue_time_seconds_count",
                 "dyad_prompt_tokens_total", "dyad_generation_tokens_total",
                 "dyad_prefix_cache_queries_total", "dyad_prefix_cache_hits_total",
                 'dyad_requests_total{outcome="length"}', "dyad_requests_running",
                 "dyad_requests_waiting", 'dyad_kv_cache_usage_ratio{worker="0"}',
                 'dyad_worker_step_seconds_total{worker="0"}']:
        assert name in m, name
    assert m["dyad_time_to_first_token_seconds_count"] > 0


def test_prefix_cache(s):
    prefix = "Once upon a time, there was a little girl named Lily. She loved to play outside. " * 2
    for _ in range(2):  # requests alternate between the two workers: both see the prefix
        completion(s, prompt=prefix + "One day", max_tokens=2)
    r = completion(s, prompt=prefix + "The sun", max_tokens=2)[1]
    cached = r["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= 32 and cached % 16 == 0, r["usage"]


def test_disconnect_cancels():
    # One sequence at a time, and 16 samples of 480 tokens: the client leaves while most of
    # them have not even started, however fast this machine generates.
    s = Server("--workers", "1", "--threads-per-worker", "1", "--max-running", "1")
    try:
        body = {"model": MODEL, "prompt": "Once", "max_tokens": 480, "n": 16, "ignore_eos": True}
        c = s.conn()
        c.request("POST", "/v1/completions", body=json.dumps({**body, "stream": True}),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        r.read1(100)
        c.sock.shutdown(socket.SHUT_RDWR)
        c.close()
        assert s.wait_for(lambda: s.metrics()['dyad_requests_total{outcome="cancelled"}'] == 1)
        assert s.wait_for(lambda: s.metrics()["dyad_requests_running"] == 0)
        assert s.metrics()["dyad_generation_tokens_total"] < 16 * 480
        # a non-streaming request abandoned too
        c = s.conn()
        c.request("POST", "/v1/completions", body=json.dumps(body),
                  headers={"Content-Type": "application/json"})
        time.sleep(0.2)
        c.sock.shutdown(socket.SHUT_RDWR)
        c.close()
        assert s.wait_for(lambda: s.metrics()['dyad_requests_total{outcome="cancelled"}'] == 2)
        assert s.wait_for(lambda: s.metrics()["dyad_requests_running"] == 0 and
                          s.metrics()["dyad_requests_waiting"] == 0)
        assert s.metrics()["dyad_generation_tokens_total"] < 2 * 16 * 480
    finally:
        assert s.stop() == 0


def test_long_wait_keeps_the_connection():
    """A request that waits longer than the idle --timeout for its tokens (here: the worker is
    stopped for 3 s) keeps its connection: a stream gets SSE keep-alive comments, a whole
    answer has its timeout suspended while it is computed."""
    s = Server("--workers", "1", "--timeout", "1")
    try:
        completion(s)  # warm up
        pid = s.request("GET", "/health")[1]["workers"][0]["pid"]
        body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 20, "temperature": 0}
        want = completion(s)[1]["choices"][0]["text"]
        streamed = s.conn(30)
        whole = s.conn(30)
        os.kill(pid, signal.SIGSTOP)
        try:
            streamed.request("POST", "/v1/completions", body=json.dumps({**body, "stream": True}),
                             headers={"Content-Type": "application/json"})
            whole.request("POST", "/v1/completions", body=json.dumps(body),
                          headers={"Content-Type": "application/json"})
            time.sleep(3)
        finally:
            os.kill(pid, signal.SIGCONT)
        r = streamed.getresponse()
        raw = r.read().decode()
        assert ": keep-alive\n\n" in raw, raw[:200]
        frames = [f[len("data: "):] for f in raw.split("\n\n") if f.startswith("data: ")]
        assert frames[-1] == "[DONE]", raw[-200:]
        assert "".join(json.loads(f)["choices"][0]["text"] for f in frames[:-1]) == want
        r = whole.getresponse()
        assert r.status == 200
        assert json.loads(r.read())["choices"][0]["text"] == want
    finally:
        assert s.stop() == 0


def test_killed_worker_is_replaced(s):
    st, h, _ = s.request("GET", "/health")
    pid = h["workers"][0]["pid"]
    os.kill(pid, signal.SIGKILL)
    def replaced():
        st, h, _ = s.request("GET", "/health")
        return st == 200 and h["workers"][0]["pid"] != pid and h["workers"][0]["up"]
    assert s.wait_for(replaced, 30)
    st, r, _ = completion(s, max_tokens=5)
    assert st == 200, r
    assert s.metrics()['dyad_worker_restarts_total{worker="0"}'] >= 1


def test_only_worker_dies_before_first_tokens():
    """#18 item 7: when the only worker of its pool dies (aggregated: the only worker;
    disaggregated: the only decode worker), the requests it had not started wait for its
    replacement and are answered there, with the text they would have had, instead of failing.
    The worker is stopped first, so the requests queue on its socket without a token."""
    prompts = ["Once upon a time", "The little dog", "One day, a girl", "Tom and Sue"]
    for args, victim in [(("--workers", "1"), 0),
                         (("--prefill-workers", "1", "--decode-workers", "1"), 1)]:
        s = Server(*args, "--threads-per-worker", "1", "--worker-timeout", "0")
        try:
            want = [completion(s, prompt=p)[1]["choices"][0]["text"] for p in prompts]
            pid = s.request("GET", "/health")[1]["workers"][victim]["pid"]
            os.kill(pid, signal.SIGSTOP)
            results = [None] * len(prompts)

            def ask(i):
                results[i] = completion(s, prompt=prompts[i])[:2]
            threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(prompts))]
            for t in threads:
                t.start()
            time.sleep(1.0)  # the requests are on the stopped worker's socket
            os.kill(pid, signal.SIGKILL)
            for t in threads:
                t.join(120)
            for i, r in enumerate(results):
                assert r is not None and r[0] == 200, (args, i, r)
                assert r[1]["choices"][0]["text"] == want[i], (args, i, r[1])
            print(f"{' '.join(args)}: {len(prompts)} requests queued on the killed worker, "
                  f"all answered by its replacement")
        finally:
            assert s.stop() == 0


def test_workers_die_with_the_frontend():
    """A frontend killed outright (no graceful shutdown) leaves no worker behind."""
    s = Server("--prefill-workers", "1", "--decode-workers", "1")
    pids = [w["pid"] for w in s.request("GET", "/health")[1]["workers"]]
    # The decode worker's shared-memory KV pool, checked while its worker runs: once it is
    # dead (or a zombie), any server that starts meanwhile (another test's, under ctest -j)
    # may already remove it.
    pool = f"/dev/shm/dyad-kv-{pids[1]}-1"
    assert os.path.exists(pool)
    s.proc.kill()
    s.proc.wait()

    def gone():
        for pid in pids:
            try:
                os.kill(pid, 0)
                return False
            except ProcessLookupError:
                pass
        return True
    assert s.wait_for(gone, 10), pids
    # The pool outlived its worker; the next server removes it.
    s2 = Server()
    try:
        assert not os.path.exists(pool)
    finally:
        assert s2.stop() == 0


def test_api_key():
    s = Server("--api-key", "sekret")
    try:
        st, r, _ = completion(s)
        assert st == 401 and r["error"]["code"] == "invalid_api_key"
        st, r, _ = s.request("POST", "/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 2},
                             headers={"Authorization": "Bearer sekret"})
        assert st == 200
        st, _, _ = s.request("GET", "/health")  # probes need no key
        assert st == 200
    finally:
        assert s.stop() == 0


def test_queue_full():
    s = Server("--max-queue", "1", "--max-running", "1", "--kv-blocks", "64")
    try:
        conns = []
        for _ in range(3):
            c = s.conn()
            c.request("POST", "/v1/completions", body=json.dumps(
                {"model": MODEL, "prompt": "Once", "max_tokens": 300, "ignore_eos": True}),
                headers={"Content-Type": "application/json"})
            conns.append(c)
        statuses = [c.getresponse().status for c in conns]
        assert 429 in statuses and 200 in statuses, statuses
    finally:
        assert s.stop() == 0


def main():
    run_tests(globals(), [Server("--workers", "2", "--threads-per-worker", "1")])


main()
