// `make bench`: many turns at once. 1, 10 and 100 conversations (BENCH_MANY: "1,10,100") stream
// the paced answer (200 tokens, one event every 5 ms: a model's pace) together through this
// Worker in one workerd, each a new `/v1/chat` conversation, so each turn has its own
// conversation object. Printed: the CPU per event (the batch's workerd CPU less a lone "hi"'s
// per turn, over the events) against a lone turn's, and workerd's RSS per running turn (its
// highest during the batch, sampled every 20 ms, less before it, over the turns).
//
// Then the memory that counts against the isolate's 128 MB, read through the V8 inspector
// (benches/isolate_memory.mjs) in a second workerd, since an inspector attached to the first
// would change its CPU: per running turn, V8's heap at its highest during the batch less
// before it (after a collection), and the growth of wasm's linear memory, for this Worker and
// for the platform floor (benches/workers/floor.js), which makes the same conversation objects
// and D1 writes in plain JavaScript. RSS counts more than the isolate: under Miniflare each
// conversation object's SQLite database and the local D1 live in the same process, which the
// floor's RSS per turn shows too. Printed, never asserted.

import { PACED_ANSWER, PACED_TOKENS } from "./answers.mjs";
import { contenders } from "./contenders.mjs";
import { isolateMemory } from "./isolate_memory.mjs";
import { cpuMs, rssMb } from "./workerd.mjs";
import { anthropicLoopback, anthropicVars, freePort } from "../tests/e2e/harness.mjs";

const SIZES = (process.env.BENCH_MANY ?? "1,10,100").split(",").map(Number);
const anthropic = await anthropicLoopback();
const { edgeAgent, floor } = contenders(anthropicVars(anthropic));
const worker = await edgeAgent();
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

/** Runs `n` turns at once; their CPU, and the RSS before and at its highest. */
async function batch(n) {
  const rssBefore = rssMb(worker.pid);
  let rssPeak = rssBefore;
  const sampler = setInterval(() => { rssPeak = Math.max(rssPeak, rssMb(worker.pid)); }, 20);
  const before = cpuMs(worker.pid);
  const bodies = await Promise.all(Array.from({ length: n }, async () => {
    const response = await worker.turn();
    return response.status === 200 ? response.text() : `${response.status} ${await response.text()}`;
  }));
  await new Promise((r) => setTimeout(r, 50));
  const cpu = cpuMs(worker.pid) - before;
  clearInterval(sampler);
  const failed = bodies.filter((b) => !worker.complete(b));
  if (failed.length) throw new Error(`${failed.length} of ${n} turns did not finish: ${failed[0].slice(-300)}`);
  return { cpu, rssBefore, rssPeak };
}

try {
  // Warm: the isolate's code compiled, its first objects made.
  anthropic.respond = () => ({ text: "hi", writes: "event" });
  for (let i = 0; i < 5; i++) await batch(1);
  const his = [];
  for (let i = 0; i < 15; i++) his.push((await batch(1)).cpu);
  const hiCpu = median(his);
  anthropic.respond = () => PACED_ANSWER;
  await batch(1);
  const rows = [];
  for (const n of SIZES) {
    const runs = [];
    for (let r = 0; r < (n >= 100 ? 2 : 3); r++) runs.push(await batch(n));
    const perEvent = median(runs.map((b) => ((b.cpu - n * hiCpu) / (n * PACED_TOKENS)) * 1000));
    const perTurnMb = median(runs.map((b) => (b.rssPeak - b.rssBefore) / n));
    rows.push({ n, perEvent, perTurnMb, rss: Math.max(...runs.map((b) => b.rssPeak)) });
    process.stderr.write(`  many turns: ${n} at once measured\n`);
  }
  const lone = rows.find((r) => r.n === 1) ?? rows[0];
  console.log(`\nMany turns at once (this Worker, one workerd; ${PACED_TOKENS}-token answers at a model's pace; a lone "hi" is ${hiCpu.toFixed(1)} ms of CPU):`);
  console.log("  turns at once   CPU per event µs   x a lone turn's   workerd RSS per running turn MB   workerd RSS peak MB");
  for (const r of rows) {
    console.log(`  ${String(r.n).padStart(13)}   ${r.perEvent.toFixed(0).padStart(16)}   ${(r.perEvent / lone.perEvent).toFixed(2).padStart(15)}   ${r.perTurnMb.toFixed(2).padStart(31)}   ${r.rss.toFixed(0).padStart(19)}`);
  }
} finally {
  await worker.stop();
}

// The isolate's memory per running turn, this Worker's and the floor's, each in a workerd of its own.
const MB = 1 << 20;
const memoryRows = [];
for (const [name, startWith] of [["this Worker", (port) => edgeAgent(undefined, undefined, port)], ["platform floor (JS)", (port) => floor({}, port)]]) {
  const port = await freePort();
  const inspected = await startWith(port);
  const memory = await isolateMemory(port);
  try {
    anthropic.respond = () => PACED_ANSWER;
    for (let i = 0; i < 3; i++) await (await inspected.turn()).text();
    for (const n of SIZES) {
      const before = await memory.read();
      const heapSampler = memory.sampleHeap();
      const bodies = await Promise.all(Array.from({ length: n }, async () => (await inspected.turn()).text()));
      const heapPeak = await heapSampler.stop();
      const after = await memory.read();
      const failed = bodies.filter((b) => !inspected.complete(b));
      if (failed.length) throw new Error(`${name}: ${failed.length} of ${n} turns did not finish: ${failed[0].slice(-300)}`);
      memoryRows.push({ name, n, heap: (heapPeak - before.heap) / n / MB, wasm: (after.wasm - before.wasm) / n / MB, wasmTotal: after.wasm / MB });
    }
    process.stderr.write(`  many turns: ${name}'s isolate memory measured\n`);
  } finally {
    memory.close();
    await inspected.stop();
  }
}
console.log("\nThe isolate's memory per running turn, MB (V8's heap at its highest less before; wasm memory's growth):");
console.log("  turns at once   Worker                 V8 heap   wasm memory   together   wasm memory after, MB");
for (const r of memoryRows) {
  console.log(`  ${String(r.n).padStart(13)}   ${r.name.padEnd(20)}   ${r.heap.toFixed(2).padStart(7)}   ${r.wasm.toFixed(2).padStart(11)}   ${(r.heap + r.wasm).toFixed(2).padStart(8)}   ${r.wasmTotal.toFixed(1).padStart(21)}`);
}
await anthropic.close();
process.exit(0);
