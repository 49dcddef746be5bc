#!/usr/bin/env bash
# bench/xfer_veth.sh [DYAD] [RUNS] — KV transfer between two network-namespace hosts joined by
# a veth pair (as tests/cli_netns.sh and the cluster's netns test make them): `dyad bench xfer
# --listen` in one namespace, `--connect` from the other, over TCP and over UCX (UCX_TLS tcp
# unless set: no shared memory across hosts), RUNS (default 3) runs each, alternated, 256 MiB
# of 110m KV blocks a run; prints each run's GB/s and the medians. Needs root and iproute2.
# A benchmark: it prints figures and asserts nothing.
set -euo pipefail
dyad=${1:-build/dyad}; runs=${2:-3}
cd "$(dirname "$0")/.."
bash bench/env_header.sh "bench/xfer_veth.sh: TCP against UCX across a veth pair, $runs runs"
tag=$$
a=dyxA$tag b=dyxB$tag
net=10.$(( (tag >> 8) % 200 + 20 )).$(( tag % 250 ))  # a /24 of our own namespaces only
cleanup() { ip netns del "$a" 2>/dev/null || true; ip netns del "$b" 2>/dev/null || true; }
trap cleanup EXIT
ip netns add "$a"; ip netns add "$b"
ip link add "xa$tag" type veth peer name "xb$tag"
ip link set "xa$tag" netns "$a"; ip link set "xb$tag" netns "$b"
ip -n "$a" addr add "$net.1/24" dev "xa$tag"; ip -n "$b" addr add "$net.2/24" dev "xb$tag"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "xa$tag" up; ip -n "$b" link set "xb$tag" up
export UCX_TLS=${UCX_TLS:-tcp}
one() { # transfer port → GB/s
  local kind=$1 port=$2 log
  log=$(mktemp)
  ip netns exec "$b" "$dyad" bench xfer --listen "$net.2:$port" --kv-transfer "$kind" >"$log" 2>&1 &
  local rx=$!
  for _ in $(seq 100); do ip netns exec "$b" ss -ltn | grep -q ":$port " && break; sleep 0.05; done
  [ "$kind" = ucx ] && sleep 0.3  # the UCX listener is up a moment after its socket
  ip netns exec "$a" "$dyad" bench xfer --connect "$net.2:$port" --kv-transfer "$kind" 2>&1 |
    sed -n 's/.* \([0-9.]*\) GB\/s.*/\1/p' | tail -1
  wait "$rx" || true
  rm -f "$log"
}
declare -A seen
for r in $(seq "$runs"); do
  order="tcp ucx"; [ $((r % 2)) -eq 0 ] && order="ucx tcp"
  for k in $order; do
    g=$(one "$k" $((20000 + r * 10 + ${#k})))
    echo "run $r $k: $g GB/s"
    seen[$k]="${seen[$k]:-} $g"
  done
done
for k in tcp ucx; do
  echo "median $k: $(echo ${seen[$k]} | tr ' ' '\n' | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}') GB/s"
done
