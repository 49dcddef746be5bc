#!/usr/bin/env bash
# cli_plan_quality.sh DYAD SOURCE_DIR — `dyad plan quality` end to end: on a hand-made file it
# picks the cheapest configuration that reaches the accuracy (per task and for every task,
# pass@k only with --verifier, within a latency limit), exits 1 when none does; on the
# committed bench file its choice is the cheapest that reaches the target, computed here
# independently; bad files name the file and the field.
set -euo pipefail
dyad=$1 src=$2
source "$(dirname "$0")/shell_helpers.sh"
pq() { "$dyad" plan quality "$@"; }

point() { # model task method k accuracy core_seconds p90_ms
  printf '{"model":"%s","size":"%s","type":"f32","params":100000,"task":"%s","method":"%s",
    "k":%s,"one_request":true,"problems":100,"accuracy":%s,"prompt_tokens":12,
    "completion_tokens":4,"core_seconds":%s,"latency_ms_p50":1,"latency_ms_p90":%s}' \
    "$1" "${1%%-*}" "$2" "$3" "$4" "$5" "$6" "$7"
}
{
  echo '{"points":['
  point s-f32 add greedy 1 0.40 0.001 10; echo ,
  point s-f32 add majority_server 4 0.62 0.003 20; echo ,
  point s-f32 add pass 2 0.65 0.0018 15; echo ,
  point m-f32 add greedy 1 0.60 0.004 12; echo ,
  point s-f32 sort greedy 1 0.90 0.001 10; echo ,
  point s-f32 sort majority_server 4 0.95 0.003 20; echo ,
  point m-f32 sort greedy 1 0.99 0.004 12
  echo ']}'
} >"$tmp/q.json"

pq --file "$tmp/q.json" --accuracy 0.6 --task add >"$tmp/out"
grep -q "^choice: s-f32 (f32, 1e+05 parameters), majority_server@4: accuracy 0.620" "$tmp/out" && ok ||
  bad "add at 0.6: $(cat "$tmp/out")"
pq --file "$tmp/q.json" --accuracy 0.6 --task add --verifier >"$tmp/out"
grep -q "^choice: s-f32 .*pass@2" "$tmp/out" && ok || bad "with a verifier: $(cat "$tmp/out")"
pq --file "$tmp/q.json" --accuracy 0.6 >"$tmp/out"
grep -q "^choice: s-f32 .*majority_server@4: accuracy 0.620" "$tmp/out" && ok ||
  bad "every task: $(cat "$tmp/out")"
grep -q "3 configurations for task all" "$tmp/out" && ok || bad "pass@2 lacks sort: $(head -1 "$tmp/out")"
pq --file "$tmp/q.json" --accuracy 0.6 --task add --max-latency-ms 15 >"$tmp/out"
grep -q "^choice: m-f32 .*greedy" "$tmp/out" && ok || bad "latency limit: $(cat "$tmp/out")"
pq --file "$tmp/q.json" --accuracy 0.6 --task add --all >"$tmp/out"
[ "$(grep -c '^| [sm] |' "$tmp/out")" -eq 3 ] && ok || bad "--all rows: $(cat "$tmp/out")"
set +e; pq --file "$tmp/q.json" --accuracy 0.99 --task add >"$tmp/out"; rc=$?; set -e
[ $rc -eq 1 ] && ok || bad "none reaches it: exit $rc"
grep -q "none of the measured configurations reaches it" "$tmp/out" && ok || bad "none: $(cat "$tmp/out")"

# The committed bench file: the choice is the cheapest configuration that reaches the target.
real="$src/docs/bench/quality-s-f32-small.json"
for goal in add:0.2 sort:0.9 prog:0.1; do
  task=${goal%%:*} acc=${goal#*:}
  want=$(python3 - "$real" "$task" "$acc" <<'EOF'
import json, sys
pts = [p for p in json.load(open(sys.argv[1]))["points"]
       if p["task"] == sys.argv[2] and p["method"] != "pass" and p["accuracy"] >= float(sys.argv[3])]
best = min(pts, key=lambda p: (p["core_seconds"], -p["accuracy"]))
print("greedy" if best["method"] == "greedy" else f'{best["method"]}@{best["k"]}')
EOF
)
  pq --file "$real" --accuracy "$acc" --task "$task" >"$tmp/out" || true
  grep -q "^choice: .*, $want\( (k requests)\)\?: " "$tmp/out" && ok ||
    bad "real file, $task: want $want: $(head -3 "$tmp/out")"
done

# Bad input.
expect_fail "no file" 2 "--file: required" pq --accuracy 0.5
expect_fail "no accuracy" 2 "--accuracy: required" pq --file "$tmp/q.json"
expect_fail "accuracy range" 2 "--accuracy" pq --file "$tmp/q.json" --accuracy 1.5
expect_fail "missing file" 1 "$tmp/none.json" pq --file "$tmp/none.json" --accuracy 0.5
echo '{"points": [' >"$tmp/trunc.json"
expect_fail "truncated" 1 "trunc.json: line" pq --file "$tmp/trunc.json" --accuracy 0.5
echo '{"points": []}' >"$tmp/empty.json"
expect_fail "no points" 1 "points: must be a list" pq --file "$tmp/empty.json" --accuracy 0.5
sed 's/"accuracy":0.40/"accuracy":1.4/' "$tmp/q.json" >"$tmp/acc.json"
expect_fail "accuracy out of range" 1 "points[0].accuracy: 1.4 is outside [0, 1]" \
  pq --file "$tmp/acc.json" --accuracy 0.5
sed 's/"k":4,/"k":"4",/' "$tmp/q.json" >"$tmp/k.json"
expect_fail "k a string" 1 "points[1].k: missing or not a number" pq --file "$tmp/k.json" --accuracy 0.5
sed 's/"k":4,/"k":2.5,/' "$tmp/q.json" >"$tmp/k2.json"
expect_fail "k not whole" 1 "points[1].k: not a whole number" pq --file "$tmp/k2.json" --accuracy 0.5
sed 's/"one_request":true/"one_request":1/' "$tmp/q.json" >"$tmp/one.json"
expect_fail "one_request" 1 "points[0].one_request" pq --file "$tmp/one.json" --accuracy 0.5
sed 's/"method":"greedy"/"method":""/' "$tmp/q.json" >"$tmp/m.json"
expect_fail "empty method" 1 "points[0].method: empty" pq --file "$tmp/m.json" --accuracy 0.5
expect_fail "unknown task" 2 "has no points for 'mul'" pq --file "$tmp/q.json" --accuracy 0.5 --task mul
pq --help | grep -q "usage: dyad plan quality" && ok || bad "--help"
finish
