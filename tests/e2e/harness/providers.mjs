// Loopback servers playing the LLM providers in their exact wire formats.

import http from "node:http";
import { setTimeout as sleep } from "node:timers/promises";

// Each answers requests in order from a script of turns:
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

/** Each wire API's loopback, made but not yet listening: `await loop.listen()` starts it and
 * sets its `url` (the `…Loopback()` functions below do both). */
export const loopbacks = {
  anthropic: () => loopback("anthropic", anthropicEvents, anthropicError),
  openai: () => loopback("openai", openaiEvents, openaiError),
  gemini: () => loopback("gemini", geminiEvents, geminiError),
  ollama: () => loopback("ollama", ollamaLines, ollamaError, "application/x-ndjson"),
  "workers-ai": () => loopback("workers-ai", workersAiEvents, workersAiError),
};

export const anthropicLoopback = () => loopbacks.anthropic().listen();
/** The settings that point a Worker at the loopback Anthropic-format provider `anthropic`. */
export const anthropicVars = (anthropic) => ({ ANTHROPIC_BASE_URL: anthropic.url, ANTHROPIC_API_KEY: "sk-ant-loopback" });
export const openaiLoopback = () => loopbacks.openai().listen();
/** The settings that point a Worker's `openai:` models at the loopback OpenAI-format provider
 * `openai` (the key is the loopback's default; a test may name another). */
export const openaiVars = (openai) => ({ OPENAI_BASE_URL: `${openai.url}/v1`, OPENAI_API_KEY: "sk-loopback" });
export const geminiLoopback = () => loopbacks.gemini().listen();
export const ollamaLoopback = () => loopbacks.ollama().listen();
/** What the Workers AI stand-in (`workers_ai/stand_in.js`) passes each `AI.run` call to. */
export const workersAiLoopback = () => loopbacks["workers-ai"]().listen();
