#!/usr/bin/env bash
# scripts/fuzz-smoke.sh [SECONDS [TARGET...]] — builds the libFuzzer targets of fuzz/ (clang,
# AddressSanitizer + UBSan over the whole engine: cmake -DDYAD_FUZZ=ON in build-fuzz/) and runs
# each for SECONDS (default 15) from its committed seed corpus fuzz/corpus-NAME/. New inputs go
# to build-fuzz/run/corpus-NAME/ (made afresh each run), never into the committed seeds.
# A crash, a sanitizer report, a leak, a failed check or an input slower than 30 s fails the
# script; the input that did it is kept as build-fuzz/crashes/fuzz_NAME-*. Each target's log is
# build-fuzz/run/fuzz_NAME.log; one summary line per target says its execs, exec/s, coverage
# (libFuzzer's cov: edges and ft: features at the end) and corpus size.
#
# scripts/test.sh (what CI runs) calls it for the smoke; bench/fuzz.sh calls it with a long
# SECONDS, one target at a time. DYAD_FUZZ_JOBS targets run at once (default: the core count).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-15}
shift || true
jobs=${DYAD_FUZZ_JOBS:-$(nproc)}
command -v clang >/dev/null ||
  { echo "fuzz-smoke: clang is needed (bash scripts/install-deps.sh installs it)" >&2; exit 1; }
start=$SECONDS
cmake -S . -B build-fuzz -G Ninja -DDYAD_FUZZ=ON -DCMAKE_C_COMPILER=clang >/dev/null
ninja -C build-fuzz fuzz >/dev/null
built=$SECONDS
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for src in fuzz/fuzz_*.c; do targets+=("$(basename "$src" .c)"); done
fi
run=build-fuzz/run
mkdir -p "$run" build-fuzz/crashes
# UBSan reports are fatal here, as AddressSanitizer's are.
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

# One target: its run, its exit status in $run/NAME.rc.
run_target() {
  local name=$1 corpus=$run/corpus-${1#fuzz_}
  rm -rf "$corpus" && mkdir -p "$corpus"
  local rc=0
  # -close_fd_mask=2: the product's own stderr (a refused frame is logged) is dropped;
  # libFuzzer and the sanitizers keep reporting into the log.
  "build-fuzz/$name" -max_total_time="$secs" -timeout=30 -close_fd_mask=2 -print_final_stats=1 \
    -artifact_prefix="build-fuzz/crashes/$name-" "$corpus" "fuzz/corpus-${name#fuzz_}" \
    >"$run/$name.log" 2>&1 || rc=$?
  echo "$rc" >"$run/$name.rc"
}

# "NAME: E execs, R exec/s, cov C, ft F, corpus N inputs (S)" from a target's log.
summary() {
  local name=$1 log=$run/$1.log
  local execs rate last
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1)
  local cov ft corp
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\)\/\([0-9A-Za-z]*\).*/\1 inputs (\2)/p' <<<"$last")
  echo "$name: ${execs:-?} execs, ${rate:-?} exec/s, cov ${cov:-?}, ft ${ft:-?}, corpus ${corp:-?}"
}

for name in "${targets[@]}"; do
  [ -x "build-fuzz/$name" ] || { echo "fuzz-smoke: no target $name" >&2; exit 1; }
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  run_target "$name" &
done
wait
echo "fuzz-smoke: built in $((built - start)) s, ran ${#targets[@]} targets for ${secs} s each" \
     "($jobs at a time) in $((SECONDS - built)) s"

failed=0
for name in "${targets[@]}"; do
  rc=$(cat "$run/$name.rc")
  if [ "$rc" -eq 0 ]; then
    summary "$name"
  else
    failed=1
    echo "$name: FAILED (exit $rc); the end of $run/$name.log:" >&2
    tail -n 40 "$run/$name.log" >&2
  fi
done
[ "$failed" -eq 0 ] || { echo "fuzz-smoke: failing inputs are in build-fuzz/crashes/" >&2; exit 1; }
