#!/usr/bin/env bash
# bench/env_header.sh [TEXT...] — the one header line every benchmark log starts with: the
# date, the source tree (`git describe --always --dirty`), the CPU model, its core count,
# the kernel release and the load average before the run, then TEXT (what is measured).
# Shell scripts source it and call dy_env_header; bench/benchlib.py runs it, so the Python
# benchmarks print the same line. Run alone, it prints the line.
dy_env_header() {
  local root tree cpu
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  tree=$(git -C "$root" describe --always --dirty 2>/dev/null || echo "no git")
  cpu=$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo 2>/dev/null | head -1)
  echo "# $(date -u +%FT%TZ), tree $tree, CPU ${cpu:-unknown}, $(nproc) cores, kernel $(uname -r)," \
       "load before: $(cut -d' ' -f1-3 /proc/loadavg)${*:+; $*}"
}
if [ "${BASH_SOURCE[0]}" = "$0" ]; then dy_env_header "$@"; fi
