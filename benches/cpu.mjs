// `make bench`: workerd CPU, memory and time to first byte per streamed turn, for this Worker,
// for a pass-through Worker (benches/workers/passthrough.js) that only pipes the provider's
// bytes, and for the AI SDK's `streamText` (benches/workers/aisdk.js). Each Worker runs alone in its own workerd (started by `wrangler dev`, whose proxy runs
// in Node and is not counted; local D1 and Durable Objects, migrations applied), against the
// same loopback Anthropic-format provider writing one SSE event per chunk. CPU is read from the
// workerd process's scheduler statistics (every thread, nanoseconds) around each turn; the
// figures are medians over TURNS turns after a warm-up. Printed, never asserted: they depend on
// the machine.

import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { ROOT, anthropicLoopback, freshPersistDir, startWorker } from "../tests/e2e/harness.mjs";

const TURNS = Number(process.env.BENCH_TURNS ?? 30);
const WARMUP = 3;
// About 1,000 tokens: the loopback sends six characters per text delta, one event per write.
const LONG = "Stream me. ".repeat(546).slice(0, 6000);

const anthropic = await anthropicLoopback();
const vars = { ANTHROPIC_BASE_URL: anthropic.url, ANTHROPIC_API_KEY: "sk-ant-loopback" };

/** The workerd process under `wrangler dev` process `pid`. */
function workerdOf(pid) {
  const children = execFileSync("ps", ["-o", "pid=,comm=", "--ppid", String(pid)], { encoding: "utf8" })
    .split("\n").map((l) => l.trim().split(/\s+/)).filter(([p]) => p);
  const found = children.find(([, c]) => c === "workerd");
  if (found) return Number(found[0]);
  for (const [child] of children) {
    const deeper = workerdOf(child);
    if (deeper) return deeper;
  }
  return undefined;
}

/** CPU time of every thread of `pid`, in ms. */
function cpuMs(pid) {
  let ns = 0;
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    try { ns += Number(readFileSync(`/proc/${pid}/task/${task}/schedstat`, "utf8").split(" ")[0]); } catch {}
  }
  return ns / 1e6;
}

function rssMb(pid) {
  const line = readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith("VmRSS:"));
  return Number(line.split(/\s+/)[1]) / 1024;
}

async function start(options) {
  const worker = await startWorker({ persistDir: freshPersistDir(), vars, ...options });
  worker.pid = workerdOf(worker.pid);
  if (!worker.pid) throw new Error("no workerd process found under wrangler dev");
  return worker;
}

async function edgeAgent() {
  const worker = await start({});
  let n = 0;
  worker.complete = (body) => body.endsWith("data: [DONE]\n\n") && body.includes('"type":"finish"');
  worker.turn = () => fetch(`${worker.url}/v1/chat`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ id: `bench-${Date.now()}-${n++}`, trigger: "submit-message", messages: [{ id: "m1", role: "user", parts: [{ type: "text", text: "Say something long." }] }] }),
  });
  return worker;
}

async function passThrough() {
  const worker = await start({ config: path.join(ROOT, "benches/workers/passthrough.toml"), healthPath: "/" });
  worker.complete = (body) => body.includes("event: message_stop");
  worker.turn = () => fetch(worker.url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "claude-sonnet-4-5", max_tokens: 4096, stream: true, messages: [{ role: "user", content: "Say something long." }] }),
  });
  return worker;
}

async function aiSdk() {
  const worker = await start({ config: path.join(ROOT, "benches/workers/aisdk.toml"), healthPath: "/" });
  worker.complete = (body) => body.endsWith("data: [DONE]\n\n") && body.includes('"type":"finish"');
  worker.turn = () => fetch(worker.url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ id: "bench", trigger: "submit-message", messages: [{ id: "m1", role: "user", parts: [{ type: "text", text: "Say something long." }] }] }),
  });
  return worker;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

/** Runs turns, each answered by `answer`; returns median CPU ms, TTFB ms, and RSS after. */
async function measure(worker, answer) {
  const cpu = [];
  const ttfb = [];
  for (let i = 0; i < WARMUP + TURNS; i++) {
    anthropic.script(answer);
    const before = cpuMs(worker.pid);
    const started = performance.now();
    const response = await worker.turn();
    if (response.status !== 200) throw new Error(`turn answered ${response.status}: ${await response.text()}`);
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let first = true;
    let body = "";
    for (;;) {
      const { done, value } = await reader.read();
      if (first) { ttfb.push(performance.now() - started); first = false; }
      if (done) break;
      body += decoder.decode(value, { stream: true });
    }
    // Only whole answers count: every delta arrived and the stream closed properly.
    const said = [...body.matchAll(/"(?:delta|text)":"((?:[^"\\]|\\.)*)"/g)].map((m) => JSON.parse(`"${m[1]}"`)).join("");
    if (!said.includes(answer.text) || !worker.complete(body)) throw new Error(`turn ${i} was incomplete: ${body.slice(-300)}`);
    // What the turn does after its stream ends (the last D1 writes) belongs to it too.
    await new Promise((r) => setTimeout(r, 20));
    if (i >= WARMUP) cpu.push(cpuMs(worker.pid) - before);
  }
  return { cpu: median(cpu), ttfb: median(ttfb.slice(WARMUP)), rss: rssMb(worker.pid) };
}

const fmt = (n) => n.toFixed(1).padStart(7);
const rows = [];
for (const [name, make] of [["pass-through Worker", passThrough], ["this Worker", edgeAgent], ["AI SDK streamText", aiSdk]]) {
  const worker = await make();
  try {
    const long = await measure(worker, { text: LONG, writes: "event" });
    const oneWrite = await measure(worker, { text: LONG, writes: "one" });
    const short = await measure(worker, { text: "hi", writes: "event" });
    rows.push({ name, long, oneWrite, short });
  } finally {
    await worker.stop();
  }
}
await anthropic.close();

console.log(`workerd per turn, medians of ${TURNS} (each Worker alone in one workerd, under wrangler dev):`);
console.log("                       CPU ms, 1,000 tokens   CPU ms, same in one write   CPU ms, 'hi'   TTFB ms   RSS MB after");
for (const r of rows) {
  console.log(`  ${r.name.padEnd(20)} ${fmt(r.long.cpu)}                ${fmt(r.oneWrite.cpu)}                   ${fmt(r.short.cpu)}       ${fmt(r.long.ttfb)}   ${fmt(r.short.rss)}`);
}
const [base, ours, sdk] = rows;
console.log(`  1,000-token turn: this Worker ${(ours.long.cpu / base.long.cpu).toFixed(1)}x the pass-through's CPU; the AI SDK ${(sdk.long.cpu / ours.long.cpu).toFixed(1)}x this Worker's`);
