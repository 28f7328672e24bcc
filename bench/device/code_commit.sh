#!/usr/bin/env bash
# The commit of the code this checkout runs, for provenance: git's short HEAD (with "-dirty" when tracked files
# differ from it), or, in a copy without .git (the lent machine's), the one `slim_tree.sh on` wrote into
# bench/device/CARRIED_COMMIT before the carry; else "unknown".
#   bash bench/device/code_commit.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if head="$(git -C "$here" rev-parse --short HEAD 2>/dev/null)"; then
  git -C "$here" diff --quiet HEAD -- 2>/dev/null || head="$head-dirty"
  echo "$head"
elif [[ -s "$here/CARRIED_COMMIT" ]]; then
  head -n 1 "$here/CARRIED_COMMIT"
else
  echo unknown
fi
