// `src/edge/platform/push_body.js`, the response body the turn's stream is written into, on
// Node's web streams (the same WHATWG streams workerd implements): writes a burst makes come out
// joined, a write after a quiet spell at once, and a reader that leaves a megabyte unread is
// closed without taking the turn's memory with it. Under workerd the body is exercised by every
// streamed turn of the end-to-end tests; these check the two bounds they cannot easily provoke.

import assert from "node:assert/strict";
import { test } from "node:test";
import { PushBody } from "../../src/edge/platform/push_body.js";

const text = (bytes) => new TextDecoder().decode(bytes);
const encode = (s) => new TextEncoder().encode(s);
// The clock is Node's mock: workerd's moves only on I/O, and a loaded machine's real one would
// split a burst the body is right to join.
const clock = (t) => t.mock.timers.enable({ apis: ["Date", "setTimeout"], now: 1_000_000 });

test("a burst of writes comes out as one chunk; a write after a quiet spell comes out alone", async (t) => {
  clock(t);
  const body = new PushBody(1 << 20);
  const reader = body.stream.getReader();
  assert.equal(body.write(encode("data: start\n\n")), true);
  // Within the window of the first: held, then sent together.
  for (let i = 0; i < 5; i++) body.write(encode(`data: ${i}\n\n`));
  const first = await reader.read();
  assert.equal(text(first.value), "data: start\n\n");
  t.mock.timers.tick(3);
  body.write(encode("data: 5\n\n"));
  t.mock.timers.tick(1); // the window ends
  const burst = await reader.read();
  assert.equal(text(burst.value), "data: 0\n\ndata: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\ndata: 5\n\n");
  t.mock.timers.tick(10);
  body.write(encode("data: later\n\n"));
  const later = await reader.read();
  assert.equal(text(later.value), "data: later\n\n");
  body.write(encode("data: [DONE]\n\n"));
  body.close();
  // What was held when the body closed is sent first.
  assert.equal(text((await reader.read()).value), "data: [DONE]\n\n");
  assert.equal((await reader.read()).done, true);
});

test("a reader that leaves more than its bound unread is closed with an error chunk; what it had stays readable", async (t) => {
  clock(t);
  const body = new PushBody(64 << 10);
  const piece = encode(`data: ${"x".repeat(4090)}\n\n`);
  let accepted = 0;
  while (body.write(piece)) {
    accepted++;
    assert.ok(accepted < 1000, "never closed");
    t.mock.timers.tick(5); // a model's pace: each write is enqueued at once
  }
  assert.ok(accepted >= 15 && accepted <= 17, `closed after ${accepted} writes of 4 KB against a 64 KB bound`);
  assert.equal(body.gone, true);
  assert.equal(body.write(piece), false, "it takes nothing more");
  const reader = body.stream.getReader();
  const chunks = [];
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
  }
  const all = Buffer.concat(chunks);
  const last = text(chunks.at(-1));
  assert.match(last, /^data: \{"type":"error","errorText":"This reader fell more than 1 MB behind/, "it ends with an error, not a clean close");
  assert.equal(all.length - chunks.at(-1).length, (accepted + 1) * piece.length, "after what it held");
});

test("the backlog a reader attaches to does not count against its bound, and the end is never a lag", async (t) => {
  clock(t);
  const backlog = encode(`data: ${"b".repeat(200 << 10)}\n\n`);
  const body = new PushBody(64 << 10, backlog.length);
  assert.ok(body.write(backlog), "the backlog, written at once, is over the bound but taken");
  const piece = encode(`data: ${"x".repeat(4090)}\n\n`);
  let accepted = 0;
  while (body.write(piece)) {
    accepted++;
    assert.ok(accepted < 1000, "never closed");
    t.mock.timers.tick(5);
  }
  assert.ok(accepted >= 15 && accepted <= 17, `closed after ${accepted} writes past the backlog`);

  // A reader that keeps up and is behind only when the turn ends gets the end, not an error.
  const ending = new PushBody(64 << 10);
  for (let n = 0; n < 14; n++) {
    t.mock.timers.tick(5);
    assert.ok(ending.write(piece));
  }
  // Held (within the coalescing window), then sent with the end: past the bound only then.
  assert.ok(ending.write(encode(`data: ${"y".repeat(12 << 10)}\n\n`)));
  assert.ok(ending.write(encode("data: [DONE]\n\n")));
  ending.close();
  const reader = ending.stream.getReader();
  let tail = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    tail = text(value);
  }
  assert.ok(tail.endsWith("data: [DONE]\n\n"), tail.slice(-80));
});

test("a reader that cancels is gone at once, and writes after it are refused", async () => {
  const body = new PushBody(1 << 20);
  body.write(encode("data: start\n\n"));
  await body.stream.cancel();
  assert.equal(body.gone, true);
  assert.equal(body.write(encode("data: more\n\n")), false);
  body.close(); // harmless after a cancel
});
