#!/usr/bin/env bash
# cli_netns.sh DYAD SOURCE_DIR — KV transfer across hosts. Two network namespaces joined by a
# veth pair stand in for two machines: the prefill worker runs in one, the decode worker in
# the other, KV moves over TCP between their addresses, and the output must be the one
# aggregated serving gives. The same over UCX (--kv-transfer ucx; UCX_TLS=tcp,sm unless set),
# where the build has it. Needs root (ip netns); exits 77 (skipped) without it. The
# namespaces and links are removed on exit.
set -euo pipefail
dyad=$1; src=$2
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null; then
  echo "SKIP: needs root and iproute2"; exit 77
fi
tag=$$
a=dyadA$tag b=dyadB$tag
# A /24 of our own inside our own namespaces: the project's test hosts, nothing else.
net=10.$(( (tag >> 8) % 200 + 20 )).$(( tag % 250 ))
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  ip netns del "$a" 2>/dev/null || true
  ip netns del "$b" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
if ! ip netns add "$a" 2>/dev/null; then echo "SKIP: cannot create network namespaces"; exit 77; fi
ip netns add "$b"
ip link add "va$tag" type veth peer name "vb$tag"
ip link set "va$tag" netns "$a"
ip link set "vb$tag" netns "$b"
ip -n "$a" addr add "$net.1/24" dev "va$tag"
ip -n "$b" addr add "$net.2/24" dev "vb$tag"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "va$tag" up
ip -n "$b" link set "vb$tag" up

start() { # log file, args... (not in a subshell: the EXIT trap must stay with this shell)
  local log=$1; shift
  "$dyad" serve --port 0 "$@" 2>"$log" &
  pids+=($!)
}
address() { # log file
  for _ in $(seq 300); do grep -q "http://" "$1" && break; sleep 0.1; done
  sed -n 's/.*http:\/\/\([0-9.]*:[0-9]*\).*/\1/p' "$1" | head -1
}
start "$tmp/d.log" --kv-transfer tcp --kv-host "$net.2" \
  --prefill-launcher "ip netns exec $a" --decode-launcher "ip netns exec $b"
start "$tmp/a.log" --workers 1
# Built with UCX? The transfer is checked before the model loads (a build without it says so).
ucx=0
if ! "$dyad" serve --kv-transfer ucx --model /nonexistent.gguf 2>&1 | grep -q "built without UCX"; then
  ucx=1
  export UCX_TLS=${UCX_TLS:-tcp,sm}
  start "$tmp/u.log" --kv-transfer ucx --kv-host "$net.2" \
    --prefill-launcher "ip netns exec $a" --decode-launcher "ip netns exec $b"
fi
disagg=$(address "$tmp/d.log")
agg=$(address "$tmp/a.log")
[ -n "$disagg" ] && [ -n "$agg" ] || { echo "FAIL: servers did not start"; cat "$tmp"/*.log; exit 1; }

prompt=$(printf 'Once upon a time, there was a little girl named Lily. She loved to play outside. %.0s' 1 2 3 4 5 6)
ask() { # host:port
  python3 - "$1" "$prompt" <<'PY'
import json, sys, urllib.request
body = {"model": "stories260K", "prompt": sys.argv[2], "max_tokens": 48, "temperature": 0.8, "seed": 3}
req = urllib.request.Request(f"http://{sys.argv[1]}/v1/completions", data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json"})
r = json.loads(urllib.request.urlopen(req, timeout=60).read())
print(json.dumps({"text": r["choices"][0]["text"], "dyad": r["dyad"]["choices"][0]}))
PY
}
want=$(ask "$agg")
passes=0; fails=0
check() { if eval "$2"; then passes=$((passes+1)); else echo "FAIL: $1"; fails=$((fails+1)); fi; }
# The prompt through the disaggregated server at $2 over transfer $1: prefilled on the other
# namespace's worker, its KV across the veth, the text that aggregated serving gives.
check_served() { # transfer host:port
  local got pw bytes same
  got=$(ask "$2")
  pw=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["dyad"]["prefill_worker"])' "$got")
  check "prefilled remotely over $1 (worker $pw)" '[ "$pw" = 0 ]'
  bytes=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["dyad"]["kv_transfer"]["bytes"])' "$got")
  check "KV bytes crossed the veth over $1 ($bytes)" '[ "$bytes" -gt 0 ]'
  same=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["text"] == json.loads(sys.argv[2])["text"])' "$got" "$want")
  check "output over $1 equals aggregated serving" '[ "$same" = True ]'
}
check_served TCP "$disagg"
# The decode worker's receiver really listens on the other namespace's address.
check "receiver bound in namespace B" 'ip netns exec "$b" ss -ltn | grep -q "$net.2:"'
if [ "$ucx" = 1 ]; then
  overucx=$(address "$tmp/u.log")
  [ -n "$overucx" ] || { echo "FAIL: the UCX server did not start"; cat "$tmp/u.log"; exit 1; }
  check_served UCX "$overucx"
else
  echo "(built without UCX: no UCX case)"
fi
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
