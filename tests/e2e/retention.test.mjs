// `RETENTION_DAYS`: the Cron Trigger's run (driven through `wrangler dev --test-scheduled`'s
// `/__scheduled` route) deletes a conversation idle past the limit, its history, files and
// object state, keeps its ledger rows, leaves a fresh conversation alone, and logs one line.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { PNG, anthropicLoopback, anthropicVars, api, d1Query, freshPersistDir, readUiStream, startWorker } from "./harness.mjs";

let anthropic, worker, persistDir;

before(async () => {
  anthropic = await anthropicLoopback();
  persistDir = freshPersistDir();
  worker = await startWorker({
    persistDir,
    args: ["--test-scheduled"],
    vars: { ...anthropicVars(anthropic), RETENTION_DAYS: "30" },
  });
});

after(async () => {
  await worker?.stop();
  await anthropic?.close();
});

async function conversationWithAnswer(message) {
  const { id } = await (await api(worker.url, "POST", "/v1/conversations", {})).json();
  anthropic.script({ text: "Noted." });
  await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message }));
  return id;
}

const count = async (sql) => (await d1Query(persistDir, sql))[0].n;

test("the scheduled run deletes a conversation idle past RETENTION_DAYS and keeps a fresh one", async () => {
  const old = await conversationWithAnswer([{ type: "text", text: "An old chat." }, { type: "file", data: PNG.toString("base64"), filename: "dot.png" }]);
  const fresh = await conversationWithAnswer("A fresh chat.");
  const [{ id: fileId }] = await d1Query(persistDir, `SELECT id FROM files WHERE conversation_id = '${old}'`);
  // Last updated 40 days ago.
  await d1Query(persistDir, `UPDATE conversations SET updated_at = ${Date.now() - 40 * 86_400_000} WHERE id = '${old}'`);

  const ran = await fetch(`${worker.url}/__scheduled?cron=${encodeURIComponent("17 * * * *")}`);
  assert.equal(ran.status, 200);
  const line = await worker.logLine((l) => l.event === "retention");
  assert.deepEqual([line.conversations_deleted, line.failed, line.more_waiting, line.retention_days], [1, 0, false, 30]);
  assert.ok(line.rows_deleted >= 4, `rows: ${line.rows_deleted}`); // 2 messages, the file, the conversation

  assert.equal((await api(worker.url, "GET", `/v1/conversations/${old}`)).status, 404);
  assert.equal((await fetch(`${worker.url}/v1/conversations/${old}/files/${fileId}`)).status, 404);
  assert.equal(await count(`SELECT COUNT(*) AS n FROM messages WHERE conversation_id = '${old}'`), 0);
  assert.equal(await count(`SELECT COUNT(*) AS n FROM files WHERE conversation_id = '${old}'`), 0);
  // Spend is accounting: the ledger keeps the deleted conversation's rows.
  assert.equal(await count(`SELECT COUNT(*) AS n FROM usage_ledger WHERE conversation_id = '${old}'`), 1);

  // The fresh one is untouched and still takes messages.
  assert.equal((await (await api(worker.url, "GET", `/v1/conversations/${fresh}/messages`)).json()).messages.length, 2);
  anthropic.script({ text: "Still here." });
  const { chunks } = await readUiStream(await api(worker.url, "POST", `/v1/conversations/${fresh}/messages`, { message: "Hello again." }));
  assert.ok(chunks.some((c) => c.type === "text-delta"));
});
