// Named agents (`AGENTS`): a conversation belongs to one agent, chosen when it is made, whose
// instructions, model, tools and step limit its turns use; two agents on two providers here.

import assert from "node:assert/strict";
import { test } from "node:test";
import { anthropicVars, api, openaiVars, readUiStream, setup, startWorker } from "./harness.mjs";

const AGENTS = {
  support: {
    description: "Answers customers' questions",
    system: "You are the support agent of Example Ltd.",
    model: "anthropic:claude-sonnet-4-5",
    tools: ["current_time"],
    max_llm_calls: 2,
  },
  writer: {
    description: "Drafts documents as artifacts",
    system: "You are the writer. Today is {{date}}.",
    model: "openai:gpt-4o-mini",
    toolsets: ["artifacts"],
  },
};

const e2e = setup({ providers: ["anthropic", "openai"], vars: { AGENTS: JSON.stringify(AGENTS) } });
const { anthropic, openai, worker, persistDir } = e2e;
/** A conversation of `support`, kept for the last test (a redeployment without it). */
let supportConversation;

/** The system prompt an Anthropic request carried, as one text. */
const anthropicSystem = (body) => (typeof body.system === "string" ? body.system : body.system.map((b) => b.text).join(""));
/** The text an answer's deltas make (a provider's pieces arrive split anywhere). */
const said = (chunks) => chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join("");
const openaiSystem = (body) => body.messages.filter((m) => m.role === "system" || m.role === "developer").map((m) => m.content).join("");

test("GET /v1/agents lists the agents, the first the default, without their instructions", async () => {
  const r = await api(worker.url, "GET", "/v1/agents");
  assert.equal(r.status, 200);
  const body = await r.json();
  assert.equal(body.default, "support");
  assert.deepEqual(body.agents.map((a) => [a.name, a.model]), [["support", "anthropic:claude-sonnet-4-5"], ["writer", "openai:gpt-4o-mini"]]);
  assert.equal(body.agents[1].description, "Drafts documents as artifacts");
  assert.deepEqual(body.agents[1].toolsets, ["artifacts"]);
  assert.deepEqual(body.agents[0].tools, ["current_time"]);
  assert.equal(body.agents[0].output, false);
  assert.ok(!JSON.stringify(body).includes("Example Ltd"), "instructions stay on the server");
  // The OpenAPI document offers this deployment's agents.
  const doc = await (await api(worker.url, "GET", "/openapi.json")).json();
  const create = doc.paths["/v1/conversations"].post.requestBody.content["application/json"].schema.properties;
  assert.deepEqual(create.agent.anyOf[0].enum, ["support", "writer"]);
});

test("a conversation of the writer calls its model with its instructions and its tools, and keeps its agent", async () => {
  const id = await e2e.create({ agent: "writer", system: "Write in French." });
  const conversation = await (await api(worker.url, "GET", `/v1/conversations/${id}`)).json();
  assert.equal(conversation.agent, "writer");
  const before = openai.requests.length;
  openai.script({ text: "Bonjour." });
  const { chunks } = await e2e.send(id, { message: "Draft a greeting" });
  assert.equal(said(chunks), "Bonjour.");
  assert.equal(openai.requests.length, before + 1, "the writer's model answered");
  const sent = openai.requests.at(-1).body;
  assert.equal(sent.model, "gpt-4o-mini");
  const system = openaiSystem(sent);
  // The agent's instructions (placeholders filled), then the conversation's own.
  assert.match(system, /^You are the writer\. Today is \d{4}-\d{2}-\d{2}\./);
  assert.ok(system.indexOf("Write in French.") > system.indexOf("You are the writer."), system);
  const offered = sent.tools.map((t) => t.function.name);
  assert.ok(offered.includes("create_artifact"), offered.join());
  assert.ok(!offered.some((n) => n.includes("schedule")), `only its toolsets: ${offered}`);
  // Its next turn is the writer's too: the conversation keeps its agent.
  openai.script({ text: "Encore." });
  await e2e.send(id, { message: "Again" });
  assert.equal(openai.requests.length, before + 2);
});

test("a conversation that names no agent gets the default one: its model, only its tools, its step limit", async () => {
  const id = await e2e.create({});
  supportConversation = id;
  // Named when made: declaring another agent first later does not move it.
  assert.equal((await (await api(worker.url, "GET", `/v1/conversations/${id}`)).json()).agent, "support");
  const before = anthropic.requests.length;
  anthropic.script(
    { text: "Let me look.", tools: [{ id: "toolu_1", name: "current_time", input: {} }] },
    { text: "Once more.", tools: [{ id: "toolu_2", name: "current_time", input: {} }] },
  );
  const { chunks } = await e2e.send(id, { message: "What time is it?" });
  const sent = anthropic.requests[before].body;
  assert.equal(sent.model, "claude-sonnet-4-5");
  assert.match(anthropicSystem(sent), /^You are the support agent of Example Ltd\./);
  assert.deepEqual(sent.tools.map((t) => t.name), ["current_time"], "its own list of tools, nothing else");
  // Two calls (its `max_llm_calls`), not the deployment's ten.
  assert.equal(anthropic.requests.length, before + 2);
  assert.match(chunks.find((c) => c.type === "error").errorText, /stopped after 2 LLM calls/);
});

test("/v1/chat starts a chat with the agent it names, which its later messages keep", async () => {
  const before = openai.requests.length;
  const id = `agents-chat-${Date.now()}`;
  const chat = (text, agent) => api(worker.url, "POST", "/v1/chat", {
    id,
    ...(agent ? { agent } : {}),
    messages: [{ id: `m${text.length}`, role: "user", parts: [{ type: "text", text }] }],
  });
  openai.script({ text: "A chat with the writer." });
  const { chunks } = await readUiStream(await chat("Hello writer", "writer"));
  assert.equal(said(chunks), "A chat with the writer.");
  assert.equal(openai.requests.length, before + 1);
  assert.match(openaiSystem(openai.requests.at(-1).body), /You are the writer/);
  const listed = (await (await api(worker.url, "GET", "/v1/conversations?limit=100")).json()).conversations;
  assert.equal(listed.find((c) => c.title === "Hello writer").agent, "writer");
  // A later message naming no agent (or another) goes on with the chat's own.
  openai.script({ text: "Still the writer." });
  assert.equal(said((await readUiStream(await chat("And again", "support"))).chunks), "Still the writer.");
  assert.equal(openai.requests.length, before + 2);
});

test("a message may narrow its turn only within its agent's toolsets", async () => {
  const id = await e2e.create({ agent: "writer" });
  const r = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Hi", toolsets: ["schedules"] });
  assert.equal(r.status, 400);
  assert.match((await r.json()).error.message, /agent `writer`.*`schedules`/);
});

test("an agent the deployment does not have, or toolsets outside the agent's, are 400s naming them", async () => {
  const unknown = await api(worker.url, "POST", "/v1/conversations", { agent: "lawyer" });
  assert.equal(unknown.status, 400);
  const { error } = await unknown.json();
  assert.match(error.message, /no agent `lawyer`.*`support`, `writer`/);
  const chat = await api(worker.url, "POST", "/v1/chat", {
    id: "agents-unknown",
    agent: "lawyer",
    messages: [{ id: "m1", role: "user", parts: [{ type: "text", text: "Hi" }] }],
  });
  assert.equal(chat.status, 400);
  assert.match((await chat.json()).error.message, /`lawyer`/);
  const outside = await api(worker.url, "POST", "/v1/conversations", { agent: "writer", toolsets: ["schedules"] });
  assert.equal(outside.status, 400);
  assert.match((await outside.json()).error.message, /agent `writer`.*`schedules`/);
  const bad = await api(worker.url, "POST", "/v1/conversations", { agent: 7 });
  assert.equal(bad.status, 400);
});

test("after a redeployment, a conversation keeps its agent, and one whose agent is gone is refused", async () => {
  await worker.stop();
  // `support` is gone, and `editor`, declared first, is the default now.
  const redeployed = { editor: { description: "Edits", model: "openai:gpt-4o-mini" }, writer: AGENTS.writer };
  Object.assign(worker, await startWorker({ persistDir, vars: { ...anthropicVars(anthropic), ...openaiVars(openai), AGENTS: JSON.stringify(redeployed) } }));
  const r = await api(worker.url, "POST", `/v1/conversations/${supportConversation}/messages`, { message: "Still there?" });
  assert.equal(r.status, 409);
  assert.match((await r.json()).error.message, /agent `support`, which this deployment no longer declares/);
  const listed = (await (await api(worker.url, "GET", "/v1/conversations?limit=100")).json()).conversations;
  assert.ok(listed.some((c) => c.agent === "writer") && !listed.some((c) => c.agent === "editor"), "none moved to the new default");
});
