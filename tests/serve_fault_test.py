#!/usr/bin/env python3
"""serve_fault_test.py DYAD SOURCE_DIR — allocation failures injected into a serving dyad
(#18, SQLite's discipline): every request still ends in a correct answer or a clear error,
nothing crashes, hangs or leaks, and the server serves correctly once the faults stop.

It runs `dyad-fault` (built next to DYAD: the same binary with tests/fault/alloc_fault.c,
which can fail every Nth allocation of dyad's own code once a process gets SIGUSR2), in an
aggregated and a disaggregated deployment, for several N. With the faults on in the frontend,
then in every worker, a mixed load of whole and streamed completions and chats runs. Each
answer must be a 200 whose text is the greedy reference, or a 500/503 with an OpenAI error
object. A stream must end with [DONE], either whole and equal to the reference or with an
error event before it. Under the sanitizer build, LeakSanitizer checks every process at
exit. The same binary also splits every socket read and send into pieces of 1 to 7 bytes,
which must change no answer. Prints the failed allocations per run, then 'N passed, N
failed'."""
import json
import os
import re
import signal
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dyad_http import MODEL, Server, run_tests  # noqa: E402

DYAD, SRC = sys.argv[1], sys.argv[2]
FAULT = os.path.join(os.path.dirname(os.path.abspath(DYAD)), "dyad-fault")

PROMPTS = ["Once upon a time", "The little dog ran to the park and saw a big red ball. " * 6,
           "One day, a girl named Lily", "Tom and Sue went to the beach. " * 8]
DEPLOYMENTS = [("--workers", "1"), ("--prefill-workers", "1", "--decode-workers", "1")][:int(os.environ.get("FAULT_DEPLOYMENTS", "2"))]
EVERY = [int(x) for x in os.environ.get("FAULT_EVERY", "7,41,211").split(",")]


def body(kind, prompt, stream):
    b = {"model": MODEL, "max_tokens": 24, "temperature": 0, "stream": stream}
    if kind == "chat":
        b["messages"] = [{"role": "user", "content": prompt}]
    else:
        b["prompt"] = prompt
    return b


def path(kind):
    return "/v1/chat/completions" if kind == "chat" else "/v1/completions"


def text_of(kind, choice):
    return choice["message"]["content"] if kind == "chat" else choice["text"]


def ask(s, kind, prompt, stream):
    """('ok', text) for a whole answer, ('error', status) for a clean error; raises on
    anything else (a malformed answer, a stream without [DONE], a timeout)."""
    c = s.conn(timeout=120)
    c.request("POST", path(kind), body=json.dumps(body(kind, prompt, stream)),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    raw = r.read().decode()
    c.close()
    if r.status != 200:
        assert r.status in (500, 503), (r.status, raw)
        err = json.loads(raw)["error"]
        assert err["message"] and err["type"] == "server_error", raw
        return "error", r.status
    if not stream:
        return "ok", text_of(kind, json.loads(raw)["choices"][0])
    events = [f[len("data: "):] for f in raw.split("\n\n") if f.startswith("data: ")]
    assert events and events[-1] == "[DONE]", raw[-300:]
    parts = [json.loads(e) for e in events[:-1]]
    if any("error" in p for p in parts):
        assert "error" in parts[-1], raw[-300:]  # the error is the last event before [DONE]
        return "error", 200
    key = "delta" if kind == "chat" else None
    text = "".join((p["choices"][0][key].get("content") or "") if key else p["choices"][0]["text"]
                   for p in parts if p.get("choices"))
    return "ok", text


def pids(s):
    return [w["pid"] for w in s.request("GET", "/health")[1]["workers"]]


def failed_allocations(log_text):
    """Allocations failed per process, the last report of each (a disarmed process reports,
    and reports again at exit)."""
    last = {pid: int(f) for pid, f in
            re.findall(r"dyad-fault (\d+): (\d+) of \d+ allocations failed", log_text)}
    return sum(last.values()), len(last)


def run_one(deployment, every, where):
    os.environ["DYAD_FAULT_EVERY"] = str(every)
    s = Server(FAULT, *deployment, "--threads-per-worker", "1")
    jobs = [(k, p, st) for k in ("cmpl", "chat") for p in PROMPTS for st in (False, True)]
    try:
        want = {(k, p): ask(s, k, p, False)[1] for k, p, _ in jobs}
        targets = [s.proc.pid] if where == "frontend" else pids(s)
        for pid in targets:
            os.kill(pid, signal.SIGUSR2)  # faults on
        outcomes, problems = [], []

        def client(mine):
            for k, p, st in mine:
                try:
                    got = ask(s, k, p, st)
                    if got[0] == "ok" and got[1] != want[(k, p)]:
                        problems.append(("wrong text", k, p[:20], st, got[1][:40]))
                    outcomes.append(got[0])
                except Exception as e:  # noqa: BLE001
                    problems.append(("bad answer", k, p[:20], st, repr(e)[:300]))
        threads = [threading.Thread(target=client, args=(jobs[i::3] * 2,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        assert not any(t.is_alive() for t in threads), "a client hung"
        for pid in targets:
            try:
                os.kill(pid, signal.SIGUSR2)  # faults off (a worker that died is gone)
            except ProcessLookupError:
                pass
        if problems:
            s.log.seek(0)
            print(s.log.read()[-3000:])
        assert not problems, (deployment, every, problems)
        # Served correctly again (a worker that exited is replaced first).
        assert s.wait_for(lambda: s.request("GET", "/health")[0] == 200, 60)
        for k, p, _ in jobs[::2]:
            assert ask(s, k, p, False) == ("ok", want[(k, p)]), (k, p)
    finally:
        rc = s.stop()
        del os.environ["DYAD_FAULT_EVERY"]
    s.log.seek(0)
    log = s.log.read()
    assert rc == 0, (rc, log[-3000:])
    n_failed, n_procs = failed_allocations(log)
    print(f"{' '.join(deployment)}, every {every}th allocation of the {where}: "
          f"{len(outcomes)} requests, "
          f"{outcomes.count('ok')} answered, {outcomes.count('error')} clean errors; "
          f"{n_failed} allocations failed in {n_procs} processes")
    return n_failed


def test_short_socket_io_changes_nothing():
    """Every socket read and send of every process moves 1 to 7 bytes at a time (frames
    and KV transfers split anywhere, as a busy network splits them): every answer is whole
    and equal to the reference, nothing fails."""
    os.environ.update(DYAD_FAULT_EVERY="0", DYAD_FAULT_SHORT_IO="1")
    try:
        for deployment in DEPLOYMENTS + [("--prefill-workers", "1", "--decode-workers", "1",
                                          "--kv-transfer", "tcp")]:
            s = Server(FAULT, *deployment, "--threads-per-worker", "1")
            try:
                jobs = [(k, p, st) for k in ("cmpl", "chat") for p in PROMPTS for st in (False, True)]
                want = {(k, p): ask(s, k, p, False)[1] for k, p, _ in jobs}
                targets = [s.proc.pid] + pids(s)
                for pid in targets:
                    os.kill(pid, signal.SIGUSR2)
                for k, p, st in jobs:
                    assert ask(s, k, p, st) == ("ok", want[(k, p)]), (deployment, k, p, st)
                m = s.metrics()
                for pid in targets:
                    os.kill(pid, signal.SIGUSR2)
                print(f"{' '.join(deployment)}, short socket I/O: {len(jobs)} requests, all "
                      f"whole; {int(m.get('dyad_kv_transfers_total', 0))} KV transfers")
            finally:
                assert s.stop() == 0
    finally:
        del os.environ["DYAD_FAULT_EVERY"], os.environ["DYAD_FAULT_SHORT_IO"]


def test_failed_sends_are_placed_again():
    """Every 5th frame the frontend sends to a worker fails as on a broken socket (EPIPE,
    nothing sent): the frontend tears that worker's connection down (it is killed and started
    again), and a request whose frame did not go out is placed on the other worker, so every
    answer is whole and equal to the reference (it was a 503 'could not reach the worker')."""
    os.environ.update(DYAD_FAULT_EVERY="0", DYAD_FAULT_SEND_EVERY="5")
    try:
        s = Server(FAULT, "--workers", "2", "--threads-per-worker", "1")
        try:
            want = {p: ask(s, "cmpl", p, False)[1] for p in PROMPTS}
            os.kill(s.proc.pid, signal.SIGUSR2)  # faults on, in the frontend only
            got = [(p, st, ask(s, "cmpl", p, st)) for _ in range(3) for p in PROMPTS
                   for st in (False, True)]
            os.kill(s.proc.pid, signal.SIGUSR2)
            m = s.metrics()
        finally:
            assert s.stop() == 0
    finally:
        del os.environ["DYAD_FAULT_EVERY"], os.environ["DYAD_FAULT_SEND_EVERY"]
    for p, st, r in got:
        assert r == ("ok", want[p]), (p[:20], st, r)
    restarts = sum(v for k, v in m.items() if k.startswith("dyad_worker_restarts_total"))
    s.log.seek(0)
    failures = s.log.read().count("could not send to worker")
    print(f"--workers 2, every 5th send of the frontend fails: {len(got)} requests, all whole; "
          f"{failures} sends failed, {int(restarts)} workers restarted")
    assert failures >= 3 and restarts >= failures - 1, (failures, restarts)


def test_allocation_failures_end_cleanly():
    if not os.path.exists(FAULT):
        raise AssertionError(f"{FAULT} is not built (it is built with the tests)")
    for where in ("frontend", "workers"):
        total = sum(run_one(d, e, where) for d in DEPLOYMENTS for e in EVERY)
        assert total > 0, f"no allocation of the {where} failed: the injection did not arm"


def main():
    run_tests(globals(), [])


main()
