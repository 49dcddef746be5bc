#!/usr/bin/env bash
# cli_sim_run.sh DYAD SOURCE_DIR — `dyad sim run` end to end: a run on a roofline preset and on
# a measured model `dyad sim fit` wrote here, aggregated and disaggregated, with bench's report
# and figures that follow from the workload (output tokens = requests x osl, TTFT > 0); the same
# seed gives byte-identical --json and another seed another; closed loops (bench's
# --concurrency) keep that many requests in flight; a sweep gives bench's points, CSV and plot;
# a trace replays; a bad cost file or bad flags give a clear message and the documented exit
# code.
set -euo pipefail
dyad=$1 src=$2
source "$(dirname "$0")/shell_helpers.sh"
check() { # name, JSON file (one object), python expression over it as `r`
  if python3 -c "import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if ($3) else 1)" "$2"; then
    ok; else bad "$1: $(head -c 400 "$2")"; fi
}
h100=$src/sim/costs/h100-llama3.1-8b-fp8.json
sim() { "$dyad" sim run "$@"; }

# A roofline preset, aggregated and disaggregated: every request completes with its fixed
# output, and the disaggregated run ships KV for its long prompts.
sim --cost "$h100" --workers 2 --rate 20 --requests 40 --isl 1024 --osl 64 --seed 3 --json >"$tmp/agg.json"
check "aggregated" "$tmp/agg.json" 'r["completed"] == 40 and r["failed"] == 0 and r["output_tokens"] == 40 * 64 and r["input_tokens"] == 40 * 1024 and r["ttft_ms"]["p50"] > 0 and r["tpot_ms"]["p50"] > 0 and r["kv_transfer"]["remote_prefills"] == 0 and r["load"]["mode"] == "open loop" and r["cores"] == 2'
sim --cost "$h100" --prefill-workers 1 --decode-workers 2 --rate 20 --requests 40 --isl 1024 --osl 64 --seed 3 --json >"$tmp/dis.json"
check "disaggregated" "$tmp/dis.json" 'r["completed"] == 40 and r["output_tokens"] == 40 * 64 and r["ttft_ms"]["min"] > 0 and r["kv_transfer"]["remote_prefills"] > 0 and r["kv_transfer"]["bytes"] > 0 and "1 prefill + 2 decode" in r["url"]'
# TP 2 halves each GPU's weights: decode steps are faster than at TP 1.
sim --cost "$h100" --tp 2 --workers 2 --rate 20 --requests 40 --isl 1024 --osl 64 --seed 3 --json >"$tmp/tp2.json"
python3 -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); sys.exit(0 if b['tpot_ms']['p50'] < a['tpot_ms']['p50'] and b['cores'] == 4 else 1)" "$tmp/agg.json" "$tmp/tp2.json" && ok || bad "tp 2"

# Deterministic: the same seed gives the same bytes; another seed other arrivals.
sim --cost "$h100" --workers 2 --rate 20 --requests 40 --isl 1024 --osl 64 --seed 3 --json >"$tmp/agg2.json"
cmp -s "$tmp/agg.json" "$tmp/agg2.json" && ok || bad "same seed, different --json"
sim --cost "$h100" --workers 2 --rate 20 --requests 40 --isl 1024 --osl 64 --seed 4 --json >"$tmp/agg4.json"
cmp -s "$tmp/agg.json" "$tmp/agg4.json" && bad "another seed, same --json" || ok

# bench's closed loop (its default: one request in flight): each request is sent when the one
# before ends, so the run lasts the sum of their E2E; four clients finish sooner; a cap on an
# open loop holds it back.
sim --cost "$h100" --workers 1 --requests 12 --isl 512 --osl 32 --json >"$tmp/c1.json"
check "closed loop" "$tmp/c1.json" 'r["load"]["mode"] == "closed loop" and r["load"]["concurrency"] == 1 and r["completed"] == 12 and abs(r["duration_s"] * 1000 - 12 * r["e2e_ms"]["mean"]) < 1e-6 * r["duration_s"] * 1000'
sim --cost "$h100" --workers 1 --requests 12 --isl 512 --osl 32 --concurrency 4 --json >"$tmp/c4.json"
python3 -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); sys.exit(0 if b['duration_s'] < a['duration_s'] / 2 and b['load']['concurrency'] == 4 and b['output_tokens'] == 12 * 32 else 1)" "$tmp/c1.json" "$tmp/c4.json" && ok || bad "concurrency 4"
sim --cost "$h100" --workers 1 --requests 12 --isl 512 --osl 32 --rate inf --concurrency 1 --json >"$tmp/capped.json"
check "capped open loop" "$tmp/capped.json" 'r["load"]["mode"] == "open loop" and r["load"]["concurrency"] == 1 and r["ttft_ms"]["max"] < 2 * r["ttft_ms"]["min"]'

# The human report and the CSV are bench's.
sim --cost "$h100" --workers 1 --rate 5 --requests 10 --isl 128 --osl 16 --slo ttft_ms=1000 --csv "$tmp/run.csv" >"$tmp/report.txt"
grep -q '^== dyad bench: run' "$tmp/report.txt" && grep -q '^  TPOT' "$tmp/report.txt" && grep -q '^goodput' "$tmp/report.txt" && grep -q '^simulated ' "$tmp/report.txt" && ok || bad "text report: $(cat "$tmp/report.txt")"
head -1 "$tmp/run.csv" | grep -q "output_tok_per_s" && [ "$(wc -l <"$tmp/run.csv")" -eq 2 ] && ok || bad "csv: $(cat "$tmp/run.csv")"

# A sweep: one simulation per value, each its own bench JSON object (with its Pareto mark),
# the CSV with one row per point, and the plot.
sim --cost "$h100" --workers 1 --sweep concurrency=1,4 --requests 12 --isl 512 --osl 32 --json --csv "$tmp/sweep.csv" --plot "$tmp/sweep.svg" >"$tmp/sweep.json"
python3 -c "
import json, sys
pts = [json.loads(l) for l in open(sys.argv[1])]
c1 = json.load(open(sys.argv[2]))
ok = [p['label'] for p in pts] == ['concurrency=1', 'concurrency=4'] and all('pareto_dominated' in p for p in pts)
ok = ok and pts[0]['duration_s'] > 0 and pts[1]['duration_s'] < pts[0]['duration_s']
sys.exit(0 if ok else 1)" "$tmp/sweep.json" "$tmp/c1.json" && ok || bad "sweep: $(head -c 300 "$tmp/sweep.json")"
[ "$(wc -l <"$tmp/sweep.csv")" -eq 3 ] && grep -q '<svg' "$tmp/sweep.svg" && ok || bad "sweep csv/plot"

# A measured model of this machine, from `dyad sim fit --quick`.
"$dyad" sim fit -o "$tmp/m.json" --quick --reps 1 --threads 1 2>"$tmp/err" && ok || bad "fit ($(cat "$tmp/err"))"
sim --cost "$tmp/m.json" --workers 1 --rate 4 --requests 16 --isl 64 --osl 16 --vocab-size 512 --json >"$tmp/meas.json"
check "measured" "$tmp/meas.json" 'r["completed"] == 16 and r["output_tokens"] == 16 * 16 and r["ttft_ms"]["min"] > 0 and r["tpot_ms"]["p50"] > 0 and r["cores"] == 1'
sim --cost "$tmp/m.json" --prefill-workers 1 --decode-workers 1 --rate 4 --requests 16 --isl 64 --osl 16 --vocab-size 512 --json >"$tmp/meas-dis.json"
check "measured, disaggregated" "$tmp/meas-dis.json" 'r["completed"] == 16 and r["output_tokens"] == 256 and r["kv_transfer"]["remote_prefills"] > 0'

# Prefix groups reach the simulated prefix cache: a shared prefix makes TTFT shorter.
sim --cost "$h100" --workers 1 --rate 20 --requests 40 --isl 2048 --osl 8 --json >"$tmp/nopfx.json"
sim --cost "$h100" --workers 1 --rate 20 --requests 40 --isl 2048 --osl 8 --prefix-groups 1 --prefix-len 1792 --json >"$tmp/pfx.json"
python3 -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); sys.exit(0 if b['ttft_ms']['p50'] < a['ttft_ms']['p50'] else 1)" "$tmp/nopfx.json" "$tmp/pfx.json" && ok || bad "prefix groups"

# A Mooncake trace (written here: 512-token blocks, scaled down 8x), replayed at its times.
python3 - "$tmp/trace.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(24):
        # every row shares block 1 (a system prompt); each third row also its neighbour's
        ids = [1, 100 + i // 3, 1000 + i]
        f.write(json.dumps({"timestamp": 250 * i, "input_length": 1400, "output_length": 40 + i,
                            "hash_ids": ids}) + "\n")
PY
sim --cost "$h100" --workers 2 --trace "$tmp/trace.jsonl" --length-scale 0.125 --json >"$tmp/trace.json"
check "trace" "$tmp/trace.json" 'r["completed"] == 24 and r["load"]["mode"] == "trace replay" and r["output_tokens"] == sum(int((40 + i) * 0.125 + 0.5) for i in range(24)) and r["duration_s"] > 23 * 0.25'
sim --cost "$h100" --workers 2 --trace "$tmp/trace.jsonl" --length-scale 0.125 --time-scale 0.5 --json >"$tmp/trace2.json"
check "trace time scale" "$tmp/trace2.json" 'r["completed"] == 24 and 23 * 0.125 < r["duration_s"] < 23 * 0.25'

# Bad input: the loader's message (file and field) and exit 1; usage errors exit 2.
expect_fail "missing cost file" 1 "$tmp/none.json" sim --cost "$tmp/none.json" --rate 1
echo '{"kind": "measured", "name": "x"}' >"$tmp/junk.json"
expect_fail "cost file without fields" 1 "$tmp/junk.json:" sim --cost "$tmp/junk.json" --rate 1
expect_fail "tp of a measured model" 1 "measured" sim --cost "$tmp/m.json" --tp 2 --rate 1
expect_fail "no cost" 2 "--cost: required" sim --rate 1
expect_fail "closed loop for a time" 2 "--duration" sim --cost "$h100" --concurrency 4 --duration 5
expect_fail "rate and a rate sweep" 2 "--rate cannot be used with" sim --cost "$h100" --rate 1 --sweep rate=1,2
expect_fail "bad sweep" 2 "--sweep" sim --cost "$h100" --sweep speed=1,2
expect_fail "unwritable plot" 1 "$tmp/no/p.svg" sim --cost "$h100" --rate 1 --requests 2 --plot "$tmp/no/p.svg"
expect_fail "bad concurrency" 2 "--concurrency" sim --cost "$h100" --concurrency 0
expect_fail "workers and pools" 2 "cannot be used with" sim --cost "$h100" --rate 1 --workers 2 --decode-workers 1
expect_fail "bad workers" 2 "--workers" sim --cost "$h100" --rate 1 --workers 0
expect_fail "bad rate" 2 "--rate" sim --cost "$h100" --rate -1
expect_fail "bad router" 2 "--router" sim --cost "$h100" --rate 1 --router best
expect_fail "bad slo" 2 "--slo" sim --cost "$h100" --rate 1 --slo ttft=3
expect_fail "bad block size" 2 "--block-size" sim --cost "$h100" --rate 1 --block-size 0
expect_fail "isl with a trace" 2 "--isl cannot be used with" sim --cost "$h100" --trace "$tmp/trace.jsonl" --isl 5
expect_fail "prefix len alone" 2 "--prefix-len needs" sim --cost "$h100" --rate 1 --prefix-len 5
expect_fail "missing trace" 1 "$tmp/none.jsonl" sim --cost "$h100" --trace "$tmp/none.jsonl"
expect_fail "unknown option" 2 "--frobnicate" sim --cost "$h100" --rate 1 --frobnicate
expect_fail "kv blocks too few" 2 "--kv-blocks" sim --cost "$h100" --rate 1 --kv-blocks 1
"$dyad" sim run --help >"$tmp/help.txt" && grep -q -- '--prefill-busy-tokens' "$tmp/help.txt" && ok || bad "--help"

finish
