#!/usr/bin/env bash
# bench/planner_startup.sh [DYAD] — issue 13's planner replay: how the SLA planner's outcome in
# `dyad sim run --planner sla` depends on a worker's start-up time (Dynamo's replay found a
# cliff at 100-120 s). One drifting workload at GPU scale (the H100 Llama-3.1-8B FP8 roofline
# preset, a 16-GPU budget of TP-1 workers, 4 at the start) is replayed with --startup-s in
# STARTUPS; each row gives goodput per worker-second (requests that met the SLO over the
# worker-seconds the slots spent out of the park: starting, active or draining) and SLO
# attainment, with the decisions and moves the planner made. Two static deployments without the
# planner (the initial 4 workers, and all 16) frame it, and the reactive mode at a few start-up
# times (REACTIVE_STARTUPS) compares. docs/bench/planner_startup.log is its
# output; the simulation reads no clock, so the figures do not depend on the machine's load.
#
#   bash bench/planner_startup.sh > docs/bench/planner_startup.log
#
# The workload (made here, deterministic: seed 7): four 300 s phases of Poisson arrivals, each
# request's lengths uniform within +-25 % of its phase's means, no prefix shared —
#   conversation 8 req/s, ISL 2048, OSL 256; long prompts 16 req/s, 6000 / 64;
#   long answers 12 req/s, 512 / 1024; long prompts again 24 req/s, 4096 / 128.
# A benchmark: it asserts nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dyad=${1:-$root/build/dyad}
STARTUPS=${STARTUPS:-"0 10 30 60 90 120 180"}
REACTIVE_STARTUPS=${REACTIVE_STARTUPS:-"0 60 120"}
INTERVAL=${INTERVAL:-30}
PREDICTOR=${PREDICTOR:-last}
SLO=${SLO:-ttft_ms=1000,tpot_ms=25}
BUDGET=${BUDGET:-16}
INITIAL=${INITIAL:-4}
cost=$root/sim/costs/h100-llama3.1-8b-fp8.json
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
trace=$work/drift.jsonl
python3 - "$trace" <<'PY'
import json, random, sys
phases = [(16, 2048, 256), (48, 6000, 64), (24, 512, 1024), (64, 4096, 128)]  # rate, isl, osl
phase_s, rng, t, nid = 300.0, random.Random(7), 0.0, 0
with open(sys.argv[1], "w") as f:
    for k, (rate, isl, osl) in enumerate(phases):
        t = max(t, k * phase_s)
        while True:
            t += rng.expovariate(rate)
            if t >= (k + 1) * phase_s:
                break
            i = max(1, int(rng.uniform(0.75, 1.25) * isl))
            o = max(1, int(rng.uniform(0.75, 1.25) * osl))
            nb = (i + 511) // 512  # Mooncake's 512-token hash blocks, none shared
            f.write(json.dumps({"timestamp": int(t * 1000), "input_length": i,
                                "output_length": o, "hash_ids": list(range(nid, nid + nb))}) + "\n")
            nid += nb
PY
source "$root/bench/env_header.sh"
dy_env_header "dyad sim run --planner sla against --startup-s: $dyad ($(sha256sum "$dyad" | cut -c1-12))"
echo "# workload: 4 phases x 300 s ($(wc -l <"$trace") requests; see the script), cost model sim/costs/h100-llama3.1-8b-fp8.json (TP 1), --slo $SLO"
echo "# planner: --budget-workers $BUDGET, $INITIAL aggregated workers at the start, --planner-interval $INTERVAL, --planner-predictor $PREDICTOR, --switch-s 0, min dwell 3"
echo
common=(--cost "$cost" --trace "$trace" --slo "$SLO" --concurrency 100000 --json)
printf '| %-25s | %9s | %9s | %8s | %10s | %12s | %9s | %9s | %5s | %5s |\n' run requests met failed worker_s good/worker_s attained TTFT_p90 decns moves
echo "|---|---|---|---|---|---|---|---|---|---|"
row() { # label, then dyad sim run's options
  local label=$1
  shift
  "$dyad" sim run "${common[@]}" "$@" | python3 -c '
import json, sys
label, r = sys.argv[1], json.load(sys.stdin)
p = r.get("planner")
done, failed, good = r["completed"], r["failed"], r["goodput"]["met"]
if p:
    ws, gpw, att = p["worker_s"]["total"], p["goodput_per_worker_s"], p["slo_attainment"]
    decns = sum(d["action"] != "hold" for d in p["decisions"])
    moves = sum(m["kind"] == "move" for m in p["moves"])
else:  # every worker (one GPU each) all the run
    ws = r["cores"] * r["duration_s"]
    gpw, att, decns, moves = good / ws, good / (done + failed), "-", "-"
print("| %-25s | %9d | %9d | %8d | %10.0f | %12.4f | %8.1f%% | %9.0f | %5s | %5s |" % (
    label, done + failed, good, failed, ws, gpw, 100 * att, r["ttft_ms"]["p90"], decns, moves))
' "$label"
}
row "static $INITIAL workers" --workers "$INITIAL"
row "static $BUDGET workers" --workers "$BUDGET"
for s in $STARTUPS; do
  row "planner, start-up ${s} s" --workers "$INITIAL" --planner sla --budget-workers "$BUDGET" \
    --planner-interval "$INTERVAL" --planner-predictor "$PREDICTOR" --startup-s "$s"
done
for s in $REACTIVE_STARTUPS; do
  row "reactive, start-up ${s} s" --workers "$INITIAL" --planner reactive --budget-workers "$BUDGET" \
    --planner-interval "$INTERVAL" --startup-s "$s"
done
echo
echo "# decisions of the SLA planner at start-up 0 s and 120 s (t, action, target, active agg/prefill/decode):"
for s in 0 120; do
  "$dyad" sim run "${common[@]}" --workers "$INITIAL" --planner sla --budget-workers "$BUDGET" \
    --planner-interval "$INTERVAL" --planner-predictor "$PREDICTOR" --startup-s "$s" | python3 -c '
import json, sys
p = json.load(sys.stdin)["planner"]
print("# start-up %s s:" % sys.argv[1], "; ".join("%.0f %s %s %d/%d/%d" % (
    d["t"], d["action"], ("%dP+%dD" % (d["prefill"], d["decode"])) if d["split"] else "%d agg" % d["decode"],
    d["active"]["agg"], d["active"]["prefill"], d["active"]["decode"]) for d in p["decisions"] if d["action"] != "hold"))
' "$s"
done
