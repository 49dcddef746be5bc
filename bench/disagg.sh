#!/usr/bin/env bash
# bench/disagg.sh [DYAD] — aggregated vs disaggregated serving on equal cores (2), the grid of
# docs/disaggregation-results.md: configurations agg 1x2 (one worker, 2 threads), agg 2x1 (two
# workers, 1 thread each) and disagg 1+1 (one prefill + one decode worker, 1 thread each,
# default conditional disaggregation); ISL x OSL cells; closed-loop concurrency sweep.
# Writes one CSV row per run to $OUT (default docs/bench/disagg.csv) with the transfer
# counters read from /metrics. A benchmark: prints figures, asserts nothing.
#   ISLS="64 512 2048" OSLS="16 128 512" CONCS="1 4 16" bench/disagg.sh
# MODEL=path picks another model (default: the generated 110m q8_0 with a 4096 context,
# made when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env_header.sh
dyad=${1:-build/dyad}
model=${MODEL:-models/generated/110m-q8_0-ctx4k.gguf}
out=${OUT:-docs/bench/disagg.csv}
isls=${ISLS:-64 512 2048}; osls=${OSLS:-16 128}; concs=${CONCS:-1 4 16}
mkdir -p models/generated "$(dirname "$out")"
if [ ! -f "$model" ]; then
  [ -z "${MODEL:-}" ] || { echo "bench/disagg.sh: no model at $model" >&2; exit 2; }
  "$dyad" gen-model --shape 110m --type q8_0 --ctx 4096 -o "$model"
fi
declare -A cfg=(
  [agg1x2]="--workers 1 --threads-per-worker 2"
  [agg2x1]="--workers 2 --threads-per-worker 1"
  [disagg1+1]="--prefill-workers 1 --decode-workers 1 --threads-per-worker 1"
)
echo "config,isl,osl,concurrency,requests,ttft_p50_ms,ttft_p99_ms,itl_p50_ms,itl_p99_ms,tpot_mean_ms,out_tok_s,out_tok_s_per_core,tok_s_per_user,remote_prefills,local_prefills,kv_bytes,kv_seconds" >"$out"
dy_env_header >&2
for name in agg1x2 agg2x1 disagg1+1; do
  log=$(mktemp)
  # shellcheck disable=SC2086
  "$dyad" serve --model "$model" ${cfg[$name]} --kv-mem 1536 --port 0 2>"$log" &
  server=$!
  for _ in $(seq 300); do grep -q "http://" "$log" && break; sleep 0.1; done
  url=http://$(sed -n 's/.*http:\/\/\([0-9.]*:[0-9]*\).*/\1/p' "$log" | head -1)
  for isl in $isls; do for osl in $osls; do for c in $concs; do
    n=$(( c < 4 ? 4 : c ))
    before=$(curl -s "$url/metrics")
    json=$("$dyad" bench --url "$url" --seed "$isl$osl$c" --isl "$isl" --osl "$osl" \
      --concurrency "$c" --requests "$n" --cores 2 --json)
    after=$(curl -s "$url/metrics")
    python3 - "$name" "$isl" "$osl" "$c" "$json" "$before" "$after" >>"$out" <<'PY'
import json, sys
name, isl, osl, c, js, before, after = sys.argv[1:]
def metric(text, key):
    for line in text.splitlines():
        if line.startswith(key + " "):
            return float(line.split()[-1])
    return 0.0
d = lambda k: metric(after, k) - metric(before, k)
r = json.loads(js)
row = [name, isl, osl, c, r["completed"], r["ttft_ms"]["p50"], r["ttft_ms"]["p99"],
       r["itl_ms"]["p50"], r["itl_ms"]["p99"], r["tpot_ms"]["mean"], r["output_throughput"],
       r["output_throughput_per_core"], r["tokens_per_s_per_user"],
       d('dyad_prefill_total{where="remote"}'), d('dyad_prefill_total{where="local"}'),
       d("dyad_kv_transfer_bytes_total"), d("dyad_kv_transfer_seconds_total")]
print(",".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in row))
PY
    tail -1 "$out" >&2
  done; done; done
  kill $server; wait $server 2>/dev/null || true
  rm -f "$log"
done
