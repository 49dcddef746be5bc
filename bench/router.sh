#!/usr/bin/env bash
# bench/router.sh [DYAD] — what the KV-aware router costs per request: one routing decision
# over a prefix index of 64 workers and 100k blocks (requests of 32, 128, 512 blocks), the
# decision with its accounting, and applying a batch of 64 KV events; then 256 workers.
# Target (issue 5): under 50 µs per decision.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env_header.sh
dyad=${1:-build/dyad}
dy_env_header
"$dyad" bench router --workers 64 --blocks 100000 --reps 20000
"$dyad" bench router --workers 256 --blocks 100000 --reps 20000
