// Artifacts end to end: the model creates and patches one through the `artifacts` tools (one
// patch failing), the stream carries `data-artifact` parts, every version reads back over HTTP,
// the system prompt the provider receives carries the filled-in template and the artifact index,
// and a user's PUT is a new version the model sees at its next call.

import assert from "node:assert/strict";
import { after, test } from "node:test";
import { api, readUiStream, setup } from "./harness.mjs";

// Registered before setup's: runs first, before the Worker stops.
after(() => {
  anthropic.respond = null;
});
const { anthropic, worker } = setup({ vars: { DEFAULT_MODEL: "anthropic:claude-sonnet-4-5" } });

/** The artifact a tool result in the provider's request names. */
function lastResult(body) {
  const blocks = body.messages.flatMap((m) => (Array.isArray(m.content) ? m.content : []));
  const result = blocks.filter((b) => b.type === "tool_result").at(-1);
  return result && { error: result.is_error === true, content: result.content };
}

test("the model creates and patches an artifact; versions, parts and the index follow", async () => {
  const r = await api(worker.url, "POST", "/v1/conversations", { system: "Today is {{date}}. You help {{user}} as {{model}}." });
  const { id } = await r.json();
  let artifactId;
  const calls = [];
  // Each LLM call answers the previous tool result: create, patch, a failing patch, patch, text.
  anthropic.respond = (body) => {
    calls.push(body);
    const step = calls.length;
    const previous = lastResult(body);
    if (step === 2) artifactId = JSON.parse(previous.content).artifact.id;
    const call = (name, input) => ({ tools: [{ id: `toolu_${step}`, name, input }] });
    switch (step) {
      case 1: return call("create_artifact", { title: "Trip plan", kind: "json", content: JSON.stringify({ steps: ["book"] }) });
      case 2: return call("patch_artifact", { id: artifactId, patch: [{ op: "add", path: "/steps/-", value: "pack" }] });
      case 3: return call("patch_artifact", { id: artifactId, patch: [{ op: "replace", path: "/steps/0", value: "BOOK" }, { op: "remove", path: "/budget" }] });
      case 4: return call("patch_artifact", { id: artifactId, patch: [{ op: "replace", path: "/steps/0", value: "book early" }] });
      default: return { text: "The plan is ready." };
    }
  };
  const { chunks } = await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Plan my trip." }));
  anthropic.respond = null;
  assert.equal(calls.length, 5);

  const parts = chunks.filter((c) => c.type === "data-artifact");
  assert.deepEqual(parts.map((p) => p.data.version), [1, 2, 3], "one part per new version");
  for (const p of parts) assert.deepEqual(p, { type: "data-artifact", id: artifactId, data: { id: artifactId, title: "Trip plan", kind: "json", version: p.data.version } });
  const failed = chunks.find((c) => c.type === "tool-output-error");
  assert.match(failed.errorText, /operation 1 \(remove at `\/budget`\) failed/);
  assert.equal(lastResult(calls[3]).error, true, "the model read the failure");

  // Every version reads back; the failed patch wrote none.
  const read = async (query = "") => {
    const res = await api(worker.url, "GET", `/v1/conversations/${id}/artifacts/${artifactId}${query}`);
    assert.equal(res.status, 200, await res.clone().text());
    return res.json();
  };
  assert.deepEqual(JSON.parse((await read("?version=1")).content), { steps: ["book"] });
  assert.deepEqual(JSON.parse((await read("?version=2")).content), { steps: ["book", "pack"] });
  const latest = await read();
  assert.equal(latest.version, 3);
  assert.equal(latest.author, "model");
  assert.deepEqual(JSON.parse(latest.content), { steps: ["book early", "pack"] });
  assert.equal((await api(worker.url, "GET", `/v1/conversations/${id}/artifacts/${artifactId}?version=4`)).status, 404);
  const listed = await (await api(worker.url, "GET", `/v1/conversations/${id}/artifacts`)).json();
  assert.deepEqual(listed.artifacts.map((a) => [a.id, a.version, a.kind]), [[artifactId, 3, "json"]]);

  // The system prompt: the template filled in, then the index as it stood before each call.
  const today = new Date().toISOString().slice(0, 10);
  assert.equal(calls[0].system, `Today is ${today}. You help anonymous as anthropic:claude-sonnet-4-5.`);
  assert.match(calls[1].system, new RegExp(`\\n\\nArtifacts in this conversation.*\\n- ${artifactId} "Trip plan" \\(json, version 1\\)`, "s"));
  assert.match(calls[3].system, /\(json, version 2\)/, "the failed patch left version 2");
  assert.match(calls[4].system, /\(json, version 3\)/);
});

test("a user's PUT is a new version the model sees; stale and bad ones are refused", async () => {
  const { id } = await (await api(worker.url, "POST", "/v1/conversations", {})).json();
  const put = (aid, body) => api(worker.url, "PUT", `/v1/conversations/${id}/artifacts/${aid}`, body);
  const created = await put("notes", { title: "Notes", kind: "markdown", content: "# Notes\n- milk" });
  assert.equal(created.status, 201, await created.clone().text());
  assert.equal((await created.json()).author, "user");
  const second = await put("notes", { content: "# Notes\n- milk\n- eggs", base_version: 1 });
  assert.equal(second.status, 200);
  assert.equal((await second.json()).version, 2);
  const stale = await put("notes", { content: "# Notes", base_version: 1 });
  assert.equal(stale.status, 409);
  assert.match((await stale.json()).error.message, /version 2/);
  assert.equal((await put("new", { content: "x" })).status, 404, "there is none to update; a new artifact needs a title and kind");
  assert.equal((await put("data", { title: "Data", kind: "json", content: "{not json" })).status, 400);
  const big = await put("big", { title: "Big", kind: "text", content: "x".repeat(300 * 1024) });
  assert.equal(big.status, 413);
  assert.equal((await api(worker.url, "GET", `/v1/conversations/${id}/artifacts/nope`)).status, 404);

  anthropic.script({ text: "Noted." });
  await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "What is on my list?" }));
  const sent = anthropic.requests.at(-1).body;
  assert.match(sent.system, /- notes "Notes" \(markdown, version 2\): # Notes/);

  // Deleting the conversation deletes its artifacts.
  assert.equal((await api(worker.url, "DELETE", `/v1/conversations/${id}`)).status, 204);
  assert.equal((await api(worker.url, "GET", `/v1/conversations/${id}/artifacts`)).status, 404);
});

test("toolsets: chosen per conversation, narrowed per message, and artifacts join once one exists", async () => {
  const offered = () => anthropic.requests.at(-1).body.tools.map((t) => t.name);
  const send = async (id, body) => {
    anthropic.script({ text: "Ok." });
    await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Hi.", ...body }));
    return offered();
  };
  const unknown = await api(worker.url, "POST", "/v1/conversations", { toolsets: ["nope"] });
  assert.equal(unknown.status, 400);
  assert.match((await unknown.json()).error.message, /no toolset `nope`; this deployment has artifacts/);

  // No toolsets: only the tools in none (current_time, update_plan).
  const bare = (await (await api(worker.url, "POST", "/v1/conversations", { toolsets: [] })).json()).id;
  assert.deepEqual((await send(bare, {})).sort(), ["current_time", "update_plan"]);
  assert.equal((await (await api(worker.url, "GET", `/v1/conversations/${bare}`)).json()).toolsets.length, 0);
  // An artifact appears (the user's): the artifacts set joins.
  await api(worker.url, "PUT", `/v1/conversations/${bare}/artifacts/todo`, { title: "Todo", kind: "text", content: "- call mum" });
  assert.ok((await send(bare, {})).includes("patch_artifact"));

  // All by default; one message narrows its own turn only.
  const all = (await (await api(worker.url, "POST", "/v1/conversations", {})).json()).id;
  assert.ok((await send(all, {})).includes("create_artifact"));
  assert.ok(!(await send(all, { toolsets: [] })).includes("create_artifact"));
  assert.ok((await send(all, {})).includes("create_artifact"));
  const bad = await api(worker.url, "POST", `/v1/conversations/${all}/messages`, { message: "Hi.", toolsets: ["nope"] });
  assert.equal(bad.status, 400);
});
