#!/usr/bin/env bash
# cli_drift_trace.sh DYAD SOURCE_DIR — bench/drift_trace.py, the drifting workload: a small
# trace at a target rate has that many arrivals inside the duration, each phase's lengths where
# its distribution puts them (conv: the Azure row's own, scaled; long_prompt and long_answer:
# disjoint prompt and answer bands), within the caps, one new hash id per 512-token block; the
# same seed gives the same bytes and another seed other long-phase lengths; bad flags and a bad
# CSV fail naming the flag or FILE:LINE; and `dyad sim run --trace` replays it. Skipped (77)
# without python3.
set -euo pipefail
dyad=$1 src=$2
if ! command -v python3 >/dev/null; then echo "SKIP: python3 is not installed"; exit 77; fi
source "$(dirname "$0")/shell_helpers.sh"
gen() { python3 "$src/bench/drift_trace.py" "$@"; }
csv=$src/bench/data/azure2023_conv.csv

# 3 phases of 10 s, repeated over 45 s (conv again from 30 s, long_prompt from 40 s), 2 req/s.
gen --rate 2 --phases conv:10,long_prompt:10,long_answer:10 --duration 45 --seed 3 \
    -o "$tmp/a.jsonl" 2>"$tmp/a.err"
python3 - "$tmp/a.jsonl" "$csv" <<'PY' && ok || bad "trace content: $(head -c 300 "$tmp/a.jsonl")"
import csv, json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
azure = list(csv.DictReader(open(sys.argv[2])))
def phase(ms):
    return ["conv", "long_prompt", "long_answer"][int(ms // 10000) % 3]
ts = [r["timestamp"] for r in rows]
assert len(rows) == 90, len(rows)
assert ts[0] == 0 and ts == sorted(ts) and ts[-1] < 45000 and all(type(t) is int for t in ts)
by = {p: [r for r in rows if phase(r["timestamp"]) == p] for p in ("conv", "long_prompt", "long_answer")}
assert all(by.values()) and any(40000 <= t for t in ts) and any(30000 <= t < 40000 for t in ts)
# conv: the Azure rows' own lengths x 1/8 (the CSV is in time order; rows follow it)
conv = [(i, r) for i, r in enumerate(rows) if phase(r["timestamp"]) == "conv"]
for i, r in conv:
    a = azure[i]
    assert r["input_length"] == min(384, max(1, round(int(a["ContextTokens"]) / 8))), (i, r, a)
    assert r["output_length"] == min(128, max(1, round(int(a["GeneratedTokens"]) / 8))), (i, r, a)
# the long phases: bands at the quartiles, disjoint
lp, la = by["long_prompt"], by["long_answer"]
assert min(r["input_length"] for r in lp) > max(r["input_length"] for r in la)
assert max(r["output_length"] for r in lp) < min(r["output_length"] for r in la)
ins = sorted(int(a["ContextTokens"]) for a in azure)
q75 = ins[int(0.75 * (len(ins) - 1))]
assert all(r["input_length"] >= round(q75 / 8) for r in lp)
assert all(1 <= r["input_length"] <= 384 and 1 <= r["output_length"] <= 128 for r in rows)
assert max(r["input_length"] for r in lp) == 384  # the cap binds on the longest prompts
ids = [h for r in rows for h in r["hash_ids"]]
assert all(len(r["hash_ids"]) == math.ceil(r["input_length"] / 512) for r in rows)
assert ids == list(range(1, len(ids) + 1))
PY
grep -q "90 requests in 45 s" "$tmp/a.err" && grep -q "long_answer" "$tmp/a.err" && ok || bad "summary: $(cat "$tmp/a.err")"

# Deterministic: the same seed, the same bytes; another seed, other long-phase draws but the
# same arrivals and conv lengths.
gen --rate 2 --phases conv:10,long_prompt:10,long_answer:10 --duration 45 --seed 3 2>/dev/null >"$tmp/b.jsonl"
cmp -s "$tmp/a.jsonl" "$tmp/b.jsonl" && ok || bad "same seed, different trace"
gen --rate 2 --phases conv:10,long_prompt:10,long_answer:10 --duration 45 --seed 4 -o "$tmp/c.jsonl" 2>/dev/null
cmp -s "$tmp/a.jsonl" "$tmp/c.jsonl" && bad "another seed, same trace" || ok
python3 -c "
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]; c = [json.loads(l) for l in open(sys.argv[2])]
same = [x['timestamp'] for x in a] == [x['timestamp'] for x in c]
conv = all(x == y for x, y in zip(a, c) if x['timestamp'] < 10000)
sys.exit(0 if same and conv else 1)" "$tmp/a.jsonl" "$tmp/c.jsonl" && ok || bad "seed changes arrivals or conv"

# --time-scale 2 halves the rate of the same rows; --offset starts later in the CSV.
gen --time-scale 2 --duration 20 --phases conv:20 -o "$tmp/t2.jsonl" 2>/dev/null
gen --time-scale 1 --duration 10 --phases conv:20 -o "$tmp/t1.jsonl" 2>/dev/null
python3 -c "
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]; b = [json.loads(l) for l in open(sys.argv[2])]
ok = len(a) == len(b) > 0 and all(abs(x['timestamp'] - 2 * y['timestamp']) <= 1 and x['input_length'] == y['input_length'] for x, y in zip(a, b))
sys.exit(0 if ok else 1)" "$tmp/t2.jsonl" "$tmp/t1.jsonl" && ok || bad "time scale"
gen --offset 600 --duration 10 --phases conv:10 -o "$tmp/off.jsonl" 2>/dev/null
[ -s "$tmp/off.jsonl" ] && ! cmp -s <(head -3 "$tmp/off.jsonl") <(head -3 "$tmp/t1.jsonl") && ok || bad "offset"

# Bad flags (exit 2, the flag named) and bad files (exit 1, FILE:LINE named).
expect_fail "bad phase name" 2 "--phases" gen --phases conv:10,warm:5
expect_fail "bad phase seconds" 2 "SECONDS and SCALE must be numbers > 0" gen --phases conv:0
expect_fail "bad phase scale" 2 "SECONDS and SCALE must be numbers > 0" gen --phases conv:10:0

# a phase's own scale replaces --length-scale: the same rows, twice the lengths
gen --rate 2 --phases conv:10 --duration 10 --length-scale 0.125 -o "$tmp/s1.jsonl" 2>/dev/null
gen --rate 2 --phases conv:10:0.25 --duration 10 --length-scale 0.125 -o "$tmp/s2.jsonl" 2>/dev/null
python3 - "$tmp/s1.jsonl" "$tmp/s2.jsonl" "$csv" <<'PY' && ok || bad "a phase's scale"
import csv, json, sys
one, two = ([json.loads(l) for l in open(f)] for f in sys.argv[1:3])
azure = list(csv.DictReader(open(sys.argv[3])))
assert len(one) == len(two) == 20
for i, (a, b) in enumerate(zip(one, two)):
    assert a["timestamp"] == b["timestamp"]
    assert b["input_length"] == min(384, max(1, round(int(azure[i]["ContextTokens"]) / 4)))
PY
expect_fail "rate and time scale" 2 "not allowed with" gen --rate 1 --time-scale 2
expect_fail "bad rate" 2 "--rate" gen --rate -1
expect_fail "bad cap" 2 "--max-input" gen --max-input 0
expect_fail "bad band" 2 "--band" gen --band 0.7
expect_fail "too many rows" 1 "needs 100000 rows" gen --rate 100 --duration 1000
expect_fail "missing csv" 1 "$tmp/none.csv: cannot open" gen --csv "$tmp/none.csv"
printf 'TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.5,30,4\n2023-11-16 18:15:47,-3,4\n' >"$tmp/bad.csv"
expect_fail "bad count" 1 "$tmp/bad.csv:3: ContextTokens" gen --csv "$tmp/bad.csv"
printf 'TIMESTAMP,ContextTokens,GeneratedTokens\n11/16/2023,30,4\n' >"$tmp/badt.csv"
expect_fail "bad time" 1 "$tmp/badt.csv:2: TIMESTAMP" gen --csv "$tmp/badt.csv"
printf 'TIMESTAMP,Tokens\n' >"$tmp/badh.csv"
expect_fail "bad header" 1 "$tmp/badh.csv:1: the header lacks ContextTokens, GeneratedTokens" gen --csv "$tmp/badh.csv"

# dyad reads it: the simulator replays every row at its time, with its lengths.
"$dyad" sim run --cost "$src/sim/costs/h100-llama3.1-8b-fp8.json" --prefill-workers 1 \
    --decode-workers 1 --trace "$tmp/a.jsonl" --concurrency 256 --json >"$tmp/sim.json"
python3 -c "
import json, sys
r = json.load(open(sys.argv[1])); rows = [json.loads(l) for l in open(sys.argv[2])]
ok = r['completed'] == len(rows) and r['failed'] == 0 and r['load']['mode'] == 'trace replay'
ok = ok and r['input_tokens'] == sum(x['input_length'] for x in rows)
ok = ok and r['output_tokens'] == sum(x['output_length'] for x in rows) and r['duration_s'] > 44
sys.exit(0 if ok else 1)" "$tmp/sim.json" "$tmp/a.jsonl" && ok || bad "sim run: $(head -c 400 "$tmp/sim.json")"
finish
