#!/usr/bin/env bash
# bench/engine.sh [DYAD] — the engine tables of docs/engine.md: `dyad bench engine` on the
# bundled stories260K and generated 15m, 110m (f32, q8_0) and 1b (f32, q8_0, q4_k) models,
# 2 threads. Generates the models it lacks into models/generated/ (1b f32 is 4.4 GB).
# Prints the reports; with JSON=1, one JSON object per model instead.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env_header.sh
dyad=${1:-build/dyad}
g=models/generated
mkdir -p "$g"
for m in 15m-f32 15m-q8_0 110m-f32 110m-q8_0 1b-q8_0 1b-q4_k 1b-f32; do
  [ -f "$g/$m.gguf" ] || "$dyad" gen-model --shape "${m%%-*}" --type "${m#*-}" -o "$g/$m.gguf"
done
json=${JSON:+--json}
dy_env_header
"$dyad" bench engine $json --reps 5 --model models/stories260K.bin --model "$g/15m-f32.gguf" \
  --model "$g/15m-q8_0.gguf" --model "$g/110m-f32.gguf" --model "$g/110m-q8_0.gguf"
"$dyad" bench engine $json --reps 2 --model "$g/1b-q8_0.gguf" --model "$g/1b-q4_k.gguf" \
  --model "$g/1b-f32.gguf"
