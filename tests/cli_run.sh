#!/usr/bin/env bash
# cli_run.sh DYAD SOURCE_DIR — `dyad run` end to end: greedy output equals llama2.c's
# reference text (checkpoint + tokenizer.bin, and the GGUF with its own vocab), and bad
# input gives a clear message and a non-zero exit.
set -euo pipefail
dyad=$1; src=$2
golden=$src/tests/data/golden
source "$(dirname "$0")/shell_helpers.sh"
check() { # name, expected file, actual file
  if cmp -s "$2" "$3"; then passes=$((passes+1)); else
    echo "FAIL: $1"; diff <(cat "$2") <(cat "$3") | head -5; fails=$((fails+1)); fi
}

# llama2.c's `-n 256` runs 256 positions from BOS and prints a token at each: 256 generated
# tokens; `-n 64` with the 5-token prompt (BOS + 4) generates 60.
bin=(--model "$src/models/stories260K.bin" --tokenizer "$src/models/tok512.bin")
gguf=(--model "$src/models/stories260K.gguf")
for m in bin gguf; do
  declare -n args=$m
  "$dyad" run "${args[@]}" --temperature 0 --max-tokens 256 >"$tmp/a" 2>/dev/null
  check "$m greedy empty prompt" "$golden/stories260K_t0_n256.txt" "$tmp/a"
  "$dyad" run "${args[@]}" --temperature 0 --prompt "Once upon a time" --max-tokens 60 \
    >"$tmp/b" 2>/dev/null
  check "$m greedy prompt" "$golden/stories260K_t0_n64_prompt.txt" "$tmp/b"
done
# The default model is the bundled one.
"$dyad" run --temperature 0 --max-tokens 256 >"$tmp/c" 2>/dev/null
check "default model" "$golden/stories260K_t0_n256.txt" "$tmp/c"
# Same seed, same text; stderr carries the timings.
"$dyad" run --seed 7 --max-tokens 40 >"$tmp/s1" 2>"$tmp/e1"
"$dyad" run --seed 7 --max-tokens 40 >"$tmp/s2" 2>/dev/null
check "seeded sampling repeats" "$tmp/s1" "$tmp/s2"
grep -q "prefill:" "$tmp/e1" && grep -q "ms/token" "$tmp/e1" && passes=$((passes+1)) ||
  { echo "FAIL: timings on stderr"; fails=$((fails+1)); }
# A stop string ends the text before it.
"$dyad" run --temperature 0 --max-tokens 256 --stop "Lily" >"$tmp/st" 2>/dev/null
printf 'Once upon a time, there was a little girl named \n' >"$tmp/st_want"
check "stop string" "$tmp/st_want" "$tmp/st"

# Bad input.
expect_fail "missing model" 1 "/nonexistent.gguf" "$dyad" run --model /nonexistent.gguf
head -c 100000 "$src/models/stories260K.bin" >"$tmp/cut.bin"
expect_fail "truncated checkpoint" 1 "cut.bin" "$dyad" run --model "$tmp/cut.bin" --tokenizer "$src/models/tok512.bin"
head -c 3000 "$src/models/stories260K.gguf" >"$tmp/cut.gguf"
expect_fail "truncated gguf" 1 "cut.gguf: offset" "$dyad" run --model "$tmp/cut.gguf"
head -c 3000 "$src/models/tok512.bin" >"$tmp/cut_tok.bin"
expect_fail "truncated tokenizer" 1 "cut_tok.bin" "$dyad" run --model "$src/models/stories260K.bin" --tokenizer "$tmp/cut_tok.bin"
expect_fail "checkpoint without tokenizer" 1 "--tokenizer" "$dyad" run --model "$src/models/stories260K.bin"
expect_fail "bad flag value" 2 "--max-tokens" "$dyad" run --max-tokens lots
expect_fail "unknown flag" 2 "--frobnicate" "$dyad" run --frobnicate
expect_fail "unknown command" 2 "unknown command" "$dyad" frobnicate
# serve refuses a request log it cannot open, naming it, before starting any worker.
expect_fail "unwritable request log" 2 "--request-log '$tmp/no/such/dir.jsonl'" \
  "$dyad" serve --port 0 --request-log "$tmp/no/such/dir.jsonl"

finish
