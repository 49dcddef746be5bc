#!/usr/bin/env bash
# bench/serve.sh [DYAD] — the serving figures of docs/serving-bench.md, on a generated 110m
# q8_0 model served by one aggregated worker with 2 threads:
#   1. concurrency 1 through the server against `dyad run` for the same lengths (overhead);
#   2. output tokens/s at concurrency 16 against concurrency 1 (batched decode);
#   3. TTFT with a shared 384-token prefix in 512-token prompts against no sharing;
#   4. the Pareto sweep on ShareGPT lengths scaled to ISL <= 1024 (CSV + SVG into docs/).
# A benchmark: it prints figures, asserts nothing. Takes about 10 minutes on 2 cores.
# SECTIONS="4" runs only the sections named (docs/bench/serve_pareto_sharegpt.log is section 4).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env_header.sh
dyad=${1:-build/dyad}
# The 110m shape with its context raised to 4096 (gen-model --ctx), so ShareGPT prompts of up
# to 1024 tokens fit with their outputs; compute per token is the same as the 1024 model.
model=models/generated/110m-q8_0-ctx4k.gguf
out=${OUT:-docs/bench}
mkdir -p models/generated "$out"
[ -f "$model" ] || "$dyad" gen-model --shape 110m --type q8_0 --ctx 4096 -o "$model"
log=$(mktemp)
"$dyad" serve --model "$model" --workers 1 --threads-per-worker 2 --port 0 --kv-mem 1024 2>"$log" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 300); do grep -q "http://" "$log" && break; sleep 0.1; done
url=http://$(sed -n 's/.*http:\/\/\([0-9.]*:[0-9]*\).*/\1/p' "$log" | head -1)
echo "# $(head -1 "$log")"
dy_env_header
# Each run draws its own prompts (--seed), so no run is helped by an earlier one's cache.
b() { "$dyad" bench --url "$url" "$@"; }
want() { [[ " ${SECTIONS:-1 2 3 4} " == *" $1 "* ]]; }

if want 1; then
echo; echo "== 1. concurrency 1: server vs dyad run (ISL 128, OSL 128), alternating A B A B"
prompt=$(python3 -c 'print(" ".join(["hello"] * 127))')
for rep in 1 2; do
  "$dyad" run --model "$model" --prompt "$prompt" --max-tokens 128 --ignore-eos --temperature 0 \
    --no-echo 2>&1 >/dev/null | sed "s/^/run $rep: /"
  b --concurrency 1 --requests 4 --warmup 1 --isl 128 --osl 128 --json --seed "1$rep" | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    e, t, p = r["e2e_ms"], r["ttft_ms"], r["tpot_ms"]
    print("server %s: e2e mean %.1f ms, p50 %.1f; ttft mean %.1f ms; tpot mean %.3f ms"
          % (sys.argv[1], e["mean"], e["p50"], t["mean"], p["mean"]))' "$rep"
done
fi

if want 2; then
echo; echo "== 2. batched decode reaches the clients: concurrency 1 vs 16 (ISL 128, OSL 128)"
b --concurrency 1 --requests 4 --warmup 1 --isl 128 --osl 128 --seed 21
b --concurrency 16 --requests 32 --warmup 16 --isl 128 --osl 128 --seed 22
fi

if want 3; then
echo; echo "== 3. shared prefix: 4 groups x 384 shared tokens in 512-token prompts vs none (OSL 16)"
b --concurrency 1 --requests 16 --isl 512 --osl 16 --seed 31
b --concurrency 1 --requests 16 --isl 512 --osl 16 --prefix-groups 4 --prefix-len 384 --seed 32
fi

if want 4; then
echo; echo "== 4. Pareto sweep, ShareGPT lengths capped at ISL 1024 / OSL 256"
b --lengths-csv "${SHAREGPT:-../shared/traces/sharegpt_8k_filtered_stats_llama2_tokenizer.csv}" \
  --max-isl 1024 --max-osl 256 --sweep concurrency=1,2,4,8,16,32 --requests 24 --seed 41 \
  --csv "$out/serve_pareto_sharegpt.csv" --plot "$out/serve_pareto_sharegpt.svg"
fi
curl -s "$url/metrics" | grep -E '^dyad_(prefix_cache|preemptions|prompt_tokens|generation_tokens)' || true
