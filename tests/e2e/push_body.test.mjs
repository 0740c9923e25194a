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
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test("a burst of writes comes out as one chunk; a write after a quiet spell comes out alone", async () => {
  const body = new PushBody(1 << 20);
  const reader = body.stream.getReader();
  assert.equal(body.write(encode("data: start\n\n")), true);
  // Within the window of the first: held, then sent together.
  for (let i = 0; i < 5; i++) body.write(encode(`data: ${i}\n\n`));
  const first = await reader.read();
  assert.equal(text(first.value), "data: start\n\n");
  const burst = await reader.read();
  assert.equal(text(burst.value), "data: 0\n\ndata: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\n");
  await sleep(10);
  body.write(encode("data: later\n\n"));
  const later = await reader.read();
  assert.equal(text(later.value), "data: later\n\n");
  body.write(encode("data: [DONE]\n\n"));
  body.close();
  // What was held when the body closed is sent first.
  assert.equal(text((await reader.read()).value), "data: [DONE]\n\n");
  assert.equal((await reader.read()).done, true);
});

test("a reader that leaves more than its bound unread is closed; what it had stays readable", async () => {
  const body = new PushBody(64 << 10);
  const piece = encode(`data: ${"x".repeat(4090)}\n\n`);
  let accepted = 0;
  while (body.write(piece)) {
    accepted++;
    assert.ok(accepted < 1000, "never closed");
    await sleep(5); // a model's pace: each write is enqueued at once
  }
  assert.ok(accepted >= 15 && accepted <= 17, `closed after ${accepted} writes of 4 KB against a 64 KB bound`);
  assert.equal(body.gone, true);
  assert.equal(body.write(piece), false, "it takes nothing more");
  const reader = body.stream.getReader();
  let read = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    read += value.length;
  }
  assert.equal(read, (accepted + 1) * piece.length, "the stream ends after what it held");
});

test("a reader that cancels is gone at once, and writes after it are refused", async () => {
  const body = new PushBody(1 << 20);
  body.write(encode("data: start\n\n"));
  await body.stream.cancel();
  assert.equal(body.gone, true);
  assert.equal(body.write(encode("data: more\n\n")), false);
  body.close(); // harmless after a cancel
});
