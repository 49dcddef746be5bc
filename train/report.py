#!/usr/bin/python3
"""report.py — the quality family's model cards and training plot, from what the runs left in
models/quality/ (SIZE.summary.json, SIZE.log.jsonl, copied there by make_models.sh) and, when
it exists, the quality bench's results (docs/bench/quality.json, bench/quality.py).

    /usr/bin/python3 train/report.py

Writes models/quality/README.md (one card per size: architecture, parameters, data generator and
seeds, the command, training time, held-out greedy accuracy per task in PyTorch and as served per
weight type) and docs/quality-training.svg (training loss against tokens, and held-out greedy
accuracy against steps per task, one line per size). Standard library only.
"""

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "train"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import tasks  # noqa: E402
from svgplot import Panel, Series, write_svg  # noqa: E402

QDIR = os.path.join(ROOT, "models", "quality")
SIZES = ["s", "m", "l"]


def load_runs():
    runs = {}
    for s in SIZES:
        path = os.path.join(QDIR, f"{s}.summary.json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            summary = json.load(f)
        with open(os.path.join(QDIR, f"{s}.log.jsonl")) as f:
            log = [json.loads(line) for line in f if line.strip()]
        runs[s] = (summary, log)
    return runs


def served_accuracy(bench):
    """{(size, type): ({task: greedy accuracy}, problems)} from the quality bench's points
    (bench/quality.py: greedy, f32 KV), if the file exists."""
    out = {}
    for p in (bench or {}).get("points", []):
        if p["method"] == "greedy" and p.get("kv_type", "f32") == "f32" and p["one_request"]:
            acc, _ = out.setdefault((p["size"], p["type"]), ({}, p["problems"]))
            acc[p["task"]] = p["accuracy"]
    return out


def card(s, summary, log, served):
    c = summary["config"]
    acc = summary["heldout_greedy_accuracy"]
    lines = [f"## `{s}`: {summary['params']:,} parameters", "",
             f"- **Architecture:** llama — dim {c['dim']}, {c['n_layers']} layers, {c['n_heads']} query heads / "
             f"{c['n_kv_heads']} KV heads (head size {c['dim'] // c['n_heads']}), SwiGLU FFN {c['hidden_dim']}, "
             f"context {c['seq_len']}, vocabulary {c['vocab_size']} (one token per character), output tied to the embedding.",
             f"- **Data:** `train/tasks.py`, the four task families mixed uniformly "
             f"({', '.join(tasks.TASK_NAMES)}); training stream seed {summary['seed']}; the first "
             f"{tasks.HELDOUT_MAX} held-out problems of each task (seed {tasks.HELDOUT_SEED}) never trained on.",
             f"- **Training:** {summary['steps']} steps of {summary['batch']} problems "
             f"({log[-1]['tokens']:,} tokens), AdamW peak rate {summary['lr']}, loss on answer tokens only; "
             f"{summary['train_seconds'] / 60:.1f} min on {summary['threads']} CPU threads; final loss {log[-1]['loss']:.4f}.",
             f"- **Command:** `{summary['command']}`, then `dyad convert model.bin {s}-f32.gguf --tokenizer tokenizer.bin` "
             "(and `--type q8_0|q4_0|q4_k`): `bash train/make_models.sh` does all of it.",
             "", f"Held-out greedy accuracy ({summary['heldout_problems']} problems per task):", "",
             "| weights | " + " | ".join(tasks.TASK_NAMES) + " |",
             "|---|" + "---|" * len(tasks.TASK_NAMES),
             "| PyTorch f32 (the trainer) | " + " | ".join(f"{acc[t]:.3f}" for t in tasks.TASK_NAMES) + " |"]
    for (size, typ), (a, problems) in sorted(served.items()):
        if size == s and a:
            lines.append(f"| `{s}-{typ}.gguf` served by dyad ({problems} problems per task, "
                         "docs/bench/quality.json) | " + " | ".join(
                             f"{a[t]:.3f}" if t in a else "–" for t in tasks.TASK_NAMES) + " |")
    return "\n".join(lines) + "\n"


def plot(runs, path):
    loss = Panel("training loss (answer tokens)", xlabel="tokens", ylabel="loss", xlog=True, ylog=True)
    panels = [loss]
    for s, (_, log) in runs.items():
        loss.series.append(Series(s, [(r["tokens"], r["loss"]) for r in log]))
    for t in tasks.TASK_NAMES:
        p = Panel(f"{t}: held-out greedy accuracy", xlabel="step", ylabel="accuracy", ymin=0, ymax=1)
        for s, (_, log) in runs.items():
            p.series.append(Series(s, [(r["step"], r["heldout_greedy"][t]) for r in log if "heldout_greedy" in r]))
        panels.append(p)
    write_svg(path, "The quality family's training (train/train.py)", panels, columns=3)


def main():
    runs = load_runs()
    if not runs:
        sys.exit(f"report.py: no SIZE.summary.json in {QDIR}: run train/make_models.sh first")
    bench_path = os.path.join(ROOT, "docs", "bench", "quality.json")
    bench = json.load(open(bench_path)) if os.path.exists(bench_path) else None
    served = served_accuracy(bench)
    head = ("# The quality family\n\nSmall llama models trained from scratch in this repository "
            "(`train/`) on four checkable task families, for the quality axis (docs/quality.md). "
            "Prompts are completions such as `add 12+345=`; the model writes the answer and ends "
            "its sequence. Each size comes as f32, q8_0 and q4_0 GGUF (q4_k for `l`, whose rows "
            "fit 256-element blocks); `SIZE.greedy.json` holds the trainer's greedy answers that "
            "tests/quality_engine_test.py holds the engine to, `SIZE.log.jsonl` the training log.\n\n")
    with open(os.path.join(QDIR, "README.md"), "w") as f:
        f.write(head + "\n".join(card(s, *runs[s], served) for s in runs))
    plot(runs, os.path.join(ROOT, "docs", "quality-training.svg"))


if __name__ == "__main__":
    main()
