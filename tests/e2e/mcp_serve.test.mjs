// The deployment as an MCP server (`POST /mcp`): the official TypeScript SDK's client lists
// every agent as `ask_<agent>`, asks one and hears progress while the turn runs, gets a typed
// agent's object as `structuredContent`, continues a conversation, and answers an approval the
// turn paused for; another user's conversation is refused; a 401 names the protected-resource
// metadata (RFC 9728). The official conformance suite's server scenarios run against a Worker
// too, apart from those `mcp_conformance.yml` lists (and `docs/mcp.md` says why).

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import http from "node:http";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ROOT, api, setup, startWorker, freshPersistDir, withinOneRateWindow } from "./harness.mjs";

const AGENTS = {
  helper: { description: "Answers questions.", model: "anthropic:claude-sonnet-4-5", tools: [] },
  clerk: { description: "Tells the time, once allowed.", model: "anthropic:claude-sonnet-4-5", tools: ["current_time"] },
  // Asks the clerk: the clerk's call that needs approval is asked of the lead's caller.
  lead: { description: "Has the clerk look.", model: "anthropic:claude-sonnet-4-5", tools: [{ type: "agent", agent: "clerk" }] },
  // Its smallest call costs more than the whole budget.
  pricey: { description: "Costs more than anyone may spend.", model: "openai:gpt-pricey", tools: [] },
  triage: {
    description: "Sorts a ticket into a queue.",
    model: "openai:gpt-4o-mini",
    tools: [],
    output: { type: "object", schema: { type: "object", properties: { queue: { type: "string" } }, required: ["queue"], additionalProperties: false } },
  },
};
const ISSUER = "https://id.example";
// The API the deployment's HTTP tools call (MCP_EXPOSE_TOOLS offers them over MCP too).
let toolApi;
const toolCalls = [];
const startTools = async () => {
  toolApi = http.createServer((req, res) => {
    toolCalls.push(req.url);
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ forecast: { today: "sunny" } }));
  });
  await new Promise((r) => toolApi.listen(0, "127.0.0.1", r));
};
after(() => new Promise((r) => toolApi.close(r)));
const HTTP_TOOLS = (url) => [
  { name: "weather", description: "Today's weather for a city.", input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }, url: `${url}/weather/{city}`, result: { pointer: "/forecast" } },
  { name: "wire_money", description: "Sends money.", input_schema: { type: "object", properties: { usd: { type: "number" } } }, method: "POST", url: `${url}/wire`, body: { usd: "{usd}" } },
];
const e2e = setup({
  providers: ["anthropic", "openai"],
  prepare: startTools,
  vars: () => ({
    AGENTS: JSON.stringify(AGENTS),
    ALLOW_ANONYMOUS: "false",
    API_KEYS: "alice:sk-alice,bob:sk-bob,erin:sk-erin",
    USER_BUDGET_USD: "5",
    // On (the harness turns it off): 30 a minute per user, the binding's.
    RATE_LIMIT_PER_MINUTE: "30",
    MODELS: JSON.stringify([{ id: "openai:gpt-pricey", context_window: 128000, max_output_tokens: 4096, price: { input: 100000, output: 100000, cache_read: 0, cache_write: 0 } }]),
    APPROVAL_REQUIRED_TOOLS: "current_time,wire_money",
    JWT_ISSUER: ISSUER,
    JWT_SECRET: "mcp-test-secret-of-enough-length-0123456789",
    HTTP_TOOLS: JSON.stringify(HTTP_TOOLS(`http://127.0.0.1:${toolApi.address().port}`)),
    ALLOW_PRIVATE_TOOL_HOSTS: "true",
    MCP_EXPOSE_TOOLS: "true",
  }),
});
const { anthropic, openai } = e2e;
const ALICE = { authorization: "Bearer sk-alice" };
const BOB = { authorization: "Bearer sk-bob" };

/** An SDK client connected to the Worker's `/mcp` as `headers` authorize it. */
async function connect(headers) {
  const client = new Client({ name: "e2e", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(`${e2e.worker.url}/mcp`), { requestInit: { headers } });
  await client.connect(transport);
  return client;
}

/** One JSON-RPC message posted as is. */
const rpc = (body, headers = ALICE) =>
  fetch(`${e2e.worker.url}/mcp`, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });

const anthropicText = (body) => JSON.stringify(body.messages);

test("the SDK's client lists every agent, asks one with progress, and continues its conversation", async () => {
  const client = await connect(ALICE);
  assert.equal(client.getServerVersion().name, "edge-agent");
  const { tools } = await client.listTools();
  // The agents, and the HTTP tools that need no approval.
  assert.deepEqual(tools.map((t) => t.name).sort(), ["ask_clerk", "ask_helper", "ask_lead", "ask_pricey", "ask_triage", "weather"]);
  assert.equal(tools.find((t) => t.name === "ask_triage").outputSchema.required[0], "queue");
  assert.equal(tools.find((t) => t.name === "ask_helper").outputSchema, undefined);

  anthropic.script({ text: "Paris is the capital of France.", gapMs: 20 });
  const notes = [];
  const first = await client.callTool({ name: "ask_helper", arguments: { message: "What is the capital of France?" } }, undefined, {
    onprogress: (p) => notes.push(p),
  });
  assert.equal(first.isError, false);
  assert.equal(first.content[0].text, "Paris is the capital of France.");
  assert.ok(notes.length >= 1 && notes.every((n, i) => n.progress === i + 1), JSON.stringify(notes));
  assert.ok(notes.some((n) => n.message === "writing"), JSON.stringify(notes));
  const id = first.structuredContent.conversation_id;
  // A conversation of the caller's, of that agent, which the API reads like any other.
  const conversation = await (await api(e2e.worker.url, "GET", `/v1/conversations/${id}`, undefined, ALICE)).json();
  assert.equal(conversation.agent, "helper");
  assert.equal(conversation.title, "What is the capital of France?");

  anthropic.script({ text: "About two million people." });
  const second = await client.callTool({ name: "ask_helper", arguments: { message: "How many live there?", conversation_id: id } });
  assert.equal(second.content[0].text, "About two million people.");
  assert.equal(second.structuredContent.conversation_id, id);
  assert.match(anthropicText(anthropic.requests.at(-1).body), /Paris is the capital of France\..*How many live there\?/s);
  const { messages } = await (await api(e2e.worker.url, "GET", `/v1/conversations/${id}/messages`, undefined, ALICE)).json();
  assert.equal(messages.length, 4);
  await client.close();
});

test("a typed agent's answer is its object as structuredContent, checked by the client against its outputSchema", async () => {
  const client = await connect(ALICE);
  await client.listTools();
  openai.script({ text: JSON.stringify({ queue: "billing" }) });
  const result = await client.callTool({ name: "ask_triage", arguments: { message: "I was charged twice." } });
  assert.equal(result.isError, false);
  assert.deepEqual(result.structuredContent, { queue: "billing" });
  assert.deepEqual(JSON.parse(result.content[0].text), { queue: "billing" });
  await client.close();
});

test("a call the turn must have approved comes back as a pending approval, and the next call's answer resumes it", async () => {
  const client = await connect(ALICE);
  anthropic.script({ tools: [{ id: "toolu_t1", name: "current_time", input: {} }] });
  const paused = await client.callTool({ name: "ask_clerk", arguments: { message: "What time is it?" } });
  assert.equal(paused.isError, false);
  const pending = paused.structuredContent;
  assert.equal(pending.status, "awaiting_approval");
  assert.deepEqual(pending.approvals.map((a) => [a.tool_call_id, a.tool]), [["toolu_t1", "current_time"]]);
  assert.match(paused.content[0].text, /a person must approve these calls/);
  const state = await (await api(e2e.worker.url, "GET", `/v1/conversations/${pending.conversation_id}`, undefined, ALICE)).json();
  assert.equal(state.status, "awaiting_approval");

  anthropic.script({ text: "It is noon." });
  const resumed = await client.callTool({
    name: "ask_clerk",
    arguments: { conversation_id: pending.conversation_id, approvals: [{ tool_call_id: "toolu_t1", approved: true }] },
  });
  assert.equal(resumed.content[0].text, "It is noon.");
  // The tool ran: its result is in what the model was sent.
  assert.match(anthropicText(anthropic.requests.at(-1).body), /tool_result.*toolu_t1/s);
  await client.close();
});

test("another user's conversation id is refused, and nothing is added to it", async () => {
  const alice = await connect(ALICE);
  anthropic.script({ text: "Noted." });
  const mine = await alice.callTool({ name: "ask_helper", arguments: { message: "Remember 42." } });
  const id = mine.structuredContent.conversation_id;
  await alice.close();
  const bob = await connect(BOB);
  const calls = anthropic.requests.length;
  const refused = await bob.callTool({ name: "ask_helper", arguments: { message: "What did she say?", conversation_id: id } });
  assert.equal(refused.isError, true);
  assert.match(refused.content[0].text, /does not exist/);
  assert.equal(anthropic.requests.length, calls, "no model was asked");
  const { messages } = await (await api(e2e.worker.url, "GET", `/v1/conversations/${id}/messages`, undefined, ALICE)).json();
  assert.equal(messages.length, 2);
  // Nor may a conversation be continued with another agent's tool.
  const again = await connect(ALICE);
  const other = await again.callTool({ name: "ask_clerk", arguments: { message: "Hi", conversation_id: id } });
  assert.equal(other.isError, true);
  assert.match(other.content[0].text, /belongs to the agent `helper`: ask it with `ask_helper`/);
  await again.close();
  await bob.close();
});

test("a sub-agent's call that needs approval is asked of the MCP caller and answered through the next call", async () => {
  const client = await connect(ALICE);
  anthropic.script(
    { tools: [{ id: "toolu_L", name: "clerk", input: { task: "What time is it?" } }] },
    { tools: [{ id: "toolu_T", name: "current_time", input: {} }] },
  );
  const paused = await client.callTool({ name: "ask_lead", arguments: { message: "Ask the clerk the time." } });
  const pending = paused.structuredContent;
  assert.equal(pending.status, "awaiting_approval", JSON.stringify(paused));
  assert.deepEqual(pending.approvals.map((a) => a.tool_call_id), ["toolu_L/toolu_T"]);
  anthropic.script({ text: "It is noon." }, { text: "The clerk says it is noon." });
  const resumed = await client.callTool({
    name: "ask_lead",
    arguments: { conversation_id: pending.conversation_id, approvals: [{ tool_call_id: "toolu_L/toolu_T", approved: true }] },
  });
  assert.equal(resumed.content[0].text, "The clerk says it is noon.", JSON.stringify(resumed));
  await client.close();
});

test("budgets and the rate limit hold for MCP callers as for any", async () => {
  const client = await connect(ALICE);
  const calls = openai.requests.length;
  const refused = await client.callTool({ name: "ask_pricey", arguments: { message: "Think very hard." } });
  assert.equal(refused.isError, true);
  assert.match(refused.content[0].text, /budget/);
  assert.equal(openai.requests.length, calls, "the pricey model was never called");
  // The message was taken back; the conversation made for it is named, and holds nothing.
  const kept = refused._meta.conversation_id;
  const { messages } = await (await api(e2e.worker.url, "GET", `/v1/conversations/${kept}/messages`, undefined, ALICE)).json();
  assert.deepEqual(messages, []);
  await client.close();

  const erin = await connect({ authorization: "Bearer sk-erin" });
  await withinOneRateWindow(10_000);
  for (let i = 0; i < 30; i++) {
    const ok = await erin.callTool({ name: "weather", arguments: { city: `C${i}` } });
    assert.equal(ok.isError, false, `call ${i + 1}`);
  }
  const limited = await erin.callTool({ name: "ask_helper", arguments: { message: "hi" } });
  assert.equal(limited.isError, true);
  assert.match(limited.content[0].text, /30 a minute/);
  const tool = await erin.callTool({ name: "weather", arguments: { city: "Oslo" } });
  assert.match(tool.content[0].text, /30 a minute/);
  await erin.close();
});

test("with MCP_EXPOSE_TOOLS an HTTP tool is called directly; one that needs approval is not offered", async () => {
  const client = await connect(ALICE);
  const result = await client.callTool({ name: "weather", arguments: { city: "Oslo" } });
  assert.equal(result.isError, false);
  assert.deepEqual(result.structuredContent, { status: "ok", result: { today: "sunny" } });
  assert.equal(toolCalls.at(-1), "/weather/Oslo");
  const calls = toolCalls.length;
  await assert.rejects(client.callTool({ name: "wire_money", arguments: { usd: 5 } }), /not a tool of this server/);
  assert.equal(toolCalls.length, calls, "the API was not called");
  // Arguments its schema refuses never reach the API: an error the model can fix.
  const bad = await client.callTool({ name: "weather", arguments: { city: 5 } });
  assert.equal(bad.isError, true);
  assert.match(bad.content[0].text, /invalid arguments for `weather`/);
  assert.equal(toolCalls.length, calls, "the API was not called");
  await client.close();
});

test("a 401 names the protected-resource metadata, which names JWT_ISSUER", async () => {
  const response = await rpc({ jsonrpc: "2.0", id: 1, method: "tools/list" }, {});
  assert.equal(response.status, 401);
  const challenge = response.headers.get("www-authenticate");
  assert.equal(challenge, `Bearer resource_metadata="${e2e.worker.url}/.well-known/oauth-protected-resource/mcp"`);
  const metadata = await (await fetch(`${e2e.worker.url}/.well-known/oauth-protected-resource/mcp`)).json();
  assert.deepEqual(metadata, {
    resource: `${e2e.worker.url}/mcp`,
    bearer_methods_supported: ["header"],
    resource_name: "edge-agent",
    authorization_servers: [ISSUER],
  });
  const root = await (await fetch(`${e2e.worker.url}/.well-known/oauth-protected-resource`)).json();
  assert.equal(root.resource, e2e.worker.url);
});

test("the transport's rules: notifications, bad messages, unknown methods and tools, origins, revisions", async () => {
  assert.equal((await rpc({ jsonrpc: "2.0", method: "notifications/initialized" })).status, 202);
  const parse = await rpc("{nope");
  assert.equal(parse.status, 400);
  assert.equal((await parse.json()).error.code, -32700);
  const batch = await rpc([{ jsonrpc: "2.0", id: 1, method: "ping" }]);
  assert.equal(batch.status, 400);
  assert.equal((await batch.json()).error.code, -32600);
  const unknown = await (await rpc({ jsonrpc: "2.0", id: "u", method: "resources/list" })).json();
  assert.deepEqual([unknown.id, unknown.error.code], ["u", -32601]);
  const noTool = await (await rpc({ jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "ask_nobody", arguments: { message: "hi" } } })).json();
  assert.equal(noTool.error.code, -32602);
  // Arguments an agent cannot take: a tool error its caller's model can correct (SEP-1303).
  const noMessage = await (await rpc({ jsonrpc: "2.0", id: 3, method: "tools/call", params: { name: "ask_helper", arguments: {} } })).json();
  assert.equal(noMessage.result.isError, true);
  assert.match(noMessage.result.content[0].text, /`message` is required/);
  // A page from an origin CORS_ORIGINS does not list (a rebound name among them).
  assert.equal((await rpc({ jsonrpc: "2.0", id: 4, method: "ping" }, { ...ALICE, origin: "http://evil.example" })).status, 403);
  assert.equal((await rpc({ jsonrpc: "2.0", id: 5, method: "ping" }, { ...ALICE, "mcp-protocol-version": "2099-01-01" })).status, 400);
  const older = await (await rpc({ jsonrpc: "2.0", id: 6, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "x", version: "1" } } })).json();
  assert.equal(older.result.protocolVersion, "2025-06-18");
  assert.equal(older.result.capabilities.tools.listChanged, false);
});

test("the official conformance suite's server scenarios pass, apart from those the document leaves out", { timeout: 300_000 }, async () => {
  // The suite's client sends no token: a Worker of its own lets anonymous callers in.
  const worker = await startWorker({
    persistDir: freshPersistDir(),
    vars: { ALLOW_ANONYMOUS: "true", AGENTS: JSON.stringify({ helper: AGENTS.helper }), ANTHROPIC_API_KEY: "unused", ANTHROPIC_BASE_URL: "http://127.0.0.1:9" },
  });
  try {
    const cwd = mkdtempSync(path.join(tmpdir(), "mcp-conformance-"));
    const cli = path.join(ROOT, "node_modules/@modelcontextprotocol/conformance/dist/index.js");
    const args = [cli, "server", "--url", `${worker.url}/mcp`, "--suite", "active", "--expected-failures", path.join(ROOT, "tests/e2e/mcp_conformance.yml")];
    const { code, out } = await new Promise((resolve) => {
      const child = spawn(process.execPath, args, { cwd });
      let out = "";
      child.stdout.on("data", (d) => (out += d));
      child.stderr.on("data", (d) => (out += d));
      child.on("exit", (code) => resolve({ code, out }));
    });
    console.log(out.split("\n").filter((l) => /^Total/.test(l)).map((l) => `# conformance: ${l}`).join("\n"));
    assert.equal(code, 0, out.slice(-8000));
  } finally {
    await worker.stop();
  }
});
