#!/usr/bin/env python3
"""serve_prometheus_test.py DYAD SOURCE_DIR — a real Prometheus scraping a disaggregated
`dyad serve` (docs/observability.md).

Debian's prometheus scrapes /metrics every second and evaluates docs/prometheus-rules.yml;
the test sends a known set of requests and asks Prometheus's HTTP API for the counters (by
outcome, tokens, KV transfers: equal to what was sent and answered), a rate, a histogram
quantile (inside the bucket that holds the median the request log and the client measured),
the model id whose label needs escaping, and the recording rules' figures. `promtool check
metrics` lints the exposition, `promtool check rules` and `check config` the docs' files,
and every PromQL expression of docs/grafana-dashboard.json runs against the live Prometheus
(no query error, a series back, every metric name in /metrics). Exits 77 (skipped) when
prometheus or promtool is not installed. Standard library only; prints 'N passed, N failed'."""
import bisect
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dyad_http import Server, run_tests, skip  # noqa: E402

DYAD, SRC = sys.argv[1], os.path.abspath(sys.argv[2])
PROMETHEUS, PROMTOOL = shutil.which("prometheus"), shutil.which("promtool")
DOCS = os.path.join(SRC, "docs")
RULES = os.path.join(DOCS, "prometheus-rules.yml")
DASHBOARD = os.path.join(DOCS, "grafana-dashboard.json")
MODEL_ID = 'stories"260K\\test'  # a quote and a backslash: both escaped in the label
LONG = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. " * 4
N_LONG, N_REPEAT, N_REJECTED, MAX_TOKENS = 8, 2, 3, 12
TTFT_BOUNDS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120]
WAIT = 120  # seconds: generous, for the sanitizer build beside other tests
sent = {}  # what the requests were and what came back, filled by test_0_send


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    """Debian's Prometheus on a free port, scraping one target every second, with the rules."""

    def __init__(self, target, rules):
        self.dir = tempfile.TemporaryDirectory(prefix="dyad-prom-")
        self.port = free_port()
        self.config = os.path.join(self.dir.name, "prometheus.yml")
        with open(self.config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "  scrape_timeout: 1s\n"
                    f"rule_files:\n  - {json.dumps(rules)}\n"
                    "scrape_configs:\n  - job_name: dyad\n    static_configs:\n"
                    f"      - targets: [\"{target}\"]\n")
        self.log = open(os.path.join(self.dir.name, "prometheus.log"), "w+")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={self.config}",
             f"--storage.tsdb.path={os.path.join(self.dir.name, 'data')}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT)
        try:
            if not wait_for(self.ready):
                raise RuntimeError("prometheus did not become ready: " + self.log_text())
        except RuntimeError:
            self.stop()
            raise

    def log_text(self):
        self.log.seek(0)
        return self.log.read()[-4000:]

    def ready(self):
        if self.proc.poll() is not None:
            raise RuntimeError("prometheus exited: " + self.log_text())
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=5) as r:
                return r.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def api(self, path, **params):
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:  # a bad query is a 400 with the error in JSON
            body = json.load(e)
        return body

    def query(self, expr, patience=15):
        """The result of an instant query; a query error fails. An empty one is asked again
        for a while: a scrape that timed out on a loaded machine marks every series stale
        until the next one."""
        end = time.time() + patience
        while True:
            body = self.api("query", query=expr)
            assert body["status"] == "success", (expr, body)
            if body["data"]["result"] or time.time() > end:
                return body["data"]["result"]
            time.sleep(0.5)

    def value(self, expr):
        """The one series' value of an instant query (None: no series)."""
        r = self.query(expr)
        assert len(r) <= 1, (expr, r)
        return float(r[0]["value"][1]) if r else None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        self.dir.cleanup()
        return 0


def wait_for(pred, timeout=WAIT):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.2)
    return False


def target(prom):
    """The dyad target of /api/v1/targets (None until the scrape manager has it)."""
    body = prom.api("targets", state="active")
    assert body["status"] == "success", body
    ts = body["data"]["activeTargets"]
    assert len(ts) <= 1, ts
    return ts[0] if ts else None


def scraped(prom):
    t = target(prom)
    return t is not None and t["health"] == "up" and t["lastError"] == ""


def metrics_text(s):
    st, text, _ = s.request("GET", "/metrics")
    assert st == 200 and isinstance(text, str), st
    return text


def exposed_names(text):
    """Every sample name in the exposition (histograms' _bucket, _sum, _count too)."""
    return {re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0)
            for line in text.splitlines() if line and not line.startswith("#")}


def promql_metric_names(expr):
    """The metric names an expression reads: identifiers not followed by '(' that are not
    PromQL keywords, label names inside {} or by/without lists, or string contents."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", "", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    words = re.findall(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\b(?!\s*\()", e)
    keywords = {"and", "or", "unless", "offset", "bool", "inf", "nan", "e"}
    return {w for w in words if w.lower() not in keywords and not re.fullmatch(r"e\d*", w)}


def ask(s, prompt, stream=True, **kw):
    """A completion; (status, body, client-measured TTFT or None, usage, dyad's extension)."""
    body = {"model": MODEL_ID, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0,
            "ignore_eos": True, **kw}
    if not stream:
        st, r, _ = s.request("POST", "/v1/completions", body)
        return st, r, None, r.get("usage") if st == 200 else None, None
    body.update(stream=True, stream_options={"include_usage": True})
    c = s.conn(timeout=WAIT)
    t0 = time.monotonic()
    c.request("POST", "/v1/completions", body=json.dumps(body),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, (r.status, r.read())
    ttft, buf, events = None, "", []
    while True:
        chunk = r.read1(65536).decode()
        if not chunk:
            break
        buf += chunk
        while "\n\n" in buf:
            frame, buf = buf.split("\n\n", 1)
            if not frame.startswith("data: ") or frame == "data: [DONE]":
                continue
            e = json.loads(frame[len("data: "):])
            if ttft is None and e.get("choices") and e["choices"][0].get("text"):
                ttft = time.monotonic() - t0
            events.append(e)
    c.close()
    usage = next(e["usage"] for e in events if e.get("usage"))
    dyad = next((e["dyad"] for e in events if e.get("dyad")), None)
    return 200, events, ttft, usage, dyad


# ---------------------------------------------------------------- the tests, in name order

def test_0_send(s, prom):
    """The first scrape before any request (so every counter's first sample is 0 and the
    rates' ratios are exact), then the known requests, then Prometheus up to date."""
    assert wait_for(lambda: scraped(prom)), (target(prom), prom.log_text())
    assert prom.value("dyad_generation_tokens_total") == 0
    client_ttft, tokens, prompt_computed, xfer_bytes, remote = [], 0, 0, 0, 0
    prompts = [f"Story {i}. " + LONG for i in range(N_LONG)] + [f"Story 0. {LONG}"] * N_REPEAT
    for p in prompts:
        st, _, ttft, usage, dyad = ask(s, p)
        assert st == 200 and ttft is not None
        client_ttft.append(ttft)
        tokens += usage["completion_tokens"]
        prompt_computed += usage["prompt_tokens"] - usage["prompt_tokens_details"]["cached_tokens"]
        x = dyad["choices"][0].get("kv_transfer") if dyad else None
        if x:
            remote += 1
            xfer_bytes += x["bytes"]
    for _ in range(N_REJECTED):
        st, body, _, _, _ = ask(s, "x", stream=False, max_tokens=-1)
        assert st == 400, (st, body)
    sent.update(n=len(prompts), tokens=tokens, prompt_computed=prompt_computed,
                client_ttft=client_ttft, xfer_bytes=xfer_bytes, remote=remote)
    assert tokens == len(prompts) * MAX_TOKENS and remote >= N_LONG, sent
    # Prometheus has scraped the workers' last reports (they come every 100 ms); if the
    # figures never match, test_counters_match_what_was_sent says which
    want = {"dyad_generation_tokens_total": tokens, "dyad_prompt_tokens_total": prompt_computed,
            'dyad_requests_total{outcome="rejected"}': N_REJECTED}
    wait_for(lambda: all(prom.value(k) == v for k, v in want.items()), timeout=60)


def test_target_up(s, prom):
    # a scrape that timed out on a loaded machine sets lastError until the next one succeeds
    assert wait_for(lambda: scraped(prom)), target(prom)
    t = target(prom)
    assert t["labels"]["job"] == "dyad", t


def test_counters_match_what_was_sent(s, prom):
    by_outcome = {r["metric"]["outcome"]: float(r["value"][1])
                  for r in prom.query("dyad_requests_total")}
    assert by_outcome == {"stop": 0, "length": sent["n"], "cancelled": 0, "error": 0,
                          "rejected": N_REJECTED}, by_outcome
    assert prom.value("dyad_generation_tokens_total") == sent["tokens"]
    # the workers compute what the prefix cache did not hold
    assert prom.value("dyad_prompt_tokens_total") == sent["prompt_computed"], sent
    assert prom.value("dyad_kv_transfers_total") == sent["remote"]
    assert prom.value("dyad_kv_transfer_bytes_total") == sent["xfer_bytes"]
    assert prom.value('dyad_prefill_total{where="remote"}') == sent["remote"]
    assert prom.value("dyad_router_decisions_total") == sent["n"]
    assert prom.value("dyad_prefix_cache_hits_total") > 0  # the repeated prompts
    # one observation per sequence (every request here is one), a gap per token after the first
    for h in ("time_to_first_token", "time_per_output_token", "e2e_request_latency"):
        assert prom.value(f"dyad_{h}_seconds_count") == sent["n"], h
    assert prom.value("dyad_inter_token_latency_seconds_count") == sent["n"] * (MAX_TOKENS - 1)
    assert prom.value('dyad_time_per_output_token_seconds_bucket{le="+Inf"}') == sent["n"]


def test_rate_is_not_zero(s, prom):
    for m in ("dyad_generation_tokens_total", "dyad_requests_total", "dyad_kv_transfers_total"):
        v = prom.value(f"sum(rate({m}[1m]))")
        assert v is not None and v > 0, (m, v)


def bucket_of(v):
    """The (lower, upper] bounds of the TTFT bucket holding v."""
    i = bisect.bisect_left(TTFT_BOUNDS, v)
    return (TTFT_BOUNDS[i - 1] if i else 0.0), (TTFT_BOUNDS[i] if i < len(TTFT_BOUNDS) else math.inf)


def test_histogram_quantile(s, prom):
    """The median TTFT Prometheus interpolates lies in the bucket of the median the server
    logged for the same requests, and not above the bucket of the client's (a client's
    TTFT is the server's plus the HTTP round trip)."""
    with open(sent["log"]) as f:
        logged = sorted(e["samples"][0]["ttft_ms"] / 1e3 for e in map(json.loads, f)
                        if e["status"] == 200)
    assert len(logged) == sent["n"], logged
    q = prom.value("histogram_quantile(0.5, sum by (le) "
                   "(rate(dyad_time_to_first_token_seconds_bucket[5m])))")
    median = logged[math.ceil(0.5 * len(logged)) - 1]
    lo, hi = bucket_of(median)
    assert lo <= q <= hi, (q, median, lo, hi, logged)
    client = sorted(sent["client_ttft"])[math.ceil(0.5 * len(logged)) - 1]
    assert client >= median and q <= bucket_of(client)[1], (q, client, median)


def test_escaped_label(s, prom):
    r = prom.query("dyad_model_info")
    assert len(r) == 1 and r[0]["metric"]["model"] == MODEL_ID, r
    promql = MODEL_ID.replace("\\", "\\\\").replace('"', '\\"')
    assert prom.value(f'dyad_model_info{{model="{promql}"}}') == 1


def recorded(prom, name):
    """A ratio's recorded value once its inputs have stopped changing: the same value twice,
    a few evaluations apart. (A rate's value drifts as its window slides; a ratio of two
    rates of one target, whose first samples were 0, does not.)"""
    last = [None]

    def steady():
        v = prom.value(name)
        same = v is not None and v == last[0]
        last[0] = v
        return same
    assert wait_for(lambda: (time.sleep(1.5), steady())[1]), (name, last[0])
    return last[0]


def test_recording_rules(s, prom):
    names = re.findall(r"^\s*- record:\s*(\S+)", open(RULES).read(), re.M)
    assert len(names) >= 20, names
    for n in names:  # every rule evaluates to a series
        assert wait_for(lambda: prom.query(n)), n
    n, rej = sent["n"], N_REJECTED
    assert prom.value("dyad:requests:rate5m") > 0
    assert math.isclose(recorded(prom, "dyad:request_rejections:ratio_rate5m"), rej / (n + rej),
                        rel_tol=1e-9)
    assert recorded(prom, "dyad:request_errors:ratio_rate5m") == 0
    assert prom.value("dyad:generation_tokens:rate1m") > 0
    m = s.metrics()
    assert math.isclose(recorded(prom, "dyad:prefix_cache_hit:ratio_rate5m"),
                        m["dyad_prefix_cache_hits_total"] / m["dyad_prefix_cache_queries_total"],
                        rel_tol=1e-9)
    assert math.isclose(recorded(prom, "dyad:kv_transfer_gigabytes_per_second:ratio_rate5m"),
                        m["dyad_kv_transfer_bytes_total"] / m["dyad_kv_transfer_seconds_total"] / 1e9,
                        rel_tol=1e-6)
    within = sum(t <= 1 for t in sent["client_ttft"]) / n  # the client's TTFT bounds the server's
    assert recorded(prom, "dyad:ttft_goodput:ratio_rate5m") >= within - 1e-9
    p50, p90 = (prom.value(f"dyad:time_to_first_token_seconds:{q}_rate5m") for q in ("p50", "p90"))
    assert 0 < p50 <= p90, (p50, p90)


def test_promtool_lints(s, prom):
    text = metrics_text(s)
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), (r.stdout, r.stderr)
    for args in (["check", "rules", RULES], ["check", "config", os.path.join(DOCS, "prometheus.yml")],
                 ["check", "config", prom.config]):
        r = subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (args, r.stdout, r.stderr)


def test_every_family_documented(s, prom):
    doc = open(os.path.join(DOCS, "metrics.md")).read()
    families = re.findall(r"^# TYPE (\S+) ", metrics_text(s), re.M)
    missing = [f for f in families if f"`{f}" not in doc and f"{f}`" not in doc]
    assert not missing, missing


def test_rules_read_exposed_metrics(s, prom):
    names = exposed_names(metrics_text(s))
    for expr in re.findall(r"^\s*expr:\s*(.+(?:\n\s{10}.+)*)", open(RULES).read(), re.M):
        used = {m for m in promql_metric_names(expr) if ":" not in m}
        assert used and used <= names, (expr, used - names)


def dashboard_panels():
    d = json.load(open(DASHBOARD))
    assert isinstance(d["schemaVersion"], int) and d["schemaVersion"] >= 30, d["schemaVersion"]
    assert d["uid"] and d["title"] and d.get("id") is None
    inputs = {i["name"]: i for i in d["__inputs"]}
    assert inputs["DS_PROMETHEUS"]["type"] == "datasource", inputs
    assert inputs["DS_PROMETHEUS"]["pluginId"] == "prometheus", inputs
    panels = [p for p in d["panels"] if p["type"] != "row"]
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)), ids
    cells = set()
    for p in d["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, ("overlapping panels", p["title"])
        cells |= mine
    return panels


def test_dashboard_queries_run(s, prom):
    """Every expression of every panel: no query error, at least one series, and each metric
    it names is in /metrics (Grafana's interval variables replaced by a concrete range)."""
    names = exposed_names(metrics_text(s))
    panels = dashboard_panels()
    assert len(panels) >= 20
    for p in panels:
        assert p["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, p["title"]
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"], p["title"]
            expr = re.sub(r"\$__(rate_)?interval|\$__range", "1m", t["expr"])
            assert "$" not in expr, (p["title"], expr)
            used = promql_metric_names(expr)
            assert used and used <= names, (p["title"], expr, used - names)
            assert prom.query(expr), (p["title"], expr, "no series")


def main():
    if not PROMETHEUS or not PROMTOOL:
        skip("serve_prometheus_test needs Debian's prometheus package (prometheus and "
             "promtool on PATH; scripts/install-deps.sh installs it)")
    log = tempfile.NamedTemporaryFile("r", prefix="dyad-prom-", suffix=".jsonl")
    # disaggregated (the KV-transfer and router figures carry values), resizable within 2
    # cores with a reactive planner whose objectives are never met (its figures are shown,
    # and at the budget it can only hold)
    s = Server(DYAD, "--prefill-workers", "1", "--decode-workers", "1", "--model-name", MODEL_ID,
               "--cores", "2", "--planner", "reactive", "--slo", "ttft_ms=0.001,itl_ms=0.001",
               "--planner-interval", "1", "--request-log", log.name)
    prom = None
    for attempt in range(3):  # the free port may be taken between choosing and binding it
        try:
            prom = Prometheus(f"{s.host}:{s.port}", RULES)
            break
        except RuntimeError as e:
            print(f"prometheus did not start (attempt {attempt + 1}): {e}")
    if prom is None:
        s.stop()
        sys.exit(1)
    sent["log"] = log.name
    run_tests(globals(), [s, prom])


main()
