#!/usr/bin/env bash
# Builds dyad twice — optimised, and with AddressSanitizer + UBSan — and runs the whole test
# suite (ctest) on both, then the fuzz smoke: every libFuzzer target of fuzz/, built with the
# sanitizers, for a short run from its seed corpus (scripts/fuzz-smoke.sh). This is the
# README's test command and what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
# scripts/install-deps.sh installs every program a test needs (Chromium, Prometheus): here a
# test that would skip for want of one fails instead (tests/dyad_http.py: skip).
export DYAD_REQUIRE_TOOLS=1
# The OpenAI SDK test's packages, exactly as pinned by tests/node/package-lock.json.
[ -d tests/node/node_modules ] || npm ci --prefix tests/node --no-audit --no-fund --loglevel=error
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build >/dev/null
ctest --test-dir build --output-on-failure -j "$jobs"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DDYAD_SANITIZE=ON >/dev/null
ninja -C build-asan >/dev/null
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs"
bash scripts/fuzz-smoke.sh
