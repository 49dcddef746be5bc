#!/usr/bin/env bash
# cli_cluster.sh DYAD SOURCE_DIR — `dyad cluster status` (and the node agents' `dyad cluster
# nodes|start|stop` and `dyad node`: their usage errors, an unreachable server, no agents, an
# unknown node or worker) as an operator runs it, against a
# nats-server with JetStream that this script starts on a free loopback port (a scratch store,
# stopped on exit): with no workers it says so and exits 0; --json is one JSON document; a bad
# URL exits 2 naming --cluster; a closed port, and a server that never answers, exit 1 within
# --timeout, naming the URL; a server without JetStream exits 1 saying so. Entries put into
# the registry and listed by status are tests/test_cluster_nats.c's (it writes them with the
# registry's own functions).
# A dyad built without NATS must refuse with exit 2 saying so. Without nats-server: exit 77
# (skipped), unless DYAD_REQUIRE_TOOLS is set (scripts/test.sh), which makes it a failure.
set -euo pipefail
dyad=$1 src=$2
source "$(dirname "$0")/shell_helpers.sh"
st() { "$dyad" cluster status "$@"; }

require() { # why
  if [ -n "${DYAD_REQUIRE_TOOLS:-}" ]; then
    echo "FAIL: $1 (DYAD_REQUIRE_TOOLS is set: run scripts/install-deps.sh)"; exit 1
  fi
  echo "SKIP: $1"; exit 77
}

# Usage errors need no server.
expect_fail "no --cluster" 2 "--cluster: required" st
expect_fail "bad URL" 2 "--cluster: 'foo': must be nats://HOST:PORT" st --cluster foo
expect_fail "port 0" 2 "the port must be a number from 1 to 65535" st --cluster nats://h:0
expect_fail "http URL" 2 "must be nats://HOST:PORT" st --cluster http://h:4222
expect_fail "a list with a bad URL" 2 "'h2:4222'" st --cluster nats://h:4222,h2:4222
expect_fail "bad timeout" 2 "--timeout" st --cluster nats://h:4222 --timeout 0
expect_fail "unknown tool" 2 "unknown tool (status, nodes, start, stop)" "$dyad" cluster stats
"$dyad" cluster status --help >"$tmp/out" && grep -q -- "--timeout" "$tmp/out" && ok ||
  bad "status --help"
# the node agents' commands (tests/serve_node_test.py drives them against a real agent)
expect_fail "nodes: no --cluster" 2 "--cluster: required" "$dyad" cluster nodes
expect_fail "start: no --node" 2 "--node: required" "$dyad" cluster start --cluster nats://h:1 \
  --role agg --threads 1
expect_fail "start: no --role" 2 "--role: required" "$dyad" cluster start --cluster nats://h:1 \
  --node a --threads 1
expect_fail "start: bad role" 2 "--role" "$dyad" cluster start --cluster nats://h:1 --node a \
  --role both --threads 1
expect_fail "start: no --threads" 2 "--threads: required" "$dyad" cluster start \
  --cluster nats://h:1 --node a --role agg
expect_fail "start: 0 threads" 2 "--threads" "$dyad" cluster start --cluster nats://h:1 \
  --node a --role agg --threads 0
expect_fail "start: --worker is stop's" 2 "--worker" "$dyad" cluster start --cluster nats://h:1 \
  --node a --role agg --threads 1 --worker w00000001
expect_fail "stop: no --worker" 2 "--worker: required" "$dyad" cluster stop --cluster nats://h:1
expect_fail "stop: bad key" 2 "'W0000000G' is not a worker's key" "$dyad" cluster stop \
  --cluster nats://h:1 --worker W0000000G
expect_fail "node: no --cores" 2 "--cores: required" "$dyad" node --cluster nats://h:1
expect_fail "node: 0 cores" 2 "--cores" "$dyad" node --cluster nats://h:1 --cores 0
expect_fail "node: bad URL" 2 "--cluster: 'h:1'" "$dyad" node --cluster h:1 --cores 1
expect_fail "node: empty host name" 2 "--host-name" "$dyad" node --cluster nats://h:1 --cores 1 \
  --host-name ""
"$dyad" node --help >"$tmp/out" && grep -q -- "--kv-host" "$tmp/out" && ok || bad "node --help"
"$dyad" cluster --help >"$tmp/out" && grep -q "nodes" "$tmp/out" && ok || bad "cluster --help"

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
closed=$(free_port)
set +e; st --cluster "nats://127.0.0.1:$closed" --timeout 0.2 >"$tmp/out" 2>"$tmp/err"; rc=$?; set -e
if [ $rc -eq 2 ] && grep -q "built without NATS" "$tmp/err"; then
  ok
  if [ -n "${DYAD_REQUIRE_TOOLS:-}" ]; then
    bad "dyad was built without NATS (DYAD_REQUIRE_TOOLS is set: install libnats-dev)"
  else
    echo "built without NATS: dyad cluster status refuses clearly"
  fi
  for cmd in "node --cluster nats://127.0.0.1:$closed --cores 1" \
             "cluster nodes --cluster nats://127.0.0.1:$closed" \
             "cluster stop --cluster nats://127.0.0.1:$closed --worker w00000001"; do
    # shellcheck disable=SC2086
    expect_fail "built without NATS: $cmd" 2 "built without NATS" "$dyad" $cmd
  done
  finish
  exit
fi
# Debian installs it in /usr/sbin, which a user's PATH often lacks.
nats_server=$(PATH="$PATH:/usr/sbin:/usr/local/sbin" command -v nats-server) ||
  require "nats-server is not installed"

# A closed port: exit 1 within the timeout (and a little), naming the URL.
start=$(date +%s%N)
expect_fail "closed port" 1 "cannot connect to nats://127.0.0.1:$closed" \
  st --cluster "nats://127.0.0.1:$closed" --timeout 1
took_ms=$((($(date +%s%N) - start) / 1000000))
[ "$took_ms" -lt 3000 ] && ok || bad "a closed port took $took_ms ms (--timeout 1)"
grep -q "(try 1; again in 0.25 s)" "$tmp/err" && ok || bad "no line per try: $(cat "$tmp/err")"

servers=()
stop_servers() {
  for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap stop_servers EXIT
start_server() { # port, then nats-server's own options
  local port=$1; shift
  "$nats_server" -a 127.0.0.1 -p "$port" "$@" >>"$tmp/nats-server.log" 2>&1 &
  servers+=($!)
  for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "FAIL: nats-server did not start on $port:"; cat "$tmp/nats-server.log"; exit 1
}
port=$(free_port)
start_server "$port" -js -sd "$tmp/js"
url="nats://127.0.0.1:$port"

st --cluster "$url" >"$tmp/out" 2>"$tmp/err" && ok || bad "no workers: exit $?: $(cat "$tmp/err")"
grep -qx "no workers registered at $url" "$tmp/out" && ok || bad "no workers: $(cat "$tmp/out")"
[ ! -s "$tmp/err" ] && ok || bad "no workers: stderr $(cat "$tmp/err")"
st --cluster "$url" --json >"$tmp/out" && ok || bad "--json: exit $?"
python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
assert d["cluster"] == sys.argv[2] and d["bucket"] == "dyad_workers", d
assert d["workers"] == [] and d["unreadable"] == [], d
assert d["counts"] == {"workers": 0, "prefill": 0, "decode": 0, "aggregated": 0,
                       "expired": 0, "unreadable": 0}, d' "$tmp/out" "$url" && ok ||
  bad "--json: $(cat "$tmp/out")"
# a list of servers, the first of them closed: the client goes on to the next
st --cluster "nats://127.0.0.1:$closed,$url" --timeout 3 >"$tmp/out" 2>"$tmp/err" &&
  grep -q "no workers" "$tmp/out" && ok || bad "a server list: $(cat "$tmp/err")"

# A server that takes the connection and never says a word: bounded by --timeout all the same.
python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
time.sleep(60)' "$tmp/silent.port" &
servers+=($!)
for _ in $(seq 100); do [ -s "$tmp/silent.port" ] && break; sleep 0.05; done
silent=$(cat "$tmp/silent.port")
start=$(date +%s%N)
expect_fail "a silent server" 1 "cannot connect to nats://127.0.0.1:$silent: Timeout" \
  st --cluster "nats://127.0.0.1:$silent" --timeout 1
took_ms=$((($(date +%s%N) - start) / 1000000))
[ "$took_ms" -lt 3000 ] && ok || bad "a silent server took $took_ms ms (--timeout 1)"

# The node agents' bucket: no agents yet; an unknown node or worker is a refusal (1).
"$dyad" cluster nodes --cluster "$url" >"$tmp/out" 2>"$tmp/err" &&
  grep -qx "no node agents registered at $url" "$tmp/out" && ok ||
  bad "no nodes: $(cat "$tmp/out" "$tmp/err")"
"$dyad" cluster nodes --cluster "$url" --json >"$tmp/out" &&
  python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
assert d["bucket"] == "dyad_nodes" and d["nodes"] == [] and d["unreadable"] == [], d' \
    "$tmp/out" && ok || bad "nodes --json: $(cat "$tmp/out")"
expect_fail "start on no node" 1 "--node hostZ: no live node agent" "$dyad" cluster start \
  --cluster "$url" --node hostZ --role agg --threads 1
expect_fail "stop an unknown worker" 1 "worker w00000001: no node agent runs it" "$dyad" cluster \
  stop --cluster "$url" --worker w00000001
expect_fail "nodes: closed port" 1 "cannot connect to nats://127.0.0.1:$closed" "$dyad" cluster \
  nodes --cluster "nats://127.0.0.1:$closed" --timeout 0.5
expect_fail "node: closed port" 1 "cannot connect to nats://127.0.0.1:$closed" "$dyad" node \
  --cluster "nats://127.0.0.1:$closed" --cores 1 --timeout 0.5

nojs=$(free_port)
start_server "$nojs"
expect_fail "no JetStream" 1 "is JetStream on? nats-server -js" \
  st --cluster "nats://127.0.0.1:$nojs" --timeout 2
finish
