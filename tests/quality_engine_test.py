#!/usr/bin/env python3
"""quality_engine_test.py DYAD SOURCE_DIR — the engine on trained weights.

For each size of the quality family (models/quality/), `dyad run` at temperature 0 must write
exactly the answer the trainer's own PyTorch forward pass wrote greedily for the first 20
held-out problems of every task (models/quality/SIZE.greedy.json, made by train/train.py when
the model was trained). Both sides decode 16 tokens at most. The f32 files must agree on every
problem. The quantized files must agree with PyTorch on at least QUANT_AGREEMENT of the
problems per size: rounding the weights moves some logits past their neighbours, and
docs/quality.md reports what that costs in accuracy. In the sanitizer build (the binary's path
says asan) the quantized files are checked for the s size only: the same kernels run for every
size, and each `dyad run` is several times slower there. Standard library only; prints
'N passed, N failed'."""
import json
import os
import subprocess
import sys

DYAD, SRC = sys.argv[1], sys.argv[2]
MAX_TOKENS = 16  # train/train.py's MAX_ANSWER
QUANT_AGREEMENT = {"q8_0": 0.9, "q4_0": 0.6, "q4_k": 0.6}
SIZES = ["s", "m", "l"]
ASAN = "asan" in os.path.abspath(DYAD).lower()
QUANT_SIZES = ["s"] if ASAN else SIZES


def engine_answer(model, prompt):
    out = subprocess.run([DYAD, "run", "--model", model, "--prompt", prompt, "--temperature", "0",
                          "--max-tokens", str(MAX_TOKENS), "--no-echo", "--threads", "1"],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise AssertionError(f"dyad run {model} {prompt!r}: exit {out.returncode}: {out.stderr}")
    return out.stdout[:-1] if out.stdout.endswith("\n") else out.stdout


def expected(size):
    with open(os.path.join(SRC, "models", "quality", f"{size}.greedy.json")) as f:
        return [(t, item["prompt"], item["output"]) for t, items in json.load(f).items() for item in items]


def agreement(size, qtype):
    model = os.path.join(SRC, "models", "quality", f"{size}-{qtype}.gguf")
    cases = expected(size)
    differ = [(t, p, want, got) for t, p, want in cases
              if (got := engine_answer(model, p)) != want]
    return 1 - len(differ) / len(cases), differ, len(cases)


def check_f32(size):
    share, differ, n = agreement(size, "f32")
    assert n >= 80, f"{size}: {n} expected answers, want 20 per task"
    assert not differ, f"{size}-f32: {len(differ)} of {n} differ from PyTorch, first {differ[:3]}"


def check_quantized(size, qtype):
    path = os.path.join(SRC, "models", "quality", f"{size}-{qtype}.gguf")
    if not os.path.exists(path):
        return None
    share, differ, n = agreement(size, qtype)
    print(f"  {size}-{qtype}: {n - len(differ)}/{n} greedy answers equal PyTorch's f32")
    assert share >= QUANT_AGREEMENT[qtype], f"{size}-{qtype}: only {share:.2f} agree, first {differ[:3]}"
    return share


def main():
    passed = failed = 0
    tests = [(f"{s}-f32 equals PyTorch", lambda s=s: check_f32(s)) for s in SIZES]
    tests += [(f"{s}-{q} close to PyTorch", lambda s=s, q=q: check_quantized(s, q))
              for s in QUANT_SIZES for q in QUANT_AGREEMENT]
    for name, fn in tests:
        try:
            fn()
            passed += 1
            print(f"ok   {name}")
        except AssertionError as e:
            failed += 1
            print(f"FAIL {name}: {e}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
