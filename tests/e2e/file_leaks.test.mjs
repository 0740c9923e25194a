// No file is left in R2 that nothing names and nothing deletes: every stored file is recorded
// with its owner before its bytes are written, and removed on every refusal (a new `/v1/chat`
// past the conversation limit, streamed or not), with a deleted conversation's queue, by the
// scheduled sweep after an upload cut off by a crash, and never stored at all for a keyed
// repeat; a user's files are held to MAX_FILE_BYTES_PER_USER.

import assert from "node:assert/strict";
import http from "node:http";
import { after, before, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { PNG, anthropicLoopback, anthropicVars, api, d1Query, freshPersistDir, r2Keys, readUiStream, startWorker } from "./harness.mjs";

const KEYS = { alice: "sk-leaks-alice", bob: "sk-leaks-bob", carol: "sk-leaks-carol" };
const as = (user) => ({ authorization: `Bearer ${KEYS[user]}` });
let anthropic, worker, persistDir, files, vars;
let counted = 0;

/** A one-page PDF of 10 MB (a comment pads it), different for each name. */
function bigPdf(name) {
  const head = Buffer.from(`%PDF-1.4\n1 0 obj <</Type /Catalog /Pages 2 0 R>> endobj\n2 0 obj <</Type /Pages /Kids [3 0 R] /Count 1>> endobj\n3 0 obj <</Type /Page /Parent 2 0 R /MediaBox [0 0 200 200]>> endobj\n% ${name}\n%`);
  const tail = Buffer.from("\ntrailer <</Root 1 0 R>>\n%%EOF\n");
  return Buffer.concat([head, Buffer.alloc(10_000_000 - head.length - tail.length, 0x61), tail]);
}

before(async () => {
  anthropic = await anthropicLoopback();
  // A web server holding a file a message may name by URL: one counts its fetches, one never
  // answers (an upload that hangs until the runtime dies).
  files = http.createServer((req, res) => {
    if (req.url === "/counted.png") {
      counted += 1;
      res.writeHead(200, { "content-type": "image/png" }).end(PNG);
    } else if (/^\/big-\d\.pdf$/.test(req.url)) {
      res.writeHead(200, { "content-type": "application/pdf" }).end(bigPdf(req.url));
    } else if (req.url === "/hang.png") {
      req.socket.setTimeout(0);
    } else res.writeHead(404).end();
  });
  await new Promise((r) => files.listen(0, "127.0.0.1", r));
  persistDir = freshPersistDir();
  vars = {
    ...anthropicVars(anthropic),
    ALLOW_ANONYMOUS: "false", API_KEYS: Object.entries(KEYS).map(([u, k]) => `${u}:${k}`).join(","),
    ALLOW_PRIVATE_TOOL_HOSTS: "true",
    MAX_CONVERSATIONS_PER_USER: "3",
    // Three 10 MB PDFs fit, a fourth does not.
    MAX_FILE_BYTES_PER_USER: "35000000",
  };
  worker = await startWorker({ persistDir, vars, args: ["--test-scheduled"] });
});

after(async () => {
  await worker?.stop();
  await anthropic?.close();
  files?.close();
});

const png = (name = "dot.png") => ({ type: "file", data: PNG.toString("base64"), filename: name });
const chatPart = { type: "file", mediaType: "image/png", url: `data:image/png;base64,${PNG.toString("base64")}`, filename: "dot.png" };
/** Files in R2 no stored message names. */
async function orphans() {
  const named = new Set((await d1Query(persistDir, "SELECT id FROM files")).map((r) => r.id));
  return (await r2Keys(persistDir)).filter((id) => !named.has(id));
}
async function until(what, check, ms = 20_000) {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(200);
  }
}
const sweep = () => fetch(`${worker.url}/__scheduled?cron=${encodeURIComponent("17 * * * *")}`);

test("a new /v1/chat refused at the conversation limit keeps none of its files, streamed or not", async () => {
  for (let n = 0; n < 3; n++) assert.equal((await api(worker.url, "POST", "/v1/conversations", {}, as("bob"))).status, 201);
  const chat = (id, stream) => api(worker.url, "POST", "/v1/chat", { id, stream, messages: [{ id: "m1", role: "user", parts: [{ type: "text", text: "Look." }, chatPart] }] }, as("bob"));
  const calls = anthropic.requests.length;
  const { chunks } = await readUiStream(await chat("one-too-many", true));
  assert.match(chunks.find((c) => c.type === "error").errorText, /MAX_CONVERSATIONS_PER_USER|conversations/);
  const unstreamed = await chat("one-more", false);
  assert.equal(unstreamed.status, 429);
  assert.equal(anthropic.requests.length, calls, "no model was called");
  await until("the refused chats' files to be removed", async () => (await orphans()).length === 0);
  assert.deepEqual(await d1Query(persistDir, "SELECT id FROM stored_files WHERE owner = 'key:bob'"), []);
});

test("a queued message's files go with its conversation when it is deleted", async () => {
  const { id } = await (await api(worker.url, "POST", "/v1/conversations", {}, as("alice"))).json();
  const before = anthropic.requests.length;
  anthropic.script({ text: "A slow answer that is still streaming when the conversation goes. ".repeat(20), gapMs: 20 });
  const first = api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Talk." }, as("alice"));
  await until("the first call", async () => anthropic.requests.length > before);
  const queued = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: [{ type: "text", text: "And this?" }, png()] }, as("alice"));
  assert.equal(queued.status, 202);
  assert.equal((await orphans()).length, 1, "the queued message's file waits in R2");
  assert.equal((await api(worker.url, "DELETE", `/v1/conversations/${id}`, undefined, as("alice"))).status, 204);
  await (await first).text().catch(() => "");
  assert.deepEqual(await orphans(), []);
  assert.deepEqual(await d1Query(persistDir, `SELECT id FROM stored_files WHERE conversation_id = '${id}'`), []);
});

test("a keyed repeat of a message with a file stores nothing, not even fetching it again", async () => {
  const { id } = await (await api(worker.url, "POST", "/v1/conversations", {}, as("alice"))).json();
  anthropic.script({ text: "A dot." });
  const { port } = files.address();
  const body = { message: [{ type: "text", text: "What is this?" }, { type: "file", url: `http://127.0.0.1:${port}/counted.png` }] };
  const keyed = { ...as("alice"), "idempotency-key": "leaks-repeat-1" };
  await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, body, keyed));
  const [fetched, keys] = [counted, (await r2Keys(persistDir)).sort()];
  assert.equal(fetched, 1);
  const again = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, body, keyed);
  assert.equal(again.status, 200);
  assert.equal((await again.json()).repeated, true);
  assert.equal(counted, fetched, "the repeat fetched nothing");
  assert.deepEqual((await r2Keys(persistDir)).sort(), keys, "and stored nothing");
  // The key with another body is refused, before anything is fetched or stored.
  const other = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: [{ type: "text", text: "Another." }, body.message[1]] }, keyed);
  assert.equal(other.status, 422);
  assert.equal((await other.json()).error.code, "idempotency_key_reused");
  assert.equal(counted, fetched);
});

test("three 10 MB PDFs in one message: the turn finishes, one request inlines what fits; a user's files are held to MAX_FILE_BYTES_PER_USER", async () => {
  const { id } = await (await api(worker.url, "POST", "/v1/conversations", {}, as("carol"))).json();
  const { port } = files.address();
  const pdf = (n) => ({ type: "file", url: `http://127.0.0.1:${port}/big-${n}.pdf`, filename: `big-${n}.pdf` });
  const calls = anthropic.requests.length;
  anthropic.script({ text: "Read one of them." });
  const first = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: [{ type: "text", text: "Read these." }, pdf(1), pdf(2), pdf(3)] }, as("carol"));
  assert.equal(first.status, 200);
  const { chunks } = await readUiStream(first);
  assert.equal(chunks.at(-1).type, "finish");
  assert.ok(!chunks.some((c) => c.type === "error"), JSON.stringify(chunks.filter((c) => c.type === "error")));
  assert.equal(anthropic.requests.length, calls + 1, "one call: nothing was recovered or retried");
  const blocks = anthropic.requests.at(-1).body.messages[0].content;
  assert.equal(blocks.filter((b) => b.type === "document").length, 1, "the newest PDF is inlined");
  assert.equal(blocks.filter((b) => b.type === "text" && /too large together/.test(b.text)).length, 2, "the older two are notes");

  const more = () => api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: [{ type: "text", text: "And this." }, pdf(4)] }, as("carol"));
  const refused = await more();
  assert.equal(refused.status, 413);
  const { error } = await refused.json();
  assert.match(error.message, /your files take 30000000 of the 35000000 bytes one user may keep \(MAX_FILE_BYTES_PER_USER\)/);
  assert.equal(anthropic.requests.length, calls + 1, "no model was called");
  assert.deepEqual(await orphans(), [], "nothing of the refused message was kept");
  // Deleting the conversation frees its files' bytes.
  assert.equal((await api(worker.url, "DELETE", `/v1/conversations/${id}`, undefined, as("carol"))).status, 204);
  const { id: next } = await (await api(worker.url, "POST", "/v1/conversations", {}, as("carol"))).json();
  anthropic.script({ text: "Room again." });
  const again = await api(worker.url, "POST", `/v1/conversations/${next}/messages`, { message: [{ type: "text", text: "And this." }, pdf(4)] }, as("carol"));
  assert.equal(again.status, 200);
  await readUiStream(again);
});

test("an upload cut off by a crash is swept an hour later by the scheduled run, and nothing else is", async () => {
  const { id } = await (await api(worker.url, "POST", "/v1/conversations", {}, as("alice"))).json();
  const { port } = files.address();
  const before = new Set(await r2Keys(persistDir));
  // The first file is stored; the second's URL never answers; the runtime dies meanwhile.
  const sent = api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: [png("first.png"), { type: "file", url: `http://127.0.0.1:${port}/hang.png` }] }, as("alice")).catch(() => null);
  await until("the first file to be stored", async () => (await r2Keys(persistDir)).some((k) => !before.has(k)));
  await worker.kill();
  await sent;
  worker = await startWorker({ persistDir, vars, args: ["--test-scheduled"] });
  const [cut] = (await r2Keys(persistDir)).filter((k) => !before.has(k));
  assert.deepEqual(await orphans(), [cut]);
  // Within the hour it stays (its request might still be running).
  assert.equal((await sweep()).status, 200);
  await sleep(1000);
  assert.deepEqual(await orphans(), [cut]);
  await d1Query(persistDir, `UPDATE stored_files SET created_at = created_at - 7200000 WHERE id = '${cut}'`);
  assert.equal((await sweep()).status, 200);
  await until("the sweep", async () => (await orphans()).length === 0);
  assert.deepEqual(await d1Query(persistDir, `SELECT id FROM stored_files WHERE id = '${cut}'`), []);
  const line = await worker.logLine((l) => l.event === "file_sweep");
  assert.equal(line.files_removed, 1);
  // Files messages name are untouched.
  assert.deepEqual((await r2Keys(persistDir)).filter((k) => before.has(k)).sort(), [...before].sort());
});

test("oversized bodies at once are refused as they come, while another user's turn streams on untouched", async () => {
  const { id: mine } = await (await api(worker.url, "POST", "/v1/conversations", {}, as("alice"))).json();
  anthropic.script({ text: "Steady as she goes. ".repeat(30), gapMs: 10 });
  const streaming = api(worker.url, "POST", `/v1/conversations/${mine}/messages`, { message: "Talk a while." }, as("alice")).then(readUiStream);
  const post = (path, body, headers = {}) => fetch(`${worker.url}${path}`, { method: "POST", headers: { "content-type": "application/json", ...as("carol"), ...headers }, body, duplex: "half" });
  // A body past the deployment's message limit, streamed with no length: refused as it comes.
  const endless = new ReadableStream({
    start(controller) {
      controller.enqueue(new TextEncoder().encode('{"message": "'));
      const chunk = new Uint8Array(1 << 20).fill(97);
      for (let n = 0; n < 40; n++) controller.enqueue(chunk);
      controller.close();
    },
  });
  const { id: carols } = await (await api(worker.url, "POST", "/v1/conversations", {}, as("carol"))).json();
  const big = Buffer.alloc(14 << 20, 1).toString("base64");
  // The streamed one is refused while the client still sends: what the client sees of that is
  // the dev server's (a reset, or its own 500), so the Worker's log says how it was answered.
  const cut = post(`/v1/conversations/${carols}/messages`, endless).then((r) => r.text()).catch(() => "");
  const answers = await Promise.all([
    // One file past MAX_FILE_BYTES, base64: refused by its length, never decoded.
    post(`/v1/conversations/${carols}/messages`, JSON.stringify({ message: [{ type: "file", data: big, filename: "big.bin" }] })),
    // A `data:` URL not in base64, past the limit: decoded no further than the limit.
    post(`/v1/conversations/${carols}/messages`, JSON.stringify({ message: [{ type: "file", url: `data:,${"a".repeat(11 << 20)}` }] })),
    // A /v1/chat whose last message is past what its files may need.
    post("/v1/chat", JSON.stringify({ id: "oversized", messages: [{ id: "m", role: "user", parts: [{ type: "file", mediaType: "image/png", url: `data:image/png;base64,${"A".repeat(40 << 20)}` }] }] })),
  ]);
  for (const a of answers) {
    assert.equal(a.status, 413, await a.text());
  }
  await cut;
  const refused = await worker.logLine((l) => l.event === "error" && l.status === 413 && /the body is over/.test(l.detail ?? ""));
  assert.match(refused.path, new RegExp(carols));
  const { chunks } = await streaming;
  assert.equal(chunks.at(-1).type, "finish", "the other turn finished");
  assert.ok(!chunks.some((c) => c.type === "error"));
});
