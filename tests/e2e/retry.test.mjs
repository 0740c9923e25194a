// Retries and fallback through the real Worker: loopback providers that rate-limit, overload,
// fail, drop the connection, or break off mid-answer.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { anthropicLoopback, api, freshPersistDir, openaiLoopback, readUiStream, startWorker } from "./harness.mjs";

let anthropic, openai, worker;

before(async () => {
  anthropic = await anthropicLoopback();
  openai = await openaiLoopback();
  worker = await startWorker({
    persistDir: freshPersistDir(),
    vars: {
      ANTHROPIC_BASE_URL: anthropic.url,
      ANTHROPIC_API_KEY: "sk-ant-loopback",
      OPENAI_BASE_URL: `${openai.url}/v1`,
      OPENAI_API_KEY: "sk-loopback",
      DEFAULT_MODEL: "anthropic:claude-sonnet-4-5",
      FALLBACK_MODELS: "openai:gpt-fallback",
    },
  });
});

after(async () => {
  await worker?.stop();
  await anthropic?.close();
  await openai?.close();
});

async function turn(message) {
  const { id } = await (await api(worker.url, "POST", "/v1/conversations", {})).json();
  const started = Date.now();
  const { chunks } = await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message }));
  const history = (await (await api(worker.url, "GET", `/v1/conversations/${id}/messages`)).json()).messages;
  return { chunks, history, ms: Date.now() - started, text: chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join("") };
}

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
  anthropic.script({ text: "Half an answ", failWith: { type: "overloaded_error", message: "Overloaded" } });
  const { chunks, history, text } = await turn("tell me");
  assert.equal(text, "Half an answ");
  assert.equal(anthropic.requests.length - a, 1);
  assert.equal(openai.requests.length - o, 0);
  const error = chunks.find((c) => c.type === "error");
  assert.match(error.errorText, /overloaded.*Overloaded/i);
  assert.deepEqual(chunks.at(-1), { type: "finish", finishReason: "error" });
  assert.deepEqual(history.map((m) => [m.kind, m.stop_reason]), [["user", undefined], ["assistant", "error"]]);
  assert.equal(history[1].content[0].text, "Half an answ");
});

test("a rejected key is reported at once, without retries or fallback", async () => {
  const [a, o] = [anthropic.requests.length, openai.requests.length];
  anthropic.script({ status: 401, message: "invalid x-api-key" });
  const { chunks } = await turn("hi");
  assert.equal(anthropic.requests.length - a, 1);
  assert.equal(openai.requests.length - o, 0);
  assert.match(chunks.find((c) => c.type === "error").errorText, /invalid x-api-key.*check the API key/);
});
