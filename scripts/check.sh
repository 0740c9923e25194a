#!/usr/bin/env bash
# `make check`: what can be checked without wasm or a browser, in minutes. Each check is written
# once, here; scripts/test.sh runs them too, by name, in its own order.
#   scripts/check.sh                  fmt clippy fast test (the loop while changing code)
#   scripts/check.sh STEP...          only those: fmt clippy doc layers cycles banned links tsc test
#                                     (fast = layers cycles banned links, a few seconds)
# It installs nothing: cargo and python3 are enough (tsc needs `make setup`'s node_modules).
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n==> %s\n' "$*" >&2; }

check_fmt() {
  step "cargo fmt --check"
  cargo fmt --check
}

check_clippy() {
  step "cargo clippy --all-targets -- -D warnings"
  cargo clippy --quiet --all-targets -- -D warnings
}

check_doc() {
  step "cargo doc: no broken links, none to private items"
  RUSTDOCFLAGS="-D warnings" cargo doc --quiet --no-deps
}

check_layers() {
  step "layers: llm and agent never import the platform"
  if grep -rnE '(^|[^_a-z])worker::|use worker\b|extern crate worker' src/llm src/agent; then
    echo "src/llm and src/agent must not use the worker crate" >&2
    exit 1
  fi
  step "edge: dependencies point one way (gateway → conversation → d1, platform)"
  local below_gateway="src/edge/conversation src/edge/spend src/edge/d1 src/edge/platform src/edge/protocol.rs"
  local below_conversation="src/edge/spend src/edge/d1 src/edge/platform src/edge/protocol.rs"
  # shellcheck disable=SC2086
  if grep -rn 'edge::gateway' $below_gateway || grep -rn 'edge::conversation' $below_conversation; then
    echo "nothing below the gateway imports it, nor below the conversation object" >&2
    exit 1
  fi
}

check_cycles() {
  step "no import circles between files (scripts/checks/cycles.py)"
  python3 scripts/checks/cycles.py
}

check_banned() {
  step "none of the forms the Worker avoids for its size (scripts/checks/banned.py)"
  python3 scripts/checks/banned.py
}

check_links() {
  step "the Markdown's relative links and anchors resolve (scripts/checks/links.py)"
  python3 scripts/checks/links.py
}

check_tsc() {
  step "playground types (tsc --noEmit -p web)"
  node_modules/.bin/tsc -p web
}

check_test() {
  step "native tests (cargo test)"
  cargo test --quiet
}

# Every step named runs, even after one fails, so one run shows everything to fix.
failed=()
run() {
  set +e
  (set -e; "check_$1")
  local status=$?
  set -e
  [ "$status" -eq 0 ] || failed+=("$1")
}

[ $# -gt 0 ] || set -- fmt clippy fast test
for name in "$@"; do
  case "$name" in
    fast) for check in layers cycles banned links; do run "$check"; done ;;
    fmt | clippy | doc | layers | cycles | banned | links | tsc | test) run "$name" ;;
    *) echo "scripts/check.sh: no step '$name'" >&2; exit 2 ;;
  esac
done
if [ ${#failed[@]} -gt 0 ]; then
  printf '\n==> failed: %s\n' "${failed[*]}" >&2
  exit 1
fi
