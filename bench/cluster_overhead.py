#!/usr/bin/env python3
"""bench/cluster_overhead.py [DYAD] — what cluster mode's NATS path adds against the embedded
deployment's Unix sockets (issue 16, docs/cluster.md "What NATS costs"): the same model on one
aggregated worker, served (a) embedded, `dyad serve --workers 1`, and (b) in cluster mode on
one host: a nats-server with JetStream, `dyad serve --cluster` and one `dyad worker
--cluster`. Every frame then crosses NATS twice (worker → server → frontend), a token being one
frame. `dyad bench` measures TTFT and ITL at concurrency 1 and 16; the arms alternate (the order
reversed every round), a fresh deployment each run, the machine idle-gated before each.

MODEL (default models/generated/15m-q8_0.gguf, made with gen-model if missing: a small model, so
that the per-token cost of the path is a visible share), ROUNDS (3), REQUESTS (32 a run, after 8
of warm-up), ISL (128), OSL (64), THREADS (1 engine thread), OUT (default
docs/bench/cluster_overhead.log). QUICK=1: the bundled stories260K, 1 round, 8 requests (a
smoke run; the figures mean nothing). A benchmark: it prints figures and asserts nothing."""
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

# Debian installs nats-server in /usr/sbin, which a user's PATH often lacks.
NATS_SERVER = shutil.which("nats-server", path=os.environ.get("PATH", "") + ":/usr/sbin:/usr/local/sbin")

import benchlib
from benchlib import ROOT

QUICK = bool(os.environ.get("QUICK"))
ROUNDS = 1 if QUICK else int(os.environ.get("ROUNDS", "3"))
REQUESTS = 8 if QUICK else int(os.environ.get("REQUESTS", "32"))
ISL = 16 if QUICK else int(os.environ.get("ISL", "128"))
OSL = 8 if QUICK else int(os.environ.get("OSL", "64"))
THREADS = os.environ.get("THREADS", "1")
CONCURRENCY = (1, 16)


def model_args(dyad):
    if QUICK:
        return []  # the bundled model, both sides' default
    model = os.environ.get("MODEL") or benchlib.generated_model(dyad, "15m-q8_0")
    return ["--model", model]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """nats-server, one frontend and one worker on this host, until stop()."""

    def __init__(self, dyad, margs):
        self.dir = tempfile.mkdtemp(prefix="dyad-overhead-")
        port = free_port()
        self.url = f"nats://127.0.0.1:{port}"
        self.nats = subprocess.Popen([NATS_SERVER, "-js", "-a", "127.0.0.1", "-p", str(port),
                                      "-sd", os.path.join(self.dir, "js")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        self.worker = subprocess.Popen([dyad, "worker", "--cluster", self.url, "--role", "agg",
                                        "--threads", THREADS, *margs],
                                       stderr=subprocess.DEVNULL)
        self.front = benchlib.dyad_http.Server(dyad, "--cluster", self.url, *margs)
        ok = self.front.wait_for(lambda: self.front.request("GET", "/v1/dyad/status")[1]
                                 ["workers"][0]["state"] == "serving", timeout=120)
        if not ok:
            self.stop()
            raise RuntimeError("the cluster worker did not come up")

    def stop(self):
        self.front.stop()
        for p in (self.worker, self.nats):
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def run(dyad, arm, margs, conc, vocab, seed):
    if not QUICK:
        benchlib.wait_idle()
    if arm == "embedded":
        server = benchlib.dyad_http.Server(dyad, "--workers", "1", "--threads-per-worker",
                                           THREADS, *margs)
        stop = server.stop
    else:
        c = Cluster(dyad, margs)
        server, stop = c.front, c.stop
    try:
        args = ["--isl", str(ISL), "--osl", str(OSL), "--vocab-size", str(vocab), "--seed",
                str(seed), "--concurrency", str(conc)]
        benchlib.bench(dyad, server, *args, "--requests", str(max(conc, 8)))
        return benchlib.bench(dyad, server, *args, "--requests", str(max(REQUESTS, conc)))[-1]
    finally:
        stop()


def main():
    dyad = benchlib.dyad_binary()
    if not NATS_SERVER:
        sys.exit("bench/cluster_overhead.py: needs nats-server (scripts/install-deps.sh)")
    margs = model_args(dyad)
    vocab = 512 if QUICK else 32000
    arms = ["embedded", "cluster"]
    model = margs[1] if margs else "stories260K (bundled)"
    lines = [benchlib.env_header(f"bench/cluster_overhead.py: ISL {ISL}, OSL {OSL}, "
                                 f"{REQUESTS} requests a run, 1 aggregated worker x {THREADS} "
                                 f"thread(s), {ROUNDS} rounds alternated"),
             f"# dyad = {benchlib.binary_id(dyad)}", f"# model {model}", "",
             "| round | concurrency | arm | TTFT p50 ms | TTFT p90 ms | ITL p50 ms | ITL p90 ms "
             "| output tok/s |", "|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    seen = {}
    for rnd in range(1, ROUNDS + 1):
        for conc in CONCURRENCY:
            for arm in (arms if rnd % 2 else arms[::-1]):
                r = run(dyad, arm, margs, conc, vocab, seed=200 + rnd)
                row = (r["ttft_ms"]["p50"], r["ttft_ms"]["p90"], r["itl_ms"]["p50"],
                       r["itl_ms"]["p90"], r["output_throughput"])
                seen.setdefault((conc, arm), []).append(row)
                lines.append(f"| {rnd} | {conc} | {arm} | " +
                             " | ".join(f"{v:.2f}" for v in row[:4]) + f" | {row[4]:.1f} |")
                print(lines[-1], flush=True)
    lines += ["", "medians over the rounds; cluster − embedded:", "",
              "| concurrency | TTFT p50 ms (emb → cluster) | added | ITL p50 ms (emb → cluster) "
              "| added | output tok/s (emb → cluster) |", "|---|---|---|---|---|---|"]
    print("\n".join(lines[-5:]), flush=True)
    for conc in CONCURRENCY:
        med = {arm: [statistics.median(x[i] for x in seen[(conc, arm)]) for i in range(5)]
               for arm in arms}
        e, c = med["embedded"], med["cluster"]
        lines.append(f"| {conc} | {e[0]:.2f} → {c[0]:.2f} | {c[0] - e[0]:+.2f} | "
                     f"{e[2]:.2f} → {c[2]:.2f} | {c[2] - e[2]:+.2f} | {e[4]:.1f} → {c[4]:.1f} |")
        print(lines[-1], flush=True)
    if not QUICK:
        path = os.environ.get("OUT", os.path.join(ROOT, "docs", "bench", "cluster_overhead.log"))
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")


main()
