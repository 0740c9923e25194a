// Erasing a user: `DELETE /v1/me` answers 202 and, in the background, leaves no content of the
// caller (conversations, history, artifacts, files) and nothing of anyone else touched, while
// the accounting stays (ledger amounts with no conversation named, the budget, the spend
// object's total), so erasing oneself resets no budget; a turn running meanwhile is charged; an
// admin may erase another user, nobody else may; the scheduled run finishes an erasure that
// did not end.

import assert from "node:assert/strict";
import { test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { PNG, api, d1Query, readUiStream, setup } from "./harness.mjs";

const KEYS = { alice: "sk-erase-alice", bob: "sk-erase-bob", ops: "sk-erase-ops", carol: "sk-erase-carol", dan: "sk-erase-dan" };
const as = (user) => ({ authorization: `Bearer ${KEYS[user]}` });
const { anthropic, worker, persistDir, create, talk } = setup({
  args: ["--test-scheduled"],
  vars: {
    ALLOW_ANONYMOUS: "false", API_KEYS: `alice:${KEYS.alice},bob:${KEYS.bob},ops:${KEYS.ops}:admin,carol:${KEYS.carol},dan:${KEYS.dan}`,
    // Budgets on: each user's calls are reserved and settled in their spend object.
    USER_BUDGET_USD: "100",
  },
});

async function conversationOf(user, message) {
  const id = await create({}, as(user));
  await talk(id, message, "Noted.", as(user));
  return id;
}

/** The period totals the spend objects hold, one per object that holds one (a user's spend
 * object is named by the user, its file by a hash: the totals are told apart by count). */
async function spendTotals() {
  const { readdirSync } = await import("node:fs");
  const path = await import("node:path");
  const { DatabaseSync } = await import("node:sqlite");
  const files = readdirSync(persistDir, { recursive: true }).filter((f) => /UserSpend[/\\][0-9a-f]+\.sqlite$/.test(f));
  const totals = [];
  for (const file of files) {
    const db = new DatabaseSync(path.join(persistDir, file), { readOnly: true });
    try {
      if (db.prepare("SELECT 1 FROM sqlite_master WHERE name = 'spend'").get()) {
        for (const row of db.prepare("SELECT state FROM spend").all()) totals.push(JSON.parse(row.state));
      }
    } finally {
      db.close();
    }
  }
  return totals;
}

/** Rows anywhere in D1 that belong to `owner`, by table (one query). */
async function rowsOf(owner) {
  const mine = `(SELECT id FROM conversations WHERE owner = '${owner}')`;
  const [row] = await d1Query(persistDir, `SELECT
    (SELECT COUNT(*) FROM conversations WHERE owner = '${owner}') AS conversations,
    (SELECT COUNT(*) FROM messages WHERE conversation_id IN ${mine}) AS messages,
    (SELECT COUNT(*) FROM usage_ledger WHERE owner = '${owner}') AS ledger,
    (SELECT COUNT(*) FROM usage_ledger WHERE owner = '${owner}' AND conversation_id <> '') AS ledger_naming,
    (SELECT COUNT(*) FROM budgets WHERE user = '${owner}') AS budgets,
    (SELECT COUNT(*) FROM erasures WHERE owner = '${owner}') AS erasures`);
  return row;
}

async function until(what, check, ms = 20_000) {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(200);
  }
}

test("DELETE /v1/me leaves nothing of the caller and nothing of anyone else touched", async () => {
  const alices = [
    await conversationOf("alice", "First."),
    await conversationOf("alice", [{ type: "text", text: "Look." }, { type: "file", data: PNG.toString("base64"), filename: "dot.png" }]),
    await conversationOf("alice", "Third."),
  ];
  assert.ok((await api(worker.url, "PUT", `/v1/conversations/${alices[2]}/artifacts/notes`, { title: "Notes", kind: "text", content: "x" }, as("alice"))).ok);
  assert.equal((await api(worker.url, "PUT", "/v1/admin/budgets/key:alice", { limit_usd: 5, period: "month" }, as("ops"))).status, 200);
  const [{ id: fileId }] = await d1Query(persistDir, `SELECT id FROM files WHERE conversation_id = '${alices[1]}'`);
  const bobs = await conversationOf("bob", "Bob's.");
  const bobBefore = await rowsOf("key:bob");
  assert.equal((await spendTotals()).length, 2, "alice's and bob's spend objects hold their totals");

  const r = await api(worker.url, "DELETE", "/v1/me", undefined, as("alice"));
  assert.equal(r.status, 202);
  assert.deepEqual(await r.json(), { erasing: "key:alice" });
  await until("alice's erasure", async () => (await rowsOf("key:alice")).erasures === 0);
  // Content gone; the three answers' ledger rows and the admin's limit kept, naming nothing.
  assert.deepEqual(await rowsOf("key:alice"), { conversations: 0, messages: 0, ledger: 3, ledger_naming: 0, budgets: 1, erasures: 0 });
  for (const id of alices) {
    assert.equal((await api(worker.url, "GET", `/v1/conversations/${id}`, undefined, as("alice"))).status, 404);
    assert.equal(await (await d1Query(persistDir, `SELECT COUNT(*) AS n FROM artifacts WHERE conversation_id = '${id}'`))[0].n, 0);
  }
  assert.equal(await (await d1Query(persistDir, `SELECT COUNT(*) AS n FROM files WHERE id = '${fileId}'`))[0].n, 0);
  const line = await worker.logLine((l) => l.event === "erasure" && l.user === "key:alice");
  assert.equal(line.conversations_deleted, 3);
  assert.equal((await spendTotals()).length, 2, "alice's spend object keeps her period's total; bob's is untouched");

  // Bob's data is as it was, and his conversation goes on.
  assert.deepEqual(await rowsOf("key:bob"), bobBefore);
  anthropic.script({ text: "Still here." });
  const { chunks } = await readUiStream(await api(worker.url, "POST", `/v1/conversations/${bobs}/messages`, { message: "Hello?" }, as("bob")));
  assert.ok(chunks.some((c) => c.type === "text-delta"));
  // Alice may start again from nothing.
  assert.equal((await (await api(worker.url, "GET", "/v1/conversations", undefined, as("alice"))).json()).conversations.length, 0);
});

test("only an admin may erase another user", async () => {
  const bobs = await conversationOf("bob", "Mine.");
  const refused = await api(worker.url, "DELETE", "/v1/admin/users/key:bob", undefined, as("alice"));
  assert.equal(refused.status, 403);
  assert.equal((await api(worker.url, "GET", `/v1/conversations/${bobs}`, undefined, as("bob"))).status, 200);
  const r = await api(worker.url, "DELETE", `/v1/admin/users/${encodeURIComponent("key:bob")}`, undefined, as("ops"));
  assert.equal(r.status, 202);
  await until("bob's erasure", async () => (await rowsOf("key:bob")).erasures === 0);
  const kept = await rowsOf("key:bob");
  assert.deepEqual({ ...kept, ledger: kept.ledger > 0 }, { conversations: 0, messages: 0, ledger: true, ledger_naming: 0, budgets: 0, erasures: 0 });
});

test("an erasure that did not end is finished by the scheduled run", async () => {
  const id = await conversationOf("ops", "Soon gone.");
  // As if the erasure had been recorded and the Worker had stopped before it ran.
  await d1Query(persistDir, `INSERT INTO erasures (owner, requested_by, requested_at) VALUES ('key:ops', 'key:ops', ${Date.now()})`);
  assert.equal((await fetch(`${worker.url}/__scheduled?cron=${encodeURIComponent("17 * * * *")}`)).status, 200);
  await until("the scheduled erasure", async () => (await rowsOf("key:ops")).erasures === 0);
  assert.deepEqual(await rowsOf("key:ops"), { conversations: 0, messages: 0, ledger: 1, ledger_naming: 0, budgets: 0, erasures: 0 });
  assert.equal((await api(worker.url, "GET", `/v1/conversations/${id}`, undefined, as("ops"))).status, 404);
});

test("while a user is being erased, no conversation of theirs starts: it would outlive the erasure", async () => {
  // As if alice's erasure were running: it deletes the conversations it finds, so one begun
  // now must wait until it has finished.
  await d1Query(persistDir, `INSERT INTO erasures (owner, requested_by, requested_at) VALUES ('key:alice', 'key:alice', ${Date.now()})`);
  const before = await rowsOf("key:alice");
  const created = await api(worker.url, "POST", "/v1/conversations", {}, as("alice"));
  assert.equal(created.status, 409);
  assert.match((await created.json()).error.message, /your data is being erased .*once the erasure has finished/);
  const chat = (extra = {}) => api(worker.url, "POST", "/v1/chat", { id: "during-erasure", messages: [{ id: "m", role: "user", parts: [{ type: "text", text: "hi" }] }], ...extra }, as("alice"));
  const { chunks } = await readUiStream(await chat());
  assert.match(chunks.find((c) => c.type === "error").errorText, /your data is being erased/);
  assert.equal((await chat({ stream: false })).status, 409);
  assert.deepEqual(await rowsOf("key:alice"), before, "nothing of alice's was stored");
  // The erasure over, she starts again.
  await d1Query(persistDir, "DELETE FROM erasures WHERE owner = 'key:alice'");
  assert.equal((await api(worker.url, "POST", "/v1/conversations", {}, as("alice"))).status, 201);
});

test("an erasure resets no budget: what was spent and an admin's limit outlive it", async () => {
  await conversationOf("carol", "Spend a little.");
  const usage = async () => (await api(worker.url, "GET", "/v1/usage", undefined, as("carol"))).json();
  const spent = (await usage()).spent_usd;
  assert.ok(spent > 0);
  assert.equal((await api(worker.url, "PUT", "/v1/admin/budgets/key:carol", { limit_usd: 0, period: "month" }, as("ops"))).status, 200);
  assert.equal((await api(worker.url, "DELETE", "/v1/me", undefined, as("carol"))).status, 202);
  await until("carol's erasure", async () => (await rowsOf("key:carol")).erasures === 0);
  const after = await usage();
  assert.equal(after.spent_usd, spent, "the period's spend survives");
  assert.equal(after.limit_usd, 0, "the admin's limit survives");
  // Starting again from nothing does not start the budget again.
  const { id } = await (await api(worker.url, "POST", "/v1/conversations", {}, as("carol"))).json();
  const refused = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Again?" }, as("carol"));
  assert.equal(refused.status, 402);
  assert.equal((await refused.json()).error.code, "budget_exceeded");
});

test("a turn still running while its user is erased is charged", async () => {
  const { id } = await (await api(worker.url, "POST", "/v1/conversations", {}, as("dan"))).json();
  anthropic.script({ text: "A long answer that streams for a while. ".repeat(40), gapMs: 25 });
  const response = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Talk." }, as("dan"));
  const reader = response.body.getReader();
  let seen = "";
  while (!seen.includes("text-delta")) {
    const { value, done } = await reader.read();
    if (done) break;
    seen += new TextDecoder().decode(value);
  }
  assert.equal((await api(worker.url, "DELETE", "/v1/me", undefined, as("dan"))).status, 202);
  while (!(await reader.read()).done);
  await until("dan's erasure", async () => (await rowsOf("key:dan")).erasures === 0);
  const [charged] = await d1Query(persistDir, "SELECT COUNT(*) AS n, SUM(cost_usd) AS usd FROM usage_ledger WHERE owner = 'key:dan'");
  assert.ok(charged.n >= 1 && charged.usd > 0, JSON.stringify(charged));
  assert.equal((await rowsOf("key:dan")).ledger_naming, 0);
});
