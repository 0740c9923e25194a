#!/usr/bin/env bash
# `make bench`: the decoders natively, then what a turn costs the Worker in requests.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench --quiet --bench decode
[ -f build/index_bg.wasm ] || scripts/build.sh
. scripts/env.sh
echo
printf 'Worker size: index_bg.wasm %d bytes (%d gzipped), index.js %d bytes (%d gzipped)\n' \
  "$(wc -c < build/index_bg.wasm)" "$(gzip -9 -c build/index_bg.wasm | wc -c)" \
  "$(wc -c < build/index.js)" "$(gzip -9 -c build/index.js | wc -c)"
if [ -n "${BENCH_COMPARE:-}" ]; then
  printf 'Compared build: %s/index_bg.wasm %d bytes (%d gzipped)\n' "$BENCH_COMPARE" \
    "$(wc -c < "$BENCH_COMPARE/index_bg.wasm")" "$(gzip -9 -c "$BENCH_COMPARE/index_bg.wasm" | wc -c)"
fi
"$NODE" benches/turn_traffic.mjs
echo
"$NODE" benches/cpu.mjs
