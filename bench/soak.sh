#!/usr/bin/env bash
# bench/soak.sh [DYAD] — the soak of docs/reliability.md (#18): a disaggregated `dyad serve`
# (1 prefill + 1 decode worker) under an open-loop load at ~90 % of its saturation for
# DURATION seconds, with every process (the frontend and each worker) sampled every INTERVAL
# seconds — RSS, shared memory (RssShmem), open fds — and the latency of the last 5 s
# (/v1/dyad/status: TTFT and ITL p50/p90), into $OUT/soak.csv, plotted as $OUT/soak.svg;
# the log ($OUT/soak.log) has the usual header, the saturation found, the load's report and
# each process's first and last figures. Flat lines are the target.
# A benchmark: prints figures, asserts nothing. Run it on an otherwise idle machine.
#   DURATION=1800      seconds of load (default 30 minutes)
#   RATE=R             requests/s to send (default: 0.9 x the saturation measured first: a
#                      closed loop of SAT_CONCURRENCY (16) requests for SAT_SECONDS (20))
#   INTERVAL=5         seconds between samples
#   ISL=128 OSL=64     the requests' prompt and output lengths (prompts are token ids)
#   MODEL=path         another model (default: the bundled stories260K; VOCAB its vocabulary
#                      size, default 512 for the bundled one)
#   SERVE_ARGS="..."   more `dyad serve` options (e.g. --decode-workers 2)
#   OUT=docs/bench     where soak.csv, soak.svg and soak.log go
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env_header.sh
dyad=${1:-build/dyad}
duration=${DURATION:-1800}; interval=${INTERVAL:-5}
isl=${ISL:-128}; osl=${OSL:-64}
sat_conc=${SAT_CONCURRENCY:-16}; sat_s=${SAT_SECONDS:-20}
out=${OUT:-docs/bench}
mkdir -p "$out"
model_args=(); vocab=${VOCAB:-512}
if [ -n "${MODEL:-}" ]; then model_args=(--model "$MODEL"); vocab=${VOCAB:-32000}; fi
exec > >(tee "$out/soak.log") 2>&1

serve_log=$(mktemp)
# shellcheck disable=SC2086
"$dyad" serve "${model_args[@]}" --prefill-workers 1 --decode-workers 1 --port 0 \
  ${SERVE_ARGS:-} 2>"$serve_log" &
server=$!
sampler=
cleanup() {
  [ -z "$sampler" ] || kill "$sampler" 2>/dev/null || true
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  rm -f "$serve_log"
}
trap cleanup EXIT
for _ in $(seq 600); do grep -q "http://" "$serve_log" && break; sleep 0.1; done
url=http://$(sed -n 's/.*http:\/\/\([0-9.]*:[0-9]*\).*/\1/p' "$serve_log" | head -1)
[ "$url" != "http://" ] || { cat "$serve_log"; exit 1; }
dy_env_header "soak: DURATION=$duration s, ISL $isl, OSL $osl, sampled every $interval s"
echo "# $(grep -m1 "http://" "$serve_log")"
b() { "$dyad" bench --url "$url" --isl "$isl" --osl "$osl" --vocab-size "$vocab" "$@"; }

if [ -n "${RATE:-}" ]; then
  rate=$RATE
  echo "rate: $rate requests/s (given)"
else
  sat=$(b --concurrency "$sat_conc" --duration "$sat_s" --requests 1000000000 \
    --warmup "$sat_conc" --seed 1 --json |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["request_throughput"])')
  rate=$(python3 -c "print(round(0.9 * $sat, 2))")
  echo "saturation: $sat requests/s (closed loop, concurrency $sat_conc, $sat_s s);" \
       "rate: $rate requests/s (90 %)"
fi

python3 bench/soak_sample.py sample "$url" "$server" "$out/soak.csv" "$interval" &
sampler=$!
# The open loop, at most 4x the saturation run's requests in flight (a stall queues, not explodes).
b --rate "$rate" --concurrency $((4 * sat_conc)) --duration "$duration" --requests 1000000000 \
  --seed 2 --timeout 600
sleep "$interval"  # one more sample after the load
kill "$sampler"; wait "$sampler" 2>/dev/null || true
sampler=
echo
python3 bench/soak_sample.py plot "$out/soak.csv" "$out/soak.svg"
echo "restarts and hangs: $(curl -s "$url/health")"
