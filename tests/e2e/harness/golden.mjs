// One Worker behind every wire API: each provider's loopback, and Workers AI through a stand-in
// `AI` binding (a Worker offering the binding's `run` over RPC, whose stream is the binding's
// documented one, since `wrangler dev` cannot reach the real one).

import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { anthropicLoopback, anthropicVars, geminiLoopback, ollamaLoopback, openaiLoopback, workersAiLoopback } from "./providers.mjs";
import { ROOT, freshPersistDir, startWorker } from "./worker.mjs";

/** The project's wrangler.toml with `bindings` (binding → entrypoint) bound to a stand-in Worker
 * (`standInMain`, whose `LOOPBACK_URL` is `loopbackUrl`), and the stand-in's own; named after
 * the loopback's port, so files running at once keep their own. The two configs' paths. */
export function standInConfigs(name, standInMain, loopbackUrl, bindings) {
  const dir = path.join(ROOT, "target", "e2e");
  mkdirSync(dir, { recursive: true });
  const tag = new URL(loopbackUrl).port;
  const main = path.join(dir, `wrangler-${name}-main-${tag}.toml`);
  const standIn = path.join(dir, `wrangler-${name}-${tag}.toml`);
  const service = `${name}-${tag}`;
  const own = readFileSync(path.join(ROOT, "wrangler.toml"), "utf8")
    .replace('main = "build/index.js"', 'main = "../../build/index.js"')
    .replace('directory = "web/dist"', 'directory = "../../web/dist"')
    .replace('migrations_dir = "migrations"', 'migrations_dir = "../../migrations"');
  const services = Object.entries(bindings).map(([binding, entrypoint]) => `\n[[services]]\nbinding = "${binding}"\nservice = "${service}"\nentrypoint = "${entrypoint}"\n`);
  writeFileSync(main, `${own}${services.join("")}`);
  writeFileSync(standIn, `name = "${service}"\nmain = "../../${standInMain}"\ncompatibility_date = "2026-10-15"\n\n[vars]\nLOOPBACK_URL = "${loopbackUrl}"\n`);
  return [main, standIn];
}

/** Starts the five loopbacks, by provider name. */
export async function everyLoopback() {
  const [anthropic, openai, gemini, ollama, workersAi] = await Promise.all([
    anthropicLoopback(), openaiLoopback(), geminiLoopback(), ollamaLoopback(), workersAiLoopback(),
  ]);
  return { anthropic, openai, gemini, ollama, "workers-ai": workersAi };
}

/** Starts `wrangler dev` with each provider pointed at its loopback in `loops`, then `vars`.
 * The Worker has `restart()`: the same Worker again on the same state (after `kill()`). */
export async function startEveryProvider(loops, vars = {}) {
  const options = {
    persistDir: freshPersistDir(),
    config: standInConfigs("ai-stand-in", "tests/e2e/workers_ai/stand_in.js", loops["workers-ai"].url, { AI: "Ai" }),
    migrate: ["DB"],
    vars: {
      ...anthropicVars(loops.anthropic),
      OPENAI_BASE_URL: `${loops.openai.url}/v1`, OPENAI_API_KEY: "sk-openai-loopback",
      GEMINI_BASE_URL: loops.gemini.url, GEMINI_API_KEY: "gemini-loopback",
      OLLAMA_BASE_URL: loops.ollama.url,
      ...vars,
    },
  };
  const worker = await startWorker(options);
  worker.restart = async () => Object.assign(worker, await startWorker(options));
  return worker;
}
