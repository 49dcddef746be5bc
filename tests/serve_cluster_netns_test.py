#!/usr/bin/env python3
"""serve_cluster_netns_test.py DYAD SOURCE_DIR — cluster mode across hosts, and its faults.

Six network namespaces stand in for six machines, each with a veth onto one bridge (in a
seventh, "switch" namespace), on a private /24 of our own (chosen as tests/cli_netns.sh
does; only our namespaces' addresses are ever contacted):
  nats  nats-server -js with a store directory
  fe1   dyad serve --cluster nats://NATS:4222 --host FE1      (a frontend; no workers)
  fe2   the same
  pre   dyad worker --cluster ... --role prefill
  dec1  dyad worker --cluster ... --role decode --kv-listen DEC1:0
  dec2  the same on DEC2
The test itself talks HTTP to the frontends from the root namespace (a veth of its own on the
bridge), and compares with an embedded `dyad serve --workers 1` there (greedy, stories260K):
  a) whole and streamed text from both frontends is the embedded deployment's; long prompts
     are prefilled on the prefill host and their KV crosses over TCP; `dyad cluster status`
     run in a frontend's namespace lists the three workers with their roles;
  b) under steady streaming load from both frontends, a decode host's worker is killed
     (SIGKILL) mid-stream: each affected request completes with exactly the reference text
     or ends with a clear error; none hangs or is lost; later requests go to the other one;
  c) the prefill host's worker is killed: long prompts are prefilled locally on their decode
     worker, with the reference text; started again, prompts are prefilled remotely again;
  d) a decode host is cut off (its veth down in its namespace) for longer than the lease:
     the frontends let it go and requests go on elsewhere; healed, it renews its lease and
     the frontends take it back; no request is answered twice;
  e) nats-server is restarted (SIGTERM, then again with the same store and port): workers
     and frontends reconnect by themselves, requests in flight end cleanly, both frontends
     serve again, their routers' indexes are resynced from the workers, and KV-aware
     routing finds cached prefixes again (cached tokens);
  f) a registered worker that never answers its HELLO (a raw NATS client of the test's own)
     holds each frontend's watcher for 3 s: no healthy worker may be let go for it.
Each check also holds that the workers it does not touch are never let go meanwhile.
Every request is counted client-side: each must get exactly one final answer (the reference
text, or an OpenAI-style error: an HTTP error status with an error object, or an SSE error
event then [DONE]); a hang, a cut stream, wrong text or a second answer fails the test.
DYAD_NETNS_ONLY=REGEX runs only the checks whose names match; DYAD_NETNS_LOGS=DIR keeps
every process's log there.
Needs root, iproute2 and nats-server (exit 77 without them, except under scripts/test.sh:
dyad_http.skip). Everything it made is removed on exit. Standard library only; prints a
counts line and 'N passed, N failed'."""
import atexit
import http.client
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dyad_http import MODEL, Server, skip  # noqa: E402

DYAD, SRC = sys.argv[1], sys.argv[2]
LEASE = "1.5"
NATS_PORT = 4222
LONG = "Once upon a time, there was a little girl named Lily. She loved to play outside. " * 6
LOAD_TOKENS = 96         # a load stream's length (ignore_eos): long enough to be cut mid-way
CLIENT_TIMEOUT = 30      # seconds without a byte: the request hangs (counted as lost)
REQUEST_DEADLINE = 40    # seconds for a whole answer, keep-alive comments or not
HOSTS = ["nats", "fe1", "fe2", "pre", "dec1", "dec2"]
WORKER_IDS = {"pre": 0x1001, "dec1": 0x1002, "dec2": 0x1003}


def log(*a):
    print(*a, flush=True)


def wait_until(pred, timeout, step=0.05):
    """Polls pred until it holds (True) or timeout seconds pass (False)."""
    end = time.time() + timeout
    while True:
        try:
            if pred():
                return True
        except (OSError, KeyError, IndexError, ValueError, AssertionError,
                http.client.HTTPException):
            pass
        if time.time() >= end:
            return False
        time.sleep(step)


# ---------------------------------------------------------------- the network

def sh(*cmd, check=True):
    r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r


class Net:
    """The namespaces, the bridge, the veths and the root namespace's own veth onto it."""

    def __init__(self):
        self.tag = os.getpid()
        self.made_ns, self.root_if = [], None
        self.ns = {h: f"dyad{self.tag}{h}" for h in HOSTS}
        self.switch = f"dyad{self.tag}sw"
        self.ifname = {h: f"dy{self.tag}h{i}" for i, h in enumerate(HOSTS)}
        self.net = self.pick_net()
        self.addr = {h: f"{self.net}.{i + 1}" for i, h in enumerate(HOSTS)}
        self.root_addr = f"{self.net}.254"

    def pick_net(self):
        """A /24 of 10/8 as tests/cli_netns.sh picks it, skipping any that a route of the root
        namespace covers (our veth there must not shadow a real network)."""
        routes = []
        for line in sh("ip", "-4", "route", "show", "table", "all").stdout.splitlines():
            dst = line.split()[1] if line.split()[0] in ("local", "broadcast", "unicast") \
                else line.split()[0]
            if dst != "default" and re.match(r"[\d./]+$", dst):
                routes.append(ipaddress.ip_network(dst, strict=False))
        for k in range(64):
            t = self.tag + k * 7919
            net = f"10.{(t >> 8) % 200 + 20}.{t % 250}"
            if not any(r.overlaps(ipaddress.ip_network(net + ".0/24")) for r in routes):
                return net
        raise RuntimeError("no /24 of 10/8 is free of the root namespace's routes")

    def add_ns(self, name):
        sh("ip", "netns", "add", name)
        self.made_ns.append(name)
        sh("ip", "-n", name, "link", "set", "lo", "up")

    def up(self):
        self.add_ns(self.switch)
        sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.switch, "link", "set", "br0", "up")
        for h in HOSTS:
            ns, dev = self.ns[h], self.ifname[h]
            self.add_ns(ns)
            sh("ip", "link", "add", dev, "type", "veth", "peer", "name", dev + "s")
            sh("ip", "link", "set", dev, "netns", ns)
            sh("ip", "link", "set", dev + "s", "netns", self.switch)
            sh("ip", "-n", self.switch, "link", "set", dev + "s", "master", "br0", "up")
            sh("ip", "-n", ns, "addr", "add", self.addr[h] + "/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
        self.root_if = f"dy{self.tag}r"
        sh("ip", "link", "add", self.root_if, "type", "veth", "peer", "name", self.root_if + "s")
        sh("ip", "link", "set", self.root_if + "s", "netns", self.switch)
        sh("ip", "-n", self.switch, "link", "set", self.root_if + "s", "master", "br0", "up")
        sh("ip", "addr", "add", self.root_addr + "/24", "dev", self.root_if)
        sh("ip", "link", "set", self.root_if, "up")

    def link(self, host, state):
        """Cuts a host off the bridge ("down") or heals it ("up"), inside its namespace."""
        sh("ip", "-n", self.ns[host], "link", "set", "dev", self.ifname[host], state)

    def down(self):
        if self.root_if:
            sh("ip", "link", "del", self.root_if, check=False)
            self.root_if = None
        while self.made_ns:
            sh("ip", "netns", "del", self.made_ns.pop(), check=False)


# ---------------------------------------------------------------- processes

TMP = None  # the logs and the NATS store, made by main once the test can run
PROCS = []  # every process started, for the cleanup


class Proc:
    """A command in a host's namespace (`ip netns exec` execs it: the pid is its own), its
    stderr and stdout in a log file."""

    def __init__(self, net, host, name, argv):
        self.name = name
        self.path = os.path.join(TMP, f"{name}.{len(PROCS)}.log")
        self.log = open(self.path, "w+")
        self.proc = subprocess.Popen(["ip", "netns", "exec", net.ns[host], *argv],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        PROCS.append(self)

    def text(self):
        with open(self.path) as f:
            return f.read()

    def alive(self):
        return self.proc.poll() is None

    def kill(self, sig=signal.SIGKILL, wait=20):
        if self.alive():
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"{self.name} did not end on signal {sig}")
        return self.proc.returncode


class Frontend(Server):
    """A `dyad serve --cluster` in a frontend host's namespace (dyad_http.Server's requests,
    waits and sanitizer-checking stop)."""

    def __init__(self, net, host, url):
        self.host_name = host
        self.p = Proc(net, host, host, [DYAD, "serve", "--port", "0", "--host", net.addr[host],
                                        "--cluster", url, "--cluster-timeout", "20"])
        self.proc, self.log = self.p.proc, self.p.log
        m = None
        for _ in range(600):
            m = re.search(r"http://([\d.]+):(\d+)", self.p.text())
            if m or self.proc.poll() is not None:
                break
            time.sleep(0.05)
        if not m:
            raise RuntimeError(f"{host} did not start: " + self.p.text())
        self.host, self.port = m.group(1), int(m.group(2))

    def attached(self):
        """Its fleet slots → (host, incarnation) of the worker attached there last (its log
        lines: "worker 2 is w00001002 (decode: ... on dec1, pid 42, 1 threads, incarnation
        5f0c1a2b)")."""
        return {int(s): (h, inc) for s, h, inc in re.findall(
            r"dyad serve: worker (\d+) is w[0-9a-f]{8} \(\w+: \S+ on (\S+), pid \d+, \d+ "
            r"threads, incarnation ([0-9a-f]+)\)", self.p.text())}

    def slots(self):
        """Its fleet slots → the host of the worker attached there last."""
        return {k: v[0] for k, v in self.attached().items()}

    def serving(self, incarnations=False):
        """The hosts (and incarnations) of the workers that serve now (its status document)."""
        st, doc, _ = self.request("GET", "/v1/dyad/status")
        assert st == 200, (st, doc)
        att = self.attached()
        got = [att.get(w["id"], ("?", "?")) for w in doc["workers"] if w["state"] == "serving"]
        return sorted(got if incarnations else [h for h, _ in got])

    def in_flight(self, host):
        st, doc, _ = self.request("GET", "/v1/dyad/status")
        slots = self.slots()
        return sum(w["in_flight"] for w in doc["workers"]
                   if w["state"] == "serving" and slots.get(w["id"]) == host)

    def indexed(self, host):
        """The blocks its router's index says host's worker holds (its /metrics)."""
        st, doc, _ = self.request("GET", "/v1/dyad/status")
        slots = {w["id"] for w in doc["workers"] if w["state"] == "serving"}
        total = 0
        for k, v in self.metrics().items():
            m = re.match(r'dyad_router_worker_indexed_blocks\{worker="(\d+)"\}$', k)
            if m and int(m.group(1)) in slots and self.slots().get(int(m.group(1))) == host:
                total += v
        return total

    def idle(self):
        """Every worker it serves with has reported no sequence running or waiting."""
        st, doc, _ = self.request("GET", "/v1/dyad/status")
        return st == 200 and all(w["running"] == 0 and w["waiting"] == 0 and
                                 w["in_flight"] == 0 for w in doc["workers"]
                                 if w["state"] == "serving")

    def lines(self, what):
        return self.p.text().count(what)

    def let_go(self, host):
        """How many times it has let host's worker go, for whatever reason (its log)."""
        return len(re.findall(r"dyad serve: worker \d+ \(w%08x\) (?!.*left the cluster)"
                              % WORKER_IDS[host], self.p.text()))


class Bystanders:
    """The workers a check does not touch: no frontend may let them go meanwhile (a healthy
    worker's lease judged from stale data would end its sequences for nothing)."""

    def __init__(self, fronts, hosts):
        self.fronts, self.hosts = fronts, hosts
        self.was = self.now()

    def now(self):
        return {(f.host_name, h): f.let_go(h) for f in self.fronts for h in self.hosts}

    def check(self):
        now = self.now()
        assert now == self.was, f"healthy workers let go: {self.was} -> {now}"


# ---------------------------------------------------------------- requests, counted

class Ledger:
    """Every request sent, and how it ended."""
    KINDS = ("ok", "error", "lost", "wrong", "duplicated")

    def __init__(self):
        self.mu = threading.Lock()
        self.sent = 0
        self.n = dict.fromkeys(self.KINDS, 0)
        self.bad = []  # the lost, wrong and duplicated ones, for the report

    def record(self, o):
        with self.mu:
            self.sent += 1
            self.n[o.kind] += 1
            if o.kind in ("lost", "wrong", "duplicated"):
                self.bad.append(o)

    def line(self):
        n = self.n
        return (f"requests sent {self.sent} / completed with the reference text {n['ok']} / "
                f"clean errors {n['error']} / lost {n['lost']} / wrong text {n['wrong']} / "
                f"duplicated {n['duplicated']}")


LEDGER = Ledger()


class Outcome:
    def __init__(self, front, prompt, stream):
        self.front, self.prompt, self.stream = front, prompt, stream
        self.kind, self.why, self.text, self.body, self.dyad = None, "", "", None, None
        self.t0, self.t1 = time.time(), None
        self.worker_host = None

    def __repr__(self):
        return (f"<{self.kind} via {self.front.host_name} stream={self.stream} on "
                f"{self.worker_host}: {self.why} text={self.text[:60]!r}>")


REF = {}       # (prompt, max_tokens) → the embedded deployment's text
REF_SERVER = []


def body_of(prompt, max_tokens, stream):
    b = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
         "ignore_eos": True}
    if stream:
        b["stream"] = True
    return b


def reference(prompt, max_tokens):
    key = (prompt, max_tokens)
    if key not in REF:
        st, r, _ = REF_SERVER[0].request("POST", "/v1/completions",
                                         body_of(prompt, max_tokens, False))
        assert st == 200 and r["choices"][0]["text"], (st, r)
        REF[key] = r["choices"][0]["text"]
    return REF[key]


def is_error_object(doc):
    return (isinstance(doc, dict) and isinstance(doc.get("error"), dict)
            and isinstance(doc["error"].get("message"), str) and doc["error"]["message"])


def judge_text(o, want, finals):
    if finals > 1:
        o.kind, o.why = "duplicated", f"{finals} final answers"
    elif o.text == want:
        o.kind = "ok"
    else:
        o.kind, o.why = "wrong", f"text differs from the reference {want[:60]!r}"


def call(front, prompt, max_tokens=LOAD_TOKENS, stream=True, on_token=None):
    """One request, judged against the reference and counted in the ledger."""
    want = reference(prompt, max_tokens)
    o = Outcome(front, prompt, stream)
    c = http.client.HTTPConnection(front.host, front.port, timeout=CLIENT_TIMEOUT)
    try:
        c.request("POST", "/v1/completions", body=json.dumps(body_of(prompt, max_tokens, stream)),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200 or not stream:
            raw = r.read().decode()
            try:
                doc = json.loads(raw)
            except ValueError:
                doc = raw
            o.body = doc
            if r.status != 200:
                o.kind = "error" if is_error_object(doc) else "lost"
                o.why = f"HTTP {r.status}: {raw[:200]}"
            else:
                o.text = doc["choices"][0]["text"]
                o.dyad = doc["dyad"]["choices"][0]
                judge_text(o, want, 1)
        else:
            stream_events(o, r, want, on_token)
    except (OSError, http.client.HTTPException, ValueError, KeyError) as e:
        o.kind, o.why = "lost", f"{type(e).__name__}: {e}"
    finally:
        c.close()
    if o.dyad:
        o.worker_host = front.slots().get(o.dyad["worker"])
    o.t1 = time.time()
    if o.kind in ("wrong", "lost", "duplicated"):
        log(f"  !! {o.kind} at {time.strftime('%H:%M:%S', time.gmtime(o.t0))}+"
            f"{o.t1 - o.t0:.1f}s: {o!r}\n     got  {o.text!r}\n     want {want!r}")
    LEDGER.record(o)
    return o


def stream_events(o, r, want, on_token):
    """Reads an SSE answer to its end: the text of its chunks, its final chunks, an error
    event, and what comes after [DONE] (nothing may)."""
    buf, done, finals, error, after = "", 0, 0, None, 0
    deadline = time.time() + REQUEST_DEADLINE
    while True:
        if time.time() > deadline:
            raise TimeoutError(f"no end after {REQUEST_DEADLINE} s ({len(o.text)} bytes of "
                               f"text so far)")
        chunk = r.read1(65536).decode()
        if not chunk:
            break
        buf += chunk
        while "\n\n" in buf:
            frame, buf = buf.split("\n\n", 1)
            if frame.startswith(":"):
                continue
            if not frame.startswith("data: "):
                raise ValueError(f"not an SSE data frame: {frame[:100]!r}")
            payload = frame[len("data: "):]
            if done:
                after += 1
            if payload == "[DONE]":
                done += 1
                continue
            ev = json.loads(payload)
            if is_error_object(ev):
                error = ev
                continue
            for ch in ev.get("choices", []):
                o.text += ch.get("text", "")
                if ch.get("finish_reason"):
                    finals += 1
                if on_token:
                    on_token()
            if "dyad" in ev:
                o.dyad = ev["dyad"]["choices"][0]
    if done > 1 or after or (error and finals):
        o.kind, o.why = "duplicated", f"[DONE] {done}, after it {after}, error {error}, " \
                                      f"finals {finals}"
    elif not done:
        o.kind, o.why = "lost", "the stream ended without [DONE]"
    elif error:
        # A clear error; what came before it must be the reference's beginning (no token
        # duplicated or missing before the cut).
        if want.startswith(o.text):
            o.kind, o.why = "error", error["error"]["message"]
        else:
            o.kind, o.why = "wrong", "partial text before the error is not the reference's"
    else:
        judge_text(o, want, finals)


class Load:
    """Client threads streaming from both frontends, one request after another, until
    stopped, or at most per_thread requests each, or max_s seconds."""

    def __init__(self, fronts, prompts, threads=4, per_thread=400, max_s=45):
        self.stop_ev = threading.Event()
        self.outcomes, self.mu = [], threading.Lock()
        self.mid = 0  # streams that have had a token and not ended
        self.prompts = prompts
        for p in prompts:  # here, not in the threads: a failure there would go unseen
            reference(p, LOAD_TOKENS)
        self.until = time.time() + max_s
        self.threads = [threading.Thread(target=self.run, args=(fronts[i % len(fronts)], i,
                                                                  per_thread), daemon=True)
                        for i in range(threads)]
        for t in self.threads:
            t.start()

    def run(self, front, i, count):
        for k in range(count):
            if self.stop_ev.is_set() or time.time() > self.until:
                break
            seen = [False]

            def tok():
                if not seen[0]:
                    seen[0] = True
                    with self.mu:
                        self.mid += 1
            o = call(front, self.prompts[(i + k) % len(self.prompts)], on_token=tok)
            with self.mu:
                if seen[0]:
                    self.mid -= 1
                self.outcomes.append(o)
            if o.kind == "error":
                time.sleep(0.05)  # as a client would before trying again

    def count(self):
        with self.mu:
            return len(self.outcomes)

    def streaming(self):
        with self.mu:
            return self.mid

    def finish(self, timeout=90):
        self.stop_ev.set()
        end = time.time() + timeout
        for t in self.threads:
            t.join(max(0.1, end - time.time()))
        assert not any(t.is_alive() for t in self.threads), "a client thread hangs"
        return self.outcomes


# ---------------------------------------------------------------- the cluster

class Cluster:
    def __init__(self, net):
        self.net = net
        self.url = f"nats://{net.addr['nats']}:{NATS_PORT}"
        self.store = os.path.join(TMP, "js")
        self.nats = None
        self.workers = {}
        self.fronts = []

    def start_nats(self):
        self.nats = Proc(self.net, "nats", "nats",
                         ["nats-server", "-js", "-a", self.net.addr["nats"], "-p", str(NATS_PORT),
                          "-sd", self.store])
        ok = wait_until(lambda: socket.create_connection((self.net.addr["nats"], NATS_PORT),
                                                         timeout=0.5).close() or True, 20)
        assert ok, "nats-server did not start: " + self.nats.text()

    def start_worker(self, host):
        role = "prefill" if host == "pre" else "decode"
        # A fixed id per host, as a host's service would start it: a worker started again
        # there registers under the same key, as a new process (its incarnation).
        argv = [DYAD, "worker", "--cluster", self.url, "--id", str(WORKER_IDS[host]),
                "--cluster-lease", LEASE,
                "--cluster-timeout", "20", "--cluster-host", host, "--threads", "1",
                "--role", role]
        if role == "decode":
            argv += ["--kv-listen", f"{self.net.addr[host]}:0"]
        self.workers[host] = Proc(self.net, host, host, argv)

    def all_serving(self, timeout=60):
        """Both frontends serve with the three workers, each attached once, in the
        incarnation the registry shows (so no let-go and attach is still under way)."""
        def settled():
            reg = sorted((w["host"], w["incarnation"][:8]) for w in self.status()["workers"]
                         if not w["lease_expired"])
            return (len(reg) == 3 and
                    all(f.serving(incarnations=True) == reg for f in self.fronts))
        return wait_until(settled, timeout, step=0.1)

    def serving_only(self, hosts, timeout=20):
        return wait_until(lambda: all(f.serving() == hosts for f in self.fronts), timeout)

    def incarnations(self):
        return {w["host"]: w["incarnation"] for w in self.status()["workers"]
                if not w["lease_expired"]}

    def status(self, host="fe1"):
        r = subprocess.run(["ip", "netns", "exec", self.net.ns[host], DYAD, "cluster", "status",
                            "--cluster", self.url, "--json"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r
        return json.loads(r.stdout)

    def restore(self):
        """The whole cluster up again after a check that may have failed half-way."""
        for h in ("pre", "dec1", "dec2"):
            self.net.link(h, "up")
        if not self.nats.alive():
            self.start_nats()
        for h in ("pre", "dec1", "dec2"):
            if not self.workers[h].alive():
                self.start_worker(h)
        assert self.all_serving(), [f.serving() for f in self.fronts]


# ---------------------------------------------------------------- the checks

C = {}  # the cluster, for the checks
PROMPTS = [f"Story {i}. Once upon a time" for i in range(8)]
_fresh = [0]


def fresh_long():
    """A long prompt (past --disagg-min-tokens) no worker has cached."""
    _fresh[0] += 1
    return f"Tale {_fresh[0]}. " + LONG


def expect_ok(o):
    assert o.kind == "ok", o


def cached(o):
    return o.body["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)


def settle(load, n):
    """Lets the load run on until n more of its requests have ended."""
    target = load.count() + n
    assert wait_until(lambda: load.count() >= target, 30), "the load stalled"


def judged(outs):
    """Every request ended with the reference text or a clear error (none hung, none cut,
    none answered twice): the ledger counts them; here the check fails at once."""
    bad = [o for o in outs if o.kind not in ("ok", "error")]
    assert not bad, bad


def repeat_hits(f, p=None, host=None):
    """A long prompt asked again (p, asked before and held by host's decode worker and by
    the prefill worker; or a new one, asked here first) is a prefix-cache hit the router
    predicted from its index. In this deployment the decode worker is chosen by load alone
    (docs/routing.md: the decode pool drops the prefill term), so the hit is either on the
    holder, which then prefills locally (usage.prompt_tokens_details.cached_tokens), or on
    the prefill worker, which moves the KV (the router's cached-tokens counter: usage counts
    only the generating worker's cache)."""
    if p is None:
        p = fresh_long()
        was = {h: f.indexed(h) for h in ("dec1", "dec2", "pre")}
        first = call(f, p, 24, stream=False)
        expect_ok(first)
        host = first.worker_host
        blocks = first.body["usage"]["prompt_tokens"] // 16  # --block-size
        assert wait_until(lambda: f.indexed(host) >= was[host] + blocks and
                          f.indexed("pre") >= was["pre"] + blocks, 10), \
            (host, was, f.indexed(host), f.indexed("pre"))
    # The router weighs load too: it is asked once every worker has reported itself idle
    # (load reports trail the answers by up to 0.1 s).
    assert wait_until(f.idle, 10), f.request("GET", "/v1/dyad/status")[1]
    hits = f.metrics()["dyad_router_cached_tokens_total"]
    o = call(f, p, 24, stream=False)
    expect_ok(o)
    blocks = o.body["usage"]["prompt_tokens"] // 16
    assert o.dyad["predicted_overlap_blocks"] >= blocks, (o.dyad, blocks)
    if o.dyad["prefill_worker"] is None:  # on host, or on a decode worker it moved to since
        assert cached(o) >= blocks * 16, (host, o, o.body["usage"])
    else:
        assert f.slots()[o.dyad["prefill_worker"]] == "pre", o.dyad
        ok = wait_until(lambda: f.metrics()["dyad_router_cached_tokens_total"] >=
                        hits + blocks * 16, 5)
        assert ok, (hits, f.metrics()["dyad_router_cached_tokens_total"], o.dyad)
    return o


def test_a_greedy_and_remote_prefill():
    cl = C["cluster"]
    others = Bystanders(cl.fronts, ["pre", "dec1", "dec2"])
    for f in cl.fronts:
        for p in PROMPTS[:3]:
            expect_ok(call(f, p, 30, stream=False))
            expect_ok(call(f, p, 30, stream=True))
        for _ in range(2):
            for stream in (False, True):
                o = call(f, fresh_long(), 24, stream=stream)
                expect_ok(o)
                assert o.dyad["prefill_worker"] is not None, o.dyad
                assert f.slots()[o.dyad["prefill_worker"]] == "pre", (o.dyad, f.slots())
                assert o.dyad["kv_transfer"]["bytes"] > 0, o.dyad
                assert o.worker_host in ("dec1", "dec2"), o
        # The same long prompt again: its decode worker holds its KV, and the router knows
        # (once that worker's KV events are in its index), so it goes there, a cache hit.
        repeat_hits(f)
    doc = cl.status("fe1")
    got = sorted((w["host"], w["role"]) for w in doc["workers"])
    assert got == [("dec1", "decode"), ("dec2", "decode"), ("pre", "prefill")], doc
    assert not any(w["lease_expired"] for w in doc["workers"]), doc
    for w in doc["workers"]:
        if w["role"] == "decode":
            assert w["kv_addr"].startswith(cl.net.addr[w["host"]] + ":"), w
    others.check()


def test_b_decode_killed_mid_stream():
    cl = C["cluster"]
    others = Bystanders(cl.fronts, ["pre", "dec2"])
    load = Load(cl.fronts, PROMPTS)
    try:
        # Mid-stream: streams have tokens, and the victim runs some of them.
        ok = wait_until(lambda: load.streaming() >= 2 and
                        sum(f.in_flight("dec1") for f in cl.fronts) > 0, 30, step=0.01)
        assert ok, "no stream ran on dec1"
        killed_at = time.time()
        cl.workers["dec1"].kill(signal.SIGKILL)
        assert cl.serving_only(["dec2", "pre"]), [f.serving() for f in cl.fronts]
        gone_at = time.time()
        settle(load, 12)
    finally:
        outs = load.finish()
    # Let go at its lease's end, or sooner: NATS answers a frame sent to it "no responders".
    key = "(w%08x)" % WORKER_IDS["dec1"]
    for f in cl.fronts:
        assert f.lines(key + " has not renewed its lease") or \
            f.lines(key + " did not get a frame this frontend sent"), f.p.text()
    judged(outs)
    others.check()
    affected = [o for o in outs if o.t0 < killed_at < o.t1]
    assert affected, "no request was in flight at the kill"
    errors = [o for o in affected if o.kind == "error"]
    assert all(o.stream for o in errors), errors
    # Those that had started on dec1 end with a clear error; all later ones go to dec2.
    later = [o for o in outs if o.t0 > gone_at]
    assert len(later) >= 8 and all(o.kind == "ok" and o.worker_host == "dec2" for o in later), \
        later
    log(f"  b: {len(outs)} streams, {len(affected)} in flight at the kill: "
        f"{len(affected) - len(errors)} completed, {len(errors)} clear errors; "
        f"{len(later)} after it, all on dec2")
    cl.start_worker("dec1")
    assert cl.all_serving(), [f.serving(True) for f in cl.fronts]


def test_c_prefill_killed_and_back():
    cl = C["cluster"]
    others = Bystanders(cl.fronts, ["dec1", "dec2"])
    load = Load(cl.fronts, [fresh_long() for _ in range(6)], threads=2)
    try:
        wait_until(lambda: load.streaming() >= 1, 30, step=0.01)
        cl.workers["pre"].kill(signal.SIGKILL)
        # With no prefill worker the fleet prefills every prompt on its decode worker.
        assert cl.serving_only(["dec1", "dec2"]), [f.serving() for f in cl.fronts]
        settle(load, 4)
    finally:
        outs = load.finish()
    judged(outs)
    others.check()
    local = [o for o in outs if o.kind == "ok" and o.dyad["prefill_worker"] is None]
    log(f"  c: {len(outs)} long prompts streamed across the kill: "
        f"{len(outs) - len(local)} prefilled on pre, {len(local)} locally, "
        f"{sum(o.kind == 'error' for o in outs)} clear errors; the slowest took "
        f"{max(o.t1 - o.t0 for o in outs):.2f} s")
    for f in cl.fronts:
        for stream in (False, True):
            o = call(f, fresh_long(), 24, stream=stream)
            expect_ok(o)
            assert o.dyad["prefill_worker"] is None, o.dyad
            assert o.worker_host in ("dec1", "dec2"), o
    cl.start_worker("pre")
    assert cl.all_serving(), [f.serving(True) for f in cl.fronts]
    for f in cl.fronts:
        o = call(f, fresh_long(), 24, stream=False)
        expect_ok(o)
        assert o.dyad["prefill_worker"] is not None and o.dyad["kv_transfer"]["bytes"] > 0, o
        assert f.slots()[o.dyad["prefill_worker"]] == "pre", o.dyad
    others.check()


def test_d_partition_and_heal():
    cl = C["cluster"]
    key = "(w%08x) has not renewed its lease" % WORKER_IDS["dec2"]
    before = [f.lines(key) for f in cl.fronts]
    others = Bystanders(cl.fronts, ["pre", "dec1"])
    load = Load(cl.fronts, PROMPTS)
    try:
        ok = wait_until(lambda: load.streaming() >= 2 and
                        sum(f.in_flight("dec2") for f in cl.fronts) > 0, 30, step=0.01)
        assert ok, "no stream ran on dec2"
        cut_at = time.time()
        cl.net.link("dec2", "down")
        assert cl.serving_only(["dec1", "pre"]), [f.serving() for f in cl.fronts]
        gone_at = time.time()
        # Its last renewal came up to a third of a lease before the cut.
        assert gone_at - cut_at > float(LEASE) * 2 / 3 - 0.05, gone_at - cut_at
        for f, n in zip(cl.fronts, before):
            assert f.lines(key) > n, f.p.text()[-2000:]
        settle(load, 12)
        # The cut lasts two leases at least: TCP's retransmission timers have backed off by
        # then, so the healed worker's frames trickle back over a second or two, as after a
        # real outage (its HELLO too: the frontends must go on judging the others' leases).
        assert wait_until(lambda: load.count() and time.time() - cut_at > 2 * float(LEASE),
                          10)
        healed_at = time.time()
        cl.net.link("dec2", "up")
        assert cl.all_serving(30), [f.serving(True) for f in cl.fronts]
        back_at = time.time()
        # Requests reach it again: the load spreads over both decode workers.
        ok = wait_until(lambda: any(o.t0 > back_at and o.worker_host == "dec2"
                                    for o in list(load.outcomes)), 20)
        assert ok, "no request reached dec2 after it came back"
    finally:
        cl.net.link("dec2", "up")
        outs = load.finish()
    judged(outs)
    others.check()
    during = [o for o in outs if o.t0 > gone_at and o.t1 < healed_at]
    assert len(during) >= 8 and all(o.kind == "ok" and o.worker_host == "dec1"
                                    for o in during), during
    errors = [o for o in outs if o.kind == "error"]
    log(f"  d: {len(outs)} streams; let go {gone_at - cut_at:.1f} s after the cut, back "
        f"{back_at - healed_at:.1f} s after the heal; {len(during)} served meanwhile on dec1, "
        f"{len(errors)} clear errors")
    st = cl.status("fe2")
    assert sorted(w["host"] for w in st["workers"] if not w["lease_expired"]) == \
        ["dec1", "dec2", "pre"], st


def test_e_nats_restart():
    cl = C["cluster"]
    warm = fresh_long()  # cached on a decode worker before the restart
    o = call(cl.fronts[0], warm, 24, stream=False)
    expect_ok(o)
    warm_host = o.worker_host
    blocks = o.body["usage"]["prompt_tokens"] // 16
    for f in cl.fronts:  # both indexes know it
        assert wait_until(lambda: f.indexed(warm_host) >= blocks, 10), f.indexed(warm_host)
    held = {f.host_name: {h: f.indexed(h) for h in ("dec1", "dec2", "pre")} for f in cl.fronts}
    was = cl.incarnations()
    reconnects = {h: w.text().count("reconnected to NATS") for h, w in cl.workers.items()}
    load = Load(cl.fronts, PROMPTS)
    try:
        assert wait_until(lambda: load.streaming() >= 2, 30, step=0.01), "no streams"
        cl.nats.kill(signal.SIGTERM)  # nats-server exits 1 on SIGTERM
        cl.start_nats()
        # The workers reconnect by themselves and register again (a new incarnation: what was
        # sent to them meanwhile is gone); the frontends let go and attach them again.
        ok = wait_until(lambda: all(w.text().count("reconnected to NATS") > reconnects[h]
                                    for h, w in cl.workers.items()), 30)
        assert ok, {h: w.text()[-1000:] for h, w in cl.workers.items()}
        ok = wait_until(lambda: all(was[h] != now for h, now in cl.incarnations().items())
                        and len(cl.incarnations()) == 3, 30, step=0.1)
        assert ok, (was, cl.status())
        assert cl.all_serving(40), [f.serving(True) for f in cl.fronts]
        settled_at = time.time()
        settle(load, 12)
    finally:
        outs = load.finish()
    for f in cl.fronts:
        assert f.lines("was cut off while this frontend reconnected to NATS"), f.p.text()
    judged(outs)
    later = [o for o in outs if o.t0 > settled_at]
    assert len(later) >= 8 and all(o.kind == "ok" for o in later), later
    assert {o.front.host_name for o in later} == {"fe1", "fe2"}, later
    affected = [o for o in outs if o.t1 < settled_at and o.kind == "error"]
    log(f"  e: {len(outs)} streams across the restart, {len(affected)} ended with a clear "
        f"error; {len(later)} after it, all with the reference text")
    # KV-aware routing after it: the frontends' indexes were emptied when they let the
    # workers go, and resynced from the workers' snapshots: every block held before the
    # restart is indexed again, a prompt cached before it is a cache hit on its worker, and
    # so is a new one asked twice.
    for f in cl.fronts:
        ok = wait_until(lambda: all(f.indexed(h) >= n for h, n in held[f.host_name].items()),
                        20, step=0.1)
        assert ok, (held, {h: f.indexed(h) for h in ("dec1", "dec2", "pre")})
        repeat_hits(f, warm, warm_host)
        repeat_hits(f)
    log(f"  e: resyncs asked {[f.metrics()['dyad_router_resyncs_total'] for f in cl.fronts]}")


class RawNats:
    """A bare NATS client over the text protocol (the test's own, standard library only):
    enough to subscribe, publish and put or delete a registry entry."""

    def __init__(self, addr):
        self.s = socket.create_connection((addr, NATS_PORT), timeout=10)
        self.f = self.s.makefile("rb")
        assert self.f.readline().startswith(b"INFO "), "not a NATS server"
        self.s.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,'
                       b'"no_responders":true,"protocol":1}\r\n')
        self.flush()

    def flush(self):
        """Waits for the server's PONG: everything sent before it has been processed."""
        self.s.sendall(b"PING\r\n")
        for _ in range(1000):
            line = self.f.readline()
            assert line and not line.startswith(b"-ERR"), line
            if line.startswith(b"PONG"):
                return
            if line.startswith(b"MSG "):  # a message for our subscription: read, unanswered
                self.f.read(int(line.split()[-1]) + 2)
        raise AssertionError("no PONG")

    def sub(self, subject, sid):
        self.s.sendall(b"SUB %s %d\r\n" % (subject.encode(), sid))
        self.flush()

    def pub(self, subject, payload, headers=None):
        if headers is None:
            self.s.sendall(b"PUB %s %d\r\n%s\r\n" % (subject.encode(), len(payload), payload))
        else:
            h = b"NATS/1.0\r\n" + b"".join(b"%s: %s\r\n" % kv for kv in headers) + b"\r\n"
            self.s.sendall(b"HPUB %s %d %d\r\n%s%s\r\n" % (subject.encode(), len(h),
                                                             len(h) + len(payload), h, payload))
        self.flush()

    def close(self):
        self.s.close()


def test_f_stalled_hello_stalls_nobody():
    """A worker that registers and then does not answer its HELLO (here a raw NATS client
    that subscribes to the HELLO subject and stays silent; in life, a host whose frames
    trickle back after a partition heals) keeps each frontend's watcher waiting for up to
    3 s. The other workers renewed meanwhile: their leases must be judged from those
    renewals, not from what the watcher had read before it waited."""
    cl = C["cluster"]
    others = Bystanders(cl.fronts, ["pre", "dec1", "dec2"])
    entry = next(w for w in cl.status()["workers"] if w["host"] == "dec1")
    for k in ("key", "age_s", "lease_expired"):
        entry.pop(k)
    ghost = 0xbeef
    entry.update(id=ghost, host="ghost", pid=1, incarnation="%032x" % ghost,
                 kv_addr=f"{cl.net.root_addr}:9")
    key = "w%08x" % ghost
    nc = RawNats(cl.net.addr["nats"])
    try:
        nc.sub(f"dyad.w.{key}.hello", 1)
        nc.pub(f"$KV.dyad_workers.{key}", json.dumps(entry).encode())
        line = f"worker {key} on ghost did not answer for its HELLO"
        assert wait_until(lambda: all(f.lines(line) for f in cl.fronts), 20), \
            [f.p.text()[-1000:] for f in cl.fronts]
        # For a lease after the wait, everything goes on as before: no healthy worker let
        # go, every request served.
        until = time.time() + float(LEASE)
        for _ in range(50):
            if time.time() > until:
                break
            for f in cl.fronts:
                expect_ok(call(f, PROMPTS[6], 16, stream=False))
        others.check()
    finally:
        nc.pub(f"$KV.dyad_workers.{key}", b"", headers=[(b"KV-Operation", b"DEL")])
        nc.close()
    assert cl.all_serving(), [f.serving(True) for f in cl.fronts]


# ---------------------------------------------------------------- running

def main():
    if os.geteuid() != 0:
        skip("needs root (network namespaces)")
    if not shutil.which("ip"):
        skip("needs iproute2 (ip)")
    if not shutil.which("nats-server"):
        skip("nats-server is not installed")
    r = subprocess.run([DYAD, "serve", "--cluster", "nats://127.0.0.1:1", "--cluster-timeout",
                        "0", "--port", "0"], capture_output=True, text=True, timeout=60)
    if "built without" in r.stderr:
        skip("dyad was built without NATS (libnats-dev)")
    net = Net()
    if sh("ip", "netns", "add", net.switch, check=False).returncode != 0:
        skip("cannot create network namespaces")
    sh("ip", "netns", "del", net.switch)
    global TMP
    TMP = tempfile.mkdtemp(prefix="dyad-netns-")

    def cleanup():
        if not PROCS and not net.made_ns:
            return
        for p in PROCS:
            try:
                p.kill(signal.SIGKILL, wait=10)
            except AssertionError:
                pass
        net.down()
        if os.environ.get("DYAD_NETNS_LOGS"):  # keep the logs there, for a look
            shutil.copytree(TMP, os.environ["DYAD_NETNS_LOGS"], dirs_exist_ok=True)
        shutil.rmtree(TMP, ignore_errors=True)
        PROCS.clear()
    atexit.register(cleanup)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    passed = failed = 0
    started = time.time()
    ref = cl = None
    try:
        try:
            net.up()
            ref = Server(DYAD, "--workers", "1")
            REF_SERVER.append(ref)
            cl = C["cluster"] = Cluster(net)
            cl.start_nats()
            for h in ("pre", "dec1", "dec2"):
                cl.start_worker(h)
            cl.fronts = [Frontend(net, h, cl.url) for h in ("fe1", "fe2")]
            for p in PROMPTS:
                reference(p, LOAD_TOKENS)
            assert cl.all_serving(), [f.serving() for f in cl.fronts]
            log(f"up in {time.time() - started:.1f} s: hosts on {net.net}.0/24")
        except Exception:  # noqa: BLE001
            failed += 1
            log("FAIL: the cluster did not come up")
            traceback.print_exc()
            for p in PROCS:
                log(f"--- {p.name}\n" + p.text()[-3000:])
            cl = None
        for name, t in sorted(globals().items()):
            if not cl or not name.startswith("test_") or not re.search(
                    os.environ.get("DYAD_NETNS_ONLY", ""), name):  # a subset, when debugging
                continue
            t0 = time.time()
            try:
                t()
                passed += 1
                log(f"ok: {name} ({time.time() - t0:.1f} s)")
            except Exception:  # noqa: BLE001
                failed += 1
                log(f"FAIL: {name} ({time.time() - t0:.1f} s)")
                traceback.print_exc()
                for p in PROCS[-8:]:
                    log(f"--- {p.name} (last lines)\n" + "\n".join(p.text().splitlines()[-15:]))
                try:
                    cl.restore()
                except Exception:  # noqa: BLE001
                    traceback.print_exc()
                    break
        # Everything is counted: nothing lost, wrong or answered twice.
        log(LEDGER.line())
        if LEDGER.n["lost"] or LEDGER.n["wrong"] or LEDGER.n["duplicated"]:
            failed += 1
            log("FAIL: requests lost, wrong or duplicated:", LEDGER.bad[:10])
        else:
            passed += 1
        for f in cl.fronts if cl else []:
            rc = f.stop()
            if rc != 0:
                failed += 1
                log(f"FAIL: {f.host_name} exit status {rc}")
        for h, w in cl.workers.items() if cl else []:
            rc = w.kill(signal.SIGTERM, wait=40)
            if rc != 0:
                failed += 1
                log(f"FAIL: worker on {h} exit status {rc}\n" + w.text()[-3000:])
        # Every dyad process's log, those killed on purpose too: no sanitizer report.
        for p in PROCS:
            if p.name not in ("nats", "fe1", "fe2") and re.search(r"ERROR: (Address|Leak)Sanitizer|runtime error:",
                                              p.text()):
                failed += 1
                log(f"FAIL: a sanitizer report from {p.name}\n" + p.text()[-5000:])
    finally:
        if ref:
            rc = ref.stop()
            if rc != 0:
                failed += 1
                log(f"FAIL: reference server exit status {rc}")
        cleanup()
    log(f"({time.time() - started:.1f} s)")
    log(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
