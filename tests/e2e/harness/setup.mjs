// The set-up most end-to-end files share: loopback providers and one Worker pointed at them,
// started before the file's tests and stopped after them (node:test's `before` and `after`), and
// the requests nearly every file makes: create a conversation, send it a message, read the answer.

import { after, before } from "node:test";
import { api } from "./client.mjs";
import { anthropicVars, loopbacks, openaiVars } from "./providers.mjs";
import { readUiStream } from "./stream.mjs";
import { freshPersistDir, startWorker } from "./worker.mjs";

/** The vars that point a Worker at a loopback, for the providers that have them. */
const PROVIDER_VARS = { anthropic: anthropicVars, openai: openaiVars };

/**
 * Registers with node:test a `before` that starts the loopback `providers` (names of
 * `loopbacks`, in order) and then `wrangler dev` on `persistDir` (a fresh one unless given), and
 * an `after` that stops the Worker, then the loopbacks. The Worker's vars are the providers'
 * (Anthropic's and OpenAI's, `anthropicVars` and `openaiVars`), then `vars`, which override them:
 * an object, or a function of what `setup` returns, called once the providers listen (for vars
 * naming a provider's URL, or a server `prepare` has started). `args` are `startWorker`'s.
 * `prepare` runs first in the `before` (servers the vars name) and `then` once the Worker is up
 * (what needs it): a file's own top-level `before` hooks are not awaited one after another, so
 * one that something else needs must be one of these.
 *
 * Returns at once, before anything has started, what the tests use once it has:
 * - `worker`: `startWorker`'s object (`url`, `log()`, `jsonLines()`, `logLine()`, `kill()`,
 *   `stop()`), its fields copied in when the Worker is up;
 * - each loopback by its name (`anthropic`, `openai`, ...) and the first as `provider`: the
 *   loopback objects themselves, so a test's `anthropic.script(...)` or `anthropic.respond = ...`
 *   reaches the server;
 * - `persistDir`, the Worker's state (for `d1Query` and the like);
 * - `create`, `send` and `talk` (below), requests to the Worker.
 */
export function setup({ providers = ["anthropic"], vars = {}, persistDir = freshPersistDir(), args, prepare, then } = {}) {
  const loops = Object.fromEntries(providers.map((name) => [name, loopbacks[name]()]));
  const worker = {};
  const provider = loops[providers[0]];

  /** Creates a conversation (`POST /v1/conversations` with `body`, as `headers` authorize it)
   * and resolves to its id. */
  const create = async (body = {}, headers = {}) => (await (await api(worker.url, "POST", "/v1/conversations", body, headers)).json()).id;
  /** Posts `body` to conversation `id`'s messages and reads the whole answer, as `readUiStream`
   * does (`{ headers, chunks }`; an answer other than 200 throws). */
  const send = async (id, body, headers = {}) => readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, body, headers));
  /** Scripts `provider`'s next answer (`answer`: its text, or a turn of the loopback's script),
   * then sends `message` (a text, or parts) to conversation `id` and reads the answer. */
  const talk = async (id, message, answer, headers = {}) => {
    provider.script(typeof answer === "string" ? { text: answer } : answer);
    return send(id, { message }, headers);
  };

  const set = { worker, provider, ...loops, persistDir, create, send, talk };
  before(async () => {
    await prepare?.();
    for (const loop of Object.values(loops)) await loop.listen();
    const own = typeof vars === "function" ? vars(set) : vars;
    const fromProviders = Object.assign({}, ...providers.map((name) => PROVIDER_VARS[name]?.(loops[name]) ?? {}));
    Object.assign(worker, await startWorker({ persistDir, vars: { ...fromProviders, ...own }, args }));
    await then?.(set);
  });
  after(async () => {
    await worker.stop?.();
    for (const loop of Object.values(loops)) await loop.close();
  });
  return set;
}
