#!/usr/bin/env python3
"""serve_ucx_test.py DYAD SOURCE_DIR — disaggregated serving with KV over UCX.

One prefill and one decode worker with --kv-transfer ucx give exactly the greedy text of the
same deployment with --kv-transfer tcp, the prompts prefilled remotely and their transfer's
bytes and time reported (per response and in /metrics). UCX_TLS=tcp,sm (unless set): UCX's
tcp and shared-memory transports, the same on every machine. A dyad built without UCX must
refuse --kv-transfer ucx with a clear message instead. Standard library only; prints
'N passed, N failed'."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dyad_http import MODEL, Server, run_tests  # noqa: E402

DYAD, SRC = sys.argv[1], sys.argv[2]
LONG = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. " * 6
os.environ.setdefault("UCX_TLS", "tcp,sm")


def ask(s, prompt, **kw):
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 40, "temperature": 0, **kw}
    st, r, _ = s.request("POST", "/v1/completions", body)
    assert st == 200, (st, r)
    return r


def test_banner(tcp, ucx):
    assert "KV over ucx" in ucx.banner, ucx.banner
    assert "KV over tcp" in tcp.banner, tcp.banner


def test_same_greedy_text(tcp, ucx):
    for i in range(3):
        p = f"Story {i}. " + LONG
        want = ask(tcp, p)
        got = ask(ucx, p)
        assert got["choices"][0]["text"] == want["choices"][0]["text"], (got, want)
        assert want["choices"][0]["text"], want
        for r in (want, got):
            c = r["dyad"]["choices"][0]
            assert c["prefill_worker"] == 0, r["dyad"]
            assert c["kv_transfer"]["bytes"] > 0 and c["kv_transfer"]["seconds"] >= 0, c
        # the same blocks moved either way
        assert got["dyad"]["choices"][0]["kv_transfer"]["bytes"] == \
            want["dyad"]["choices"][0]["kv_transfer"]["bytes"]
    m = ucx.metrics()
    assert m["dyad_kv_transfers_total"] >= 3 and m["dyad_kv_transfer_bytes_total"] > 0, m
    assert m.get("dyad_kv_transfer_timeouts_total", 0) == 0, m


def test_streamed(tcp, ucx):
    p = "Story 9. " + LONG
    events = ucx.stream("/v1/completions", {"model": MODEL, "prompt": p, "max_tokens": 40,
                                            "temperature": 0, "stream": True})
    assert events[-1] == "[DONE]", events
    text = "".join(e["choices"][0]["text"] for e in events[:-1] if e.get("choices"))
    assert text == ask(tcp, p)["choices"][0]["text"], text


def built_without_ucx():
    """True (having checked its message) when this dyad has no UCX backend."""
    # the transfer is checked before the model loads: with UCX, this fails on the model
    r = subprocess.run([DYAD, "serve", "--port", "0", "--kv-transfer", "ucx", "--model",
                        "/nonexistent.gguf"], capture_output=True, text=True, timeout=60)
    if r.returncode == 2 and "built without UCX" in r.stderr:
        assert "--kv-transfer tcp" in r.stderr and "libucx-dev" in r.stderr, r.stderr
        return True
    return False


def main():
    if built_without_ucx():
        if os.environ.get("DYAD_REQUIRE_TOOLS"):
            print("FAIL: dyad was built without UCX (DYAD_REQUIRE_TOOLS is set: run "
                  "scripts/install-deps.sh)")
            sys.exit(1)
        print("built without UCX: --kv-transfer ucx refused clearly")
        print("1 passed, 0 failed")
        sys.exit(0)
    run_tests(globals(), [Server(DYAD, "--kv-transfer", "tcp"), Server(DYAD, "--kv-transfer", "ucx")])


main()
