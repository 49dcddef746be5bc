#!/usr/bin/env bash
# cli_progress.sh DYAD SOURCE_DIR — the progress line of every long command (util/progress.h):
# with stderr in a file (a log, a pipe) not one byte of it — no '\r', no escape, no ETA — and the
# command's output as always; on a terminal (a pseudo-terminal from util-linux's `script`) the
# line is drawn in place ('\r', a percentage and the time left, or the time so far) and erased
# when the command is done, so that what is left once the lines are taken out is exactly the
# output the command writes to a file. Covers gen-model, convert, sim run, sim bench, bench
# engine, xfer, router, grammar, and the serving bench and bench agentic against a real server.
set -euo pipefail
dyad=$1 src=$2
source "$(dirname "$0")/shell_helpers.sh"
if ! command -v script >/dev/null; then
  echo "cli_progress: no script(1) (util-linux): skipped"
  exit 77
fi
models=$src/models
h100=$src/sim/costs/h100-llama3.1-8b-fp8.json
n=0

# plain NAME CMD...: succeeds, and its stderr (a file) holds no progress line.
plain() {
  local name=$1; shift
  n=$((n+1))
  if ! "$@" >"$tmp/plain$n.out" 2>"$tmp/plain$n.err"; then
    bad "$name: failed without a terminal: $(head -c 300 "$tmp/plain$n.err")"; return; fi
  if LC_ALL=C grep -qE $'\r|\033|ETA|elapsed' "$tmp/plain$n.err"; then
    bad "$name: progress text without a terminal: $(head -c 200 "$tmp/plain$n.err" | od -c | head -3)"
  else ok; fi
}

# on_tty NAME FILTER CMD...: run under a pseudo-terminal (stdout and stderr both on it). The
# progress line must be there, redrawn with '\r' and showing a percentage or ETA (or, with no
# total, the time so far), and erased at the end; once every line and erasure is taken out, what
# is left (FILTER, a python expression over it as `rest`, and the plain run's stdout as `want`)
# must hold.
on_tty() {
  local name=$1 filter=$2; shift 2
  local cmd
  cmd=$(printf '%q ' "$@")
  if ! script -qec "$cmd" /dev/null </dev/null >"$tmp/tty$n.out" 2>&1; then
    bad "$name: failed on a terminal: $(tail -c 300 "$tmp/tty$n.out")"; return; fi
  if python3 - "$tmp/tty$n.out" "$tmp/plain$n.out" "$filter" <<'EOF'; then ok; else bad "$name: $(tail -c 300 "$tmp/tty$n.out" | od -c | tail -8)"; fi
import re, sys
data = open(sys.argv[1], "rb").read().decode("utf-8", "replace")
want = open(sys.argv[2], "rb").read().decode("utf-8", "replace")
lines = re.findall(r"\r([^\r\n\x1b]+)\x1b\[K", data)
if not lines:
    sys.exit("no progress line")
if not any(re.search(r"\d+%|ETA \d+:\d\d|\d+:\d\d elapsed", l) for l in lines):
    sys.exit("no percentage, ETA or elapsed time in: %r" % lines[:3])
# After the last line drawn, an erasure, so nothing of it stays on the screen.
last = data.rfind(lines[-1] + "\x1b[K")
if "\r\x1b[K" not in data[last:]:
    sys.exit("the last line is never erased")
rest = re.sub(r"\r[^\r\n\x1b]*\x1b\[K", "", data).replace("\r\n", "\n")
if not eval(sys.argv[3]):
    sys.exit("the output is not clean: %r" % rest[:300])
EOF
}

same='rest == want'  # the command's output, byte for byte as without a terminal
both() { # NAME FILTER CMD...: plain, then on_tty
  local name=$1 filter=$2; shift 2
  plain "$name" "$@"
  on_tty "$name" "$filter" "$@"
}

# ---- writing models: bytes of the data section.
both "gen-model" '"" == want == rest' "$dyad" gen-model --shape tiny -o "$tmp/g.gguf" --threads 1
both "convert llama2.c" '"" == want == rest' "$dyad" convert "$models/stories260K.bin" "$tmp/c.gguf" \
  --tokenizer "$models/tok512.bin" --type q8_0
both "convert gguf --verbose" "rest.startswith('dyad convert: wrote') and 'ETA' not in rest" \
  "$dyad" convert "$models/stories260K.gguf" "$tmp/c2.gguf" --type q4_0 --verbose

# ---- the simulator: samples ended, the simulated time.
both "sim run" "$same" "$dyad" sim run --cost "$h100" --workers 2 --rate 20 --requests 40 \
  --isl 1024 --osl 64 --seed 3 --json
both "sim run sweep" "$same" "$dyad" sim run --cost "$h100" --workers 1 --requests 12 --isl 512 \
  --osl 32 --sweep concurrency=1,4
both "sim bench" "'== dyad sim bench' in rest and 'ETA' not in rest" "$dyad" sim bench --loops 1

# ---- in-process benchmarks (figures differ run to run: only the report's shape is compared).
both "bench engine" "rest.count('\"model\"') == 1 and rest.strip().endswith('}')" \
  "$dyad" bench engine --quick --reps 1 --json
both "bench xfer" "'TCP loopback' in rest and 'ETA' not in rest" "$dyad" bench xfer --mib 4 --reps 2
both "bench xfer --tiers" "'host -> KV cache' in rest and 'ETA' not in rest" \
  "$dyad" bench xfer --tiers --mib 2 --reps 1
both "bench router" "'apply a batch' in rest and 'ETA' not in rest" \
  "$dyad" bench router --reps 5000 --blocks 5000
both "bench grammar" "'per token' in rest and 'ETA' not in rest" \
  "$dyad" bench grammar --model "$models/stories260K.gguf" --json-object --tokens 600

# ---- the load generators, against a real server.
"$dyad" serve --port 0 --workers 1 2>"$tmp/serve.log" &
serve_pid=$!
trap 'kill $serve_pid 2>/dev/null; wait $serve_pid 2>/dev/null; rm -rf "$tmp"' EXIT
url=
for _ in $(seq 600); do
  url=$(grep -oE 'http://[0-9.]+:[0-9]+' "$tmp/serve.log" | head -1 || true)
  [ -n "$url" ] && break
  kill -0 $serve_pid 2>/dev/null || break
  sleep 0.05
done
if [ -z "$url" ]; then
  bad "dyad serve did not start: $(head -c 300 "$tmp/serve.log")"
else
  both "bench" "'== dyad bench: run' in rest and 'ETA' not in rest" \
    "$dyad" bench --url "$url" --requests 12 --concurrency 2 --isl 16 --osl 8 --warmup 2 \
    --vocab-size 512
  both "bench --duration" "'== dyad bench: run' in rest and 'ETA' not in rest" \
    "$dyad" bench --url "$url" --duration 1 --concurrency 2 --isl 16 --osl 8 --vocab-size 512
  both "bench agentic" "rest.startswith('agentic: 2 sessions') and 'ETA' not in rest" \
    "$dyad" bench agentic --url "$url" --sessions 2 --turns 2 --isl 16 --turn-tokens 8 --osl 4 \
    --tool-ms 20 --vocab-size 512
fi

finish
