"""dyad_http.py — a `dyad serve` under test: starts it on a free port, and speaks HTTP, SSE
and /metrics to it; run_tests runs a test file's test_* functions against servers (Python
standard library only). Used by tests/serve_*.py and the benchmarks in bench/."""
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback

MODEL = "stories260K"


class Server:
    def __init__(self, dyad, *args):
        # stderr (the server's and its workers') goes to a file that stop() checks for
        # sanitizer reports, so the sanitizer build fails on them.
        self.log = tempfile.NamedTemporaryFile("w+", prefix="dyad-serve-", suffix=".log")
        self.proc = subprocess.Popen([dyad, "serve", "--port", "0", *args], stderr=self.log)
        m = None
        for _ in range(600):
            self.log.seek(0)
            m = re.search(r"http://([\d.]+):(\d+)", self.log.read())
            if m or self.proc.poll() is not None:
                break
            time.sleep(0.05)
        if not m:
            self.log.seek(0)
            raise RuntimeError("server did not start: " + self.log.read())
        self.host, self.port = m.group(1), int(m.group(2))
        self.log.seek(0)
        self.banner = next((line.strip() for line in self.log if "http://" in line), "")

    def conn(self, timeout=60):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, raw=None):
        c = self.conn()
        h = {"Content-Type": "application/json", **(headers or {})}
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        text = r.read().decode()
        c.close()
        try:
            return r.status, json.loads(text), r
        except ValueError:
            return r.status, text, r

    def stream(self, path, body):
        """Returns the list of SSE data payloads (parsed JSON or the string '[DONE]')."""
        c = self.conn()
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 200, (r.status, r.read())
        assert r.getheader("Content-Type").startswith("text/event-stream")
        events, buf = [], ""
        while True:
            chunk = r.read1(65536).decode() if hasattr(r, "read1") else r.read(1).decode()
            if not chunk:
                break
            buf += chunk
            while "\n\n" in buf:
                frame, buf = buf.split("\n\n", 1)
                if frame.startswith(":"):  # an SSE comment (keep-alive)
                    continue
                assert frame.startswith("data: "), frame
                payload = frame[len("data: "):]
                events.append(payload if payload == "[DONE]" else json.loads(payload))
        c.close()
        return events

    def metrics(self):
        status, text, _ = self.request("GET", "/metrics")
        assert status == 200
        vals = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                vals[name] = float(value)
        return vals

    def settled(self, name, tries=40):
        """A counter once the workers' periodic reports have caught up with what finished."""
        last = None
        for _ in range(tries):
            v = self.metrics()[name]
            if v == last:
                return v
            last = v
            time.sleep(0.25)
        return last

    def wait_for(self, pred, timeout=30):
        end = time.time() + timeout
        while time.time() < end:
            try:
                if pred():
                    return True
            except (OSError, KeyError, IndexError):
                pass
            time.sleep(0.1)
        return False

    def stop(self):
        """Stops the server; returns its exit status, or 99 if a sanitizer reported."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise AssertionError("server did not stop on SIGTERM")
        self.log.seek(0)
        text = self.log.read()
        if re.search(r"ERROR: (Address|Leak)Sanitizer|runtime error:", text):
            print(text[:5000])
            return 99
        return self.proc.returncode


def skip(why):
    """A test that needs a program this machine lacks: skipped (exit 77, which ctest reports
    as skipped), except under scripts/test.sh, which sets DYAD_REQUIRE_TOOLS because
    scripts/install-deps.sh installs every such program: a skip there would hide a test."""
    if os.environ.get("DYAD_REQUIRE_TOOLS"):
        print("FAIL: " + why + " (DYAD_REQUIRE_TOOLS is set: run scripts/install-deps.sh)")
        sys.exit(1)
    print("SKIP: " + why)
    sys.exit(77)


class Checks:
    """Named checks run in turn, for a test whose steps build on each other: each passes or
    fails with its traceback, and on_fail (if given) then prints what helps (a log's tail).
    check(name, fn) runs one; passed and failed count them."""

    def __init__(self, on_fail=None):
        self.passed = self.failed = 0
        self.on_fail = on_fail

    def __call__(self, name, fn):
        try:
            fn()
            self.passed += 1
            print("ok:", name)
        except Exception:  # noqa: BLE001
            self.failed += 1
            print("FAIL:", name)
            traceback.print_exc()
            if self.on_fail:
                self.on_fail()

    def stop(self, servers):
        """Stops the servers (None entries skipped); a bad exit status is a failure."""
        for s in servers:
            rc = s.stop() if s is not None else 0
            if rc != 0:
                self.failed += 1
                print("FAIL: server exit status", rc)

    def exit(self):
        print(f"{self.passed} passed, {self.failed} failed")
        sys.exit(1 if self.failed else 0)


def run_tests(namespace, servers):
    """Runs every test_* function of a test file in name order — those taking arguments get
    the first servers, those taking none start their own — then stops the servers (a
    sanitizer report or a bad exit status fails the run). Prints 'N passed, N failed' and
    exits non-zero on any failure."""
    tests = [t for name, t in sorted(namespace.items()) if name.startswith("test_")]
    passed = failed = 0
    try:
        for t in tests:
            try:
                t(*servers[:t.__code__.co_argcount])
                passed += 1
            except Exception:  # noqa: BLE001
                failed += 1
                print("FAIL:", t.__name__)
                traceback.print_exc()
    finally:
        for s in servers:
            rc = s.stop()
            if rc != 0:
                failed += 1
                print("FAIL: server exit status", rc)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
