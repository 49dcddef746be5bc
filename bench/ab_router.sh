#!/usr/bin/env bash
# bench/ab_router.sh A B [ROUNDS] — does binary B route as cheaply as binary A? Runs `dyad bench
# router --workers 64 --blocks 100000 --reps 20000` with A, then B, then A ... (ROUNDS rounds,
# default 5, alternated so drift on the machine hits both alike), prints every run's lines, then
# per line the median over the rounds of each binary's median µs and the ratio B/A.
# A benchmark: it asserts nothing.   bench/ab_router.sh old/dyad build/dyad 5
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/env_header.sh
a=$1; b=$2; rounds=${3:-5}
args=(bench router --workers 64 --blocks 100000 --reps 20000)
dy_env_header "A/B router cost: ${args[*]}; $rounds rounds alternated"
echo "# A = $a (sha256 $(sha256sum "$a" | cut -c1-12)), B = $b (sha256 $(sha256sum "$b" | cut -c1-12))"
out=$(mktemp); trap 'rm -f "$out"' EXIT
for r in $(seq "$rounds"); do
  for side in A B; do
    bin=$a; [ $side = B ] && bin=$b
    "$bin" "${args[@]}" | sed -n 's/^\(.*\):  *median *\([0-9.]*\) µs.*/\1|\2/p' |
      while IFS='|' read -r what us; do echo "$side|$r|$what|$us"; done >>"$out"
  done
done
sed 's/^/# run: /' "$out"
echo
echo "| line | A median µs | B median µs | B/A |"
echo "|---|---|---|---|"
python3 - "$out" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("|") for l in open(sys.argv[1])]
order = []
for side, _, what, _ in rows:
    if what not in order:
        order.append(what)
for what in order:
    med = {s: statistics.median(float(us) for sd, _, w, us in rows if sd == s and w == what)
           for s in "AB"}
    print(f"| {what.strip()} | {med['A']:.2f} | {med['B']:.2f} | {med['B'] / med['A']:.3f} |")
PY
