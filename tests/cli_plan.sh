#!/usr/bin/env bash
# cli_plan.sh DYAD SOURCE_DIR — `dyad plan` end to end: on a GPU preset it reports the
# criterion's and the simulated sizes for every TP degree, picks the cheapest deployment that
# met the objectives (and that choice is the cheapest met run in --json), prints how to run it
# and its frontier; the same inputs give byte-identical --json; on a measured model of this
# machine it prints the `dyad serve` command; a budget too small fails with exit 1; bad flags
# and files give a clear message and exit 2 or 1; `dyad plan predict` scores the load
# predictors on a trace.
set -euo pipefail
dyad=$1 src=$2
source "$(dirname "$0")/shell_helpers.sh"
check() { # name, JSON file, python expression over it as `r`
  if python3 -c "import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if ($3) else 1)" "$2"; then
    ok; else bad "$1: $(head -c 600 "$2")"; fi
}
plan() { "$dyad" plan "$@"; }
h100="--hardware h100 --model llama3.1-8b"
wl="--rate 20 --isl 1024 --osl 128 --requests 120 --seed 2"

# The report: both methods for every degree, the choice, how to run it, its frontier.
plan $h100 --slo ttft_ms=500,itl_ms=20 $wl >"$tmp/report.txt"
for needle in "== dyad plan" "criterion" "simulated" "cheapest:" "run it:" "replicas" "frontier of that deployment"; do
  grep -qF "$needle" "$tmp/report.txt" && ok || bad "report lacks '$needle': $(head -c 800 "$tmp/report.txt")"
done
[ "$(grep -c '^  [1248] ' "$tmp/report.txt")" -ge 8 ] && ok || bad "report: fewer than 8 rows for 4 TP degrees"

# --json: the best is the cheapest run that met both objectives, and it met them.
plan $h100 --slo ttft_ms=500,itl_ms=20 $wl --json >"$tmp/a.json"
check "best is the cheapest met run" "$tmp/a.json" '
  r["best"]["met"] and r["best"]["ttft_ms"] <= 500 and r["best"]["itl_ms"] <= 20 and
  r["best"]["units"] == min(x["units"] for t in r["tp"] if "skipped" not in t
                            for k in ("agg", "disagg") for x in t[k]["runs"] if x["met"])'
check "traffic window" "$tmp/a.json" 'r["traffic"]["rate"] == 20 and r["traffic"]["isl"] == 1024 and r["traffic"]["osl"] == 128 and r["traffic"]["prefix_hit"] == 0'
check "frontier: load multiples, throughput grows with load" "$tmp/a.json" '
  [p["load"] for p in r["frontier"]] == [0.25, 0.5, 0.75, 1, 1.25, 1.5, 2] and
  r["frontier"][0]["output_tok_s"] < r["frontier"][3]["output_tok_s"]'
plan $h100 --slo ttft_ms=500,itl_ms=20 $wl --json >"$tmp/b.json"
cmp -s "$tmp/a.json" "$tmp/b.json" && ok || bad "same inputs, different --json"

# A shared prefix is seen as a prefix hit.
plan $h100 --slo ttft_ms=500,itl_ms=20 --rate 20 --isl 1024 --osl 64 --requests 60 --prefix-groups 1 --prefix-len 512 --no-sim --json >"$tmp/hit.json"
check "prefix hit" "$tmp/hit.json" 'abs(r["traffic"]["prefix_hit"] - 0.5 * 59 / 60) < 0.02'

# --no-sim: the criterion alone, still exit 0.
plan $h100 --slo ttft_ms=500,itl_ms=20 $wl --no-sim --tp 1 >"$tmp/nosim.txt" && ok || bad "--no-sim exit"
grep -qF "not checked by simulation" "$tmp/nosim.txt" && ok || bad "--no-sim report"

# A budget no deployment fits (one GPU for 200 requests a second): exit 1, the table says why.
set +e; plan $h100 --slo ttft_ms=500,itl_ms=20 --rate 200 --isl 1024 --osl 128 --requests 300 --budget 1 --tp 1 >"$tmp/small.txt" 2>&1; rc=$?; set -e
[ $rc -eq 1 ] && grep -qF "none of the deployments searched met the objectives" "$tmp/small.txt" && ok || bad "budget 1: exit $rc $(cat "$tmp/small.txt")"

# A measured model of this machine: the command to run it.
cat >"$tmp/here.json" <<'JSON'
{"kind": "measured", "name": "here", "engine": {"model": "stories260K.bin", "threads": 1,
 "fixed_ms": 0.1, "prefill_ms_per_token": 0.03, "prefill_ms_per_context": 0.0001,
 "decode_ms_per_seq": 0.03, "decode_ms_per_context": 0.0002},
 "kv": {"bytes_per_token": 1280, "capacity_tokens": 65536},
 "transfer": {"backend": "shm", "gbps": 5, "latency_us": 30}}
JSON
plan --hardware "$tmp/here.json" --slo ttft_ms=50,itl_ms=2 --rate 50 --isl 64 --osl 16 --requests 200 >"$tmp/here.txt"
grep -qE "run it: +dyad serve --model stories260K.bin --threads-per-worker 1 --(workers|prefill-workers) [0-9]+" "$tmp/here.txt" && ok || bad "measured: no serve command: $(cat "$tmp/here.txt")"
grep -qF "cores" "$tmp/here.txt" && ok || bad "measured: cost not in cores"

# Usage errors (2) and bad files (1).
expect_fail "no hardware" 2 "--hardware: required" plan --slo ttft_ms=1,itl_ms=1 --rate 1
expect_fail "no slo" 2 "both ttft_ms=X and itl_ms=Y" plan --hardware h100 --rate 1
expect_fail "half an slo" 2 "both ttft_ms=X and itl_ms=Y" plan --hardware h100 --slo ttft_ms=5 --rate 1
expect_fail "bad slo" 2 "is not ttft_ms=X" plan --hardware h100 --slo ttft=5 --rate 1
expect_fail "e2e slo" 2 "e2e_ms is not an objective" plan --hardware h100 --slo ttft_ms=5,itl_ms=5,e2e_ms=9 --rate 1
expect_fail "no rate" 2 "--rate: required without a --trace" plan --hardware h100 --slo ttft_ms=5,itl_ms=5
expect_fail "bad percentile" 2 "--percentile: must be 50, 90 or 99" plan --hardware h100 --slo ttft_ms=5,itl_ms=5 --rate 1 --percentile 75
expect_fail "bad tp" 2 "--tp: '3' is not a list" plan --hardware h100 --slo ttft_ms=5,itl_ms=5 --rate 1 --tp 3
expect_fail "bad model" 2 "--model: 'llama3.1-405b' is not" plan --hardware h100 --model llama3.1-405b --slo ttft_ms=5,itl_ms=5 --rate 1
expect_fail "model with a file" 2 "--model: only with a preset" plan --hardware "$tmp/here.json" --model llama3.1-8b --slo ttft_ms=5,itl_ms=5 --rate 1
expect_fail "tp with a measured model" 2 "--tp: a measured cost model has no TP degree" plan --hardware "$tmp/here.json" --tp 2 --slo ttft_ms=5,itl_ms=5 --rate 1
expect_fail "missing file" 1 "$tmp/none.json" plan --hardware "$tmp/none.json" --slo ttft_ms=5,itl_ms=5 --rate 1
echo '{"kind": "measured", "name": "x"}' >"$tmp/broken.json"
expect_fail "broken file" 1 "broken.json: engine" plan --hardware "$tmp/broken.json" --slo ttft_ms=5,itl_ms=5 --rate 1
# dyad plan predict: every predictor scored on a trace, the best named per series.
plan predict --trace "$src/bench/data/mooncake_conversation_300.jsonl" --interval 10 >"$tmp/pred.txt"
[ "$(grep -c '^| \(last\|mean\|holt\|kalman\)' "$tmp/pred.txt")" -eq 7 ] && grep -q "best for rate: .*; best for isl: .*; best for osl: " "$tmp/pred.txt" && ok || bad "plan predict: $(cat "$tmp/pred.txt")"
expect_fail "predict without a trace" 2 "--trace: required" plan predict
expect_fail "predict: too short" 1 "fewer than 3 intervals" plan predict --trace "$src/bench/data/mooncake_conversation_300.jsonl" --interval 100000
plan --help >"$tmp/help.txt" && grep -qF -- "--hardware H" "$tmp/help.txt" && ok || bad "--help"
finish
