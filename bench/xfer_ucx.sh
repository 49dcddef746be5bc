#!/usr/bin/env bash
# bench/xfer_ucx.sh [DYAD] [RUNS] — KV transfer over UCX against dyad's TCP path on loopback:
# RUNS (default 5) runs of `dyad bench xfer` (each alternates the backends and keeps the
# fastest of its reps), then the median over the runs of each backend's GB/s and one-block
# time. UCX's transports come from UCX_TLS (default here tcp,sm).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env_header.sh
dyad=${1:-build/dyad}
runs=${2:-5}
export UCX_TLS=${UCX_TLS:-tcp,sm}
dy_env_header "UCX_TLS=$UCX_TLS, $runs runs, shape 110m f32, 256 MiB, 5 reps each"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for _ in $(seq "$runs"); do "$dyad" bench xfer --shape 110m --mib 256 --reps 5 | tee -a "$log"; done
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
echo "# medians over $runs runs"
for b in "shared memory" "TCP loopback" "UCX loopback"; do
  echo "$b: $(grep "^$b" "$log" | sed 's/.*: *\([0-9.]*\) GB\/s/\1/' | median) GB/s"
done
for b in shm tcp ucx; do
  echo "one block, $b: $(grep "^one block, $b " "$log" | awk '{print $4}' | median) us"
done
