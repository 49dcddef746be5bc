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
  # An f16 KV cache leaves the greedy text unchanged (docs/engine.md, "KV types").
  "$dyad" run "${args[@]}" --kv-type f16 --temperature 0 --max-tokens 256 >"$tmp/a16" 2>"$tmp/e16"
  check "$m greedy empty prompt, f16 KV" "$golden/stories260K_t0_n256.txt" "$tmp/a16"
  "$dyad" run "${args[@]}" --kv-type f16 --temperature 0 --prompt "Once upon a time" \
    --max-tokens 60 >"$tmp/b16" 2>/dev/null
  check "$m greedy prompt, f16 KV" "$golden/stories260K_t0_n64_prompt.txt" "$tmp/b16"
  grep -q "kv: f16" "$tmp/e16" && passes=$((passes+1)) ||
    { echo "FAIL: $m: stderr names the KV type"; fails=$((fails+1)); }
done
# `dyad bench kv`: an f32 cache against itself differs nowhere; f16 keeps every greedy choice
# of the bundled model over 256 tokens, with a logit error above zero.
kvq() { "$dyad" bench kv --kv-type "$1" --tokens 256 | python3 -c "import json,sys; d=json.load(sys.stdin); print($2)"; }
[ "$(kvq f32 'd["max_logit_error"] == 0 and d["top1_agreement"] == 1')" = True ] &&
  passes=$((passes+1)) || { echo "FAIL: bench kv f32 against f32"; fails=$((fails+1)); }
[ "$(kvq f16 'd["first_disagreement"] == -1 and 0 < d["max_logit_error"] < 0.05 * d["max_abs_logit"]')" = True ] &&
  passes=$((passes+1)) || { echo "FAIL: bench kv f16"; fails=$((fails+1)); }
# q8_0 KV runs to the end; an unknown type is refused by name.
"$dyad" run --kv-type q8_0 --temperature 0 --max-tokens 64 >"$tmp/q8" 2>"$tmp/eq8" &&
  grep -q "kv: q8_0" "$tmp/eq8" && [ -s "$tmp/q8" ] && passes=$((passes+1)) ||
  { echo "FAIL: q8_0 KV run"; fails=$((fails+1)); }
if "$dyad" run --kv-type q4 --max-tokens 4 >/dev/null 2>"$tmp/ebad"; then
  echo "FAIL: --kv-type q4 accepted"; fails=$((fails+1))
elif grep -q "kv-type" "$tmp/ebad"; then passes=$((passes+1)); else
  echo "FAIL: --kv-type q4 message: $(cat "$tmp/ebad")"; fails=$((fails+1)); fi
# The default model is the bundled one.
"$dyad" run --temperature 0 --max-tokens 256 >"$tmp/c" 2>/dev/null
check "default model" "$golden/stories260K_t0_n256.txt" "$tmp/c"
# Every kernel level gives the same bits, so the same greedy text: a prompt long enough for the
# 512-bit float kernels (128 rows and more), at the portable level and at the best one here.
long=$(python3 -c "print('Once upon a time there was a girl. ' * 20)")
DYAD_SIMD=scalar "$dyad" run --temperature 0 --prompt "$long" --max-tokens 30 >"$tmp/ls" 2>/dev/null
"$dyad" run --temperature 0 --prompt "$long" --max-tokens 30 >"$tmp/lb" 2>/dev/null
check "long prompt: scalar and the best level agree" "$tmp/ls" "$tmp/lb"
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

# A grammar: every seeded answer is JSON that validates against the schema (the bundled model
# writes none unaided), and the same seed repeats it.
cat >"$tmp/schema.json" <<'JSON'
{"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
 "age": {"type": "integer", "minimum": 1, "maximum": 120},
 "pets": {"type": "array", "items": {"enum": ["cat", "dog"]}, "maxItems": 3}},
 "required": ["name", "age", "pets"]}
JSON
for seed in 1 2 3 4 5; do
  "$dyad" run --prompt "Once upon a time" --no-echo --json-schema "$tmp/schema.json"     --seed $seed --max-tokens 200 >"$tmp/j$seed" 2>"$tmp/je$seed"
done
if python3 - "$tmp/schema.json" "$tmp"/j[1-5] <<'PY'
import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
for f in sys.argv[2:]:
    jsonschema.validate(json.loads(open(f).read()), schema)
PY
then passes=$((passes+1)); else echo "FAIL: --json-schema answers validate"; fails=$((fails+1)); fi
"$dyad" run --prompt "Once upon a time" --no-echo --json-schema "$tmp/schema.json" --seed 1 \
  --max-tokens 200 >"$tmp/j1b" 2>/dev/null
check "--json-schema with a seed repeats" "$tmp/j1" "$tmp/j1b"
# Cut by --max-tokens: said on stderr.
"$dyad" run --no-echo --json-object --seed 1 --max-tokens 3 >/dev/null 2>"$tmp/cut"
grep -q "cut before its grammar was complete" "$tmp/cut" && passes=$((passes+1)) ||
  { echo "FAIL: a cut grammar is reported"; fails=$((fails+1)); }
printf 'root ::= "yes" | "no"\n' >"$tmp/yn.gbnf"
"$dyad" run --no-echo --grammar "$tmp/yn.gbnf" --seed 1 >"$tmp/yn" 2>/dev/null
grep -qxE 'yes|no' "$tmp/yn" && passes=$((passes+1)) ||
  { echo "FAIL: --grammar"; fails=$((fails+1)); }

# Bad input.
expect_fail "two grammars" 2 "at most one of" "$dyad" run --json-object --grammar "$tmp/yn.gbnf"
expect_fail "missing schema file" 1 "$tmp/none.json" "$dyad" run --json-schema "$tmp/none.json"
printf '{"type": "object", "multipleOf": 2}' >"$tmp/bad_schema.json"
expect_fail "unsupported schema keyword" 1 "multipleOf" "$dyad" run --json-schema "$tmp/bad_schema.json"
printf 'root ::= undefined\n' >"$tmp/bad.gbnf"
expect_fail "grammar that does not compile" 1 "never defined" "$dyad" run --grammar "$tmp/bad.gbnf"
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
