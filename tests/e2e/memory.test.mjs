// Memory across conversations: what an agent keeps about a user (working memory, per user and
// agent) and what it finds again in their other conversations (recall, full-text search in D1).
// A fact told in one conversation reaches the next one's model; `update_memory` ends a step that
// answered (no second call); two conversations writing at once lose nothing; users never recall
// one another; a deleted conversation, an erased user and a `memory: false` conversation leave
// nothing to recall; the user sees, changes and clears their memory, and exports it.

import assert from "node:assert/strict";
import { test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { api, d1Query, readUiStream, setup } from "./harness.mjs";

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
  plain: { description: "Remembers nothing", model: "anthropic:claude-sonnet-4-5" },
};
const KEYS = { ana: "sk-mem-ana", ben: "sk-mem-ben", cy: "sk-mem-cy" };
const as = (user) => ({ authorization: `Bearer ${KEYS[user]}` });
const { anthropic, worker, persistDir, create, send } = setup({
  args: ["--test-scheduled"],
  vars: {
    AGENTS: JSON.stringify(AGENTS),
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
  assert.equal(chunks.at(-1).type, "finish");
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
