#!/usr/bin/env bash
# cli_sim.sh DYAD SOURCE_DIR — `dyad sim fit` end to end: it measures this machine, writes a
# measured cost model that names its source and holds positive rates, refits the same model from
# the benchmark files it can also be given, and bad input gives a clear message and exit code.
set -euo pipefail
dyad=$1
source "$(dirname "$0")/shell_helpers.sh"
field() { # file, python expression over the JSON object `m`
  python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print($2)" "$1"
}

# Measure and fit (quick: a fraction of a second on the bundled model).
"$dyad" sim fit -o "$tmp/m.json" --quick --reps 1 --kv-mem 64 2>"$tmp/err" && ok || bad "fit ($(cat "$tmp/err"))"
[ "$(field "$tmp/m.json" 'm["kind"]')" = measured ] && ok || bad "kind"
[ "$(field "$tmp/m.json" 'm["engine"]["threads"]')" = 1 ] && ok || bad "threads"
[ "$(field "$tmp/m.json" 'm["transfer"]["gbps"] > 0 and m["engine"]["decode_ms_per_seq"] >= 0')" = True ] && ok || bad "rates"
# 64 MiB of KV over the model's bytes per token.
[ "$(field "$tmp/m.json" 'm["kv"]["capacity_tokens"] == (64 << 20) // m["kv"]["bytes_per_token"]')" = True ] && ok || bad "capacity"
grep -q 'dyad bench engine --json --threads 1 --reps 1 --quick' "$tmp/m.json" && ok || bad "source"

# From files: the same benchmark output gives the same coefficients.
"$dyad" bench engine --json --quick --reps 1 --threads 1 >"$tmp/engine.json"
"$dyad" bench xfer --json --reps 1 --mib 16 >"$tmp/xfer.json"
"$dyad" sim fit -o "$tmp/a.json" --engine-json "$tmp/engine.json" --xfer-json "$tmp/xfer.json" --backend tcp
"$dyad" sim fit -o "$tmp/b.json" --engine-json "$tmp/engine.json" --xfer-json "$tmp/xfer.json" --backend tcp
[ "$(field "$tmp/a.json" 'm["engine"]')" = "$(field "$tmp/b.json" 'm["engine"]')" ] && ok || bad "refit differs"
[ "$(field "$tmp/a.json" 'm["transfer"]["backend"]')" = tcp ] && ok || bad "backend"

# Bad input.
expect_fail "no output" 2 "-o/--out: required" "$dyad" sim fit
expect_fail "unknown tool" 2 "unknown tool" "$dyad" sim frobnicate
expect_fail "bad backend" 2 "--backend" "$dyad" sim fit -o "$tmp/x.json" --backend rdma
echo "not json" >"$tmp/junk.json"
expect_fail "junk engine file" 1 "$tmp/junk.json" \
  "$dyad" sim fit -o "$tmp/x.json" --engine-json "$tmp/junk.json" --xfer-json "$tmp/xfer.json"
expect_fail "missing xfer file" 1 "$tmp/none.json" \
  "$dyad" sim fit -o "$tmp/x.json" --engine-json "$tmp/engine.json" --xfer-json "$tmp/none.json"
expect_fail "unwritable output" 1 "$tmp/no/dir.json" \
  "$dyad" sim fit -o "$tmp/no/dir.json" --engine-json "$tmp/engine.json" --xfer-json "$tmp/xfer.json"

finish
