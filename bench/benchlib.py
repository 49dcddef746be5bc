"""benchlib.py — what the Python benchmarks in bench/ share: the log header (bench/env_header.sh,
so the shell and Python benchmarks print the same line), the test suite's server helper
(tests/dyad_http.py: `dyad serve` on a free port), one call of `dyad bench --json`, and a timed fresh server for A/B runs.
Standard library only.

  import benchlib
  print(benchlib.env_header("what this run measures"))
  server = benchlib.dyad_http.Server(dyad, "--model", model)
  report = benchlib.bench(dyad, server, "--isl", "128", "--osl", "64")[-1]"""
import hashlib
import json
import os
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, os.path.join(ROOT, "tests"))
import dyad_http  # noqa: E402,F401  (the test suite's server helper, used through benchlib)


def env_header(text=""):
    """The header line: date, `git describe --always --dirty`, CPU model, cores, kernel, load."""
    out = subprocess.run(["bash", os.path.join(BENCH, "env_header.sh"), *([text] if text else [])],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def busy_share(window=1.0):
    """The share of all cores' time spent busy over `window` seconds (from /proc/stat)."""
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]  # total, idle + iowait
    t0, i0 = sample()
    time.sleep(window)
    t1, i1 = sample()
    return 1 - (i1 - i0) / max(1, t1 - t0)


def wait_idle(max_busy=0.10, timeout=600):
    """Waits until the machine's busy share over a second is at most max_busy (or timeout
    seconds have passed); returns the last share seen, which the caller logs."""
    deadline = time.monotonic() + timeout
    while True:
        share = busy_share()
        if share <= max_busy or time.monotonic() > deadline:
            return share


def sitting(header):
    """'DATE TREE' of an env_header line: names the run a CSV row came from."""
    fields = header[2:].split(", ")
    return f"{fields[0]} {fields[1].removeprefix('tree ')}"


def dyad_binary():
    """The dyad binary named by the script's first argument, else build/dyad."""
    return sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "dyad")


def binary_id(path):
    """A binary named by its path and the start of its SHA-256, for A/B logs."""
    with open(path, "rb") as f:
        return f"{path} (sha256 {hashlib.sha256(f.read()).hexdigest()[:12]})"


def generated_model(dyad, name):
    """models/generated/NAME.gguf (NAME = SHAPE-TYPE, e.g. 110m-q8_0), made with `dyad gen-model`
    the first time it is asked for."""
    shape, _, wtype = name.partition("-")
    path = os.path.join(ROOT, "models", "generated", f"{name}.gguf")
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        subprocess.run([dyad, "gen-model", "--shape", shape, "--type", wtype, "-o", path],
                       check=True)
    return path


def serve(dyad, *args):
    """A fresh `dyad serve` (dyad_http.Server) and the seconds it took to listen (to 0.05 s)."""
    t0 = time.monotonic()
    server = dyad_http.Server(dyad, *args)
    return server, time.monotonic() - t0


def url(server):
    return f"http://{server.host}:{server.port}"


def bench(dyad, server, *args):
    """Runs `dyad bench --json` against a dyad_http.Server; returns its reports (one per point
    of a sweep, else one). Raises with the load generator's stderr if it fails."""
    out = subprocess.run([dyad, "bench", "--url", url(server), *args, "--json"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"dyad bench {' '.join(args)}: {out.stderr}")
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
