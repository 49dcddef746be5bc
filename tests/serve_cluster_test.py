#!/usr/bin/env python3
"""serve_cluster_test.py DYAD SOURCE_DIR — cluster mode on a real NATS server (docs/cluster.md).

Starts Debian's nats-server with JetStream on a free loopback port, then frontends with
`dyad serve --cluster` and workers with `dyad worker --cluster`, each its own process, and
checks, against an embedded `dyad serve --workers 1` of the same model:
  - greedy text (whole and streamed) is the embedded deployment's, and requests spread over
    the two aggregated workers; `dyad cluster status` lists them with their roles;
  - two frontends serve at once from the same workers, with the same answers;
  - a worker of another block size is refused with a clear line;
  - a worker killed with SIGKILL is let go when its lease runs out, and requests go on on
    the other; a worker sent SIGTERM leaves cleanly (its entry deleted) and the frontend,
    with no worker left, answers 503;
  - one prefill and one decode worker: prompts are prefilled remotely, their KV crosses over
    TCP, and the text is the embedded deployment's.
Without nats-server the test is skipped (exit 77), except under scripts/test.sh. Standard
library only; prints 'N passed, N failed'."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

# Debian installs nats-server in /usr/sbin, which a user's PATH often lacks.
NATS_SERVER = shutil.which("nats-server", path=os.environ.get("PATH", "") + ":/usr/sbin:/usr/local/sbin")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dyad_http import MODEL, Checks, Server, skip  # noqa: E402

DYAD, SRC = sys.argv[1], sys.argv[2]
LONG = "Once upon a time, there was a little girl named Lily. She loved to play outside. " * 6
LEASE = "1.5"
PROMPTS = [f"Story {i}. Once upon a time" for i in range(6)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Nats:
    """A nats-server with JetStream in a temporary directory, stopped at exit."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="dyad-nats-")
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.log = open(os.path.join(self.dir, "nats.log"), "w+")
        self.proc = subprocess.Popen([NATS_SERVER, "-js", "-a", "127.0.0.1", "-p",
                                      str(self.port), "-sd", os.path.join(self.dir, "js")],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nats-server did not start")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=20)
        shutil.rmtree(self.dir, ignore_errors=True)


class Worker:
    def __init__(self, url, *args):
        self.log = tempfile.NamedTemporaryFile("w+", prefix="dyad-worker-", suffix=".log")
        self.proc = subprocess.Popen([DYAD, "worker", "--cluster", url, "--cluster-lease",
                                      LEASE, "--threads", "1", *args], stderr=self.log)

    def text(self):
        self.log.seek(0)
        return self.log.read()

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=60)
        return self.proc.returncode


def status(url):
    r = subprocess.run([DYAD, "cluster", "status", "--cluster", url, "--json"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r
    return json.loads(r.stdout)


def workers_up(server, n):
    """Waits until n workers serve (the status document's pools)."""
    def up():
        st, doc, _ = server.request("GET", "/v1/dyad/status")
        return st == 200 and sum(1 for w in doc["workers"] if w["state"] == "serving") == n
    return server.wait_for(up, timeout=60)


def ask(s, prompt, max_tokens=30):
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    st, r, _ = s.request("POST", "/v1/completions", body)
    assert st == 200, (st, r)
    return r


def streamed(s, prompt, max_tokens=30):
    events = s.stream("/v1/completions", {"model": MODEL, "prompt": prompt,
                                          "max_tokens": max_tokens, "temperature": 0,
                                          "stream": True})
    assert events[-1] == "[DONE]", events
    return "".join(e["choices"][0]["text"] for e in events[:-1] if e.get("choices"))


def main():
    if not NATS_SERVER:
        skip("nats-server is not installed")
    r = subprocess.run([DYAD, "serve", "--cluster", "nats://127.0.0.1:1", "--cluster-timeout",
                        "0", "--port", "0"], capture_output=True, text=True, timeout=60)
    if "built without" in r.stderr:
        skip("dyad was built without NATS (libnats-dev)")
    nats = Nats()
    ref = Server(DYAD, "--workers", "1")
    front = Server(DYAD, "--cluster", nats.url, "--cluster-timeout", "20")
    workers = [Worker(nats.url, "--role", "agg") for _ in range(2)]
    check = Checks()

    def greedy_equal():
        assert workers_up(front, 2), "two cluster workers did not come up"
        used = set()
        for p in PROMPTS:
            got, want = ask(front, p), ask(ref, p)
            assert got["choices"][0]["text"] == want["choices"][0]["text"], (got, want)
            assert got["choices"][0]["text"], got
            used.add(got["dyad"]["choices"][0]["worker"])
        assert streamed(front, PROMPTS[0]) == ask(ref, PROMPTS[0])["choices"][0]["text"]
        assert len(used) == 2, f"requests went to workers {used} only"

    def status_lists():
        doc = status(nats.url)
        roles = sorted(w["role"] for w in doc["workers"])
        assert roles == ["agg", "agg"], doc
        assert all(not w["lease_expired"] for w in doc["workers"]), doc

    second = []

    def two_frontends():
        b = Server(DYAD, "--cluster", nats.url, "--cluster-timeout", "20")
        second.append(b)
        assert workers_up(b, 2)
        for p in PROMPTS[:3]:
            assert ask(b, p)["choices"][0]["text"] == ask(front, p)["choices"][0]["text"]

    def refuses_other_block_size():
        odd = Worker(nats.url, "--role", "agg", "--block-size", "32")
        try:
            ok = front.wait_for(lambda: "refusing worker" in log_of(front), timeout=30)
            assert ok, log_of(front)[-2000:]
            assert "KV blocks of 32 positions" in log_of(front), log_of(front)[-2000:]
        finally:
            odd.stop()

    def lease_expiry_and_leave():
        workers[0].stop(signal.SIGKILL)
        assert workers_up(front, 1), "the killed worker was not let go"
        assert "has not renewed its lease" in log_of(front), log_of(front)[-2000:]
        for p in PROMPTS[:2]:
            assert ask(front, p)["choices"][0]["text"] == ask(ref, p)["choices"][0]["text"]
        assert workers[1].stop(signal.SIGTERM) == 0, workers[1].text()
        assert workers_up(front, 0)
        assert "left the cluster" in log_of(front), log_of(front)[-2000:]
        st, body, _ = front.request("POST", "/v1/completions",
                                    {"model": MODEL, "prompt": "x", "max_tokens": 4})
        assert st == 503, (st, body)
        doc = status(nats.url)
        assert all(w["lease_expired"] for w in doc["workers"]), doc  # only the killed one's stays

    def disaggregated():
        pre = Worker(nats.url, "--role", "prefill")
        dec = Worker(nats.url, "--role", "decode", "--kv-listen", "127.0.0.1:0")
        workers.extend([pre, dec])
        assert workers_up(front, 2)
        for i in range(2):
            p = f"Tale {i}. " + LONG
            got, want = ask(front, p, 24), ask(ref, p, 24)
            assert got["choices"][0]["text"] == want["choices"][0]["text"], (got, want)
            c = got["dyad"]["choices"][0]
            assert c["prefill_worker"] is not None and c["kv_transfer"]["bytes"] > 0, c

    try:
        check("greedy text equals the embedded deployment's", greedy_equal)
        check("dyad cluster status lists the workers", status_lists)
        check("two frontends share the workers", two_frontends)
        check("a worker of another block size is refused", refuses_other_block_size)
        check("a killed worker's lease expires; a stopped one leaves", lease_expiry_and_leave)
        check("prefill and decode workers over TCP", disaggregated)
    finally:
        for w in workers:
            w.stop(signal.SIGKILL)
        check.stop([ref, front] + second)
        nats.stop()
    check.exit()


def log_of(server):
    server.log.seek(0)
    return server.log.read()


if __name__ == "__main__":
    main()
