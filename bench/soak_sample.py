#!/usr/bin/env python3
"""bench/soak_sample.py — the sampler and the plot of bench/soak.sh (standard library only).

  soak_sample.py sample URL FRONTEND_PID CSV INTERVAL_S
      Every INTERVAL_S seconds until SIGTERM, one CSV row per process — the frontend and each
      worker /health lists — with its RSS, shared memory (RssShmem) and open fds from /proc,
      and the latency of the last 5 s slice of /v1/dyad/status (TTFT and ITL p50/p90, the
      request rate), the same on every row of a sample.
  soak_sample.py plot CSV SVG
      Writes the hand-drawn SVG (one panel each: RSS, shared memory, fds per process; the
      latencies) and prints each process's first and last figures, and their change.
"""
import csv
import json
import os
import signal
import sys
import time
import urllib.request

FIELDS = ["t_s", "process", "pid", "rss_kib", "shmem_kib", "fds", "ttft_p50_ms",
          "ttft_p90_ms", "itl_p50_ms", "itl_p90_ms", "requests_per_s"]


def get_json(url, path):
    with urllib.request.urlopen(url + path, timeout=10) as r:
        return json.loads(r.read())


def proc_figures(pid):
    """(RSS KiB, RssShmem KiB, fds) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            st = dict(line.split(":", 1) for line in f if ":" in line)
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    kib = lambda k: int(st.get(k, "0 kB").split()[0])  # noqa: E731
    return kib("VmRSS"), kib("RssShmem"), fds


def latency(url):
    """The newest slice of /v1/dyad/status's series: ms figures (empty when no sample)."""
    try:
        series = get_json(url, "/v1/dyad/status")["requests"]["series"]
    except (OSError, ValueError, KeyError):
        return {}
    if not series:
        return {}
    p = series[-1]
    ms = lambda v: "" if v is None else f"{v * 1e3:.2f}"  # noqa: E731
    return {"ttft_p50_ms": ms(p.get("ttft_p50_s")), "ttft_p90_ms": ms(p.get("ttft_p90_s")),
            "itl_p50_ms": ms(p.get("itl_p50_s")), "itl_p90_ms": ms(p.get("itl_p90_s")),
            "requests_per_s": f"{p.get('requests_per_s', 0):.2f}"}


def sample(url, front, path, interval):
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    t0 = time.time()
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        while not stop:
            try:
                workers = get_json(url, "/health")["workers"]
            except (OSError, ValueError, KeyError):
                workers = []
            procs = [("frontend", front)] + [(f"worker{x['id']}", x["pid"]) for x in workers
                                             if x.get("pid")]
            lat, t = latency(url), time.time() - t0
            for name, pid in procs:
                fig = proc_figures(pid)
                if fig:
                    w.writerow({"t_s": f"{t:.1f}", "process": name, "pid": pid,
                                "rss_kib": fig[0], "shmem_kib": fig[1], "fds": fig[2], **lat})
            f.flush()
            end = time.time() + interval
            while not stop and time.time() < end:
                time.sleep(0.1)


COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"]


def panel(out, y, h, m, pw, span, title, series, unit):
    """series: [(label, colour, [(t, v)])] drawn in one box scaled to their maximum."""
    top = max((v for _, _, pts in series for _, v in pts), default=1) * 1.15 or 1
    out.append(f'<rect x="{m}" y="{y}" width="{pw}" height="{h}" fill="none" stroke="#999"/>')
    out.append(f'<text x="{m + 4}" y="{y + 12}">{title} (0 to {top:.3g} {unit})</text>')
    for i, (label, colour, pts) in enumerate(series):
        line = " ".join(f"{m + t / span * pw:.1f},{y + h - v / top * (h - 16):.1f}" for t, v in pts)
        out.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
        out.append(f'<text x="{m + pw + 6}" y="{y + 14 + 12 * i}" fill="{colour}">{label}</text>')


def plot(path, svg_path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit("soak_sample.py: no samples in " + path)
    procs = list(dict.fromkeys(r["process"] for r in rows))
    span = max(float(r["t_s"]) for r in rows) or 1
    by = {p: [r for r in rows if r["process"] == p] for p in procs}
    colour = {p: COLOURS[i % len(COLOURS)] for i, p in enumerate(procs)}
    pw, h, m = 640, 120, 50
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{pw + 2 * m + 70}" '
           f'height="{4 * (h + 10) + 60}" font-family="sans-serif" font-size="10">',
           f'<text x="{m}" y="16" font-size="12">Soak: per process over {span:.0f} s '
           f'(flat lines are the target)</text>']
    memory = (("rss_kib", "RSS", "MiB", 1024),
              ("shmem_kib", "shared memory (RssShmem)", "MiB", 1024),
              ("fds", "open file descriptors", "fds", 1))
    for k, (col, title, unit, div) in enumerate(memory):
        series = [(p, colour[p], [(float(r["t_s"]), int(r[col]) / div) for r in by[p]])
                  for p in procs]
        panel(out, 26 + k * (h + 10), h, m, pw, span, title, series, unit)
    front = by[procs[0]]
    lat = [(name, c, [(float(r["t_s"]), float(r[name])) for r in front if r[name]])
           for name, c in (("ttft_p50_ms", "#1f77b4"), ("ttft_p90_ms", "#aec7e8"),
                           ("itl_p50_ms", "#d62728"), ("itl_p90_ms", "#ff9896"))]
    panel(out, 26 + 3 * (h + 10), h, m, pw, span, "latency, last 5 s", lat, "ms")
    out.append(f'<text x="{m + pw / 2 - 30}" y="{4 * (h + 10) + 45}">seconds (0 to {span:.0f})'
               f'</text></svg>')
    with open(svg_path, "w") as f:
        f.write("\n".join(out) + "\n")
    print("process    pid      RSS MiB first -> last   RssShmem MiB first -> last   "
          "fds first -> last")
    for p in procs:
        a, b = by[p][0], by[p][-1]
        mib = lambda r, k: int(r[k]) / 1024  # noqa: E731
        same = "" if a["pid"] == b["pid"] else f" (pid {a['pid']} -> {b['pid']}: restarted)"
        print(f"{p:<10} {b['pid']:<8} {mib(a, 'rss_kib'):8.1f} -> {mib(b, 'rss_kib'):8.1f}   "
              f"{mib(a, 'shmem_kib'):10.1f} -> {mib(b, 'shmem_kib'):8.1f}   "
              f"{a['fds']:>5} -> {b['fds']}{same}")
    firsts = [r for r in front if r["ttft_p50_ms"]]
    if firsts:
        a, b = firsts[0], firsts[-1]
        print(f"latency (last 5 s): TTFT p50 {a['ttft_p50_ms']} -> {b['ttft_p50_ms']} ms, p90 "
              f"{a['ttft_p90_ms']} -> {b['ttft_p90_ms']} ms; ITL p50 {a['itl_p50_ms']} -> "
              f"{b['itl_p50_ms']} ms, p90 {a['itl_p90_ms']} -> {b['itl_p90_ms']} ms")


def main():
    if len(sys.argv) == 6 and sys.argv[1] == "sample":
        sample(sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5]))
    elif len(sys.argv) == 4 and sys.argv[1] == "plot":
        plot(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
