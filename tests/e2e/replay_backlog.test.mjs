// A reader re-attaching to a turn whose stream is already past 1 MB (issue 56, item 12): the
// backlog it is given at once is not a lag, so it gets the backlog, then the live part, the
// finish and [DONE], like the request that started the turn. Before the fix the backlog counted
// toward the reader's 1 MB bound and its stream ended, cleanly, right after the backlog.

import assert from "node:assert/strict";
import { test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { api, parseUiStream, setup } from "./harness.mjs";

const { anthropic, worker } = setup();

const textOf = (chunks) => chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join("");

/** Reads `response`'s body until `enough(bytesSoFar)`, then the rest; `reached` resolves at the
 * point `enough` first held. */
function readCounting(response, enough) {
  let reached;
  const point = new Promise((r) => (reached = r));
  const whole = (async () => {
    const reader = response.body.getReader();
    const parts = [];
    let bytes = 0;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      parts.push(value);
      bytes += value.length;
      if (enough(bytes)) reached(bytes);
    }
    reached(bytes);
    return Buffer.concat(parts).toString("utf8");
  })();
  return { point, whole };
}

test("a reader attaching to a turn past 1 MB of stream gets the backlog, the live part, the finish and [DONE]", async () => {
  const { id } = await (await api(worker.url, "POST", "/v1/conversations", {})).json();
  // 40,000 six-character deltas: about 62 bytes each in the UI stream, 2.5 MB in all (the log
  // keeps up to 4 MB). Most come at once; the last 40 a tenth of a second apart, so the turn is
  // still running when the second reader attaches.
  const full = "abcdef".repeat(40_000);
  anthropic.script({ text: full, writes: "event", burst: 39_966, gapMs: 100 });
  const started = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Say a lot." });
  assert.equal(started.status, 200);
  const first = readCounting(started, (bytes) => bytes > 1_500_000);
  const seen = await first.point;
  assert.ok(seen > 1_500_000, `the turn ended after ${seen} bytes, before a reader could attach past 1 MB`);

  const attached = await api(worker.url, "GET", `/v1/conversations/${id}/stream`);
  assert.equal(attached.status, 200, "the stream outgrew nothing: it is replayed, not a 204");
  const [late, whole] = await Promise.all([attached.text(), first.whole]);
  assert.ok(late.length > 1_500_000, `the late reader got ${late.length} bytes`);
  // Before the fix: the backlog, then a clean close, with no `finish` and no [DONE].
  const lateChunks = await parseUiStream(late);
  const wholeChunks = await parseUiStream(whole);
  assert.equal(lateChunks[0].type, "start", "the replay begins at the turn's start");
  assert.deepEqual(lateChunks.at(-1), { type: "finish", finishReason: "stop" });
  assert.equal(textOf(lateChunks), full, "the backlog and the live part, whole and in order");
  assert.ok(late === whole, "the same stream the request that started the turn read");
  // The turn is over (once its end step has run): nothing is left to attach to.
  let status;
  for (let i = 0; i < 50; i++) {
    const r = await api(worker.url, "GET", `/v1/conversations/${id}/stream`);
    status = r.status;
    await r.body?.cancel();
    if (status === 204) break;
    await sleep(100);
  }
  assert.equal(status, 204);
});
