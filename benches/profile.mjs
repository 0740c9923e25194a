// `node benches/profile.mjs`: where this Worker's CPU goes on a streamed 1,000-token turn (or,
// with PROFILE_ANSWER=short, on a "hi"). Serves
// the build with its symbols (target/index_bg.debug.wasm) through Miniflare with the V8
// inspector on, records a CPU profile over PROFILE_TURNS turns, and prints the functions with
// the most self time (JavaScript glue and wasm alike) and the profile file for DevTools.

import fs from "node:fs";
import path from "node:path";
import { ROOT, anthropicLoopback, freshPersistDir, freePort } from "../tests/e2e/harness.mjs";
import { startMiniflare } from "./miniflare.mjs";

// Node 22 has a global WebSocket; Node 20 (the system's on some machines) has not, and the `ws`
// package (installed with Miniflare) speaks the same API.
const WebSocket = globalThis.WebSocket ?? (await import("ws")).default;

const TURNS = Number(process.env.PROFILE_TURNS ?? 20);
// PROFILE_ANSWER=short profiles a "hi" turn (the fixed cost per turn) instead.
const ANSWER = process.env.PROFILE_ANSWER === "short" ? "hi" : "Stream me. ".repeat(546).slice(0, 6000);

// The shipped glue with the wasm that still has its name section.
const dir = path.join(ROOT, "target", "profile-build");
fs.rmSync(dir, { recursive: true, force: true });
fs.mkdirSync(dir, { recursive: true });
fs.copyFileSync(path.join(ROOT, "build", "index.js"), path.join(dir, "index.js"));
fs.copyFileSync(path.join(ROOT, "target", "index_bg.debug.wasm"), path.join(dir, "index_bg.wasm"));

const anthropic = await anthropicLoopback();
const inspectorPort = await freePort();
const worker = await startMiniflare({
  config: path.join(ROOT, "wrangler.toml"),
  main: path.join(dir, "index.js"),
  persistDir: freshPersistDir(),
  migrations: path.join(ROOT, "migrations"),
  inspectorPort,
  vars: { ANTHROPIC_BASE_URL: anthropic.url, ANTHROPIC_API_KEY: "sk-ant-loopback", ALLOW_ANONYMOUS: "true", RATE_LIMIT_PER_MINUTE: "0" },
});

async function turn(i) {
  anthropic.script({ text: ANSWER, writes: "event" });
  const r = await fetch(`${worker.url}/v1/chat`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ id: `profile-${i}`, messages: [{ id: "m1", role: "user", parts: [{ type: "text", text: "Say something long." }] }] }),
  });
  await r.text();
}

// Warm up (wasm tiers up), then profile.
for (let i = 0; i < 5; i++) await turn(`warm-${i}`);
const targets = await (await fetch(`http://127.0.0.1:${inspectorPort}/json`)).json();
const target = targets.find((t) => t.webSocketDebuggerUrl) ?? targets[0];
const ws = new WebSocket(target.webSocketDebuggerUrl);
await new Promise((r, e) => { ws.onopen = r; ws.onerror = e; });
let seq = 0;
const pending = new Map();
ws.onmessage = (m) => {
  const msg = JSON.parse(m.data);
  if (msg.id && pending.has(msg.id)) { pending.get(msg.id)(msg); pending.delete(msg.id); }
};
const send = (method, params = {}) => new Promise((r) => { const id = ++seq; pending.set(id, r); ws.send(JSON.stringify({ id, method, params })); });
await send("Profiler.enable");
await send("Profiler.setSamplingInterval", { interval: 100 });
await send("Profiler.start");
for (let i = 0; i < TURNS; i++) await turn(i);
const { result } = await send("Profiler.stop");
ws.close();
await worker.stop();
await anthropic.close();

const profile = result.profile;
const out = path.join(ROOT, "target", "worker.cpuprofile");
fs.writeFileSync(out, JSON.stringify(profile));
const dt = new Map();
profile.samples.forEach((node, i) => dt.set(node, (dt.get(node) ?? 0) + (profile.timeDeltas[i] ?? 0)));
const byName = new Map();
let total = 0;
for (const node of profile.nodes) {
  const us = dt.get(node.id) ?? 0;
  total += us;
  const f = node.callFrame;
  const name = `${f.functionName || "(anonymous)"} ${f.url ? path.basename(f.url) : ""}`.trim();
  byName.set(name, (byName.get(name) ?? 0) + us);
}
const busy = total - (byName.get("(idle)") ?? 0) - (byName.get("(program)") ?? 0);
console.log(`CPU profile over ${TURNS} ${ANSWER === "hi" ? '"hi"' : "1,000-token"} turns: ${(busy / 1000 / TURNS).toFixed(1)} ms sampled per turn outside idle/program (${out})`);
for (const [name, us] of [...byName].sort((a, b) => b[1] - a[1]).slice(0, 40)) {
  console.log(`${(us / 1000 / TURNS).toFixed(2).padStart(8)} ms/turn  ${((100 * us) / total).toFixed(1).padStart(5)}%  ${name.slice(0, 120)}`);
}
