#!/usr/bin/env bash
# The Worker's gzipped size against its ceiling (scripts/checks/size-ceiling): a cold start
# downloads and compiles the whole file, so growth should be a decision, not an accident.
#   scripts/checks/size.sh [build/index_bg.wasm]
set -euo pipefail
cd "$(dirname "$0")/../.."
wasm=${1:-build/index_bg.wasm}
ceiling=$(grep -v '^#' scripts/checks/size-ceiling | tr -d '[:space:]')
size=$(gzip -9 -c "$wasm" | wc -c)
# The ceiling is of a build whose std is rebuilt with it (scripts/setup.sh, where rust-src is at
# hand); the prebuilt std it falls back to weighs about 27 KB more, which is not the code's doing.
if ! grep -q CARGO_UNSTABLE_BUILD_STD .tools/wasm-env 2>/dev/null; then
  ceiling=$((ceiling + 30000))
  echo "(the prebuilt std: the ceiling is raised by its 30 KB)" >&2
fi
if [ "$size" -gt "$ceiling" ]; then
  echo "$wasm: $size bytes gzipped, over the ceiling of $ceiling (scripts/checks/size-ceiling)." >&2
  echo "Make it smaller, or raise the ceiling in a commit that says why." >&2
  exit 1
fi
echo "$wasm: $size bytes gzipped, $((ceiling - size)) under the ceiling of $ceiling" >&2
