#!/usr/bin/env bash
# demo.sh — builds dyad if needed, starts `dyad serve` on the bundled model (the default
# deployment: one prefill and one decode worker, conditional disaggregation), asks it for a
# story over the OpenAI API (a long prompt, so it is prefilled on the prefill worker and its
# KV shipped to the decode worker), prints the answer and where it ran, and stops the server.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x build/dyad ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  ninja -C build dyad >/dev/null
fi
log=$(mktemp)
./build/dyad serve --port 0 2>"$log" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 100); do grep -q "http://" "$log" && break; sleep 0.1; done
addr=$(sed -n 's/.*http:\/\/\([0-9.]*:[0-9]*\).*/\1/p' "$log" | head -1)
[ -n "$addr" ] || { cat "$log"; exit 1; }
head -1 "$log"
python3 - "$addr" <<'PY'
import json, sys, urllib.request
prompt = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the "
          "park with her friends. One day, her mom gave her a big red ball. ") * 3
body = {"model": "stories260K", "prompt": prompt, "max_tokens": 80, "temperature": 0.7, "seed": 42}
req = urllib.request.Request(f"http://{sys.argv[1]}/v1/completions", data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json"})
r = json.loads(urllib.request.urlopen(req, timeout=60).read())
c, d = r["choices"][0], r["dyad"]["choices"][0]
print(prompt[:90] + "..." + c["text"])
where = (f"prefilled on worker {d['prefill_worker']}, {d['kv_transfer']['bytes']} KV bytes moved in "
         f"{d['kv_transfer']['seconds'] * 1e3:.2f} ms" if d["prefill_worker"] is not None else "prefilled locally")
print(f"-- {r['usage']['prompt_tokens']} prompt + {r['usage']['completion_tokens']} generated tokens; "
      f"{where}; decoded on worker {d['worker']}")
PY
