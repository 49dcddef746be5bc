#!/usr/bin/env bash
# bench/xfer.sh [DYAD] — KV transfer rates: memcpy vs shared memory vs TCP (and UCX, where the
# build has it) on loopback for each model shape, then TCP and UCX between two network
# namespaces joined by a veth pair (needs root). UCX_TLS defaults to tcp,sm.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env_header.sh
dyad=${1:-build/dyad}
export UCX_TLS=${UCX_TLS:-tcp,sm}
dy_env_header "UCX_TLS=$UCX_TLS"
for s in 15m 110m 1b; do "$dyad" bench xfer --shape "$s" --mib 256 --reps 5; done
[ "$(id -u)" -eq 0 ] || { echo "(not root: no namespace measurement)"; exit 0; }
a=dyxA$$ b=dyxB$$ net=10.$(( ($$ >> 8) % 200 + 20 )).$(( $$ % 250 ))
trap 'ip netns del $a 2>/dev/null; ip netns del $b 2>/dev/null' EXIT
ip netns add "$a"; ip netns add "$b"
ip link add "xa$$" type veth peer name "xb$$"
ip link set "xa$$" netns "$a"; ip link set "xb$$" netns "$b"
ip -n "$a" addr add "$net.1/24" dev "xa$$"; ip -n "$b" addr add "$net.2/24" dev "xb$$"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "xa$$" up; ip -n "$b" link set "xb$$" up
transfers=tcp
"$dyad" serve --kv-transfer ucx --model /nonexistent.gguf 2>&1 | grep -q "built without UCX" ||
  transfers="tcp ucx"
for s in 110m; do
  for t in $transfers; do
    ip netns exec "$b" "$dyad" bench xfer --shape "$s" --mib 256 --kv-transfer "$t" \
      --listen "$net.2:7411" &
    sleep 0.5
    ip netns exec "$a" "$dyad" bench xfer --shape "$s" --mib 256 --kv-transfer "$t" \
      --connect "$net.2:7411" | sed 's/^/veth: /'
    wait
  done
done
