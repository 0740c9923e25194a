// A turn that dies (workerd killed mid-stream) neither locks its conversation nor loses the
// message that was queued for it.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { anthropicLoopback, api, freshPersistDir, readUiStream, startWorker } from "./harness.mjs";

const LEASE_TTL_MS = 3000;
let anthropic, worker, persistDir, vars;

before(async () => {
  anthropic = await anthropicLoopback();
  persistDir = freshPersistDir();
  vars = { ANTHROPIC_BASE_URL: anthropic.url, ANTHROPIC_API_KEY: "sk-ant-loopback", LEASE_TTL_MS: String(LEASE_TTL_MS) };
  worker = await startWorker({ persistDir, vars });
});

after(async () => {
  await worker?.stop();
  await anthropic?.close();
});

test("the lease of a dead turn expires and the next turn answers what was queued for it", async () => {
  anthropic.script({ text: "This answer streams slowly and will never finish because the runtime dies.", gapMs: 40 });
  const { id } = await (await api(worker.url, "POST", "/v1/conversations", {})).json();
  const dying = api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "first" }).then((r) => r.text()).catch(() => "");
  while (anthropic.requests.length < 1) await sleep(20);
  const queued = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "second" });
  assert.equal(queued.status, 202);
  assert.deepEqual(await queued.json(), { queued: "steering", position: 1 });

  await worker.kill();
  await dying;
  worker = await startWorker({ persistDir, vars });

  // The conversation frees itself once the dead turn's lease runs out.
  const deadline = Date.now() + LEASE_TTL_MS + 10_000;
  let status;
  for (;;) {
    status = await (await api(worker.url, "GET", `/v1/conversations/${id}`)).json();
    if (status.status === "idle" || Date.now() > deadline) break;
    await sleep(200);
  }
  assert.equal(status.status, "idle", "the lease expired");
  assert.deepEqual(status.queued, { steering: 1, followup: 0 }, "the queued message is still there");

  anthropic.script({ text: "Answering all three." });
  const { chunks } = await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "third" }));
  assert.equal(chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join(""), "Answering all three.");

  // The model saw all three user messages, in the order they were sent.
  const sent = anthropic.requests.at(-1).body.messages;
  assert.deepEqual(sent, [{ role: "user", content: ["first", "second", "third"].map((text) => ({ type: "text", text })) }]);
  const history = (await (await api(worker.url, "GET", `/v1/conversations/${id}/messages`)).json()).messages;
  assert.deepEqual(history.map((m) => [m.kind, m.content[0].text]), [
    ["user", "first"], ["user", "second"], ["user", "third"], ["assistant", "Answering all three."],
  ]);
  const after = await (await api(worker.url, "GET", `/v1/conversations/${id}`)).json();
  assert.deepEqual([after.status, after.queued], ["idle", { steering: 0, followup: 0 }]);
});
