// A Worker served by Miniflare itself (the one wrangler depends on): one workerd process, no
// `wrangler dev` proxy in front, the Worker's wrangler.toml read by wrangler's own converter
// (bindings, D1, Durable Objects, rate limits), D1 migrations applied through the binding.

import fs from "node:fs";
import path from "node:path";
import { Log, LogLevel, Miniflare, convertV4MiniflareOptions } from "miniflare";
import { unstable_getMiniflareWorkerOptions } from "wrangler";
import { cpuMs, workerdsOf } from "./workerd.mjs";
import { ROOT, freshPersistDir } from "../tests/e2e/harness.mjs";

/**
 * Starts the Worker that `config` (a wrangler.toml) describes; `vars` override its [vars],
 * `main` its entry module (one bundled beforehand), `migrations` is a folder of D1 migrations,
 * `v8Flags` are passed to V8 (`--perf-basic-prof`: it lists the code it compiles in
 * /tmp/perf-<pid>.map), `imports` names the modules beside `main` that it imports.
 */
export async function startMiniflare({ config, vars = {}, persistDir, migrations, main: entry, inspectorPort, v8Flags, imports = [] }) {
  const { workerOptions, main: configured } = unstable_getMiniflareWorkerOptions(config);
  const running = new Set(workerdsOf(process.pid));
  const main = entry ?? configured;
  let log = "";
  // Miniflare reads V8's flags for workerd from this variable while it starts.
  const outside = process.env.MINIFLARE_WORKERD_V8_FLAGS;
  if (v8Flags !== undefined) process.env.MINIFLARE_WORKERD_V8_FLAGS = v8Flags;
  // wrangler's converter speaks Miniflare's v4 options; Miniflare converts them itself.
  const mf = new Miniflare(
    convertV4MiniflareOptions({
      ...workerOptions,
      // Static assets are served before a deployed Worker at no cost to it: leave them out.
      assets: undefined,
      // The Worker's modules as worker-build writes them: the glue and its wasm beside it (and
      // what `main` imports from beside it, when it wraps the glue).
      modulesRoot: path.dirname(main),
      modules: [
        { type: "ESModule", path: main },
        ...imports.map((f) => ({ type: "ESModule", path: path.join(path.dirname(main), f) })),
        ...fs.readdirSync(path.dirname(main)).filter((f) => f.endsWith(".wasm")).map((f) => ({ type: "CompiledWasm", path: path.join(path.dirname(main), f) })),
      ],
      bindings: { ...workerOptions.bindings, ...vars },
      resourcePersistencePath: persistDir,
      logRequests: false,
      inspectorPort,
      cf: false,
      log: new Log(LogLevel.WARN),
      // The Worker's console lines (the turn's log line among them).
      handleStructuredLogs: ({ message }) => (log += `${message}\n`),
    }),
  );
  let url;
  try {
    url = await mf.ready;
  } finally {
    if (outside === undefined) delete process.env.MINIFLARE_WORKERD_V8_FLAGS;
    else process.env.MINIFLARE_WORKERD_V8_FLAGS = outside;
  }
  // The workerd this instance started (one still shutting down from a previous one may linger).
  const pid = workerdsOf(process.pid).find((p) => !running.has(p));
  if (!pid) throw new Error("no new workerd process found under this Node process");
  // What starting took, the Worker's script evaluated (its wasm instantiated) and nothing run.
  const startupCpuMs = cpuMs(pid);
  if (migrations) {
    const db = await mf.getD1Database("DB");
    for (const file of fs.readdirSync(migrations).filter((f) => f.endsWith(".sql")).sort()) {
      await db.exec(fs.readFileSync(path.join(migrations, file), "utf8").replace(/--[^\n]*\n/g, "").replace(/\s*\n\s*/g, " "));
    }
  }
  return { url: url.origin, pid, startupCpuMs, log: () => log, stop: () => mf.dispose() };
}

/** This Worker (its wrangler.toml, a fresh persistence folder, the migrations applied);
 * `options` (`main`, `imports`, `vars`, `v8Flags`, ...) as for `startMiniflare`. */
export const startThisWorker = (options) =>
  startMiniflare({
    config: path.join(ROOT, "wrangler.toml"),
    persistDir: freshPersistDir(),
    migrations: path.join(ROOT, "migrations"),
    ...options,
  });

/** A copy of build/ in target/`name` with `wrapper` (a bench-only entry that imports the glue,
 * "./index.js", and wraps it) beside it as `as`: the `main` and `imports` that serve it. */
export function wrappedBuild(name, wrapper, as) {
  const dir = path.join(ROOT, "target", name);
  fs.rmSync(dir, { recursive: true, force: true });
  fs.cpSync(path.join(ROOT, "build"), dir, { recursive: true });
  fs.copyFileSync(path.join(ROOT, wrapper), path.join(dir, as));
  return { main: path.join(dir, as), imports: ["index.js"] };
}

/** Bundles a JavaScript Worker and its npm imports into one module, as wrangler would. */
export async function bundle(entry, outfile) {
  const { build } = await import("esbuild");
  await build({
    entryPoints: [entry],
    outfile,
    bundle: true,
    format: "esm",
    platform: "neutral",
    target: "es2022",
    conditions: ["workerd", "worker", "browser"],
    mainFields: ["module", "main"],
    external: ["node:*", "cloudflare:*"],
    logLevel: "warning",
  });
  return outfile;
}
