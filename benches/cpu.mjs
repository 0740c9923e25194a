// `make bench`: workerd CPU, memory and time to first byte per streamed turn, for this Worker,
// for a pass-through Worker (benches/workers/passthrough.js) that only pipes the provider's
// bytes, for the AI SDK's `streamText` (benches/workers/aisdk.js), and for the platform floor
// (benches/workers/floor.js: this design's storage and streaming work in plain JavaScript, a
// Durable Object per conversation and D1, nothing else). Each Worker runs in its own workerd,
// served by Miniflare directly (benches/miniflare.mjs: no `wrangler dev` proxy; local D1 and
// Durable Objects, migrations applied), against the same loopback Anthropic-format provider
// writing one SSE event per chunk; their turns are taken in rounds, one at a time. CPU is read
// from the workerd process's scheduler statistics (every thread, nanoseconds) around each turn;
// the figures are medians over BENCH_TURNS (30) turns after BENCH_WARMUP (3) warm-up rounds of
// each kind of turn. Printed, never asserted: they depend on the machine. BENCH_COMPARE=<a build
// directory> (a copy of build/ made before a change) adds that build of this Worker to the
// rounds, so that two builds are compared on the same machine at the same moment;
// BENCH_COMPARE_V8_FLAGS gives that build's workerd V8 flags
// (`--wasm-tiering-budget=18000`: V8 recompiles hot wasm with its optimising compiler a hundred
// times sooner, as a long-lived isolate would have it; the same build may be compared so).

import path from "node:path";
import { LONG_ANSWER as LONG, PACED_ANSWER, PACED_GAP_MS, PACED_TOKENS, TYPED_OUTPUT, TYPED_PACED_ANSWER, fillConversation } from "./answers.mjs";
import { contenders } from "./contenders.mjs";
import { cpuMs, mainThreadCpuMs, rssMb } from "./workerd.mjs";
import { anthropicLoopback, anthropicVars, api, chatSession } from "../tests/e2e/harness.mjs";

const TURNS = Number(process.env.BENCH_TURNS ?? 30);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 3);
// The loopback's pause between events in the first-token measurement.
const PAUSE_MS = 30;
const COMPARE = process.env.BENCH_COMPARE;
const COMPARE_V8_FLAGS = process.env.BENCH_COMPARE_V8_FLAGS;

const anthropic = await anthropicLoopback();
const vars = anthropicVars(anthropic);

const { edgeAgent: startEdgeAgent, passThrough, floor, aiSdk } = contenders(vars);

async function edgeAgent(main, v8Flags) {
  const worker = await startEdgeAgent(main, v8Flags);
  // A later message of one chat, as `useChat` sends it: with every message before it (the
  // object keeps the conversation: no D1 read in the Worker, none in the object before the
  // history's).
  const later = chatSession(`${worker.url}/v1/chat`, `bench-later-${Date.now()}`);
  worker.laterTurn = () => later("Say something.");
  const long = chatSession(`${worker.url}/v1/chat`, `bench-history-${Date.now()}`);
  worker.historyTurn = (text = "Say something.") => long(text);
  // A new chat's message asking for a typed answer (`output`).
  let typed = 0;
  worker.typedTurn = () => api(`${worker.url}/v1/chat`, "POST", "", {
    id: `bench-typed-${Date.now()}-${typed++}`,
    trigger: "submit-message",
    messages: [{ id: "m1", role: "user", parts: [{ type: "text", text: "Say something long." }] }],
    output: TYPED_OUTPUT,
  });
  // The object's log line for the turn (found by the request's id): its D1 round trips,
  // requests and SQL statements.
  worker.traffic = async (requestId) => {
    const deadline = Date.now() + 5_000;
    for (;;) {
      const line = worker.log().split("\n").findLast((l) => l.includes('"event":"turn"') && l.includes(`"request_id":"${requestId}"`));
      if (line) return JSON.parse(line.slice(line.indexOf("{")));
      if (Date.now() > deadline) throw new Error(`no turn log line for request ${requestId}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  };
  return worker;
}

/** The floor, with `historyTurn` (later messages of one long chat). */
async function floorWithHistory(floorVars) {
  const worker = await floor(floorVars);
  const long = chatSession(worker.url, "floor-history");
  worker.historyTurn = (text = "Say something.") => long(text);
  return worker;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

/** One turn of `worker`, answered by `answer`: its CPU ms, time to first byte, to the first
 * token (the first text delta that says something) and to the end, and (this Worker) its D1
 * round trips, object requests and SQL statements from the turn's log line. */
async function turn(worker, answer, label) {
  anthropic.script(answer);
  const before = cpuMs(worker.pid);
  const beforeMain = mainThreadCpuMs(worker.pid);
  const started = performance.now();
  const response = await worker.turn();
  if (response.status !== 200) throw new Error(`${worker.name}: turn answered ${response.status}: ${await response.text()}`);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let ttfb;
  let firstToken;
  let body = "";
  for (;;) {
    const { done, value } = await reader.read();
    ttfb ??= performance.now() - started;
    if (done) break;
    const seen = body.length;
    body += decoder.decode(value, { stream: true });
    // A UI `text-delta`, or the provider's own `text_delta` (the pass-through).
    if (firstToken === undefined && /"(?:delta|text)": ?"[^"]/.test(body.slice(Math.max(0, seen - 16)))) {
      firstToken = performance.now() - started;
    }
  }
  const total = performance.now() - started;
  // Only whole answers count: every delta arrived and the stream closed properly.
  const said = [...body.matchAll(/"(?:delta|text)":"((?:[^"\\]|\\.)*)"/g)].map((m) => JSON.parse(`"${m[1]}"`)).join("");
  // A typed answer is whole when its part says so (it is never text).
  const whole = answer.typed ? body.includes('"status":"complete"') : said.includes(answer.text);
  if (!whole || !worker.complete(body)) throw new Error(`${worker.name}: ${label} turn was incomplete: ${body.slice(-300)}`);
  // What the turn does after its stream ends (the last D1 writes) belongs to it too.
  await new Promise((r) => setTimeout(r, 20));
  const sample = { cpu: cpuMs(worker.pid) - before, main: mainThreadCpuMs(worker.pid) - beforeMain, ttfb, firstToken, total };
  if (worker.traffic) {
    const line = await worker.traffic(response.headers.get("x-request-id"));
    Object.assign(sample, { d1: line.d1_round_trips, objectRequests: line.object_requests, sql: line.sql_statements });
  }
  return sample;
}

/** 0..n-1 in a random order (Fisher-Yates). */
function shuffled(n) {
  const order = [...Array(n).keys()];
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [order[i], order[j]] = [order[j], order[i]];
  }
  return order;
}

/**
 * Runs WARMUP + TURNS rounds of one kind of turn; in each round every Worker runs one turn, in
 * turn, so that what the machine does meanwhile (other load, frequency, the page cache) falls
 * on all of them alike and the ratios between them hold even when the figures drift; the order
 * is shuffled each round, so that no Worker always comes first or after the same one. Returns,
 * per Worker, the medians after the warm-up and its RSS after.
 */
async function measure(workers, answer, label, turnOf = (w) => w.turn) {
  const samples = workers.map(() => []);
  for (let round = 0; round < WARMUP + TURNS; round++) {
    for (const i of shuffled(workers.length)) {
      const worker = workers[i];
      const sample = await turn({ ...worker, turn: turnOf(worker) }, answer, label);
      if (round >= WARMUP) samples[i].push(sample);
    }
    if ((round + 1) % 10 === 0) process.stderr.write(`  ${label}: ${round + 1} of ${WARMUP + TURNS} rounds\n`);
  }
  return workers.map((worker, i) => {
    const of = (key) => (samples[i][0][key] === undefined ? undefined : median(samples[i].map((s) => s[key])));
    return {
      cpu: of("cpu"), main: of("main"), ttfb: of("ttfb"), firstToken: of("firstToken"), total: of("total"), rss: rssMb(worker.pid),
      d1: of("d1"), objectRequests: of("objectRequests"), sql: of("sql"),
    };
  });
}

// A long conversation: HISTORY_TURNS turns of a message and an answer of HISTORY_LENGTH
// characters each (540,000 characters, about 135,000 tokens: under the share of a
// 200,000-token window at which this Worker compacts), then "hi" turns in it. A chat's messages
// are short, so by default there are many: 270 of 2,000 characters (BENCH_HISTORY_MESSAGE
// sets their length; 90000 makes the six long ones earlier runs measured).
const HISTORY_LENGTH = Number(process.env.BENCH_HISTORY_MESSAGE ?? 2_000);
const HISTORY_TURNS = Math.max(1, Math.round(540_000 / (2 * HISTORY_LENGTH)));

const fmt = (n, w = 7) => n.toFixed(1).padStart(w);
const names = ["pass-through Worker", "this Worker", "AI SDK streamText", "platform floor (JS)"];
const starts = [passThrough, () => edgeAgent(), aiSdk, () => floorWithHistory()];
if (COMPARE) {
  names.push("compared build");
  starts.push(() => edgeAgent(path.resolve(COMPARE, "index.js"), COMPARE_V8_FLAGS));
}
// All run at once, each in its own workerd (started one after the other: each finds its
// process as the one new workerd); only one has a turn at a time.
const workers = [];
for (const start of starts) workers.push(await start());
workers.forEach((w, i) => { w.name = names[i]; });
// The floor without its two D1 round trips, in the "hi" rounds only: what D1 is of the floor's
// short turn (under Miniflare local D1 runs in the same workerd; a deployment's runs elsewhere).
const withoutD1 = await floorWithHistory({ FLOOR_WITHOUT_D1: "1" });
withoutD1.name = "platform floor without D1";
const rows = names.map((name) => ({ name }));
try {
  const put = (key, results) => results.forEach((r, i) => { rows[i][key] = r; });
  put("long", await measure(workers, { text: LONG, writes: "event" }, "1,000-token answer"));
  put("oneWrite", await measure(workers, { text: LONG, writes: "one" }, "the same in one write"));
  const short = await measure([...workers, withoutD1], { text: "hi", writes: "event" }, '"hi"');
  put("short", short.slice(0, workers.length));
  withoutD1.short = short[workers.length];
  put("paced", await measure(workers, PACED_ANSWER, "paced answer"));
  // The same answer as a typed one: this Worker only (a compared build may not serve them).
  rows[1].typed = (await measure([workers[1]], TYPED_PACED_ANSWER, "typed paced answer", (w) => w.typedTurn))[0];
  // A later message of one chat: this Worker only (the others keep no conversation).
  const keeping = COMPARE ? [1, 4] : [1];
  const later = await measure(keeping.map((i) => workers[i]), { text: "hi", writes: "event" }, "later message", (w) => w.laterTurn);
  keeping.forEach((i, k) => { rows[i].later = later[k]; });
  // A later message of a long conversation: this Worker and the floor, which reads and sends
  // the history as this Worker does.
  const reading = COMPARE ? [1, 3, 4] : [1, 3];
  for (const i of reading) await fillConversation(anthropic, workers[i].historyTurn, HISTORY_TURNS, HISTORY_LENGTH);
  const history = await measure(reading.map((i) => workers[i]), { text: "hi", writes: "event" }, "long conversation", (w) => w.historyTurn);
  reading.forEach((i, k) => { rows[i].history = history[k]; });
  // A model that pauses before each event after the first, as a real one does before its
  // first token: what the client waits for is then the runtime's own delay.
  put("paused", await measure(workers, { text: "hi", writes: "event", burst: 1, gapMs: PAUSE_MS }, "paused provider"));
} finally {
  await Promise.all([...workers, withoutD1].map((w) => w.stop()));
}
await anthropic.close();

const [base, ours, sdk, least, compared] = rows;
console.log(`workerd per turn, medians of ${TURNS} after ${WARMUP} warm-up turns (each Worker in its own workerd, served by Miniflare; their turns taken in rounds, one Worker at a time):`);
for (const [label, key] of [["1,000-token answer, one SSE event per write", "long"], ["the same answer in one write", "oneWrite"], ['short answer ("hi")', "short"], [`${PACED_TOKENS}-token answer at a model's pace, one event per ${PACED_GAP_MS} ms`, "paced"]]) {
  console.log(`  ${label}:`);
  console.log("                           CPU ms   x pass-through   TTFB ms   total ms");
  for (const r of rows) {
    const m = r[key];
    console.log(`    ${r.name.padEnd(20)} ${fmt(m.cpu)}   ${fmt(m.cpu / base[key].cpu, 10)}x     ${fmt(m.ttfb)}   ${fmt(m.total, 8)}`);
  }
}
console.log(`  this Worker, "hi" as a later message of one conversation (its history grows to ${2 * (WARMUP + TURNS)} messages): CPU ${fmt(ours.later.cpu)} ms, TTFB ${fmt(ours.later.ttfb)} ms, total ${fmt(ours.later.total)} ms`);
console.log(`  "hi" as a later message of a conversation of ${(2 * HISTORY_TURNS * HISTORY_LENGTH).toLocaleString("en")} characters (${2 * HISTORY_TURNS} messages, then the rounds'): this Worker CPU ${fmt(ours.history.cpu, 0)} ms, TTFB ${fmt(ours.history.ttfb, 0)} ms; the platform floor CPU ${fmt(least.history.cpu, 0)} ms, TTFB ${fmt(least.history.ttfb, 0)} ms`);
console.log(`  this Worker, D1 round trips per turn (none in the Worker; in the object: a new chat's row, its first message and the history in one; a later message written alongside the history's read; then the answer): first message ${ours.short.d1}, later message ${ours.later.d1}, 1,000-token answer ${ours.long.d1}; object requests 1 (the hand-over) + ${ours.long.objectRequests} during the turn`);
console.log(`  this Worker, SQL statements in the object's own storage per turn, from the hand-over: first message ${ours.short.sql} (one of them makes a new object's tables, with its first write; +1 opening it, asking whether it has any; the floor makes 6 with its tables), later message ${ours.later.sql}, 1,000-token answer ${ours.long.sql}`);
console.log(`  first token, "hi" from a provider that pauses ${PAUSE_MS} ms before each event after its first (median ms from the request): ${rows.map((r) => `${r.name} ${r.paused.firstToken.toFixed(1)}`).join(", ")}`);
console.log(`  RSS MB after ~${3 * (WARMUP + TURNS)} turns: ${rows.map((r) => `${r.name} ${r.short.rss.toFixed(0)}`).join(", ")}`);
console.log(`  "hi" in a new conversation: this Worker ${fmt(ours.short.cpu, 0)} ms of CPU, the platform floor ${fmt(least.short.cpu, 0)} ms (a Durable Object and two D1 round trips, in plain JavaScript), the AI SDK ${fmt(sdk.short.cpu, 0)} ms (stores nothing)`);
// D1's share of the floor's "hi": the design's storage contract (each message written to D1 as it
// is produced: two round trips for a one-step turn) set beside the AI SDK, which stores nothing.
const d1 = least.short.cpu - withoutD1.short.cpu;
console.log(`  the platform floor's "hi" without its two D1 round trips: ${fmt(withoutD1.short.cpu, 0)} ms, so local D1 (in this workerd under Miniflare; elsewhere in a deployment) is ${fmt(d1, 0)} ms of the floor's ${fmt(least.short.cpu, 0)}; the AI SDK ${fmt(sdk.short.cpu, 0)} ms; this Worker less the same ${fmt(d1, 0)} ms: ${fmt(ours.short.cpu - d1, 0)} ms`);
console.log(`  1,000-token turn: this Worker ${(ours.long.cpu / base.long.cpu).toFixed(1)}x the pass-through's CPU; the AI SDK ${(sdk.long.cpu / ours.long.cpu).toFixed(1)}x this Worker's`);
// What the tokens cost apart from the turn's fixed cost: the 1,000-token turn's median less the
// "hi"'s, per Worker. The ratio above mixes the two; this says which one a gap is made of.
const tokens = (r) => r.long.cpu - r.short.cpu;
console.log(`  the 1,000 tokens alone (the 1,000-token turn's median CPU less the "hi"'s): this Worker ${fmt(tokens(ours), 0)} ms, the pass-through ${fmt(tokens(base), 0)} ms (${(tokens(ours) / tokens(base)).toFixed(1)}x), the platform floor ${fmt(tokens(least), 0)} ms; "hi" itself: this Worker ${fmt(ours.short.cpu - base.short.cpu, 0)} ms above the pass-through's, the floor ${fmt(least.short.cpu - base.short.cpu, 0)} ms`);
// At a model's pace each event is read alone: what one costs each Worker above its "hi".
const perEvent = (r, key = "cpu") => ((r.paced[key] - r.short[key]) / PACED_TOKENS) * 1000;
console.log(`  each event of the paced answer (its median CPU less the "hi"'s, per token): ${rows.map((r) => `${r.name} ${perEvent(r).toFixed(0)} µs`).join(", ")}`);
const typedPerEvent = ((ours.typed.cpu - ours.short.cpu) / PACED_TOKENS) * 1000;
console.log(`  each event of the same answer as a typed answer (\`output\`: parsed as it streams, shown at most every 50 ms, checked at its end): this Worker ${typedPerEvent.toFixed(0)} µs against ${perEvent(ours).toFixed(0)} µs untyped (${(typedPerEvent / perEvent(ours)).toFixed(2)}x); the turn ${fmt(ours.typed.cpu, 0)} ms against ${fmt(ours.paced.cpu, 0)} ms`);
// The figures above are the whole process's. V8 compiles hot code again, optimised, and helps
// its garbage collector on background threads; what is left is the thread the isolates run on.
console.log(`  the same on workerd's main thread alone (the isolates' thread; V8's background compiling and GC left out), CPU ms: 1,000-token answer ${rows.map((r) => `${r.name} ${r.long.main.toFixed(1)}`).join(", ")}; "hi" ${rows.map((r) => `${r.name} ${r.short.main.toFixed(1)}`).join(", ")}; per event of the paced answer ${rows.map((r) => `${r.name} ${perEvent(r, "main").toFixed(0)} µs`).join(", ")}`);
if (compared) {
  const versus = (key) => `${fmt(ours[key].cpu, 0)} ms against ${fmt(compared[key].cpu, 0)} ms`;
  console.log(`  this build against the compared one (${COMPARE}${COMPARE_V8_FLAGS ? `, V8 flags ${COMPARE_V8_FLAGS}` : ""}), CPU: "hi" ${versus("short")}, a later message ${versus("later")}, a later message of the long conversation ${versus("history")}, 1,000-token turn ${versus("long")}, the paced answer ${versus("paced")}; RSS ${ours.short.rss.toFixed(0)} against ${compared.short.rss.toFixed(0)} MB`);
}
