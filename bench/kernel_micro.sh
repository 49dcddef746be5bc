#!/usr/bin/env bash
# bench/kernel_micro.sh [KERNEL_MICRO] — the microbenchmarks behind docs/engine.md "Kernel
# choices" for the 512-bit level: `build/kernel_micro` (bench/kernel_micro.c; one thread, the
# fastest of REPS calls, levels alternated) for each weight type on the 110m shapes, at the
# 256-bit VNNI level and the 512-bit level, under the usual header. Prints GFLOP/s per level
# and whether the levels agree bit for bit. Environment: REPS (default 20), B (default 128),
# LEVELS (default "avx512vnni avx512"). A benchmark: it prints figures, asserts nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env_header.sh
micro=${1:-build/kernel_micro}
reps=${REPS:-20} b=${B:-128} levels=${LEVELS:-avx512vnni avx512}
dy_env_header "bench/kernel_micro.sh: one thread, B=$b, fastest of $reps, levels $levels alternated"
for shape in "768 768" "768 2048" "2048 768"; do
  for t in f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k; do
    # shellcheck disable=SC2086
    "$micro" "$t" $shape "$b" "$reps" $levels
  done
done
