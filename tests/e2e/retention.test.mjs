// `RETENTION_DAYS`: the Cron Trigger's run (driven through `wrangler dev --test-scheduled`'s
// `/__scheduled` route) deletes a conversation idle past the limit, its history, files and
// object state, keeps its ledger rows, leaves a fresh conversation alone, and logs one line; an
// idle conversation with a scheduled run to come is kept (and passed over until that run), and
// each deletion is logged with its conversation, owner and last update.

import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { test } from "node:test";
import { PNG, api, d1Query, readUiStream, setup } from "./harness.mjs";

const { anthropic, worker, persistDir, create, talk } = setup({ args: ["--test-scheduled"], vars: { RETENTION_DAYS: "30" } });

async function conversationWithAnswer(message) {
  const id = await create();
  await talk(id, message, "Noted.");
  return id;
}

const count = async (sql) => (await d1Query(persistDir, sql))[0].n;

/** Runs the Cron Trigger's handler once and returns the summary line it logged. */
async function scheduledRun() {
  const summaries = () => worker.jsonLines().filter((l) => l.event === "retention" && "conversations_deleted" in l);
  const seen = summaries().length;
  const ran = await fetch(`${worker.url}/__scheduled?cron=${encodeURIComponent("17 * * * *")}`);
  assert.equal(ran.status, 200);
  for (let i = 0; i < 50; i++) {
    const lines = summaries();
    if (lines.length > seen) return lines[seen];
    await sleep(100);
  }
  throw new Error("the scheduled run logged no retention line");
}

test("the scheduled run deletes a conversation idle past RETENTION_DAYS and keeps a fresh one", async () => {
  const old = await conversationWithAnswer([{ type: "text", text: "An old chat." }, { type: "file", data: PNG.toString("base64"), filename: "dot.png" }]);
  const fresh = await conversationWithAnswer("A fresh chat.");
  const [{ id: fileId }] = await d1Query(persistDir, `SELECT id FROM files WHERE conversation_id = '${old}'`);
  // Last updated 40 days ago.
  await d1Query(persistDir, `UPDATE conversations SET updated_at = ${Date.now() - 40 * 86_400_000} WHERE id = '${old}'`);

  const ran = await fetch(`${worker.url}/__scheduled?cron=${encodeURIComponent("17 * * * *")}`);
  assert.equal(ran.status, 200);
  const line = await worker.logLine((l) => l.event === "retention");
  assert.deepEqual([line.conversations_deleted, line.conversations_kept, line.failed, line.more_waiting, line.retention_days], [1, 0, 0, false, 30]);
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

test("an idle conversation with a scheduled run to come is kept; one without is deleted, and the log names it", async () => {
  const scheduled = await conversationWithAnswer("Remind me in ten days.");
  const plain = await conversationWithAnswer("Nothing to remember.");
  const created = await api(worker.url, "POST", `/v1/conversations/${scheduled}/schedules`, { instruction: "Remind the user.", at: new Date(Date.now() + 10 * 86_400_000).toISOString() });
  assert.equal(created.status, 201);
  const schedule = await created.json();
  const aged = Date.now() - 40 * 86_400_000;
  await d1Query(persistDir, `UPDATE conversations SET updated_at = ${aged} WHERE id IN ('${scheduled}', '${plain}')`);
  const [{ owner }] = await d1Query(persistDir, `SELECT owner FROM conversations WHERE id = '${plain}'`);

  const line = await scheduledRun();
  assert.deepEqual([line.conversations_deleted, line.conversations_kept, line.failed], [1, 1, 0]);
  const deleted = await worker.logLine((l) => l.event === "retention_deleted" && l.conversation === plain);
  assert.deepEqual([deleted.owner, deleted.updated_at], [owner, aged]);
  assert.ok(!worker.jsonLines().some((l) => l.event === "retention_deleted" && l.conversation === scheduled));
  assert.equal((await api(worker.url, "GET", `/v1/conversations/${plain}`)).status, 404);

  // The scheduled one is whole, its schedule waiting; D1 keeps it until that run.
  assert.equal((await api(worker.url, "GET", `/v1/conversations/${scheduled}`)).status, 200);
  assert.equal((await (await api(worker.url, "GET", `/v1/conversations/${scheduled}/messages`)).json()).messages.length, 2);
  const [waiting] = (await (await api(worker.url, "GET", `/v1/conversations/${scheduled}/schedules`)).json()).schedules;
  assert.deepEqual([waiting.id, waiting.status, waiting.next_run_at], [schedule.id, "active", schedule.next_run_at]);
  assert.deepEqual(await d1Query(persistDir, `SELECT retain_until FROM conversations WHERE id = '${scheduled}'`), [{ retain_until: schedule.next_run_at }]);

  // The next run passes over it without asking its object again.
  const next = await scheduledRun();
  assert.deepEqual([next.conversations_deleted, next.conversations_kept, next.failed], [0, 0, 0]);
  assert.equal((await api(worker.url, "GET", `/v1/conversations/${scheduled}`)).status, 200);

  // Once that time has passed with nothing left to run (cancelled here), it goes.
  assert.equal((await api(worker.url, "DELETE", `/v1/conversations/${scheduled}/schedules/${schedule.id}`)).status, 204);
  await d1Query(persistDir, `UPDATE conversations SET updated_at = ${aged}, retain_until = ${Date.now() - 1_000} WHERE id = '${scheduled}'`);
  const last = await scheduledRun();
  assert.deepEqual([last.conversations_deleted, last.conversations_kept, last.failed], [1, 0, 0]);
  assert.equal((await api(worker.url, "GET", `/v1/conversations/${scheduled}`)).status, 404);
});

test("working memories not written for RETENTION_DAYS are forgotten; fresh ones stay", async () => {
  const old = Date.now() - 40 * 86_400_000;
  await d1Query(persistDir, `INSERT INTO memories (owner, agent, body, version, updated_at) VALUES
    ('key:old', 'concierge', '{"diet":"vegan"}', 3, ${old}), ('key:fresh', 'concierge', '{"city":"Oslo"}', 1, ${Date.now()})`);
  const line = await scheduledRun();
  assert.equal(line.memories_deleted, 1);
  const kept = await d1Query(persistDir, "SELECT owner FROM memories ORDER BY owner");
  assert.deepEqual(kept.map((r) => r.owner), ["key:fresh"]);
});
