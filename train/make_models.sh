#!/bin/bash
# make_models.sh — trains the quality family (train/train.py, sizes s, m, l, one after the
# other) and turns each run into the GGUF files of models/quality/: f32, q8_0, q4_0, and q4_k
# where every matrix row fits its 256-element blocks (dyad convert falls back otherwise, so
# q4_k is written only for l). Re-running skips a size whose run has finished (summary.json)
# and resumes one that was cut off from its checkpoint.
#   bash train/make_models.sh [DYAD_BINARY] [RUNS_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
DYAD=${1:-build/dyad}
RUNS=${2:-train/runs}
STEPS=${STEPS:-2000}
SIZES=${SIZES:-"s m l"}
mkdir -p models/quality "$RUNS"
for s in $SIZES; do
    if [ ! -f "$RUNS/$s/summary.json" ]; then
        /usr/bin/python3 train/train.py --size "$s" --steps "$STEPS" --out "$RUNS/$s" --resume
    fi
    types="f32 q8_0 q4_0"
    [ "$s" = l ] && types="$types q4_k"
    for t in $types; do
        "$DYAD" convert "$RUNS/$s/model.bin" "models/quality/$s-$t.gguf" \
            --tokenizer "$RUNS/$s/tokenizer.bin" --type "$t"
    done
    cp "$RUNS/$s/summary.json" "models/quality/$s.summary.json"
    cp "$RUNS/$s/log.jsonl" "models/quality/$s.log.jsonl"
    cp "$RUNS/$s/greedy.json" "models/quality/$s.greedy.json"
done
