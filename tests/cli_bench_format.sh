#!/usr/bin/env bash
# cli_bench_format.sh DYAD SOURCE_DIR — `dyad bench --response-format FILE` refuses a file that
# is missing, not JSON, not an object or without a string "type", naming the flag and the
# file, with exit 1 and before it contacts any server (the URL points at a closed port).
set -euo pipefail
dyad=$1
source "$(dirname "$0")/shell_helpers.sh"
bench() { "$dyad" bench --url http://127.0.0.1:9 --requests 1 "$@"; }

expect_fail "missing file" 1 "--response-format $tmp/none.json" \
  bench --response-format "$tmp/none.json"
printf '{"type": "json_object",' >"$tmp/cut.json"
expect_fail "not JSON" 1 "$tmp/cut.json: not JSON" bench --response-format "$tmp/cut.json"
printf '["json_object"]' >"$tmp/array.json"
expect_fail "not an object" 1 "$tmp/array.json: not a JSON object" \
  bench --response-format "$tmp/array.json"
printf '{"json_schema": {"name": "x", "schema": {}}}' >"$tmp/notype.json"
expect_fail "no type" 1 "$tmp/notype.json: no string \"type\"" \
  bench --response-format "$tmp/notype.json"
printf '{"type": 3}' >"$tmp/numtype.json"
expect_fail "type not a string" 1 "no string \"type\"" bench --response-format "$tmp/numtype.json"
# A good file gets past it, to the server check (nothing listens on port 9).
printf '{"type": "json_object"}' >"$tmp/ok.json"
set +e; bench --response-format "$tmp/ok.json" >"$tmp/out" 2>"$tmp/err"; rc=$?; set -e
if [ $rc -eq 1 ] && ! grep -q -- "--response-format" "$tmp/err"; then ok; else
  bad "good file: exit $rc, stderr: $(head -c 300 "$tmp/err")"; fi
expect_fail "--response-format without a value" 2 "response-format" bench --response-format
finish
