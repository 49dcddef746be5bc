#!/usr/bin/env python3
"""bench/drift_trace.py — a drifting workload for issue 13's drift benchmark: the Azure LLM
inference trace's conversation arrivals, whose request lengths switch between phases, written
as a Mooncake JSONL trace that `dyad bench --trace` and `dyad sim run --trace` replay.

  python3 bench/drift_trace.py --rate 1 --phases conv:60,long_prompt:60,long_answer:60 \\
      --seed 1 -o drift.jsonl

Owns reading the Azure CSV, choosing and time-scaling its arrivals, the phase schedule and
each phase's length distribution, and writing the trace. Standard library only; the same
flags and CSV always give the same bytes. Run with --help for every flag; docs/plan.md
("A drifting workload") says what the drift benchmark does with it."""
import argparse
import bisect
import calendar
import csv
import json
import math
import os
import random
import sys

DEFAULT_CSV = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                           "azure2023_conv.csv")
PHASES = ("conv", "long_prompt", "long_answer")
BLOCK = 512  # Mooncake's hash_ids cover the prompt in blocks of this many tokens

EPILOG = f"""\
Arrivals. The CSV's rows, sorted by TIMESTAMP (ties keep file order), from --offset seconds after
its first row; the first chosen row arrives at 0 ms. Gaps between rows are multiplied by
--time-scale (2 = half the rate), or, with --rate R, by the one factor that puts --duration
half way between the K-th and the next row, K = round(R x --duration), so K rows arrive before
it (the trace from --offset must hold K + 1; rows closer than a millisecond at the edge may
shift one). Times are rounded to the millisecond; arrivals at or after --duration are dropped;
the trace also ends where the CSV does.

Phases. --phases NAME:SECONDS[:SCALE],... is a schedule in output time, from 0, repeated in
order for as long as --duration lasts (a SCALE, > 0, replaces --length-scale for that phase,
so the demand can drift in size as well as in shape). A request takes its phase's lengths:
  conv         its own row's ContextTokens and GeneratedTokens (the conversation distribution);
  long_prompt  a prompt drawn uniformly from the CSV's prompts at or above their (1 - --band)
               quantile, and an answer drawn from its answers at or below their --band
               quantile (long prompts, short answers: prefill-heavy);
  long_answer  a prompt from the prompts at or below the --band quantile and an answer from
               the answers at or above the (1 - --band) quantile (short prompts, long
               answers: decode-heavy).
The quantiles are over every row of the CSV; draws come from one generator seeded by --seed,
in arrival order. Every length is then multiplied by its phase's scale, rounded, and kept in
[1, --max-input] (prompts) or [1, --max-output] (answers). The defaults (1/8, 384, 128) keep
prompt + answer within the bundled model's 512-token context (models/stories260K.bin).

Output. One JSON object a line: {{"timestamp": ms (integer), "input_length", "output_length",
"hash_ids"}}, hash_ids one id per {BLOCK}-token prompt block (ceil(input_length / {BLOCK})),
each id new: the Azure trace records no prefix sharing, so the trace invents none. Replay it
at --length-scale 1 (its lengths are already scaled). A summary per phase goes to stderr.

Errors. A bad flag exits 2 naming it; a CSV that cannot be read, lacks a column or has a bad
row exits 1 naming FILE:LINE."""


class TraceError(Exception):
    """A problem with the input file or the request it makes; the message names it."""


def positive(text):
    v = float(text)
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"must be a number > 0, not {text!r}")
    return v


def non_negative(text):
    v = float(text)
    if not (math.isfinite(v) and v >= 0):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, not {text!r}")
    return v


def length_cap(text):
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, not {text!r}")
    return v


def band(text):
    v = float(text)
    if not (0 < v <= 0.5):
        raise argparse.ArgumentTypeError(f"must be in (0, 0.5], not {text!r}")
    return v


def phases(text):
    """'conv:60,long_prompt:30:2' -> [('conv', 60.0, None), ('long_prompt', 30.0, 2.0)]
    (None: --length-scale)."""
    out = []
    for part in text.split(","):
        name, sep, rest = part.strip().partition(":")
        secs, _, scale = rest.partition(":")
        if name not in PHASES or not sep:
            raise argparse.ArgumentTypeError(
                f"{part.strip()!r}: each phase is NAME:SECONDS[:SCALE], NAME one of "
                f"{', '.join(PHASES)}")
        try:
            out.append((name, positive(secs), positive(scale) if scale else None))
        except (ValueError, argparse.ArgumentTypeError):
            raise argparse.ArgumentTypeError(
                f"{part.strip()!r}: SECONDS and SCALE must be numbers > 0")
    return out


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="drift_trace.py", description=__doc__.split("\n\n")[0],
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", metavar="FILE", default=DEFAULT_CSV,
                    help="Azure trace CSV: TIMESTAMP,ContextTokens,GeneratedTokens (default "
                         "data/azure2023_conv.csv beside this script: the 2023 conversation "
                         "trace)")
    ap.add_argument("-o", "--output", metavar="FILE", default="-", help="trace to write (default -: stdout)")
    ap.add_argument("--phases", metavar="SPEC", type=phases, default=phases("conv:60,long_prompt:60,long_answer:60"),
                    help="NAME:SECONDS[:SCALE],... in order, repeated (default "
                         "conv:60,long_prompt:60,long_answer:60)")
    ap.add_argument("--duration", metavar="S", type=positive,
                    help="output seconds of arrivals (default: one pass of --phases)")
    ap.add_argument("--offset", metavar="S", type=non_negative, default=0.0,
                    help="start this many trace seconds after the CSV's first row (default 0)")
    scale = ap.add_mutually_exclusive_group()
    scale.add_argument("--time-scale", metavar="X", type=positive, default=1.0,
                       help="multiply the trace's gaps by this (default 1)")
    scale.add_argument("--rate", metavar="R", type=positive,
                       help="instead: the mean requests/s over --duration")
    ap.add_argument("--length-scale", metavar="Y", type=positive, default=0.125,
                    help="multiply every length by this (default 0.125)")
    ap.add_argument("--max-input", metavar="N", type=length_cap, default=384,
                    help="longest prompt, tokens (default 384)")
    ap.add_argument("--max-output", metavar="N", type=length_cap, default=128,
                    help="longest answer, tokens (default 128)")
    ap.add_argument("--band", metavar="SHARE", type=band, default=0.25,
                    help="share of the distribution a long or short phase draws from "
                         "(default 0.25: the top or bottom quarter)")
    ap.add_argument("--seed", metavar="N", type=int, default=1, help="seed of the draws (default 1)")
    a = ap.parse_args(argv)
    if a.duration is None:
        a.duration = sum(secs for _, secs, _ in a.phases)
    return a


def parse_time(text, where):
    """'2023-11-16 18:15:46.6805900' (or with 'T'), read as UTC -> seconds since the epoch."""
    try:
        date, _, clock = text.strip().replace("T", " ").partition(" ")
        y, mo, d = (int(x) for x in date.split("-"))
        h, mi, s = clock.split(":")
        whole, _, frac = s.partition(".")
        if not (0 <= int(h) < 24 and 0 <= int(mi) < 60 and 0 <= int(whole) < 61
                and (frac == "" or frac.isdigit())):
            raise ValueError
        secs = calendar.timegm((y, mo, d, int(h), int(mi), int(whole), 0, 0, 0))
        return secs + (int(frac) / 10 ** len(frac) if frac else 0.0)
    except (ValueError, OverflowError):
        raise TraceError(f"{where}: TIMESTAMP {text!r} is not YYYY-MM-DD HH:MM:SS[.fraction]")


def parse_count(text, column, where):
    t = text.strip()
    if not t.isdigit():
        raise TraceError(f"{where}: {column} {text!r} must be an integer >= 0")
    return int(t)


def read_azure(path):
    """[(seconds, prompt tokens, answer tokens)] sorted by time, ties in file order."""
    need = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
    try:
        f = open(path, newline="")
    except OSError as e:
        raise TraceError(f"{path}: cannot open: {e.strerror}")
    rows, col = [], None
    with f:
        lines = csv.reader(f)
        try:
            for fields in lines:
                where = f"{path}:{lines.line_num}"
                fields = [x.strip() for x in fields]
                if not any(fields):
                    continue
                if col is None:
                    missing = [c for c in need if c not in fields]
                    if missing:
                        raise TraceError(f"{where}: the header lacks {', '.join(missing)}")
                    col, width = [fields.index(c) for c in need], len(fields)
                    continue
                if len(fields) != width:
                    raise TraceError(f"{where}: {len(fields)} fields, the header has {width}")
                ts, isl, osl = (fields[i] for i in col)
                rows.append((parse_time(ts, where), parse_count(isl, need[1], where),
                             parse_count(osl, need[2], where)))
        except (csv.Error, UnicodeDecodeError) as e:
            raise TraceError(f"{path}:{lines.line_num}: not CSV text: {e}")
    if not rows:
        raise TraceError(f"{path}: no rows")
    rows.sort(key=lambda r: r[0])  # stable: ties keep file order
    return rows


def arrivals(rows, a):
    """[(output ms, row)] of the chosen rows, and the time scale applied."""
    start = rows[0][0] + a.offset
    chosen = rows[bisect.bisect_left([r[0] for r in rows], start):]
    if not chosen:
        raise TraceError(f"{a.csv}: no rows {a.offset:g} s or more after the first")
    t0 = chosen[0][0]
    scale = a.time_scale
    if a.rate is not None:
        k = round(a.rate * a.duration)
        if k < 1 or k >= len(chosen):
            raise TraceError(f"{a.csv}: --rate {a.rate:g} x --duration {a.duration:g} needs "
                             f"{k} rows and one more from --offset; it has {len(chosen)}")
        edge = (chosen[k - 1][0] + chosen[k][0]) / 2  # the k-th and the next row straddle it
        if edge == t0:
            raise TraceError(f"{a.csv}: its first {k + 1} rows from --offset arrive at once")
        scale = a.duration / (edge - t0)
    end_ms = round(a.duration * 1000)
    timed = [(round((r[0] - t0) * scale * 1000), r) for r in chosen]
    return [(ms, r) for ms, r in timed if ms < end_ms], scale


def phase_at(schedule, t):
    """The phase (name, seconds, scale) that time t falls in."""
    cycle = sum(secs for _, secs, _ in schedule)
    pos = math.fmod(t, cycle)
    for phase in schedule:
        if pos < phase[1]:
            return phase
        pos -= phase[1]
    return schedule[-1]  # rounding at the cycle's end


def bands(rows, share):
    """The prompts and answers at or above the (1 - share) and at or below the share quantile."""
    def split(values):
        v = sorted(values)
        low, high = v[int(share * (len(v) - 1))], v[int((1 - share) * (len(v) - 1))]
        return [x for x in v if x <= low], [x for x in v if x >= high]
    short_in, long_in = split(r[1] for r in rows)
    short_out, long_out = split(r[2] for r in rows)
    return {"long_prompt": (long_in, short_out), "long_answer": (short_in, long_out)}


def fit(tokens, scale, cap):
    return min(cap, max(1, round(tokens * scale)))


def requests(rows, a):
    """The trace's objects in arrival order, with each one's phase."""
    timed, scale = arrivals(rows, a)
    draw_from = bands(rows, a.band)
    rng = random.Random(a.seed)
    next_id = 1
    out = []
    for ms, (_, isl, osl) in timed:
        phase, _, own_scale = phase_at(a.phases, ms / 1000)
        if phase != "conv":
            prompts, answers = draw_from[phase]
            isl, osl = rng.choice(prompts), rng.choice(answers)
        k = own_scale if own_scale else a.length_scale
        isl, osl = fit(isl, k, a.max_input), fit(osl, k, a.max_output)
        blocks = -(-isl // BLOCK)
        out.append((phase, {"timestamp": ms, "input_length": isl,
                            "output_length": osl,
                            "hash_ids": list(range(next_id, next_id + blocks))}))
        next_id += blocks
    return out, scale


def summary(reqs, scale, a):
    lines = [f"drift_trace: {len(reqs)} requests in {a.duration:g} s, time scale {scale:.6g}, "
             f"lengths x {a.length_scale:g}, seed {a.seed}"]
    for name in PHASES:
        got = [o for p, o in reqs if p == name]
        if got:
            mi = sum(o["input_length"] for o in got) / len(got)
            mo = sum(o["output_length"] for o in got) / len(got)
            lines.append(f"  {name:12} {len(got):6} requests, mean input {mi:7.1f}, "
                         f"mean output {mo:6.1f}")
    return "\n".join(lines)


def main(argv):
    a = parse_args(argv)
    try:
        reqs, scale = requests(read_azure(a.csv), a)
    except TraceError as e:
        print(f"drift_trace.py: {e}", file=sys.stderr)
        return 1
    text = "".join(json.dumps(o, separators=(", ", ": ")) + "\n" for _, o in reqs)
    try:
        if a.output == "-":
            sys.stdout.write(text)
        else:
            with open(a.output, "w") as f:
                f.write(text)
    except OSError as e:
        print(f"drift_trace.py: {a.output}: cannot write: {e.strerror}", file=sys.stderr)
        return 1
    print(summary(reqs, scale, a), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
