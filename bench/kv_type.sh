#!/usr/bin/env bash
# bench/kv_type.sh [DYAD] — what the KV cache's element type costs and buys (docs/engine.md,
# "KV types"): for each model and each --kv-type, decode ms/token at context 512 and 2048
# (`dyad bench engine --decode-context 2048`) and KV bytes per token; then, against the f32
# cache, the logit error and greedy agreement over a long generation (`dyad bench kv`: top-1
# agreement, the first differing token and the f32 margin there, max and RMS logit error).
# Writes OUT (default docs/bench/kv_type.log) starting with the usual header; `dyad bench
# engine` runs in full per model and type (its other figures are in its own report).
# Environment: MODELS (default: the bundled stories260K and generated 15m/110m q8_0 models,
# made if missing), TOKENS (greedy tokens compared, default 1024), REPS (default 5),
# THREADS (default 2), QUICK=1 (a smoke run: the tiny model, `bench engine --quick`, context
# 256, 32 tokens; the figures mean nothing).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env_header.sh
dyad=${1:-build/dyad}
reps=${REPS:-5} tokens=${TOKENS:-1024} threads=${THREADS:-2} long=2048
g=models/generated
quick=
if [ -n "${QUICK:-}" ]; then
  models=${MODELS:-models/stories260K.bin}; reps=1 tokens=32 long=256 quick=--quick
else
  mkdir -p "$g"
  for m in 15m-q8_0 110m-q8_0; do
    [ -f "$g/$m.gguf" ] || "$dyad" gen-model --shape "${m%%-*}" --type "${m#*-}" -o "$g/$m.gguf"
  done
  models=${MODELS:-models/stories260K.bin $g/15m-q8_0.gguf $g/110m-q8_0.gguf}
fi
log=${OUT:-docs/bench/kv_type.log}
mkdir -p "$(dirname "$log")"
{
  dy_env_header "bench/kv_type.sh: decode at context 512 and $long per KV type, $threads threads, min of $reps reps; logits against f32 over $tokens greedy tokens"
  printf '%-22s %-5s %10s %14s %14s\n' model kv bytes/token "decode@512 ms" "decode@$long ms"
  for m in $models; do
    for t in f32 f16 q8_0; do
      "$dyad" bench engine --json $quick --reps "$reps" --threads "$threads" --kv-type "$t" \
        --decode-context "$long" --model "$m" 2>/dev/null |
        python3 -c '
import json, sys
d = json.load(sys.stdin)
dec = {p["context"]: p["ms_per_token"] for p in d["decode"]}
at = lambda c: "%.4f" % dec[c] if c in dec else "-"
print("%-22s %-5s %10d %14s %14s" % (d["model"][:22], d["kv_type"], d["kv_bytes_per_token"], at(512), at(int(sys.argv[1]))))
' "$long"
    done
  done
  printf '\n%-22s %-5s %8s %10s %8s %12s %12s %10s\n' model kv top1 first-diff margin max-err rms-err max-logit
  for m in $models; do
    for t in f16 q8_0; do
      "$dyad" bench kv --model "$m" --kv-type "$t" --tokens "$tokens" --threads "$threads" |
        python3 -c '
import json, sys
d = json.load(sys.stdin)
print("%-22s %-5s %8.4f %10d %8.3g %12.4g %12.4g %10.4g" % (d["model"].split("/")[-1][:22], d["kv_type"], d["top1_agreement"], d["first_disagreement"], d.get("first_disagreement_f32_margin", float("nan")), d["max_logit_error"], d["rms_logit_error"], d["max_abs_logit"]))'
    done
  done
} | tee "$log"
echo "wrote $log" >&2
