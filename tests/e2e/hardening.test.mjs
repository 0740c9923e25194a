// Hostile input and misbehaving providers through the real Worker: oversized bodies refused
// while they stream in, stalled providers timed out, a full queue refused, a broken
// configuration shown only to callers who authenticate, and /v1/chat ids scoped to their owner.

import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import http from "node:http";
import { test } from "node:test";
import { api, freshPersistDir, readUiStream, setup, startWorker } from "./harness.mjs";

// One more Worker, with a broken configuration, is started by its test below.
const { anthropic, worker, create } = setup({ vars: { PROVIDER_IDLE_TIMEOUT_MS: "1500", API_KEYS: "bob:sk-bob" } });

const conversation = () => create();

/** Posts a body in 64 KiB pieces, 10 ms apart, without ending it; resolves with the status
 * the Worker answers with (or `reset` if the connection was closed with no answer after some of
 * the body had been written) and how many bytes had been written by then. */
function postEndlessly(path, { headers = {}, prefix = '{"message": "' } = {}) {
  return new Promise((resolve, reject) => {
    const url = new URL(path, worker.url);
    const req = http.request(url, { method: "POST", headers: { "content-type": "application/json", ...headers } });
    let written = 0;
    let answered = false;
    // The status is enough: under `wrangler dev` the answer's body waits for the request's end.
    req.on("response", (res) => {
      answered = true;
      req.destroy();
      resolve({ status: res.statusCode, written });
    });
    // Under `wrangler dev`, its proxy sometimes closes the connection on a refusal that comes
    // after tens of MiB, before the answer reaches the client (ECONNRESET). The caller then reads
    // the Worker's own log for the refusal.
    req.on("error", (e) => {
      if (answered) return;
      answered = true;
      if (e.code === "ECONNRESET" && written > 0) resolve({ status: "reset", written });
      else reject(e);
    });
    const piece = Buffer.alloc(64 << 10, "a");
    req.write(prefix);
    const pump = () => {
      // Up to 40 MiB, then the body stays open: the answer must not wait for its end.
      if (answered || written >= 40 << 20) return;
      written += piece.length;
      req.write(piece, () => setTimeout(pump, 10));
    };
    pump();
  });
}

test("a conversation's system prompt, title and metadata are held to their limits, with a 413 naming the field", async () => {
  for (const [body, field] of [
    [{ system: "é".repeat(32 * 1024 + 1) }, /`system` is 32769 characters; the limit is 32768 characters/],
    [{ title: "é".repeat(201) }, /`title` is 201 characters; the limit is 200 characters/],
    [{ metadata: { blob: "m".repeat(16 * 1024) } }, /`metadata` is \d+ bytes as JSON; the limit is 16384 bytes/],
  ]) {
    const response = await api(worker.url, "POST", "/v1/conversations", body);
    assert.equal(response.status, 413);
    const { error } = await response.json();
    assert.equal(error.code, "payload_too_large");
    assert.match(error.message, field);
  }
  const { conversations } = await (await api(worker.url, "GET", "/v1/conversations?limit=100")).json();
  assert.ok(!conversations.some((c) => c.title?.startsWith("éé")), "nothing was stored");
  const fits = await api(worker.url, "POST", "/v1/conversations", { system: "s".repeat(32 * 1024), title: "é".repeat(200), metadata: { a: 1 } });
  assert.equal(fits.status, 201);
});

test("a body past its limit is refused while it streams in, not after it ends", async () => {
  // 1 MiB for most bodies.
  // The client gets the 413 unless `wrangler dev`'s proxy dropped the connection first (it does
  // so now and then at 1 MiB too); the Worker's log line says it refused either way.
  const small = await postEndlessly("/v1/conversations");
  assert.ok(small.status === 413 || small.status === "reset", `answered ${small.status}`);
  assert.ok(small.written < 8 << 20, `answered after ${small.written} bytes`);
  const line = await worker.logLine((l) => l.code === "payload_too_large" && /the body is/.test(l.detail));
  assert.match(line.detail, /the body is over 1048576 bytes/);
  // 32 MiB for a message, whose files come in it base64 (read by the same code as above; a
  // refusal after 32 MiB streamed in is, under `wrangler dev`, sometimes its proxy's 500). A
  // declared length past the limit is refused by its header.
  const id = await conversation();
  const r = await fetch(`${worker.url}/v1/conversations/${id}/messages`, { method: "POST", body: JSON.stringify({ message: "x".repeat(33 << 20) }) });
  assert.equal(r.status, 413);
  assert.match((await r.json()).error.message, /the body is 34603022 bytes; the limit is 33554432 bytes/);
});

test("/v1/chat, whose body carries the whole chat, takes up to 32 MiB and refuses more by its declared length", async () => {
  const r = await fetch(`${worker.url}/v1/chat`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ id: "big", messages: [{ role: "user", parts: [{ type: "text", text: "x".repeat(32 << 20) }] }] }) });
  assert.equal(r.status, 413);
  assert.match((await r.json()).error.message, /the body is 33554509 bytes; the limit is 33554432 bytes/);
  // Refused while the body streams in, once past the limit: the Worker logs the refusal, and the
  // client gets the 413 unless `wrangler dev`'s proxy dropped the connection first.
  // The endless text is a message's, where the body may grow to 32 MiB (elsewhere, 1 MiB).
  const prefix = '{"id": "endless", "messages": [{"role": "user", "parts": [{"type": "text", "text": "';
  const { status, written } = await postEndlessly("/v1/chat", { prefix });
  assert.ok(written + prefix.length > 32 << 20, `answered after ${written} bytes`);
  assert.ok(status === 413 || status === "reset", `answered ${status}`);
  assert.ok(written < 40 << 20, `answered after ${written} bytes`);
  // Throws when the Worker logged no such refusal.
  await worker.logLine((l) => l.code === "payload_too_large" && /the body is over 33554432 bytes/.test(l.detail));
});

test("a provider that stalls mid-answer ends the turn with a timeout; one that stalls before answering is retried", async () => {
  const id = await conversation();
  anthropic.script({ text: "Half an answer that never ends", stallAfter: 4 });
  const started = Date.now();
  const { chunks } = await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "go" }));
  assert.ok(Date.now() - started < 15_000, "the stall is noticed after PROVIDER_IDLE_TIMEOUT_MS, not the turn deadline");
  assert.match(chunks.find((c) => c.type === "error").errorText, /^anthropic did not answer in time \(request [0-9a-f]{32}\)$/);
  const history = (await (await api(worker.url, "GET", `/v1/conversations/${id}/messages`)).json()).messages;
  assert.equal(history.at(-1).stop_reason, "error");
  assert.equal(history.at(-1).content[0].text, "Half a");

  const before = anthropic.requests.length;
  anthropic.script({ text: "never", stallAfter: 0 }, { text: "Second try answers." });
  const retried = await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "again" }));
  assert.equal(retried.chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join(""), "Second try answers.");
  assert.equal(anthropic.requests.length - before, 2);
});

test("a provider that answers slowly but never falls silent for PROVIDER_IDLE_TIMEOUT_MS is not timed out", async () => {
  const id = await conversation();
  // An event every 300 ms, for longer than the 1.5 s idle timeout in all.
  anthropic.script({ text: "Slow, but never silent.", writes: "event", burst: 1, gapMs: 300 });
  const started = Date.now();
  const { chunks } = await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "take your time" }));
  assert.ok(Date.now() - started > 1_500, "the answer took longer than the idle timeout");
  assert.equal(chunks.find((c) => c.type === "error"), undefined);
  assert.equal(chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join(""), "Slow, but never silent.");
});

test("a conversation keeps at most 50 messages waiting for its turn; the next is a 429", async () => {
  const id = await conversation();
  anthropic.script({ text: "a slow answer, one piece at a time", gapMs: 40 });
  const running = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "start" });
  const reading = readUiStream(running);
  for (let i = 0; i < 50; i++) {
    const r = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: `queued ${i}`, delivery: "followup" });
    assert.equal(r.status, 202, `message ${i}`);
  }
  const full = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "one too many" });
  assert.equal(full.status, 429);
  assert.ok(Number(full.headers.get("retry-after")) > 0);
  assert.match((await full.json()).error.message, /50 messages waiting/);
  await api(worker.url, "POST", `/v1/conversations/${id}/cancel`);
  await reading;
});

test("a broken configuration is reported only after authentication, without its value", async () => {
  const secret = "hardening-secret";
  const broken = await startWorker({
    persistDir: freshPersistDir(),
    vars: { ALLOW_ANONYMOUS: "false", JWT_SECRET: secret, MAX_LLM_CALLS: "lots-of-calls" },
  });
  try {
    const anonymous = await api(broken.url, "GET", "/v1/models");
    assert.equal(anonymous.status, 401);
    const b64 = (s) => Buffer.from(s).toString("base64url");
    const body = `${b64(JSON.stringify({ alg: "HS256" }))}.${b64(JSON.stringify({ sub: "op", exp: Math.floor(Date.now() / 1000) + 600 }))}`;
    const token = `${body}.${createHmac("sha256", secret).update(body).digest("base64url")}`;
    const authed = await api(broken.url, "GET", "/v1/models", undefined, { authorization: `Bearer ${token}` });
    assert.equal(authed.status, 500);
    const { error } = await authed.json();
    assert.equal(error.code, "configuration_error");
    assert.match(error.message, /MAX_LLM_CALLS/);
    assert.match(error.message, new RegExp(authed.headers.get("x-request-id")));
    assert.doesNotMatch(error.message, /lots-of-calls/);
  } finally {
    await broken.stop();
  }
});

test("a /v1/chat id is scoped to its owner: another user's id is a fresh conversation, never theirs", async () => {
  const bob = { authorization: "Bearer sk-bob" };
  const chat = (text, headers) => api(worker.url, "POST", "/v1/chat", { id: "shared-1", messages: [{ id: "u", role: "user", parts: [{ type: "text", text }] }] }, headers);
  const said = (messages) => messages.filter((m) => m.kind === "user").map((m) => m.content[0].text);
  anthropic.script({ text: "Hello, first user." }, { text: "Hello, Bob." });
  await readUiStream(await chat("I came first"));
  // The chat's conversation is stored with the turn (no read before it), titled by its message.
  const made = await (await api(worker.url, "GET", "/v1/conversations/shared-1")).json();
  assert.equal(made.title, "I came first");
  assert.ok((await (await api(worker.url, "GET", "/v1/conversations")).json()).conversations.some((c) => c.id === made.id));
  const second = await chat("I am Bob", bob);
  assert.equal(second.status, 200, "the id taken by another user is not refused");
  await readUiStream(second);
  // Each reads their own conversation under the same id; neither sees the other's.
  const mine = (await (await api(worker.url, "GET", "/v1/conversations/shared-1/messages")).json()).messages;
  const bobs = (await (await api(worker.url, "GET", "/v1/conversations/shared-1/messages", undefined, bob)).json()).messages;
  assert.deepEqual(said(mine), ["I came first"]);
  assert.deepEqual(said(bobs), ["I am Bob"]);
  assert.equal((await api(worker.url, "GET", "/v1/chat/shared-1/stream", undefined, bob)).status, 204);
  // A conversation Bob created is used as it is when his chat names it.
  const { id } = await (await api(worker.url, "POST", "/v1/conversations", {}, bob)).json();
  anthropic.script({ text: "Same conversation." });
  await readUiStream(await api(worker.url, "POST", "/v1/chat", { id, messages: [{ id: "u2", role: "user", parts: [{ type: "text", text: "in my own" }] }] }, bob));
  const own = (await (await api(worker.url, "GET", `/v1/conversations/${id}/messages`, undefined, bob)).json()).messages;
  assert.deepEqual(said(own), ["in my own"]);
  const listed = (await (await api(worker.url, "GET", "/v1/conversations", undefined, bob)).json()).conversations;
  assert.equal(listed.length, 2);
  // Nobody else can reach Bob's conversation by its id.
  assert.equal((await api(worker.url, "GET", `/v1/conversations/${id}/messages`)).status, 404);
  // In another user's chat, Bob's id names that user's own new conversation (the Worker tries
  // Bob's object first, by the id's shape, and is sent on).
  anthropic.script({ text: "Yours, not Bob's." }, { text: "Still yours." });
  await readUiStream(await api(worker.url, "POST", "/v1/chat", { id, messages: [{ id: "u3", role: "user", parts: [{ type: "text", text: "not Bob's" }] }] }));
  assert.deepEqual(said((await (await api(worker.url, "GET", `/v1/conversations/${id}/messages`, undefined, bob)).json()).messages), ["in my own"]);
  assert.deepEqual(said((await (await api(worker.url, "GET", `/v1/conversations/${id}/messages`)).json()).messages), ["not Bob's"]);
  // A later message of a chat continues the same conversation.
  await readUiStream(await chat("and again"));
  const again = (await (await api(worker.url, "GET", "/v1/conversations/shared-1/messages")).json()).messages;
  assert.deepEqual(said(again), ["I came first", "and again"]);
});

test("tool calls of an answer that failed mid-stream wait for nothing: no pause, no answers taken", async () => {
  const id = await conversation();
  anthropic.script({ text: "Let me look", tools: [{ id: "toolu_half", name: "current_time", input: {} }], stallAfter: 8 });
  const { chunks } = await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "time?" }));
  assert.deepEqual(chunks.at(-1), { type: "finish", finishReason: "error" });
  const { status } = await (await api(worker.url, "GET", `/v1/conversations/${id}`)).json();
  assert.equal(status, "idle");
  const answer = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { tool_results: [{ tool_call_id: "toolu_half", output: "noon" }] });
  assert.equal(answer.status, 409);
  // The next message is answered normally; the failed call is never sent to the model.
  anthropic.script({ text: "It is noon." });
  await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "and now?" }));
  const sent = anthropic.requests.at(-1).body.messages;
  assert.ok(!JSON.stringify(sent).includes("toolu_half"), JSON.stringify(sent));
});

test("the shared anonymous user (ALLOW_ANONYMOUS) may neither export nor erase: it is every visitor's", async () => {
  const mine = await api(worker.url, "POST", "/v1/conversations", { title: "a visitor's" });
  assert.equal(mine.status, 201);
  for (const [method, path] of [["GET", "/v1/me/export"], ["DELETE", "/v1/me"]]) {
    const r = await api(worker.url, method, path);
    assert.equal(r.status, 403, `${method} ${path}`);
    const { error } = await r.json();
    assert.equal(error.code, "forbidden");
    assert.match(error.message, /ALLOW_ANONYMOUS/);
  }
  // Nothing was erased: the visitor's conversation is still there.
  assert.equal((await api(worker.url, "GET", `/v1/conversations/${(await mine.json()).id}`)).status, 200);
  // A caller with a token still exports their own.
  assert.equal((await api(worker.url, "GET", "/v1/me/export", undefined, { authorization: "Bearer sk-bob" })).status, 200);
});
