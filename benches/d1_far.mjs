// `make bench`: the first token when D1 is far away. In production D1's primary can be a
// continent from the conversation's object; every D1 round trip awaited before the provider is
// called delays the first token by that distance. This Worker's build runs with its D1 binding
// behind a wait before every call (benches/workers/d1_far.js, a copy of build/ beside it: the
// harness wraps the binding, the Worker is unchanged), for BENCH_D1_DELAYS ms (0, 25, 100), and
// the time to the first token of an answer the loopback provider starts at once is taken for
// three kinds of message: the first of a new `/v1/chat` conversation, a later one of it, and one
// posted to `POST /v1/conversations/{id}/messages`. Printed: the medians, and how many round
// trips' worth of waiting each adds over the 0 ms run (the round trips awaited before the first
// token). Printed, never asserted.

import { startThisWorker, wrappedBuild } from "./miniflare.mjs";
import { BENCH_CALLER_VARS } from "./contenders.mjs";
import { anthropicLoopback, anthropicVars, api, chatSession } from "../tests/e2e/harness.mjs";

const DELAYS = (process.env.BENCH_D1_DELAYS ?? "0,25,100").split(",").map(Number);
const TURNS = Number(process.env.BENCH_D1_TURNS ?? 7);

// A copy of the build with the wrapping entry beside it.
const entry = wrappedBuild("bench-d1-far", "benches/workers/d1_far.js", "far.js");

const anthropic = await anthropicLoopback();
const ANSWER = { text: "Hello there, from far away." };
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

/** Milliseconds from sending to the first text delta of the answer, and the stream read whole. */
async function firstToken(send) {
  anthropic.script(ANSWER);
  const started = performance.now();
  const response = await send();
  if (response.status !== 200) throw new Error(`answered ${response.status}: ${await response.text()}`);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let body = "";
  let first;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    body += decoder.decode(value, { stream: true });
    if (first === undefined && body.includes('"type":"text-delta"')) first = performance.now() - started;
  }
  if (first === undefined || !body.includes('"type":"finish"')) throw new Error(`the turn did not finish: ${body.slice(-300)}`);
  // Let the turn's last writes land before the next one starts.
  await new Promise((r) => setTimeout(r, 50));
  return first;
}

const rows = [];
for (const delay of DELAYS) {
  const worker = await startThisWorker({
    ...entry,
    vars: {
      ...anthropicVars(anthropic),
      ...BENCH_CALLER_VARS, BENCH_D1_DELAY_MS: String(delay),
    },
  });
  try {
    const chat = `${worker.url}/v1/chat`;
    const created = await api(worker.url, "POST", "/v1/conversations", {});
    const { id } = await created.json();
    const samples = { created: [], later: [], posted: [] };
    for (let i = 0; i < 1 + TURNS; i++) {
      const session = chatSession(chat, `far-${delay}-${i}`);
      const created = await firstToken(() => session("Hello?"));
      const later = await firstToken(() => session("And then?"));
      const posted = await firstToken(() => api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: `Message ${i}` }));
      // The first round warms the isolate.
      if (i > 0) {
        samples.created.push(created);
        samples.later.push(later);
        samples.posted.push(posted);
      }
    }
    rows.push({ delay, created: median(samples.created), later: median(samples.later), posted: median(samples.posted) });
    process.stderr.write(`  D1 ${delay} ms away: measured\n`);
  } finally {
    await worker.stop();
  }
}
anthropic.close?.();

const base = rows.find((r) => r.delay === 0);
const fmt = (n) => n.toFixed(1).padStart(7);
console.log("\nFirst token with D1 far away (medians of %d; the loopback provider starts its answer at once)", TURNS);
console.log("D1 wait per call | new chat ms (trips) | later message ms (trips) | POST messages ms (trips)");
for (const r of rows) {
  const trips = (v, b) => (r.delay > 0 && base ? `(${((v - b) / r.delay).toFixed(1)})` : "     ").padStart(7);
  console.log(
    `${String(r.delay).padStart(13)} ms | ${fmt(r.created)} ${trips(r.created, base?.created)}     | ${fmt(r.later)} ${trips(r.later, base?.later)}          | ${fmt(r.posted)} ${trips(r.posted, base?.posted)}`,
  );
}
process.exit(0);
