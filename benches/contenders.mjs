// The Workers the benches set side by side, each started in its own workerd by Miniflare against
// the loopback Anthropic-format provider at `vars.ANTHROPIC_BASE_URL`: this Worker, a
// pass-through that only pipes the provider's bytes, the AI SDK's `streamText`, and the
// platform floor (this design's storage and streaming in plain JavaScript). Each started Worker
// has `turn()` (a "Say something long." message, as its client sends it) and `complete(body)`
// (whether a response body is a whole answer) and `answering(body)` (whether it holds some of the
// answer's text yet).

import path from "node:path";
import { bundle, startMiniflare } from "./miniflare.mjs";
import { ROOT, chatMessage, freshPersistDir } from "../tests/e2e/harness.mjs";

/** This Worker's settings for the benches' caller: anonymous, no per-minute message limit, and
 * no practical limit on its conversations (every turn starts a new one; past the default 1,000
 * a new chat is refused, and a refusal costs less than an answer). */
export const BENCH_CALLER_VARS = { ALLOW_ANONYMOUS: "true", RATE_LIMIT_PER_MINUTE: "0", MAX_CONVERSATIONS_PER_USER: "1000000" };

/** A UI message stream that ended as `useChat` expects: a `finish` chunk, then `[DONE]`. */
export const uiStreamComplete = (body) => body.endsWith("data: [DONE]\n\n") && body.includes('"type":"finish"');
/** A UI message stream that has shown some of the answer's text. */
const uiStreamAnswering = (body) => body.includes('"type":"text-delta"');

export function contenders(vars) {
  const start = ({ config = path.join(ROOT, "wrangler.toml"), vars: own = {}, ...options }) =>
    startMiniflare({ config, persistDir: freshPersistDir(), vars: { ...vars, ...own }, ...options });

  /** This Worker (`main`: another build's entry), as the e2e harness runs it: anonymous callers,
   * no per-user message limit. */
  async function edgeAgent(main, v8Flags, inspectorPort) {
    const worker = await start({ main, v8Flags, inspectorPort, migrations: path.join(ROOT, "migrations"), vars: BENCH_CALLER_VARS });
    let n = 0;
    worker.complete = uiStreamComplete;
    worker.answering = uiStreamAnswering;
    worker.turn = () => chatMessage(`${worker.url}/v1/chat`, `bench-${Date.now()}-${n++}`, "Say something long.");
    return worker;
  }

  async function passThrough() {
    const worker = await start({ config: path.join(ROOT, "benches/workers/passthrough.toml") });
    worker.complete = (body) => body.includes("event: message_stop");
    worker.answering = (body) => body.includes('"text_delta"');
    worker.turn = () => fetch(worker.url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "claude-sonnet-4-5", max_tokens: 4096, stream: true, messages: [{ role: "user", content: "Say something long." }] }),
    });
    return worker;
  }

  /** `floorVars`: `{ FLOOR_WITHOUT_D1: "1" }` leaves its D1 round trips out. */
  async function floor(floorVars = {}, inspectorPort = undefined) {
    const worker = await start({ config: path.join(ROOT, "benches/workers/floor.toml"), migrations: path.join(ROOT, "migrations"), vars: floorVars, inspectorPort });
    let n = 0;
    worker.complete = uiStreamComplete;
    worker.answering = uiStreamAnswering;
    worker.turn = () => chatMessage(worker.url, `floor-${Date.now()}-${n++}`, "Say something long.");
    return worker;
  }

  async function aiSdk() {
    const main = await bundle(path.join(ROOT, "benches/workers/aisdk.js"), path.join(ROOT, "target/bench/aisdk.js"));
    const worker = await start({ config: path.join(ROOT, "benches/workers/aisdk.toml"), main });
    worker.complete = uiStreamComplete;
    worker.answering = uiStreamAnswering;
    worker.turn = () => chatMessage(worker.url, "bench", "Say something long.");
    return worker;
  }

  /** A do-nothing script with this Worker's bindings (its wrangler.toml), to start and stop. */
  async function bindingsOnly() {
    return start({ main: path.join(ROOT, "benches/workers/bindings.js") });
  }

  return { edgeAgent, passThrough, floor, aiSdk, bindingsOnly };
}
