#!/usr/bin/env python3
"""bench/structured.py [DYAD] — what a schema costs at decode: `dyad bench` at one concurrency
against `dyad serve` (one aggregated worker, so every step is a decode batch of that size),
without a response_format and with one (SCHEMA, default bench/data/schema-nested.json: a
nested object), alternating plain, schema, schema, plain ... for ROUNDS rounds on fresh
servers. Prints one row per run, then the medians of output tok/s and TPOT p50 for each and
their ratio schema/plain. Before the table, `dyad bench grammar` on the same model gives the
grammar's compile time, mask times and memory for SCHEMA and for GRAMMAR_SCHEMAS.

The model defaults to a generated 110m q8_0 (models/generated/110m-q8_0.gguf, made with
`dyad gen-model --shape 110m --type q8_0` when missing): random weights, so without a schema
its answers are random tokens and with one they are whatever the grammar allows; both run to
OSL tokens (ignore_eos) unless the grammar completes first. A benchmark: it asserts nothing.

  ROUNDS=3 CONC=16 ISL=64 OSL=128 REQUESTS=64 bench/structured.py > docs/bench/structured.log"""
import os
import statistics
import subprocess
import sys

import benchlib
from benchlib import ROOT

ROUNDS = int(os.environ.get("ROUNDS", "3"))
CONC = os.environ.get("CONC", "16")
ISL, OSL = os.environ.get("ISL", "64"), os.environ.get("OSL", "128")
REQUESTS = os.environ.get("REQUESTS", "64")
SCHEMA = os.environ.get("SCHEMA", os.path.join(ROOT, "bench", "data", "schema-nested.json"))
GRAMMAR_SCHEMAS = os.environ.get(
    "GRAMMAR_SCHEMAS", os.path.join(ROOT, "bench", "data", "schema-50-properties.json")).split()
THREADS = os.environ.get("THREADS", "2")


def model_path(dyad):
    return os.environ.get("MODEL") or benchlib.generated_model(dyad, "110m-q8_0")


def grammar_costs(dyad, model):
    print("# dyad bench grammar (a random walk of 20000 tokens through each grammar):")
    for schema in [SCHEMA, *GRAMMAR_SCHEMAS]:
        out = subprocess.run([dyad, "bench", "grammar", "--model", model, "--json-schema", schema],
                             capture_output=True, text=True, check=True)
        print(f"## {os.path.relpath(schema, ROOT)}")
        print(out.stdout, end="")


def run(dyad, model, fmt_file, seed):
    server, _ = benchlib.serve(dyad, "--model", model, "--workers", "1", "--threads-per-worker", THREADS)
    try:
        extra = ["--response-format", fmt_file] if fmt_file else []
        return benchlib.bench(dyad, server, "--concurrency", CONC, "--requests", REQUESTS,
                              "--warmup", CONC, "--isl", ISL, "--osl", OSL, "--vocab-size",
                              "32000", "--seed", str(seed), *extra)[-1]
    finally:
        server.stop()


def main():
    dyad = benchlib.dyad_binary()
    model = model_path(dyad)
    fmt_file = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"dyad-structured-{os.getpid()}.json")
    with open(SCHEMA) as f, open(fmt_file, "w") as out:
        out.write('{"type": "json_schema", "json_schema": {"name": "bench", "strict": true, '
                  f'"schema": {f.read()}}}}}')
    print(benchlib.env_header(f"structured outputs at decode: {benchlib.binary_id(dyad)}"))
    print(f"# model {os.path.relpath(model, ROOT)}, one aggregated worker, --threads-per-worker {THREADS}; "
          f"dyad bench --concurrency {CONC} --requests {REQUESTS} --isl {ISL} --osl {OSL}; "
          f"schema {os.path.relpath(SCHEMA, ROOT)}")
    grammar_costs(dyad, model)
    print()
    print("| run | format | output tok/s | TPOT p50 ms | mean output tokens |")
    print("|---|---|---|---|---|")
    results = {"plain": [], "schema": []}
    try:
        for k in range(ROUNDS):
            order = ["plain", "schema"] if k % 2 == 0 else ["schema", "plain"]
            for name in order:
                r = run(dyad, model, fmt_file if name == "schema" else None, 1000 + k)
                results[name].append(r)
                mean_out = r["output_tokens"] / max(1, r["completed"])
                print(f"| {k + 1} | {name} | {r['output_throughput']:.1f} | "
                      f"{r['tpot_ms']['p50']:.2f} | {mean_out:.1f} |", flush=True)
    finally:
        os.unlink(fmt_file)
    med = {n: (statistics.median(x["output_throughput"] for x in v),
               statistics.median(x["tpot_ms"]["p50"] for x in v)) for n, v in results.items()}
    print()
    print("| format | median output tok/s | median TPOT p50 ms |")
    print("|---|---|---|")
    for n, (tps, tpot) in med.items():
        print(f"| {n} | {tps:.1f} | {tpot:.2f} |")
    print(f"\nschema / plain output tok/s: {med['schema'][0] / med['plain'][0]:.3f}")


if __name__ == "__main__":
    main()
