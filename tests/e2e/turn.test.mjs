// A turn end to end: the wasm Worker under `wrangler dev`, loopback Anthropic and OpenAI servers.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { anthropicLoopback, anthropicVars, api, d1Query, freshPersistDir, openaiLoopback, parseUiStream, readUiStream, shape, startWorker } from "./harness.mjs";

let anthropic, openai, worker, persistDir, vars;

before(async () => {
  anthropic = await anthropicLoopback();
  openai = await openaiLoopback();
  persistDir = freshPersistDir();
  vars = {
    ...anthropicVars(anthropic),
    OPENAI_BASE_URL: `${openai.url}/v1`,
    OPENAI_API_KEY: "sk-loopback",
    DEFAULT_MODEL: "anthropic:claude-sonnet-4-5",
    // A window past a megabyte of history: two-byte letters are counted a token each.
    MODELS: JSON.stringify([{ id: "anthropic:claude-long-window", context_window: 2_000_000, max_output_tokens: 8192 }]),
  };
  worker = await startWorker({ persistDir, vars });
});

after(async () => {
  await worker?.stop();
  await anthropic?.close();
  await openai?.close();
});

async function createConversation(body = {}) {
  const r = await api(worker.url, "POST", "/v1/conversations", body);
  assert.equal(r.status, 201, await r.clone().text());
  return (await r.json()).id;
}

async function history(id) {
  const r = await api(worker.url, "GET", `/v1/conversations/${id}/messages`);
  assert.equal(r.status, 200);
  return (await r.json()).messages;
}

const textOf = (chunks) => chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join("");

/** Waits until `provider` has received `n` requests. */
async function untilRequests(provider, n) {
  const deadline = Date.now() + 20_000;
  while (provider.requests.length < n) {
    if (Date.now() > deadline) throw new Error(`provider saw ${provider.requests.length} requests, expected ${n}\n${worker.log().slice(-3000)}`);
    await sleep(20);
  }
}

describe("bad input", () => {
  test("an unknown conversation is a 404 JSON error on every conversation route", async () => {
    for (const [method, path, body] of [
      ["POST", "/v1/conversations/nope/messages", { message: "hi" }],
      ["GET", "/v1/conversations/nope/messages"],
      ["GET", "/v1/conversations/nope"],
    ]) {
      const r = await api(worker.url, method, path, body);
      assert.equal(r.status, 404, `${method} ${path}`);
      assert.match(r.headers.get("content-type"), /application\/json/);
      const json = await r.json();
      assert.equal(json.error.code, "not_found");
      assert.match(json.error.message, /nope/);
    }
  });

  test("a malformed JSON body is a 400 JSON error and leaves the conversation usable", async () => {
    const id = await createConversation();
    const r = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, '{"message": "hi"');
    assert.equal(r.status, 400);
    const json = await r.json();
    assert.equal(json.error.code, "bad_request");
    assert.match(json.error.message, /not valid JSON/);
    const missing = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { text: "hi" });
    assert.equal(missing.status, 400);
    assert.match((await missing.json()).error.message, /`message` is required/);
    assert.deepEqual(await history(id), []);
    const bad = await api(worker.url, "POST", "/v1/conversations", { model: "gpt-4o" });
    assert.equal(bad.status, 400);
    assert.match((await bad.json()).error.message, /provider:model/);
  });
});

for (const provider of ["anthropic", "openai"]) {
  describe(`a current_time round trip through the ${provider} wire format`, () => {
    let id, chunks, stored;

    test("streams start, two steps, text, tool input and output, finish, [DONE]", async () => {
      const loop = provider === "anthropic" ? anthropic : openai;
      const before = loop.requests.length;
      loop.script(
        { text: "Let me look at the clock ⏰.", tools: [{ id: "toolu_01TimeA", name: "current_time", input: {} }] },
        { text: "Grüße 👋: it is morning in UTC." },
      );
      id = await createConversation({ model: `${provider}:model-under-test`, system: "You are terse." });
      const started = Date.now();
      const r = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "What time is it?" });
      const stream = await readUiStream(r);
      chunks = stream.chunks;
      assert.equal(stream.headers.protocol, "v1");
      assert.match(stream.headers.type, /^text\/event-stream/);
      assert.deepEqual(shape(chunks), [
        "start",
        "start-step", "text-start", "text-delta*", "text-end",
        "tool-input-start", "tool-input-delta*", "tool-input-available", "data-usage", "tool-output-available", "finish-step",
        "start-step", "text-start", "text-delta*", "text-end", "data-usage", "finish-step",
        "finish",
      ]);
      assert.equal(textOf(chunks), "Let me look at the clock ⏰.Grüße 👋: it is morning in UTC.");
      const input = chunks.find((c) => c.type === "tool-input-available");
      assert.deepEqual(input, { type: "tool-input-available", toolCallId: "toolu_01TimeA", toolName: "current_time", input: {} });
      const output = chunks.find((c) => c.type === "tool-output-available");
      assert.equal(output.toolCallId, "toolu_01TimeA");
      assert.ok(Math.abs(output.output.unix_ms - started) < 60_000, `the tool really ran now: ${JSON.stringify(output)}`);
      assert.equal(new Date(output.output.unix_ms).toISOString(), output.output.utc);
      assert.deepEqual(chunks.at(-1), { type: "finish", finishReason: "stop" });
      const usage = chunks.find((c) => c.type === "data-usage");
      assert.equal(usage.data.provider, provider);
      assert.ok(usage.data.inputTokens > 0);

      // What the provider was sent: the system prompt, the tool, and then the tool's result.
      const [first, second] = loop.requests.slice(before);
      assert.equal(loop.requests.length - before, 2);
      assert.equal(first.body.model, "model-under-test");
      assert.equal(first.body.stream, true);
      if (provider === "anthropic") {
        assert.equal(first.headers["x-api-key"], "sk-ant-loopback");
        assert.equal(first.body.system, "You are terse.");
        assert.equal(first.body.tools[0].name, "current_time");
        const results = second.body.messages.at(-1);
        assert.equal(results.role, "user");
        assert.equal(results.content[0].type, "tool_result");
        assert.equal(results.content[0].tool_use_id, "toolu_01TimeA");
        assert.equal(JSON.parse(results.content[0].content).utc, output.output.utc);
      } else {
        assert.equal(first.headers.authorization, "Bearer sk-loopback");
        assert.deepEqual(first.body.messages[0], { role: "system", content: "You are terse." });
        assert.equal(first.body.tools[0].function.name, "current_time");
        const result = second.body.messages.at(-1);
        assert.equal(result.role, "tool");
        assert.equal(result.tool_call_id, "toolu_01TimeA");
        assert.equal(JSON.parse(result.content).utc, output.output.utc);
      }
    });

    test("the history in D1 holds every message in order", async () => {
      stored = await history(id);
      assert.deepEqual(stored.map((m) => m.kind), ["user", "assistant", "tool_result", "assistant"]);
      assert.deepEqual(stored.map((m) => m.seq), [1, 2, 3, 4]);
      assert.deepEqual(stored[0].content, [{ type: "text", text: "What time is it?" }]);
      assert.equal(stored[1].provider, provider);
      assert.equal(stored[1].model, "model-under-test");
      assert.equal(stored[1].stop_reason, "tool_use");
      assert.deepEqual(stored[1].content[1], { type: "tool_use", id: "toolu_01TimeA", name: "current_time", input: {} });
      assert.equal(stored[2].tool_call_id, "toolu_01TimeA");
      assert.equal(stored[2].is_error, false);
      assert.equal(stored[3].content[0].text, "Grüße 👋: it is morning in UTC.");
      assert.equal(stored[3].stop_reason, "end_turn");
    });

    test("the history is the same after wrangler dev restarts on the same state", async () => {
      await worker.stop();
      worker = await startWorker({ persistDir, vars });
      assert.deepEqual(await history(id), stored);
    });
  });
}

describe("a long history", () => {
  // The object reads a turn's history from D1 as rows and hands them to wasm as one document,
  // each stored message embedded in it as it is: nothing bounds its length.
  test("reaches the model whole and in order, past a megabyte", async () => {
    const id = await createConversation({ model: "anthropic:claude-long-window" });
    // Messages of up to 100 KB; two-byte characters in some.
    // More than a megabyte of UTF-8 (two-byte characters mostly), under the share of the
    // model's window that starts a compaction (two-byte letters count a token each, so the
    // window is a large one): messages of up to 90 KB (a message may be 100 KB) and answers of
    // up to 240 KB.
    const sent = [45_000, 0, 45_000, 100, 45_000, 5].map((n, i) => `m${i} ${n ? "é".repeat(n) : "x".repeat(90_000)}`);
    const answers = [120_000, 10, 120_000, 0, 120_000, 10].map((n, i) => `answer ${i} ${"ü".repeat(n)}`);
    const expected = [];
    for (const [i, text] of sent.entries()) {
      anthropic.script({ text: answers[i], writes: "event" });
      const { chunks } = await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: text }));
      assert.ok(textOf(chunks) === answers[i], `turn ${i}: the answer streamed is not the one sent (${textOf(chunks).length} characters)`);
      expected.push(text);
      const seen = anthropic.requests.at(-1).body.messages.map((m) => (typeof m.content === "string" ? m.content : m.content.map((c) => c.text).join("")));
      assert.equal(seen.length, expected.length, `turn ${i}`);
      seen.forEach((text, k) => assert.ok(text === expected[k], `turn ${i}: message ${k} is not the one sent (${text.slice(0, 12)}..., ${text.length} characters)`));
      expected.push(answers[i]);
    }
    assert.ok(Buffer.byteLength(expected.join("")) > 1_000_000);
  });

  test("a stored message that does not read fails the turn with its id, and nothing is sent to the model", async () => {
    const id = await createConversation();
    anthropic.script({ text: "fine", writes: "event" });
    await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "first" }));
    const [broken] = await d1Query(persistDir, `SELECT id FROM messages WHERE conversation_id = '${id}' AND kind = 'assistant'`);
    await d1Query(persistDir, `UPDATE messages SET body = '{"kind":"nonsense"}' WHERE id = '${broken.id}'`);
    const before = anthropic.requests.length;
    const r = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "second" });
    const { chunks } = await readUiStream(r);
    const error = chunks.find((c) => c.type === "error");
    assert.ok(error, JSON.stringify(chunks));
    // Internal errors reach the user as a request id; the server log says which message.
    const requestId = /request ([0-9a-f]+)/.exec(error.errorText)?.[1];
    assert.ok(requestId, error.errorText);
    const line = await worker.logLine((l) => JSON.stringify(l).includes(requestId) && JSON.stringify(l).includes(`stored message ${broken.id} is unreadable`));
    assert.ok(line);
    assert.equal(anthropic.requests.length, before, "the model was not called");
  });
});

describe("messages sent while a turn runs", () => {
  test("a second POST is queued (202) and injected before the next tool call, which is skipped", async () => {
    anthropic.script(
      { text: "Checking the clock, slowly.", tools: [{ id: "toolu_slow", name: "current_time", input: {} }], gapMs: 4 },
      { text: "You changed the subject: fine." },
    );
    const id = await createConversation({ model: "anthropic:claude-sonnet-4-5" });
    const before = anthropic.requests.length;
    const running = api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "What time is it?" });
    await untilRequests(anthropic, before + 1);
    const queued = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Never mind, tell me a joke." });
    assert.equal(queued.status, 202);
    assert.deepEqual(await queued.json(), { queued: "steering", position: 1 });

    const { chunks } = await readUiStream(await running);
    const skipped = chunks.find((c) => c.type === "tool-output-error");
    assert.deepEqual(skipped, { type: "tool-output-error", toolCallId: "toolu_slow", errorText: "skipped: the user sent a new message" });
    assert.ok(!chunks.some((c) => c.type === "tool-output-available"), "the skipped tool did not run");
    const steering = chunks.find((c) => c.type === "data-steering");
    assert.deepEqual(steering.data, { skippedToolCallIds: ["toolu_slow"], messages: ["Never mind, tell me a joke."] });
    assert.equal(textOf(chunks), "Checking the clock, slowly.You changed the subject: fine.");

    // The model's second call saw the skipped result and then the new message.
    const second = anthropic.requests[before + 1].body.messages.at(-1);
    assert.deepEqual(second.content, [
      { type: "tool_result", tool_use_id: "toolu_slow", content: "skipped: the user sent a new message", is_error: true },
      { type: "text", text: "Never mind, tell me a joke." },
    ]);
    const stored = await history(id);
    assert.deepEqual(stored.map((m) => m.kind), ["user", "assistant", "tool_result", "user", "assistant"]);
    assert.equal(stored[3].content[0].text, "Never mind, tell me a joke.");

    // The turn has ended: the conversation takes a new turn at once.
    anthropic.script({ text: "Here is another." });
    const next = await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Another one." }));
    assert.equal(textOf(next.chunks), "Here is another.");
    const status = await (await api(worker.url, "GET", `/v1/conversations/${id}`)).json();
    assert.equal(status.status, "idle");
    assert.deepEqual(status.queued, { steering: 0, followup: 0 });
  });

  test("a follow-up sent during a tool-calling turn does not skip the tool and joins at the end", async () => {
    anthropic.script(
      { text: "Checking the clock, slowly.", tools: [{ id: "toolu_keep", name: "current_time", input: {} }], gapMs: 4 },
      { text: "It is noon." },
      { text: "And here is the joke you asked for." },
    );
    const id = await createConversation({ model: "anthropic:claude-sonnet-4-5" });
    const before = anthropic.requests.length;
    const running = api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "What time is it?" });
    await untilRequests(anthropic, before + 1);
    const queued = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Then tell me a joke.", delivery: "followup" });
    assert.equal(queued.status, 202);
    assert.deepEqual(await queued.json(), { queued: "followup", position: 1 });
    const status = await (await api(worker.url, "GET", `/v1/conversations/${id}`)).json();
    assert.deepEqual([status.status, status.queued], ["running", { steering: 0, followup: 1 }]);

    const { chunks } = await readUiStream(await running);
    assert.ok(chunks.some((c) => c.type === "tool-output-available" && c.toolCallId === "toolu_keep"), "the tool ran");
    assert.ok(!chunks.some((c) => c.type === "tool-output-error"));
    assert.equal(textOf(chunks), "Checking the clock, slowly.It is noon.And here is the joke you asked for.");
    assert.deepEqual((await history(id)).map((m) => m.kind), ["user", "assistant", "tool_result", "assistant", "user", "assistant"]);
    const bad = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "x", delivery: "later" });
    assert.equal(bad.status, 400);
  });

  test("cancel stops a streaming answer: partial text kept and marked aborted, conversation free", async () => {
    const full = "This answer is long and streams slowly, so there is time to cancel it halfway through. ".repeat(4);
    anthropic.script({ text: full, gapMs: 25 });
    const id = await createConversation();
    const before = anthropic.requests.length;
    const started = Date.now();
    const response = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Talk to me." });
    // The stream's headers come before the provider call goes out.
    await untilRequests(anthropic, before + 1);
    // Read as a browser would, and cancel once some text has arrived.
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let body = "";
    while (!body.includes('"text-delta"')) {
      const { value, done } = await reader.read();
      if (done) break;
      body += decoder.decode(value, { stream: true });
    }
    const cancel = await api(worker.url, "POST", `/v1/conversations/${id}/cancel`);
    assert.equal(cancel.status, 202);
    assert.deepEqual(await cancel.json(), { cancelling: true });
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      body += decoder.decode(value, { stream: true });
    }
    const chunks = await parseUiStream(body);
    assert.ok(Date.now() - started < 15_000, "stopped long before the answer would have ended");
    assert.deepEqual(chunks.slice(-2), [{ type: "abort", reason: "cancelled" }, { type: "finish", finishReason: "other" }]);
    const said = textOf(chunks);
    assert.ok(said.length > 0 && said.length < full.length && full.startsWith(said), `partial: ${said.length} of ${full.length}`);
    const stored = await history(id);
    assert.deepEqual(stored.map((m) => [m.kind, m.stop_reason]), [["user", undefined], ["assistant", "aborted"]]);
    assert.ok(full.startsWith(stored[1].content[0].text));

    const status = await (await api(worker.url, "GET", `/v1/conversations/${id}`)).json();
    assert.equal(status.status, "idle");
    const again = await api(worker.url, "POST", `/v1/conversations/${id}/cancel`);
    assert.equal(again.status, 409);
    assert.equal((await again.json()).error.code, "conflict");
    // The aborted answer is not replayed to the model.
    anthropic.script({ text: "Starting over." });
    await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Again, briefly." }));
    const replay = anthropic.requests.at(-1).body.messages;
    assert.deepEqual(replay.map((m) => m.role), ["user"]);
    assert.deepEqual(replay[0].content.map((c) => c.text), ["Talk to me.", "Again, briefly."]);
  });

  test("a send repeated with its Idempotency-Key runs one turn: it re-attaches while it runs, then gets what was stored", async () => {
    const id = await createConversation();
    const before = anthropic.requests.length;
    anthropic.script({ text: "An answer worth waiting for, streamed slowly. ".repeat(3), writes: "event", gapMs: 20 });
    const send = (key, message = "Tell me once.") =>
      fetch(`${worker.url}/v1/conversations/${id}/messages`, { method: "POST", headers: { "content-type": "application/json", "idempotency-key": key }, body: JSON.stringify({ message }) });
    const first = await send("order-7f3a");
    await untilRequests(anthropic, before + 1);
    // The client retried (its connection dropped): the same turn's stream, from its start.
    const again = await send("order-7f3a");
    assert.equal(again.status, 200);
    assert.match(again.headers.get("content-type"), /text\/event-stream/);
    const [a, b] = await Promise.all([readUiStream(first), readUiStream(again)]);
    assert.deepEqual(b.chunks, a.chunks);
    // Once it ended: what was stored for it, and still no second turn.
    const late = await send("order-7f3a");
    assert.equal(late.status, 200);
    const stored = await late.json();
    assert.equal(stored.repeated, true);
    assert.deepEqual(stored.messages.map((m) => m.kind), ["user", "assistant"]);
    assert.equal(anthropic.requests.length, before + 1, "one provider call for three sends");
    assert.deepEqual((await history(id)).map((m) => m.kind), ["user", "assistant"]);
    // Another key is another message; a malformed key is refused.
    anthropic.script({ text: "Second." });
    await readUiStream(await send("order-8b21", "And again."));
    assert.equal(anthropic.requests.length, before + 2);
    assert.equal((await send("x".repeat(300))).status, 400);
    // /v1/chat's messageId does the same.
    anthropic.script({ text: "Chat answer." });
    const chat = () => api(worker.url, "POST", "/v1/chat", { id: `idem-${id}`, trigger: "submit-message", messageId: "ui-1", messages: [{ id: "ui-1", role: "user", parts: [{ type: "text", text: "hello" }] }] });
    await readUiStream(await chat());
    const repeated = await chat();
    assert.equal((await repeated.json()).repeated, true);
    assert.equal(anthropic.requests.length, before + 3);
  });

  test("a key sent again with another body is a 422 naming it, and sends with one key at once run one turn", async () => {
    const id = await createConversation();
    const before = anthropic.requests.length;
    const send = (key, message) =>
      fetch(`${worker.url}/v1/conversations/${id}/messages`, { method: "POST", headers: { "content-type": "application/json", "idempotency-key": key }, body: JSON.stringify({ message }) });
    anthropic.script({ text: "First." });
    await readUiStream(await send("k-body", "A"));
    const reused = await send("k-body", "B");
    assert.equal(reused.status, 422);
    const { error } = await reused.json();
    assert.equal(error.code, "idempotency_key_reused");
    assert.match(error.message, /`k-body`/);
    assert.deepEqual((await history(id)).map((m) => m.kind), ["user", "assistant"]);
    // /v1/chat: the same messageId with another last message.
    anthropic.script({ text: "Chat." });
    const chat = (text) => api(worker.url, "POST", "/v1/chat", { id: `reuse-${id}`, messageId: "ui-9", messages: [{ id: "ui-9", role: "user", parts: [{ type: "text", text }] }] });
    await readUiStream(await chat("hello"));
    assert.equal((await chat("goodbye")).status, 422);
    assert.equal(anthropic.requests.length, before + 2);

    // Six at once, as a client retrying in a hurry: one turn; every answer is that turn's
    // stream, its stored result, or a 409 to try again.
    anthropic.script({ text: "Only once, slowly. ".repeat(4), writes: "event", gapMs: 20 });
    const answers = await Promise.all(Array.from({ length: 6 }, () => send("k-burst", "Once.")));
    for (const a of answers) {
      assert.ok([200, 409].includes(a.status), `status ${a.status}`);
      await a.text();
    }
    assert.ok(answers.some((a) => a.status === 200));
    await sleep(500);
    assert.equal(anthropic.requests.length, before + 3, "one provider call for six sends");
    const kinds = (await history(id)).map((m) => m.kind);
    assert.deepEqual(kinds, ["user", "assistant", "user", "assistant"]);
  });

  test("a cancelled answer whose provider never sent usage is charged from an estimate, marked estimated", async () => {
    // OpenAI sends usage in the stream's last chunk: a cancel mid-answer never sees it.
    const full = "A long answer from a provider that reports usage only at the very end. ".repeat(4);
    openai.script({ text: full, gapMs: 25 });
    const id = await createConversation({ model: "openai:gpt-4o" });
    const before = openai.requests.length;
    const response = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Tell me everything about the sea." });
    await untilRequests(openai, before + 1);
    const reader = response.body.getReader();
    let body = "";
    while (!body.includes('"text-delta"')) {
      const { value, done } = await reader.read();
      if (done) break;
      body += new TextDecoder().decode(value);
    }
    assert.equal((await api(worker.url, "POST", `/v1/conversations/${id}/cancel`)).status, 202);
    while (!(await reader.read()).done);
    const [row] = await d1Query(persistDir, `SELECT input_tokens, output_tokens, cost_usd, estimated FROM usage_ledger WHERE conversation_id = '${id}'`);
    assert.ok(row, "the cancelled answer has its ledger row");
    assert.equal(row.estimated, 1);
    assert.ok(row.input_tokens > 5 && row.output_tokens > 0, JSON.stringify(row));
    assert.ok(row.cost_usd > 0, "it is charged");
    // A finished answer's reported usage is not an estimate.
    openai.script({ text: "Short." });
    await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Briefly." }));
    const rows = await d1Query(persistDir, `SELECT input_tokens, estimated FROM usage_ledger WHERE conversation_id = '${id}' ORDER BY id`);
    assert.deepEqual(rows.at(-1), { input_tokens: 42, estimated: 0 });
  });

  test("ten concurrent POSTs: one turn runs, nine are queued and consumed in order, no duplicates", async () => {
    anthropic.script({ text: "Answering the first message slowly.", gapMs: 10 }, { text: "And the other nine." });
    const id = await createConversation();
    const before = anthropic.requests.length;
    const responses = await Promise.all(
      Array.from({ length: 10 }, (_, i) => api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: `message ${i}` })),
    );
    const running = responses.filter((r) => r.status === 200);
    const queued = responses.filter((r) => r.status === 202);
    assert.equal(running.length, 1, `statuses: ${responses.map((r) => r.status)}`);
    assert.equal(queued.length, 9);
    const positions = (await Promise.all(queued.map((r) => r.json()))).map((b) => b.position).sort((a, b) => a - b);
    assert.deepEqual(positions, [1, 2, 3, 4, 5, 6, 7, 8, 9]);
    const { chunks } = await readUiStream(running[0]);
    assert.equal(textOf(chunks), "Answering the first message slowly.And the other nine.");
    assert.equal(anthropic.requests.length - before, 2, "one turn, two model calls");

    const stored = await history(id);
    const users = stored.filter((m) => m.kind === "user").map((m) => m.content[0].text);
    assert.equal(users.length, 10);
    assert.equal(new Set(users).size, 10, "no duplicates");
    assert.deepEqual(stored.map((m) => m.seq), stored.map((_, i) => i + 1), "sequence numbers are dense");
    assert.deepEqual(stored.map((m) => m.kind), ["user", "assistant", ...Array(9).fill("user"), "assistant"]);
    // The queued nine reached the model in the order they were queued.
    const sent = anthropic.requests.at(-1).body.messages.at(-1).content.map((c) => c.text);
    assert.deepEqual(sent, users.slice(1));
  });

  test("a client that disconnects mid-stream leaves nothing locked: the turn finishes and the next message runs", async () => {
    anthropic.script({ text: "A reply the client will not wait for, streaming slowly.", gapMs: 8 }, { text: "Welcome back." });
    const id = await createConversation();
    const before = anthropic.requests.length;
    const controller = new AbortController();
    const response = await fetch(`${worker.url}/v1/conversations/${id}/messages`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ message: "Start something." }),
      signal: controller.signal,
    });
    await untilRequests(anthropic, before + 1);
    const reader = response.body.getReader();
    await reader.read();
    controller.abort();
    // The turn runs on without its client; the conversation is free once it ends.
    const deadline = Date.now() + 20_000;
    while ((await (await api(worker.url, "GET", `/v1/conversations/${id}`)).json()).status !== "idle") {
      assert.ok(Date.now() < deadline, "the conversation stayed locked");
      await sleep(200);
    }
    const { chunks } = await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "I'm back." }));
    assert.equal(textOf(chunks), "Welcome back.");
    const kinds = (await history(id)).map((m) => m.kind);
    assert.deepEqual(kinds, ["user", "assistant", "user", "assistant"], "the abandoned turn still finished and was stored");
  });

  test("a message queued while a text-only answer streams is answered before the turn ends", async () => {
    anthropic.script(
      { text: "A long answer that takes a while to stream out to the client.", gapMs: 4 },
      { text: "And now your follow-up." },
    );
    const id = await createConversation();
    const before = anthropic.requests.length;
    const running = api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Tell me something." });
    await untilRequests(anthropic, before + 1);
    const queued = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: [{ type: "text", text: "Also this." }] });
    assert.equal(queued.status, 202);
    const { chunks } = await readUiStream(await running);
    assert.equal(chunks.filter((c) => c.type === "start-step").length, 2);
    assert.equal(textOf(chunks), "A long answer that takes a while to stream out to the client.And now your follow-up.");
    assert.deepEqual((await history(id)).map((m) => m.kind), ["user", "assistant", "user", "assistant"]);
    assert.equal(anthropic.requests[before + 1].body.messages.at(-1).content[0].text, "Also this.");
  });
});

describe("streaming", () => {
  /** The text deltas of a streamed answer with the time (ms since `since`) each reached us. */
  async function timedDeltas(response, since) {
    assert.equal(response.status, 200);
    const deltas = [];
    const decoder = new TextDecoder();
    let text = "";
    for await (const bytes of response.body) {
      const now = Date.now() - since;
      text += decoder.decode(bytes, { stream: true });
      let end;
      while ((end = text.indexOf("\n\n")) >= 0) {
        const frame = text.slice(0, end);
        text = text.slice(end + 2);
        const payload = frame.slice("data: ".length);
        if (payload === "[DONE]") continue;
        const chunk = JSON.parse(payload);
        if (chunk.type === "text-delta") deltas.push({ at: now, delta: chunk.delta });
      }
    }
    return deltas;
  }

  /** How many separate moments `deltas` arrived in: arrivals `gap` ms or more apart. */
  const moments = (deltas, gap) => deltas.filter((d, i) => i === 0 || d.at - deltas[i - 1].at >= gap).length;

  // The Worker joins what arrives together into one read (src/edge/platform/bulk_read.js); what trickles
  // must still be passed on as it comes.
  test("a slow provider's tokens reach the browser one by one, as they are written", async () => {
    const text = "Slow tokens arrive one by one.";
    anthropic.script({ text, writes: "event", gapMs: 150 });
    const id = await createConversation();
    const started = Date.now();
    const deltas = await timedDeltas(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Go slowly." }), started);
    assert.equal(deltas.map((d) => d.delta).join(""), text);
    // Five 6-character pieces, each written 150 ms after the one before.
    assert.equal(moments(deltas, 75), 5, `arrivals: ${JSON.stringify(deltas)}`);
  });

  test("after a burst, a slowing provider's tokens are held back by an event or two at most", async () => {
    const burst = "Fast words come all at once. ".repeat(12).slice(0, 300); // 50 pieces
    const slow = "and then a slow tail: eight pieces of six letter"; // 8 pieces
    // message_start, content_block_start and ping, then the fast pieces, written back to back;
    // then the slow ones, 150 ms apart.
    anthropic.script({ text: burst + slow, writes: "event", burst: 3 + 50, gapMs: 150 });
    const id = await createConversation();
    const started = Date.now();
    const deltas = await timedDeltas(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Go fast, then slow." }), started);
    assert.equal(deltas.map((d) => d.delta).join(""), burst + slow);
    const arrivals = `arrivals (ms): ${JSON.stringify(deltas.map((d) => d.at))}`;
    // The fast pieces were joined into few reads; the last of them may wait for the next
    // writes (the Worker asked for more bytes than had come), but not for the whole tail.
    const fast = deltas.slice(0, 50);
    const held = fast.filter((d) => d.at - fast[0].at >= 75);
    assert.ok(held.length <= 4, `${held.length} fast pieces were held back; ${arrivals}`);
    assert.ok(fast.every((d) => d.at - fast[0].at < 3 * 150), arrivals);
    // The slow ones are passed on as they come, but for one hold-back of less than 256 bytes
    // (two pieces waiting for a third) right after the burst.
    assert.ok(moments(deltas.slice(50), 75) >= 6, arrivals);
  });
});
