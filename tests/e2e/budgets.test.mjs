// Credits and model tiers through the real Worker: a user who spends their budget mid-turn is
// moved to BUDGET_MODEL (in the stream, in history, in GET /v1/usage), warned once at 80%, and,
// with no cheaper model configured, refused with 402 before any work or stopped mid-turn. Every
// call is held at the priciest model that may answer it and charged for every attempt, an
// answer with no reported usage or cut off by a crash included, an attempt given up on as it is
// given up on (issue 56).

import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { after, before, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { anthropicLoopback, anthropicVars, api, d1Query, freshPersistDir, readUiStream, startWorker } from "./harness.mjs";

const SECRET = "budget-secret";
const b64 = (s) => Buffer.from(s).toString("base64url");
function as(sub) {
  const body = `${b64(JSON.stringify({ alg: "HS256" }))}.${b64(JSON.stringify({ sub, exp: Math.floor(Date.now() / 1000) + 3600 }))}`;
  return { authorization: `Bearer ${body}.${createHmac("sha256", SECRET).update(body).digest("base64url")}` };
}
const admin = { authorization: "Bearer sk-ops" };

let anthropic, tiered, strict, chained;
const vars = (extra) => ({
  ALLOW_ANONYMOUS: "false", JWT_SECRET: SECRET, API_KEYS: "ops:sk-ops:admin,app:sk-app",
  ...anthropicVars(anthropic), USER_BUDGET_PERIOD: "day", ...extra,
});

before(async () => {
  anthropic = await anthropicLoopback();
  tiered = await startWorker({ persistDir: freshPersistDir(), vars: vars({
    USER_BUDGET_USD: "5", BUDGET_MODEL: "anthropic:claude-haiku-4-5", ALLOWED_MODELS: "anthropic:*,openai:o3",
  }) });
  strict = await startWorker({ persistDir: freshPersistDir(), vars: vars({ USER_BUDGET_USD: "0" }) });
  // Opus ($15 in, $75 out per million) behind Sonnet ($3, $15); a stalled call times out fast.
  chained = await startWorker({ persistDir: freshPersistDir(), vars: vars({
    USER_BUDGET_USD: "5", BUDGET_MODEL: "anthropic:claude-haiku-4-5", FALLBACK_MODELS: "anthropic:claude-opus-4-1",
    PROVIDER_IDLE_TIMEOUT_MS: "1500",
  }) });
});

after(async () => {
  await tiered?.stop();
  await strict?.stop();
  await chained?.stop();
  await anthropic?.close();
});

async function turn(worker, who, message) {
  const { id } = await (await api(worker.url, "POST", "/v1/conversations", {}, who)).json();
  const response = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message }, who);
  const { chunks } = await readUiStream(response);
  const history = (await (await api(worker.url, "GET", `/v1/conversations/${id}/messages`, undefined, who)).json()).messages;
  return { id, response, chunks, history };
}

const setBudget = (worker, user, limit_usd, headers = admin) =>
  api(worker.url, "PUT", `/v1/admin/budgets/${encodeURIComponent(user)}`, { limit_usd, period: "day" }, headers);

test("only an admin key sets budgets", async () => {
  assert.equal((await setBudget(tiered, "alice", 1, as("alice"))).status, 403);
  assert.equal((await setBudget(tiered, "alice", 1, { authorization: "Bearer sk-app" })).status, 403);
  assert.equal((await setBudget(tiered, "alice", -1)).status, 400);
  const ok = await setBudget(tiered, "alice", 1);
  assert.equal(ok.status, 200);
  assert.deepEqual(await ok.json(), { user: "alice", limit_usd: 1, period: "day", enforced: true });
});

test("with budgets on, a model with no price or outside ALLOWED_MODELS is refused, naming it", async () => {
  const create = (model) => api(tiered.url, "POST", "/v1/conversations", { model }, as("mallory"));
  for (const [model, why] of [
    ["openai:o3", /model `openai:o3` has no price/], // allowed, but it would be free
    ["openai:gpt-4o", /model `openai:gpt-4o` is not allowed here; allowed: anthropic:\*, openai:o3/],
    ["anthropic:claude-sonnet-4-5-pro", /has no price/], // not a dated variant of a priced model
    ["gemini:../../v1beta/files", /is not valid/],
  ]) {
    const response = await create(model);
    assert.equal(response.status, 400, model);
    assert.match((await response.json()).error.message, why);
  }
  assert.equal((await create("anthropic:claude-haiku-4-5-20251001")).status, 201);
  const listed = (await (await api(tiered.url, "GET", "/v1/models", undefined, as("mallory"))).json()).models;
  assert.ok(listed.length > 0);
  assert.deepEqual(listed.filter((m) => !m.id.startsWith("anthropic:")), []);
});

test("a user who crosses the budget mid-turn gets the next LLM call from BUDGET_MODEL", async () => {
  // $0.05 does not cover a whole Sonnet answer (4,096 tokens at $15 per million, $0.061), so
  // the first call asks for fewer tokens; the answer writes all of them, and what is left
  // cannot cover another call's input and 256 tokens: the next call goes to Haiku.
  assert.equal((await setBudget(tiered, "bea", 0.05)).status, 200);
  const before = anthropic.requests.length;
  anthropic.script({ text: "Let me check.", tools: [{ id: "toolu_t", name: "current_time", input: {} }], usage: { output: 100_000 } }, { text: "It is noon." });
  const { chunks, history } = await turn(tiered, as("bea"), "what time is it?");
  const calls = anthropic.requests.slice(before).map((r) => r.body);
  assert.deepEqual(calls.map((b) => b.model), ["claude-sonnet-4-5", "claude-haiku-4-5"]);
  assert.ok(calls[0].max_tokens > 2_500 && calls[0].max_tokens < 3_334, `lowered to what $0.05 covers: ${calls[0].max_tokens}`);
  assert.equal(calls[1].max_tokens, 4_096);
  assert.deepEqual(chunks.find((c) => c.type === "data-provider-switch").data, { from: "anthropic:claude-sonnet-4-5", to: "anthropic:claude-haiku-4-5" });
  assert.deepEqual(chunks.at(-1), { type: "finish", finishReason: "stop" });
  const note = history.find((m) => m.kind === "context_note");
  assert.match(note.text ?? note.content?.[0]?.text ?? JSON.stringify(note), /switched to the economy model anthropic:claude-haiku-4-5: budget reached/);
  // The note never reaches a model.
  assert.doesNotMatch(JSON.stringify(anthropic.requests.at(-1).body), /economy model/);

  const usage = await (await api(tiered.url, "GET", "/v1/usage", undefined, as("bea"))).json();
  assert.equal(usage.user, "bea");
  assert.equal(usage.period, "day");
  assert.equal(usage.limit_usd, 0.05);
  assert.deepEqual(usage.models.map((m) => m.model).sort(), ["claude-haiku-4-5", "claude-sonnet-4-5"]);
  const sonnet = usage.models.find((m) => m.model === "claude-sonnet-4-5");
  assert.ok(sonnet.cost_usd > 0.04 && sonnet.cost_usd <= 0.05, JSON.stringify(usage));
  assert.match(usage.resets_at, /T00:00:00Z$/);
  // The turn's log line counts the switch.
  const line = await tiered.logLine((l) => l.event === "turn" && l.user === "bea");
  assert.equal(line.budget_switches, 1);
});

test("a budgeted turn reads the budget in its history's round trip: a later message still makes 3", async () => {
  anthropic.script({ text: "One." }, { text: "Two." });
  const { id } = await turn(tiered, as("fay"), "first");
  const response = await api(tiered.url, "POST", `/v1/conversations/${id}/messages`, { message: "second" }, as("fay"));
  const requestId = response.headers.get("x-request-id");
  const { chunks } = await readUiStream(response);
  assert.equal(chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join(""), "Two.");
  // The history and the budget in one read, the new message written alongside it, the turn's
  // answer in a third: no round trip of the budget's own.
  const line = await tiered.logLine((l) => l.event === "turn" && l.request_id === requestId);
  assert.equal(line.d1_round_trips, 3, JSON.stringify(line));
  assert.equal(line.budget_switches, 0);
});

test("a user past 80% of the budget is warned once per period", async () => {
  anthropic.script({ text: "First.", usage: { output: 4_000 } });
  await turn(tiered, as("cy"), "one");
  const spent = (await (await api(tiered.url, "GET", "/v1/usage", undefined, as("cy"))).json()).spent_usd;
  assert.equal((await setBudget(tiered, "cy", spent / 0.82)).status, 200);
  // Past 80%, with enough left for a shorter answer, which spends the rest.
  anthropic.script({ text: "Second.", usage: { output: 100_000 } });
  const second = await turn(tiered, as("cy"), "two");
  const events = second.history.filter((m) => m.kind === "system_event");
  assert.equal(events.length, 1);
  assert.match(JSON.stringify(events[0]), /80% of the budget is spent/);
  assert.equal(anthropic.requests.at(-1).body.model, "claude-sonnet-4-5");
  anthropic.script({ text: "Third." }); // now spent: the economy model answers, with no second warning
  const third = await turn(tiered, as("cy"), "three");
  assert.equal(third.history.filter((m) => m.kind === "system_event").length, 0);
  assert.equal(anthropic.requests.at(-1).body.model, "claude-haiku-4-5");
  // A turn that starts on the economy model says so in its stream, as a switch mid-turn does.
  assert.deepEqual(third.chunks.filter((c) => c.type === "data-provider-switch").map((c) => c.data),
    [{ from: "anthropic:claude-sonnet-4-5", to: "anthropic:claude-haiku-4-5" }]);
});

test("with no BUDGET_MODEL, a spent budget is a 402 before any work, and ends a turn that crosses it", async () => {
  const before = anthropic.requests.length;
  const { id } = await (await api(strict.url, "POST", "/v1/conversations", {}, as("dee"))).json();
  const refused = await api(strict.url, "POST", `/v1/conversations/${id}/messages`, { message: "hi" }, as("dee"));
  assert.equal(refused.status, 402);
  const { error } = await refused.json();
  assert.equal(error.code, "budget_exceeded");
  assert.match(error.message, /budget of \$0\.00 per day is spent .* resets at \d{4}-\d\d-\d\dT00:00:00Z/);
  assert.equal(anthropic.requests.length, before, "no provider call");
  assert.equal((await api(strict.url, "POST", "/v1/chat", { id: "c", messages: [{ id: "m", role: "user", parts: [{ type: "text", text: "hi" }] }] }, as("dee"))).status, 402);

  assert.equal((await setBudget(strict, "eve", 0.05)).status, 200);
  anthropic.script({ text: "Checking.", tools: [{ id: "toolu_e", name: "current_time", input: {} }], usage: { output: 100_000 } });
  const { chunks, history } = await turn(strict, as("eve"), "time?");
  assert.match(chunks.find((c) => c.type === "error").errorText, /^your budget of \$0\.05 per day has \$0\.\d+ left, too little for an answer; it resets at \S+Z \(request [0-9a-f]{32}\)$/);
  assert.deepEqual(chunks.at(-1), { type: "finish", finishReason: "error" });
  assert.equal(anthropic.requests.length, before + 1, "the second call was never made");
  assert.deepEqual(history.map((m) => m.kind), ["user", "assistant", "tool_result"]);
});

test("turns of one user running at once cannot spend past the budget together", async () => {
  // Each answer writes as many tokens as its call may (the loopback caps them at `max_tokens`):
  // $0.061 and more on Sonnet. Twenty turns that each read the ledger before any was recorded
  // would spend twenty of those; the user's spend object makes them share the $0.15.
  assert.equal((await setBudget(strict, "zed", 0.15)).status, 200);
  const before = anthropic.requests.length;
  anthropic.respond = () => ({ text: "Sure.", usage: { output: 100_000 } });
  try {
    // A turn whose first call the rest cannot cover is refused before any stream: a 402.
    const send = async (i) => {
      const { id } = await (await api(strict.url, "POST", "/v1/conversations", {}, as("zed"))).json();
      const r = await api(strict.url, "POST", `/v1/conversations/${id}/messages`, { message: `question ${i}` }, as("zed"));
      if (r.status === 402) return { refused: (await r.json()).error };
      return { chunks: (await readUiStream(r)).chunks };
    };
    const turns = await Promise.all(Array.from({ length: 20 }, (_, i) => send(i)));
    const answered = turns.filter((t) => t.chunks?.at(-1).finishReason === "stop");
    const refused = turns.filter((t) => t.refused);
    assert.equal(answered.length + refused.length, 20);
    assert.ok(answered.length >= 2, `${answered.length} answered`);
    assert.ok(refused.length >= 10, `${refused.length} refused`);
    for (const t of refused) {
      assert.equal(t.refused.code, "budget_exceeded");
      assert.match(t.refused.message, /^your budget of \$0\.15 per day/);
    }
    assert.equal(anthropic.requests.length - before, answered.length, "a refused turn calls no model");
    // The ledger's total, what users are billed from, stays within the budget.
    const usage = await (await api(strict.url, "GET", "/v1/usage", undefined, as("zed"))).json();
    assert.ok(usage.spent_usd <= 0.15, JSON.stringify(usage));
    assert.ok(usage.spent_usd > 0.1, JSON.stringify(usage));
  } finally {
    anthropic.respond = null;
  }
});

test("a message whose first call the rest of the budget cannot cover is a 402 before any stream, and is not kept", async () => {
  // $0.004 left: less than the 256 output tokens a call needs on Sonnet ($15 per million).
  assert.equal((await setBudget(strict, "gil", 1)).status, 200);
  anthropic.script({ text: "First, fine.", usage: { output: 10 } });
  const first = await turn(strict, as("gil"), "hello");
  assert.deepEqual(first.chunks.at(-1), { type: "finish", finishReason: "stop" });
  const { spent_usd } = await (await api(strict.url, "GET", "/v1/usage", undefined, as("gil"))).json();
  assert.equal((await setBudget(strict, "gil", spent_usd + 0.002)).status, 200);
  const before = anthropic.requests.length;
  const send = (extra = {}) => api(strict.url, "POST", `/v1/conversations/${first.id}/messages`, { message: "and now?", ...extra }, as("gil"));
  for (const r of [await send(), await send({ stream: false })]) {
    assert.equal(r.status, 402);
    const { error } = await r.json();
    assert.equal(error.code, "budget_exceeded");
    assert.match(error.message, /has \$0\.00\d* left, too little for an answer; it resets at \S+Z/);
  }
  const chat = await api(strict.url, "POST", "/v1/chat", { id: "gil-chat", messages: [{ id: "m", role: "user", parts: [{ type: "text", text: "hi" }] }] }, as("gil"));
  assert.equal(chat.status, 402);
  assert.equal(anthropic.requests.length, before, "no provider call");
  // Nothing of the refused messages was kept, nor the chat they would have made.
  const history = (await (await api(strict.url, "GET", `/v1/conversations/${first.id}/messages`, undefined, as("gil"))).json()).messages;
  assert.deepEqual(history.map((m) => m.kind), ["user", "assistant"]);
  const listed = (await (await api(strict.url, "GET", "/v1/conversations", undefined, as("gil"))).json()).conversations;
  assert.deepEqual(listed.map((c) => c.id), [first.id]);
  // With room again, the same message goes through.
  assert.equal((await setBudget(strict, "gil", 1)).status, 200);
  anthropic.script({ text: "Now, yes." });
  const { chunks } = await readUiStream(await send());
  assert.deepEqual(chunks.at(-1), { type: "finish", finishReason: "stop" });
});

const usageOf = async (worker, who) => (await api(worker.url, "GET", "/v1/usage", undefined, who)).json();

test("a call is held at the priciest model that may answer it: a fallback's prices count", async () => {
  // $0.2 covers a whole Sonnet answer (4,096 tokens at $15 per million, $0.061), but not an Opus
  // one ($0.307), and Opus answers if Sonnet fails: the call asks for what $0.2 covers at Opus.
  assert.equal((await setBudget(chained, "hal", 0.2)).status, 200);
  const before = anthropic.requests.length;
  anthropic.script({ text: "Held at the fallback's prices." });
  const { chunks } = await turn(chained, as("hal"), "hello");
  assert.deepEqual(chunks.at(-1), { type: "finish", finishReason: "stop" });
  const [call] = anthropic.requests.slice(before).map((r) => r.body);
  assert.equal(call.model, "claude-sonnet-4-5");
  assert.ok(call.max_tokens > 1_000 && call.max_tokens < 2_667, `lowered to what $0.2 covers at Opus: ${call.max_tokens}`);
});

test("a call past the budget goes to BUDGET_MODEL alone, never to a pricier fallback", async () => {
  // The economy model answers past the budget, so nothing holds it back: a fallback behind it
  // (Opus) would spend without limit.
  assert.equal((await setBudget(chained, "ivy", 0)).status, 200);
  const before = anthropic.requests.length;
  anthropic.script({ status: 529 }, { status: 529 }, { status: 529 });
  try {
    const { chunks } = await turn(chained, as("ivy"), "hello");
    assert.deepEqual(chunks.at(-1), { type: "finish", finishReason: "error" });
    assert.deepEqual(anthropic.requests.slice(before).map((r) => r.body.model), ["claude-haiku-4-5", "claude-haiku-4-5", "claude-haiku-4-5"]);
  } finally {
    anthropic.clear();
  }
});

test("a retried attempt that reported its prompt is charged with the answer", async () => {
  // The first attempt reports 50,000 input tokens, then stalls until PROVIDER_IDLE_TIMEOUT_MS
  // and is retried: both prompts were billed, and both are in the ledger, a row each.
  const before = anthropic.requests.length;
  anthropic.script({ stallAfter: 1, usage: { input: 50_000 } }, { text: "Second time lucky.", usage: { input: 50_000 } });
  const { chunks } = await turn(chained, as("jay"), "hello");
  assert.equal(chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join(""), "Second time lucky.");
  assert.equal(anthropic.requests.length - before, 2);
  const { models } = await usageOf(chained, as("jay"));
  assert.deepEqual(models.map((m) => [m.model, m.calls, m.input_tokens]), [["claude-sonnet-4-5", 2, 100_000]]);
});

test("an attempt given up on is charged at once, and no attempt is made that the budget no longer covers", async () => {
  // $0.1 is held whole by the call (Opus's prices, fewer output tokens). Its first attempt
  // reports 50,000 prompt tokens ($0.15 on Sonnet) and stalls: charged as it is given up on,
  // it leaves nothing to cover a second, which is not made.
  assert.equal((await setBudget(chained, "lou", 0.1)).status, 200);
  const before = anthropic.requests.length;
  anthropic.script({ stallAfter: 1, usage: { input: 50_000 } }, { text: "Never sent." });
  try {
    const { chunks } = await turn(chained, as("lou"), "hello");
    assert.deepEqual(chunks.at(-1), { type: "finish", finishReason: "error" });
    assert.equal(anthropic.requests.length - before, 1);
    const { models } = await usageOf(chained, as("lou"));
    assert.deepEqual(models.map((m) => [m.model, m.calls, m.input_tokens]), [["claude-sonnet-4-5", 1, 50_000]]);
  } finally {
    anthropic.clear();
  }
});

test("a finished answer whose provider reported no usage is charged from estimates", async () => {
  anthropic.script({ text: "Nothing reported, and not free.", usage: { input: 0, output: 0 } });
  const { chunks } = await turn(tiered, as("gus"), "what does this cost?");
  assert.deepEqual(chunks.at(-1), { type: "finish", finishReason: "stop" });
  const usage = await usageOf(tiered, as("gus"));
  const [sonnet] = usage.models;
  // The prompt (system prompt, tool definitions, the message) and the answer's 31 characters.
  assert.ok(sonnet.input_tokens > 100, JSON.stringify(usage));
  assert.ok(sonnet.output_tokens >= 8, JSON.stringify(usage));
  assert.ok(usage.spent_usd > 0, JSON.stringify(usage));
});

test("an answer cut off by a crash is charged from estimates when its turn is recovered", async () => {
  const persistDir = freshPersistDir();
  const crashVars = vars({ USER_BUDGET_USD: "5" });
  let worker = await startWorker({ persistDir, vars: crashVars });
  try {
    const who = as("kit");
    const { id } = await (await api(worker.url, "POST", "/v1/conversations", {}, who)).json();
    const before = anthropic.requests.length;
    // `gapMs` pauses between the 1-9 byte pieces the loopback writes: about 10 s in all.
    anthropic.script({ text: "This answer is cut off when the runtime dies, and charged when it restarts. ".repeat(6), gapMs: 3 });
    const dying = api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Plan my week." }, who).then((r) => r.text()).catch(() => "");
    while (anthropic.requests.length === before) await sleep(10);
    await sleep(3000); // long enough for a batch of the stream (and the partial answer) to be saved
    await worker.kill();
    await dying;
    anthropic.script({ text: "Here is the rest of the plan." });
    worker = await startWorker({ persistDir, vars: crashVars });
    // The alarm recovers the turn within a minute.
    const deadline = Date.now() + 60_000;
    let history = [];
    while (!history.some((m) => m.kind === "assistant" && m.stop_reason === "end_turn")) {
      assert.ok(Date.now() < deadline, `the turn was not recovered: ${JSON.stringify(history.map((m) => [m.kind, m.stop_reason]))}`);
      await sleep(250);
      history = (await (await api(worker.url, "GET", `/v1/conversations/${id}/messages`, undefined, who)).json()).messages;
    }
    assert.deepEqual(history.map((m) => [m.kind, m.stop_reason]), [["user", undefined], ["assistant", "interrupted"], ["assistant", "end_turn"]]);
    // The interrupted answer has its ledger row: the prompt Anthropic reported when it began
    // (31 tokens), its output estimated from what streamed.
    const rows = await d1Query(persistDir, `SELECT model, input_tokens, output_tokens, cost_usd, estimated FROM usage_ledger WHERE conversation_id = '${id}' ORDER BY created_at`);
    assert.equal(rows.length, 2, JSON.stringify(rows));
    const [cut] = rows;
    assert.equal(cut.model, "claude-sonnet-4-5");
    assert.equal(cut.input_tokens, 31);
    assert.ok(cut.output_tokens > 1, JSON.stringify(cut));
    assert.equal(cut.estimated, 1);
    assert.ok(cut.cost_usd > 0, JSON.stringify(cut));
    const usage = await usageOf(worker, who);
    assert.equal(usage.models[0].calls, 2, JSON.stringify(usage));
  } finally {
    await worker.stop();
  }
});
