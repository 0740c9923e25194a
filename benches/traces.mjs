// `make bench`: what tracing adds to a turn. One Worker (the release wasm under Miniflare) with
// OTEL_EXPORTER_OTLP_ENDPOINT pointing at a sink on loopback that answers 200; in rounds, a turn
// whose `traceparent` says sampled and one whose says not (so the same process, as warm, runs
// both), each with one tool call (two provider calls, three spans besides the root's) and about
// 300 tokens of answer. Printed: the median workerd CPU per turn of each, and the difference:
// recording the spans, encoding the export, sending it. (Tracing off, with no endpoint, is the
// build `benches/cpu.mjs` measures.)

import http from "node:http";
import { setTimeout as sleep } from "node:timers/promises";
import { anthropicLoopback, anthropicVars, api, readUiStream } from "../tests/e2e/harness.mjs";
import { startThisWorker } from "./miniflare.mjs";
import { BENCH_CALLER_VARS } from "./contenders.mjs";
import { cpuMs } from "./workerd.mjs";

const TURNS = Number(process.env.BENCH_TURNS ?? 30);
const ANSWER = Array.from({ length: 300 }, (_, i) => `w${i}`).join(" ");

let exports = 0;
const sink = http.createServer((req, res) => {
  req.resume();
  req.on("end", () => {
    exports++;
    res.writeHead(200, { "content-type": "application/json" }).end("{}");
  });
});
await new Promise((r) => sink.listen(0, "127.0.0.1", r));
const anthropic = await anthropicLoopback();
const base = { ...anthropicVars(anthropic), ...BENCH_CALLER_VARS };
const worker = await startThisWorker({ vars: { ...base, OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${sink.address().port}` } });
const context = (sampled) => ({ traceparent: `00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0${sampled ? 1 : 0}` });

async function turn(sampled) {
  const { id } = await (await api(worker.url, "POST", "/v1/conversations", {})).json();
  anthropic.script({ tools: [{ id: "toolu_1", name: "current_time", input: {} }] }, { text: ANSWER });
  const before = cpuMs(worker.pid);
  await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "What time is it? Then write a while." }, context(sampled)));
  // The export leaves after the answer: counted in the turn's CPU.
  await sleep(50);
  return cpuMs(worker.pid) - before;
}

try {
  const rounds = { plain: [], traced: [] };
  for (let i = 0; i < TURNS + 3; i++) {
    for (const name of i % 2 ? ["plain", "traced"] : ["traced", "plain"]) {
      const cpu = await turn(name === "traced");
      if (i >= 3) rounds[name].push(cpu);
    }
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
  const [off, on] = [median(rounds.plain), median(rounds.traced)];
  console.log(`traces (median of ${TURNS} turns each, one tool call and ~300 tokens; ${exports} exports received):`);
  console.log(`  workerd CPU: untraced ${off.toFixed(1)} ms, traced ${on.toFixed(1)} ms (+${(on - off).toFixed(1)} ms: the spans recorded, the export encoded and sent)`);
} finally {
  await worker.stop();
  await anthropic.close();
  sink.close();
}
