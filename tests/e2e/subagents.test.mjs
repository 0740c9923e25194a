// Sub-agents: an agent calls another as a tool (`{"type": "agent"}` in its `tools`). The child
// runs in a child conversation of its own object; its work streams into the parent's answer as
// the call's preliminary outputs, which a stock `readUIMessageStream` rebuilds; the parent's
// model sees only the child's answer (its text, or its typed answer), or a failure it can act on.
// Two children at once on two providers, a typed child, one refused for its budget, the
// toolsets cut to the parent's, cancel and delete of the parent, wrangler dev killed mid-child
// and started again; and a child's call that needs approval asked of the parent, answered there
// (one and two agents deep, across a restart).

import assert from "node:assert/strict";
import { test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { api, readUiStream, setup, startWorker, uiMessage } from "./harness.mjs";

const CITY = {
  type: "object",
  schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
};

const AGENTS = {
  lead: {
    description: "Leads the work and asks the others",
    system: "You are the lead.",
    model: "anthropic:claude-sonnet-4-5",
    tools: [
      "current_time",
      { type: "agent", agent: "researcher" },
      { type: "agent", agent: "critic", history: "summary" },
      { type: "agent", agent: "extractor", name: "extract_city" },
      { type: "agent", agent: "pricey" },
      { type: "agent", agent: "planner" },
      { type: "agent", agent: "writer" },
      { type: "agent", agent: "manager" },
    ],
  },
  // Its tool waits for a person's approval (APPROVAL_REQUIRED_TOOLS), asked of the parent.
  writer: { description: "Writes documents", model: "openai:gpt-4o-mini", toolsets: ["artifacts"], tools: ["create_artifact"] },
  // Hands the conversation over instead of asking.
  triage: { description: "Sends each request where it belongs", model: "anthropic:claude-sonnet-4-5", tools: ["current_time", { type: "handoff", agent: "billing" }] },
  billing: { description: "Answers questions about invoices", system: "You are the billing agent.", model: "openai:gpt-4o-mini", tools: [] },
  // Two agents deep: the lead asks the manager, which asks the writer.
  manager: { description: "Has the writer write", model: "openai:gpt-4o-mini", tools: [{ type: "agent", agent: "writer" }] },
  researcher: { description: "Finds facts", system: "You are the researcher.", model: "openai:gpt-4o-mini", tools: ["current_time"] },
  critic: { description: "Critiques a plan", system: "You are the critic.", model: "anthropic:claude-haiku-4-5", tools: [] },
  extractor: { description: "Names the city a text is about", model: "openai:gpt-4o-mini", tools: [], output: CITY },
  pricey: { description: "Costs more than anyone may spend", model: "openai:gpt-pricey", tools: [] },
  planner: { description: "Plans, with every toolset", model: "openai:gpt-4o-mini" },
};

const vars = {
  AGENTS: JSON.stringify(AGENTS),
  // Budgets on: a child's calls reserve on the same user's spend object as its parent's. The
  // pricey model's smallest call (256 tokens) costs more than the whole budget.
  USER_BUDGET_USD: "5",
  APPROVAL_REQUIRED_TOOLS: "create_artifact",
  MODELS: JSON.stringify([{ id: "openai:gpt-pricey", context_window: 128000, max_output_tokens: 4096, price: { input: 100000, output: 100000, cache_read: 0, cache_write: 0 } }]),
};
const e2e = setup({ providers: ["anthropic", "openai"], vars });
const { anthropic, openai, persistDir } = e2e;
let worker = e2e.worker;

const get = async (path) => (await api(worker.url, "GET", path)).json();
const history = async (id) => (await get(`/v1/conversations/${id}/messages`)).messages;
const send = async (id, message) => readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message }));
const openaiSystem = (body) => body.messages.filter((m) => m.role === "system" || m.role === "developer").map((m) => m.content).join("");
const anthropicSystem = (body) => (typeof body.system === "string" ? body.system : body.system.map((b) => b.text).join(""));
/** The tool results an Anthropic request carries, by call id: [content, is_error]. */
const toolResults = (body) => Object.fromEntries(body.messages.flatMap((m) => (Array.isArray(m.content) ? m.content : []))
  .filter((b) => b.type === "tool_result")
  .map((b) => [b.tool_use_id, [typeof b.content === "string" ? b.content : b.content.map((c) => c.text).join(""), !!b.is_error]]));
const childrenOf = async (id) => (await get(`/v1/conversations?parent=${id}&limit=100`)).conversations;
const untilTrue = async (check, ms, what) => {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
};


test("a parent asks two children at once, on two providers, streams their work and answers from both", async () => {
  const id = await e2e.create({ agent: "lead" });
  const research = "Oslo has about 700,000 people and is the capital of Norway. ".repeat(4);
  anthropic.script(
    { text: "I'll ask both.", tools: [
      { id: "toolu_r1", name: "researcher", input: { task: "Find Oslo's population" } },
      { id: "toolu_c1", name: "critic", input: { task: "Critique the plan to visit Oslo" } },
    ] },
    // The critic (a child on the same provider) answers while the researcher streams.
    { text: "The plan is sound." },
    { text: "Oslo: about 700,000 people; the plan is sound." },
  );
  openai.script({ text: research, writes: "event", gapMs: 15 });
  const before = { anthropic: anthropic.requests.length, openai: openai.requests.length };
  const { chunks } = await send(id, "Plan a trip to Oslo");

  // The parent's model saw both answers, and only them.
  assert.equal(anthropic.requests.length, before.anthropic + 3);
  const results = toolResults(anthropic.requests.at(-1).body);
  assert.deepEqual(results.toolu_r1, [research, false]);
  assert.deepEqual(results.toolu_c1, ["The plan is sound.", false]);
  // Each child called its own model with its own instructions; the critic (history: summary)
  // was given the parent's latest exchanges, the researcher only its task.
  const researcher = openai.requests[before.openai].body;
  assert.equal(researcher.model, "gpt-4o-mini");
  assert.match(openaiSystem(researcher), /You are the researcher/);
  assert.deepEqual(researcher.messages.filter((m) => m.role === "user").map((m) => m.content), ["Find Oslo's population"]);
  const critic = anthropic.requests.slice(before.anthropic).find((r) => r.body.model === "claude-haiku-4-5").body;
  assert.match(anthropicSystem(critic), /You are the critic/);
  const criticTask = JSON.stringify(critic.messages);
  assert.match(criticTask, /user: Plan a trip to Oslo/);
  assert.match(criticTask, /Your task:\\nCritique the plan to visit Oslo/);

  // The stream: each call's input, the child's message forming, then its answer.
  const preliminary = chunks.filter((c) => c.type === "tool-output-available" && c.preliminary);
  const researching = preliminary.filter((c) => c.toolCallId === "toolu_r1");
  assert.ok(researching.length >= 2, `the researcher's work shown as it formed (${researching.length} outputs)`);
  const texts = researching.map((c) => c.output.parts.filter((p) => p.type === "text").map((p) => p.text).join(""));
  assert.ok(texts.every((t, i) => i === 0 || t.length >= texts[i - 1].length), "its text grows");
  assert.ok(texts.at(-1).length > 0 && research.startsWith(texts.at(-1)), texts.at(-1));
  assert.equal(researching[0].output.agent, "researcher");
  const finals = chunks.filter((c) => c.type === "tool-output-available" && !c.preliminary);
  assert.deepEqual(finals.map((c) => [c.toolCallId, c.output]).sort(), [["toolu_c1", "The plan is sound."], ["toolu_r1", research]]);
  for (const c of preliminary) {
    const input = chunks.findIndex((x) => x.type === "tool-input-available" && x.toolCallId === c.toolCallId);
    assert.ok(input >= 0 && input < chunks.indexOf(c), "a preliminary output follows its call's input");
  }
  // A stock client rebuilds the message: each agent tool's part ends with the child's answer.
  const message = await uiMessage(chunks);
  const part = message.parts.find((p) => p.toolCallId === "toolu_r1");
  assert.equal(part.type, "tool-researcher");
  assert.equal(part.state, "output-available");
  assert.equal(part.output, research);
  assert.ok(!part.preliminary, "the final output is not preliminary");

  // The children are conversations of their own, listed under the parent and not in the list.
  const children = await childrenOf(id);
  assert.deepEqual(children.map((c) => [c.agent, c.tool_call_id, c.parent]).sort(), [["critic", "toolu_c1", id], ["researcher", "toolu_r1", id]]);
  const listed = (await get("/v1/conversations?limit=100")).conversations.map((c) => c.id);
  assert.ok(listed.includes(id) && !children.some((c) => listed.includes(c.id)), "children are not in the user's list");
  assert.equal(researching[0].output.conversation_id, children.find((c) => c.agent === "researcher").id);
  const child = children.find((c) => c.agent === "researcher");
  const shown = await get(`/v1/conversations/${child.id}`);
  assert.deepEqual([shown.parent, shown.tool_call_id, shown.status], [id, "toolu_r1", "idle"]);
  const h = await history(child.id);
  assert.deepEqual(h.map((m) => m.kind), ["user", "assistant"]);
  assert.equal(h[1].content[0].text, research);
  // It answers its parent only: a user's own message to it is refused, and changes nothing.
  const direct = await api(worker.url, "POST", `/v1/conversations/${child.id}/messages`, { message: "Ignore your task" });
  assert.equal(direct.status, 409);
  assert.match((await direct.json()).error.message, /sub-agent's/);
  assert.equal((await history(child.id)).length, 2);
  // Nor does it run schedules: a turn of its own would take it off its parent's task.
  const scheduled = await api(worker.url, "POST", `/v1/conversations/${child.id}/schedules`, { instruction: "Check again", delay_seconds: 600 });
  assert.equal(scheduled.status, 409);
  assert.deepEqual((await get(`/v1/conversations/${child.id}/schedules`)).schedules, []);
});

test("a child with a typed answer gives its parent the object", async () => {
  const id = await e2e.create({ agent: "lead" });
  anthropic.script(
    { tools: [{ id: "toolu_x1", name: "extract_city", input: { task: "Which city is 'the capital of Norway'?" } }] },
    { text: "It is Oslo." },
  );
  openai.script({ text: JSON.stringify({ city: "Oslo" }) });
  const before = openai.requests.length;
  const { chunks } = await send(id, "Which city?");
  // Asked in the provider's structured form; its object is the call's result.
  assert.equal(openai.requests[before].body.response_format.type, "json_schema");
  assert.deepEqual(toolResults(anthropic.requests.at(-1).body).toolu_x1, [JSON.stringify({ city: "Oslo" }), false]);
  const final = chunks.find((c) => c.type === "tool-output-available" && !c.preliminary && c.toolCallId === "toolu_x1");
  assert.deepEqual(final.output, { city: "Oslo" });
  const shown = chunks.filter((c) => c.preliminary && c.toolCallId === "toolu_x1").at(-1);
  assert.ok(shown?.output.output, "the child's typed answer shows as it forms");
});

test("a child its budget cannot cover comes back as limit_reached, which the parent's model reads", async () => {
  const id = await e2e.create({ agent: "lead" });
  anthropic.script(
    { tools: [{ id: "toolu_p1", name: "pricey", input: { task: "Think very hard" } }] },
    { text: "That agent is out of budget." },
  );
  const before = openai.requests.length;
  const { chunks } = await send(id, "Ask the pricey one");
  assert.equal(openai.requests.length, before, "the pricey model was never called");
  const [content, isError] = toolResults(anthropic.requests.at(-1).body).toolu_p1;
  assert.ok(isError);
  const failure = JSON.parse(content);
  assert.deepEqual([failure.ok, failure.status, failure.retryable], [false, "limit_reached", false]);
  assert.match(failure.message, /budget/);
  const error = chunks.find((c) => c.type === "tool-output-error" && c.toolCallId === "toolu_p1");
  assert.deepEqual(JSON.parse(error.errorText), failure);
  // Refused before its turn: the child keeps nothing of it.
  const [child] = await childrenOf(id);
  assert.deepEqual(await history(child.id), []);
});

test("a child gets no toolset its parent's conversation left out", async () => {
  const id = await e2e.create({ agent: "lead", toolsets: ["artifacts"] });
  anthropic.script(
    { tools: [{ id: "toolu_s1", name: "planner", input: { task: "Plan a reminder" } }] },
    { text: "Planned." },
  );
  openai.script(
    { tools: [{ id: "call_s1", name: "schedule_turn", input: { instruction: "remind me", delay_seconds: 120 } }] },
    { text: "I cannot schedule here." },
  );
  const before = openai.requests.length;
  await send(id, "Remind me later");
  const offered = openai.requests[before].body.tools.map((t) => t.function.name);
  assert.ok(offered.includes("create_artifact"), offered.join());
  assert.ok(!offered.some((n) => n.includes("schedule")), `no schedules toolset: ${offered}`);
  // Its call of a tool it was not given ran nothing.
  const [child] = await childrenOf(id);
  assert.deepEqual(child.toolsets, ["artifacts"]);
  const result = (await history(child.id)).find((m) => m.kind === "tool_result");
  assert.ok(result.is_error && /unknown tool `schedule_turn`/.test(result.content), JSON.stringify(result));
  assert.equal((await get(`/v1/conversations/${child.id}/schedules`)).schedules.length, 0);
});

test("cancelling the parent stops its child mid-stream; deleting the parent deletes its children", async () => {
  const id = await e2e.create({ agent: "lead" });
  anthropic.script({ tools: [{ id: "toolu_k1", name: "researcher", input: { task: "Read everything" } }] });
  openai.script({ text: "I am reading a great deal of material, slowly. ".repeat(40), writes: "event", gapMs: 30 });
  const before = openai.requests.length;
  const reading = api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Go" }).then(readUiStream);
  await untilTrue(async () => openai.requests.length > before && (await childrenOf(id)).length === 1, 20_000, "the child to start");
  const [child] = await childrenOf(id);
  await untilTrue(async () => (await get(`/v1/conversations/${child.id}`)).status === "running", 10_000, "the child's turn");
  // A reader re-attaching to the parent's stream (a reload) gets the child's progress too.
  const attached = await fetch(`${worker.url}/v1/conversations/${id}/stream`);
  assert.equal(attached.status, 200);
  const reader = attached.body.getReader();
  let seen = "";
  while (!/"preliminary":true/.test(seen)) {
    const { value, done } = await reader.read();
    if (done) break;
    seen += Buffer.from(value).toString("utf8");
  }
  await reader.cancel();
  const progress = seen.split("\n\n").filter((f) => f.includes('"preliminary":true')).map((f) => JSON.parse(f.slice(6)));
  assert.ok(progress.length > 0 && progress[0].toolCallId === "toolu_k1", seen.slice(0, 500));
  assert.equal(progress[0].output.conversation_id, child.id);
  await sleep(500);
  assert.equal((await api(worker.url, "POST", `/v1/conversations/${id}/cancel`)).status, 202);
  const { chunks } = await reading;
  assert.ok(chunks.some((c) => c.type === "abort"), "the parent's turn ended cancelled");
  const error = chunks.find((c) => c.type === "tool-output-error" && c.toolCallId === "toolu_k1");
  assert.equal(JSON.parse(error.errorText).status, "cancelled");
  // The child was stopped, not left to run: its answer is kept cut off, marked aborted.
  await untilTrue(async () => (await get(`/v1/conversations/${child.id}`)).status === "idle", 10_000, "the child to stop");
  const h = await history(child.id);
  assert.equal(h.at(-1).stop_reason, "aborted", JSON.stringify(h).slice(0, 2000));
  assert.ok(h.at(-1).content[0].text.length < 40 * 48, "cut off before the end");

  assert.equal((await api(worker.url, "DELETE", `/v1/conversations/${id}`)).status, 204);
  assert.equal((await api(worker.url, "GET", `/v1/conversations/${child.id}`)).status, 404);
  assert.equal((await api(worker.url, "GET", `/v1/conversations/${child.id}/messages`)).status, 404);
});

test("GET /v1/agents says which agents each asks and hands to", async () => {
  const { agents } = await get("/v1/agents");
  const lead = agents.find((a) => a.name === "lead");
  assert.deepEqual(lead.agents, ["researcher", "critic", "extractor", "pricey", "planner", "writer", "manager"]);
  assert.deepEqual(agents.find((a) => a.name === "triage").handoffs, ["billing"]);
  assert.deepEqual(agents.find((a) => a.name === "billing").agents, []);
});

test("`parent` must be a conversation id", async () => {
  const r = await api(worker.url, "GET", "/v1/conversations?parent=nope");
  assert.equal(r.status, 400);
  assert.match((await r.json()).error.message, /`parent`/);
});

test("wrangler dev killed mid-child and started again: the parent re-attaches to the same child, which ran once", async () => {
  const id = await e2e.create({ agent: "lead" });
  anthropic.script({ tools: [{ id: "toolu_d1", name: "researcher", input: { task: "Survive a restart" } }] });
  openai.script({ text: "This answer is cut off when the runtime dies. ".repeat(20), writes: "event", gapMs: 40 });
  const before = openai.requests.length;
  const dying = api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Go on" }).then((r) => r.text()).catch(() => "");
  await untilTrue(() => openai.requests.length > before, 20_000, "the child's model call");
  await sleep(2500); // a batch of the child's stream (and its partial answer) saved
  await worker.kill();
  await dying;
  // After the restart the child's turn is finished by its alarm and the parent's by its own;
  // the parent's call of the child reaches the same child and reads its answer.
  openai.script({ text: "Finished after the restart." });
  anthropic.script({ text: "The child finished." });
  worker = await startWorker({ persistDir, vars: { ...vars, ANTHROPIC_BASE_URL: anthropic.url, ANTHROPIC_API_KEY: "sk-ant-loopback", OPENAI_BASE_URL: `${openai.url}/v1`, OPENAI_API_KEY: "sk-loopback" } });
  Object.assign(e2e.worker, worker);
  const h = await untilTrue(async () => {
    const h = await history(id);
    return h.at(-1)?.kind === "assistant" && h.at(-1).content?.[0]?.text === "The child finished." && h;
  }, 90_000, "the parent's turn to be finished");
  const children = await childrenOf(id);
  assert.equal(children.length, 1, "one child, reached again");
  const child = await history(children[0].id);
  assert.equal(child.filter((m) => m.kind === "user").length, 1, "the child's task was sent once");
  assert.equal(child.at(-1).content[0].text, "Finished after the restart.");
  const result = h.find((m) => m.kind === "tool_result" && m.tool_call_id === "toolu_d1");
  assert.ok(!result.is_error && result.content === "Finished after the restart.", JSON.stringify(result));
});

/** Sends `body` (a message, or answers) to conversation `id` and reads the stream. */
const post = async (id, body) => readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, body));

test("a child's call that needs approval is asked of the parent, and the answer given there finishes it", async () => {
  const id = await e2e.create({ agent: "lead" });
  anthropic.script({ text: "The writer will do it.", tools: [{ id: "toolu_w1", name: "writer", input: { task: "Write a haiku as an artifact" } }] });
  openai.script({ text: "Writing.", tools: [{ id: "call_a1", name: "create_artifact", input: { title: "Haiku", kind: "markdown", content: "An old silent pond" } }] });
  const first = await post(id, { message: "Have the writer write a haiku" });
  // The child's call, under an id naming the call that asked and the child's own, then its
  // approval request; the parent's turn pauses.
  const nested = "toolu_w1/call_a1";
  const input = first.chunks.find((c) => c.type === "tool-input-available" && c.toolCallId === nested);
  assert.equal(input?.toolName, "create_artifact");
  assert.deepEqual(first.chunks.find((c) => c.type === "tool-approval-request"), { type: "tool-approval-request", approvalId: nested, toolCallId: nested });
  assert.equal(first.chunks.at(-1).finishReason, "tool-calls");
  const waiting = first.chunks.filter((c) => c.type === "tool-output-available" && c.toolCallId === "toolu_w1" && !c.preliminary);
  assert.equal(waiting.at(-1).output.status, "awaiting_approval");
  // A stock client shows the child's call waiting for approval in the parent's message.
  const message = await uiMessage(first.chunks);
  const part = message.parts.find((p) => p.toolCallId === nested);
  assert.deepEqual([part.type, part.state, part.approval.id], ["tool-create_artifact", "approval-requested", nested]);
  const shown = await get(`/v1/conversations/${id}`);
  assert.equal(shown.status, "awaiting_approval");
  assert.deepEqual(shown.waiting_approval.map((w) => [w.tool_call_id, w.tool_name]), [[nested, "create_artifact"]]);
  const [child] = await childrenOf(id);
  assert.equal((await get(`/v1/conversations/${child.id}`)).status, "awaiting_approval");
  assert.equal((await get(`/v1/conversations/${child.id}/artifacts`)).artifacts.length, 0, "nothing written before the approval");

  // Approved on the parent: the child runs its call and finishes, and so does the parent.
  openai.script({ text: "Written." });
  anthropic.script({ text: "The haiku is written." });
  const before = anthropic.requests.length;
  const second = await post(id, { approvals: [{ tool_call_id: nested, approved: true }] });
  const outcome = second.chunks.find((c) => c.type === "tool-output-available" && c.toolCallId === nested);
  assert.ok(outcome?.output?.artifact, JSON.stringify(outcome));
  const final = second.chunks.find((c) => c.type === "tool-output-available" && c.toolCallId === "toolu_w1" && !c.preliminary);
  assert.equal(final.output, "Written.");
  assert.deepEqual(toolResults(anthropic.requests[before].body).toolu_w1, ["Written.", false]);
  assert.equal((await get(`/v1/conversations/${child.id}/artifacts`)).artifacts.length, 1);
  assert.equal((await get(`/v1/conversations/${id}`)).status, "idle");
  // An id under a call the parent does not wait on is refused.
  const stale = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { approvals: [{ tool_call_id: "toolu_zz/call_a1", approved: true }] });
  assert.equal(stale.status, 409);
});

test("two agents deep, the approval survives wrangler dev killed and restarted, and a denial reaches the child", async () => {
  const id = await e2e.create({ agent: "lead" });
  anthropic.script({ tools: [{ id: "toolu_m1", name: "manager", input: { task: "Have a note written" } }] });
  openai.script(
    { tools: [{ id: "call_m1", name: "writer", input: { task: "Write the note" } }] },
    { tools: [{ id: "call_a2", name: "create_artifact", input: { title: "Note", kind: "markdown", content: "Remember the milk" } }] },
  );
  const first = await post(id, { message: "Get a note written" });
  const nested = "toolu_m1/call_m1/call_a2";
  assert.ok(first.chunks.some((c) => c.type === "tool-approval-request" && c.approvalId === nested), JSON.stringify(first.chunks.map((c) => c.toolCallId)));
  const [manager] = await childrenOf(id);
  const [writer] = await childrenOf(manager.id);
  assert.equal(writer.agent, "writer");
  assert.equal((await get(`/v1/conversations/${manager.id}`)).waiting_approval[0].tool_call_id, "call_m1/call_a2");

  await worker.kill();
  worker = await startWorker({ persistDir, vars: { ...vars, ANTHROPIC_BASE_URL: anthropic.url, ANTHROPIC_API_KEY: "sk-ant-loopback", OPENAI_BASE_URL: `${openai.url}/v1`, OPENAI_API_KEY: "sk-loopback" } });
  Object.assign(e2e.worker, worker);
  const shown = await get(`/v1/conversations/${id}`);
  assert.deepEqual([shown.status, shown.waiting_approval?.[0]?.tool_call_id], ["awaiting_approval", nested]);

  // Denied: the writer is told, answers without it, and so do the manager and the lead.
  openai.script({ text: "The note was not approved." }, { text: "No note: it was denied." });
  anthropic.script({ text: "The note was denied." });
  const second = await post(id, { approvals: [{ tool_call_id: nested, approved: false, reason: "not now" }] });
  assert.ok(second.chunks.some((c) => c.type === "tool-output-denied" && c.toolCallId === nested), JSON.stringify(second.chunks.filter((c) => c.toolCallId)));
  assert.equal(second.chunks.find((c) => c.type === "tool-output-available" && c.toolCallId === "toolu_m1" && !c.preliminary)?.output, "No note: it was denied.");
  const writerHistory = await history(writer.id);
  const denied = writerHistory.find((m) => m.kind === "tool_result");
  assert.ok(denied.is_error && /denied/.test(denied.content) && /not now/.test(denied.content), JSON.stringify(denied));
  assert.equal((await get(`/v1/conversations/${writer.id}/artifacts`)).artifacts.length, 0);
  assert.equal((await history(id)).at(-1).content[0].text, "The note was denied.");
});

test("a handoff moves the conversation to another agent from the next step: its instructions, model and tools, in the same stream and after", async () => {
  const id = await e2e.create({ agent: "triage" });
  anthropic.script({ text: "Let me get billing.", tools: [{ id: "toolu_h1", name: "transfer_to_billing", input: { reason: "an invoice question" } }] });
  openai.script({ text: "Billing here: your invoice is paid." });
  const before = { anthropic: anthropic.requests.length, openai: openai.requests.length };
  const { chunks } = await post(id, { message: "Is my invoice paid?" });
  const offered = anthropic.requests[before.anthropic].body.tools.map((t) => t.name);
  assert.ok(offered.includes("transfer_to_billing"), offered.join());
  // One stream: the handoff's call, the switch, then the other agent's answer.
  const switched = chunks.find((c) => c.type === "data-agent-switch");
  assert.deepEqual(switched?.data, { from: "triage", to: "billing" });
  assert.deepEqual(chunks.find((c) => c.type === "tool-output-available" && c.toolCallId === "toolu_h1").output, { handed_to: "billing" });
  const said = chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join("");
  assert.ok(said.endsWith("Billing here: your invoice is paid."), said);
  const after = chunks.slice(chunks.indexOf(switched)).filter((c) => c.type === "text-delta").map((c) => c.delta).join("");
  assert.equal(after, "Billing here: your invoice is paid.", "the other agent's answer follows the switch");
  assert.equal(anthropic.requests.length, before.anthropic + 1, "triage answered once");
  const billing = openai.requests[before.openai].body;
  assert.equal(billing.model, "gpt-4o-mini");
  assert.match(openaiSystem(billing), /You are the billing agent\./);
  assert.ok(!billing.tools?.some((t) => t.function.name === "current_time"), "billing's own tools (none)");
  assert.match(JSON.stringify(billing.messages), /Is my invoice paid\?/);
  // Kept: the conversation is billing's, and its next turn is too.
  assert.equal((await get(`/v1/conversations/${id}`)).agent, "billing");
  const h = await history(id);
  assert.deepEqual(h.map((m) => m.kind), ["user", "assistant", "tool_result", "context_note", "assistant"]);
  assert.match(h[3].text, /handed from the agent `triage` to `billing`/);
  openai.script({ text: "Still billing." });
  await post(id, { message: "And the next one?" });
  assert.equal(openai.requests.length, before.openai + 2);
  assert.equal(anthropic.requests.length, before.anthropic + 1);
  // A typed answer's turn is not handed over: it was checked against the agent it began with.
  const typedId = await e2e.create({ agent: "triage" });
  anthropic.script({ text: JSON.stringify({ city: "Oslo" }) });
  await post(typedId, { message: "Which city?", output: CITY });
  const typedOffer = (anthropic.requests.at(-1).body.tools ?? []).map((t) => t.name);
  assert.ok(!typedOffer.includes("transfer_to_billing"), typedOffer.join());
});
