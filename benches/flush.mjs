// `make bench`: what a warm request costs right after V8 drops this Worker's baseline code.
// workerd tells V8 that memory is under moderate pressure each time it creates an isolate
// (`Worker::Isolate`'s constructor, for any Worker in the process), and V8 answers by dropping
// the baseline (Liftoff) code of every wasm module in the process; optimised code stays. The
// next request compiles again whatever baseline code it runs. JavaScript Workers lose nothing
// (only the new isolate's heap is collected), so only this Worker is measured: "hi" in a new
// conversation, alternately as it is and right after the flush (benches/workers/flush.js, which
// has V8 flush on a request's header), BENCH_FLUSH_TURNS (20) pairs after BENCH_FLUSH_WARMUP
// (200) warm turns (functions V8 has optimised by then keep their code). How often a
// deployment's process creates isolates is the platform's, not measured here. Printed, never
// asserted.

import { BENCH_CALLER_VARS, uiStreamComplete } from "./contenders.mjs";
import { startThisWorker, wrappedBuild } from "./miniflare.mjs";
import { cpuMs } from "./workerd.mjs";
import { anthropicLoopback, anthropicVars, chatMessage } from "../tests/e2e/harness.mjs";

const TURNS = Number(process.env.BENCH_FLUSH_TURNS ?? 20);
const WARMUP = Number(process.env.BENCH_FLUSH_WARMUP ?? 200);

// A copy of the build with the flushing entry beside it.
const entry = wrappedBuild("bench-flush", "benches/workers/flush.js", "flush.js");

const anthropic = await anthropicLoopback();
const worker = await startThisWorker({
  ...entry,
  v8Flags: "--allow-natives-syntax",
  vars: { ...anthropicVars(anthropic), ...BENCH_CALLER_VARS },
});
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
let n = 0;

/** One "hi" in a new conversation: its workerd CPU and time to the end, in ms. */
async function hi(flush) {
  anthropic.script({ text: "hi", writes: "event" });
  const before = cpuMs(worker.pid);
  const started = performance.now();
  const response = await chatMessage(`${worker.url}/v1/chat`, `flush-${n++}`, "Say something.", flush ? { "x-bench-flush": "1" } : {});
  const body = await response.text();
  const total = performance.now() - started;
  if (response.status !== 200 || !uiStreamComplete(body)) throw new Error(`the turn failed: ${response.status} ${body.slice(-300)}`);
  // What the turn does after its stream ends (the last D1 writes) belongs to it too.
  await new Promise((resolve) => setTimeout(resolve, 20));
  return { cpu: cpuMs(worker.pid) - before, total };
}

try {
  for (let i = 0; i < WARMUP; i++) await hi(false);
  const plain = [];
  const flushed = [];
  for (let i = 0; i < TURNS; i++) {
    plain.push(await hi(false));
    flushed.push(await hi(true));
  }
  const fmt = (xs, key) => median(xs.map((x) => x[key])).toFixed(1);
  console.log(`\nA warm "hi" right after V8 drops the baseline wasm code, as each new isolate in the process makes it (medians of ${TURNS} pairs after ${WARMUP} turns):`);
  console.log(`  as it is: CPU ${fmt(plain, "cpu")} ms, total ${fmt(plain, "total")} ms`);
  console.log(`  right after the flush: CPU ${fmt(flushed, "cpu")} ms, total ${fmt(flushed, "total")} ms (JavaScript Workers lose nothing to it)`);
} finally {
  await worker.stop();
  await anthropic.close();
}
