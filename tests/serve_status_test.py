#!/usr/bin/env python3
"""serve_status_test.py DYAD SOURCE_DIR — GET /v1/dyad/status and GET /dashboard over real HTTP.

A disaggregated server (1 prefill + 1 decode) with objectives every request meets: after a
few requests the status document names both workers with their roles and KV, counts the
requests, their latencies and goodput 1, a KV transfer and the router's overlap, and carries
no prompt text. A resizable server whose reactive planner faces objectives no request meets:
goodput 0, and its decisions (a grow) on the planner's timeline with the demand beside the
pool sizes. With --api-key: the status needs the key (401 without, or with a wrong one); the
page does not, and comes with a Content-Security-Policy that forbids outside sources. Other
methods get 405; --slo without both objectives is refused. Standard library only; prints
'N passed, N failed'."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dyad_http import MODEL, Server, run_tests  # noqa: E402

DYAD, SRC = sys.argv[1], sys.argv[2]
KEY = "status-test-key"
SECRET_WORDS = "marmalade zeppelin"  # in every prompt: must never appear in the document
LONG = ("Once upon a time, there was a little girl named Lily. She loved to play outside in "
        "the park with her " + SECRET_WORDS + ". ") * 6


def complete(s, prompt, n=16, headers=None, stream=False):
    body = {"model": MODEL, "prompt": prompt, "max_tokens": n, "temperature": 0,
            "ignore_eos": True}
    if stream:
        return s.stream("/v1/completions", {**body, "stream": True})
    st, out, _ = s.request("POST", "/v1/completions", body, headers=headers)
    assert st == 200, (st, out)
    return out


def status(s, headers=None):
    st, doc, r = s.request("GET", "/v1/dyad/status", headers=headers)
    assert st == 200, (st, doc)
    assert r.getheader("Content-Type") == "application/json"
    return doc


def raw_status(s):
    c = s.conn()
    c.request("GET", "/v1/dyad/status")
    text = c.getresponse().read().decode()
    c.close()
    return text


def strings_in(v):
    if isinstance(v, str):
        yield v
    elif isinstance(v, dict):
        for k, x in v.items():
            yield k
            yield from strings_in(x)
    elif isinstance(v, list):
        for x in v:
            yield from strings_in(x)


def test_disaggregated_status(dis, planned, keyed):
    for i in range(6):
        complete(dis, f"Story {i}. " + LONG)
    complete(dis, "Once upon a time", stream=True)
    # the workers' reports (KV use, cache hits) come every 100 ms
    assert dis.wait_for(lambda: status(dis)["router"]["decisions"] >= 7)
    doc = status(dis)
    assert doc["object"] == "dyad.status" and doc["model"] == MODEL, doc
    assert doc["uptime_s"] > 0
    ws = doc["workers"]
    assert [(w["id"], w["role"], w["state"], w["up"]) for w in ws] == \
        [(0, "prefill", "serving", True), (1, "decode", "serving", True)], ws
    for w in ws:
        assert w["restarts"] == 0 and w["running"] >= 0 and w["waiting"] >= 0, w
        assert w["kv"]["device"]["capacity"] > 0, w
        assert 0 <= w["kv"]["device"]["ratio"] <= 1, w
        assert w["kv"]["host"]["on"] is False and w["kv"]["disk"]["on"] is False, w
    pools = doc["pools"]
    assert pools["prefill"]["workers"] == 1 and pools["decode"]["workers"] == 1, pools
    assert pools["aggregated"]["workers"] == 0 and pools["parked"] == 0, pools
    rq = doc["requests"]
    assert rq["window_s"] == 300 and rq["step_s"] == 5, rq
    assert rq["objectives"] == {"ttft_s": 600.0, "tpot_s": 60.0}, rq["objectives"]
    sm = rq["summary"]
    assert sm["requests"] == 7 and sm["failed"] == 0, sm
    assert sm["span_s"] > 0 and abs(sm["requests_per_s"] - 7 / sm["span_s"]) < 1e-6, sm
    assert abs(sm["output_tokens_per_s"] - 7 * 16 / sm["span_s"]) < 1e-6, sm
    assert sm["ttft_s"]["samples"] == 7 and 0 < sm["ttft_s"]["p50"] <= sm["ttft_s"]["p90"], sm
    assert sm["tpot_s"]["samples"] == 7, sm
    assert sm["itl_s"]["samples"] == 7 * 15, sm  # 15 gaps between 16 tokens
    assert sm["goodput"] == 1.0, sm
    series = rq["series"]
    assert series and series[-1]["age_s"] == 0, series
    assert [p["age_s"] for p in series] == sorted((p["age_s"] for p in series), reverse=True)
    assert sum(p["requests_per_s"] for p in series) > 0, series
    mv = doc["kv"]["movement"]
    assert mv["totals"]["transfers"] >= 1 and mv["totals"]["bytes"] > 0, mv
    assert mv["transfers_per_s"] > 0 and mv["bytes_per_s"] > 0, mv
    assert mv["transfer_gb_per_s"] > 0 and 0 < mv["ttft_share"] <= 1, mv
    pc = doc["kv"]["prefix_cache"]
    assert pc["lookup_blocks"] > 0 and 0 <= pc["hit_rate"] <= 1, pc
    rt = doc["router"]
    assert rt["block_size"] > 0 and rt["policy"], rt
    assert rt["recent"]["predicted_overlap_blocks"] >= 0, rt
    assert doc["planner"] is None
    # only what /metrics has: no prompt text, no path of the host
    text = raw_status(dis)
    assert SECRET_WORDS.split()[0] not in text and "Lily" not in text
    assert not [v for v in strings_in(doc) if v.startswith("/")], doc
    m = dis.metrics()
    assert m["dyad_kv_transfers_total"] >= mv["totals"]["transfers"]


def test_planner_timeline_and_missed_objectives(dis, planned):
    def grown():
        complete(planned, "Once upon a time " * 8)
        pl = status(planned)["planner"]
        return any(d["action"] == "grow" for d in pl["history"])
    assert planned.wait_for(grown, timeout=90), status(planned)["planner"]
    doc = status(planned)
    pl = doc["planner"]
    assert pl["planner"] == "reactive" and pl["interval_s"] == 0.5, pl
    assert len(pl["slots"]) == 2, pl
    h = pl["history"]
    ages = [d["age_s"] for d in h]
    assert ages == sorted(ages, reverse=True) and ages[-1] >= 0, h
    assert [d["interval"] for d in h] == list(range(h[0]["interval"], h[0]["interval"] + len(h)))
    for d in h:
        assert d["split"] is False and d["prefill"] == 0 and d["decode"] >= 1, d
        assert d["observed_rate"] >= 0 and d["decode_tokens_per_s"] >= 0, d
        ratio = d["demand_ratio"]
        if d["decode_tokens_per_s"] > 0:
            assert abs(ratio - d["prefill_tokens_per_s"] / d["decode_tokens_per_s"]) < 1e-9, d
        else:
            assert ratio is None, d
    grow = next(d for d in h if d["action"] == "grow")
    assert grow["decode"] == 2 and grow["observed_rate"] > 0, grow
    # objectives no request meets: goodput 0
    sm = doc["requests"]["summary"]
    assert sm["requests"] >= 1 and sm["goodput"] == 0.0, sm
    # the same history on the admin view
    st, adm, _ = planned.request("GET", "/v1/admin/pools")
    assert st == 200 and len(adm["history"]) >= len(h), adm


def test_api_key(dis, planned, keyed):
    st, err, _ = keyed.request("GET", "/v1/dyad/status")
    assert st == 401 and err["error"]["code"] == "invalid_api_key", (st, err)
    st, _, _ = keyed.request("GET", "/v1/dyad/status", headers={"Authorization": "Bearer nope"})
    assert st == 401
    good = {"Authorization": "Bearer " + KEY}
    complete(keyed, "Once upon a time", headers=good)
    doc = status(keyed, headers=good)
    assert doc["requests"]["summary"]["requests"] == 1, doc["requests"]
    assert doc["requests"]["objectives"] is None and doc["requests"]["summary"]["goodput"] is None
    assert [w["role"] for w in doc["workers"]] == ["aggregated"], doc["workers"]
    # the page needs no key and holds no data
    st, page, r = keyed.request("GET", "/dashboard")
    assert st == 200 and r.getheader("Content-Type") == "text/html; charset=utf-8", st
    csp = r.getheader("Content-Security-Policy")
    for rule in ("default-src 'none'", "connect-src 'self'", "frame-ancestors 'none'"):
        assert rule in csp, csp
    assert "http://" not in csp and "https:" not in csp and "*" not in csp, csp
    assert r.getheader("X-Content-Type-Options") == "nosniff"
    assert "/v1/dyad/status" in page and MODEL not in page
    # the page never makes HTML or code of what the server says
    for banned in ("innerHTML", "outerHTML", "insertAdjacentHTML", "eval(", "new Function",
                   "document.write", "src=\"http", "href=\"http"):
        assert banned not in page, banned


def test_methods(dis, planned, keyed):
    good = {"Authorization": "Bearer " + KEY}
    for path in ("/dashboard", "/v1/dyad/status"):
        for method in ("POST", "PUT", "DELETE"):
            st, err, _ = keyed.request(method, path, headers=good)
            assert st == 405 and err["error"]["code"] == "method_not_allowed", (method, path, st)
    st, _, _ = dis.request("GET", "/dashboard/")
    assert st == 404


def test_bad_objectives():
    for slo, why in (("ttft_ms=100", "--slo needs both ttft_ms=X and itl_ms=Y"),
                     ("itl_ms=5", "--slo needs both"),
                     ("ttft_ms=100,itl_ms=5,e2e_ms=9", "e2e_ms is not an objective")):
        p = subprocess.run([DYAD, "serve", "--port", "0", "--slo", slo], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 2 and why in p.stderr, (slo, p.returncode, p.stderr)


def main():
    run_tests(globals(), [
        Server(DYAD, "--slo", "ttft_ms=600000,itl_ms=60000"),
        Server(DYAD, "--workers", "1", "--kv-mem", "64", "--cores", "2", "--planner",
               "reactive", "--slo", "ttft_ms=0.001,itl_ms=0.001", "--planner-interval", "0.5"),
        Server(DYAD, "--workers", "1", "--api-key", KEY),
    ])


main()
