#!/usr/bin/env bash
# bench/sim_speed.sh [DYAD] — the simulator's speed (issue 12's "Speed"): `dyad sim bench` on
# the whole Mooncake conversation trace (bench/data/mooncake_conversation_trace.jsonl) on the
# H100 Llama-3.1-8B FP8 roofline preset, one table row per run: simulated requests per
# CPU-second, simulated seconds per CPU-second, engine steps, peak RSS and the most requests
# the simulator held at once. docs/bench/sim_speed.log is its output.
#
#   bash bench/sim_speed.sh > docs/bench/sim_speed.log
#
# Sections: workers in {1, 4, 16, 64} at the default replay rate (RATE, about Dynamo's 770
# requests/s, which overloads every deployment here: most requests are refused with the queue
# full, which is cheap) and at a rate 16 workers sustain (SUSTAINED: every request completes);
# loops in {1, 4} at both rates (memory flat in trace length); caps on requests in flight
# (--concurrency) at 16 workers; the trace at its own rate (OWN: the hour it recorded); the KV
# block size at the sustained rate (the per-block work of the KV cache and the router's index
# is what bounds the speed). Each run is one process, so its peak RSS is its own. A
# benchmark: it asserts nothing. Run it on an idle machine (the header gives the load before
# it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dyad=${1:-$root/build/dyad}
RATE=${RATE:-770}
SUSTAINED=${SUSTAINED:-30}
OWN=${OWN:-3.4}
WORKERS=${WORKERS:-"1 4 16 64"}
LOOPS=${LOOPS:-"1 4"}
CAPS=${CAPS:-"16 64 256 1024"}
BLOCKS=${BLOCKS:-"16 64 256"}
source "$root/bench/env_header.sh"
dy_env_header "dyad sim bench (the simulator's speed): $dyad ($(sha256sum "$dyad" | cut -c1-12))"
echo "# trace: bench/data/mooncake_conversation_trace.jsonl (12031 rows), cost model sim/costs/h100-llama3.1-8b-fp8.json, defaults of dyad sim bench otherwise (--max-queue 256, --max-batch-tokens 512, --max-running 64, --block-size 16)"
echo "# one process per row; cpu: CLOCK_PROCESS_CPUTIME_ID over the run (prompts' making included, its share in 'make'); rss: getrusage ru_maxrss"
echo
printf '| %-38s | %8s | %8s | %8s | %9s | %7s | %7s | %6s | %10s | %10s | %10s | %8s | %6s |\n' \
  run requests done refused steps sim_s cpu_s make_s req/cpu_s "(no make)" sim_s/cpu_s rss_MiB held
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
row() { # label, then dyad sim bench's options
  local label=$1
  shift
  "$dyad" sim bench --json "$@" | python3 -c '
import json, sys
label = sys.argv[1]
r = json.loads(sys.stdin.read())
print("| %-38s | %8d | %8d | %8d | %9d | %7.1f | %7.2f | %6.2f | %10.0f | %10.0f | %10.1f | %8.1f | %6d |" % (
    label, r["requests"], r["completed"], r["refused"], r["steps"], r["simulated_s"], r["cpu_s"],
    r["make_cpu_s"], r["requests_per_cpu_s"], r["requests_per_cpu_s_without_making"],
    r["simulated_s_per_cpu_s"], r["peak_rss_kib"] / 1024.0, r["peak_requests_held"]))' "$label"
}
for rate in $RATE $SUSTAINED; do
  for w in $WORKERS; do
    row "workers $w, $rate req/s" --workers "$w" --rate "$rate"
  done
done
for rate in $RATE $SUSTAINED; do
  for k in $LOOPS; do
    row "workers 16, $rate req/s, loops $k" --workers 16 --rate "$rate" --loops "$k"
  done
done
for c in $CAPS; do
  row "workers 16, $RATE req/s, in flight <= $c" --workers 16 --rate "$RATE" --concurrency "$c"
done
# the trace at its own times (12031 requests over 3537 s: about 3.4 req/s), the hour it recorded
row "workers 16, the trace's own rate" --workers 16 --rate "$OWN"
for bs in $BLOCKS; do
  row "workers 16, $SUSTAINED req/s, block $bs" --workers 16 --rate "$SUSTAINED" --block-size "$bs"
done
echo
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
