#!/usr/bin/env bash
# cli_bench_engine.sh DYAD SOURCE_DIR — `dyad bench engine`'s roofline and batch tables: the
# JSON names the ceilings it compared with (cache or DRAM, int8 or fp32 peak) and holds a
# batch table with private KV at each --batch-context, skipping exactly the B whose KV is
# over --batch-kv-mib; --phases gives the two steps by phase as shares; bad values are refused
# with a clear message.
set -euo pipefail
dyad=$1
source "$(dirname "$0")/shell_helpers.sh"
field() { # file, python expression over the JSON object `d`
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"
}

# stories260K: 1280 KV bytes a position, blocks of 16 → 5 blocks (102,400 bytes) a sequence at
# context 64, so 1 MiB holds B ≤ 10: B = 1, 2, 4, 8 are measured, 16 and up skipped.
"$dyad" bench engine --json --quick --reps 1 --threads 1 --batch-context 64 --batch-kv-mib 1 \
  >"$tmp/e.json" 2>"$tmp/err" && ok || bad "run ($(cat "$tmp/err"))"
[ "$(field "$tmp/e.json" '[p["b"] for p in d["batch_at"][0]["batch"]]')" = "[1, 2, 4, 8]" ] && ok || bad "batch B"
[ "$(field "$tmp/e.json" 'd["batch_at"][0]["context"]')" = 64 ] && ok || bad "batch context"
[ "$(field "$tmp/e.json" 'all(p["tokens_per_s"] > 0 for p in d["batch_at"][0]["batch"])')" = True ] && ok || bad "rates"
# f32 weights → the fp32 FMA peak; 1 MB of weights fits any last-level cache Linux reports.
[ "$(field "$tmp/e.json" 'd["prefill_peak"]')" = fp32_fma ] && ok || bad "peak kind"
[ "$(field "$tmp/e.json" 'd["llc_bytes"] == 0 or d["weights_in_llc"]')" = True ] && ok || bad "in llc"
[ "$(field "$tmp/e.json" 'd["dram_gbps"] > 0 and d["llc_gbps"] > 0 and d["int8_peak_gops"] > 0')" = True ] && ok || bad "machine"
[ "$(field "$tmp/e.json" 'd["bandwidth_gbps"] == (d["llc_gbps"] if d["weights_in_llc"] else d["dram_gbps"])')" = True ] && ok || bad "ceiling source"

# The text report says the same.
"$dyad" bench engine --quick --reps 1 --threads 1 --batch-context 64 --batch-kv-mib 1 >"$tmp/e.txt"
grep -q "decode at context 64, own KV per sequence" "$tmp/e.txt" && ok || bad "text table"
grep -q "16    (its KV is over --batch-kv-mib 1)" "$tmp/e.txt" && ok || bad "text skip"

expect_fail "bad context" 2 "--batch-context: a context from 1 to 65536, not 'x'" \
  "$dyad" bench engine --batch-context x
expect_fail "too many" 2 "at most 4 contexts" "$dyad" bench engine --batch-context 1 \
  --batch-context 2 --batch-context 3 --batch-context 4 --batch-context 5
# --phases: the two steps by phase, as shares; the phases add up to the step (sampling after).
"$dyad" bench engine --phases --json --reps 1 --threads 2 >"$tmp/p.json" 2>"$tmp/err" && ok || bad "phases run ($(cat "$tmp/err"))"
[ "$(field "$tmp/p.json" '[(p["step"], p["p"], p["b"]) for p in d["phases"]]')" = "[('prefill', 512, 1), ('decode', 1, 64)]" ] && ok || bad "phase steps"
[ "$(field "$tmp/p.json" 'all(p["matmul_ms"] > 0 and p["attention_ms"] > 0 and p["rest_ms"] > 0 and p["sampling_ms"] >= 0 and p["matmul_ms"] + p["attention_ms"] + p["rest_ms"] + p["sampling_ms"] <= p["ms"] * 1.001 for p in d["phases"])')" = True ] && ok || bad "phase times"
[ "$(field "$tmp/p.json" 'all(abs(p["outside_matmul_share"] - (1 - p["matmul_ms"] / p["ms"])) < 1e-3 for p in d["phases"])')" = True ] && ok || bad "phase share"
"$dyad" bench engine --phases --reps 1 --threads 1 >"$tmp/p.txt"
grep -q "decode B=64, context 64" "$tmp/p.txt" && grep -q "outside matmul" "$tmp/p.txt" && ok || bad "phases text"
expect_fail "phases quick" 2 "--phases measures one prefill and one decode step" \
  "$dyad" bench engine --phases --quick
finish
