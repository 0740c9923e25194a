// Paused turns across requests: client tools answered with tool_results (also across a restart
// of wrangler dev), approvals approved and denied, and a user who moves on instead.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { anthropicLoopback, anthropicVars, api, freshPersistDir, readUiStream, startWorker } from "./harness.mjs";

let anthropic, worker, persistDir, vars;

before(async () => {
  anthropic = await anthropicLoopback();
  persistDir = freshPersistDir();
  vars = { ...anthropicVars(anthropic), APPROVAL_REQUIRED_TOOLS: "current_time" };
  worker = await startWorker({ persistDir, vars });
});

after(async () => {
  await worker?.stop();
  await anthropic?.close();
});

const pickColor = { name: "pick_color", description: "Ask the user to pick a color", input_schema: { type: "object", properties: { palette: { type: "string" } } } };
const create = async () => (await (await api(worker.url, "POST", "/v1/conversations", {})).json()).id;
const send = async (id, body) => readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, body));
const status = async (id) => (await (await api(worker.url, "GET", `/v1/conversations/${id}`)).json()).status;
const history = async (id) => (await (await api(worker.url, "GET", `/v1/conversations/${id}/messages`)).json()).messages;
const textOf = (chunks) => chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join("");

test("a client tool pauses the turn; its result resumes it in a later request, even after a restart", async () => {
  const id = await create();
  anthropic.script({ text: "Let me ask you.", tools: [{ id: "toolu_pick", name: "pick_color", input: { palette: "warm" } }] });
  const first = await send(id, { message: "Pick a color for me.", tools: [pickColor] });
  assert.deepEqual(first.chunks.find((c) => c.type === "tool-input-available"), { type: "tool-input-available", toolCallId: "toolu_pick", toolName: "pick_color", input: { palette: "warm" } });
  assert.deepEqual(first.chunks.at(-1), { type: "finish", finishReason: "tool-calls" });
  assert.equal(anthropic.requests.at(-1).body.tools.map((t) => t.name).includes("pick_color"), true, "the client tool was offered");
  assert.equal(await status(id), "awaiting_tool_results");

  await worker.stop();
  worker = await startWorker({ persistDir, vars });
  assert.equal(await status(id), "awaiting_tool_results", "the pause survives a restart");

  const unknown = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { tool_results: [{ tool_call_id: "toolu_other", output: "x" }] });
  assert.equal(unknown.status, 409);
  assert.match((await unknown.json()).error.message, /toolu_other.*not waiting/);
  // Answers and a new message in one body are refused whole: nothing is lost, the pause stays.
  const both = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "also, hi", tool_results: [{ tool_call_id: "toolu_pick", output: "red" }] });
  assert.equal(both.status, 400);
  assert.match((await both.json()).error.message, /separate requests/);
  assert.equal(await status(id), "awaiting_tool_results");

  anthropic.script({ text: "Amber it is." });
  const resumed = await send(id, { tool_results: [{ tool_call_id: "toolu_pick", output: { color: "amber" } }], tools: [pickColor] });
  assert.equal(textOf(resumed.chunks), "Amber it is.");
  const results = anthropic.requests.at(-1).body.messages.at(-1).content;
  assert.deepEqual(results, [{ type: "tool_result", tool_use_id: "toolu_pick", content: '{"color":"amber"}' }]);
  const again = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { tool_results: [{ tool_call_id: "toolu_pick", output: "blue" }] });
  assert.equal(again.status, 409, "an answered call cannot be answered twice");
  assert.deepEqual((await history(id)).map((m) => m.kind), ["user", "assistant", "tool_result", "assistant"]);
  assert.equal(await status(id), "idle");
});

test("an approval-required tool waits; approved it runs, denied the model is told", async () => {
  for (const approved of [true, false]) {
    const id = await create();
    anthropic.script({ text: "I need the time.", tools: [{ id: `toolu_time_${approved}`, name: "current_time", input: {} }] });
    const first = await send(id, { message: "What time is it?" });
    assert.deepEqual(first.chunks.find((c) => c.type === "tool-approval-request"), { type: "tool-approval-request", approvalId: `toolu_time_${approved}`, toolCallId: `toolu_time_${approved}` });
    assert.ok(!first.chunks.some((c) => c.type === "tool-output-available"), "nothing ran before approval");
    assert.equal(await status(id), "awaiting_approval");

    anthropic.script({ text: approved ? "It is noon." : "Fine, I will not look." });
    const decided = await send(id, { approvals: [{ tool_call_id: `toolu_time_${approved}`, approved, reason: approved ? undefined : "not now" }] });
    const result = anthropic.requests.at(-1).body.messages.at(-1).content[0];
    if (approved) {
      const output = decided.chunks.find((c) => c.type === "tool-output-available");
      assert.ok(output.output.utc, "the approved tool ran");
      assert.equal(result.is_error, undefined);
    } else {
      assert.deepEqual(decided.chunks.find((c) => c.type === "tool-output-denied"), { type: "tool-output-denied", toolCallId: `toolu_time_${approved}` });
      assert.ok(!decided.chunks.some((c) => c.type === "tool-output-available"));
      assert.equal(result.is_error, true);
      assert.match(result.content, /denied.*not now/);
    }
    assert.equal(await status(id), "idle");
  }
});

test("a new user message instead of results answers the pending calls for the record", async () => {
  const id = await create();
  anthropic.script({ tools: [{ id: "toolu_ignored", name: "pick_color", input: {} }] }, { text: "Sure, something else then." });
  await send(id, { message: "Pick a color.", tools: [pickColor] });
  const { chunks } = await send(id, { message: "Actually, never mind." });
  assert.equal(textOf(chunks), "Sure, something else then.");
  const stored = await history(id);
  assert.deepEqual(stored.map((m) => m.kind), ["user", "assistant", "tool_result", "user", "assistant"]);
  assert.deepEqual([stored[2].tool_call_id, stored[2].is_error, stored[2].content], ["toolu_ignored", true, "no result: the user moved on"]);
  const sent = anthropic.requests.at(-1).body.messages.at(-1).content;
  assert.deepEqual(sent.map((c) => c.type), ["tool_result", "text"]);
});

test("bad tool definitions are 400s", async () => {
  const id = await create();
  const bad = [
    [{ name: "has space", input_schema: { type: "object" } }, /tool name/],
    [{ name: "ok", input_schema: "not a schema" }, /JSON Schema object/],
  ];
  for (const [tool, why] of bad) {
    const r = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "hi", tools: [tool] });
    assert.equal(r.status, 400);
    assert.match((await r.json()).error.message, why);
  }
  const many = Array.from({ length: 65 }, (_, i) => ({ name: `t${i}`, input_schema: { type: "object" } }));
  assert.equal((await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "hi", tools: many })).status, 400);
});
