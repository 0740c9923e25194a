#!/usr/bin/env bash
# `make bench`: the decoders natively, then what a turn costs the Worker in requests and CPU,
# a cold start, a warm request after V8 drops the baseline wasm code, the first token with D1
# far away, many turns at once, and what memory adds to a turn.
set -euo pipefail
cd "$(dirname "$0")/.."
# Figures from a stale build measure old code, and a debug build's (names kept, no wasm-opt)
# measure nothing: build the release from the sources first (scripts/checks/build-state.py).
if ! state=$(python3 scripts/checks/build-state.py); then
  echo "==> build/ is $state; make bench measures a fresh release build: building it" >&2
  scripts/build.sh
  state=$(python3 scripts/checks/build-state.py) || { echo "build/ is still $state: no bench" >&2; exit 1; }
fi
cargo bench --quiet --bench decode
cargo bench --quiet --bench estimate
. scripts/env.sh
echo
size() { printf '%s %d bytes (%d gzipped)' "$1" "$(wc -c < "$1")" "$(gzip -9 -c "$1" | wc -c)"; }
echo "Worker size: $(size build/index_bg.wasm), $(size build/index.js)"
[ -z "${BENCH_COMPARE:-}" ] || echo "Compared build: $(size "$BENCH_COMPARE/index_bg.wasm")"
"$NODE" benches/turn_traffic.mjs
"$NODE" benches/jit.mjs
"$NODE" benches/crossings.mjs
echo
"$NODE" benches/cpu.mjs
"$NODE" benches/cold_start.mjs
"$NODE" benches/flush.mjs
"$NODE" benches/d1_far.mjs
"$NODE" benches/many_turns.mjs
"$NODE" benches/memory.mjs
"$NODE" benches/traces.mjs
