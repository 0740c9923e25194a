#!/usr/bin/env bash
# `make bench`: the decoders natively, then what a turn costs the Worker in requests.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench --quiet --bench decode
[ -f build/index_bg.wasm ] || scripts/build.sh
. scripts/env.sh
echo
"$NODE" benches/turn_traffic.mjs
