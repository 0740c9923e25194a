// The client's side: requests to the Worker as the playground and the AI SDK make them, and what
// they carry.

import { setTimeout as sleep } from "node:timers/promises";

/** A real 1x1 PNG (a red pixel, 70 bytes), for the tests of files in messages. */
export const PNG = Buffer.from("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==", "base64");

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

/** Waits, if need be, until `needMs` or more remain of the wall clock's minute. Local rate
 * limiting (Miniflare's) counts in windows aligned to the clock's minutes, so a test that fills
 * one must not straddle two: the requests after the edge would find a fresh window. */
export async function withinOneRateWindow(needMs) {
  const into = Date.now() % 60_000;
  if (into > 60_000 - needMs) await sleep(60_000 - into + 300);
}
