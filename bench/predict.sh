#!/usr/bin/env bash
# bench/predict.sh [DYAD] — issue 13's load predictors measured on the production traces:
# `dyad plan predict` (one-interval-ahead weighted absolute percentage error of the request
# rate, mean ISL and mean OSL) on the Mooncake conversation trace (bench/data) and, when the
# shared data is there, the Azure 2023 conversation trace, at planner intervals of 10 and 60 s.
# Deterministic (no clock): the same trace gives the same table.
#   bash bench/predict.sh > docs/bench/predict.log
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dyad=${1:-$root/build/dyad}
source "$root/bench/env_header.sh"
dy_env_header "dyad plan predict on the traces, intervals 10 and 60 s"
traces=("$root/bench/data/mooncake_conversation_trace.jsonl")
azure=$root/../shared/traces/azure2023_conv.csv
[ -f "$azure" ] && traces+=("$azure")
for trace in "${traces[@]}"; do
  for interval in 10 60; do
    echo
    "$dyad" plan predict --trace "$trace" --interval "$interval" | sed "s|$root/||; s|$(cd "$root/.." && pwd)/||"
  done
done
