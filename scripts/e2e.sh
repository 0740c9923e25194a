#!/usr/bin/env bash
# `make e2e T=<name>`: one end-to-end file against the wasm Worker, rebuilt first only when a
# source is newer than build/ (a stale build tests old code and passes or fails for nothing).
#   scripts/e2e.sh turn                          tests/e2e/turn.test.mjs
#   scripts/e2e.sh tests/e2e/turn.test.mjs ...   paths; no argument: every file
# A debug build (scripts/build.sh --dev, faster to build) is kept as one when it is remade.
# Files run three at a time (E2E_JOBS): each has its own Workers, providers and persist dirs,
# and most of a file's time is spent waiting on them.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --local-model
if ! state=$(python3 scripts/checks/build-state.py) && [ "$state" != "fresh debug" ]; then
  echo "==> build/ is $state: building" >&2
  if [[ $state == *debug* ]]; then scripts/build.sh --dev; else scripts/build.sh; fi
fi
files=()
for t in "$@"; do
  f=""
  for candidate in "$t" "tests/e2e/$t" "tests/e2e/$t.test.mjs"; do
    if [ -f "$candidate" ]; then f=$candidate; break; fi
  done
  [ -n "$f" ] || { echo "no end-to-end file tests/e2e/$t.test.mjs" >&2; exit 2; }
  files+=("$f")
done
[ ${#files[@]} -gt 0 ] || files=(tests/e2e/*.test.mjs)
. scripts/env.sh
"$NODE" --test --test-concurrency="${E2E_JOBS:-3}" "${files[@]}"
