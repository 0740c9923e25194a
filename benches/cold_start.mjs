// `make bench`: a cold start. A low-traffic deployment meets a fresh isolate on most requests: the
// Worker's script is evaluated (for this Worker: its wasm compiled and instantiated) and its first
// request runs with nothing warm. For this Worker, the AI SDK's `streamText`, the pass-through and
// the platform floor (benches/contenders.mjs), BENCH_COLD_STARTS (10) times each, a new workerd is
// started (one Worker in it, served by Miniflare) and sent one "hi"; printed are the medians of the
// workerd's CPU at startup (the runtime's own start, the same for all, and the script's
// evaluation), the first "hi"'s CPU, and its time to first byte, to the answer's first text and to
// the end (this Worker's first byte is its stream's `start`, sent before the model is asked; the
// first text is what a user sees first). The starts are taken in rounds, one of each Worker per
// round. Also started each round: a do-nothing script with this Worker's wrangler.toml
// (benches/workers/bindings.js), since under Miniflare a workerd starts a local simulator for each
// binding (D1, R2, the rate limiter, the Durable Object classes), which a deployment does not: this
// Worker's script costs its startup less that one's, the others' theirs less the pass-through's
// (they have no bindings beyond the floor's D1 and object). Printed, never asserted.

import { contenders } from "./contenders.mjs";
import { cpuMs } from "./workerd.mjs";
import { anthropicLoopback, anthropicVars } from "../tests/e2e/harness.mjs";

const STARTS = Number(process.env.BENCH_COLD_STARTS ?? 10);
const anthropic = await anthropicLoopback();
const { edgeAgent, passThrough, floor, aiSdk, bindingsOnly } = contenders(anthropicVars(anthropic));
const kinds = [["pass-through Worker", passThrough], ["this Worker", () => edgeAgent()], ["AI SDK streamText", aiSdk], ["platform floor (JS)", () => floor()]];
const samples = kinds.map(() => []);
const bindingsStartup = [];
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

for (let round = 0; round < STARTS; round++) {
  for (const [i, [name, start]] of kinds.entries()) {
    const worker = await start();
    try {
      anthropic.script({ text: "hi", writes: "event" });
      const before = cpuMs(worker.pid);
      const started = performance.now();
      const response = await worker.turn();
      const reader = response.body.getReader();
      let ttfb;
      let firstText;
      let body = "";
      const decoder = new TextDecoder();
      for (;;) {
        const { done, value } = await reader.read();
        ttfb ??= performance.now() - started;
        if (done) break;
        body += decoder.decode(value, { stream: true });
        if (firstText === undefined && worker.answering(body)) firstText = performance.now() - started;
      }
      const total = performance.now() - started;
      if (response.status !== 200 || !worker.complete(body)) throw new Error(`${name}: the first "hi" failed: ${response.status} ${body.slice(-300)}`);
      await new Promise((r) => setTimeout(r, 20));
      samples[i].push({ startup: worker.startupCpuMs, cpu: cpuMs(worker.pid) - before, ttfb, firstText, total });
    } finally {
      await worker.stop();
    }
  }
  const bare = await bindingsOnly();
  bindingsStartup.push(bare.startupCpuMs);
  await bare.stop();
  process.stderr.write(`  cold starts: ${round + 1} of ${STARTS} rounds\n`);
}
await anthropic.close();

const fmt = (n, w = 7) => n.toFixed(1).padStart(w);
console.log(`\nCold start: a new workerd per sample, its first "hi" (medians of ${STARTS}):`);
console.log("                         startup CPU ms   first hi CPU ms   both   TTFB ms   first text ms   total ms");
for (const [i, [name]] of kinds.entries()) {
  const of = (key) => median(samples[i].map((s) => s[key]));
  console.log(`  ${name.padEnd(20)} ${fmt(of("startup"), 12)}   ${fmt(of("cpu"), 14)}   ${fmt(of("startup") + of("cpu"), 5)}   ${fmt(of("ttfb"))}   ${fmt(of("firstText"), 13)}   ${fmt(of("total"), 8)}`);
}
const startupOf = (i) => median(samples[i].map((s) => s.startup));
const bare = median(bindingsStartup);
const floorBare = startupOf(0);
console.log(`  this Worker's bindings alone (a do-nothing script, its wrangler.toml): startup ${bare.toFixed(1)} ms`);
console.log(
  `  the scripts' own startup CPU (each less the same start without its script: this Worker less its bindings alone, the others less the pass-through; ` +
    `a start's CPU varies by about 50 ms from one to the next, so these differences are rough): ` +
    `this Worker ${(startupOf(1) - bare).toFixed(1)} ms, the AI SDK ${(startupOf(2) - floorBare).toFixed(1)} ms, the platform floor ${(startupOf(3) - floorBare).toFixed(1)} ms`,
);
process.exit(0);
