// Semantic recall: with a Vectorize index (`VECTORS`) and Workers AI embeddings (`AI`) bound
// (here a stand-in speaking the bindings' documented API), recall finds by meaning what words
// alone miss, the exchange's vectors are written after the answer (never on its path), one
// namespace per user; a deleted conversation and an erased user leave no vector id; and an
// index slower than MEMORY_RECALL_MS is not waited for: the turn answers without recall and its
// log line says so.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { anthropicVars, api, d1Query, loopbacks, readUiStream, vectorLoopback, startWithVectors } from "./harness.mjs";

const AGENTS = {
  keeper: { description: "Remembers", system: "You are the keeper.", model: "anthropic:claude-sonnet-4-5", memory: {} },
};
const KEYS = { ana: "sk-vec-ana", ben: "sk-vec-ben" };
const as = (user) => ({ authorization: `Bearer ${KEYS[user]}` });
const anthropic = loopbacks.anthropic();
const vectors = vectorLoopback();
let worker;

before(async () => {
  await anthropic.listen();
  await vectors.listen();
  worker = await startWithVectors(vectors, {
    ...anthropicVars(anthropic),
    AGENTS: JSON.stringify(AGENTS),
    ALLOW_ANONYMOUS: "false",
    API_KEYS: Object.entries(KEYS).map(([u, k]) => `${u}:${k}`).join(","),
    MEMORY_RECALL_MS: "1000",
  });
});
after(async () => {
  await worker?.stop();
  await anthropic.close();
  await vectors.close();
});

const systemOf = (body) => (typeof body.system === "string" ? body.system : (body.system ?? []).map((b) => b.text).join(""));
const create = async (user, body = {}) => (await (await api(worker.url, "POST", "/v1/conversations", { agent: "keeper", ...body }, as(user))).json()).id;
async function say(user, id, message, answer = "Noted.") {
  anthropic.script({ text: answer });
  return readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message }, as(user)));
}
const idsOf = (conversationId) => d1Query(worker.persistDir, `SELECT id FROM messages WHERE conversation_id = '${conversationId}' AND search_rowid IS NOT NULL`);
async function until(what, check) {
  for (let i = 0; !(await check()); i++) {
    if (i > 100) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

test("recall finds by meaning what words miss; vectors are written after the answer, per user", async () => {
  const first = await create("ana", { title: "Garage" });
  const upserts = () => vectors.calls.filter(([op]) => op === "upsert").length;
  const before = upserts();
  await say("ana", first, "My automobile is a red 1968 sedan.", "A classic!");
  await until("the exchange's vectors", async () => upserts() === before + 1);
  const [, { vectors: written }] = vectors.calls.filter(([op]) => op === "upsert").at(-1);
  assert.equal(written.length, 2, "the message and its answer");
  const namespace = written[0].namespace;
  assert.match(namespace, /^[0-9a-f]{32}$/, "a digest of the user, within the index's 64 bytes");

  // "vehicle" shares no word with "automobile" or "sedan": only meaning finds it.
  const second = await create("ana");
  const { chunks } = await say("ana", second, "Which vehicle do I own?", "A red 1968 car.");
  const system = systemOf(anthropic.requests.at(-1).body);
  assert.match(system, /<recalled>[\s\S]*My automobile is a red 1968 sedan\.[\s\S]*<\/recalled>/);
  assert.ok(chunks.find((c) => c.type === "data-memory").data.recalled.some((r) => r.conversation_id === first));
  const [, query] = vectors.calls.filter(([op]) => op === "query").at(-1);
  assert.equal(query.options.namespace, namespace);
  const line = await worker.logLine((l) => l.event === "turn" && l.conversation_id === second);
  assert.ok(line.memory.by_meaning >= 1, JSON.stringify(line.memory));

  // Another user's query is in their own namespace, and finds nothing of ana's.
  const bens = await create("ben");
  await say("ben", bens, "Which vehicle does anyone own?");
  assert.ok(!systemOf(anthropic.requests.at(-1).body).includes("sedan"));
  const [, bensQuery] = vectors.calls.filter(([op]) => op === "query").at(-1);
  assert.notEqual(bensQuery.options.namespace, namespace);
});

test("a deleted conversation and an erased user leave no vector id", async () => {
  const id = await create("ben", { title: "Pets" });
  const upserts = () => vectors.calls.filter(([op]) => op === "upsert").length;
  const before = upserts();
  await say("ben", id, "My puppy is called Biscuit.");
  await until("the vectors", async () => upserts() === before + 1);
  const ids = (await idsOf(id)).map((r) => r.id);
  assert.equal(ids.length, 2);
  assert.ok(ids.every((i) => vectors.vectors.has(i)));
  assert.equal((await api(worker.url, "DELETE", `/v1/conversations/${id}`, undefined, as("ben"))).status, 204);
  assert.ok(ids.every((i) => !vectors.vectors.has(i)), "the conversation's vectors are deleted with it");
  const next = await create("ben");
  await say("ben", next, "What is my canine called?");
  assert.ok(!systemOf(anthropic.requests.at(-1).body).includes("Biscuit"));

  // Erased: every vector of theirs goes.
  const kept = await create("ben");
  await say("ben", kept, "My hound snores.");
  await until("the vectors", async () => vectors.calls.filter(([op]) => op === "upsert").length === before + 3);
  const namespace = vectors.calls.filter(([op]) => op === "upsert").at(-1)[1].vectors[0].namespace;
  assert.ok([...vectors.vectors.values()].some((v) => v.namespace === namespace));
  assert.equal((await api(worker.url, "DELETE", "/v1/me", undefined, as("ben"))).status, 202);
  await until("ben's erasure", async () => (await d1Query(worker.persistDir, "SELECT COUNT(*) AS n FROM erasures"))[0].n === 0);
  assert.deepEqual([...vectors.vectors.values()].filter((v) => v.namespace === namespace), []);
});

test("an index slower than MEMORY_RECALL_MS is not waited for: the turn answers with what words found", async () => {
  const id = await create("ana");
  vectors.queryDelayMs = 6000;
  try {
    const started = Date.now();
    const { chunks } = await say("ana", id, "Remind me about my automobile.", "Here you go.");
    assert.equal(chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join(""), "Here you go.");
    assert.ok(Date.now() - started < 5000, "the turn did not wait for the index");
    // The words' results, in long before the index would answer, are kept.
    assert.match(systemOf(anthropic.requests.at(-1).body), /<recalled>[\s\S]*My automobile is a red 1968 sedan/);
    assert.ok(chunks.some((c) => c.type === "data-memory"));
    const line = await worker.logLine((l) => l.event === "turn" && l.conversation_id === id);
    assert.match(line.memory.recall_skipped, /^meaning: past MEMORY_RECALL_MS \(1000 ms\)$/);
    assert.equal(line.memory.by_meaning, null);
  } finally {
    vectors.queryDelayMs = 0;
  }
});
