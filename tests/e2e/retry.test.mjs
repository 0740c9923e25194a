// Retries and fallback through the real Worker: loopback providers that rate-limit, overload,
// fail, drop the connection, or break off mid-answer.

import assert from "node:assert/strict";
import { test } from "node:test";
import { api, readUiStream, setup } from "./harness.mjs";

// OpenAI's loopback is the fallback; its vars are setup's (key "sk-loopback").
const { anthropic, openai, worker, create } = setup({
  providers: ["anthropic", "openai"],
  vars: { DEFAULT_MODEL: "anthropic:claude-sonnet-4-5", FALLBACK_MODELS: "openai:gpt-fallback" },
});

async function turn(message) {
  const id = await create();
  const started = Date.now();
  const response = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message });
  const requestId = response.headers.get("x-request-id");
  const { chunks } = await readUiStream(response);
  const history = (await (await api(worker.url, "GET", `/v1/conversations/${id}/messages`)).json()).messages;
  return { id, requestId, chunks, history, ms: Date.now() - started, text: chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join("") };
}

/** The JSON log lines wrangler dev printed that carry `field: value`. */
async function logLines(field, value) {
  for (let i = 0; i < 40; i++) {
    const lines = worker.jsonLines().filter((j) => j[field] === value);
    if (lines.length) return lines;
    await new Promise((r) => setTimeout(r, 100));
  }
  return [];
}

test("a cancel during a retry's wait ends the turn at once, and nothing more is sent", async () => {
  const [a, o] = [anthropic.requests.length, openai.requests.length];
  anthropic.script({ status: 429, headers: { "retry-after": "6" }, message: "Number of requests has exceeded your rate limit" });
  const { id } = await (await api(worker.url, "POST", "/v1/conversations", {})).json();
  const started = Date.now();
  const response = api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "hello" });
  while (anthropic.requests.length === a) await new Promise((r) => setTimeout(r, 10));
  await new Promise((r) => setTimeout(r, 300)); // into the 6 s wait
  assert.equal((await api(worker.url, "POST", `/v1/conversations/${id}/cancel`)).status, 202);
  const { chunks } = await readUiStream(await response);
  const ms = Date.now() - started;
  assert.ok(ms < 3_000, `the turn ended ${ms} ms after it started, not after the 6 s wait`);
  assert.equal(chunks.at(-1).type, "finish");
  assert.deepEqual([anthropic.requests.length - a, openai.requests.length - o], [1, 0], "no retry and no fallback went out");
  const status = await (await api(worker.url, "GET", `/v1/conversations/${id}`)).json();
  assert.equal(status.status, "idle");
});

test("a 429 with retry-after and a 529 are retried on the same model until it answers", async () => {
  const [a, o] = [anthropic.requests.length, openai.requests.length];
  anthropic.script({ status: 429, headers: { "retry-after": "1" }, message: "Number of requests has exceeded your rate limit" }, { status: 529, message: "Overloaded" }, { text: "Third time lucky." });
  const { chunks, history, ms, text } = await turn("hello");
  assert.equal(text, "Third time lucky.");
  assert.equal(anthropic.requests.length - a, 3);
  assert.equal(openai.requests.length - o, 0);
  assert.ok(ms >= 1000, `waited for retry-after: ${ms} ms`);
  assert.ok(!chunks.some((c) => c.type === "error" || c.type === "data-provider-switch"));
  assert.deepEqual(history.map((m) => m.kind), ["user", "assistant"]);
});

test("a 500, a dropped connection and a 529 exhaust the model, and the fallback answers", async () => {
  const o = openai.requests.length;
  anthropic.script({ status: 500, message: "Internal server error" }, { drop: true }, { status: 529, message: "Overloaded" });
  openai.script({ text: "The fallback answers." });
  const { chunks, history, text } = await turn("hello?");
  assert.equal(text, "The fallback answers.");
  assert.equal(openai.requests.length - o, 1);
  const sw = chunks.find((c) => c.type === "data-provider-switch");
  assert.deepEqual(sw.data, { from: "anthropic:claude-sonnet-4-5", to: "openai:gpt-fallback" });
  assert.deepEqual(chunks.at(-1), { type: "finish", finishReason: "stop" });
  assert.equal(history[1].provider, "openai");
  assert.equal(history[1].model, "gpt-fallback");
});

test("a stream that fails after some text is not retried: the partial answer is kept and the error shown", async () => {
  const [a, o] = [anthropic.requests.length, openai.requests.length];
  anthropic.script({ text: "Half an answ", failWith: { type: "overloaded_error", message: "Overloaded: cluster eu-7 at capacity" } });
  const { chunks, history, text, requestId } = await turn("tell me");
  assert.equal(text, "Half an answ");
  assert.equal(anthropic.requests.length - a, 1);
  assert.equal(openai.requests.length - o, 0);
  const error = chunks.find((c) => c.type === "error");
  // The user is told what happened and which request to quote; the provider's words go to the log.
  assert.match(requestId, /^[0-9a-f]{32}$/);
  assert.equal(error.errorText, `anthropic is overloaded; try again shortly (request ${requestId})`);
  const [logged] = await logLines("event", "turn_error").then((ls) => ls.filter((l) => l.request_id === requestId));
  assert.match(logged.detail, /cluster eu-7 at capacity/);
  assert.deepEqual(chunks.at(-1), { type: "finish", finishReason: "error" });
  assert.deepEqual(history.map((m) => [m.kind, m.stop_reason]), [["user", undefined], ["assistant", "error"]]);
  assert.equal(history[1].content[0].text, "Half an answ");
});

test("a rejected key is reported at once, without retries or fallback", async () => {
  const [a, o] = [anthropic.requests.length, openai.requests.length];
  anthropic.script({ status: 401, message: "invalid x-api-key sk-ant-loopback for https://internal.example" });
  const { chunks, requestId } = await turn("hi");
  assert.equal(anthropic.requests.length - a, 1);
  assert.equal(openai.requests.length - o, 0);
  const { errorText } = chunks.find((c) => c.type === "error");
  assert.match(errorText, /refused the server's credentials; the operator should check the API key \(request [0-9a-f]{32}\)$/);
  assert.doesNotMatch(errorText, /sk-ant|internal\.example|x-api-key/);
  const [line] = await logLines("request_id", requestId).then((ls) => ls.filter((l) => l.event === "turn"));
  assert.equal(line.outcome, "failed");
});

test("every turn writes one JSON log line: who, which models, how it ended, what it cost, no content", async () => {
  anthropic.script({ status: 529, message: "busy" }, { text: "Fine, thanks for asking." });
  const { id, requestId, text } = await turn("a secret phrase: hummingbird");
  assert.equal(text, "Fine, thanks for asking.");
  const lines = (await logLines("request_id", requestId)).filter((l) => l.event === "turn");
  assert.equal(lines.length, 1);
  const [line] = lines;
  assert.equal(line.level, "info");
  assert.equal(line.conversation_id, id);
  assert.equal(line.user, "anonymous");
  assert.equal(line.outcome, "completed");
  assert.match(line.turn_id, /^[0-9a-f]{32}$/);
  assert.deepEqual(line.calls.map((c) => [c.provider, c.model]), [["anthropic", "claude-sonnet-4-5"]]);
  assert.equal(line.llm_calls, 1);
  assert.equal(line.tool_calls, 0);
  assert.equal(line.retries, 1);
  assert.equal(line.fallbacks, 0);
  assert.equal(line.budget_switches, 0);
  assert.ok(line.output_tokens > 0 && line.input_tokens > 0, JSON.stringify(line));
  assert.ok(line.cost_usd > 0, "claude-sonnet-4-5 has a known price");
  assert.ok(line.first_token_ms >= 0 && line.first_token_ms <= line.duration_ms, JSON.stringify(line));
  // No message content and no key in what the Worker logged for it.
  assert.doesNotMatch(JSON.stringify(await logLines("request_id", requestId)), /hummingbird|Fine, thanks|sk-ant-loopback/);
});

test("a later message's turn reads nothing from the conversation object's storage: it records the turn and ends it", async () => {
  anthropic.script({ text: "One." }, { text: "Two." });
  const { id } = await turn("first");
  const response = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "second" });
  const requestId = response.headers.get("x-request-id");
  const { chunks } = await readUiStream(response);
  assert.equal(chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join(""), "Two.");
  const [line] = (await logLines("request_id", requestId)).filter((l) => l.event === "turn");
  // The object knows its conversation, that nothing waits in its queue and that nothing is
  // paused: four SQL statements (the message kept until it is in D1, then let go; the turn
  // recorded, then forgotten), where reading each of those made eleven more.
  assert.equal(line.sql_statements, 4, JSON.stringify(line));
  // The history read, the message written alongside it, the answer.
  assert.equal(line.d1_round_trips, 3, JSON.stringify(line));
});

test("errors are one JSON shape, carry the request id, and are logged with it", async () => {
  const response = await api(worker.url, "POST", "/v1/conversations/nope/messages", { message: "hi" });
  assert.equal(response.status, 404);
  const requestId = response.headers.get("x-request-id");
  assert.match(requestId, /^[0-9a-f]{32}$/);
  assert.equal((await response.json()).error.code, "not_found");
  const [line] = await logLines("request_id", requestId);
  assert.deepEqual([line.event, line.status, line.code, line.path], ["error", 404, "not_found", "/v1/conversations/nope/messages"]);
  // Every response has one, distinct per request.
  const a = await api(worker.url, "GET", "/v1/models");
  const b = await api(worker.url, "GET", "/v1/models");
  assert.notEqual(a.headers.get("x-request-id"), b.headers.get("x-request-id"));
});
