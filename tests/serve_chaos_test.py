#!/usr/bin/env python3
"""serve_chaos_test.py DYAD SOURCE_DIR — chaos under load (#18, "Prove it"), as a test with
counts: a disaggregated deployment (1 prefill + 2 decode workers) and an aggregated one (2
workers) serve greedy requests, whole and streamed, completions and chats, from several
client threads, while a seeded schedule kills workers (SIGKILL), stops them for less than
--worker-timeout (SIGSTOP, then SIGCONT: nothing may happen) or for longer (the frontend
must kill and replace them), prefill and decode workers alike; each deployment ends with a
drain (SIGTERM, --drain-timeout) under load, one worker stopped so that some requests are
cut by the deadline.

Every request is accounted for: complete and equal to its reference text (taken first from
the same server, calm; a stream's deltas concatenated, so a duplicated or missing token
fails), or a clear error — HTTP 500/503 with an OpenAI error object, or a stream whose last
event before [DONE] is an error, the text before it a prefix of the reference. None hangs:
a client's timeout fails the test. Afterwards every worker that was killed has been replaced
(/health), the restarts and hangs counted match the kills and long stops, the frontend's fd
count is back to its baseline and its RSS within RSS_MARGIN of it, and no shared-memory KV
pool (/dev/shm/dyad-kv-PID-*) of a dead worker is left; after the drain no worker process
is left and no pool at all. The counts are printed per deployment.

DYAD_CHAOS_SEED sets the schedule's seed (default 18); DYAD_CHAOS_SECONDS the load's length
per deployment (default 20, 12 for a sanitizer build: the binary's path says asan)."""
import json
import os
import random
import re
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dyad_http import MODEL, Server, run_tests  # noqa: E402

DYAD = sys.argv[1]
ASAN = "asan" in os.path.abspath(DYAD).lower()
SEED = int(os.environ.get("DYAD_CHAOS_SEED", "18"))
SECONDS = float(os.environ.get("DYAD_CHAOS_SECONDS", "12" if ASAN else "20"))
CLIENTS = 4
WORKER_TIMEOUT = 2.0
CLIENT_TIMEOUT = 180 if ASAN else 60  # generous: a client that waits this long has hung
RECOVERY = 90 if ASAN else 30         # every worker back up within this
# The frontend's RSS after the chaos against its baseline (after the calm phase, which ran
# the same requests): allocator arenas and caches may keep some; ASan's quarantine keeps up
# to 256 MiB of freed memory on purpose.
RSS_MARGIN = (320 if ASAN else 32) << 20

STORY = "Once upon a time, there was a little girl named Lily. She loved to play outside. "
PROMPTS = ["Once upon a time", "One day, a girl named Lily", "The little dog ran to the park",
           STORY * 4, "Tom and Sue went to the beach. " * 8, "A big red ball. " * 12]


def job_body(kind, prompt, stream, max_tokens=48):
    b = {"model": MODEL, "max_tokens": max_tokens, "temperature": 0, "stream": stream}
    if kind == "chat":
        b["messages"] = [{"role": "user", "content": prompt}]
    else:
        b["prompt"] = prompt
    return b


def chunk_text(kind, chunk):
    ch = chunk["choices"][0]
    return (ch["delta"].get("content") or "") if kind == "chat" else ch["text"]


class Outcome(Exception):
    """A request that was neither complete nor a clear error: the test fails on it."""


def check_error_object(raw):
    try:
        err = json.loads(raw)["error"]
    except (ValueError, KeyError, TypeError):
        raise Outcome("not an OpenAI error object: " + raw[:200]) from None
    if not (isinstance(err, dict) and err.get("message") and err.get("type")):
        raise Outcome("an error without message or type: " + raw[:200])
    return err["message"]


def why(message):
    """An error message's gist, for the counts: its reason (after "...now: "), first clause."""
    reason = message.split(": ", 1)[-1]
    return re.split(r"[.;(]", reason)[0].strip()[:90]


def ask(s, kind, prompt, stream, want, max_tokens=48, messages=None):
    """'complete', 'http_500', 'http_503' or 'stream_error' (an error's message is counted in
    `messages` when given); raises Outcome on anything else (wrong text, a malformed answer,
    a stream without [DONE]) and socket.timeout on a hang."""
    def note(message):
        if messages is not None:
            messages[why(message)] = messages.get(why(message), 0) + 1
    c = s.conn(timeout=CLIENT_TIMEOUT)
    try:
        c.request("POST", "/v1/chat/completions" if kind == "chat" else "/v1/completions",
                  body=json.dumps(job_body(kind, prompt, stream, max_tokens)),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        raw = r.read().decode()
    finally:
        c.close()
    if r.status != 200:
        if r.status not in (500, 503):
            raise Outcome(f"HTTP {r.status}: {raw[:200]}")
        note(check_error_object(raw))
        return f"http_{r.status}"
    if not stream:
        ch = json.loads(raw)["choices"][0]
        text = ch["message"]["content"] if kind == "chat" else ch["text"]
        if text != want:
            raise Outcome(f"whole answer differs: {text!r} != {want!r}")
        return "complete"
    events = [f[len("data: "):] for f in raw.split("\n\n") if f.startswith("data: ")]
    if not events or events[-1] != "[DONE]":
        raise Outcome("a stream without [DONE]: " + raw[-200:])
    parts = [json.loads(e) for e in events[:-1]]
    text = "".join(chunk_text(kind, p) for p in parts if p.get("choices"))
    errors = [i for i, p in enumerate(parts) if "error" in p]
    if errors:
        if errors != [len(parts) - 1]:
            raise Outcome("a stream's error is not its last event: " + raw[-300:])
        if not parts[-1]["error"].get("message"):
            raise Outcome("an error event without a message: " + raw[-300:])
        if not want.startswith(text):  # a duplicated or wrong token before the error
            raise Outcome(f"stream before its error is no prefix: {text!r} / {want!r}")
        note(parts[-1]["error"]["message"])
        return "stream_error"
    if text != want:
        raise Outcome(f"streamed deltas differ: {text!r} != {want!r}")
    return "complete"


def health(s):
    return s.request("GET", "/health")[1]["workers"]


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) << 10


def is_worker(pid):
    """pid is a running `dyad worker` (not gone, not a zombie, not a reused pid)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return state not in ("Z", "X") and b"worker" in argv


def pools_of(pids):
    names = os.listdir("/dev/shm")
    return sorted(n for n in names for p in pids if n.startswith(f"dyad-kv-{p}-"))


class Load:
    """CLIENTS threads, each sending jobs chosen by its own seeded random until told to stop,
    counting the outcomes; a problem (wrong text, unclear error, hang) is kept to fail on."""

    def __init__(self, s, jobs, want, seed):
        self.s, self.jobs, self.want = s, jobs, want
        self.counts, self.messages, self.problems, self.stop = {}, {}, [], False
        self.mu = threading.Lock()
        self.threads = [threading.Thread(target=self.client, args=(random.Random(seed + i),))
                        for i in range(CLIENTS)]
        for t in self.threads:
            t.start()

    def client(self, rnd):
        mine = {}  # error messages, merged at the end
        while not self.stop:
            kind, prompt, stream = rnd.choice(self.jobs)
            try:
                got = ask(self.s, kind, prompt, stream, self.want[(kind, prompt)],
                          messages=mine)
            except Exception as e:  # noqa: BLE001 — Outcome, a timeout, a reset
                got = None
                with self.mu:
                    self.problems.append((kind, prompt[:24], stream, repr(e)[:400]))
            with self.mu:
                self.counts[got or "problem"] = self.counts.get(got or "problem", 0) + 1
        with self.mu:
            for k, v in mine.items():
                self.messages[k] = self.messages.get(k, 0) + v

    def finish(self):
        self.stop = True
        for t in self.threads:
            t.join(CLIENT_TIMEOUT + 30)
        assert not any(t.is_alive() for t in self.threads), "a client hung"
        return self.counts


def up_workers(s, ids):
    return [w for w in health(s) if w["id"] in ids and w["up"]]


def chaos(s, rnd, roles, until, seen):
    """Runs the schedule until `until`: each event hits an up worker of a role, chosen at
    random; every kind of event happens at least once. Returns its counts."""
    kinds = [(what, role) for what in ("kill", "stop_short", "stop_long") for role in roles]
    plan = rnd.sample(kinds, len(kinds))
    counts = {"kills": 0, "short_stops": 0, "long_stops": 0}
    i = 0
    while time.time() < until:
        time.sleep(rnd.uniform(0.4, 1.5))
        what, role = plan[i] if i < len(plan) else rnd.choice(kinds)
        targets = up_workers(s, roles[role])
        for w in health(s):
            seen.add(w["pid"])
        if not targets:
            continue
        pid = rnd.choice(targets)["pid"]
        if what == "kill":
            os.kill(pid, signal.SIGKILL)
            counts["kills"] += 1
        else:
            pause = rnd.uniform(0.2, 0.8) if what == "stop_short" else WORKER_TIMEOUT + 1
            os.kill(pid, signal.SIGSTOP)
            time.sleep(pause)
            try:
                os.kill(pid, signal.SIGCONT)  # a long stop: the frontend has killed it by now
            except ProcessLookupError:
                pass
            counts["short_stops" if what == "stop_short" else "long_stops"] += 1
        i += 1
    return counts


def metric_sum(s, name):
    return sum(v for k, v in s.metrics().items() if k.startswith(name + "{"))


def run_deployment(label, args, roles, seed):
    s = Server(DYAD, *args, "--worker-timeout", str(WORKER_TIMEOUT), "--kv-mem", "16",
               "--drain-timeout", "1", "--startup-timeout", "60")
    front = s.proc.pid
    seen = set()
    try:
        jobs = [(k, p, st) for k in ("cmpl", "chat") for p in PROMPTS for st in (False, True)]
        want = {}
        for k, p in {(k, p) for k, p, _ in jobs}:  # the references, calm
            st, r, _ = s.request("POST", "/v1/chat/completions" if k == "chat" else
                                 "/v1/completions", job_body(k, p, False))
            assert st == 200, (st, r)
            ch = r["choices"][0]
            want[(k, p)] = ch["message"]["content"] if k == "chat" else ch["text"]
        # The calm phase under the same load, so the baseline has seen it all once.
        warm = Load(s, jobs, want, seed)
        time.sleep(2)
        warm_counts = warm.finish()
        assert not warm.problems, warm.problems[:5]
        assert set(warm_counts) == {"complete"}, warm_counts
        time.sleep(1.5)  # connections closed, lingering ones gone
        base_fds, base_rss = fd_count(front), rss(front)
        pids0 = {w["pid"] for w in health(s)}
        seen |= pids0

        load = Load(s, jobs, want, seed + 100)
        ev = chaos(s, random.Random(seed), roles, time.time() + SECONDS, seen)
        counts = load.finish()
        assert not load.problems, load.problems[:5]

        # Every worker hit was replaced, and nothing else was.
        all_ids = {i for ids in roles.values() for i in ids}
        assert s.wait_for(lambda: len(up_workers(s, all_ids)) == len(all_ids), RECOVERY), health(s)
        now = health(s)
        seen |= {w["pid"] for w in now}
        restarts = sum(w["restarts"] for w in now)
        hangs = metric_sum(s, "dyad_worker_hangs_total")
        assert restarts == ev["kills"] + ev["long_stops"], (restarts, ev)
        assert hangs == ev["long_stops"], (hangs, ev)
        live = {w["pid"] for w in now}
        dead = seen - live
        assert not any(is_worker(p) for p in dead), [p for p in dead if is_worker(p)]
        assert not pools_of(dead), pools_of(dead)
        # The frontend holds what it held before: fds exactly, memory within the margin.
        assert s.wait_for(lambda: fd_count(front) == base_fds, 15), (fd_count(front), base_fds)
        fds = fd_count(front)
        grown = rss(front) - base_rss
        assert grown < RSS_MARGIN, (grown, RSS_MARGIN)
        # It still answers every job with its reference.
        for k, p, st in jobs:
            assert ask(s, k, p, st, want[(k, p)]) == "complete"

        # The drain: longer requests under load, one worker stopped (what runs there cannot
        # finish by the deadline), then SIGTERM (--drain-timeout 1).
        long_want = {}
        for k, p, _ in jobs[:8]:
            st, r, _ = s.request("POST", "/v1/chat/completions" if k == "chat" else
                                 "/v1/completions", job_body(k, p, False, 200))
            ch = r["choices"][0]
            long_want[(k, p)] = ch["message"]["content"] if k == "chat" else ch["text"]
        drained, drain_messages, drain_problems, mu = {}, {}, [], threading.Lock()

        def drain_client(k, p, st):
            mine = {}
            try:
                got = ask(s, k, p, st, long_want[(k, p)], 200, mine)
            except Exception as e:  # noqa: BLE001
                got = "problem"
                drain_problems.append((k, p[:24], st, repr(e)[:400]))
            with mu:
                drained[got] = drained.get(got, 0) + 1
                for m, v in mine.items():
                    drain_messages[m] = drain_messages.get(m, 0) + v

        threads = [threading.Thread(target=drain_client, args=j) for j in jobs[:8] * 2]
        for t in threads:
            t.start()
        time.sleep(0.2)
        os.kill(health(s)[-1]["pid"], signal.SIGSTOP)
        time.sleep(0.2)
        s.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(CLIENT_TIMEOUT + 30)
        assert not any(t.is_alive() for t in threads), "a client hung in the drain"
        assert not drain_problems, drain_problems[:5]
        s.proc.wait(60)
        assert s.wait_for(lambda: not any(is_worker(p) for p in seen), 10), \
            [p for p in seen if is_worker(p)]
        assert not pools_of(seen), pools_of(seen)

        errors = {k: v for k, v in counts.items() if k != "complete"}
        print(f"{label}: {sum(counts.values())} requests under chaos, "
              f"{counts.get('complete', 0)} complete, errors {errors or 'none'} "
              f"{load.messages}; "
              f"{ev['kills']} kills, {ev['short_stops']} short stops (< --worker-timeout), "
              f"{ev['long_stops']} long stops (killed as hung); {restarts} restarts; "
              f"frontend fds {base_fds} -> {fds}, RSS "
              f"{base_rss >> 20} -> {(base_rss + grown) >> 20} MiB; drain: {len(threads)} "
              f"requests, {drained} {drain_messages}")
    finally:
        for p in seen:
            try:
                os.kill(p, signal.SIGCONT)
            except (ProcessLookupError, PermissionError):
                pass
        assert s.stop() == 0


def test_disaggregated_chaos():
    run_deployment("disaggregated 1P+2D", ("--prefill-workers", "1", "--decode-workers", "2"),
                   {"prefill": [0], "decode": [1, 2]}, SEED)


def test_aggregated_chaos():
    run_deployment("aggregated 2", ("--workers", "2"), {"aggregated": [0, 1]}, SEED + 1)


run_tests(globals(), [])
