// `node benches/profile.mjs`: where this Worker's CPU goes on a streamed 1,000-token turn (or,
// with PROFILE_ANSWER=short, on a "hi"; with PROFILE_WORKER=floor, where the platform floor's
// goes, benches/workers/floor.js, to set the two side by side). Serves the build with its
// symbols (target/index_bg.debug.wasm) through Miniflare and profiles PROFILE_TURNS turns after
// PROFILE_WARMUP, in one of two ways:
// - by default, the V8 inspector's CPU profile of the isolate: the functions with the most self
//   time (JavaScript glue and wasm alike), and the profile file for DevTools. Profiling through
//   the inspector more than doubles a turn's CPU (a "hi": 37.6 ms against about 16), unevenly:
//   the `queueMicrotask` calls behind Rust futures' wake-ups show at about twenty times what a
//   bench of them alone costs, so promise-heavy code looks heavier than it is;
// - PROFILE_WITH=perf: Linux `perf` samples every thread of the workerd process, inspector off
//   (V8 names its JIT code through --perf-basic-prof): the time by part of the runtime (wasm
//   code, the JIT compilers' background threads, V8, workerd, SQLite, the kernel), scaled to the
//   process's CPU measured over the same turns, and the symbols with the most samples.
//   PROFILE_CALLERS=1 records call chains too (`perf report -g caller` then says, say, which
//   code touched the pages the kernel had to clear; workerd's own frames are mostly unnamed).

import fs from "node:fs";
import path from "node:path";
import { LONG_ANSWER, fillConversation } from "./answers.mjs";
import { execFileSync, spawn } from "node:child_process";
import { ROOT, anthropicLoopback, anthropicVars, chatMessage, chatSession, freePort, freshPersistDir } from "../tests/e2e/harness.mjs";
import { connectInspector } from "./inspector.mjs";
import { startMiniflare } from "./miniflare.mjs";
import { BENCH_CALLER_VARS, uiStreamComplete } from "./contenders.mjs";
import { cpuMs } from "./workerd.mjs";

// Node 22 has a global WebSocket; Node 20 (the system's on some machines) has not, and the `ws`
// package (installed with Miniflare) speaks the same API.
const WebSocket = globalThis.WebSocket ?? (await import("ws")).default;

const TURNS = Number(process.env.PROFILE_TURNS ?? 20);
const WARMUP = Number(process.env.PROFILE_WARMUP ?? 5);
const PERF = process.env.PROFILE_WITH === "perf";
// PROFILE_ANSWER=short profiles a "hi" turn (the fixed cost per turn) instead.
// PROFILE_WRITES=one has the provider write the whole answer at once (the work per event without
// the reads).
const WRITES = process.env.PROFILE_WRITES ?? "event";
// PROFILE_GAP_MS=<ms> spaces the provider's events that far apart, as a model writing at its own
// pace does (every read then waits for its event): the work per event that batching cannot take.
const GAP_MS = Number(process.env.PROFILE_GAP_MS ?? 0);
const ANSWER = process.env.PROFILE_ANSWER === "short" ? "hi" : LONG_ANSWER;

// The shipped glue with the wasm that still has its name section.
const dir = path.join(ROOT, "target", "profile-build");
fs.rmSync(dir, { recursive: true, force: true });
fs.mkdirSync(dir, { recursive: true });
fs.copyFileSync(path.join(ROOT, "build", "index.js"), path.join(dir, "index.js"));
fs.copyFileSync(path.join(ROOT, "target", "index_bg.debug.wasm"), path.join(dir, "index_bg.wasm"));

if (PERF) {
  try {
    execFileSync("perf", ["--version"], { stdio: "ignore" });
  } catch {
    console.error("PROFILE_WITH=perf needs Linux perf on the PATH (Debian: apt-get install linux-perf)");
    process.exit(2);
  }
}

const anthropic = await anthropicLoopback();
const inspectorPort = PERF ? undefined : await freePort();
// PROFILE_WORKER=floor profiles the platform floor (the same turns in plain JavaScript) instead.
const FLOOR = process.env.PROFILE_WORKER === "floor";
// PROFILE_CHAT=later sends every turn to one conversation (its history grows by two messages a
// turn), as a chat's later messages are; by default each turn starts a new one. With
// PROFILE_HISTORY=<characters>, that conversation first gets a history about that long (turns of
// 2,000-character messages and answers), for where a long history's cost goes.
const LATER = process.env.PROFILE_CHAT === "later";
const HISTORY = LATER ? Number(process.env.PROFILE_HISTORY ?? 0) : 0;
const worker = await startMiniflare({
  config: path.join(ROOT, FLOOR ? "benches/workers/floor.toml" : "wrangler.toml"),
  main: FLOOR ? undefined : path.join(dir, "index.js"),
  persistDir: freshPersistDir(),
  migrations: path.join(ROOT, "migrations"),
  inspectorPort,
  // V8 writes /tmp/perf-<pid>.map, naming its JIT code (wasm functions by the name section).
  v8Flags: PERF ? "--perf-basic-prof" : undefined,
  vars: { ...anthropicVars(anthropic), ...BENCH_CALLER_VARS },
});

// A later message is sent as `useChat` sends it, with every message before it.
const url = `${worker.url}${FLOOR ? "" : "/v1/chat"}`;
const chat = chatSession(url, "profile-later");

async function turn(i) {
  anthropic.script({ text: ANSWER, writes: WRITES, ...(GAP_MS ? { burst: 1, gapMs: GAP_MS } : {}) });
  const r = await (LATER ? chat("Say something long.") : chatMessage(url, `profile-${i}`, "Say something long."));
  // A refused turn (say, past a limit) costs less than an answered one: profile only answers.
  const body = await r.text();
  if (r.status !== 200 || !uiStreamComplete(body)) throw new Error(`turn ${i} was not answered: ${r.status} ${body.slice(-300)}`);
  // What the turn does after its stream ends (the last D1 writes) belongs to it too.
  await new Promise((resolve) => setTimeout(resolve, 20));
}

await fillConversation(anthropic, chat, Math.ceil(HISTORY / 4000), 2000);
// Warm up (the JIT compilers tier hot code up), then profile.
for (let i = 0; i < WARMUP; i++) await turn(`warm-${i}`);
const what = `${TURNS} ${ANSWER === "hi" ? '"hi"' : "1,000-token"} turns${GAP_MS ? `, one event per ${GAP_MS} ms` : ""}${LATER ? ` in one conversation${HISTORY ? ` (its history first filled to about ${HISTORY} characters)` : ""}` : ""} of ${FLOOR ? "the platform floor" : "this Worker"}`;
if (PERF) await withPerf();
else await withInspector();

async function withInspector() {
  const inspector = await connectInspector(inspectorPort);
  const send = inspector.send;
  await send("Profiler.enable");
  await send("Profiler.setSamplingInterval", { interval: 100 });
  await send("Profiler.start");
  const before = cpuMs(worker.pid);
  for (let i = 0; i < TURNS; i++) await turn(i);
  const perTurn = (cpuMs(worker.pid) - before) / TURNS;
  const { profile } = await send("Profiler.stop");
  inspector.close();
  await worker.stop();
  await anthropic.close();

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
  console.log(`CPU profile over ${what}: ${(busy / 1000 / TURNS).toFixed(1)} ms sampled per turn outside idle/program; the workerd process's CPU, every thread, inspector on: ${perTurn.toFixed(1)} ms per turn (${out})`);
  for (const [name, us] of [...byName].sort((a, b) => b[1] - a[1]).slice(0, 40)) {
    console.log(`${(us / 1000 / TURNS).toFixed(2).padStart(8)} ms/turn  ${((100 * us) / total).toFixed(1).padStart(5)}%  ${name.slice(0, 120)}`);
  }
}

async function withPerf() {
  const data = path.join(ROOT, "target", "perf.data");
  const perf = spawn("perf", ["record", "-F", "4999", ...(process.env.PROFILE_CALLERS ? ["-g"] : []), "-p", String(worker.pid), "-o", data], { stdio: ["ignore", "ignore", "pipe"] });
  let complaint = "";
  perf.stderr.on("data", (d) => (complaint += d));
  const exited = new Promise((r) => perf.on("exit", r));
  await new Promise((r) => setTimeout(r, 500)); // perf attaches to every thread
  const before = cpuMs(worker.pid);
  for (let i = 0; i < TURNS; i++) await turn(i);
  const perTurn = (cpuMs(worker.pid) - before) / TURNS;
  perf.kill("SIGINT");
  const code = await exited;
  await worker.stop();
  await anthropic.close();
  if (!fs.existsSync(data)) {
    console.error(`perf record failed (exit ${code}): ${complaint.trim()}\n(it needs root, or kernel.perf_event_paranoid <= 1)`);
    process.exit(2);
  }
  const report = execFileSync("perf", ["report", "-i", data, "--no-children", "--sort", "comm,sym", "-n", "--stdio"], { encoding: "utf8", maxBuffer: 1 << 28, stdio: ["ignore", "pipe", "ignore"] });
  const rows = [];
  for (const line of report.split("\n")) {
    const m = /^\s*[\d.]+%\s+(\d+)\s+(.+?)\s+\[(.)\]\s+(.*)$/.exec(line);
    if (m) rows.push({ samples: Number(m[1]), thread: m[2].trim(), kernel: m[3] === "k", symbol: m[4].trim() });
  }
  const total = rows.reduce((n, r) => n + r.samples, 0);
  const ms = (samples) => ((samples / total) * perTurn).toFixed(2).padStart(7);
  const byPart = new Map();
  for (const r of rows) byPart.set(partOf(r), (byPart.get(partOf(r)) ?? 0) + r.samples);
  console.log(`perf over ${what}: ${perTurn.toFixed(1)} ms of workerd CPU per turn (every thread), ${total} samples (${data}; \`perf report\` reads the JIT code's names from /tmp/perf-${worker.pid}.map)`);
  for (const [part, n] of [...byPart].sort((a, b) => b[1] - a[1])) console.log(`${ms(n)} ms/turn  ${part}`);
  console.log("the symbols with the most samples:");
  for (const r of rows.sort((a, b) => b.samples - a.samples).slice(0, 30)) console.log(`${ms(r.samples)} ms/turn  ${r.symbol.slice(0, 120)}`);
}

/** Which part of the runtime a sample's symbol belongs to. */
function partOf({ thread, kernel, symbol }) {
  // V8's worker threads compile (wasm tier-up, Maglev, TurboFan) and collect garbage.
  if (thread.startsWith("V8 DefaultWorke")) return "V8 background threads (JIT compilation, GC)";
  if (kernel) return "kernel (I/O, scheduling, page faults)";
  if (symbol.startsWith("JS:")) return /-(liftoff|turbofan)$/.test(symbol) && !symbol.includes("wasm-to-js") ? "wasm code" : "JavaScript code, wasm/JS wrappers";
  if (symbol.startsWith("Builtins_WasmLiftoff")) return "wasm code"; // Liftoff's frame setup
  if (symbol.startsWith("Builtins_")) return "V8 builtins (promises, calls, property access)";
  if (/sqlite|^yy/.test(symbol)) return "SQLite (the object's storage, local D1)";
  if (/tcmalloc|^TCMalloc|malloc|free/.test(symbol)) return "malloc";
  if (/^(workerd|kj|capnp)::|^(kj|capnp|workerd)_|::kj::/.test(symbol)) return "workerd, kj, capnp";
  // Liftoff compiles a wasm function on its first call, on the thread that calls it; the
  // assembler, relocation and code-space symbols are its too.
  if (/^v8::internal::(wasm::(?!memory_)|compiler::|maglev::|Assembler|MacroAssembler|(Writable)?RelocInfo|SourcePositionTable|ThreadIsolation)/.test(symbol)) {
    return "V8 compiling on the main thread (wasm on first call)";
  }
  if (/^v8::|^cppgc::|^_ZN2v8/.test(symbol)) return "V8 runtime";
  return "other (libc, ...)";
}
