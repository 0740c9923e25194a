// Files in a conversation: an image sent by a stock `useChat` client is checked by its bytes,
// kept in R2 (the local bucket `wrangler dev` keeps), referenced in history, sent to the model in
// its provider's form (Anthropic's image block, OpenAI's image_url part, a PDF as Anthropic's
// document block), and served back from the files route to its owner only; refused files
// (a declared PNG that is not one, one too large, a model that cannot see images) leave
// nothing behind, nor does a repeated send's upload, and a conversation whose turn moves to a
// text-only model tells it in a note.

import assert from "node:assert/strict";
import http from "node:http";
import { after, before, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { AbstractChat, DefaultChatTransport } from "ai";
import { PNG, api, d1Query, r2Keys, readUiStream, setup } from "./harness.mjs";

/** A minimal one-page PDF. */
const PDF = Buffer.from("%PDF-1.4\n1 0 obj <</Type /Catalog /Pages 2 0 R>> endobj\n2 0 obj <</Type /Pages /Kids [3 0 R] /Count 1>> endobj\n3 0 obj <</Type /Page /Parent 2 0 R /MediaBox [0 0 200 200]>> endobj\ntrailer <</Root 1 0 R>>\n%%EOF\n");
const KEYS = { alice: "sk-files-alice", bob: "sk-files-bob" };
const as = (user) => ({ authorization: `Bearer ${KEYS[user]}` });

let files;

before(async () => {
  // A web server holding a file a message may name by URL (a redirect first, as CDNs do).
  files = http.createServer((req, res) => {
    if (req.url === "/moved.png") res.writeHead(302, { location: "/dot.png" }).end();
    else if (req.url === "/dot.png") res.writeHead(200, { "content-type": "image/png" }).end(PNG);
    else res.writeHead(404).end();
  });
  await new Promise((r) => files.listen(0, "127.0.0.1", r));
});

const { anthropic, openai, worker, persistDir } = setup({
  providers: ["anthropic", "openai"],
  vars: {
    OPENAI_API_KEY: "sk-openai-loopback",
    DEFAULT_MODEL: "anthropic:claude-sonnet-4-5", FALLBACK_MODELS: "openai:text-only",
    ALLOW_ANONYMOUS: "false", API_KEYS: `alice:${KEYS.alice},bob:${KEYS.bob}`,
    // The file server is on loopback: only with private hosts allowed may a URL reach it.
    ALLOW_PRIVATE_TOOL_HOSTS: "true",
    MAX_FILE_BYTES: "4096",
    // A self-hosted model the registry says has no vision.
    MODELS: JSON.stringify([{ id: "openai:text-only", context_window: 8192, max_output_tokens: 1024, capabilities: { tools: true, vision: false } }]),
  },
});

after(() => {
  files?.close();
});

class NodeChat extends AbstractChat {
  constructor(init) {
    const state = {
      messages: [], status: "ready", error: undefined,
      pushMessage: (m) => { state.messages = state.messages.concat(m); },
      popMessage: () => { state.messages = state.messages.slice(0, -1); },
      replaceMessage: (i, m) => { state.messages = [...state.messages.slice(0, i), m, ...state.messages.slice(i + 1)]; },
      snapshot: (v) => structuredClone(v),
    };
    super({ ...init, state });
  }
}

async function settled(chat) {
  const deadline = Date.now() + 20_000;
  while (chat.status !== "ready" && chat.status !== "error") {
    if (Date.now() > deadline) throw new Error(`chat still ${chat.status}`);
    await sleep(50);
  }
}

const userBlocks = (body) => body.messages.filter((m) => m.role === "user").flatMap((m) => (Array.isArray(m.content) ? m.content : [{ type: "text", text: m.content }]));
const history = async (id, user) => (await (await api(worker.url, "GET", `/v1/conversations/${id}/messages`, undefined, as(user))).json()).messages;
const fileRows = async (conversation) => d1Query(persistDir, `SELECT id, media_type, size, name FROM files WHERE conversation_id = '${conversation}'`);

test("an image sent by a stock useChat client reaches Anthropic as an image block and is served to its owner only", async () => {
  const errors = [];
  const chat = new NodeChat({
    id: "files-chat",
    transport: new DefaultChatTransport({ api: `${worker.url}/v1/chat`, headers: as("alice") }),
    onError: (e) => errors.push(e),
  });
  anthropic.script({ text: "A red dot." });
  const before = anthropic.requests.length;
  await chat.sendMessage({
    text: "What is this?",
    files: [{ type: "file", mediaType: "image/png", filename: "dot.png", url: `data:image/png;base64,${PNG.toString("base64")}` }],
  });
  await settled(chat);
  assert.deepEqual(errors, []);
  assert.equal(chat.messages.at(-1).parts.filter((p) => p.type === "text").map((p) => p.text).join(""), "A red dot.");

  // The provider got the bytes, in Anthropic's form, in the order useChat sends (files first).
  const sent = anthropic.requests.slice(before).at(-1).body;
  assert.deepEqual(userBlocks(sent), [
    { type: "image", source: { type: "base64", media_type: "image/png", data: PNG.toString("base64") } },
    { type: "text", text: "What is this?" },
  ]);

  // History keeps a reference, typed from the bytes, with the image's size; never the bytes.
  const conversations = (await (await api(worker.url, "GET", "/v1/conversations", undefined, as("alice"))).json()).conversations;
  const id = conversations[0].id;
  const [user] = await history(id, "alice");
  const file = user.content[0];
  assert.equal(file.type, "file");
  assert.deepEqual({ ...file, id: undefined }, { type: "file", id: undefined, media_type: "image/png", size: PNG.length, name: "dot.png", width: 1, height: 1 });
  assert.ok(!JSON.stringify(user).includes(PNG.toString("base64")), "the bytes are not in history");
  assert.deepEqual((await fileRows(id)).map((r) => r.id), [file.id]);

  // Served to its owner, with its type and name; a 404 to anyone else.
  const served = await fetch(`${worker.url}/v1/conversations/${id}/files/${file.id}`, { headers: as("alice") });
  assert.equal(served.status, 200);
  assert.equal(served.headers.get("content-type"), "image/png");
  assert.match(served.headers.get("content-disposition"), /^inline; filename="dot.png"/);
  assert.equal(served.headers.get("x-content-type-options"), "nosniff");
  assert.deepEqual(Buffer.from(await served.arrayBuffer()), PNG);
  for (const [user, path] of [["bob", `/v1/conversations/${id}/files/${file.id}`], ["alice", `/v1/conversations/${id}/files/nope`]]) {
    const denied = await fetch(worker.url + path, { headers: as(user) });
    assert.equal(denied.status, 404, `${user} ${path}`);
  }

  // A later turn sends the image again (history holds only its reference): the model still sees it.
  anthropic.script({ text: "Still red." });
  await chat.sendMessage({ text: "And now?" });
  await settled(chat);
  const again = anthropic.requests.at(-1).body;
  assert.equal(userBlocks(again).filter((b) => b.type === "image").length, 1);

  // Deleting the conversation deletes its files.
  assert.equal((await api(worker.url, "DELETE", `/v1/conversations/${id}`, undefined, as("alice"))).status, 204);
  assert.deepEqual(await fileRows(id), []);
  const gone = await fetch(`${worker.url}/v1/conversations/${id}/files/${file.id}`, { headers: as("alice") });
  assert.equal(gone.status, 404);
});

test("an image from a stock useChat client reaches OpenAI as an image_url part; a PDF reaches Anthropic as a document block", async () => {
  // The chat's id is a conversation made on an OpenAI model: `/v1/chat` continues it.
  const made = await api(worker.url, "POST", "/v1/conversations", { model: "openai:gpt-4o" }, as("alice"));
  const { id } = await made.json();
  const errors = [];
  const chat = new NodeChat({ id, transport: new DefaultChatTransport({ api: `${worker.url}/v1/chat`, headers: as("alice") }), onError: (e) => errors.push(e) });
  openai.script({ text: "A pixel." });
  await chat.sendMessage({ text: "Describe.", files: [{ type: "file", mediaType: "image/png", filename: "dot.png", url: `data:image/png;base64,${PNG.toString("base64")}` }] });
  await settled(chat);
  assert.deepEqual(errors, []);
  const sent = openai.requests.at(-1).body;
  assert.deepEqual(sent.messages.at(-1), {
    role: "user",
    content: [{ type: "image_url", image_url: { url: `data:image/png;base64,${PNG.toString("base64")}` } }, { type: "text", text: "Describe." }],
  });

  const pdfChat = await (await api(worker.url, "POST", "/v1/conversations", {}, as("alice"))).json();
  anthropic.script({ text: "One page." });
  const p = await api(worker.url, "POST", `/v1/conversations/${pdfChat.id}/messages`, {
    message: [{ type: "file", media_type: "application/pdf", data: PDF.toString("base64"), filename: "brief.pdf" }, { type: "text", text: "Summarise." }],
  }, as("alice"));
  assert.equal(p.status, 200);
  await readUiStream(p);
  assert.deepEqual(userBlocks(anthropic.requests.at(-1).body)[0], {
    type: "document", source: { type: "base64", media_type: "application/pdf", data: PDF.toString("base64") }, title: "brief.pdf",
  });
  const [user] = await history(pdfChat.id, "alice");
  assert.equal(user.content[0].pages, 1);
});

test("a file named by URL is fetched by the Worker, redirects followed under the host rules", async () => {
  const { id } = await (await api(worker.url, "POST", "/v1/conversations", {}, as("alice"))).json();
  const base = `http://127.0.0.1:${files.address().port}`;
  anthropic.script({ text: "Fetched." });
  const r = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: [{ type: "text", text: "This one." }, { type: "file", url: `${base}/moved.png`, filename: "dot.png" }] }, as("alice"));
  assert.equal(r.status, 200);
  await readUiStream(r);
  assert.equal(userBlocks(anthropic.requests.at(-1).body).find((b) => b.type === "image").source.data, PNG.toString("base64"));
  const missing = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: [{ type: "file", url: `${base}/gone.png` }] }, as("alice"));
  assert.equal(missing.status, 400);
  assert.match((await missing.json()).error.message, /the file in part 1 could not be fetched: its URL answered 404/);
  const ftp = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: [{ type: "file", url: "ftp://example.com/a.png" }] }, as("alice"));
  assert.equal(ftp.status, 400);
});

test("a file that is not what it claims, one too large, or one the model cannot see is refused and nothing is stored", async () => {
  const { id } = await (await api(worker.url, "POST", "/v1/conversations", {}, as("alice"))).json();
  const send = (conversation, parts) => api(worker.url, "POST", `/v1/conversations/${conversation}/messages`, { message: parts }, as("alice"));
  const calls = anthropic.requests.length;

  const fake = await send(id, [{ type: "text", text: "look" }, { type: "file", media_type: "image/png", data: Buffer.from("just text, not a PNG").toString("base64"), filename: "fake.png" }]);
  assert.equal(fake.status, 400);
  assert.match((await fake.json()).error.message, /file `fake.png` is declared `image\/png` but its bytes are text\/plain/);

  const big = await send(id, [{ type: "file", data: Buffer.alloc(5000, 1).toString("base64"), filename: "big.bin" }]);
  assert.equal(big.status, 413);
  assert.match((await big.json()).error.message, /file `big.bin` is \d+ bytes; the limit is 4096 bytes per file \(MAX_FILE_BYTES\)/);

  // A second file refused after a first one was stored: neither stays.
  const second = await send(id, [
    { type: "file", data: PNG.toString("base64"), filename: "ok.png" },
    { type: "file", media_type: "application/pdf", data: PNG.toString("base64"), filename: "not.pdf" },
  ]);
  assert.equal(second.status, 400);

  const textOnly = await (await api(worker.url, "POST", "/v1/conversations", { model: "openai:text-only" }, as("alice"))).json();
  const unseen = await send(textOnly.id, [{ type: "text", text: "see?" }, { type: "file", data: PNG.toString("base64"), filename: "dot.png" }]);
  assert.equal(unseen.status, 400);
  assert.match((await unseen.json()).error.message, /model `openai:text-only` cannot take `dot.png` \(image\/png\): its registry entry has no vision/);

  assert.equal(anthropic.requests.length, calls, "no model was called");
  assert.deepEqual(await history(id, "alice"), []);
  assert.deepEqual(await history(textOnly.id, "alice"), []);
  // Nothing in R2: every object the local bucket holds is named in the files table.
  const named = new Set((await d1Query(persistDir, "SELECT id FROM files")).map((r) => r.id));
  const stored = await storedFiles();
  assert.ok(stored.length >= 2, "the bucket was read: the earlier tests' files are there");
  assert.deepEqual(stored.filter((id) => !named.has(id)), []);
});

test("a text file reaches every model as text, and a turn that falls back to a text-only model gets a note for the image", async () => {
  const { id } = await (await api(worker.url, "POST", "/v1/conversations", {}, as("alice"))).json();
  anthropic.script({ text: "Seen." });
  const first = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, {
    message: [{ type: "text", text: "Read these." }, { type: "file", data: PNG.toString("base64"), filename: "dot.png" }, { type: "file", data: Buffer.from("# Notes\n\nbuy milk").toString("base64"), filename: "notes.md" }],
  }, as("alice"));
  assert.equal(first.status, 200);
  await readUiStream(first);
  const blocks = userBlocks(anthropic.requests.at(-1).body);
  assert.deepEqual(blocks.at(-1), { type: "text", text: '<file name="notes.md" media_type="text/markdown">\n# Notes\n\nbuy milk\n</file>' });

  // Anthropic is overloaded: the turn falls back to the text-only model.
  const overloaded = { status: 529, headers: { "retry-after": "0" }, message: "Overloaded" };
  anthropic.script(overloaded, overloaded, overloaded);
  openai.script({ text: "I cannot see it." });
  const second = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "And the image?" }, as("alice"));
  assert.equal(second.status, 200);
  await readUiStream(second);
  const sent = openai.requests.at(-1).body.messages.find((m) => m.role === "user");
  assert.equal(typeof sent.content, "string");
  assert.match(sent.content, /\[The user attached "dot.png" \(image\/png, 70 bytes\); this model cannot see images, so it is not shown.\]/);
  assert.match(sent.content, /buy milk/);
});

test("a message with a file sent again with its Idempotency-Key keeps one copy: the repeat's upload is removed", async () => {
  const { id } = await (await api(worker.url, "POST", "/v1/conversations", {}, as("alice"))).json();
  const calls = anthropic.requests.length;
  anthropic.script({ text: "A dot." });
  const body = { message: [{ type: "text", text: "What is this?" }, { type: "file", data: PNG.toString("base64"), filename: "dot.png" }] };
  const keyed = { ...as("alice"), "idempotency-key": "files-repeat-1" };
  const first = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, body, keyed);
  assert.equal(first.status, 200);
  await readUiStream(first);
  const before = await storedFiles();
  // The client did not see the answer and sends the same message again: the Worker stores the
  // file before the object recognises the key.
  const again = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, body, keyed);
  assert.equal(again.status, 200);
  assert.equal((await again.json()).repeated, true);
  assert.equal(anthropic.requests.length, calls + 1, "one turn");
  assert.equal((await fileRows(id)).length, 1);
  assert.deepEqual((await storedFiles()).sort(), before.sort(), "the bucket holds what it held before the repeat");
});

/** The ids of the files the local R2 bucket holds. */
function storedFiles() {
  return r2Keys(persistDir);
}
