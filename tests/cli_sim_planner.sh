#!/usr/bin/env bash
# cli_sim_planner.sh DYAD SOURCE_DIR — `dyad sim run --planner sla|reactive` end to end on a drifting
# trace made here (60 s of short prompts with long answers at 10 req/s, then 60 s of long
# prompts with short answers at 30 req/s) on the H100 roofline preset: every request completes
# across the planner's moves, it grows for the second phase, its report (text, --json's
# "planner" member, the --planner-log CSV) has a decision per interval, the worker-seconds per
# role add up and goodput per worker-second is the met requests over them; the same inputs give
# the same bytes; a start-up time delays when started workers are ready; a run without
# --planner has no planner report; and the planner's flags and their errors.
set -euo pipefail
dyad=$1 src=$2
source "$(dirname "$0")/shell_helpers.sh"
check() { # name, JSON file (one object), python expression over it as `r` (p: its planner)
  if python3 -c "import json,sys; r=json.load(open(sys.argv[1])); p=r.get('planner'); sys.exit(0 if ($3) else 1)" "$2"; then
    ok; else bad "$1: $(head -c 600 "$2")"; fi
}
h100=$src/sim/costs/h100-llama3.1-8b-fp8.json
python3 - "$tmp/drift.jsonl" <<'PY'
import json, random, sys
rng, t, nid = random.Random(3), 0.0, 0
with open(sys.argv[1], "w") as f:
    for k, (rate, isl, osl) in enumerate([(10, 256, 512), (30, 6000, 32)]):
        t = max(t, 60.0 * k)
        while True:
            t += rng.expovariate(rate)
            if t >= 60.0 * (k + 1):
                break
            nb = (isl + 511) // 512
            f.write(json.dumps({"timestamp": int(t * 1000), "input_length": isl,
                                "output_length": osl, "hash_ids": list(range(nid, nid + nb))}) + "\n")
            nid += nb
PY
rows=$(wc -l <"$tmp/drift.jsonl")
sim() { "$dyad" sim run --cost "$h100" --trace "$tmp/drift.jsonl" --concurrency 100000 "$@"; }
plan=(--workers 1 --slo ttft_ms=1000,tpot_ms=25 --planner sla --budget-workers 8 --planner-interval 10 --planner-predictor last)

sim "${plan[@]}" --startup-s 0 --json --planner-log "$tmp/log.csv" >"$tmp/p0.json"
check "every request completes" "$tmp/p0.json" "r['completed'] == $rows and r['failed'] == 0"
check "a decision per interval" "$tmp/p0.json" "len(p['decisions']) == int(r['duration_s'] // 10) and [d['interval'] for d in p['decisions']] == list(range(len(p['decisions'])))"
check "grows for the second phase" "$tmp/p0.json" "any(d['action'] == 'grow' and d['t'] > 60 for d in p['decisions']) and any(m['kind'] == 'move' and m['action'] == 'start' for m in p['moves']) and any(m['kind'] == 'ready' for m in p['moves'])"
check "the phases observed" "$tmp/p0.json" "abs(p['decisions'][2]['observed']['isl'] - 256) < 1e-9 and abs(p['decisions'][8]['observed']['isl'] - 6000) < 1e-9 and p['decisions'][8]['observed']['osl'] == 32"
check "worker-seconds add up" "$tmp/p0.json" "abs(p['worker_s']['agg'] + p['worker_s']['prefill'] + p['worker_s']['decode'] - p['worker_s']['total']) < 1e-6 and r['duration_s'] <= p['worker_s']['total'] <= 8 * r['duration_s']"
check "goodput per worker-second" "$tmp/p0.json" "abs(p['goodput_per_worker_s'] * p['worker_s']['total'] - r['goodput']['met']) < 1e-6 and abs(p['slo_attainment'] - r['goodput']['met'] / $rows) < 1e-9"
check "the planner's settings" "$tmp/p0.json" "p['mode'] == 'sla' and p['budget_workers'] == 8 and p['initial_workers'] == 1 and p['predictor'] == 'last' and p['interval_s'] == 10 and 'planner sla over 8 slots' in r['url'] and r['cores'] == 8"
python3 - "$tmp/p0.json" "$tmp/log.csv" <<'PY' && ok || bad "--planner-log: one row per decision"
import csv, json, sys
p = json.load(open(sys.argv[1]))["planner"]
rows = list(csv.DictReader(open(sys.argv[2])))
assert len(rows) == len(p["decisions"]) and rows[0]["t_s"] and "reason" in rows[0]
assert [r["action"] for r in rows] == [d["action"] for d in p["decisions"]]
PY
sim "${plan[@]}" --startup-s 0 --json --planner-log "$tmp/log2.csv" >"$tmp/p0b.json"
cmp -s "$tmp/p0.json" "$tmp/p0b.json" && cmp -s "$tmp/log.csv" "$tmp/log2.csv" && ok || bad "same inputs, different bytes"

# A start-up time: every started worker is ready exactly that long after its start.
sim "${plan[@]}" --startup-s 25 --json >"$tmp/p25.json"
python3 - "$tmp/p25.json" <<'PY' && ok || bad "start-up time"
import json, sys
m = json.load(open(sys.argv[1]))["planner"]["moves"]
starts = {}
n = 0
for x in m:
    if x["kind"] == "move" and x["action"] == "start":
        starts[x["slot"]] = x["t"]
    elif x["kind"] == "ready" and x["slot"] in starts:
        assert abs(x["t"] - starts.pop(x["slot"]) - 25) < 1e-9, x
        n += 1
assert n > 0
PY

# The reactive mode: no forecast, one worker at a time where a signal fired (it grows too slowly
# for the second phase: requests over the queue are refused, none is lost after admission).
sim --workers 1 --slo ttft_ms=1000,tpot_ms=25 --planner reactive --budget-workers 8 --planner-interval 10 --json >"$tmp/r.json"
check "reactive" "$tmp/r.json" "r['completed'] + r['failed'] == $rows and all(e['message'] == \"the server's queue is full\" for e in r['errors']) and p['mode'] == 'reactive' and p['predictor'] == 'no forecast' and all(d['predicted']['rate'] == 0 for d in p['decisions']) and any(d['action'] == 'grow' and d['reason'].startswith('reactive') for d in p['decisions']) and all(b['units'] - a['units'] in (-1, 0, 1, 2) for a, b in zip(p['decisions'], p['decisions'][1:]))"
check "the observation's signals" "$tmp/r.json" "all(d['observed_ttft_p90_ms'] >= 0 and d['observed_itl_p90_ms'] >= 0 and d['waiting'] >= 0 and 0 <= d['kv_use'] <= 1 for d in p['decisions']) and any(d['observed_ttft_p90_ms'] >= d['observed_ttft_ms'] > 0 for d in p['decisions'])"

# The readable summary.
sim "${plan[@]}" >"$tmp/p0.txt"
grep -q "^planner       sla (last, min dwell 3), every 10 s, 8 slots" "$tmp/p0.txt" && grep -q "^worker-s " "$tmp/p0.txt" \
  && grep -q "requests per worker-second, SLO attainment" "$tmp/p0.txt" && grep -q "^moves " "$tmp/p0.txt" && ok || bad "text summary: $(tail -8 "$tmp/p0.txt")"
# Without --planner: bench's report alone.
sim --workers 2 --slo ttft_ms=1000,tpot_ms=25 --json >"$tmp/off.json"
check "no planner, no report" "$tmp/off.json" "p is None and r['cores'] == 2"

# The flags and their errors.
base=(--workers 1 --rate 5 --requests 10)
expect_fail "planner flag without --planner" 2 "--startup-s: only with --planner sla" "$dyad" sim run --cost "$h100" "${base[@]}" --startup-s 10
expect_fail "planner-log without --planner" 2 "--planner-log: only with --planner sla" "$dyad" sim run --cost "$h100" "${base[@]}" --planner-log x.csv
expect_fail "no objectives" 2 "give both" "$dyad" sim run --cost "$h100" "${base[@]}" --planner sla
expect_fail "one objective" 2 "give both" "$dyad" sim run --cost "$h100" "${base[@]}" --planner sla --slo ttft_ms=100
expect_fail "a sweep" 2 "--sweep: not with --planner" "$dyad" sim run --cost "$h100" --workers 1 --requests 10 --planner sla --slo ttft_ms=100,tpot_ms=10 --sweep concurrency=1,2
expect_fail "budget below the deployment" 2 "--budget-workers: 2 is below the deployment's 3 workers" "$dyad" sim run --cost "$h100" --rate 5 --requests 10 --workers 3 --planner sla --slo ttft_ms=100,tpot_ms=10 --budget-workers 2
expect_fail "budget below a split" 2 "--budget-workers: 1 is below the deployment's 2 workers" "$dyad" sim run --cost "$h100" --rate 5 --requests 10 --prefill-workers 1 --decode-workers 1 --planner sla --slo ttft_ms=100,tpot_ms=10 --budget-workers 1
expect_fail "interval 0" 2 "--planner-interval" "$dyad" sim run --cost "$h100" "${base[@]}" --planner sla --slo ttft_ms=100,tpot_ms=10 --planner-interval 0
expect_fail "negative start-up" 2 "--startup-s" "$dyad" sim run --cost "$h100" "${base[@]}" --planner sla --slo ttft_ms=100,tpot_ms=10 --startup-s -1
expect_fail "negative switch" 2 "--switch-s" "$dyad" sim run --cost "$h100" "${base[@]}" --planner sla --slo ttft_ms=100,tpot_ms=10 --switch-s -1
expect_fail "bad predictor" 2 "--planner-predictor: 'holt:2': holt takes :ALPHA,BETA" "$dyad" sim run --cost "$h100" "${base[@]}" --planner sla --slo ttft_ms=100,tpot_ms=10 --planner-predictor holt:2
expect_fail "unknown predictor" 2 "'arima' is not last, mean" "$dyad" sim run --cost "$h100" "${base[@]}" --planner sla --slo ttft_ms=100,tpot_ms=10 --planner-predictor arima
expect_fail "bad predictor setting" 2 "predict.alpha" "$dyad" sim run --cost "$h100" "${base[@]}" --planner sla --slo ttft_ms=100,tpot_ms=10 --planner-predictor holt:2,0.1
expect_fail "a predictor for the reactive mode" 2 "--planner-predictor: the reactive mode forecasts nothing" "$dyad" sim run --cost "$h100" "${base[@]}" --planner reactive --slo ttft_ms=100,tpot_ms=10 --planner-predictor last
expect_fail "an unknown mode" 2 "'auto' is not off, sla or reactive" "$dyad" sim run --cost "$h100" "${base[@]}" --planner auto --slo ttft_ms=100,tpot_ms=10
expect_fail "dwell 0" 2 "--planner-min-dwell" "$dyad" sim run --cost "$h100" "${base[@]}" --planner sla --slo ttft_ms=100,tpot_ms=10 --planner-min-dwell 0
expect_fail "log not writable" 1 "--planner-log: cannot write $tmp/no/such.csv" "$dyad" sim run --cost "$h100" "${base[@]}" --planner sla --slo ttft_ms=100,tpot_ms=10 --planner-log "$tmp/no/such.csv"
"$dyad" sim run --help >"$tmp/help.txt" && grep -q -- '--budget-workers' "$tmp/help.txt" && grep -q -- '--planner-predictor' "$tmp/help.txt" && ok || bad "--help"

finish
