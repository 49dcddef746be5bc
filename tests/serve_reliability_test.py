#!/usr/bin/env python3
"""serve_reliability_test.py DYAD SOURCE_DIR — faults a worker can have that are not a clean
death (docs/reliability.md).

- A hung worker (SIGSTOP): a decode worker stopped mid-stream, a prefill worker stopped before
  a disaggregated request, an aggregated worker stopped with requests queued on it. Each is
  reported down in /health and /metrics once silent past --worker-timeout, killed and
  replaced; its requests end (an error event, or a complete answer from another worker)
  within the timeout plus some slack; the server answers afterwards. Workers that are only
  idle or busy are never taken for hung, even with a short timeout.
- Dead decode pools: a prefill worker unmaps the shared-memory pool of a decode worker that
  died, so after each of three kill -9 and replacements it maps exactly one.

- The drain (#18 item 2): requests still running at --drain-timeout are answered (a 503 with
  a drain message; a stream's error event, [DONE] and its terminating chunk), and requests
  arriving during the drain, on new or kept-alive connections, get 503 instead of waiting.
- Slowloris (#18 item 5): a request's headers and body have total deadlines (408), and clients
  past --max-connections get 503 with Retry-After instead of waiting unanswered.

Every wait is bounded, so on a build without these fixes the tests fail instead of hanging.
Standard library only; prints 'N passed, N failed'."""
import json
import os
import re
import select
import signal
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dyad_http import MODEL, Server, run_tests  # noqa: E402

DYAD = sys.argv[1]
TIMEOUT = 2  # --worker-timeout for the hung-worker tests
SLACK = 8    # detection (50 ms janitor), kill, reap, a new worker loading the model
LOAD_TIMEOUT = 6  # --startup-timeout for the tests of workers that never load: the first
                  # start, on a loaded machine or under the sanitizers, must fit in it too
LONG = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. " * 6
_fresh = [0]


def fresh():
    """A long prompt no server has seen, so a disaggregated server prefills it remotely."""
    _fresh[0] += 1
    return f"Story {_fresh[0]}. " + LONG


def health(s):
    return s.request("GET", "/health")[1]


def body(prompt, **kw):
    return {"model": MODEL, "prompt": prompt, "max_tokens": 40, "temperature": 0, **kw}


def ask(s, prompt, **kw):
    st, r, _ = s.request("POST", "/v1/completions", body(prompt, **kw))
    assert st == 200, (st, r)
    return r


class HealthWatch:
    """Polls /health every 20 ms in a thread, keeping what it saw of one worker."""

    def __init__(self, s, worker):
        self.s, self.worker, self.seen, self.stop = s, worker, [], False
        self.t = threading.Thread(target=self.run)
        self.t.start()

    def run(self):
        while not self.stop:
            try:
                w = health(self.s)["workers"][self.worker]
                self.seen.append((w["pid"], w["up"]))
            except (OSError, KeyError, IndexError, TypeError):
                pass
            time.sleep(0.02)

    def done(self):
        self.stop = True
        self.t.join()
        return self.seen


def resume(pid):
    """Lets a stopped process go on (after a failed test), so the server can stop."""
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


def replaced(s, worker, pid):
    h = health(s)["workers"][worker]
    return h["pid"] != pid and h["up"]


def test_hung_decode_worker_mid_stream():
    s = Server(DYAD, "--worker-timeout", str(TIMEOUT))
    pid = 0
    try:
        ask(s, fresh())  # warm up
        pid = health(s)["workers"][1]["pid"]
        c = s.conn(TIMEOUT + SLACK)
        c.request("POST", "/v1/completions", body=json.dumps(body(fresh(), max_tokens=300,
                                                                  ignore_eos=True, stream=True)),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        first = r.read1(4096).decode()
        assert first.startswith("data: {"), first
        watch = HealthWatch(s, 1)
        os.kill(pid, signal.SIGSTOP)
        t0 = time.time()
        rest = r.read().decode()  # a socket timeout here is the hang this test is about
        elapsed = time.time() - t0
        c.close()
        events = [f[len("data: "):] for f in (first + rest).split("\n\n") if f.startswith("data: ")]
        assert events[-1] == "[DONE]", events[-3:]
        assert "error" in json.loads(events[-2]), events[-3:]
        assert TIMEOUT - 0.5 < elapsed < TIMEOUT + SLACK, elapsed
        assert s.wait_for(lambda: replaced(s, 1, pid), SLACK)
        seen = watch.done()
        # up, then down (the replacement's being up is the wait_for above: the watch may lag)
        assert (pid, True) in seen and any(not up for _, up in seen), seen[:5]
        m = s.metrics()
        assert m['dyad_worker_hangs_total{worker="1"}'] == 1
        assert m['dyad_worker_hangs_total{worker="0"}'] == 0
        assert m['dyad_worker_up{worker="1"}'] == 1
        r = ask(s, fresh())
        assert r["usage"]["completion_tokens"] == 40
    finally:
        resume(pid)
        assert s.stop() == 0


def test_hung_prefill_worker():
    """A stopped prefill worker: the prompt it would prefill is computed by its decode worker
    once the prefill worker is found hung — well before --xfer-timeout."""
    s = Server(DYAD, "--worker-timeout", str(TIMEOUT), "--xfer-timeout", "120")
    agg = Server(DYAD, "--workers", "1")
    pid = 0
    try:
        ask(s, fresh())  # warm up
        pid = health(s)["workers"][0]["pid"]
        p = fresh()
        os.kill(pid, signal.SIGSTOP)
        t0 = time.time()
        r = ask(s, p)
        assert time.time() - t0 < TIMEOUT + SLACK
        assert r["dyad"]["choices"][0]["prefill_worker"] is None
        assert r["choices"][0]["text"] == ask(agg, p)["choices"][0]["text"]
        assert s.wait_for(lambda: replaced(s, 0, pid), SLACK)
        m = s.metrics()
        assert m['dyad_worker_hangs_total{worker="0"}'] == 1
        assert m["dyad_kv_transfer_timeouts_total"] == 0  # not the --xfer-timeout path
        assert ask(s, fresh())["dyad"]["choices"][0]["prefill_worker"] == 0  # the new one serves
    finally:
        resume(pid)
        assert s.stop() == 0
        assert agg.stop() == 0


def test_hung_aggregated_worker_fails_over():
    """Requests queued on a stopped worker that had produced nothing are run on the other
    worker: every one is answered in full, with the same text."""
    s = Server(DYAD, "--workers", "2", "--router", "round-robin", "--worker-timeout", str(TIMEOUT))
    pid = 0
    try:
        p = fresh()
        want = ask(s, p)["choices"][0]["text"]
        pid = health(s)["workers"][0]["pid"]
        os.kill(pid, signal.SIGSTOP)
        results, errors = [], []

        def one():
            try:
                results.append(ask(s, p))
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        t0 = time.time()
        threads = [threading.Thread(target=one) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT + SLACK + 5)
        assert time.time() - t0 < TIMEOUT + SLACK, time.time() - t0
        assert not errors, errors
        assert [r["choices"][0]["text"] for r in results] == [want] * 4
        m = s.metrics()
        assert m['dyad_router_worker_decisions_total{worker="0"}'] >= 2  # some went to it
        assert s.wait_for(lambda: replaced(s, 0, pid), SLACK)
        assert s.metrics()['dyad_worker_hangs_total{worker="0"}'] == 1
        assert health(s)["status"] == "ok"
    finally:
        resume(pid)
        assert s.stop() == 0


def test_stopped_worker_does_not_wedge_the_frontend():
    """Requests sent to a stopped worker fill its socket; the frontend's writes to it give up
    after --worker-timeout (killing it), so /health and the other requests are not held
    forever behind a write that holds the fleet's lock."""
    s = Server(DYAD, "--workers", "1", "--worker-timeout", str(TIMEOUT), "--kv-mem", "128")
    pid = health(s)["workers"][0]["pid"]
    try:
        os.kill(pid, signal.SIGSTOP)
        ended = []

        def big(k):  # 64 prompts of ~430 tokens: 64 REQUEST frames, more than the socket holds
            prompts = [f"Story {k} {i}. " + "Once upon a time, there was a little girl named Lily. "
                       "She loved to play. " * 20 for i in range(64)]
            c = s.conn(240)  # the reruns below may take minutes under the sanitizers
            c.request("POST", "/v1/completions", body=json.dumps(body(prompts, max_tokens=2)),
                      headers={"Content-Type": "application/json"})
            try:
                ended.append(c.getresponse().status)
            except OSError as e:  # a timeout: kept, so the assertion below names it
                ended.append(repr(e))

        threads = [threading.Thread(target=big, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        t0 = time.time()
        c = s.conn(TIMEOUT + SLACK)
        c.request("GET", "/health")  # a timeout here: the frontend is wedged
        c.getresponse().read()
        assert time.time() - t0 < TIMEOUT + SLACK
        # Each is answered: 503 if its only worker was lost, or its text if it was rerun on the
        # replacement, which under the sanitizers, beside other tests, can take minutes for 256
        # long prompts (the wedge itself is timed above, on /health).
        deadline = time.time() + 240
        for t in threads:
            t.join(max(0.0, deadline - time.time()))
        assert len(ended) == 4 and all(isinstance(e, int) for e in ended), ended
        assert s.wait_for(lambda: replaced(s, 0, pid), SLACK)
        assert ask(s, "Once upon a time")["usage"]["completion_tokens"] == 40
    finally:
        resume(pid)
        assert s.stop() == 0


def test_busy_or_idle_workers_are_not_hung():
    """With a short timeout, idle and busy workers keep heartbeating: none is killed."""
    s = Server(DYAD, "--worker-timeout", "0.5")
    try:
        pids = [w["pid"] for w in health(s)["workers"]]
        time.sleep(2)  # idle
        threads = [threading.Thread(target=ask, args=(s, fresh()), kwargs={"max_tokens": 100})
                   for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        time.sleep(1)
        assert [w["pid"] for w in health(s)["workers"]] == pids
        assert all(w["up"] for w in health(s)["workers"])
        m = s.metrics()
        assert m['dyad_worker_hangs_total{worker="0"}'] == 0
        assert m['dyad_worker_hangs_total{worker="1"}'] == 0
    finally:
        assert s.stop() == 0


def test_long_step_is_not_a_hang():
    """Engine steps longer than --worker-timeout (long prompts prefilled in one batch, one
    engine thread): the worker's heartbeat thread keeps STATS coming and takes in the frames
    sent meanwhile, so it is not killed. (Without the heartbeat this request got a 503 after
    the timeout.) A first small batch measures this build's speed, so the big one lasts a few
    timeouts on a fast machine and in the sanitizer build alike."""
    s = Server(DYAD, "--workers", "1", "--threads-per-worker", "1", "--max-batch-tokens", "32768",
               "--max-running", "64", "--kv-mem", "128", "--worker-timeout", "0.5")
    try:
        pid = health(s)["workers"][0]["pid"]

        def batch(k, tag):
            """k prompts of ~430 tokens in one request; the mean step time it took."""
            key = '{worker="0"}'
            s.settled("dyad_worker_step_seconds_total" + key)
            m0 = s.metrics()
            prompts = [f"Story {tag} {i}. " + "Once upon a time, there was a little girl named "
                       "Lily. She loved to play. " * 20 for i in range(k)]
            st, r, _ = s.request("POST", "/v1/completions", body(prompts, max_tokens=1))
            assert st == 200, (st, r)
            s.settled("dyad_worker_step_seconds_total" + key)  # the reports have caught up
            m = s.metrics()
            steps = m["dyad_worker_steps_total" + key] - m0["dyad_worker_steps_total" + key]
            return (m["dyad_worker_step_seconds_total" + key] -
                    m0["dyad_worker_step_seconds_total" + key]) / max(steps, 1)

        per_prompt = batch(4, "a") / 4
        # a step of about 1.5 s (three timeouts), or the 64 prompts one request may carry
        k = max(4, min(64, int(1.5 / max(per_prompt, 1e-4))))
        step = batch(k, "b")
        assert step > 0.5, ("the test needs a step longer than the timeout", k, step)
        m = s.metrics()
        assert m['dyad_worker_hangs_total{worker="0"}'] == 0
        assert health(s)["workers"][0]["pid"] == pid
    finally:
        assert s.stop() == 0


def test_worker_timeout_off():
    s = Server(DYAD, "--workers", "1", "--worker-timeout", "0")
    try:
        assert ask(s, "Once upon a time")["usage"]["completion_tokens"] == 40
    finally:
        assert s.stop() == 0


LAUNCHER = """#!/bin/sh
# Runs a decode worker, records the start in $1/start.PID, and hangs instead (a launcher that
# never runs the worker) when it can take one of the tokens $1/hang.* (mv is atomic, so each
# token is taken by one start).
dir=$1
shift
touch "$dir/start.$$"
for t in "$dir"/hang.*; do
    case $t in *.taken) continue ;; esac
    mv "$t" "$t.taken" 2>/dev/null && exec sleep 3600
done
exec "$@"
"""


def hanging_launcher(tmp):
    path = os.path.join(tmp, "launch.sh")
    with open(path, "w") as f:
        f.write(LAUNCHER)
    return f"sh {path} {tmp}"


def hang_next_starts(tmp, n):
    for i in range(n):
        open(os.path.join(tmp, f"hang.{i}"), "w").close()


def starts(tmp):
    return sum(name.startswith("start.") for name in os.listdir(tmp))


def test_replacement_that_never_loads_is_replaced():
    """A decode worker's replacement hangs before HELLO (its launcher never runs it): once
    silent past --startup-timeout it is killed and started again (after a back-off), and the
    requests placed on it while it hung run on the other decode worker, each with the same
    text as before. (Before: --worker-timeout applied only after HELLO, so those requests
    waited forever.)"""
    with tempfile.TemporaryDirectory() as tmp:
        s = Server(DYAD, "--decode-workers", "2", "--router", "round-robin",
                   "--worker-timeout", str(TIMEOUT), "--startup-timeout", str(LOAD_TIMEOUT),
                   "--decode-launcher", hanging_launcher(tmp))
        try:
            prompts = [f"Tale {i}. Once upon a time" for i in range(6)]
            want = [ask(s, p)["choices"][0]["text"] for p in prompts]
            pid = health(s)["workers"][1]["pid"]
            hang_next_starts(tmp, 1)
            os.kill(pid, signal.SIGKILL)
            assert s.wait_for(lambda: health(s)["workers"][1]["pid"] != pid, SLACK)
            hung = health(s)["workers"][1]["pid"]
            assert not health(s)["workers"][1]["up"]  # started, not loaded: not up
            before = s.metrics()['dyad_router_worker_decisions_total{worker="1"}']
            results, errors = {}, []

            def one(i):
                try:
                    results[i] = ask(s, prompts[i])["choices"][0]["text"]
                except Exception as e:  # noqa: BLE001
                    errors.append(e)

            t0 = time.time()
            threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(LOAD_TIMEOUT + SLACK + 5)
            assert not errors, errors
            assert [results.get(i) for i in range(len(prompts))] == want
            assert time.time() - t0 < LOAD_TIMEOUT + SLACK, time.time() - t0
            # some were placed on the hung replacement, and ran elsewhere after its kill
            assert s.metrics()['dyad_router_worker_decisions_total{worker="1"}'] > before
            assert s.wait_for(lambda: replaced(s, 1, hung), SLACK)
            assert s.metrics()['dyad_worker_hangs_total{worker="1"}'] == 1
            assert starts(tmp) == 4  # two at first, the hung one, its replacement
            assert [ask(s, p)["choices"][0]["text"] for p in prompts] == want
        finally:
            assert s.stop() == 0


def test_only_worker_that_never_loads():
    """The only decode worker's replacement hangs before HELLO twice: a request queued on it
    ends with a 503 once it is killed (it is not placed on a worker that failed to load until
    that worker loads), and the third replacement serves."""
    with tempfile.TemporaryDirectory() as tmp:
        s = Server(DYAD, "--worker-timeout", str(TIMEOUT), "--startup-timeout", str(LOAD_TIMEOUT),
                   "--decode-launcher", hanging_launcher(tmp))
        try:
            p = fresh()
            want = ask(s, p)["choices"][0]["text"]
            pid = health(s)["workers"][1]["pid"]
            hang_next_starts(tmp, 2)
            os.kill(pid, signal.SIGKILL)
            assert s.wait_for(lambda: health(s)["workers"][1]["pid"] != pid, SLACK)
            t0 = time.time()
            c = s.conn(LOAD_TIMEOUT + SLACK)
            c.request("POST", "/v1/completions", body=json.dumps(body(p)),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            err = json.loads(r.read())
            c.close()
            assert r.status == 503, (r.status, err)
            assert "error" in err and err["error"]["message"], err
            assert time.time() - t0 < LOAD_TIMEOUT + SLACK, time.time() - t0
            # two hung starts, a back-off after each, then one that loads
            assert s.wait_for(lambda: health(s)["workers"][1]["up"], 2 * LOAD_TIMEOUT + 3 * SLACK)
            assert s.metrics()['dyad_worker_hangs_total{worker="1"}'] == 2
            assert starts(tmp) == 4
            assert ask(s, p)["choices"][0]["text"] == want
        finally:
            assert s.stop() == 0


def mapped_pools(pid):
    """The distinct decode-worker KV pools (shared memory) mapped into a process."""
    with open(f"/proc/{pid}/maps") as f:
        return sorted(set(re.findall(r"/dev/shm/(dyad-kv-\d+-\d+)", f.read())))


def test_dead_decode_pools_are_unmapped():
    s = Server(DYAD, "--kv-mem", "16")
    try:
        ask(s, fresh())
        pre = health(s)["workers"][0]["pid"]
        assert len(mapped_pools(pre)) == 1
        def shm(worker):
            return s.metrics()[f'dyad_worker_shm_bytes{{worker="{worker}"}}']

        # the prefill worker maps what the decode worker made (reports come every 100 ms)
        assert s.wait_for(lambda: shm(0) == shm(1) > 0, 5), (shm(0), shm(1))
        one_pool = shm(1)
        for _ in range(3):
            pid = health(s)["workers"][1]["pid"]
            os.kill(pid, signal.SIGKILL)
            assert s.wait_for(lambda: replaced(s, 1, pid), 30)
            r = ask(s, fresh())
            assert r["dyad"]["choices"][0]["prefill_worker"] == 0  # it mapped the new pool
            pools = mapped_pools(pre)
            assert len(pools) == 1, pools
            new = health(s)["workers"][1]["pid"]
            assert pools[0].startswith(f"dyad-kv-{new}-"), (pools, new)
            assert s.wait_for(lambda: shm(0) == one_pool, 5), (shm(0), one_pool)
        assert health(s)["workers"][0]["pid"] == pre
    finally:
        assert s.stop() == 0


def test_stale_pool_of_a_zombie_is_removed():
    """#18 item 7: a pool left by a worker that is now a zombie (its frontend was SIGKILLed and
    not yet reaped) is removed when a new frontend starts; a zombie passes kill(pid, 0)."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    path = f"/dev/shm/dyad-kv-{pid}-0"
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # until the child has exited (a zombie, not reaped)
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            time.sleep(0.01)
        with open(path, "wb") as f:
            f.write(b"\0" * 4096)
        s = Server(DYAD, "--prefill-workers", "1", "--decode-workers", "1")
        try:
            assert not os.path.exists(path), "the zombie's pool is still there"
        finally:
            assert s.stop() == 0
    finally:
        os.waitpid(pid, 0)
        if os.path.exists(path):
            os.unlink(path)


def drain_message(err):
    return "shutting down" in err["error"]["message"] and err["error"]["code"] == "service_unavailable"


def refused_as_draining(c, path):
    """A request on connection c is answered 503 with the drain message (False: answered
    otherwise, before the drain began; a socket timeout: left waiting)."""
    c.request("GET", path)
    r = c.getresponse()
    st, err = r.status, json.loads(r.read())
    return st == 503 and drain_message(err)


def test_drain_deadline_answers_every_request():
    """#18 item 2: SIGTERM with requests that cannot finish within --drain-timeout: a stream
    the decode worker is generating when it is stopped (SIGSTOP), and 3 more streams and 12
    whole requests queued on it. Every one is answered: whole requests 503 with the drain
    message, streams their error event and [DONE] and then the chunked stream's end (a
    missing terminating chunk is an IncompleteRead here). During the drain a new connection,
    and a new request on a kept-alive one, get 503 at once. main's binary: the new connection
    was reset or waited unanswered, the cut requests said a worker died, and some of them
    were closed without an answer."""
    s = Server(DYAD, "--drain-timeout", "2")
    pid = 0
    try:
        ask(s, "Once upon a time")  # warm up
        pid = health(s)["workers"][1]["pid"]
        kept = s.conn(10)
        kept.request("GET", "/health")
        kept.getresponse().read()
        decisions = 'dyad_router_worker_decisions_total{worker="1"}'
        placed = s.metrics()[decisions]
        answers, generating = {}, threading.Event()

        def one(k, stream):
            c = s.conn(30)
            try:
                c.request("POST", "/v1/completions", headers={"Content-Type": "application/json"},
                          body=json.dumps(body(f"Tale {k}.", max_tokens=400, ignore_eos=True,
                                               stream=stream)))
                r = c.getresponse()
                first = r.read1(4096).decode() if stream else ""
                generating.set()
                answers[k] = (r.status, first + r.read().decode())
            except Exception as e:  # noqa: BLE001
                answers[k] = ("no answer", repr(e))
            finally:
                c.close()

        clients = [threading.Thread(target=one, args=(k, k % 4 == 0)) for k in range(16)]
        clients[0].start()
        assert generating.wait(20)
        os.kill(pid, signal.SIGSTOP)  # stream 0 mid-way
        for t in clients[1:]:
            t.start()
        assert s.wait_for(lambda: s.metrics()[decisions] == placed + 16, 20)  # all placed
        s.proc.send_signal(signal.SIGTERM)
        # a socket timeout in here: the new client is left waiting
        assert s.wait_for(lambda: refused_as_draining(s.conn(3), "/v1/models"), 10)
        assert refused_as_draining(kept, "/health")
        for t in clients:
            t.join(30)
        assert len(answers) == 16, answers
        for k, (st, text) in sorted(answers.items()):
            if k % 4:
                assert st == 503 and drain_message(json.loads(text)), (k, st, text)
                continue
            assert st == 200, (k, st, text)
            events = [f[len("data: "):] for f in text.split("\n\n") if f.startswith("data: ")]
            assert events[-1] == "[DONE]", (k, events[-3:])
            assert drain_message(json.loads(events[-2])), (k, events[-3:])
            if k == 0:  # it was cut after some of its tokens
                assert events[:-2] and "choices" in json.loads(events[0]), events[:3]
        assert s.proc.wait(30) == 0
    finally:
        resume(pid)
        assert s.stop() == 0


SLOW = ["--workers", "1", "--max-connections", "4", "--timeout", "10",
        "--header-timeout", "1", "--body-timeout", "1"]


def trickle(sock, more):
    """Sends `more` every 0.2 s (each byte restarts the idle --timeout) until the server
    answers or closes; returns what it sent back and after how long."""
    t0 = time.time()
    got = b""
    while time.time() - t0 < 6:
        if select.select([sock], [], [], 0.2)[0]:
            try:
                chunk = sock.recv(4096)
            except ConnectionResetError:
                break
            if not chunk:
                break
            got += chunk
            continue
        try:
            sock.sendall(more)
        except (BrokenPipeError, ConnectionResetError):
            break
    return got, time.time() - t0


def test_slowloris_gets_408_and_the_limit_503():
    """#18 item 5: four slowloris clients fill --max-connections 4, two trickling header lines
    and two a body, each byte well within the idle --timeout. A fifth client is answered 503
    with Retry-After at once; each slow client gets a 408 JSON error (headers or body) once its
    total deadline passes, and the server then serves again. main's binary (without the
    deadline options): the fifth client got no answer and the slow ones kept their
    connections."""
    s = Server(DYAD, *SLOW)
    try:
        slow = []
        for k in range(4):
            sock = socket.create_connection((s.host, s.port))
            if k < 2:
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: dyad\r\n")
            else:
                sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: dyad\r\nContent-Type: "
                             b"application/json\r\nContent-Length: 1000\r\n\r\n{")
            slow.append(sock)
        results = [None] * 4
        threads = [threading.Thread(target=lambda k=k: results.__setitem__(
            k, trickle(slow[k], b"X-Slow: 1\r\n" if k < 2 else b" "))) for k in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.3)
        c = s.conn(3)  # a socket timeout here: the client waits unanswered
        c.request("GET", "/health")
        r = c.getresponse()
        err = json.loads(r.read())
        c.close()
        assert r.status == 503 and r.getheader("Retry-After"), (r.status, err)
        assert err["error"]["code"] == "service_unavailable", err
        assert "--max-connections" in err["error"]["message"], err
        for t in threads:
            t.join(10)
        for k, (got, took) in enumerate(results):
            head, _, payload = got.decode().partition("\r\n\r\n")
            assert head.startswith("HTTP/1.1 408"), (k, got, took)
            e = json.loads(payload)["error"]
            assert e["code"] == "request_timeout", e
            assert ("--header-timeout" if k < 2 else "--body-timeout") in e["message"], e
            assert took < 1 + 2, took
            slow[k].close()
        assert health(s)["status"] == "ok"  # served again
    finally:
        assert s.stop() == 0


def test_deadlines_spare_idle_connections_and_long_answers():
    """The deadlines bound reading a request only: a kept-alive connection idle for longer
    than --header-timeout (but not --timeout) still serves its next request, and an answer
    that takes longer than both deadlines to compute (its worker is stopped for a while) is
    not cut."""
    s = Server(DYAD, *SLOW)
    pid = 0
    try:
        c = s.conn(10)
        c.request("GET", "/health")
        assert c.getresponse().read()
        time.sleep(1.5)
        c.request("GET", "/health")
        r = c.getresponse()
        assert r.status == 200, r.status
        r.read()
        pid = health(s)["workers"][0]["pid"]
        os.kill(pid, signal.SIGSTOP)
        c.request("POST", "/v1/completions", body=json.dumps(body("Once upon a time")),
                  headers={"Content-Type": "application/json"})
        time.sleep(1.5)
        os.kill(pid, signal.SIGCONT)
        r = c.getresponse()
        assert r.status == 200, (r.status, r.read())
        assert json.loads(r.read())["usage"]["completion_tokens"] == 40
        c.close()
    finally:
        resume(pid)
        assert s.stop() == 0


run_tests(globals(), [])
