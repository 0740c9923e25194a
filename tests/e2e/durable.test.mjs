// The conversation's Durable Object owns its turns: a message queued during a turn is answered
// however the turn ends, with no further request; a turn outlives its client and the runtime;
// readers re-attach to a running turn; a paused turn remembers its client tools; long
// conversations are compacted within a model's window.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { readdirSync } from "node:fs";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { DefaultChatTransport } from "ai";
import { anthropicLoopback, anthropicVars, api, chatMessage, conversationObjects, d1Query, freshPersistDir, parseUiStream, readUiStream, startWorker } from "./harness.mjs";

// A model with a 2,048-token window, declared by the deployment.
const TINY = { id: "anthropic:tiny-model", context_window: 2048, max_output_tokens: 256, price: { input: 1, output: 2, cache_read: 0, cache_write: 0 } };
let anthropic, worker, persistDir, vars;

before(async () => {
  anthropic = await anthropicLoopback();
  persistDir = freshPersistDir();
  vars = { ...anthropicVars(anthropic), MAX_LLM_CALLS: "2", MODELS: JSON.stringify([TINY]) };
  worker = await startWorker({ persistDir, vars });
});

after(async () => {
  await worker?.stop();
  await anthropic?.close();
});

const create = async (body = {}) => (await (await api(worker.url, "POST", "/v1/conversations", body)).json()).id;
const history = async (id) => (await (await api(worker.url, "GET", `/v1/conversations/${id}/messages?limit=500`)).json()).messages;
const conversation = async (id) => (await api(worker.url, "GET", `/v1/conversations/${id}`)).json();
const textOf = (chunks) => chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join("");
const untilRequests = async (n) => { while (anthropic.requests.length < n) await sleep(10); };

/** Polls the history (reads only) until `done(history)` holds; fails after `ms`. */
async function until(id, done, ms = 20_000, what = "the history to settle") {
  const deadline = Date.now() + ms;
  for (;;) {
    const h = await history(id);
    if (done(h) && (await conversation(id)).status === "idle") return h;
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}: ${JSON.stringify(h.map((m) => [m.kind, m.stop_reason]))}`);
    await sleep(150);
  }
}

const lastAnswer = (h) => h.filter((m) => m.kind === "assistant").at(-1);
const answered = (text) => (h) => lastAnswer(h)?.content?.[0]?.text === text;

/** Starts a slow turn, queues a message during it, and returns both. */
async function queueDuring(firstTurn, body, queued = { message: "While you are at it: what is 2+2?" }) {
  const id = await create();
  const before = anthropic.requests.length;
  anthropic.script(firstTurn);
  const first = api(worker.url, "POST", `/v1/conversations/${id}/messages`, body);
  await untilRequests(before + 1);
  const q = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, queued);
  assert.equal(q.status, 202);
  return { id, first: await first };
}

test("a message queued during a turn that is then cancelled is answered with no further request", async () => {
  const { id, first } = await queueDuring({ text: "A long story that will be cut short by a cancel. ".repeat(8), gapMs: 20 }, { message: "Tell me a story." });
  anthropic.script({ text: "Four." });
  // Cancel once some of the answer has streamed, so there is a partial answer to keep.
  const reader = first.body.getReader();
  const decoder = new TextDecoder();
  let seen = "";
  while (!seen.includes('"text-delta"')) seen += decoder.decode((await reader.read()).value, { stream: true });
  assert.equal((await api(worker.url, "POST", `/v1/conversations/${id}/cancel`)).status, 202);
  while (!(await reader.read()).done);
  const h = await until(id, answered("Four."));
  assert.deepEqual(h.map((m) => [m.kind, m.stop_reason]), [["user", undefined], ["assistant", "aborted"], ["user", undefined], ["assistant", "end_turn"]]);
  // The aborted partial answer was never replayed to the model.
  assert.deepEqual(anthropic.requests.at(-1).body.messages.map((m) => m.role), ["user"]);
});

test("a message queued during a turn that fails mid-stream is answered with no further request", async () => {
  const { id, first } = await queueDuring(
    { text: "Halfway through this answer the provider fails.", gapMs: 15, failWith: { type: "overloaded_error", message: "Overloaded" } },
    { message: "Explain something." },
  );
  anthropic.script({ text: "Four." });
  const { chunks } = await readUiStream(first);
  assert.ok(chunks.some((c) => c.type === "error"), "the first turn failed");
  const h = await until(id, answered("Four."));
  assert.deepEqual(h.map((m) => [m.kind, m.stop_reason]), [["user", undefined], ["assistant", "error"], ["user", undefined], ["assistant", "end_turn"]]);
});

test("a follow-up queued during a turn that hits MAX_LLM_CALLS is answered with no further request", async () => {
  const { id, first } = await queueDuring(
    { text: "Checking the time, slowly.", gapMs: 15, tools: [{ id: "toolu_1", name: "current_time", input: {} }] },
    { message: "What time is it, twice?" },
    { message: "Then what is 2+2?", delivery: "followup" },
  );
  anthropic.script({ text: "Again.", tools: [{ id: "toolu_2", name: "current_time", input: {} }] }, { text: "Four." });
  const { chunks } = await readUiStream(first);
  assert.match(chunks.find((c) => c.type === "error").errorText, /MAX_LLM_CALLS/);
  const h = await until(id, answered("Four."));
  assert.deepEqual(h.map((m) => m.kind), ["user", "assistant", "tool_result", "assistant", "tool_result", "user", "assistant"]);
  assert.equal(h[5].content[0].text, "Then what is 2+2?");
});

test("a follow-up queued during a turn that pauses for a client tool is answered; the pending call gets a result", async () => {
  const locate = { name: "get_location", description: "The user's location", input_schema: { type: "object", properties: {} } };
  // A follow-up waits for the turn's end (a steering message would be injected before the
  // client tool's call instead, and the turn would not pause).
  const { id, first } = await queueDuring(
    { text: "I need your location first.", gapMs: 15, tools: [{ id: "toolu_loc", name: "get_location", input: {} }] },
    { message: "Where am I?", tools: [locate] },
    { message: "While you are at it: what is 2+2?", delivery: "followup" },
  );
  anthropic.script({ text: "Four." });
  const { chunks } = await readUiStream(first);
  assert.deepEqual(chunks.at(-1), { type: "finish", finishReason: "tool-calls" });
  const h = await until(id, answered("Four."));
  assert.deepEqual(h.map((m) => m.kind), ["user", "assistant", "tool_result", "user", "assistant"]);
  assert.match(h[2].content, /moved on/);
});

test("a paused turn remembers its client tools: tool_results alone resume it", async () => {
  const id = await create();
  const locate = { name: "get_location", description: "The user's location", input_schema: { type: "object", properties: {} } };
  anthropic.script({ text: "Where are you?", tools: [{ id: "toolu_where", name: "get_location", input: {} }] });
  await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Weather here?", tools: [locate] }));
  assert.equal((await conversation(id)).status, "awaiting_tool_results");
  anthropic.script({ text: "Sunny in Lisbon." });
  // A plain HTTP client sends the result without repeating the tool's definition.
  const { chunks } = await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { tool_results: [{ tool_call_id: "toolu_where", output: "Lisbon" }] }));
  assert.equal(textOf(chunks), "Sunny in Lisbon.");
  const sent = anthropic.requests.at(-1).body;
  assert.deepEqual(sent.messages.at(-1).content, [{ type: "tool_result", tool_use_id: "toolu_where", content: "Lisbon" }]);
  assert.ok(sent.tools.some((t) => t.name === "get_location"), "the paused turn's tools were offered again");
  const h = await history(id);
  assert.equal(h[2].content, "Lisbon", "the result was used, not refused as an unknown tool");
});

test("a client that disconnects one second into a slow turn still gets the whole answer in history", async () => {
  const id = await create();
  const full = "Every word of this slow answer lands in the history even though nobody is reading it. ".repeat(3);
  anthropic.script({ text: full, gapMs: 12 });
  const controller = new AbortController();
  const response = await fetch(`${worker.url}/v1/conversations/${id}/messages`, {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ message: "Talk slowly." }), signal: controller.signal,
  });
  const reader = response.body.getReader();
  await reader.read();
  await sleep(1000);
  controller.abort();
  const h = await until(id, answered(full), 60_000, "the abandoned turn to finish");
  assert.deepEqual(h.map((m) => m.kind), ["user", "assistant"]);
});

test("reconnectToStream replays a running turn from its start; two readers see the same chunks; then 204", async () => {
  const id = await create();
  const full = "A slow answer that readers join halfway through and still read from the start. ".repeat(2);
  anthropic.script({ text: full, gapMs: 10 });
  const before = anthropic.requests.length;
  const transport = new DefaultChatTransport({ api: `${worker.url}/v1/chat` });
  const starter = api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Go." });
  await untilRequests(before + 1);
  await sleep(300);
  const readAll = async (stream) => {
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    return chunks;
  };
  const [a, b] = await Promise.all([transport.reconnectToStream({ chatId: id }), transport.reconnectToStream({ chatId: id })]);
  assert.ok(a && b, "a running turn has a stream");
  const [chunksA, chunksB, started] = await Promise.all([readAll(a), readAll(b), readUiStream(await starter)]);
  assert.equal(chunksA[0].type, "start", "the replay begins at the turn's start");
  assert.equal(chunksA.at(-1).type, "finish");
  assert.equal(textOf(chunksA), full);
  assert.deepEqual(chunksB, chunksA, "two readers see the same chunks");
  assert.deepEqual(chunksA, started.chunks, "the same chunks the POST streamed");
  assert.equal(await transport.reconnectToStream({ chatId: id }), null, "no turn runs: 204");
  const direct = await api(worker.url, "GET", `/v1/conversations/${id}/stream`);
  assert.equal(direct.status, 204);
});

test("at most 16 readers follow a turn: the 17th is a 429, and a reader that leaves makes room", async () => {
  const id = await create();
  anthropic.script({ text: "A slow answer that many tabs watch. ".repeat(20), writes: "event", gapMs: 25 });
  const before = anthropic.requests.length;
  const starter = api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Go slowly." });
  await untilRequests(before + 1);
  const attach = () => api(worker.url, "GET", `/v1/conversations/${id}/stream`);
  const controllers = Array.from({ length: 15 }, () => new AbortController());
  const readers = await Promise.all(controllers.map((c) => fetch(`${worker.url}/v1/conversations/${id}/stream`, { signal: c.signal })));
  assert.deepEqual(readers.map((r) => r.status), Array(15).fill(200), "the POST and 15 readers");
  const refused = await attach();
  assert.equal(refused.status, 429);
  assert.match((await refused.json()).error.message, /16 readers follow this turn already/);
  // One tab closes: its place is free once the object sees it gone.
  controllers[0].abort();
  let again;
  for (let i = 0; i < 100; i++) {
    again = await attach();
    if (again.status === 200) break;
    await again.body?.cancel();
    await sleep(50);
  }
  assert.equal(again.status, 200);
  // Everyone else still gets the whole turn.
  const [first] = await Promise.all([readUiStream(readers[1]), readUiStream(again), readUiStream(await starter)]);
  assert.equal(first.chunks.at(-1).type, "finish");
  for (const r of readers.slice(2)) await r.body.cancel();
});

test("DELETE cancels a running turn before the history goes", async () => {
  const id = await create();
  anthropic.script({ text: "An answer that is deleted while it streams. ".repeat(10), gapMs: 20 });
  const before = anthropic.requests.length;
  const running = api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Go on." });
  await untilRequests(before + 1);
  const del = await api(worker.url, "DELETE", `/v1/conversations/${id}`);
  assert.equal(del.status, 204);
  const body = await (await running).text();
  assert.ok(body.includes('"type":"abort"'), "the running turn was cancelled");
  assert.equal((await api(worker.url, "GET", `/v1/conversations/${id}/messages`)).status, 404);
  assert.equal((await api(worker.url, "GET", `/v1/conversations/${id}/stream`)).status, 404);
});

test("a conversation whose DELETE failed half way refuses messages until its object finishes the deletion", async () => {
  const id = await create();
  anthropic.script({ text: "Kept." });
  await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "hi" }));
  // D1 refuses to delete this conversation's row (as a failing write would): the object has
  // been cleared, the rows are still there.
  await d1Query(persistDir, `CREATE TRIGGER hold_${id} BEFORE DELETE ON conversations WHEN old.id = '${id}' BEGIN SELECT RAISE(ABORT, 'held'); END`);
  let dropped = false;
  try {
    assert.equal((await api(worker.url, "DELETE", `/v1/conversations/${id}`)).status, 500);
    // Nothing recreates it meanwhile: a message is refused, and runs no turn.
    const before = anthropic.requests.length;
    const refused = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "still there?" });
    assert.equal(refused.status, 404);
    assert.equal(anthropic.requests.length, before);
    await d1Query(persistDir, `DROP TRIGGER hold_${id}`);
    dropped = true;
    // With no further request, the object's alarm deletes the rows.
    const deadline = Date.now() + 20_000;
    while ((await api(worker.url, "GET", `/v1/conversations/${id}`)).status !== 404) {
      assert.ok(Date.now() < deadline, "the deletion was never finished");
      await sleep(250);
    }
    assert.deepEqual(await d1Query(persistDir, `SELECT COUNT(*) AS n FROM messages WHERE conversation_id = '${id}'`), [{ n: 0 }]);
  } finally {
    if (!dropped) await d1Query(persistDir, `DROP TRIGGER IF EXISTS hold_${id}`);
  }
});

test("a model declared in MODELS with a 2,048-token window stays usable over 25 long turns; a summary appears", async () => {
  const id = await create({ model: TINY.id });
  const models = await (await api(worker.url, "GET", "/v1/models")).json();
  assert.ok(models.models.some((m) => m.id === TINY.id && m.context_window === 2048), "GET /v1/models lists it");
  const before = anthropic.requests.length;
  let summaries = 0;
  anthropic.respond = (body) => {
    const last = body.messages.at(-1).content;
    const text = Array.isArray(last) ? last.map((c) => c.text ?? "").join("") : String(last);
    if (text.startsWith("Summarise the conversation")) {
      summaries++;
      return { text: `Notes ${summaries}: the user is planning a long trip, leg by leg.` };
    }
    return { text: `Leg ${text.slice(4, 6)} noted. ` + "Here is a long, careful answer about that leg of the journey. ".repeat(10) };
  };
  try {
    for (let i = 0; i < 25; i++) {
      const leg = String(i).padStart(2, "0");
      const message = `Leg ${leg}: ` + "I want to travel further along the coast and see the old towns. ".repeat(8);
      const { chunks } = await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message }));
      assert.ok(!chunks.some((c) => c.type === "error"), `turn ${i} failed: ${JSON.stringify(chunks.find((c) => c.type === "error"))}`);
      assert.match(textOf(chunks), new RegExp(`^Leg ${leg} noted`));
    }
  } finally {
    anthropic.respond = null;
  }
  // No request exceeded the window: the text it carried (about four characters a token) plus
  // the room it asked for to answer.
  for (const { body } of anthropic.requests.slice(before)) {
    const chars = JSON.stringify(body.messages).length + (body.system?.length ?? 0);
    assert.ok(body.max_tokens <= TINY.max_output_tokens, `max_tokens ${body.max_tokens}`);
    assert.ok(chars / 4 + body.max_tokens <= TINY.context_window, `a request of ~${Math.round(chars / 4)} tokens + ${body.max_tokens}`);
  }
  assert.ok(summaries >= 3, `compacted ${summaries} times`);
  // Each summary request is charged like an answer: the ledger holds a row for each.
  const [{ rows }] = await d1Query(persistDir, `SELECT COUNT(*) AS rows FROM usage_ledger WHERE conversation_id = '${id}'`);
  assert.equal(rows, 25 + summaries, `${rows} ledger rows for 25 answers and ${summaries} summaries`);
  const h = await history(id);
  assert.ok(h.some((m) => m.kind === "summary" && !m.compacted), "the history shows the latest summary");
  assert.ok(h.filter((m) => m.compacted).length > 20, "replaced rows stay readable, marked compacted");
  assert.equal(h.filter((m) => m.kind === "user").length, 25, "users scroll back through everything");
  // A turn loads only what the model sees: the latest summary first, then what follows it.
  const sent = anthropic.requests.at(-1).body.messages;
  assert.match(sent[0].content[0].text, /^Summary of the earlier conversation:\nNotes/);
});

test("a new message is kept by the object until it is in D1: D1 failing, then the runtime killed, loses nothing", async () => {
  // A /v1/chat id the Worker hands to the conversation's object without reading D1; D1 held
  // locked by another writer, so the object's write of the message fails as the runtime dies.
  const { DatabaseSync } = await import("node:sqlite");
  const d1File = readdirSync(persistDir, { recursive: true }).find((f) => /D1DatabaseObject[/\\][0-9a-f]+\.sqlite$/.test(f));
  assert.ok(d1File, "the local D1 database file");
  const lock = new DatabaseSync(path.join(persistDir, d1File));
  lock.exec("BEGIN EXCLUSIVE");
  const before = anthropic.requests.length;
  anthropic.script({ text: "Milk, noted." });
  const chat = `milk-${Date.now()}`;
  const dying = chatMessage(`${worker.url}/v1/chat`, chat, "Remember the milk.").then((r) => r.text()).catch(() => "");
  await sleep(1500);
  const during = anthropic.requests.length;
  await worker.kill();
  await dying;
  lock.exec("ROLLBACK");
  lock.close();
  assert.equal(during, before, "the provider was not called before the message was stored");
  worker = await startWorker({ persistDir, vars });
  // The conversation's row comes with the message's write, so it is polled until it exists.
  let h = [];
  for (const deadline = Date.now() + 60_000; !answered("Milk, noted.")(h); await sleep(250)) {
    assert.ok(Date.now() < deadline, `timed out waiting for the kept message to be answered: ${JSON.stringify(h)}`);
    h = (await (await api(worker.url, "GET", `/v1/conversations/${chat}/messages`)).json()).messages ?? [];
  }
  assert.deepEqual(h.map((m) => m.kind), ["user", "assistant"]);
  assert.match(JSON.stringify(h[0]), /Remember the milk\./);
});

test("a later message is written to D1 while the model answers; a D1 that refuses the write strands nothing and does not loop on the model", async () => {
  const id = await create();
  anthropic.script({ text: "First." });
  await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "One?" }));
  // D1 reads this conversation's history but refuses its new messages.
  await d1Query(persistDir, `CREATE TRIGGER refuse_${id} BEFORE INSERT ON messages WHEN new.conversation_id = '${id}' BEGIN SELECT RAISE(ABORT, 'refused'); END`);
  const before = anthropic.requests.length;
  anthropic.script({ text: "Second." });
  const { chunks } = await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Two?" }));
  assert.equal(anthropic.requests.length, before + 1, "the model was asked while the message was being written");
  assert.ok(chunks.some((c) => c.type === "error"), `the stream says the turn failed: ${JSON.stringify(chunks)}`);
  // Nothing answers a message D1 does not hold, and the model is not asked again at once.
  await sleep(1500);
  assert.equal(anthropic.requests.length, before + 1, "no turn after turn while D1 refuses");
  assert.deepEqual((await history(id)).map((m) => m.kind), ["user", "assistant"]);
  // The message waited in the conversation's object: once D1 takes writes, the alarm answers it.
  await d1Query(persistDir, `DROP TRIGGER refuse_${id}`);
  anthropic.script({ text: "Second, again." });
  const h = await until(id, answered("Second, again."), 60_000, "the kept message to be answered");
  assert.deepEqual(h.map((m) => m.kind), ["user", "assistant", "user", "assistant"]);
  assert.match(JSON.stringify(h[2]), /Two\?/);
});

test("wrangler dev killed mid-turn and started again finishes that turn unasked within a minute", async () => {
  const id = await create();
  const before = anthropic.requests.length;
  // `gapMs` pauses between the 1-9 byte pieces the loopback writes: about 10 s in all.
  anthropic.script({ text: "This answer is cut off when the runtime dies, and finished after it restarts. ".repeat(6), gapMs: 3 });
  const dying = api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Plan my week." }).then((r) => r.text()).catch(() => "");
  await untilRequests(before + 1);
  await sleep(3000); // long enough for a batch of the stream (and the partial answer) to be saved
  await worker.kill();
  await dying;
  // As if the runtime had died between the message's D1 write and its leaving the inbox: the
  // recovered turn must not show the model the message twice.
  const [stored] = await d1Query(persistDir, `SELECT id, body FROM messages WHERE conversation_id = '${id}' AND kind = 'user'`);
  const { file } = (await conversationObjects(persistDir)).find((o) => o.conversation === id);
  const { DatabaseSync } = await import("node:sqlite");
  const object = new DatabaseSync(file);
  object.prepare("INSERT INTO inbox (id, delivery, message, queued_at) VALUES (?, 'starting', ?, ?)").run(stored.id, stored.body, Date.now());
  object.close();
  anthropic.script({ text: "Here is the rest of the plan." });
  const restartedAt = Date.now();
  worker = await startWorker({ persistDir, vars });
  const h = await until(id, answered("Here is the rest of the plan."), 60_000, "the interrupted turn to be finished by the alarm");
  const tookSeconds = (Date.now() - restartedAt) / 1000;
  assert.ok(tookSeconds < 60, `finished ${tookSeconds}s after the restart`);
  assert.deepEqual(h.map((m) => [m.kind, m.stop_reason]), [["user", undefined], ["assistant", "interrupted"], ["assistant", "end_turn"]]);
  assert.ok(h[1].content[0].text.startsWith("This answer is cut off"), "the partial answer stays");
  // The interrupted answer is never replayed to a model, and the message is there once.
  assert.deepEqual(anthropic.requests.at(-1).body.messages.map((m) => m.role), ["user"]);
  assert.equal(JSON.stringify(anthropic.requests.at(-1).body.messages).split("Plan my week.").length - 1, 1);
});
