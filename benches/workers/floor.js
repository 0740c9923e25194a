// The platform floor `make bench` measures against (benches/cpu.mjs): the platform work of one
// of this runtime's turns, done in plain JavaScript with nothing else. The Worker hands the
// request to the conversation's Durable Object, which creates its tables, claims the turn in its
// storage, answers at once, stores the message and loads the history in one D1 batch, streams
// the provider's answer as UI message chunks (logging them for a reload to re-attach), and
// stores the answer with its ledger row in a second batch. No auth, configuration, tools,
// retries or error handling: only what any implementation of this design has to do.
//
// With FLOOR_WITHOUT_D1 set it makes neither D1 round trip (the history is the new message
// alone): what the rest of the design costs, which `make bench` sets beside the floor to show
// what D1 is of it. Under Miniflare local D1 runs in the same workerd, so its CPU counts here;
// a deployment's D1 runs elsewhere.

import { DurableObject } from "cloudflare:workers";

const TABLES = `
  CREATE TABLE IF NOT EXISTS conversation (id INTEGER PRIMARY KEY CHECK (id = 1), row TEXT NOT NULL);
  CREATE TABLE IF NOT EXISTS turn (id INTEGER PRIMARY KEY CHECK (id = 1), turn_id TEXT NOT NULL, started_at INTEGER NOT NULL);
  CREATE TABLE IF NOT EXISTS inbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, message TEXT NOT NULL);
  CREATE TABLE IF NOT EXISTS chunks (seq INTEGER PRIMARY KEY AUTOINCREMENT, data TEXT NOT NULL);`;
const STORE_MESSAGE = `INSERT OR IGNORE INTO messages (conversation_id, seq, id, kind, body, model, provider, created_at)
  SELECT ?1, COALESCE(MAX(seq), 0) + 1, ?2, ?3, ?4, ?5, ?6, ?7 FROM messages WHERE conversation_id = ?1`;
const sse = (chunk) => `data: ${JSON.stringify(chunk)}\n\n`;

export class Conversation extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    ctx.storage.sql.exec(TABLES);
  }

  async alarm() {}

  async fetch(request) {
    const { id, text } = await request.json();
    const sql = this.ctx.storage.sql;
    const now = Date.now();
    sql.exec("INSERT OR REPLACE INTO conversation (id, row) VALUES (1, ?)", JSON.stringify({ id, owner: "anonymous" }));
    sql.exec("INSERT OR REPLACE INTO turn (id, turn_id, started_at) VALUES (1, ?, ?)", crypto.randomUUID(), now);
    await this.ctx.storage.setAlarm(now + 60_000);
    const { readable, writable } = new TransformStream();
    const writer = writable.getWriter();
    const encoder = new TextEncoder();
    writer.write(encoder.encode(sse({ type: "start", messageId: crypto.randomUUID() })));
    this.ctx.waitUntil(this.run(id, text, writer, encoder));
    return new Response(readable, { headers: { "content-type": "text/event-stream", "x-vercel-ai-ui-message-stream": "v1" } });
  }

  async run(id, text, writer, encoder) {
    const db = this.env.DB;
    const sql = this.ctx.storage.sql;
    const now = Date.now();
    const user = { kind: "user", content: [{ type: "text", text }] };
    const withoutD1 = Boolean(this.env.FLOOR_WITHOUT_D1);
    const history = withoutD1
      ? { results: [{ body: JSON.stringify(user) }] }
      : (await db.batch([
          db.prepare("INSERT INTO conversations (id, owner, created_at, updated_at) VALUES (?1, 'anonymous', ?2, ?2) ON CONFLICT (id) DO NOTHING").bind(id, now),
          db.prepare(STORE_MESSAGE).bind(id, crypto.randomUUID(), "user", JSON.stringify(user), null, null, now),
          db.prepare("UPDATE conversations SET updated_at = ?2 WHERE id = ?1").bind(id, now),
          db.prepare("SELECT seq, id, body FROM messages WHERE conversation_id = ?1 ORDER BY seq").bind(id),
        ]))[3];
    const messages = history.results.map((row) => JSON.parse(row.body));
    const upstream = await fetch(`${this.env.ANTHROPIC_BASE_URL}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": this.env.ANTHROPIC_API_KEY, "anthropic-version": "2023-06-01" },
      body: JSON.stringify({ model: "claude-sonnet-4-5", max_tokens: 4096, stream: true, messages: messages.map((m) => ({ role: "user", content: m.content })) }),
    });
    writer.write(encoder.encode(sse({ type: "start-step" }) + sse({ type: "text-start", id: "0" })));
    // The same reads as this runtime's (src/edge/platform/bulk_read.js), decoded and re-encoded per read.
    const reader = upstream.body.getReader({ mode: "byob" });
    const decoder = new TextDecoder();
    let buffer = new ArrayBuffer(65536);
    let pending = "";
    let answer = "";
    let log = "";
    let want = 1;
    for (;;) {
      const asked = Date.now();
      const { done, value } = await reader.readAtLeast(want, new Uint8Array(buffer));
      if (done) break;
      buffer = value.buffer;
      want = Date.now() === asked ? Math.min(want * 2, 256) : 1;
      pending += decoder.decode(value, { stream: true });
      let out = "";
      for (let end; (end = pending.indexOf("\n\n")) >= 0; pending = pending.slice(end + 2)) {
        const data = pending.slice(0, end).split("\n").find((line) => line.startsWith("data: "));
        const event = data && JSON.parse(data.slice(6));
        if (event?.type === "content_block_delta" && event.delta.type === "text_delta") {
          answer += event.delta.text;
          out += sse({ type: "text-delta", id: "0", delta: event.delta.text });
        }
      }
      if (out) writer.write(encoder.encode(out));
      // The log for a reload is written in batches, as this runtime's is, never per read.
      log += out;
      if (log.length >= 4096) {
        sql.exec("INSERT INTO chunks (data) VALUES (?)", log);
        log = "";
      }
    }
    if (log) sql.exec("INSERT INTO chunks (data) VALUES (?)", log);
    writer.write(encoder.encode(sse({ type: "text-end", id: "0" }) + sse({ type: "finish-step" }) + sse({ type: "finish", finishReason: "stop" }) + "data: [DONE]\n\n"));
    const assistant = { kind: "assistant", content: [{ type: "text", text: answer }] };
    const at = Date.now();
    if (!withoutD1) await db.batch([
      db.prepare(STORE_MESSAGE).bind(id, crypto.randomUUID(), "assistant", JSON.stringify(assistant), "claude-sonnet-4-5", "anthropic", at),
      db.prepare("UPDATE conversations SET updated_at = ?2 WHERE id = ?1").bind(id, at),
      db.prepare("INSERT INTO usage_ledger (owner, conversation_id, model, provider, input_tokens, output_tokens, created_at) VALUES ('anonymous', ?1, 'claude-sonnet-4-5', 'anthropic', 31, 17, ?2)").bind(id, at),
    ]);
    sql.exec("DELETE FROM turn");
    sql.exec("DELETE FROM chunks");
    await this.ctx.storage.deleteAlarm();
    await writer.close();
  }
}

export default {
  async fetch(request, env) {
    if (request.method === "GET") return new Response("ok"); // health check
    const chat = await request.json();
    const text = chat.messages.at(-1).parts.find((p) => p.type === "text").text;
    const object = env.CONVERSATION.get(env.CONVERSATION.idFromName(`anonymous:${chat.id}`));
    const answer = await object.fetch("https://conversation/turn", { method: "POST", body: JSON.stringify({ id: chat.id, text }) });
    return new Response(answer.body, answer);
  },
};
