#!/usr/bin/env bash
# The layering of docs/DESIGN.md, checked on the #includes: a file may include headers of its
# own layer and of the layers below it, never above (the build checks the same on symbols with
# the layer_check_* links). Usage: cli_layers.sh DYAD_BIN SOURCE_DIR (DYAD_BIN unused).
set -euo pipefail
src="$2/src"
declare -A allowed=(
  [util]="util"
  [kv]="util kv"
  [engine]="util kv engine"
  [sched]="util kv sched"
  [route]="util kv route"
  [plan]="util kv sched route plan"
  [sim]="util kv sched route plan bench sim"
  [grammar]="util grammar"
  [serve]="util kv engine sched route plan grammar serve"
  [bench]="util bench"
  [cli]="util kv engine sched route plan grammar serve bench sim cli"
)
bad=0
for dir in "$src"/*/; do
  layer=$(basename "$dir")
  if [ -z "${allowed[$layer]+x}" ]; then
    echo "cli_layers: src/$layer is not a known layer (add it to tests/cli_layers.sh and docs/DESIGN.md)"
    bad=1
    continue
  fi
  while IFS=: read -r file _ inc; do
    dep=${inc%%/*}
    case " ${allowed[$layer]} " in
      *" $dep "*) ;;
      *) echo "cli_layers: ${file#"$2"/} includes \"$inc\": $layer may not use $dep"; bad=1 ;;
    esac
  done < <(grep -rnoE '#include "[a-z_]+/[^"]+"' "$dir" --include='*.[ch]' | sed -E 's/#include "([^"]+)"/\1/')
done
[ $bad = 0 ] && echo "1 passed, 0 failed"
exit $bad
