#!/usr/bin/env bash
# Builds the Worker to wasm into build/ (worker-build; wasm-opt in release, its flags in
# Cargo.toml) and the playground page into web/dist/.
#   scripts/build.sh            release build
#   scripts/build.sh --dev      unoptimised, faster to build
#   scripts/build.sh --web      only the playground page (web/ → web/dist/, served as static assets)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f .tools/wasm-env ] || scripts/setup.sh
# shellcheck disable=SC1091
. .tools/wasm-env
export WASM_BINDGEN_BIN="${WASM_BINDGEN_BIN:-$(command -v wasm-bindgen)}"
export ESBUILD_BIN="$PWD/node_modules/.bin/esbuild"

# The playground page: TypeScript and React bundled by the pinned esbuild; nothing fetched at runtime.
build_web() {
  rm -rf web/dist && mkdir -p web/dist
  "$ESBUILD_BIN" web/src/main.tsx --bundle --minify --format=esm --target=es2022 --jsx=automatic \
    --define:process.env.NODE_ENV='"production"' --outfile=web/dist/app.js --log-level=warning
  cp web/index.html web/style.css web/favicon.svg web/dist/
  printf '==> web/dist: the playground, %d bytes of script gzipped\n' "$(gzip -9 -c web/dist/app.js | wc -c)" >&2
}
if [ "${1:-}" = --web ]; then build_web; exit 0; fi
build_web
export WASM_OPT_BIN="$PWD/node_modules/.bin/wasm-opt"
mode=--release
[ "${1:-}" = "--dev" ] && mode=--dev
# With std rebuilt (.tools/wasm-env), a release build's panics trap at once, without formatting a
# message (the isolate restarts either way; a trap's stack names `wasm-function[N]`, which
# `node scripts/wasm-function.mjs N` turns into the function's name), and carry no source locations.
if [ "$mode" = --release ] && [ -n "${CARGO_UNSTABLE_BUILD_STD:-}" ]; then
  export RUSTFLAGS="${RUSTFLAGS:-} -Zunstable-options -Cpanic=immediate-abort -Zlocation-detail=none"
elif [ "$mode" = --release ]; then
  echo "==> note: std is the prebuilt one (scripts/setup.sh found no rust-src): about 27 KB gzipped larger" >&2
fi
echo "==> worker-build $mode (the first build also compiles std for wasm32: about 3 minutes)" >&2
worker-build "$mode" 2>&1 | awk '/Compiling/ { if (++n % 25 == 0) { printf "    ... %d crates compiled\n", n; fflush() } next } /Download/ { next } { print; fflush() }' >&2
# The name section (function names, a fifth of the file) is kept for debugging in
# target/index_bg.debug.wasm and left out of what ships.
if [ "$mode" = --release ]; then
  cp build/index_bg.wasm target/index_bg.debug.wasm
  "$WASM_OPT_BIN" target/index_bg.debug.wasm --all-features --strip-debug --strip-producers -o build/index_bg.wasm
fi
printf '==> build/index_bg.wasm: %d bytes, %d gzipped (symbols: target/index_bg.debug.wasm)\n' \
  "$(wc -c < build/index_bg.wasm)" "$(gzip -9 -c build/index_bg.wasm | wc -c)" >&2
