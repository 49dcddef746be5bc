#!/usr/bin/env bash
# bench/plan_measured.sh [DYAD] [COST] — issue 12's item 5 on this machine: `dyad plan` (the
# balance criterion and the simulator's search) for the three cells of
# docs/disaggregation-results.md's "Balance" table (110m q8_0, 1 thread a worker), on a measured
# cost model of this machine (COST, default docs/bench/sim_cost_110m_1t.json, written by
# `dyad sim fit --model models/generated/110m-q8_0-ctx4k.gguf --threads 1 --kv-mem 1536`), at
# p90 TTFT <= 10 s and ITL <= 100 ms and a rate per cell that needs a few workers. The figures
# are the simulator's on that model, not real runs.
#   bash bench/plan_measured.sh > docs/bench/plan_measured.log
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dyad=${1:-$root/build/dyad}
cost=${2:-$root/docs/bench/sim_cost_110m_1t.json}
source "$root/bench/env_header.sh"
dy_env_header "dyad plan on a measured cost model ($(basename "$cost")), the Balance table's cells"
echo "# dyad: $dyad; cost model source: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["engine"]["source"])' "$cost")"
for cell in "512 16 0.5" "512 128 0.3" "2048 128 0.08"; do
  set -- $cell
  echo
  echo "## ISL $1, OSL $2, $3 req/s"
  echo '```'
  "$dyad" plan --hardware "$cost" --slo ttft_ms=10000,itl_ms=100 --rate "$3" --isl "$1" \
    --osl "$2" --requests 200 --seed 1 --no-frontier --kv-blocks 1365 || true
  echo '```'
done
