// Memory across conversations: what an agent keeps about a user (working memory, per user and
// agent) and what it finds again in their other conversations (recall, full-text search in D1).
// A fact told in one conversation reaches the next one's model; `update_memory` ends a step that
// answered (no second call); two conversations writing at once lose nothing; users never recall
// one another; a deleted conversation, an erased user and a `memory: false` conversation leave
// nothing to recall; the user sees, changes and clears their memory, and exports it.

import assert from "node:assert/strict";
import { test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { lastAssistantMessageIsCompleteWithToolCalls } from "ai";
import { api, d1Query, readUiStream, setup, uiMessage } from "./harness.mjs";

const PREFS = {
  type: "object",
  properties: {
    diet: { type: "string" },
    city: { type: "string" },
    allergies: { type: "array", items: { type: "string" } },
  },
  additionalProperties: false,
};
const AGENTS = {
  concierge: { description: "Plans meals and trips", system: "You are the concierge.", model: "anthropic:claude-sonnet-4-5", memory: { working: { schema: PREFS } } },
  scribe: { description: "Keeps notes", model: "anthropic:claude-sonnet-4-5", memory: { working: { template: "# About the user\n" }, recall: { top_k: 2 } } },
  // Its memory is kept after each answer by MEMORY_MODEL (the OpenAI loopback).
  diarist: { description: "Keeps a diary of the user", model: "anthropic:claude-sonnet-4-5", memory: { working: { template: "# About the user\n" }, managed_by: "background" } },
  plain: { description: "Remembers nothing", model: "anthropic:claude-sonnet-4-5" },
};
const KEYS = { ana: "sk-mem-ana", ben: "sk-mem-ben", cy: "sk-mem-cy", dee: "sk-mem-dee", eve: "sk-mem-eve", fay: "sk-mem-fay" };
const as = (user) => ({ authorization: `Bearer ${KEYS[user]}` });
const { anthropic, openai, worker, persistDir, create, send } = setup({
  providers: ["anthropic", "openai"],
  args: ["--test-scheduled"],
  vars: {
    AGENTS: JSON.stringify(AGENTS),
    MEMORY_MODEL: "openai:gpt-4o-mini",
    // Budgets on: the extractor's call is reserved and charged like any.
    USER_BUDGET_USD: "100",
    ALLOW_ANONYMOUS: "false",
    API_KEYS: Object.entries(KEYS).map(([u, k]) => `${u}:${k}`).join(","),
  },
});

const systemOf = (body) => (typeof body.system === "string" ? body.system : (body.system ?? []).map((b) => b.text).join(""));
const toolsOf = (body) => (body.tools ?? []).map((t) => t.name);
const get = async (path, user) => (await api(worker.url, "GET", path, undefined, as(user))).json();
/** Says `message` in conversation `id` as `user`, the model answering `answer`. */
async function say(user, id, message, answer = { text: "Noted." }) {
  anthropic.script(answer);
  return send(id, { message }, as(user));
}
const searchRows = async (where) => (await d1Query(persistDir, `SELECT COUNT(*) AS n FROM message_search WHERE ${where}`))[0].n;

test("a fact told in one conversation reaches the model in the next, with where it came from", async () => {
  const first = await create({ agent: "concierge", title: "Dinner plans" }, as("ana"));
  await say("ana", first, "Please remember that I am allergic to peanuts.", { text: "Understood: no peanuts." });
  const second = await create({ agent: "concierge" }, as("ana"));
  const { chunks } = await say("ana", second, "Suggest a snack for my flight; remember my peanut allergy.", { text: "Try dried mango." });
  const body = anthropic.requests.at(-1).body;
  const system = systemOf(body);
  // The agent's instructions first (a stable prefix), then what was recalled.
  assert.ok(system.startsWith("You are the concierge."), system);
  assert.match(system, /<recalled>[\s\S]*user in "Dinner plans" \(.+, \d{4}-\d\d-\d\d\): Please remember that I am allergic to peanuts\.[\s\S]*<\/recalled>/);
  assert.ok(system.includes(first), "the conversation it came from is named");
  assert.ok(!system.includes("Try dried mango"), "its own conversation is not recalled");
  // The client is told what was recalled, in a transient part.
  const part = chunks.find((c) => c.type === "data-memory");
  assert.ok(part?.transient, "a transient data-memory part");
  assert.ok(part.data.recalled.some((r) => r.conversation_id === first && r.title === "Dinner plans"));
  // What recall would find, asked directly.
  const found = await get(`/v1/me/memory/search?q=${encodeURIComponent("peanut allergy")}`, "ana");
  assert.ok(found.results.some((r) => r.conversation_id === first && /allergic to peanuts/.test(r.text)));
  const line = await worker.logLine((l) => l.event === "turn" && l.conversation_id === second);
  assert.ok(line.memory.recalled >= 1 && typeof line.memory.recall_ms === "number", JSON.stringify(line.memory));
});

test("update_memory ends a step that answered, is shown in the next conversation, and never loops", async () => {
  const id = await create({ agent: "concierge" }, as("cy"));
  const calls = anthropic.requests.length;
  const { chunks } = await say("cy", id, "I'm vegan and I live in Lisbon.", {
    text: "Got it: vegan, Lisbon.",
    tools: [{ id: "toolu_m1", name: "update_memory", input: { patch: { diet: "vegan", city: "Lisbon" } } }],
  });
  assert.equal(anthropic.requests.length, calls + 1, "one model call: the update needs no reply");
  assert.ok(toolsOf(anthropic.requests.at(-1).body).includes("update_memory"));
  assert.ok(chunks.some((c) => c.type === "tool-output-available" && c.toolCallId === "toolu_m1"));
  // Ended with an empty step: a stock client does not take the answered call for its own and
  // send it back (useChat's `lastAssistantMessageIsCompleteWithToolCalls`).
  assert.deepEqual(chunks.slice(-3).map((c) => c.type), ["start-step", "finish-step", "finish"]);
  assert.equal(chunks.at(-1).finishReason, "stop");
  assert.equal(lastAssistantMessageIsCompleteWithToolCalls({ messages: [await uiMessage(chunks)] }), false);
  const { memory } = await get("/v1/me/memory", "cy");
  const concierge = memory.find((m) => m.agent === "concierge");
  assert.deepEqual(concierge.memory, { diet: "vegan", city: "Lisbon" });
  assert.equal(concierge.version, 1);

  // The next conversation's model sees it, after the instructions.
  const next = await create({ agent: "concierge" }, as("cy"));
  await say("cy", next, "What should I cook tonight?", { text: "Chickpea curry." });
  const system = systemOf(anthropic.requests.at(-1).body);
  assert.match(system, /^You are the concierge\.\n\n<memory>\n[^\n]*update_memory[^\n]*\n\{"diet":"vegan","city":"Lisbon"\}\n<\/memory>/);

  // An update the schema refuses is an error result the model reads and answers in a next
  // step; nothing is kept.
  anthropic.script({
    text: "Noted.",
    tools: [{ id: "toolu_m2", name: "update_memory", input: { patch: { shoe_size: 42 } } }],
  });
  await say("cy", next, "My shoe size is 42.", { text: "I can't keep that." });
  const refused = anthropic.requests.at(-1).body.messages.at(-1).content.find((b) => b.type === "tool_result");
  assert.ok(refused.is_error && /schema/.test(JSON.stringify(refused.content)), JSON.stringify(refused));
  assert.deepEqual((await get("/v1/me/memory", "cy")).memory.find((m) => m.agent === "concierge").memory, { diet: "vegan", city: "Lisbon" });
});

test("two conversations updating memory at once lose nothing", async () => {
  const [a, b] = [await create({ agent: "concierge" }, as("ben")), await create({ agent: "concierge" }, as("ben"))];
  const update = (id, patch) => ({ text: "Noted.", gapMs: 2, tools: [{ id: `toolu_${id.slice(0, 6)}`, name: "update_memory", input: { patch } }] });
  anthropic.script(update(a, { diet: "vegetarian" }), update(b, { city: "Porto" }));
  await Promise.all([send(a, { message: "I'm vegetarian." }, as("ben")), send(b, { message: "I moved to Porto." }, as("ben"))]);
  const kept = (await get("/v1/me/memory", "ben")).memory.find((m) => m.agent === "concierge");
  assert.deepEqual({ ...kept.memory }, { diet: "vegetarian", city: "Porto", ...kept.memory });
  assert.equal(kept.memory.diet, "vegetarian");
  assert.equal(kept.memory.city, "Porto");
  assert.equal(kept.version, 2);
});

test("user B never recalls user A, nor reads or changes their memory", async () => {
  const anas = await create({ agent: "concierge" }, as("ana"));
  await say("ana", anas, "My locker code is zebra-lantern-42.");
  const bens = await create({ agent: "concierge" }, as("ben"));
  const { chunks } = await say("ben", bens, "What is the zebra-lantern locker code?");
  const system = systemOf(anthropic.requests.at(-1).body);
  assert.ok(!system.includes("zebra") && !system.includes("<recalled>"), system);
  assert.ok(!chunks.some((c) => c.type === "data-memory"));
  // Ben finds his own question only; Ana finds her message.
  const bensFound = (await get("/v1/me/memory/search?q=zebra+lantern", "ben")).results;
  assert.deepEqual(bensFound.map((r) => r.conversation_id), [bens]);
  assert.ok((await get("/v1/me/memory/search?q=zebra+lantern", "ana")).results.some((r) => r.conversation_id === anas));
  // Memory routes name an agent; the owner is always the caller.
  assert.ok((await get("/v1/me/memory", "ben")).memory.every((m) => !JSON.stringify(m.memory).includes("zebra")));
});

test("a deleted conversation and an erased user leave no search row and are never recalled", async () => {
  const gone = await create({ agent: "scribe", title: "Secret plans" }, as("dee"));
  await say("dee", gone, "The surprise party is at the lighthouse on Friday.");
  const kept = await create({ agent: "scribe", title: "Kept" }, as("dee"));
  await say("dee", kept, "The lighthouse keeper is my uncle.");
  assert.equal(await searchRows(`conversation_id = '${gone}'`), 2, "the user's and the assistant's message");
  assert.equal((await api(worker.url, "DELETE", `/v1/conversations/${gone}`, undefined, as("dee"))).status, 204);
  assert.equal(await searchRows(`conversation_id = '${gone}'`), 0);
  const next = await create({ agent: "scribe" }, as("dee"));
  await say("dee", next, "Where is the lighthouse party?");
  const system = systemOf(anthropic.requests.at(-1).body);
  assert.ok(!system.includes("surprise party"), "the deleted conversation is not recalled");
  assert.match(system, /lighthouse keeper is my uncle/);
  const found = await get("/v1/me/memory/search?q=lighthouse", "dee");
  assert.ok(found.results.every((r) => r.conversation_id !== gone));

  // Erased: every conversation's search rows and every working memory go.
  assert.equal((await api(worker.url, "PUT", "/v1/me/memory/scribe", { memory: "# About the user\n- has an uncle\n" }, as("dee"))).status, 200);
  assert.equal((await api(worker.url, "DELETE", "/v1/me", undefined, as("dee"))).status, 202);
  const scope = Buffer.from("key:dee").toString("hex").toUpperCase() + "0";
  for (let i = 0; ; i++) {
    const [row] = await d1Query(persistDir, `SELECT (SELECT COUNT(*) FROM erasures WHERE owner = 'key:dee') AS erasing,
      (SELECT COUNT(*) FROM message_search WHERE message_search MATCH 'scope:"${scope}"') AS search,
      (SELECT COUNT(*) FROM memories WHERE owner = 'key:dee') AS memories`);
    if (row.erasing === 0) {
      assert.deepEqual(row, { erasing: 0, search: 0, memories: 0 });
      break;
    }
    assert.ok(i < 100, "the erasure finishes");
    await sleep(200);
  }
  assert.deepEqual((await get("/v1/me/memory/search?q=lighthouse", "dee")).results, []);
});

test("a memory: false conversation neither writes nor reads memory", async () => {
  const told = await create({ agent: "concierge" }, as("eve"));
  await say("eve", told, "I collect antique typewriters.", {
    text: "Lovely.",
    tools: [{ id: "toolu_e1", name: "update_memory", input: { patch: { city: "Rome" } } }],
  });
  const off = await create({ agent: "concierge", memory: false }, as("eve"));
  assert.equal((await get(`/v1/conversations/${off}`, "eve")).memory, false);
  await say("eve", off, "Tell me about antique typewriters; my diary password is quartz.");
  const body = anthropic.requests.at(-1).body;
  const system = systemOf(body);
  assert.ok(!system.includes("<memory>") && !system.includes("<recalled>") && !system.includes("Rome"), system);
  assert.ok(!toolsOf(body).includes("update_memory"), "no update_memory offered");
  assert.equal(await searchRows(`conversation_id = '${off}'`), 0, "nothing of it is indexed");
  const later = await create({ agent: "concierge" }, as("eve"));
  await say("eve", later, "What was my diary password, quartz or not?");
  assert.ok(!systemOf(anthropic.requests.at(-1).body).includes("diary password is quartz"));
  // The conversation that was remembered is recalled.
  assert.match(systemOf(anthropic.requests.at(-1).body), /<memory>[\s\S]*Rome/);
});

test("the user sees, replaces, patches and clears their memory, and exports it", async () => {
  const r = async (method, path, body) => api(worker.url, method, path, body, as("fay"));
  const listed = (await (await r("GET", "/v1/me/memory")).json()).memory;
  // Each agent that keeps memory, at its initial document until something is kept.
  assert.deepEqual(listed.map((m) => [m.agent, m.kind, m.managed_by, m.version]), [
    ["concierge", "schema", "tool", 0], ["scribe", "text", "tool", 0], ["diarist", "text", "background", 0],
  ]);
  assert.deepEqual(listed[0].memory, {});
  assert.equal(listed[1].memory, "# About the user\n");

  let res = await r("PUT", "/v1/me/memory/concierge", { memory: { diet: "pescatarian", allergies: ["shellfish"] } });
  assert.equal(res.status, 200);
  assert.deepEqual((await res.json()).memory, { diet: "pescatarian", allergies: ["shellfish"] });
  res = await r("PATCH", "/v1/me/memory/concierge", { allergies: null, city: "Nice" });
  assert.equal(res.status, 200);
  const patched = await res.json();
  assert.deepEqual(patched.memory, { diet: "pescatarian", city: "Nice" });
  assert.equal(patched.version, 2);
  // What the schema refuses, a text memory patched, an agent that keeps none, too large.
  res = await r("PATCH", "/v1/me/memory/concierge", { city: 7 });
  assert.equal(res.status, 400);
  assert.match((await res.json()).error.message, /schema/);
  assert.equal((await r("PATCH", "/v1/me/memory/scribe", { a: 1 })).status, 400);
  assert.equal((await r("PUT", "/v1/me/memory/plain", { memory: "x" })).status, 404);
  assert.equal((await r("PUT", "/v1/me/memory/nobody", { memory: "x" })).status, 404);
  assert.equal((await r("PUT", "/v1/me/memory/scribe", { memory: "x".repeat(17 * 1024) })).status, 400);
  assert.equal((await r("PUT", "/v1/me/memory/scribe", { text: "x" })).status, 400);
  assert.equal((await r("PUT", "/v1/me/memory/scribe", { memory: "# About the user\n- sails\n" })).status, 200);

  // The export holds it.
  const exported = await (await r("GET", "/v1/me/export")).json();
  assert.deepEqual(exported.memory.map((m) => m.agent).sort(), ["concierge", "scribe"]);
  assert.equal(exported.memory.find((m) => m.agent === "scribe").memory, "# About the user\n- sails\n");

  // A turn sees what the user set.
  const id = await create({ agent: "concierge" }, as("fay"));
  await say("fay", id, "Dinner ideas?");
  assert.match(systemOf(anthropic.requests.at(-1).body), /\{"diet":"pescatarian","city":"Nice"\}/);

  assert.equal((await r("DELETE", "/v1/me/memory/concierge")).status, 204);
  const cleared = (await (await r("GET", "/v1/me/memory")).json()).memory.find((m) => m.agent === "concierge");
  // Back to the initial document, at a new version (an update made on the old one cannot land).
  assert.deepEqual([cleared.memory, cleared.version], [{}, 3]);
  assert.equal((await r("GET", "/v1/me/memory/search")).status, 400, "`q` is required");
});

test("background extraction runs after the stream has ended, is charged, and keeps what it found", async () => {
  const id = await create({ agent: "diarist" }, as("ana"));
  // The extractor answers slowly: the turn's stream must not wait for it.
  openai.script({ text: "# About the user\n- Sails on weekends\n", writes: "event", gapMs: 150 });
  const calls = openai.requests.length;
  const { chunks } = await say("ana", id, "I go sailing every weekend.", { text: "Sounds lovely!" });
  assert.equal(chunks.at(-1).type, "finish");
  const memoryOf = async () => (await get("/v1/me/memory", "ana")).memory.find((m) => m.agent === "diarist");
  assert.equal((await memoryOf()).version, 0, "the stream ended before the memory was written");
  assert.ok(!toolsOf(anthropic.requests.at(-1).body).includes("update_memory"), "the model does not keep it");
  let kept;
  for (let i = 0; !(kept = await memoryOf()).version; i++) {
    assert.ok(i < 100, "the extraction finishes");
    await sleep(100);
  }
  assert.equal(kept.memory, "# About the user\n- Sails on weekends\n");
  assert.equal(openai.requests.length, calls + 1);
  const extractor = openai.requests.at(-1).body;
  assert.equal(extractor.model, "gpt-4o-mini");
  assert.ok(!extractor.tools, "the extractor is offered no tools");
  assert.match(JSON.stringify(extractor.messages), /I go sailing every weekend[\s\S]*Sounds lovely!/);
  const line = await worker.logLine((l) => l.event === "memory_extraction" && l.conversation_id === id);
  assert.equal(line.changed, true);
  // Charged: a ledger row of the extractor's model for the conversation.
  const rows = await d1Query(persistDir, `SELECT model FROM usage_ledger WHERE conversation_id = '${id}'`);
  assert.deepEqual(rows.map((r) => r.model).sort(), ["claude-sonnet-4-5", "gpt-4o-mini"]);
  // The next answer's model sees it.
  openai.script({ text: "NO_CHANGE" });
  await say("ana", id, "Any plans for me?", { text: "Go sailing." });
  assert.match(systemOf(anthropic.requests.at(-1).body), /<memory>[\s\S]*Sails on weekends/);
});
