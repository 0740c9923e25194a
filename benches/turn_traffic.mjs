// `make bench`: what one turn costs in requests: the conversation object's requests and the D1
// round trips of a one-tool turn (the model calls `current_time`, then answers), read from the
// object's per-turn log line, with the real wasm served by Miniflare (one workerd) and a
// loopback provider.

import { setTimeout as sleep } from "node:timers/promises";
import { anthropicLoopback, anthropicVars, api, readUiStream } from "../tests/e2e/harness.mjs";
import { startThisWorker } from "./miniflare.mjs";
import { BENCH_CALLER_VARS } from "./contenders.mjs";
import { cpuMs } from "./workerd.mjs";

const TURNS = Number(process.env.BENCH_TURNS ?? 30);
const anthropic = await anthropicLoopback();
const worker = await startThisWorker({
  vars: { ...anthropicVars(anthropic), ...BENCH_CALLER_VARS },
});
try {
  const workerd = worker.pid;
  const lines = [];
  const cpu = [];
  for (let i = 0; i < TURNS; i++) {
    const before = cpuMs(workerd);
    const { id } = await (await api(worker.url, "POST", "/v1/conversations", {})).json();
    anthropic.script({ text: "Checking.", tools: [{ id: `toolu_${i}`, name: "current_time", input: {} }] }, { text: "It is noon." });
    await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "What time is it?" }));
    const deadline = Date.now() + 10_000;
    let line;
    while (!(line = worker.log().split("\n").find((l) => l.includes('"event":"turn"') && l.includes(id)))) {
      if (Date.now() > deadline) throw new Error(`no turn log line for ${id}:\n${worker.log().slice(-2000)}`);
      await sleep(50);
    }
    lines.push(JSON.parse(line.slice(line.indexOf("{"))));
    cpu.push(cpuMs(workerd) - before);
  }
  const median = (xs) => xs.sort((a, b) => a - b)[xs.length >> 1];
  const during = median(lines.map((l) => l.object_requests));
  const d1 = median(lines.map((l) => l.d1_round_trips));
  console.log(`one-tool turn (2 LLM calls, 1 tool), median of ${TURNS}, outcome ${lines[0].outcome}:`);
  console.log(`  conversation object requests: 1 (the POST handed over) + ${during} while the turn ran (no lease renewals, no polling)`);
  console.log(`  D1 round trips: 1 in the Worker (ownership: a conversation's first message; later ones read none) + ${d1} in the object (the history read while the new message is written alongside, then one batch per message; an answer carries its ledger row)`);
  console.log(`  turn duration: ${median(lines.map((l) => l.duration_ms))} ms; workerd CPU (creating the conversation included): ${median(cpu).toFixed(1)} ms`);
} finally {
  await worker.stop();
  await anthropic.close();
}
