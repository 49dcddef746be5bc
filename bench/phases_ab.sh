#!/usr/bin/env bash
# bench/phases_ab.sh OLD NEW [MODEL] [ROUNDS] — where a step's time goes, for two builds side by
# side (docs/engine.md, "Where a step's time goes"): `dyad bench engine --phases` (a 512-token
# prefill and a B = 64 decode step, timed by phase) on MODEL (default the generated 110m q8_0)
# with 2 threads, OLD then NEW, ROUNDS times (default 3), each run started once the machine is
# idle; then the medians of the rounds per build and step. Log: docs/bench/phases.log (OUT).
# A benchmark: it prints figures and asserts nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
old=$1 new=$2
model=${3:-$here/../models/generated/110m-q8_0.gguf}
rounds=${4:-3}
out=${OUT:-$here/../docs/bench/phases.log}
[ -f "$model" ] || "$new" gen-model --shape 110m --type q8_0 -o "$model"
source "$here/env_header.sh"
runs=$(mktemp)
trap 'rm -f "$runs"' EXIT
{
  dy_env_header "bench/phases_ab.sh: bench engine --phases, 2 threads, $rounds rounds, OLD then NEW"
  echo "# old = $old, new = $new, model $(basename "$model")"
  for r in $(seq "$rounds"); do
    for arm in old new; do
      bin=$old; [ "$arm" = new ] && bin=$new
      busy=$(python3 -c "import sys; sys.path.insert(0, '$here'); import benchlib; print(f'{benchlib.wait_idle(0.10):.0%}')")
      echo "# round $r $arm: busy before $busy"
      echo "$arm $("$bin" bench engine --phases --json --reps 3 --threads 2 --model "$model")" | tee -a "$runs" | cut -d' ' -f2-
    done
  done
  python3 - "$runs" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    arm, doc = line.split(" ", 1)
    for ph in json.loads(doc)["phases"]:
        runs.setdefault((ph["step"], arm), []).append(ph)
print("\n| step | build | ms | matmul | attention | rest | sampling | outside matmul |")
print("|---|---|---|---|---|---|---|---|")
for step in ("prefill", "decode"):
    for arm in ("old", "new"):
        v = runs.get((step, arm), [])
        if not v:
            continue
        med = lambda k: statistics.median(x[k] for x in v)
        print(f"| {step} | {arm} | {med('ms'):.1f} | {med('matmul_ms'):.1f} | "
              f"{med('attention_ms'):.1f} | {med('rest_ms'):.1f} | {med('sampling_ms'):.1f} | "
              f"{100 * med('outside_matmul_share'):.1f} % |")
PY
} | tee "$out"
