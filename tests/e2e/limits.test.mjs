// What one user may keep in the shared D1: conversations per user, artifacts per conversation
// and versions per artifact, each refused past its limit with a message saying what to do,
// for the user's requests and the model's tools alike.

import assert from "node:assert/strict";
import { test } from "node:test";
import { api, readUiStream, setup } from "./harness.mjs";

const { anthropic, worker } = setup({
  vars: { MAX_CONVERSATIONS_PER_USER: "3", MAX_ARTIFACTS_PER_CONVERSATION: "2", MAX_ARTIFACT_VERSIONS: "3" },
});

// The response, not the id: the tests check the refusals.
const create = () => api(worker.url, "POST", "/v1/conversations", {});

test("a user keeps at most MAX_CONVERSATIONS_PER_USER conversations; deleting one makes room", async () => {
  const ids = [];
  for (let i = 0; i < 3; i++) {
    const r = await create();
    assert.equal(r.status, 201);
    ids.push((await r.json()).id);
  }
  const refused = await create();
  assert.equal(refused.status, 429);
  const { error } = await refused.json();
  assert.match(error.message, /you keep 3 conversations, the most this deployment allows; delete one/);
  const listed = (await (await api(worker.url, "GET", "/v1/conversations")).json()).conversations;
  assert.equal(listed.length, 3, "nothing was stored");
  assert.equal((await api(worker.url, "DELETE", `/v1/conversations/${ids[0]}`)).status, 204);
  assert.equal((await create()).status, 201);
  for (const id of ids.slice(1)) await api(worker.url, "DELETE", `/v1/conversations/${id}`);
});

test("a /v1/chat id cannot start a conversation past MAX_CONVERSATIONS_PER_USER either", async () => {
  const kept = (await (await api(worker.url, "GET", "/v1/conversations")).json()).conversations.map((c) => c.id);
  const made = [];
  while (kept.length + made.length < 3) made.push((await (await create()).json()).id);
  const chat = (id, extra = {}) => api(worker.url, "POST", "/v1/chat", { id, messages: [{ id: `m-${id}`, role: "user", parts: [{ type: "text", text: "hi" }] }], ...extra });
  // A client's own id: a streamed chat is answered before its conversation is counted, so its
  // refusal ends the stream; unstreamed, it is a 429. Refused again: a refusal leaves nothing
  // behind that lets the next one through.
  for (const attempt of [1, 2]) {
    const { chunks } = await readUiStream(await chat("chat-new"));
    assert.deepEqual(chunks.map((c) => c.type), ["start", "error", "finish"], `attempt ${attempt}`);
    assert.match(chunks[1].errorText, /you keep 3 conversations, the most this deployment allows; delete one/);
    const refused = await chat("chat-new", { stream: false });
    assert.equal(refused.status, 429);
    assert.match((await refused.json()).error.message, /you keep 3 conversations/);
  }
  // An id shaped like a conversation's that is nobody's is looked up in D1 before anything is
  // answered: a 429 even when streamed.
  const unknown = await chat("0123456789abcdef0123456789abcdef");
  assert.equal(unknown.status, 429);
  assert.match((await unknown.json()).error.message, /you keep 3 conversations/);
  assert.equal((await (await api(worker.url, "GET", "/v1/conversations")).json()).conversations.length, 3, "nothing was stored");
  // An existing conversation still takes messages through /v1/chat.
  anthropic.script({ text: "Still here." });
  const existing = await chat(kept[0] ?? made[0]);
  assert.equal(existing.status, 200);
  await readUiStream(existing);
  // Room made, the same id starts its conversation.
  await api(worker.url, "DELETE", `/v1/conversations/${made.pop() ?? kept.pop()}`);
  anthropic.script({ text: "Hello." });
  const started = await chat("chat-new");
  assert.equal(started.status, 200);
  await readUiStream(started);
  assert.equal((await (await api(worker.url, "GET", "/v1/conversations")).json()).conversations.length, 3);
  for (const id of made) await api(worker.url, "DELETE", `/v1/conversations/${id}`);
});

test("two new chats racing for a user's last place: one starts, the other is refused", async () => {
  const listed = (await (await api(worker.url, "GET", "/v1/conversations")).json()).conversations;
  const made = [];
  while (listed.length + made.length < 2) made.push((await (await create()).json()).id);
  anthropic.script({ text: "Only one of you." });
  const chat = (id) => api(worker.url, "POST", "/v1/chat", { id, messages: [{ id: `m-${id}`, role: "user", parts: [{ type: "text", text: "hi" }] }] });
  const answers = await Promise.all(["race-a", "race-b"].map(async (id) => (await readUiStream(await chat(id))).chunks));
  const ended = answers.map((chunks) => (chunks.some((c) => c.type === "error") ? "refused" : "answered")).sort();
  assert.deepEqual(ended, ["answered", "refused"], "exactly one takes the last place");
  assert.equal((await (await api(worker.url, "GET", "/v1/conversations")).json()).conversations.length, 3);
  for (const id of made) await api(worker.url, "DELETE", `/v1/conversations/${id}`);
});

test("a conversation holds at most MAX_ARTIFACTS_PER_CONVERSATION artifacts of MAX_ARTIFACT_VERSIONS versions", async () => {
  const listed = (await (await api(worker.url, "GET", "/v1/conversations")).json()).conversations;
  const id = listed[0]?.id ?? (await (await create()).json()).id;
  const put = (aid, body) => api(worker.url, "PUT", `/v1/conversations/${id}/artifacts/${aid}`, body);
  assert.equal((await put("a1", { title: "One", kind: "text", content: "1" })).status, 201);
  assert.equal((await put("a2", { title: "Two", kind: "text", content: "2" })).status, 201);
  const third = await put("a3", { title: "Three", kind: "text", content: "3" });
  assert.equal(third.status, 413);
  assert.match((await third.json()).error.message, /holds 2 artifacts, the most one keeps; update one of them/);
  assert.equal((await put("a1", { content: "1b" })).status, 200);
  assert.equal((await put("a1", { content: "1c" })).status, 200);
  const fourth = await put("a1", { content: "1d" });
  assert.equal(fourth.status, 413);
  assert.match((await fourth.json()).error.message, /artifact `a1` has 3 versions, the most one keeps/);
  // The model's tools meet the same limit, as an error result it can read.
  anthropic.script(
    { tools: [{ id: "toolu_c", name: "create_artifact", input: { title: "Three", kind: "text", content: "3" } }] },
    { text: "It is full." },
  );
  const { chunks } = await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Make another." }));
  const error = chunks.find((c) => c.type === "tool-output-error");
  assert.match(error.errorText, /holds 2 artifacts/);
  const artifacts = (await (await api(worker.url, "GET", `/v1/conversations/${id}/artifacts`)).json()).artifacts;
  assert.deepEqual(artifacts.map((a) => [a.id, a.version]), [["a1", 3], ["a2", 1]]);
});
