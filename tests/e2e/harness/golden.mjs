// One Worker behind every wire API: each provider's loopback, and Workers AI through a stand-in
// `AI` binding (a Worker offering the binding's `run` over RPC, whose stream is the binding's
// documented one, since `wrangler dev` cannot reach the real one).

import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { anthropicLoopback, anthropicVars, geminiLoopback, ollamaLoopback, openaiLoopback, workersAiLoopback } from "./providers.mjs";
import { ROOT, freshPersistDir, startWorker } from "./worker.mjs";

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
  // The project's wrangler.toml with `AI` bound to the stand-in Worker, and the stand-in's own;
  // named after this file's stand-in, so files running at once keep their own.
  const dir = path.join(ROOT, "target", "e2e");
  mkdirSync(dir, { recursive: true });
  const tag = new URL(loops["workers-ai"].url).port;
  const main = path.join(dir, `wrangler-golden-${tag}.toml`);
  const standIn = path.join(dir, `wrangler-ai-stand-in-${tag}.toml`);
  const service = `ai-stand-in-${tag}`;
  const own = readFileSync(path.join(ROOT, "wrangler.toml"), "utf8")
    .replace('main = "build/index.js"', 'main = "../../build/index.js"')
    .replace('directory = "web/dist"', 'directory = "../../web/dist"')
    .replace('migrations_dir = "migrations"', 'migrations_dir = "../../migrations"');
  writeFileSync(main, `${own}\n[[services]]\nbinding = "AI"\nservice = "${service}"\nentrypoint = "Ai"\n`);
  writeFileSync(standIn, `name = "${service}"\nmain = "../../tests/e2e/workers_ai/stand_in.js"\ncompatibility_date = "2026-10-15"\n\n[vars]\nLOOPBACK_URL = "${loops["workers-ai"].url}"\n`);
  const options = {
    persistDir: freshPersistDir(),
    config: [main, standIn],
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
