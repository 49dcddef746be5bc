#!/usr/bin/env python3
"""bench/ab_serve.py A B [MODEL] — does binary B serve as fast as binary A? Both serve the
same model in the default deployment (`dyad serve --model MODEL`: one prefill and one decode
worker); for each concurrency, `dyad bench` runs against A, then B, then B, then A ... (ROUNDS
rounds, the order flipped each round so drift on the machine hits both alike), each on a fresh server, with
fixed prompt and output lengths and a fixed request count. Prints one row per run, then the
medians of output tok/s, TTFT p50 and TPOT p50 per binary and their ratio B/A. The load
generator is A's `dyad bench` for both (BENCH=path picks another), so only the server differs.

MODEL defaults to a generated 110m q8_0 (models/generated/110m-q8_0.gguf, made with A's
`dyad gen-model --shape 110m --type q8_0` when missing). A benchmark: it asserts nothing.

  ROUNDS=3 CONCS="1 16" ISL=128 OSL=64 REQUESTS=32 bench/ab_serve.py old/dyad build/dyad
  SERVE_ARGS="--tokenizer models/tok512.bin" VOCAB_SIZE=512 ISL=32 OSL=16 REQUESTS=4 \
    bench/ab_serve.py build/dyad build/dyad models/stories260K.bin   (a quick check)"""
import os
import statistics
import sys

import benchlib

ROUNDS = int(os.environ.get("ROUNDS", "3"))
CONCS = [int(c) for c in os.environ.get("CONCS", "1 16").split()]
ISL, OSL = os.environ.get("ISL", "128"), os.environ.get("OSL", "64")
REQUESTS = os.environ.get("REQUESTS", "32")
VOCAB = os.environ.get("VOCAB_SIZE", "32000")  # stories260K: 512
SERVE_ARGS = os.environ.get("SERVE_ARGS", "").split()  # e.g. "--tokenizer models/tok512.bin"
METRICS = [("output tok/s", lambda r: r["output_throughput"]),
           ("TTFT p50 ms", lambda r: r["ttft_ms"]["p50"]),
           ("TPOT p50 ms", lambda r: r["tpot_ms"]["p50"])]


def model_path(a):
    if len(sys.argv) > 3:
        return sys.argv[3]
    return benchlib.generated_model(a, "110m-q8_0")


def run(binary, bench, model, conc, seed):
    server, _ = benchlib.serve(binary, "--model", model, *SERVE_ARGS)
    try:
        return benchlib.bench(bench, server, "--concurrency", str(conc), "--requests", REQUESTS,
                              "--warmup", str(conc), "--isl", ISL, "--osl", OSL,
                              "--vocab-size", VOCAB, "--seed", str(seed))[-1]
    finally:
        server.stop()


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    binaries = {"A": sys.argv[1], "B": sys.argv[2]}
    bench = os.environ.get("BENCH", binaries["A"])
    model = model_path(binaries["A"])
    print(benchlib.env_header(f"A/B serving, default deployment, ISL {ISL}, OSL {OSL}, {REQUESTS} "
                              f"requests a run, {ROUNDS} rounds alternated"))
    for label, path in binaries.items():
        print(f"# {label} = {benchlib.binary_id(path)}")
    print(f"# model {model} {' '.join(SERVE_ARGS)}; load generator {bench}")
    print("\n| concurrency | round | binary | " + " | ".join(m for m, _ in METRICS) + " |")
    print("|---|---|---|" + "---|" * len(METRICS))
    results = {}
    for conc in CONCS:
        for rnd in range(1, ROUNDS + 1):
            order = list(binaries.items())
            for label, path in (order if rnd % 2 else order[::-1]):
                # The same prompts for A and B within a round; fresh ones each round.
                r = run(path, bench, model, conc, seed=100 * rnd + conc)
                vals = [f(r) for _, f in METRICS]
                results.setdefault((conc, label), []).append(vals)
                print(f"| {conc} | {rnd} | {label} | " + " | ".join(f"{v:.4g}" for v in vals) + " |",
                      flush=True)
    print("\nmedians over the rounds:\n")
    print("| concurrency | metric | A | B | B/A |")
    print("|---|---|---|---|---|")
    for conc in CONCS:
        med = {lb: [statistics.median(col) for col in zip(*results[(conc, lb)])] for lb in binaries}
        for i, (name, _) in enumerate(METRICS):
            a, b = med["A"][i], med["B"][i]
            ratio = f"{b / a:.3f}" if a else "-"
            print(f"| {conc} | {name} | {a:.4g} | {b:.4g} | {ratio} |")


main()
