#!/usr/bin/env bash
# Everything: formatting, lints, the docs' links, the layer rule, import circles, the forms the
# Worker avoids for its size, the playground's types, native tests, the wasm build (and the
# playground's) and its gzipped size, end-to-end tests (the playground's in Chromium).
# The checks themselves are in scripts/check.sh (`make check` runs the fast ones).
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n==> %s\n' "$*" >&2; }

step "setup"
scripts/setup.sh --local-model

# fmt, clippy, cargo doc, the layers, import circles, banned forms, the Markdown's links, tsc,
# native tests: each runs even after another fails, and the failures are named together.
scripts/check.sh fmt clippy doc fast tsc test

step "wasm build"
scripts/build.sh

step "the Worker's gzipped size under its ceiling"
scripts/checks/size.sh build/index_bg.wasm

step "end-to-end tests (wasm under wrangler dev, loopback providers, local model)"
scripts/e2e.sh
