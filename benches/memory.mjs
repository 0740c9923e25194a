// `make bench`: what memory adds to a turn. One Worker (the release wasm under Miniflare, local
// D1) with two agents alike but for `memory`; one user with earlier conversations to recall
// from (BENCH_MEMORY_CONVERSATIONS, 100, each a message and its answer, searched by FTS5 in
// D1) and a kept working memory; then, in rounds, a new conversation's turn of each agent with
// the same message. Printed: each agent's median workerd CPU, the difference (what the working
// memory's read, the recall, the prompt's blocks, the transient part and the index's writes
// cost: workerd runs local D1 too), and the recall's time as the turn's log line says it (its D1
// round trip, which runs beside the history's read).

import { setTimeout as sleep } from "node:timers/promises";
import { anthropicLoopback, anthropicVars, api, readUiStream } from "../tests/e2e/harness.mjs";
import { startThisWorker } from "./miniflare.mjs";
import { BENCH_CALLER_VARS } from "./contenders.mjs";
import { cpuMs } from "./workerd.mjs";

const TURNS = Number(process.env.BENCH_TURNS ?? 30);
const SEEDED = Number(process.env.BENCH_MEMORY_CONVERSATIONS ?? 100);
const AGENTS = {
  plain: { description: "Remembers nothing" },
  remembering: { description: "Remembers", memory: { working: { schema: { type: "object" } } } },
};
const TOPICS = ["peanuts", "Oslo", "sailing", "ramen", "typewriters", "Lisbon", "chess", "tulips", "jazz", "kayaks"];

const anthropic = await anthropicLoopback();
const worker = await startThisWorker({
  vars: { ...anthropicVars(anthropic), ...BENCH_CALLER_VARS, AGENTS: JSON.stringify(AGENTS) },
});
const logLine = async (id) => {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const line = worker.log().split("\n").find((l) => l.includes('"event":"turn"') && l.includes(id));
    if (line) return JSON.parse(line.slice(line.indexOf("{")));
    if (Date.now() > deadline) throw new Error(`no turn log line for ${id}`);
    await sleep(20);
  }
};
async function turn(agent, message) {
  const { id } = await (await api(worker.url, "POST", "/v1/conversations", { agent })).json();
  anthropic.script({ text: "Noted, thank you." });
  const before = cpuMs(worker.pid);
  await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message }));
  await sleep(20);
  return { cpu: cpuMs(worker.pid) - before, line: await logLine(id) };
}

try {
  for (let i = 0; i < SEEDED; i++) {
    const topic = TOPICS[i % TOPICS.length];
    await turn("remembering", `Note ${i}: I care about ${topic}, and my cousin number ${i} does too.`);
  }
  await api(worker.url, "PUT", "/v1/me/memory/remembering", { memory: { likes: TOPICS, city: "Oslo" } });
  const rounds = { plain: [], remembering: [] };
  for (let i = 0; i < TURNS + 3; i++) {
    const message = `What did I say about ${TOPICS[i % TOPICS.length]} and my cousins?`;
    for (const agent of i % 2 ? ["plain", "remembering"] : ["remembering", "plain"]) {
      const sample = await turn(agent, message);
      if (i >= 3) rounds[agent].push(sample);
    }
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
  const cpu = (agent) => median(rounds[agent].map((s) => s.cpu));
  const recall = rounds.remembering.map((s) => s.line.memory);
  console.log(`memory (median of ${TURNS} new conversations' turns of each agent, ${SEEDED} earlier conversations to recall from):`);
  console.log(`  workerd CPU: without memory ${cpu("plain").toFixed(1)} ms, with memory ${cpu("remembering").toFixed(1)} ms (+${(cpu("remembering") - cpu("plain")).toFixed(1)} ms: the working memory's read, the recall, the prompt's blocks, the data-memory part and the index's writes, local D1's work included)`);
  console.log(`  recall: ${median(recall.map((m) => m.recalled))} messages found, ${median(recall.map((m) => m.recall_ms))} ms from the turn's start to the recall's end (its D1 round trip, beside the history's read); D1 round trips a turn: ${median(rounds.plain.map((s) => s.line.d1_round_trips))} without memory, ${median(rounds.remembering.map((s) => s.line.d1_round_trips))} with`);
} finally {
  await worker.stop();
  await anthropic.close();
}
