// `GET /v1/me/export`: everything a user owns as JSON, streamed, in parts that each stay within
// a request's subrequests and a bounded size, chained by `next` / `?after=`. A user with 50
// conversations (some with history, artifact versions and a file) reads it back whole in one
// part; another user's data is not in it. An account of 1,000 conversations and 600 versions of
// a 256 KB artifact (issue 56, item 10) reads back whole over several parts.

import assert from "node:assert/strict";
import { test } from "node:test";
import { PNG, api, readUiStream, setup } from "./harness.mjs";

const KEYS = { alice: "sk-export-alice", bob: "sk-export-bob", carol: "sk-export-carol" };
const as = (user) => ({ authorization: `Bearer ${KEYS[user]}` });
const e2e = setup({
  vars: {
    ALLOW_ANONYMOUS: "false", API_KEYS: Object.entries(KEYS).map(([name, key]) => `${name}:${key}`).join(","),
    // The large account's artifact keeps 600 versions.
    MAX_ARTIFACT_VERSIONS: "600",
  },
});
const { anthropic, worker } = e2e;

const create = (user, title) => e2e.create({ title }, as(user));
/** As setup's `talk`, with the answer's status asserted first. */
async function talk(user, id, message, answer) {
  anthropic.script({ text: answer });
  const r = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message }, as(user));
  assert.equal(r.status, 200);
  await readUiStream(r);
}

test("an export of a user with 50 conversations reads back whole, and holds nothing of anyone else", async () => {
  const ids = [];
  for (let i = 0; i < 50; i++) ids.push(await create("alice", `chat ${i}`));
  await talk("alice", ids[0], "First question.", "First answer.");
  await talk("alice", ids[0], "Second question.", "Second answer.");
  await talk("alice", ids[7], [{ type: "text", text: "Look." }, { type: "file", data: PNG.toString("base64"), filename: "dot.png" }], "A dot.");
  for (const content of ["v1", "v2"]) {
    assert.ok((await api(worker.url, "PUT", `/v1/conversations/${ids[9]}/artifacts/notes`, { title: "Notes", kind: "text", content }, as("alice"))).ok);
  }
  const schedule = await (await api(worker.url, "POST", `/v1/conversations/${ids[3]}/schedules`, { instruction: "Water the plants.", cron: "0 8 * * *" }, as("alice"))).json();
  const bobs = await create("bob", "bob's secret chat");
  await talk("bob", bobs, "Bob's question.", "Bob's answer.");

  const r = await fetch(`${worker.url}/v1/me/export`, { headers: as("alice") });
  assert.equal(r.status, 200);
  assert.equal(r.headers.get("content-type"), "application/json");
  assert.match(r.headers.get("content-disposition"), /^attachment/);
  const text = await r.text();
  const doc = JSON.parse(text);
  assert.equal(doc.user, "key:alice"); // users named by an API key are `key:<name>`
  assert.equal(doc.next, null, "a small account is one part");
  assert.equal(doc.conversations.length, 50);
  assert.deepEqual(new Set(doc.conversations.map((c) => c.id)), new Set(ids));
  assert.ok(!text.includes(bobs) && !text.includes("Bob's"), "nothing of bob's");

  const byId = Object.fromEntries(doc.conversations.map((c) => [c.id, c]));
  // Each conversation's history is what its messages route returns.
  for (const id of [ids[0], ids[7], ids[20]]) {
    const history = (await (await api(worker.url, "GET", `/v1/conversations/${id}/messages`, undefined, as("alice"))).json()).messages;
    assert.deepEqual(byId[id].messages, history, id);
  }
  assert.equal(byId[ids[0]].messages.length, 4);
  assert.equal(byId[ids[0]].title, "chat 0");
  assert.deepEqual(byId[ids[9]].artifacts.map((a) => [a.id, a.version, a.content]), [["notes", 1, "v1"], ["notes", 2, "v2"]]);
  const [file] = byId[ids[7]].files;
  assert.deepEqual([file.media_type, file.size, file.name], ["image/png", PNG.length, "dot.png"]);
  const served = await fetch(worker.url + file.url, { headers: as("alice") });
  assert.deepEqual(Buffer.from(await served.arrayBuffer()), PNG);
  // Schedules, which the conversation's object keeps, as its list gives them.
  assert.deepEqual(byId[ids[3]].schedules, [schedule]);
  assert.deepEqual(byId[ids[0]].schedules, []);
  // Usage: one ledger row per answer, in order.
  assert.deepEqual(doc.usage.map((u) => u.conversation_id), [ids[0], ids[0], ids[7]]);
  assert.ok(doc.usage.every((u) => u.model === "claude-sonnet-4-5" && u.input_tokens > 0));
});

/** Every part of `user`'s export, from the first to the one whose `next` is null: each must be
 * a whole JSON document. */
async function exportParts(user) {
  const parts = [];
  let after = null;
  for (;;) {
    const r = await fetch(`${worker.url}/v1/me/export${after === null ? "" : `?after=${after}`}`, { headers: as(user) });
    assert.equal(r.status, 200);
    const text = await r.text();
    const part = JSON.parse(text);
    parts.push({ part, bytes: Buffer.byteLength(text) });
    assert.ok(parts.length <= 40, "the export never ends");
    if (part.next === null) return parts;
    assert.equal(typeof part.next, "string");
    after = part.next;
  }
}

/** The parts joined as a reader of the documented shape does: an entry marked `incomplete`
 * ends its part, and the next part opens with the same conversation marked `continued`, whose
 * arrays go on the earlier entry's. Checks that each conversation starts exactly once. */
function joinParts(parts) {
  const conversations = new Map();
  const usage = [];
  let open = null; // the entry the last part left incomplete
  for (const [n, { part }] of parts.entries()) {
    for (const [i, entry] of part.conversations.entries()) {
      if (entry.continued) {
        assert.ok(i === 0 && open?.id === entry.id, `part ${n}: ${entry.id} continues only the entry the part before left incomplete`);
        for (const [key, value] of Object.entries(entry)) {
          if (key !== "id" && key !== "continued" && key !== "incomplete") open[key] = [...(open[key] ?? []), ...value];
        }
      } else {
        assert.equal(open, null, `part ${n}: an incomplete entry is continued before anything else`);
        assert.ok(!conversations.has(entry.id), `${entry.id} is exported once`);
        conversations.set(entry.id, entry);
        open = entry;
      }
      if (entry.incomplete) {
        assert.ok(i === part.conversations.length - 1 && part.next !== null, `part ${n}: only the last entry of a part that goes on is incomplete`);
        delete open.incomplete;
      } else {
        open = null;
      }
    }
    usage.push(...part.usage);
  }
  assert.equal(open, null, "the last part leaves nothing incomplete");
  return { conversations, usage };
}

test("an account of 1,000 conversations and 600 versions of a 256 KB artifact exports whole, in parts that each stay bounded", async () => {
  const user = "carol";
  const timer = performance.now();
  const ids = [];
  // 1,000 conversations (the most a user may keep), 20 requests at a time.
  for (let i = 0; i < 1000; i += 20) {
    ids.push(...await Promise.all(Array.from({ length: 20 }, (_, j) => create(user, `big ${i + j}`))));
  }
  assert.equal(new Set(ids).size, 1000);
  const created = performance.now();
  // One conversation talks, and keeps an artifact of 600 versions of 256 KB each: 150 MB of
  // content, in one conversation's rows.
  const big = ids[500];
  await talk(user, big, "Keep notes.", "Noted.");
  const SIZE = 256 * 1024;
  const content = (v) => `version ${v} `.padEnd(SIZE, String.fromCharCode(97 + (v % 26)));
  for (let v = 1; v <= 600; v++) {
    const r = await api(worker.url, "PUT", `/v1/conversations/${big}/artifacts/notes`, { title: "Notes", kind: "text", content: content(v) }, as(user));
    assert.ok(r.ok, `version ${v}: ${await r.text()}`);
  }
  const built = performance.now();

  const parts = await exportParts(user);
  const exported = performance.now();
  console.log(`1,000 conversations in ${Math.round(created - timer)} ms, 600 versions in ${Math.round(built - created)} ms, ` +
    `exported in ${Math.round(exported - built)} ms as ${parts.length} parts of ${parts.map((p) => Math.round(p.bytes / 1e6)).join(", ")} MB`);
  // One request may make 1,000 subrequests, and each conversation costs at least its object's
  // call and a D1 read: 1,000 conversations cannot be one part. Each part is bounded in size
  // (64 MiB, and the 2 MiB page being written when it got there), however large the account.
  assert.ok(parts.length >= 3, `${parts.length} parts`);
  for (const { bytes } of parts) assert.ok(bytes < 72e6, `a part of ${bytes} bytes`);
  assert.ok(parts.every(({ part }) => part.user === "key:carol"));

  const { conversations, usage } = joinParts(parts);
  assert.equal(conversations.size, 1000);
  assert.deepEqual(new Set(conversations.keys()), new Set(ids));
  for (const entry of conversations.values()) {
    assert.deepEqual(Object.keys(entry).slice(-4), ["messages", "artifacts", "files", "schedules"], entry.id);
  }
  const notes = conversations.get(big);
  assert.equal(notes.title, `big 500`);
  assert.deepEqual(notes.messages.map((m) => m.kind), ["user", "assistant"]);
  assert.equal(notes.artifacts.length, 600);
  notes.artifacts.forEach((a, i) => {
    assert.equal(a.version, i + 1);
    assert.ok(a.id === "notes" && a.content === content(i + 1), `version ${i + 1} whole`);
  });
  assert.deepEqual(usage.map((u) => u.conversation_id), [big]);

  // A cursor no part gave is refused, not guessed at.
  const bad = await fetch(`${worker.url}/v1/me/export?after=bm90LWEtY3Vyc29y`, { headers: as(user) });
  assert.equal(bad.status, 400);
});
