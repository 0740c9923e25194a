// The UI message stream, read as a browser would.

import { readUIMessageStream, uiMessageChunkSchema } from "ai";

/** The protocol's fields per chunk type: anything else is an error (strict v6 clients). */
const ALLOWED_KEYS = {
  start: ["messageId"], "start-step": [], "finish-step": [], finish: ["finishReason", "messageMetadata"],
  "text-start": ["id"], "text-delta": ["id", "delta"], "text-end": ["id"],
  "reasoning-start": ["id"], "reasoning-delta": ["id", "delta"], "reasoning-end": ["id"],
  "tool-input-start": ["toolCallId", "toolName"], "tool-input-delta": ["toolCallId", "inputTextDelta"],
  "tool-input-available": ["toolCallId", "toolName", "input"],
  "tool-output-available": ["toolCallId", "output", "preliminary"], "tool-output-error": ["toolCallId", "errorText"],
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

/** Chunk types with runs of deltas collapsed, for comparing sequences. */
export function shape(chunks) {
  const out = [];
  for (const c of chunks) {
    if (c.type.endsWith("-delta") && out.at(-1) === c.type + "*") continue;
    out.push(c.type.endsWith("-delta") ? c.type + "*" : c.type);
  }
  return out;
}

/** The message a stock client (`readUIMessageStream`) makes of a stream's chunks. */
export async function uiMessage(chunks) {
  const stream = new ReadableStream({
    start(c) {
      for (const chunk of chunks) c.enqueue(chunk);
      c.close();
    },
  });
  let last;
  for await (const message of readUIMessageStream({ stream })) last = message;
  return last;
}
