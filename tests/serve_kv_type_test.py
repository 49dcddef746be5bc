#!/usr/bin/env python3
"""serve_kv_type_test.py DYAD SOURCE_DIR — `dyad serve --kv-type f16|q8_0` end to end.

Disaggregated serving with an f16 or q8_0 KV cache (the blocks shipped over shared memory and
over TCP) gives the answers of aggregated serving with the same --kv-type, greedy and
sampled; each transfer moves exactly the type's share of the f32 cache's bytes (the request's
kv_transfer bytes and dyad_kv_transfer_bytes_total); a prompt that shares a prefix with an
earlier one hits the quantized prefix cache and gets the answer it gets computed in full;
blocks evicted to the host tier come back with the same answer. Standard library only;
prints 'N passed, N failed'."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dyad_http import MODEL, Server, run_tests  # noqa: E402

DYAD, SRC = sys.argv[1], sys.argv[2]
LONG = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. " * 6
_fresh = [0]
# The bundled stories260K keeps 4 KV heads of head_dim 8 per layer: a q8_0 row of one head is
# 8 int8 values and an f32 scale, 12 bytes against f32's 32 and f16's 16.
SHARE = {"f16": 16 / 32, "q8_0": 12 / 32}
F32_TOKEN_BYTES = 5 * 2 * 4 * 8 * 4  # 5 layers × (K, V) × 4 heads × 8 × 4 bytes


def fresh():
    """A long prompt no server has seen: a cached one would (rightly) be prefilled locally."""
    _fresh[0] += 1
    return f"Story {_fresh[0]}. " + LONG


def ask(s, prompt, **kw):
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 40, "temperature": 0, **kw}
    st, r, _ = s.request("POST", "/v1/completions", body)
    assert st == 200, (st, r)
    return r


def texts(r):
    return [c["text"] for c in r["choices"]]


def transfer_bytes(r):
    xs = [c["kv_transfer"]["bytes"] for c in r["dyad"]["choices"]]
    assert all(c["prefill_worker"] == 0 for c in r["dyad"]["choices"]), r["dyad"]
    return xs[0]


def check_type(name, f32_dis, agg, dis, tcp):
    # greedy, sampled, and two samples forking one prompt's blocks (a block copy in the type)
    for kw in ({}, {"temperature": 0.9, "seed": 5}, {"temperature": 1.2, "top_k": 20, "seed": 9, "n": 2}):
        p = fresh()
        want = texts(ask(agg, p, **kw))
        f32_bytes = transfer_bytes(ask(f32_dis, p, **kw))
        for s in (dis, tcp):
            r = ask(s, p, **kw)
            assert texts(r) == want, (name, kw, texts(r), want)
            got = transfer_bytes(r)
            assert got == f32_bytes * SHARE[name], (name, got, f32_bytes)
    for s in (dis, tcp):
        total = s.settled("dyad_kv_transfer_bytes_total")
        assert total > 0 and s.metrics()["dyad_kv_transfers_total"] >= 3, (name, total)


def test_f16_same_answers_half_the_bytes(f32_dis, f16_agg, f16_dis, f16_tcp):
    check_type("f16", f32_dis, f16_agg, f16_dis, f16_tcp)


def test_q8_0_same_answers_a_share_of_the_bytes(f32_dis, f16_agg, f16_dis, f16_tcp, q8_agg, q8_dis, q8_tcp):
    check_type("q8_0", f32_dis, q8_agg, q8_dis, q8_tcp)


def test_totals_shrink(f32_dis, f16_agg, f16_dis, f16_tcp, q8_agg, q8_dis, q8_tcp):
    """The same prompts over each deployment: the transfer byte counters keep the shares."""
    before = [s.settled("dyad_kv_transfer_bytes_total") for s in (f32_dis, f16_dis, q8_dis)]
    p = fresh()
    for s in (f32_dis, f16_dis, q8_dis):
        ask(s, p)
    after = [s.settled("dyad_kv_transfer_bytes_total") for s in (f32_dis, f16_dis, q8_dis)]
    f32, f16, q8 = (a - b for a, b in zip(after, before))
    assert f32 > 0 and f16 * 2 == f32 and q8 == f32 * SHARE["q8_0"], (f32, f16, q8)


def test_prefix_cache_hit(f32_dis, f16_agg, f16_dis, f16_tcp, q8_agg):
    """A prompt whose first blocks are cached (q8_0 and f16) reads them and answers as it does
    computed in full: the same prompt first, then again from the cache."""
    for s in (q8_agg, f16_agg):
        p = fresh()
        first = ask(s, p)
        again = ask(s, p)
        cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached >= 16, again["usage"]
        assert texts(again) == texts(first), (texts(again), texts(first))


def test_host_tier_round_trip(f32_dis, f16_agg, f16_dis, f16_tcp, q8_agg, q8_dis, q8_tcp, q8_tiers):
    """q8_0 blocks evicted to the host tier and loaded back give the first answer again."""
    p = fresh()
    first = ask(q8_tiers, p)
    for _ in range(6):  # other prompts push the first one's blocks out of the small KV cache
        ask(q8_tiers, fresh())
    again = ask(q8_tiers, p)
    assert texts(again) == texts(first)
    m = q8_tiers.metrics()
    tier = {k: v for k, v in m.items() if "tier" in k}
    assert m['dyad_kv_tier_prompts_total{worker="0",outcome="loaded"}'] >= 1, tier
    # every copy moves one q8_0 block: 16 positions of F32_TOKEN_BYTES × the q8_0 share
    for d in ("in", "out"):
        n = m[f'dyad_kv_tier_copies_total{{worker="0",tier="host",direction="{d}"}}']
        b = m[f'dyad_kv_tier_bytes_total{{worker="0",tier="host",direction="{d}"}}']
        assert n > 0 and b == n * 16 * F32_TOKEN_BYTES * SHARE["q8_0"], (d, n, b)


def main():
    small = ("--kv-mem", "16")
    run_tests(globals(), [
        Server(DYAD, *small),
        Server(DYAD, "--workers", "1", "--kv-type", "f16", *small),
        Server(DYAD, "--kv-type", "f16", *small),
        Server(DYAD, "--kv-type", "f16", "--kv-transfer", "tcp", *small),
        Server(DYAD, "--workers", "1", "--kv-type", "q8_0", *small),
        Server(DYAD, "--kv-type", "q8_0", *small),
        Server(DYAD, "--kv-type", "q8_0", "--kv-transfer", "tcp", *small),
        Server(DYAD, "--workers", "1", "--kv-type", "q8_0", "--kv-blocks", "40",
               "--kv-host-mem", "16"),
    ])


main()
