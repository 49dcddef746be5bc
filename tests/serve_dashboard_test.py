#!/usr/bin/env python3
"""serve_dashboard_test.py DYAD SOURCE_DIR — GET /dashboard in a real browser.

Headless Chromium loads the page from a disaggregated server (1 prefill + 1 decode) that
threads keep busy with streamed completions: the DOM it ends with must show both workers
with their roles and states and a non-zero request rate, and a screenshot at a laptop's size
must come out (saved where DYAD_SAVE_SCREENSHOT says, e.g. docs/dashboard.png; the load runs
DYAD_DASHBOARD_WARMUP_S seconds first, 6 by default, so the charts have a history). With
--api-key, the page without the key shows the key form and no data; with the key in its
address (#key=...) it authenticates and shows the workers. Skips (exit 77) only when no
Chromium is installed. Standard library only; prints 'N passed, N failed'."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dyad_http import MODEL, Server, run_tests, skip  # noqa: E402

DYAD, SRC = sys.argv[1], sys.argv[2]
KEY = "dash-test-key"
CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser",
                                                        "google-chrome")) if p), None)
LONG = ("Once upon a time, there was a little girl named Lily. She loved to play outside in "
        "the park. ") * 5


class Load:
    """Streamed completions from a few threads until stopped: fresh long prompts (their KV
    moves to the decode worker) and short ones (kept local)."""

    def __init__(self, server, threads=2, headers=None):
        self.server, self.headers, self.stop_flag = server, headers or {}, threading.Event()
        self.done, self.errors = 0, []
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True)
                        for i in range(threads)]
        for t in self.threads:
            t.start()

    def run(self, i):
        n = 0
        while not self.stop_flag.is_set():
            n += 1
            prompt = f"Story {i}-{n}. " + LONG if n % 2 else "Once upon a time"
            body = {"model": MODEL, "prompt": prompt, "max_tokens": 48, "temperature": 0.8,
                    "stream": True}
            try:
                c = self.server.conn(timeout=120)
                c.request("POST", "/v1/completions", body=json.dumps(body),
                          headers={"Content-Type": "application/json", **self.headers})
                r = c.getresponse()
                r.read()
                c.close()
                if r.status != 200:
                    self.errors.append(r.status)
                self.done += 1
            except OSError as e:  # the server stopping at the end
                if not self.stop_flag.is_set():
                    self.errors.append(repr(e))
            time.sleep(0.05)

    def stop(self):
        self.stop_flag.set()
        for t in self.threads:
            t.join(timeout=150)
        assert not self.errors, self.errors[:5]


def chromium(url, *args, budget_ms=6000):
    """Runs headless Chromium on url; returns its stdout (the DOM with --dump-dom)."""
    with tempfile.TemporaryDirectory(prefix="dyad-chromium-") as profile:
        p = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                            "--no-first-run", "--disable-extensions", "--hide-scrollbars",
                            "--disable-dev-shm-usage",
                            f"--user-data-dir={profile}",
                            f"--virtual-time-budget={budget_ms}", *args, url],
                           capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])
    return p.stdout


def attrs(tag):
    return dict(re.findall(r'([\w-]+)="([^"]*)"', tag))


def workers_in(dom):
    return [attrs(t) for t in re.findall(r"<div [^>]*data-worker=[^>]*>", dom)]


def figure_in(dom, name):
    for t in re.findall(r"<div [^>]*data-figure=[^>]*>", dom):
        a = attrs(t)
        if a.get("data-figure") == name:
            return float(a["data-value"]) if a.get("data-value") else None
    raise AssertionError(f"no figure {name} in the page")


def wait_for_traffic(s, headers=None):
    def going():
        st, doc, _ = s.request("GET", "/v1/dyad/status", headers=headers)
        return st == 200 and doc["requests"]["summary"]["requests"] >= 3
    assert s.wait_for(going, timeout=120), "no request ended under the load"


def url(s, path):
    return f"http://{s.host}:{s.port}{path}"


def test_page_under_load(dis, keyed):
    load = Load(dis)
    try:
        wait_for_traffic(dis)
        time.sleep(float(os.environ.get("DYAD_DASHBOARD_WARMUP_S", "6")))
        dom = chromium(url(dis, "/dashboard"), "--dump-dom")
        ws = workers_in(dom)
        assert [(w["data-worker"], w["data-role"], w["data-state"]) for w in ws] == \
            [("0", "prefill", "serving"), ("1", "decode", "serving")], ws
        assert 'class="conn ok"' in dom, dom[-3000:]
        assert figure_in(dom, "requests_per_s") > 0
        assert figure_in(dom, "output_tokens_per_s") > 0
        assert figure_in(dom, "ttft_p90") > 0
        assert figure_in(dom, "goodput") is not None  # --slo given
        assert figure_in(dom, "transfers") >= 1
        # the charts are drawn: a path per latency line at least
        assert len(re.findall(r"<path [^>]*class=\"line\"", dom)) >= 4, "no chart lines"
        assert "objective 50.0 ms" in dom  # in the TTFT chart's legend
        with tempfile.TemporaryDirectory() as d:
            png = os.path.join(d, "dashboard.png")
            chromium(url(dis, "/dashboard"), f"--screenshot={png}", "--window-size=1366,800")
            with open(png, "rb") as f:
                data = f.read()
            assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10000, len(data)
            save = os.environ.get("DYAD_SAVE_SCREENSHOT")
            if save:
                shutil.copyfile(png, save)
                print("screenshot saved to", save)
    finally:
        load.stop()
    assert load.done > 0


def test_key_form_and_key_in_address(dis, keyed):
    good = {"Authorization": "Bearer " + KEY}
    load = Load(keyed, threads=1, headers=good)
    try:
        wait_for_traffic(keyed, headers=good)
        dom = chromium(url(keyed, "/dashboard"), "--dump-dom", budget_ms=3000)
        assert '<div id="auth" class="">' in dom, "no key form shown"
        assert not workers_in(dom), "workers shown without the key"
        assert figure_in_or_none(dom, "requests_per_s") is None
        dom = chromium(url(keyed, "/dashboard#key=" + KEY), "--dump-dom")
        ws = workers_in(dom)
        assert [(w["data-worker"], w["data-role"]) for w in ws] == [("0", "aggregated")], ws
        assert 'id="auth" class="hidden"' in dom
        assert figure_in(dom, "requests_per_s") > 0
        # a wrong key gets the form again, saying so
        dom = chromium(url(keyed, "/dashboard#key=wrong"), "--dump-dom", budget_ms=3000)
        assert "That key was refused." in dom and not workers_in(dom)
    finally:
        load.stop()


def figure_in_or_none(dom, name):
    try:
        return figure_in(dom, name)
    except AssertionError:
        return None


def main():
    if not CHROMIUM:
        skip("serve_dashboard_test needs Chromium (Debian: apt-get install chromium; "
             "scripts/install-deps.sh installs it)")
    run_tests(globals(), [
        Server(DYAD, "--prefill-workers", "1", "--decode-workers", "1",
               "--slo", "ttft_ms=50,itl_ms=1"),  # near this model's latencies: drawn
        Server(DYAD, "--workers", "1", "--api-key", KEY),
    ])


main()
