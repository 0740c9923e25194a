// Conversations as resources: the model registry, listing, deletion, and the usage ledger.

import assert from "node:assert/strict";
import { test } from "node:test";
import { randomBytes } from "node:crypto";
import { api, chatMessage, conversationObjects, d1Query, readUiStream, setup } from "./harness.mjs";

const e2e = setup({ vars: { DEFAULT_MODEL: "anthropic:claude-sonnet-4-5", FALLBACK_MODELS: "openai:gpt-4o-mini" } });
const { anthropic, worker, persistDir } = e2e;

const create = (title) => e2e.create({ title });

test("GET /v1/models lists the registry, the default and the fallbacks", async () => {
  const r = await api(worker.url, "GET", "/v1/models");
  assert.equal(r.status, 200);
  const body = await r.json();
  assert.equal(body.default, "anthropic:claude-sonnet-4-5");
  assert.deepEqual(body.fallbacks, ["openai:gpt-4o-mini"]);
  const sonnet = body.models.find((m) => m.id === "anthropic:claude-sonnet-4-5");
  assert.equal(sonnet.context_window, 200000);
  assert.deepEqual(sonnet.price, { input: 3, output: 15, cache_read: 0.3, cache_write: 3.75 });
  assert.equal(sonnet.capabilities.tools, true);
});

test("conversations list newest first, page by cursor, and new ones do not shift a page", async () => {
  const ids = [];
  for (const t of ["one", "two", "three", "four", "five"]) {
    ids.push(await create(t));
    await new Promise((r) => setTimeout(r, 5)); // distinct creation times
  }
  const seen = [];
  let cursor;
  for (let page = 0; page < 10; page++) {
    const r = await api(worker.url, "GET", `/v1/conversations?limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
    assert.equal(r.status, 200);
    const body = await r.json();
    seen.push(...body.conversations.map((c) => c.title));
    if (page === 0) await create("created while paging");
    cursor = body.next_cursor;
    if (!cursor) break;
  }
  const mine = seen.filter((t) => ["one", "two", "three", "four", "five"].includes(t));
  assert.deepEqual(mine, ["five", "four", "three", "two", "one"]);
  assert.ok(!seen.includes("created while paging"), "a newer conversation does not appear on later pages");
  assert.equal((await api(worker.url, "GET", "/v1/conversations?cursor=garbage")).status, 400);
});

test("DELETE removes the history and the conversation; then it is 404 everywhere", async () => {
  const id = await create("doomed");
  anthropic.script({ text: "Soon gone." });
  await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "hi" }));
  const object = (await conversationObjects(persistDir)).find((o) => o.conversation === id);
  assert.ok(object, "the conversation's object keeps it");
  assert.equal((await api(worker.url, "DELETE", `/v1/conversations/${id}`)).status, 204);
  for (const [method, path] of [["GET", `/v1/conversations/${id}`], ["GET", `/v1/conversations/${id}/messages`], ["DELETE", `/v1/conversations/${id}`]]) {
    assert.equal((await api(worker.url, method, path)).status, 404, `${method} ${path}`);
  }
  const rows = await d1Query(persistDir, `SELECT COUNT(*) AS n FROM messages WHERE conversation_id = '${id}'`);
  assert.equal(rows[0].n, 0);
  // The object's storage goes too, tables and all: an object that stores nothing does not exist.
  const emptied = (await conversationObjects(persistDir)).find((o) => o.file === object.file);
  assert.deepEqual(emptied?.tables ?? [], [], "the deleted conversation's object keeps no tables");
});

test("a chat whose conversation was deleted starts afresh on its next message, in the same object", async () => {
  const chat = `${worker.url}/v1/chat`;
  anthropic.script({ text: "First life." });
  await readUiStream(await chatMessage(chat, "chat-deleted-then-reused", "Hello once"));
  const { conversations } = await (await api(worker.url, "GET", "/v1/conversations")).json();
  const { id } = conversations.find((c) => c.title === "Hello once");
  assert.equal((await api(worker.url, "DELETE", `/v1/conversations/${id}`)).status, 204);
  assert.deepEqual((await conversationObjects(persistDir)).filter((o) => o.conversation === id), []);
  // The object, still in memory with its tables gone, makes them again with its first write.
  anthropic.script({ text: "Second life." });
  const response = await chatMessage(chat, "chat-deleted-then-reused", "Hello again");
  assert.equal(response.status, 200);
  const { chunks } = await readUiStream(response);
  assert.equal(chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join(""), "Second life.");
  const { messages } = await (await api(worker.url, "GET", `/v1/conversations/${id}/messages`)).json();
  assert.deepEqual(messages.map((m) => m.content[0].text), ["Hello again", "Second life."]);
  const object = (await conversationObjects(persistDir)).find((o) => o.conversation === id);
  assert.deepEqual(object?.tables.sort(), ["chunks", "conversation", "inbox", "marks", "paused", "schedules", "turn"]);
});

test("a chat id shaped like a conversation id but naming none: the object first asked keeps nothing", async () => {
  const before = await conversationObjects(persistDir);
  // The Worker guesses that the id names a conversation and asks its object, which finds none
  // and sends the message on to the caller's conversation for that chat id, created here.
  anthropic.script({ text: "Here." });
  const response = await chatMessage(`${worker.url}/v1/chat`, randomBytes(16).toString("hex"), "Anyone there?");
  assert.equal(response.status, 200);
  await readUiStream(response);
  const made = (await conversationObjects(persistDir)).filter((o) => !before.some((b) => b.file === o.file));
  assert.equal(made.filter((o) => o.conversation).length, 1, "one object keeps the new conversation");
  for (const object of made.filter((o) => !o.conversation)) {
    assert.deepEqual(object.tables, [], "an object that was only asked stores nothing");
  }
});

test("stream: false returns the whole turn as JSON: messages, events, usage, cost", async () => {
  const id = await create("not streamed");
  anthropic.script({ text: "Checking.", tools: [{ id: "toolu_json", name: "current_time", input: {} }] }, { text: "Noon." });
  const r = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "time?", stream: false });
  assert.equal(r.status, 200);
  assert.match(r.headers.get("content-type"), /application\/json/);
  const body = await r.json();
  assert.deepEqual(body.messages.map((m) => m.kind), ["assistant", "tool_result", "assistant"]);
  assert.equal(body.messages[2].content[0].text, "Noon.");
  assert.equal(body.events[0].type, "start");
  assert.deepEqual(body.events.at(-1), { type: "finish", finishReason: "stop" });
  assert.ok(body.events.some((e) => e.type === "tool-output-available" && e.toolCallId === "toolu_json"));
  assert.deepEqual([body.usage.input_tokens, body.usage.output_tokens], [62, 34]);
  assert.ok(Math.abs(body.cost_usd - 2 * (31 * 3 + 17 * 15) / 1e6) < 1e-12, `${body.cost_usd}`);
  assert.equal(body.finish_reason, "stop");
  assert.equal(body.error, null);
  const stored = (await (await api(worker.url, "GET", `/v1/conversations/${id}/messages`)).json()).messages;
  assert.deepEqual(stored.map((m) => m.kind), ["user", "assistant", "tool_result", "assistant"]);
});

test("retry runs the last user message again; the old answer stays, superseded, never sent again", async () => {
  const id = await create("retried");
  assert.equal((await api(worker.url, "POST", `/v1/conversations/${id}/retry`)).status, 409, "nothing to retry yet");
  anthropic.script({ text: "First answer." });
  await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Tell me a fact." }));
  anthropic.script({ text: "Second answer." });
  const { chunks } = await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/retry`));
  assert.equal(chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join(""), "Second answer.");
  const sent = anthropic.requests.at(-1).body.messages;
  assert.deepEqual(sent, [{ role: "user", content: [{ type: "text", text: "Tell me a fact." }] }], "the superseded answer is not replayed");
  const history = (await (await api(worker.url, "GET", `/v1/conversations/${id}/messages`)).json()).messages;
  assert.deepEqual(history.map((m) => [m.kind, m.superseded ?? false, m.content[0].text]), [
    ["user", false, "Tell me a fact."],
    ["assistant", true, "First answer."],
    ["assistant", false, "Second answer."],
  ]);

  // Not while a turn runs.
  anthropic.script({ text: "A slow answer that is still streaming when the retry arrives.", gapMs: 10 });
  const before = anthropic.requests.length;
  const running = api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Another." });
  while (anthropic.requests.length <= before) await new Promise((r) => setTimeout(r, 20));
  const busy = await api(worker.url, "POST", `/v1/conversations/${id}/retry`);
  assert.equal(busy.status, 409);
  assert.match((await busy.json()).error.message, /a turn is running/);
  await readUiStream(await running);
});

test("every LLM call is recorded in the usage ledger with its cost", async () => {
  const id = await create("billed");
  anthropic.script({ text: "Checking.", tools: [{ id: "toolu_bill", name: "current_time", input: {} }] }, { text: "Noon." });
  await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "time?" }));
  const rows = await d1Query(persistDir, `SELECT owner, model, provider, input_tokens, output_tokens, cost_usd FROM usage_ledger WHERE conversation_id = '${id}' ORDER BY id`);
  assert.equal(rows.length, 2, "one row per LLM call");
  for (const row of rows) {
    assert.deepEqual([row.owner, row.model, row.provider, row.input_tokens, row.output_tokens], ["anonymous", "claude-sonnet-4-5", "anthropic", 31, 17]);
    assert.ok(Math.abs(row.cost_usd - (31 * 3 + 17 * 15) / 1e6) < 1e-12, `${row.cost_usd}`);
  }
});
