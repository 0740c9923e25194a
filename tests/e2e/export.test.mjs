// `GET /v1/me/export`: everything a user owns as one JSON document, streamed. A user with 50
// conversations (some with history, artifact versions and a file) reads it back whole; another
// user's data is not in it.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { PNG, anthropicLoopback, anthropicVars, api, freshPersistDir, readUiStream, startWorker } from "./harness.mjs";

const KEYS = { alice: "sk-export-alice", bob: "sk-export-bob" };
const as = (user) => ({ authorization: `Bearer ${KEYS[user]}` });
let anthropic, worker;

before(async () => {
  anthropic = await anthropicLoopback();
  worker = await startWorker({
    persistDir: freshPersistDir(),
    vars: {
      ...anthropicVars(anthropic),
      ALLOW_ANONYMOUS: "false", API_KEYS: `alice:${KEYS.alice},bob:${KEYS.bob}`,
    },
  });
});

after(async () => {
  await worker?.stop();
  await anthropic?.close();
});

const create = async (user, title) => (await (await api(worker.url, "POST", "/v1/conversations", { title }, as(user))).json()).id;
async function talk(user, id, message, answer) {
  anthropic.script({ text: answer });
  const r = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message }, as(user));
  assert.equal(r.status, 200);
  await readUiStream(r);
}

test("an export of a user with 50 conversations reads back whole, and holds nothing of anyone else", async () => {
  const ids = [];
  for (let i = 0; i < 50; i++) ids.push(await create("alice", `chat ${i}`));
  await talk("alice", ids[0], "First question.", "First answer.");
  await talk("alice", ids[0], "Second question.", "Second answer.");
  await talk("alice", ids[7], [{ type: "text", text: "Look." }, { type: "file", data: PNG.toString("base64"), filename: "dot.png" }], "A dot.");
  for (const content of ["v1", "v2"]) {
    assert.ok((await api(worker.url, "PUT", `/v1/conversations/${ids[9]}/artifacts/notes`, { title: "Notes", kind: "text", content }, as("alice"))).ok);
  }
  const schedule = await (await api(worker.url, "POST", `/v1/conversations/${ids[3]}/schedules`, { instruction: "Water the plants.", cron: "0 8 * * *" }, as("alice"))).json();
  const bobs = await create("bob", "bob's secret chat");
  await talk("bob", bobs, "Bob's question.", "Bob's answer.");

  const r = await fetch(`${worker.url}/v1/me/export`, { headers: as("alice") });
  assert.equal(r.status, 200);
  assert.equal(r.headers.get("content-type"), "application/json");
  assert.match(r.headers.get("content-disposition"), /^attachment/);
  const text = await r.text();
  const doc = JSON.parse(text);
  assert.equal(doc.user, "key:alice"); // users named by an API key are `key:<name>`
  assert.equal(doc.conversations.length, 50);
  assert.deepEqual(new Set(doc.conversations.map((c) => c.id)), new Set(ids));
  assert.ok(!text.includes(bobs) && !text.includes("Bob's"), "nothing of bob's");

  const byId = Object.fromEntries(doc.conversations.map((c) => [c.id, c]));
  // Each conversation's history is what its messages route returns.
  for (const id of [ids[0], ids[7], ids[20]]) {
    const history = (await (await api(worker.url, "GET", `/v1/conversations/${id}/messages`, undefined, as("alice"))).json()).messages;
    assert.deepEqual(byId[id].messages, history, id);
  }
  assert.equal(byId[ids[0]].messages.length, 4);
  assert.equal(byId[ids[0]].title, "chat 0");
  assert.deepEqual(byId[ids[9]].artifacts.map((a) => [a.id, a.version, a.content]), [["notes", 1, "v1"], ["notes", 2, "v2"]]);
  const [file] = byId[ids[7]].files;
  assert.deepEqual([file.media_type, file.size, file.name], ["image/png", PNG.length, "dot.png"]);
  const served = await fetch(worker.url + file.url, { headers: as("alice") });
  assert.deepEqual(Buffer.from(await served.arrayBuffer()), PNG);
  // Schedules, which the conversation's object keeps, as its list gives them.
  assert.deepEqual(byId[ids[3]].schedules, [schedule]);
  assert.deepEqual(byId[ids[0]].schedules, []);
  // Usage: one ledger row per answer, in order.
  assert.deepEqual(doc.usage.map((u) => u.conversation_id), [ids[0], ids[0], ids[7]]);
  assert.ok(doc.usage.every((u) => u.model === "claude-sonnet-4-5" && u.input_tokens > 0));
});
