// The Worker's process: `wrangler dev` on a persist dir of its own, with the vars a test gives,
// and the `wrangler` CLI the other helpers run (D1 queries, migrations).

import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const WRANGLER = path.join(ROOT, "node_modules/wrangler/bin/wrangler.js");

export async function freePort() {
  const server = net.createServer();
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address();
  await new Promise((r) => server.close(r));
  return port;
}

/** `text` without its terminal colour codes. */
export const uncoloured = (text) => text.replace(/\x1b\[[0-9;]*m/g, "");

export function freshPersistDir() {
  return mkdtempSync(path.join(tmpdir(), "edge-agent-e2e-"));
}

/** Runs the `wrangler` CLI with `args` in the project's root; resolves to its output. */
export function wrangler(args, opts = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [WRANGLER, ...args], { cwd: ROOT, env: { ...process.env, WRANGLER_SEND_METRICS: "false" }, ...opts });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    child.on("exit", (code) => (code === 0 ? resolve(out) : reject(new Error(`wrangler ${args.join(" ")} exited ${code}:\n${out}`))));
  });
}

/** Applies the migrations to `persistDir` (once) and starts `wrangler dev` on it. Anonymous
 * access is on and the rate limit off unless `vars` say otherwise (the auth tests do). `config`
 * is a wrangler.toml of another Worker, or a list of them (Workers run together, the first the
 * one tested). `args` are more of `wrangler dev`'s (`--test-scheduled`). */
export async function startWorker({ persistDir, vars = {}, config, migrate = config ? [] : ["DB"], healthPath = "/healthz", args: extra = [] }) {
  // The per-user message limit is off unless a test turns it on (a test file sends more than
  // 30 messages a minute as one user).
  vars = { ALLOW_ANONYMOUS: "true", RATE_LIMIT_PER_MINUTE: "0", ...vars };
  // Another Worker (`config`, a wrangler.toml of its own) has no D1 to migrate unless `migrate`
  // names its bindings.
  const configs = [config ?? []].flat();
  for (const binding of migrate) {
    // A restart on the same directory finds it migrated (a marker beside the data, gone with
    // it): each wrangler run costs seconds.
    const marker = path.join(persistDir, `.migrated-${binding}${configs.length ? `-${path.basename(configs[0])}` : ""}`);
    if (existsSync(marker)) continue;
    await wrangler(["d1", "migrations", "apply", binding, "--local", "--persist-to", persistDir, ...(configs.length ? ["--config", configs[0]] : [])]);
    writeFileSync(marker, "");
  }
  // Files run side by side (`--test-concurrency`): a port found free may be taken before
  // wrangler binds it, by another file's Worker or provider. Such a start is tried again.
  for (let attempt = 1; ; attempt++) {
    try {
      return await spawnWorker(configs, vars, persistDir, healthPath, extra);
    } catch (e) {
      if (attempt >= 4 || !e.portTaken) throw e;
    }
  }
}

async function spawnWorker(configs, vars, persistDir, healthPath, extra) {
  const port = await freePort();
  const args = [WRANGLER, "dev", "--persist-to", persistDir, "--port", String(port), "--ip", "127.0.0.1", "--show-interactive-dev-session=false"];
  for (const c of configs) args.push("--config", c);
  args.push(...extra);
  for (const [k, v] of Object.entries(vars)) args.push("--var", `${k}:${v}`);
  const child = spawn(process.execPath, args, { cwd: ROOT, env: { ...process.env, WRANGLER_SEND_METRICS: "false" }, detached: true });
  let log = "";
  child.stdout.on("data", (d) => (log += d));
  child.stderr.on("data", (d) => (log += d));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  // A start that fails leaves nothing behind: its process group holds the port and its pipes
  // would keep the test file from exiting.
  const failed = (message, portTaken = false) => {
    try { process.kill(-child.pid, "SIGKILL"); } catch {}
    child.stdout.destroy();
    child.stderr.destroy();
    return Object.assign(new Error(`${message}:\n${log}`), { portTaken });
  };
  for (;;) {
    const plain = uncoloured(log);
    const taken = /address already in use|EADDRINUSE/i.test(plain);
    if (child.exitCode !== null || child.signalCode !== null || taken) {
      throw failed(taken ? "wrangler dev found its port taken" : `wrangler dev exited ${child.exitCode}`, taken);
    }
    // Only once this wrangler says it listens: the port may be another file's Worker's, which
    // would answer the probe while this one fails to bind it. (Colours are stripped: a test
    // runner writing to a terminal sets FORCE_COLOR for its files.)
    if (plain.includes(`Ready on ${url}`)) {
      try {
        const r = await fetch(`${url}${healthPath}`, { signal: AbortSignal.timeout(5_000) });
        if (r.status === 200) break;
      } catch {}
    }
    if (Date.now() > deadline) throw failed("wrangler dev did not become healthy in 60 s");
    await sleep(250);
  }
  return {
    url,
    /** The `wrangler dev` process (workerd runs as its child). */
    pid: child.pid,
    log: () => log,
    /** The first structured line `match` accepts, waiting up to 5 s for it to be printed. */
    async logLine(match) {
      for (let i = 0; i < 50; i++) {
        const line = this.jsonLines().find(match);
        if (line) return line;
        await sleep(100);
      }
      throw new Error("no such log line in:\n" + log.slice(-4000));
    },
    /** The structured (JSON) lines the Worker logged, colours stripped. */
    jsonLines: () => log.split("\n").flatMap((line) => {
      const plain = uncoloured(line);
      const at = plain.indexOf("{\"");
      try { return at < 0 ? [] : [JSON.parse(plain.slice(at))]; } catch { return []; }
    }),
    /** Kills workerd outright, as a crash would: running turns die without cleaning up. */
    async kill() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((r) => child.on("exit", r));
      try { process.kill(-child.pid, "SIGKILL"); } catch {}
      await exited;
    },
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((r) => child.on("exit", r));
      try { process.kill(-child.pid, "SIGTERM"); } catch {}
      await Promise.race([exited, sleep(5000)]);
      try { process.kill(-child.pid, "SIGKILL"); } catch {}
    },
  };
}
