#!/usr/bin/env bash
# bench/fuzz.sh [SECONDS] — every libFuzzer target of fuzz/ run long: SECONDS each (default
# 600), one target at a time, from its committed seed corpus, in the sanitizer build
# (scripts/fuzz-smoke.sh builds and runs them). Prints the header line, then per target its
# execs, exec/s, coverage at the end (libFuzzer's cov: edges and ft: features) and corpus size.
# A target that finds a bug fails the script, its input kept in build-fuzz/crashes/.
#   bash bench/fuzz.sh 60 > docs/bench/fuzz.log
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env_header.sh
secs=${1:-600}
dy_env_header "libFuzzer targets of fuzz/, $secs s each, one at a time; $(clang --version | head -1)"
DYAD_FUZZ_JOBS=1 bash scripts/fuzz-smoke.sh "$secs"
