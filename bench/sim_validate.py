#!/usr/bin/env python3
"""bench/sim_validate.py [DYAD] — issue 12's validation: the simulator (`dyad sim run` on a
cost model `dyad sim fit` measured here) against real runs (`dyad serve` under `dyad bench`),
same deployment, model, workload, load and seed, per configuration. docs/sim.md ("Validation
against real runs") reads its log.

  python3 bench/sim_validate.py > docs/bench/sim_validate.log

Configurations: every DEPLOYS deployment (2 cores in all: agg 1x2, agg 2x1, disagg 1+1, as
bench/disagg_sweep.py) x every WORKLOADS workload: fixed ISL/OSL cells of
docs/disaggregation-results.md ("512x128", "64x16"), ShareGPT lengths ("sharegpt": the table
bench/serve.sh uses, SHAREGPT, with SHAREGPT_ARGS), and a scaled replay of the Mooncake
conversation trace with its prefix sharing ("mooncake": bench/data/mooncake_conversation_300.jsonl,
--length-scale 1/32 so a 512-token trace block is one 16-token KV block).

The load: an open loop (Poisson, --rate) at FRACTION of the workload's capacity, --concurrency
256 as a cap only. The capacity is measured first, in the same sitting, for each workload: the
request rate one agg 1x2 server sustains in a closed loop of CAP_CONCURRENCY clients
(CAP_REQUESTS requests; the trace: its rows at that load for CAP_SECONDS). The same rate is
used for all three deployments. A fixed workload sends rate x RUN_SECONDS requests (at least
MIN_REQUESTS, at most REQUESTS); the trace replays its own arrival times, time-scaled so that
its mean rate is that same FRACTION of capacity.

The cost models: one `dyad sim fit` per engine thread count (1 and 2) on MODEL (with
TOKEN_OVERHEAD=1 each also gets the token overhead, `--serve-json`, of a short real run at
concurrency 1 on one aggregated worker of that thread count: SERVE_ISL x SERVE_OSL,
SERVE_REQUESTS requests), cached in COSTS (re-used when the file is there: delete it, or REFIT=1, for a new sitting). Both sides
get the same --kv-blocks KV_BLOCKS per worker, the same --slo (SLO_TTFT_MS, SLO_TPOT_MS) and
the model's context as the simulator's --ctx-len (read from the model's GGUF, as the server reads
it; CTX overrides it, and then must match the model, or the two sides refuse different prompts).

Prints the env header, per configuration a Markdown table (real, simulated, relative error
(sim - real) / real) of output tokens/s, TPOT p50, ITL p90, TTFT p50, TTFT p90 and goodput,
then one summary table and the median absolute error per metric against the issue's targets
(<= 10 % throughput and TPOT, <= 20 % TTFT p90). Each run's `--json` goes to the log too, on
lines starting '#json'. A benchmark: it asserts nothing. Standard library only.

  DEPLOYS="agg 1x2" WORKLOADS="64x16" MODEL=models/stories260K.gguf VOCAB=512 \\
    REQUESTS=8 MIN_REQUESTS=8 FIT_ARGS="--quick --reps 1" bench/sim_validate.py   # a try"""
import json
import os
import statistics
import struct
import subprocess

import benchlib
from benchlib import ROOT, dyad_http

DYAD = benchlib.dyad_binary()
DEFAULT_MODEL = os.path.join(ROOT, "models", "generated", "15m-q8_0-ctx4k.gguf")
MODEL = os.environ.get("MODEL", DEFAULT_MODEL)
CTX = int(os.environ["CTX"]) if os.environ.get("CTX") else None  # None: the model's own (main)
VOCAB = os.environ.get("VOCAB", "32000")
KV_BLOCKS = os.environ.get("KV_BLOCKS", "2048")
COSTS = os.environ.get("COSTS", "/tmp/dyad-sim-validate")
REFIT = os.environ.get("REFIT", "0") == "1"
FIT_ARGS = os.environ.get("FIT_ARGS", "").split()
# The token overhead: a real concurrency-1 run per thread count (TOKEN_OVERHEAD=1; docs/sim.md
# says why it is off by default).
TOKEN_OVERHEAD = os.environ.get("TOKEN_OVERHEAD", "0") == "1"
SERVE_ISL, SERVE_OSL = os.environ.get("SERVE_ISL", "128"), os.environ.get("SERVE_OSL", "32")
SERVE_REQUESTS = os.environ.get("SERVE_REQUESTS", "8")
SEED = os.environ.get("SEED", "1")
FRACTION = float(os.environ.get("FRACTION", "0.5"))
CAP_CONC = int(os.environ.get("CAP_CONCURRENCY", "8"))
CAP_REQ = int(os.environ.get("CAP_REQUESTS", "24"))
CAP_SECONDS = float(os.environ.get("CAP_SECONDS", "10"))
RUN_SECONDS = float(os.environ.get("RUN_SECONDS", "40"))
MIN_REQ = int(os.environ.get("MIN_REQUESTS", "24"))
MAX_REQ = int(os.environ.get("REQUESTS", "200"))
SLO_TTFT, SLO_TPOT = os.environ.get("SLO_TTFT_MS", "500"), os.environ.get("SLO_TPOT_MS", "20")
# The project's shared data sits beside the main checkout (../shared, as bench/serve.sh says it)
# or, from a worktree under wt/, two levels up.
SHARED = next((p for p in (os.path.join(ROOT, "..", "shared"), os.path.join(ROOT, "..", "..", "shared"))
               if os.path.isdir(p)), os.path.join(ROOT, "..", "shared"))
SHAREGPT = os.environ.get("SHAREGPT", os.path.join(SHARED, "traces",
                                                   "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"))
SHAREGPT_ARGS = os.environ.get("SHAREGPT_ARGS", "--max-isl 1024 --max-osl 128").split()
TRACE = os.environ.get("TRACE", os.path.join(ROOT, "bench", "data", "mooncake_conversation_300.jsonl"))
TRACE_LENGTH_SCALE = "0.03125"

# name: (serve's deployment options, engine threads per worker, the same for `dyad sim run`)
DEPLOYMENTS = {
    "agg 1x2": (["--workers", "1", "--threads-per-worker", "2"], 2, ["--workers", "1"]),
    "agg 2x1": (["--workers", "2", "--threads-per-worker", "1"], 1, ["--workers", "2"]),
    "disagg 1+1": (["--prefill-workers", "1", "--decode-workers", "1", "--threads-per-worker", "1"], 1,
                   ["--prefill-workers", "1", "--decode-workers", "1"]),
}
DEPLOYS = [d.strip() for d in os.environ.get("DEPLOYS", ",".join(DEPLOYMENTS)).split(",")]
CAPACITY_DEPLOY = "agg 1x2"
WORKLOADS = os.environ.get("WORKLOADS", "512x128 64x16 sharegpt mooncake").split()
# (label, how to read it from a bench report, issue 12's target on its median |error| or None)
METRICS = [
    ("output tok/s", lambda r: r["output_throughput"], 0.10),
    ("TPOT p50", lambda r: r["tpot_ms"]["p50"], 0.10),
    ("ITL p90", lambda r: r["itl_ms"]["p90"], None),
    ("TTFT p50", lambda r: r["ttft_ms"]["p50"], None),
    ("TTFT p90", lambda r: r["ttft_ms"]["p90"], 0.20),
    ("goodput", lambda r: r["goodput"]["request_throughput"], None),
]


def run(*args):
    out = subprocess.run([DYAD, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"dyad {' '.join(args)}: {out.stderr}")
    return out.stdout


def ensure_model():
    if not os.path.exists(MODEL) and MODEL == DEFAULT_MODEL:
        os.makedirs(os.path.dirname(MODEL), exist_ok=True)
        run("gen-model", "--shape", "15m", "--type", "q8_0", "--ctx", "4096", "-o", MODEL)
        print(f"# generated {MODEL}: dyad gen-model --shape 15m --type q8_0 --ctx 4096", flush=True)


def model_context(path):
    """The model's context length, the GGUF key <arch>.context_length: the served model refuses
    a prompt whose length plus max_tokens exceeds it, so the simulator's --ctx-len is this."""
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    ints = {4: "<I", 5: "<i", 10: "<Q", 11: "<q"}
    with open(path, "rb") as f:
        def read(fmt):
            return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]

        def string():
            return f.read(read("<Q")).decode("utf-8", "replace")

        def skip(kind):
            if kind == 8:
                string()
            elif kind == 9:
                item, n = read("<I"), read("<Q")
                for _ in range(n):
                    skip(item)
            else:
                f.read(sizes[kind])

        if f.read(4) != b"GGUF":
            raise RuntimeError(f"{path}: not a GGUF file")
        read("<I"), read("<Q")  # version, tensor count
        for _ in range(read("<Q")):
            key, kind = string(), read("<I")
            if key.endswith(".context_length") and kind in ints:
                return int(read(ints[kind]))
            skip(kind)
    raise RuntimeError(f"{path}: no context_length in its metadata")


def serve_report(threads, path):
    """A real run at concurrency 1 on one aggregated worker of MODEL at this thread count, for
    `dyad sim fit --serve-json`: what a token costs outside the engine step here."""
    server = dyad_http.Server(DYAD, "--model", MODEL, "--kv-blocks", KV_BLOCKS, "--workers", "1",
                              "--threads-per-worker", str(threads))
    try:
        r = benchlib.bench(DYAD, server, "--isl", SERVE_ISL, "--osl", SERVE_OSL, "--requests",
                           SERVE_REQUESTS, "--warmup", "1", "--concurrency", "1", "--vocab-size",
                           VOCAB, "--seed", f"7{SEED}")[-1]
    finally:
        server.stop()
    with open(path, "w") as f:
        f.write(json.dumps(r) + "\n")


def cost_model(threads):
    """The fitted cost model of MODEL at this thread count (with TOKEN_OVERHEAD=1, also the
    token overhead of a real concurrency-1 run): cached in COSTS, else fitted now."""
    path = os.path.join(COSTS, f"{os.path.basename(MODEL)}-{threads}t.json")
    if REFIT or not os.path.exists(path):
        os.makedirs(COSTS, exist_ok=True)
        serve = []
        if TOKEN_OVERHEAD:
            serve_path = path.replace(".json", "-serve.json")
            serve_report(threads, serve_path)
            serve = ["--serve-json", serve_path]
        run("sim", "fit", "-o", path, "--model", MODEL, "--threads", str(threads), *FIT_ARGS,
            *serve)
        how = "fitted now"
    else:
        how = "re-used (fitted earlier)"
    with open(path) as f:
        engine = json.load(f)["engine"]
    coeffs = ", ".join(f"{k} {engine.get(k, 0):.4g}" for k in (
        "fixed_ms", "prefill_ms_per_token", "prefill_ms_per_context", "decode_ms_per_seq",
        "decode_ms_per_context", "token_overhead_ms"))
    overhead = (f" --serve-json (a real run: --isl {SERVE_ISL} --osl {SERVE_OSL} --requests "
                f"{SERVE_REQUESTS} at concurrency 1 on --workers 1)" if TOKEN_OVERHEAD else "")
    print(f"# cost model {threads}t: {path}, {how} (dyad sim fit --model {MODEL} --threads "
          f"{threads} {' '.join(FIT_ARGS)}{overhead}): {coeffs}", flush=True)
    return path


def workload_args(name):
    if name == "sharegpt":
        return ["--lengths-csv", SHAREGPT, *SHAREGPT_ARGS]
    if name == "mooncake":
        return ["--trace", TRACE, "--length-scale", TRACE_LENGTH_SCALE]
    isl, osl = name.split("x")
    return ["--isl", isl, "--osl", osl]


def start(deploy):
    return dyad_http.Server(DYAD, "--model", MODEL, "--kv-blocks", KV_BLOCKS, *DEPLOYMENTS[deploy][0])


def trace_rate():
    """The trace excerpt's own mean arrival rate, requests/s."""
    stamps = [json.loads(line)["timestamp"] for line in open(TRACE) if line.strip()]
    return (len(stamps) - 1) / ((max(stamps) - min(stamps)) / 1000.0)


def capacity(workload):
    """Requests/s one CAPACITY_DEPLOY server sustains in a short closed loop of this workload."""
    bound = (["--duration", f"{CAP_SECONDS:g}"] if workload == "mooncake"
             else ["--requests", str(CAP_REQ)])
    server = start(CAPACITY_DEPLOY)
    try:
        r = benchlib.bench(DYAD, server, *workload_args(workload), "--vocab-size", VOCAB,
                           "--concurrency", str(CAP_CONC), *bound, "--seed", f"9{SEED}")[-1]
    finally:
        server.stop()
    return r["request_throughput"], r["completed"]


def load_args(workload, cap):
    """The open loop at FRACTION of capacity, and the words that say how it was set."""
    rate = FRACTION * cap
    if workload == "mooncake":
        scale = trace_rate() / rate
        return (["--time-scale", f"{scale:.4g}", "--concurrency", "256"],
                f"trace times x {scale:.4g} (mean {rate:.3g} req/s)")
    n = max(MIN_REQ, min(MAX_REQ, round(rate * RUN_SECONDS)))
    return (["--rate", f"{rate:.4g}", "--requests", str(n), "--concurrency", "256"],
            f"{rate:.4g} req/s Poisson, {n} requests")


def common(workload, load):
    return [*workload_args(workload), *load, "--vocab-size", VOCAB, "--seed", SEED,
            "--slo", f"ttft_ms={SLO_TTFT},tpot_ms={SLO_TPOT}", "--cores", "2"]


def real_run(deploy, args):
    server = start(deploy)
    try:
        return benchlib.bench(DYAD, server, *args)[-1]
    finally:
        server.stop()


def sim_run(deploy, cost, args):
    out = run("sim", "run", "--cost", cost, "--kv-blocks", KV_BLOCKS, "--ctx-len", str(CTX),
              *DEPLOYMENTS[deploy][2], *args, "--json")
    return json.loads(out)


def rel_error(sim, real):
    return (sim - real) / real if real else None


def pct(e):
    return "n/a" if e is None else f"{100 * e:+.1f} %"


def config_table(name, how, real, sim):
    print(f"\n### {name} ({how})\n")
    if (real["completed"], real["output_tokens"]) != (sim["completed"], sim["output_tokens"]):
        print(f"(requests and output tokens differ: real {real['completed']} / "
              f"{real['output_tokens']}, simulated {sim['completed']} / {sim['output_tokens']})\n")
    print("| metric | real | simulated | error |\n|---|---|---|---|")
    errors = []
    for label, get, _ in METRICS:
        e = rel_error(get(sim), get(real))
        errors.append(e)
        print(f"| {label} | {get(real):.4g} | {get(sim):.4g} | {pct(e)} |")
    print(f"\n{real['completed']} requests, {real['input_tokens']} input and "
          f"{real['output_tokens']} output tokens; goodput under ttft<={SLO_TTFT} ms, "
          f"tpot<={SLO_TPOT} ms: real {real['goodput']['met']}, simulated {sim['goodput']['met']} "
          f"met; simulated KV transfers: {sim['kv_transfer']['remote_prefills']} remote prefills",
          flush=True)
    return errors


def summary(rows):
    labels = [m[0] for m in METRICS]
    print("\n## Summary: relative error (sim - real) / real\n")
    print("| configuration | " + " | ".join(labels) + " |")
    print("|---|" + "---|" * len(labels))
    for name, errors in rows:
        print(f"| {name} | " + " | ".join(pct(e) for e in errors) + " |")
    cells = []
    for i, (label, _, target) in enumerate(METRICS):
        errs = [abs(errors[i]) for _, errors in rows if errors[i] is not None]
        med = statistics.median(errs) if errs else None
        verdict = "" if target is None or med is None else \
            (" (target <= %d %%: %s)" % (100 * target, "met" if med <= target else "missed"))
        cells.append(f"{label} {'n/a' if med is None else '%.1f %%' % (100 * med)}{verdict}")
    print(f"\nmedian |error| over {len(rows)} configurations: " + "; ".join(cells), flush=True)


def main():
    global CTX
    print(benchlib.env_header(f"sim vs real: {MODEL}, {', '.join(DEPLOYS)} x {' '.join(WORKLOADS)}, "
                              f"open loop at {FRACTION:g} x capacity, seed {SEED}"), flush=True)
    ensure_model()
    CTX = CTX or model_context(MODEL)
    print(f"# dyad: {benchlib.binary_id(DYAD)}; --kv-blocks {KV_BLOCKS} per worker, sim --ctx-len "
          f"{CTX}, vocab {VOCAB}, SLO ttft_ms={SLO_TTFT},tpot_ms={SLO_TPOT}", flush=True)
    costs = {t: cost_model(t) for t in sorted({DEPLOYMENTS[d][1] for d in DEPLOYS})}
    rows = []
    for workload in WORKLOADS:
        cap, n = capacity(workload)
        print(f"# capacity {workload}: {cap:.4g} req/s ({CAPACITY_DEPLOY}, closed loop of "
              f"{CAP_CONC} clients, {n} requests)", flush=True)
        load, how = load_args(workload, cap)
        for deploy in DEPLOYS:
            args = common(workload, load)
            real = real_run(deploy, args)
            sim = sim_run(deploy, costs[DEPLOYMENTS[deploy][1]], args)
            print("#json real " + json.dumps(real))
            print("#json sim " + json.dumps(sim))
            name = f"{deploy} · {workload}"
            rows.append((name, config_table(name, f"{how}; real run {real['duration_s']:.1f} s", real, sim)))
    summary(rows)


if __name__ == "__main__":
    main()
