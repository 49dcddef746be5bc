#!/usr/bin/env bash
# cli_router_opts.sh DYAD SOURCE_DIR — `dyad serve --router-tier-cost`: --help shows it with its
# default; good values parse (either tier, both, any order); a bad one (an unknown or repeated
# tier, a value that is not a number in [0, 1], nothing at all) exits 2 naming the flag, before
# any worker starts.
set -euo pipefail
dyad=$1
source "$(dirname "$0")/shell_helpers.sh"

"$dyad" serve --help >"$tmp/help"
grep -qF -- "--router-tier-cost host=F,disk=F" "$tmp/help" && ok || bad "--help lacks --router-tier-cost"
grep -qF "(default: host=0.1,disk=0.5)" "$tmp/help" && ok || bad "--help lacks the tier costs' default"

# Parsed before --help is honoured, so a good value exits 0 without serving.
for v in host=0.2 disk=1 host=0,disk=0 disk=0.25,host=0.05; do
  if "$dyad" serve --router-tier-cost "$v" --help >/dev/null 2>"$tmp/err"; then ok; else
    bad "good value $v refused: $(cat "$tmp/err")"; fi
done

for v in "" host host= host=x host=1.5 host=-0.1 host=nan device=0 ssd=0.5 host=0.1, \
         host=0.1,host=0.2 "host=0.1;disk=0.2"; do
  expect_fail "bad value '$v'" 2 "--router-tier-cost: '" "$dyad" serve --router-tier-cost "$v" --help
done
expect_fail "no value" 2 "--router-tier-cost" "$dyad" serve --router-tier-cost
finish
