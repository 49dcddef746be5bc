#!/usr/bin/env bash
# cli_sim_bench.sh DYAD SOURCE_DIR — `dyad sim bench` end to end on the 300-row Mooncake excerpt:
# every request of every loop is simulated and accounted for (completed + failed), the speed
# and memory figures are there and positive, a longer run (more loops) holds no more requests
# at once than a shorter one at the same rate, a cap on requests in flight bounds what is held,
# and bad flags give the documented message and exit code.
set -euo pipefail
dyad=$1 src=$2
source "$(dirname "$0")/shell_helpers.sh"
trace=$src/bench/data/mooncake_conversation_300.jsonl
check() { # name, JSON file, python expression over it as `r`
  if python3 -c "import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if ($3) else 1)" "$2"; then
    ok; else bad "$1: $(head -c 400 "$2")"; fi
}
b() { "$dyad" sim bench --trace "$trace" --length-scale 0.25 "$@"; }

b --workers 4 --rate 20 --json >"$tmp/one.json"
check "one loop" "$tmp/one.json" 'r["requests"] == 300 and r["completed"] + r["failed"] == 300 and r["completed"] > 0 and r["steps"] > 0 and r["simulated_s"] > 0 and r["cpu_s"] > 0 and r["requests_per_cpu_s"] > 0 and r["peak_rss_kib"] > 0 and 0 < r["peak_requests_held"] < 300 and r["workers"] == 4'
b --workers 4 --rate 20 --loops 3 --json >"$tmp/three.json"
check "three loops" "$tmp/three.json" 'r["requests"] == 900 and r["completed"] + r["failed"] == 900 and r["simulated_s"] > 2.5 * json.load(open(sys.argv[1].replace("three", "one")))["simulated_s"]'
python3 -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); sys.exit(0 if b['peak_requests_held'] <= 2 * a['peak_requests_held'] else 1)" "$tmp/one.json" "$tmp/three.json" && ok || bad "held grows with loops"
b --workers 4 --rate 1000 --concurrency 5 --json >"$tmp/cap.json"
check "cap" "$tmp/cap.json" 'r["requests"] == 300 and r["peak_requests_held"] <= 6 and r["refused"] == 0'
b --prefill-workers 1 --decode-workers 2 --rate 20 >"$tmp/report.txt"
grep -q '^== dyad sim bench: 1 prefill + 2 decode workers' "$tmp/report.txt" && grep -q '^speed .* simulated requests per CPU-second' "$tmp/report.txt" && grep -q '^memory  *peak RSS' "$tmp/report.txt" && ok || bad "report: $(cat "$tmp/report.txt")"

expect_fail "workers and prefill" 2 "--workers" "$dyad" sim bench --workers 2 --prefill-workers 1 --decode-workers 1
expect_fail "prefill alone" 2 "--decode-workers" "$dyad" sim bench --prefill-workers 1
expect_fail "bad loops" 2 "--loops" "$dyad" sim bench --loops 0
expect_fail "missing trace" 1 "nope.jsonl" "$dyad" sim bench --trace "$tmp/nope.jsonl"
finish
