// A turn against a real model: llama.cpp's OpenAI-compatible server running SmolLM2-135M, offline.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { api, freshPersistDir, readUiStream, startLocalModel, startWorker } from "./harness.mjs";

let model, worker;

before(async () => {
  model = await startLocalModel();
  worker = await startWorker({ persistDir: freshPersistDir(), vars: { DEFAULT_MODEL: "openai:smollm2", OPENAI_BASE_URL: model.url } });
});

after(async () => {
  await worker?.stop();
  model?.stop();
});

test("the local model answers with streamed text that is stored in the history", async () => {
  const created = await api(worker.url, "POST", "/v1/conversations", { system: "You are a helpful assistant." });
  const { id } = await created.json();
  const r = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Say hello to me in one short sentence." });
  const { chunks } = await readUiStream(r);
  const deltas = chunks.filter((c) => c.type === "text-delta");
  const text = deltas.map((c) => c.delta).join("");
  assert.ok(deltas.length > 1, `streamed in pieces, got ${deltas.length}: ${JSON.stringify(chunks)}`);
  assert.ok(text.trim().length > 0);
  assert.equal(chunks.at(-1).type, "finish");
  const messages = (await (await api(worker.url, "GET", `/v1/conversations/${id}/messages`)).json()).messages;
  assert.deepEqual(messages.map((m) => m.kind), ["user", "assistant"]);
  assert.equal(messages[1].content.map((b) => b.text).join(""), text);
  assert.equal(messages[1].provider, "openai");
});
