"""dyad_http.py — a `dyad serve` under test: starts it on a free port, and speaks HTTP, SSE
and /metrics to it (Python standard library only). Used by tests/serve_*.py."""
import http.client
import json
import re
import signal
import subprocess
import tempfile
import time

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
