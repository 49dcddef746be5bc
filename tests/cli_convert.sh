#!/usr/bin/env bash
# cli_convert.sh DYAD SOURCE_DIR — `dyad convert` and `dyad gen-model` end to end: the
# llama2.c checkpoint converted to GGUF runs exactly like the checkpoint, GGUF→GGUF is
# idempotent, re-quantized files and random models of every type load and generate, the
# generator is deterministic, success is silent, and bad input fails with a message naming
# the file and leaves no output behind.
set -euo pipefail
dyad=$1; src=$2
source "$(dirname "$0")/shell_helpers.sh"
check() { # name, expected file, actual file
  if cmp -s "$2" "$3"; then ok; else bad "$1"; diff <(cat "$2") <(cat "$3") | head -5; fi
}
silent() { # name, command... : succeeds and prints nothing
  local name=$1; shift
  if "$@" >"$tmp/out" 2>"$tmp/err" && [ ! -s "$tmp/out" ] && [ ! -s "$tmp/err" ]; then ok; else
    bad "$name (stdout: $(head -c 200 "$tmp/out"), stderr: $(head -c 300 "$tmp/err"))"; fi
}
greedy() { # model args... : 24 greedy tokens after a prompt, text only
  "$dyad" run "$@" --temperature 0 --prompt "Once upon a time" --max-tokens 24 2>/dev/null
}
generates() { # name, model: loads and produces text beyond the prompt
  if greedy --model "$2" >"$tmp/g" && [ "$(wc -c <"$tmp/g")" -gt 20 ]; then ok; else
    bad "$1: $2 does not run"; fi
}

bin=$src/models/stories260K.bin; tok=$src/models/tok512.bin

# ---- llama2.c checkpoint → GGUF: same text as the checkpoint itself.
silent "convert llama2.c" "$dyad" convert "$bin" "$tmp/s.gguf" --tokenizer "$tok"
greedy --model "$bin" --tokenizer "$tok" >"$tmp/want"
greedy --model "$tmp/s.gguf" >"$tmp/got"
check "converted GGUF runs like the checkpoint" "$tmp/want" "$tmp/got"
"$dyad" run --model "$bin" --tokenizer "$tok" --temperature 0 --max-tokens 100 >"$tmp/want" 2>/dev/null
"$dyad" run --model "$tmp/s.gguf" --temperature 0 --max-tokens 100 >"$tmp/got" 2>/dev/null
check "converted GGUF, empty prompt" "$tmp/want" "$tmp/got"
# ... and gives llama2.c's own reference text (`-n 256`: 256 tokens, as in cli_run.sh).
"$dyad" run --model "$tmp/s.gguf" --temperature 0 --max-tokens 256 >"$tmp/got" 2>/dev/null
check "converted GGUF, llama2.c golden" "$src/tests/data/golden/stories260K_t0_n256.txt" "$tmp/got"

# ---- GGUF → GGUF: keeping the types reproduces the file byte for byte.
silent "convert gguf" "$dyad" convert "$tmp/s.gguf" "$tmp/s2.gguf"
check "GGUF→GGUF is idempotent" "$tmp/s.gguf" "$tmp/s2.gguf"
# The bundled llama.cpp-made GGUF converts and still runs the same.
silent "convert bundled gguf" "$dyad" convert "$src/models/stories260K.gguf" "$tmp/b.gguf"
greedy --model "$src/models/stories260K.gguf" >"$tmp/want"
greedy --model "$tmp/b.gguf" >"$tmp/got"
check "bundled GGUF re-written runs the same" "$tmp/want" "$tmp/got"

# ---- re-quantized: rows of 172 do not fit 32-blocks, so those fall back (summary says f16).
for t in q8_0 f16 q4_k; do
  silent "convert to $t" "$dyad" convert "$tmp/s.gguf" "$tmp/s_$t.gguf" --type "$t"
  generates "converted $t" "$tmp/s_$t.gguf"
done
"$dyad" convert "$tmp/s.gguf" "$tmp/v.gguf" --type q8_0 --verbose 2>"$tmp/err" >/dev/null
grep -q "37 converted: 5 f16, 32 q8_0" "$tmp/err" && ok || bad "verbose summary: $(cat "$tmp/err")"
[ "$(wc -c <"$tmp/s_q8_0.gguf")" -lt "$(wc -c <"$tmp/s.gguf")" ] && ok || bad "q8_0 is not smaller"
# Back to f32 from q8_0, and straight from the checkpoint to q8_0.
silent "q8_0 to f32" "$dyad" convert "$tmp/s_q8_0.gguf" "$tmp/back.gguf" --type f32
generates "q8_0 back to f32" "$tmp/back.gguf"
silent "llama2.c to q8_0" "$dyad" convert "$bin" "$tmp/d.gguf" --tokenizer "$tok" --type q8_0
check "llama2.c→q8_0 equals llama2.c→f32→q8_0" "$tmp/s_q8_0.gguf" "$tmp/d.gguf"

# ---- gen-model: every type loads and generates; the seed decides the bytes.
for t in f32 f16 q8_0 q4_0 q4_k q6_k; do
  silent "gen-model tiny $t" "$dyad" gen-model --shape tiny --type "$t" -o "$tmp/tiny_$t.gguf"
  generates "gen-model tiny $t" "$tmp/tiny_$t.gguf"
done
"$dyad" gen-model --shape tiny --type q4_k -o "$tmp/t1.gguf" --threads 1
check "gen-model: same seed, any thread count, same file" "$tmp/tiny_q4_k.gguf" "$tmp/t1.gguf"
"$dyad" gen-model --shape tiny --type q4_k -o "$tmp/t2.gguf" --seed 2
cmp -s "$tmp/t1.gguf" "$tmp/t2.gguf" && bad "gen-model: --seed changes nothing" || ok
# 15m: dim 288 does not fit q4_k's 256-blocks; those matrices fall back to q8_0.
silent "gen-model 15m q4_k" "$dyad" gen-model --shape 15m --type q4_k -o "$tmp/m15.gguf"
generates "gen-model 15m q4_k" "$tmp/m15.gguf"
# A random model converts like any GGUF.
silent "convert generated" "$dyad" convert "$tmp/tiny_f16.gguf" "$tmp/tq.gguf" --type q6_k
generates "generated f16 → q6_k" "$tmp/tq.gguf"

# ---- bad input: a message naming the file, a non-zero exit, no output left behind.
expect_fail "missing input" 1 "$tmp/nope.bin" "$dyad" convert "$tmp/nope.bin" "$tmp/o1.gguf" --tokenizer "$tok"
head -c 100000 "$bin" >"$tmp/cut.bin"
expect_fail "truncated checkpoint" 1 "cut.bin" "$dyad" convert "$tmp/cut.bin" "$tmp/o2.gguf" --tokenizer "$tok"
head -c 3000 "$tmp/s.gguf" >"$tmp/cut.gguf"
expect_fail "truncated gguf" 1 "cut.gguf: offset" "$dyad" convert "$tmp/cut.gguf" "$tmp/o3.gguf"
head -c 3000 "$tok" >"$tmp/cut_tok.bin"
expect_fail "truncated tokenizer" 1 "cut_tok.bin" "$dyad" convert "$bin" "$tmp/o4.gguf" --tokenizer "$tmp/cut_tok.bin"
expect_fail "checkpoint without tokenizer" 2 "--tokenizer" "$dyad" convert "$bin" "$tmp/o5.gguf"
expect_fail "tokenizer with a gguf" 2 "--tokenizer" "$dyad" convert "$tmp/s.gguf" "$tmp/o6.gguf" --tokenizer "$tok"
expect_fail "unknown type" 2 "q3_x" "$dyad" convert "$tmp/s.gguf" "$tmp/o7.gguf" --type q3_x
expect_fail "missing OUT" 2 "IN and OUT" "$dyad" convert "$tmp/s.gguf"
expect_fail "unwritable output" 1 "$tmp/no/dir/o.gguf" "$dyad" convert "$tmp/s.gguf" "$tmp/no/dir/o.gguf"
expect_fail "gen-model unknown shape" 2 "7b" "$dyad" gen-model --shape 7b -o "$tmp/o8.gguf"
expect_fail "gen-model without -o" 2 "-o" "$dyad" gen-model --shape tiny
expect_fail "gen-model bad seed" 2 "--seed" "$dyad" gen-model --shape tiny --seed x -o "$tmp/o9.gguf"
expect_fail "gen-model missing vocab" 1 "$tmp/nov.gguf" "$dyad" gen-model --shape tiny --vocab "$tmp/nov.gguf" -o "$tmp/o10.gguf"
printf 'GGUF\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00' >"$tmp/empty.gguf"
expect_fail "gen-model vocab without tokens" 1 "tokenizer.ggml.tokens" "$dyad" gen-model --shape tiny --vocab "$tmp/empty.gguf" -o "$tmp/o11.gguf"
leftovers=$(ls "$tmp" | grep -E '^o[0-9]+\.gguf|\.tmp$' || true)
[ -z "$leftovers" ] && ok || bad "failed runs left files: $leftovers"
# A failure keeps an existing output as it was.
echo old >"$tmp/keep.gguf"
set +e; "$dyad" convert "$tmp/cut.gguf" "$tmp/keep.gguf" 2>/dev/null; set -e
[ "$(cat "$tmp/keep.gguf")" = old ] && ok || bad "a failed convert clobbered its output"

finish
