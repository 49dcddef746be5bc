#!/usr/bin/env bash
# Every symbol dyad's libraries export carries dyad's prefix (dy_, dyb_ for the load generator,
# DY_ for constants), so linking dyad beside another library (ggml exports gguf_open, ...) never
# clashes. AddressSanitizer adds an __odr_asan.NAME indicator beside each exported variable;
# its NAME is checked. Usage: cli_symbols.sh DYAD_BIN SOURCE_DIR; the libraries sit beside
# DYAD_BIN.
set -euo pipefail
build=$(dirname "$1")
command -v nm >/dev/null || { echo "cli_symbols: nm not found"; exit 77; }
libs=("$build"/libdyad_*.a)
[ -e "${libs[0]}" ] || { echo "cli_symbols: no libdyad_*.a beside $1"; exit 1; }
bad=$(nm -g --defined-only "${libs[@]}" 2>/dev/null | awk 'NF == 3 {print $3}' |
      grep -vE '^(__odr_asan\.)?(dy_|dyb_|DY_)' | sort -u || true)
if [ -n "$bad" ]; then
  echo "cli_symbols: exported without the dy_ prefix:"
  echo "$bad"
  echo "0 passed, 1 failed"
  exit 1
fi
echo "1 passed, 0 failed"
