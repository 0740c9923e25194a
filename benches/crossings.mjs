// `make bench`: how often a turn crosses between the Worker's wasm and JavaScript. Every call
// from the wasm into the runtime (an import: a fetch, a D1 call, a property read, a JavaScript
// closure made for a Rust future) and every call back in (an export: a request, a stream pull,
// a promise settling) passes V8's wrappers and wasm-bindgen's glue, which is why reads from the
// provider and writes to the client are batched. The count is printed per turn, with the kinds
// made most often, for "hi" and for a 1,000-token answer sent one SSE event per write.
// Counted by the glue: a copy of build/ whose index.js first replaces WebAssembly.Instance with
// one that counts each call of an import or export function, and logs the counts of the
// previous request when the Worker's `fetch` is called (the object runs in the same isolate, so
// a turn's counts include its work, and the D1 writes after its stream).

import fs from "node:fs";
import path from "node:path";
import { LONG_ANSWER as LONG, PACED_ANSWER, PACED_GAP_MS, PACED_TOKENS } from "./answers.mjs";
import { ROOT, anthropicLoopback, anthropicVars, chatMessage } from "../tests/e2e/harness.mjs";
import { startThisWorker } from "./miniflare.mjs";
import { BENCH_CALLER_VARS } from "./contenders.mjs";

const TURNS = Number(process.env.BENCH_CROSSINGS_TURNS ?? 20);
const WARMUP = 3;

// Runs before the glue's own code (its imports are hoisted; the instance is made in its body).
const COUNTING = `
const __crossings = new Map();
const __count = (name) => __crossings.set(name, (__crossings.get(name) ?? 0) + 1);
const __Instance = WebAssembly.Instance;
WebAssembly.Instance = function (module, imports) {
  const counted = {};
  for (const [from, functions] of Object.entries(imports)) {
    counted[from] = {};
    for (const [name, f] of Object.entries(functions)) {
      counted[from][name] = typeof f !== "function" ? f : (...args) => { __count("wasm->js " + name); return f(...args); };
    }
  }
  const instance = new __Instance(module, counted);
  const exports = {};
  for (const [name, f] of Object.entries(instance.exports)) {
    exports[name] = typeof f !== "function" ? f : (...args) => {
      if (name === "fetch") {
        console.log("crossings " + JSON.stringify(Object.fromEntries(__crossings)));
        __crossings.clear();
      }
      __count("js->wasm " + name);
      return f(...args);
    };
  }
  return { exports };
};
`;

/** A readable name for a glue function: wasm-bindgen's hash suffixes and mangling dropped. */
function kind(name) {
  if (name.includes("convert__closures")) return "js->wasm a Rust closure called back";
  return name.replace(/^(wasm->js|js->wasm) __wbg_(.*)_[0-9a-f]{16}$/, "$1 $2").replace(/_[0-9a-f]{16}$/, "");
}

const dir = path.join(ROOT, "target", "bench", "crossings");
fs.rmSync(dir, { recursive: true, force: true });
fs.mkdirSync(dir, { recursive: true });
fs.writeFileSync(path.join(dir, "index.js"), COUNTING + fs.readFileSync(path.join(ROOT, "build", "index.js"), "utf8"));
fs.copyFileSync(path.join(ROOT, "build", "index_bg.wasm"), path.join(dir, "index_bg.wasm"));

const anthropic = await anthropicLoopback();
const worker = await startThisWorker({
  main: path.join(dir, "index.js"),
  vars: { ...anthropicVars(anthropic), ...BENCH_CALLER_VARS },
});

let chats = 0;
/** The counts of TURNS turns answered `answer` (the loopback's script), each in a new conversation, after a warm-up. */
async function counted(answer) {
  for (let i = 0; i < WARMUP + TURNS; i++) {
    anthropic.script(answer);
    const body = await (await chatMessage(`${worker.url}/v1/chat`, `crossings-${chats++}`, "Say something.")).text();
    if (!body.includes('"type":"finish"')) throw new Error(`the turn did not finish: ${body.slice(-300)}`);
    // What the turn does after its stream ends (the last D1 writes) belongs to it too.
    await new Promise((r) => setTimeout(r, 20));
  }
  // The next request reports the last turn's counts.
  await fetch(`${worker.url}/healthz`).then((r) => r.arrayBuffer());
  const lines = worker.log().split("\n").filter((l) => l.startsWith("crossings "));
  return lines.slice(-TURNS).map((l) => JSON.parse(l.slice("crossings ".length)));
}

const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
function summary(label, turns) {
  const total = (turn, prefix = "") => Object.entries(turn).filter(([k]) => k.startsWith(prefix)).reduce((n, [, c]) => n + c, 0);
  const perKind = new Map();
  for (const turn of turns) for (const [k, c] of Object.entries(turn)) perKind.set(kind(k), (perKind.get(kind(k)) ?? 0) + c / turns.length);
  const most = [...perKind].sort((a, b) => b[1] - a[1]).slice(0, 8).map(([k, c]) => `${k} ${c.toFixed(0)}`).join(", ");
  console.log(`  ${label}: ${median(turns.map((t) => total(t)))} (wasm->js ${median(turns.map((t) => total(t, "wasm->js")))}, js->wasm ${median(turns.map((t) => total(t, "js->wasm")))}); made most: ${most}`);
}

try {
  const short = await counted({ text: "hi", writes: "event" });
  const long = await counted({ text: LONG, writes: "event" });
  // At a model's pace every event is read, decoded and written alone.
  const paced = await counted(PACED_ANSWER);
  console.log(`Calls across the wasm boundary per turn (medians of ${TURNS} turns, a new conversation each, counted by the glue):`);
  summary('"hi"', short);
  summary("1,000-token answer, one SSE event per write", long);
  summary(`${PACED_TOKENS}-token answer, one event per ${PACED_GAP_MS} ms`, paced);
} finally {
  await worker.stop();
  await anthropic.close();
  fs.rmSync(dir, { recursive: true, force: true });
}
