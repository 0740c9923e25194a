#!/usr/bin/env bash
# Builds the Worker to wasm into build/ (worker-build; wasm-opt -Oz in release).
#   scripts/build.sh            release build
#   scripts/build.sh --dev      unoptimised, faster to build
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f .tools/wasm-env ] || scripts/setup.sh
# shellcheck disable=SC1091
. .tools/wasm-env
export WASM_BINDGEN_BIN="${WASM_BINDGEN_BIN:-$(command -v wasm-bindgen)}"
export ESBUILD_BIN="$PWD/node_modules/.bin/esbuild"
export WASM_OPT_BIN="$PWD/node_modules/.bin/wasm-opt"
mode=--release
[ "${1:-}" = "--dev" ] && mode=--dev
echo "==> worker-build $mode (the first build compiles std for wasm32: about 2 minutes)" >&2
worker-build "$mode" 2>&1 | awk '/Compiling/ { if (++n % 25 == 0) { printf "    ... %d crates compiled\n", n; fflush() } next } /Download/ { next } { print; fflush() }' >&2
ls -l build/index_bg.wasm 2>/dev/null | awk '{printf "==> build/index_bg.wasm: %d bytes\n", $5}' >&2 || true
