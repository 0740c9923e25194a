// Past one D1 database: `D1_SHARDS` names two local D1 databases, and each user's
// conversations, history, artifacts and ledger land in the one they are recorded in (their id
// hashed over the list, recorded in the first), so no request crosses them and everything works
// as with one.

import assert from "node:assert/strict";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { ROOT, anthropicLoopback, anthropicVars, api, d1Query, freshPersistDir, readUiStream, startWorker } from "./harness.mjs";

let anthropic, worker, persistDir, config;
const KEYS = { alice: "sk-alice", bob: "sk-bob" };
const as = (user) => ({ authorization: `Bearer ${KEYS[user]}` });

before(async () => {
  anthropic = await anthropicLoopback();
  persistDir = freshPersistDir();
  // The project's wrangler.toml with a second D1 database, written beside the build's output.
  const dir = path.join(ROOT, "target", "e2e");
  mkdirSync(dir, { recursive: true });
  config = path.join(dir, "wrangler-shards.toml");
  const own = readFileSync(path.join(ROOT, "wrangler.toml"), "utf8")
    .replace('main = "build/index.js"', 'main = "../../build/index.js"')
    .replace('directory = "web/dist"', 'directory = "../../web/dist"')
    .replace('migrations_dir = "migrations"', 'migrations_dir = "../../migrations"');
  writeFileSync(config, `${own}
[[d1_databases]]
binding = "DB2"
database_name = "edge-agent-2"
database_id = "00000000-0000-0000-0000-000000000002"
migrations_dir = "../../migrations"
`);
  worker = await start();
});

const start = () => startWorker({
  persistDir,
  config,
  migrate: ["DB", "DB2"],
  vars: {
    D1_SHARDS: "DB,DB2", ALLOW_ANONYMOUS: "false", API_KEYS: `alice:${KEYS.alice},bob:${KEYS.bob}`,
    ...anthropicVars(anthropic),
  },
});

after(async () => {
  await worker?.stop();
  await anthropic?.close();
});

const rows = async (binding, sql) => d1Query(persistDir, sql, { binding, config });

test("two users' data land in different D1 databases, and every route works for both", async () => {
  const made = {};
  for (const user of ["alice", "bob"]) {
    const created = await api(worker.url, "POST", "/v1/conversations", { title: `${user}'s` }, as(user));
    assert.equal(created.status, 201);
    const { id } = await created.json();
    made[user] = id;
    anthropic.script({ text: `Hello, ${user}.` });
    await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "hi" }, as(user)));
    anthropic.script({ text: "Again." });
    await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "and again" }, as(user)));
    const history = (await (await api(worker.url, "GET", `/v1/conversations/${id}/messages`, undefined, as(user))).json()).messages;
    assert.deepEqual(history.map((m) => m.kind), ["user", "assistant", "user", "assistant"]);
    assert.equal((await api(worker.url, "PUT", `/v1/conversations/${id}/artifacts/notes`, { title: "Notes", kind: "text", content: user }, as(user))).status, 201);
    const listed = (await (await api(worker.url, "GET", "/v1/conversations", undefined, as(user))).json()).conversations;
    assert.deepEqual(listed.map((c) => c.id), [id], "each sees only their own");
    const usage = await (await api(worker.url, "GET", "/v1/usage", undefined, as(user))).json();
    assert.ok(JSON.stringify(usage).includes("claude-sonnet-4-5"), `usage read from their database: ${JSON.stringify(usage)}`);
    // A /v1/chat conversation lands with the rest of its owner's.
    anthropic.script({ text: "Chatting." });
    const chat = await api(worker.url, "POST", "/v1/chat", { id: `chat-${user}`, messages: [{ id: `m-${user}`, role: "user", parts: [{ type: "text", text: "hey" }] }] }, as(user));
    await readUiStream(chat);
  }
  // key:alice hashes to DB, key:bob to DB2 (src/edge/d1/shards.rs checks the same).
  const owners = async (binding) => (await rows(binding, "SELECT DISTINCT owner FROM conversations ORDER BY owner")).map((r) => r.owner);
  assert.deepEqual(await owners("DB"), ["key:alice"]);
  assert.deepEqual(await owners("DB2"), ["key:bob"]);
  for (const [binding, user] of [["DB", "alice"], ["DB2", "bob"]]) {
    const [counts] = await rows(binding, `SELECT (SELECT COUNT(*) FROM messages) AS messages, (SELECT COUNT(*) FROM artifacts) AS artifacts, (SELECT COUNT(*) FROM usage_ledger WHERE owner = 'key:${user}') AS ledger, (SELECT COUNT(*) FROM usage_ledger WHERE owner != 'key:${user}') AS others`);
    assert.deepEqual(counts, { messages: 6, artifacts: 1, ledger: 3, others: 0 }, `${binding} holds ${user}'s`);
  }
  // The first database records where each owner is; the second records nothing.
  assert.deepEqual(await rows("DB", "SELECT owner, shard FROM owner_shards ORDER BY owner"), [{ owner: "key:alice", shard: "DB" }, { owner: "key:bob", shard: "DB2" }]);
  assert.deepEqual(await rows("DB2", "SELECT owner FROM owner_shards"), []);
  // Neither reaches the other's conversation, and a deletion empties the right database.
  assert.equal((await api(worker.url, "GET", `/v1/conversations/${made.bob}`, undefined, as("alice"))).status, 404);
  assert.equal((await api(worker.url, "DELETE", `/v1/conversations/${made.bob}`, undefined, as("bob"))).status, 204);
  assert.deepEqual(await rows("DB2", `SELECT id FROM conversations WHERE id = '${made.bob}'`), []);
  assert.equal((await rows("DB", `SELECT id FROM conversations WHERE id = '${made.alice}'`)).length, 1);
});

test("a deletion the alarm finishes after a restart reaches the owner's database", async () => {
  const [{ id }] = (await (await api(worker.url, "GET", "/v1/conversations", undefined, as("bob"))).json()).conversations;
  // DB2 refuses to delete the row: the object is emptied, the rows stay.
  await rows("DB2", `CREATE TRIGGER hold BEFORE DELETE ON conversations WHEN old.id = '${id}' BEGIN SELECT RAISE(ABORT, 'held'); END`);
  assert.equal((await api(worker.url, "DELETE", `/v1/conversations/${id}`, undefined, as("bob"))).status, 500);
  // The runtime dies with the deletion half done; nothing of the object is left in memory.
  await worker.kill();
  await rows("DB2", "DROP TRIGGER hold");
  worker = await start();
  for (const deadline = Date.now() + 60_000; (await rows("DB2", `SELECT id FROM conversations WHERE id = '${id}'`)).length; await sleep(500)) {
    assert.ok(Date.now() < deadline, "the alarm never finished the deletion in DB2");
  }
  assert.equal((await api(worker.url, "GET", `/v1/conversations/${id}`, undefined, as("bob"))).status, 404);
  assert.deepEqual(await rows("DB2", `SELECT COUNT(*) AS n FROM messages WHERE conversation_id = '${id}'`), [{ n: 0 }]);
});

test("a /v1/chat naming another shard's conversation lands in the caller's own database", async () => {
  const [{ id: alices }] = (await (await api(worker.url, "GET", "/v1/conversations", undefined, as("alice"))).json()).conversations;
  const alicesHistory = async (id) => (await (await api(worker.url, "GET", `/v1/conversations/${id}/messages`, undefined, as("alice"))).json()).messages;
  const before = await alicesHistory(alices);
  // A fresh conversation of alice's that has seen no message yet: its object knows no database.
  const { id: fresh } = await (await api(worker.url, "POST", "/v1/conversations", {}, as("alice"))).json();
  for (const [n, target] of [[1, alices], [2, fresh]]) {
    anthropic.script({ text: `Bob's own ${n}.` });
    const { chunks } = await readUiStream(await api(worker.url, "POST", "/v1/chat", { id: target, messages: [{ id: `b${n}`, role: "user", parts: [{ type: "text", text: "mine?" }] }] }, as("bob")));
    assert.ok(!chunks.some((c) => c.type === "error"), JSON.stringify(chunks));
    const text = chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join("");
    assert.equal(text, `Bob's own ${n}.`);
  }
  // Nothing of bob's in alice's database; his scoped conversations, answered, in his.
  assert.deepEqual(await rows("DB", "SELECT id FROM conversations WHERE owner = 'key:bob'"), []);
  const bobs = await rows("DB2", "SELECT c.id, (SELECT COUNT(*) FROM messages m WHERE m.conversation_id = c.id) AS n FROM conversations c WHERE c.owner = 'key:bob'");
  assert.ok(bobs.filter((c) => c.n === 2).length >= 2, JSON.stringify(bobs));
  // Alice's conversations are as they were, and the fresh one still works in her database.
  assert.deepEqual(await alicesHistory(alices), before);
  anthropic.script({ text: "Alice's first answer." });
  const { chunks } = await readUiStream(await api(worker.url, "POST", `/v1/conversations/${fresh}/messages`, { message: "hello" }, as("alice")));
  assert.ok(!chunks.some((c) => c.type === "error"), JSON.stringify(chunks));
  assert.deepEqual((await alicesHistory(fresh)).map((m) => m.kind), ["user", "assistant"]);
  assert.equal((await rows("DB", `SELECT COUNT(*) AS n FROM messages WHERE conversation_id = '${fresh}'`))[0].n, 2);
});
