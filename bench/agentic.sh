#!/usr/bin/env bash
# bench/agentic.sh [DYAD] — the tool-call hold's policies on one load (docs/kv-tiers.md): agent
# sessions (dyad bench agentic) beside background traffic, under KV-cache pressure, against a
# fresh server per policy:
#   recompute   no prefix cache, no tiers: every turn computes its whole prompt
#   pin         the KV cache keeps a held conversation's blocks (Continuum-like TTL pinning)
#   reload      the host tier keeps them; the next turn loads them when it arrives (InferCept-like)
#   prefetch    the host tier keeps them; they come back at the predicted return (dyad),
#               with the prediction right, 50 % early and 50 % late
#   oracle      the same with the exact return time
# Prints one dyad bench agentic report per line of the table (JSON kept in $OUT, default
# docs/bench/agentic.jsonl). A benchmark: prints figures, asserts nothing.
# MODEL=path picks the model (default: the generated 110m q8_0 with a 4096 context, made when
# missing); SESSIONS, TURNS, ISL, TURN_TOKENS, OSL, TOOL_MS, KV_MEM, HOST_MEM, BG_RATE tune it.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env_header.sh
dyad=${1:-build/dyad}
model=${MODEL:-models/generated/110m-q8_0-ctx4k.gguf}
out=${OUT:-docs/bench/agentic.jsonl}
sessions=${SESSIONS:-8} turns=${TURNS:-4} isl=${ISL:-512} turn_tokens=${TURN_TOKENS:-128}
osl=${OSL:-16} tool_ms=${TOOL_MS:-2000} kv_mem=${KV_MEM:-160} host_mem=${HOST_MEM:-2048}
bg_rate=${BG_RATE:-0.5}
mkdir -p models/generated "$(dirname "$out")"
if [ ! -f "$model" ]; then
  [ -z "${MODEL:-}" ] || { echo "bench/agentic.sh: no model at $model" >&2; exit 2; }
  "$dyad" gen-model --shape 110m --type q8_0 --ctx 4096 -o "$model"
fi
base="--model $model --model-name agentic --workers 1 --threads-per-worker 2 --kv-mem $kv_mem"
tiers="--kv-host-mem $host_mem"
# name | server flags | bench flags
runs=(
  "recompute|--no-prefix-cache|--hint none"
  "pin|$tiers --kv-hold pin|--hint predicted"
  "reload|$tiers --kv-hold off|--hint none"
  "prefetch|$tiers --kv-hold prefetch|--hint predicted"
  "prefetch-early|$tiers --kv-hold prefetch|--hint predicted --tool-error -0.5"
  "prefetch-late|$tiers --kv-hold prefetch|--hint predicted --tool-error 0.5"
  "oracle|$tiers --kv-hold prefetch|--hint oracle"
)
port=$((18000 + $$ % 1000))
header=$(dy_env_header "bench/agentic.sh: $sessions sessions x $turns turns, prompt $isl + $turn_tokens/turn, answers $osl, tools lognormal ${tool_ms} ms, background $bg_rate req/s (256 in, 64 out), KV cache $kv_mem MiB, host tier $host_mem MiB; $model")
echo "$header"
echo "$header" >"$out"
printf '%-15s %10s %10s %10s %10s %9s %9s %10s %10s %9s %10s\n' policy cont_p50 cont_p90 first_p50 \
  bg_tpot50 bg_tok/s occ_mean host_MB prefetch loads load_share
for r in "${runs[@]}"; do
  IFS='|' read -r name sflags bflags <<<"$r"
  # shellcheck disable=SC2086
  "$dyad" serve --port "$port" $base $sflags 2>"/tmp/dyad-agentic-$$.log" &
  pid=$!
  for _ in $(seq 200); do curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.1; done
  # shellcheck disable=SC2086
  json=$("$dyad" bench agentic --url "http://127.0.0.1:$port" --sessions "$sessions" \
    --turns "$turns" --isl "$isl" --turn-tokens "$turn_tokens" --osl "$osl" --tool-ms "$tool_ms" \
    --background-rate "$bg_rate" --background-isl 256 --background-osl 64 $bflags --json)
  kill "$pid"; wait "$pid" 2>/dev/null || true
  echo "{\"policy\":\"$name\",\"report\":$json}" >>"$out"
  python3 - "$name" "$json" <<'EOF'
import json, sys
n, r = sys.argv[1], json.loads(sys.argv[2])
m = r["moved"]
print(f'{n:<15} {r["continuation_ttft_ms"]["p50"]:10.1f} {r["continuation_ttft_ms"]["p90"]:10.1f} '
      f'{r["first_ttft_ms"]["p50"]:10.1f} {r["background_tpot_ms"]["p50"]:10.2f} '
      f'{r["background_tokens_per_s"]:9.1f} {r["occupancy_mean"]:9.2f} '
      f'{(m["host_in"] + m["host_out"]) / 1e6:10.1f} {m["prefetched_blocks"]:10.0f} {m["loaded_prompts"]:9.0f} '
      f'{r["load_share"]:10.3f}')
EOF
done
rm -f "/tmp/dyad-agentic-$$.log"
