# shell_helpers.sh — what the command-line tests (tests/cli_*.sh) share; source it after `set
# -euo pipefail`. Gives $tmp (a scratch folder removed on exit), pass/fail counters, and:
#   ok                          count a passed check
#   bad NAME                    count a failed check and say which
#   expect_fail NAME CODE NEEDLE COMMAND...
#                               COMMAND must exit with CODE and say NEEDLE on stderr
#   finish                      print "N passed, N failed" and fail if any failed
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0; passes=0
ok() { passes=$((passes+1)); }
bad() { echo "FAIL: $*"; fails=$((fails+1)); }
expect_fail() {
  local name=$1 code=$2 needle=$3; shift 3
  set +e; "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?; set -e
  if [ $rc -eq "$code" ] && grep -qF -- "$needle" "$tmp/err"; then ok; else
    bad "$name (exit $rc, stderr: $(head -c 300 "$tmp/err"))"; fi
}
finish() {
  echo "$passes passed, $fails failed"
  [ "$fails" -eq 0 ]
}
