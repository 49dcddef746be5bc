#!/usr/bin/env python3
"""serve_node_test.py DYAD SOURCE_DIR — the node agent (`dyad node`, docs/cluster.md "Node
agents") on a real NATS server, driven by `dyad cluster start|stop|nodes`.

Starts nats-server with JetStream on a free loopback port, one `dyad node --cores 2`, and
checks:
  - two `cluster start --role agg --threads 1` succeed, a third is refused (no free cores);
    `cluster nodes` shows 2/2 cores used and both workers;
  - a `dyad serve --cluster` frontend serves with them greedy text equal to an embedded
    `dyad serve --workers 1`;
  - `cluster stop` one worker frees its core and the frontend lets it go;
  - a worker killed with SIGKILL: the node notices and frees its core;
  - malformed requests sent straight over NATS get {"ok":false} naming the field, and the
    node goes on; the CLI's own usage errors exit 2, a refusal or an unknown node 1;
  - SIGTERM to the node: its workers leave (their registry entries deleted) and its entry is
    deleted.
Without nats-server the test is skipped (exit 77), except under scripts/test.sh. Standard
library only; prints 'N passed, N failed'."""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dyad_http import Checks, Server, skip  # noqa: E402
from serve_cluster_test import NATS_SERVER, Nats, ask, status, workers_up  # noqa: E402

DYAD, SRC = sys.argv[1], sys.argv[2]
PROMPTS = [f"Story {i}. Once upon a time" for i in range(3)]


def cli(*args, timeout=60):
    return subprocess.run([DYAD, "cluster", *args], capture_output=True, text=True,
                          timeout=timeout)


def nodes(url):
    r = cli("nodes", "--cluster", url, "--json")
    assert r.returncode == 0, r
    return json.loads(r.stdout)["nodes"]


def wait(pred, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


def nats_request(port, subject, payload, timeout=10):
    """One request over the NATS text protocol: the reply's payload as bytes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        f = s.makefile("rb")
        f.readline()  # INFO
        s.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB _INBOX.t 1\r\n')
        s.sendall(b"PUB %s _INBOX.t %d\r\n%s\r\n" % (subject.encode(), len(payload), payload))
        while True:
            line = f.readline()
            if not line:
                raise RuntimeError("NATS closed the connection")
            if line.startswith(b"PING"):
                s.sendall(b"PONG\r\n")
            elif line.startswith(b"MSG "):
                n = int(line.split()[-1])
                return f.read(n + 2)[:n]


class Node:
    def __init__(self, url, *args):
        self.log = tempfile.NamedTemporaryFile("w+", prefix="dyad-node-", suffix=".log")
        self.proc = subprocess.Popen([DYAD, "node", "--cluster", url, "--lease", "1.5",
                                      "--drain", "5", *args], stderr=self.log)
        self.key = None
        assert wait(lambda: self.proc.poll() is not None or "registered at" in self.text()), \
            self.text()
        self.key = self.text().split("dyad node ")[1].split(":")[0]

    def text(self):
        self.log.seek(0)
        return self.log.read()


def main():
    if not NATS_SERVER:
        skip("nats-server is not installed")
    r = subprocess.run([DYAD, "node", "--cluster", "nats://127.0.0.1:1", "--cores", "1",
                        "--timeout", "0"], capture_output=True, text=True, timeout=60)
    if "built without" in r.stderr:
        assert r.returncode == 2, r
        skip("dyad was built without NATS (libnats-dev)")
    nats = Nats()
    ref = Server(DYAD, "--workers", "1")
    node = Node(nats.url, "--cores", "2", "--host-name", "nodeA")
    front = None
    started = []
    check = Checks(lambda: print(node.text()[-3000:]))

    def start_within_budget():
        for _ in range(2):
            r = cli("start", "--cluster", nats.url, "--node", "nodeA", "--role", "agg",
                    "--threads", "1")
            assert r.returncode == 0, r
            assert r.stdout.startswith("started worker w"), r
            started.append(r.stdout.split()[2])
        r = cli("start", "--cluster", nats.url, "--node", node.key, "--role", "agg",
                "--threads", "1")
        assert r.returncode == 1, r
        assert "refused: threads: 1 is more than the free cores of nodeA (0 of 2 free)" \
            in r.stderr, r
        (n,) = nodes(nats.url)
        assert n["key"] == node.key and n["host"] == "nodeA", n
        assert (n["cores_used"], n["cores"]) == (2, 2), n
        assert sorted(w["key"] for w in n["workers"]) == sorted(started), n
        table = cli("nodes", "--cluster", nats.url).stdout
        assert "cores 2/2 used" in table and all(k in table for k in started), table
        reg = {w["key"]: w for w in status(nats.url)["workers"]}
        assert all(reg[k]["host"] == "nodeA" and reg[k]["threads"] == 1 for k in started), reg

    def frontend_serves():
        nonlocal front
        front = Server(DYAD, "--cluster", nats.url, "--cluster-timeout", "20")
        assert workers_up(front, 2), "the node's two workers did not come up"
        for p in PROMPTS:
            got, want = ask(front, p), ask(ref, p)
            assert got["choices"][0]["text"] == want["choices"][0]["text"], (got, want)
            assert got["choices"][0]["text"], got

    def stop_frees_a_core():
        r = cli("stop", "--cluster", nats.url, "--worker", started[0])
        assert r.returncode == 0, r
        assert f"stopped worker {started[0]}" in r.stdout, r
        (n,) = nodes(nats.url)
        assert n["cores_used"] == 1 and [w["key"] for w in n["workers"]] == [started[1]], n
        assert workers_up(front, 1), "the frontend did not let the stopped worker go"
        assert started[0] not in {w["key"] for w in status(nats.url)["workers"]}
        r = cli("stop", "--cluster", nats.url, "--worker", started[0])
        assert r.returncode == 1 and "no node agent runs it" in r.stderr, r

    def kill9_noticed():
        (n,) = nodes(nats.url)
        pid = n["workers"][0]["pid"]
        os.kill(pid, signal.SIGKILL)
        assert wait(lambda: nodes(nats.url)[0]["cores_used"] == 0), nodes(nats.url)
        assert "died by itself (killed by signal 9); its 1 core is free" in node.text()

    def bad_requests():
        subject = f"dyad.n.{node.key}.cmd"
        for body, want in [(b"not json", "bad request: request: not JSON"),
                           (b'{"op":"start","role":"agg","threads":0}',
                            "bad request: threads: must be an integer in [1, 256]"),
                           (b'{"op":"start","role":"both","threads":1}',
                            "bad request: role: must be one of"),
                           (b'{"op":"stop","worker":"x"}',
                            "bad request: worker: must be a worker's key"),
                           (b'{"op":"stop","worker":"w00000001"}', "not a worker of node"),
                           (b'{"op":"fly"}', "bad request: op: must be one of")]:
            a = json.loads(nats_request(nats.port, subject, body))
            assert a["ok"] is False and want in a["error"], (body, a)
        a = json.loads(nats_request(nats.port, subject, b'{"op":"list"}'))
        assert a["ok"] is True and a["node"]["cores"] == 2, a
        assert node.proc.poll() is None, node.text()
        for args, rc, msg in [(["start", "--cluster", nats.url, "--node", "nodeA", "--threads",
                                "1"], 2, "--role: required"),
                              (["start", "--cluster", nats.url, "--node", "nodeA", "--role",
                                "agg", "--threads", "0"], 2, "--threads"),
                              (["stop", "--cluster", nats.url, "--worker", "w1"], 2,
                               "not a worker's key"),
                              (["start", "--cluster", "http://x", "--node", "a", "--role", "agg",
                                "--threads", "1"], 2, "--cluster"),
                              (["start", "--cluster", nats.url, "--node", "nodeB", "--role",
                                "agg", "--threads", "1"], 1, "no live node agent")]:
            r = cli(*args)
            assert r.returncode == rc and msg in r.stderr, (args, r)

    def sigterm_node():
        r = cli("start", "--cluster", nats.url, "--node", "nodeA", "--role", "decode",
                "--threads", "2")
        assert r.returncode == 0, r
        key = r.stdout.split()[2]
        reg = {w["key"]: w for w in status(nats.url)["workers"]}
        assert reg[key]["role"] == "decode" and reg[key]["kv_addr"].startswith("127.0.0.1:"), reg
        node.proc.send_signal(signal.SIGTERM)
        assert node.proc.wait(timeout=20) == 0, node.text()
        assert f"worker {key}" in node.text() and "left the cluster" in node.text()
        assert key not in {w["key"] for w in status(nats.url)["workers"]}
        assert nodes(nats.url) == []

    try:
        check("two starts within the budget, a third refused; cluster nodes", start_within_budget)
        check("a frontend serves the embedded deployment's greedy text", frontend_serves)
        check("cluster stop frees a core; the frontend lets it go", stop_frees_a_core)
        check("a worker killed with SIGKILL: the node frees its core", kill9_noticed)
        check("malformed requests are refused naming the field", bad_requests)
        check("SIGTERM: the workers leave and the entry is deleted", sigterm_node)
    finally:
        if node.proc.poll() is None:
            node.proc.kill()
            node.proc.wait()
        check.stop([ref, front])
        nats.stop()
    check.exit()


if __name__ == "__main__":
    main()
