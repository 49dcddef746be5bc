#!/usr/bin/env bash
# bench/engine.sh [DYAD] — the engine tables of docs/engine.md: `dyad bench engine` on the
# bundled stories260K and generated 15m, 110m (f32, q8_0) and 1b (f32, q8_0, q4_k) models,
# 2 threads. Generates the models it lacks into models/generated/ (1b f32 is 4.4 GB).
# Prints the reports; with JSON=1, one JSON object per model instead. SMALL and LARGE (the
# model names of the --reps 5 and --reps 2 runs) replace the default lists, e.g. LARGE="1b-q8_0
# 1b-q4_k" SMALL= for the 1b quantized models alone.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env_header.sh
dyad=${1:-build/dyad}
g=models/generated
mkdir -p "$g"
small=${SMALL-stories260K 15m-f32 15m-q8_0 110m-f32 110m-q8_0}
large=${LARGE-1b-q8_0 1b-q4_k 1b-f32}
args() { # the --model arguments of the names in $@, generating the models that are missing
  for m in "$@"; do
    if [ "$m" = stories260K ]; then echo "--model models/stories260K.bin"; continue; fi
    [ -f "$g/$m.gguf" ] || "$dyad" gen-model --shape "${m%%-*}" --type "${m#*-}" -o "$g/$m.gguf" >&2
    echo "--model $g/$m.gguf"
  done
}
json=${JSON:+--json}
dy_env_header
# shellcheck disable=SC2046 # the arguments are split on purpose (no spaces in the paths)
[ -z "$small" ] || "$dyad" bench engine $json --reps 5 $(args $small)
# shellcheck disable=SC2046
[ -z "$large" ] || "$dyad" bench engine $json --reps 2 $(args $large)
