#!/usr/bin/env bash
# Everything: formatting, lints, the docs' links, the layer rule, the playground's types, native
# tests, the wasm build (and the playground's), end-to-end tests (the playground's in Chromium).
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n==> %s\n' "$*" >&2; }

step "setup"
scripts/setup.sh --local-model

step "cargo fmt --check"
cargo fmt --check

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --quiet --all-targets -- -D warnings

step "cargo doc: no broken links, none to private items"
RUSTDOCFLAGS="-D warnings" cargo doc --quiet --no-deps

step "layers: llm and agent never import the platform"
if grep -rnE '(^|[^_a-z])worker::|use worker\b|extern crate worker' src/llm src/agent; then
  echo "src/llm and src/agent must not use the worker crate" >&2
  exit 1
fi

step "edge: dependencies point one way (gateway → conversation → d1, platform)"
below_gateway="src/edge/conversation src/edge/spend src/edge/d1 src/edge/platform src/edge/protocol.rs"
below_conversation="src/edge/spend src/edge/d1 src/edge/platform src/edge/protocol.rs"
# shellcheck disable=SC2086
if grep -rn 'edge::gateway' $below_gateway || grep -rn 'edge::conversation' $below_conversation; then
  echo "nothing below the gateway imports it, nor below the conversation object" >&2
  exit 1
fi

step "playground types (tsc --noEmit -p web)"
node_modules/.bin/tsc -p web

step "native tests (cargo test)"
cargo test --quiet

step "wasm build"
scripts/build.sh

step "end-to-end tests (wasm under wrangler dev, loopback providers, local model)"
. scripts/env.sh
"$NODE" --test --test-concurrency=1 tests/e2e/*.test.mjs
