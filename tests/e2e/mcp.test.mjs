// MCP servers as tools end to end: the Python SDK's MCP server (streamable HTTP, sessions, SSE
// answers) on loopback, configured in MCP_SERVERS. The model sees its tools as
// `glossary__<tool>` and calls a fast one, one that fails and one slower than TOOL_TIMEOUT_MS;
// then the server is stopped mid-conversation: its tools answer "unavailable" fast and the
// conversation goes on.

import assert from "node:assert/strict";
import { after, test } from "node:test";
import { api, readUiStream, setup, startMcpServer } from "./harness.mjs";

let mcp, conversation;

// The Worker's vars name the MCP server: they are made once it is up.
const { anthropic, worker, create } = setup({
  prepare: async () => {
    mcp = await startMcpServer();
  },
  then: async () => {
    conversation = await create();
  },
  vars: () => ({
    DEFAULT_MODEL: "anthropic:claude-sonnet-4-5",
    MCP_SERVERS: JSON.stringify([{ name: "glossary", url: mcp.url, headers: { "x-team": "secret:TEAM_TOKEN" } }]),
    TEAM_TOKEN: "team-token-91c4", ALLOW_PRIVATE_TOOL_HOSTS: "true", TOOL_TIMEOUT_MS: "2000",
  }),
});

after(() => {
  mcp?.stop();
});

async function turn(name, input, text = "Done.") {
  anthropic.script({ tools: [{ id: `toolu_${Math.random().toString(36).slice(2, 10)}`, name, input }] }, { text });
  const started = Date.now();
  const { chunks } = await readUiStream(await api(worker.url, "POST", `/v1/conversations/${conversation}/messages`, { message: "Go." }));
  return { chunks, ms: Date.now() - started, ok: chunks.find((c) => c.type === "tool-output-available"), error: chunks.find((c) => c.type === "tool-output-error") };
}

test("the server's tools are offered under its name and a call returns its text", async () => {
  const { ok, chunks } = await turn("glossary__lookup", { term: "edge" });
  // The SDK also sends a str result as structured content (`{result}`); both reach the model.
  const entry = "computing close to the user, in many small data centres";
  assert.deepEqual(ok.output, { status: "ok", result: entry, structured: { result: entry } });
  assert.equal(chunks.at(-1).type, "finish");
  const offered = anthropic.requests.at(-2).body.tools;
  const lookup = offered.find((t) => t.name === "glossary__lookup");
  assert.ok(lookup, `offered: ${offered.map((t) => t.name)}`);
  assert.equal(lookup.input_schema.properties.term.type, "string");
  assert.ok(offered.some((t) => t.name === "glossary__slow_lookup") && offered.some((t) => t.name === "glossary__broken"));
  assert.match(JSON.stringify(anthropic.requests.at(-1).body.messages), /close to the user/);
});

test("an MCP session belongs to one conversation: another conversation, another user's, gets its own", async () => {
  const number = async (id) => {
    anthropic.script({ tools: [{ id: `toolu_${Math.random().toString(36).slice(2, 10)}`, name: "glossary__session_number", input: {} }] }, { text: "Noted." });
    const { chunks } = await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Which session?" }));
    return chunks.find((c) => c.type === "tool-output-available").output.result;
  };
  const other = (await (await api(worker.url, "POST", "/v1/conversations", {})).json()).id;
  const first = await number(conversation);
  assert.equal(await number(conversation), first, "a conversation keeps its session");
  const second = await number(other);
  assert.notEqual(second, first, "another conversation never shares it");
  assert.equal(await number(other), second);
});

test("a failing tool and a tool past TOOL_TIMEOUT_MS become error results the model reads", async () => {
  const broken = await turn("glossary__broken", { term: "edge" });
  const error = JSON.parse(broken.error.errorText);
  assert.equal(error.status, "error");
  // The Python SDK reports a raised exception without its message.
  assert.match(error.message, /^Error executing tool broken/);
  const slow = await turn("glossary__slow_lookup", { term: "edge", seconds: 5 });
  assert.match(slow.error.errorText, /did not finish within 2000 ms/);
  assert.ok(slow.ms < 4_500, `the turn went on after the timeout (${slow.ms} ms)`);
  assert.equal(slow.chunks.at(-1).type, "finish");
});

test("with the server stopped its tools answer unavailable fast and the conversation goes on", async () => {
  mcp.stop();
  for (let i = 0; i < 3; i++) {
    const { error } = await turn("glossary__lookup", { term: "isolate" }, "The glossary is down.");
    assert.match(JSON.parse(error.errorText).message, /could not be reached.*after 3 attempts/);
    // The deployment's URL for the server is configuration: it stays out of what users see.
    assert.doesNotMatch(error.errorText, /127\.0\.0\.1|http:/);
  }
  const { error, ms, chunks } = await turn("glossary__lookup", { term: "isolate" }, "Still down; answering from memory.");
  assert.match(JSON.parse(error.errorText).message, /^unavailable: the MCP server `glossary` failed repeatedly/);
  assert.ok(ms < 2_000, `answered fast (${ms} ms)`);
  assert.ok(chunks.some((c) => c.type === "text-delta"));
  const history = await (await api(worker.url, "GET", `/v1/conversations/${conversation}/messages`)).text();
  assert.ok(!history.includes("team-token-91c4") && !worker.log().includes("team-token-91c4"), "the header secret stays out");
});
