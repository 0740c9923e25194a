// `make bench`: what V8 compiles of the Worker's wasm, and what that costs a new isolate. V8
// compiles each wasm function on its first call with its baseline compiler (Liftoff), and again
// with its optimising one (TurboFan, on background threads) once the function is hot; both count
// as the Worker's CPU. A workerd started with V8's --perf-basic-prof lists every piece of code it
// compiles in /tmp/perf-<pid>.map, with its size, so the volume compiled is read there: after a
// new isolate's first "hi" turn (what a cold start compiles) and after BENCH_JIT_TURNS more
// (100). The CPU of that first turn is read from three other workerds, without the flag (writing
// the list costs some).

import fs from "node:fs";
import { anthropicLoopback, anthropicVars, chatMessage } from "../tests/e2e/harness.mjs";
import { startThisWorker } from "./miniflare.mjs";
import { BENCH_CALLER_VARS } from "./contenders.mjs";
import { cpuMs } from "./workerd.mjs";

const TURNS = Number(process.env.BENCH_JIT_TURNS ?? 100);
const anthropic = await anthropicLoopback();

const start = (v8Flags) => startThisWorker({
  vars: { ...anthropicVars(anthropic), ...BENCH_CALLER_VARS },
  v8Flags,
});

let chats = 0;
/** One "hi" in a new conversation; its workerd CPU, the last D1 writes after the stream included. */
async function hi(worker) {
  anthropic.script({ text: "hi", writes: "event" });
  const before = cpuMs(worker.pid);
  const response = await chatMessage(`${worker.url}/v1/chat`, `jit-${chats++}`, "Say something.");
  const body = await response.text();
  if (!body.includes('"type":"finish"')) throw new Error(`the turn did not finish: ${body.slice(-300)}`);
  await new Promise((r) => setTimeout(r, 20));
  return cpuMs(worker.pid) - before;
}

/** The wasm code V8 has compiled so far, per tier: functions and KB of machine code. */
function compiled(map) {
  const tiers = { liftoff: { functions: 0, bytes: 0 }, turbofan: { functions: 0, bytes: 0 } };
  for (const line of fs.readFileSync(map, "utf8").split("\n")) {
    const [, size, ...words] = line.split(" ");
    const name = words.join(" ");
    const tier = /^JS:.*-(liftoff|turbofan)$/.exec(name)?.[1];
    // JavaScript functions optimised by TurboFan are named after their script; wasm ones are not.
    if (!tier || name.includes(".js:")) continue;
    tiers[tier].functions++;
    tiers[tier].bytes += parseInt(size, 16);
  }
  const of = (t) => `${tiers[t].functions} functions, ${(tiers[t].bytes / 1024).toFixed(0)} KB`;
  return { baseline: of("liftoff"), optimised: of("turbofan") };
}

try {
  const firsts = [];
  for (let i = 0; i < 3; i++) {
    const worker = await start("");
    firsts.push(await hi(worker));
    await worker.stop();
  }
  const listed = await start("--perf-basic-prof");
  const map = `/tmp/perf-${listed.pid}.map`;
  let after;
  try {
    await hi(listed);
    const cold = compiled(map);
    for (let i = 0; i < TURNS; i++) await hi(listed);
    after = { cold, warm: compiled(map) };
  } finally {
    await listed.stop();
    fs.rmSync(map, { force: true });
  }
  console.log(`V8's compiling of the wasm (this Worker, "hi" in a new conversation per turn):`);
  console.log(`  a new isolate's first turn: ${firsts.map((c) => c.toFixed(1)).join(", ")} ms of workerd CPU (three new workerds); baseline code compiled: ${after.cold.baseline}`);
  console.log(`  after ${TURNS} more turns: optimised code compiled: ${after.warm.optimised}; baseline: ${after.warm.baseline}`);
} finally {
  await anthropic.close();
}
