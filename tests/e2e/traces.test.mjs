// Traces: with OTEL_EXPORTER_OTLP_ENDPOINT set, each turn is exported once, after its answer, as
// one OTLP/HTTP JSON request that a receiver decodes with the official OTLP definitions
// (`otlp_receiver.py`, the `opentelemetry-proto` package). The spans nest as the GenAI
// conventions have them (invoke_agent over chat and execute_tool; a sub-agent's invoke_agent
// under its parent's execute_tool), continue the caller's `traceparent`, and send it on to the
// provider and to HTTP tools; content only with OTEL_CAPTURE_CONTENT; a collector that is down
// or slow changes nothing a user sees.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import http from "node:http";
import path from "node:path";
import { after, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { ROOT, api, freshPersistDir, readUiStream, setup, startWorker, anthropicVars } from "./harness.mjs";

const PYTHON = path.join(ROOT, ".tools/mcp-venv/bin/python");
const TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER = `00-${TRACE}-00f067aa0ba902b7-01`;

/** A receiver: its port, and each export it decoded. */
async function receiver(extra = []) {
  const child = spawn(PYTHON, [path.join(ROOT, "tests/e2e/otlp_receiver.py"), ...extra]);
  const exports = [];
  let buffered = "";
  const port = await new Promise((resolve, reject) => {
    child.on("exit", (code) => reject(new Error(`the receiver exited ${code}`)));
    child.stderr.on("data", (d) => process.stderr.write(d));
    child.stdout.on("data", (d) => {
      buffered += d;
      let at;
      while ((at = buffered.indexOf("\n")) >= 0) {
        const line = buffered.slice(0, at);
        buffered = buffered.slice(at + 1);
        if (line.startsWith("listening ")) resolve(Number(line.slice(10)));
        else exports.push(JSON.parse(line));
      }
    });
  });
  return { port, exports, stop: () => child.kill() };
}

let collector, toolApi;
const toolHeaders = [];
const AGENTS = {
  lead: { description: "Leads", model: "anthropic:claude-sonnet-4-5", tools: ["weather", { type: "agent", agent: "researcher" }] },
  researcher: { description: "Finds facts", model: "anthropic:claude-haiku-4-5", tools: [] },
};
const e2e = setup({
  prepare: async () => {
    collector = await receiver();
    toolApi = http.createServer((req, res) => {
      toolHeaders.push(req.headers);
      res.writeHead(200, { "content-type": "application/json" }).end('{"today":"sunny"}');
    });
    await new Promise((r) => toolApi.listen(0, "127.0.0.1", r));
  },
  vars: () => ({
    AGENTS: JSON.stringify(AGENTS),
    HTTP_TOOLS: JSON.stringify([{ name: "weather", description: "The weather.", input_schema: { type: "object", properties: { city: { type: "string" } } }, url: `http://127.0.0.1:${toolApi.address().port}/weather/{city}` }]),
    ALLOW_PRIVATE_TOOL_HOSTS: "true",
    OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${collector.port}`,
    OTEL_EXPORTER_OTLP_HEADERS: "x-collector-key=k%201",
  }),
});
const { anthropic } = e2e;
after(() => {
  collector.stop();
  toolApi.close();
});

const until = async (check, what, ms = 10_000) => {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
};
const byName = (spans, name) => spans.filter((s) => s.name === name);

test("a turn is one trace under the caller's traceparent: invoke_agent over chat, execute_tool and a sub-agent's turn", async () => {
  const id = await e2e.create({ agent: "lead" });
  anthropic.script(
    { tools: [{ id: "toolu_w", name: "weather", input: { city: "Oslo" } }, { id: "toolu_r", name: "researcher", input: { task: "Is Oslo sunny?" } }] },
    { text: "Yes, it is." },
    { text: "Sunny in Oslo, the researcher agrees." },
  );
  const before = collector.exports.length;
  const { chunks } = await readUiStream(await api(e2e.worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Weather in Oslo?" }, { traceparent: CALLER }));
  assert.equal(chunks.find((c) => c.type === "finish").finishReason, "stop");
  // The parent's trace and the child's (sent by its own object), each once.
  await until(() => collector.exports.length >= before + 2, "two exports");
  await sleep(300);
  const exports = collector.exports.slice(before);
  assert.equal(exports.length, 2, "one export per turn");
  for (const e of exports) assert.equal(e.error, undefined, e.error);
  assert.equal(exports[0].path, "/v1/traces");
  assert.equal(exports[0].headers["x-collector-key"], "k 1");
  const spans = exports.flatMap((e) => e.spans);
  assert.ok(spans.every((s) => s.traceId === TRACE), "every span is of the caller's trace");
  assert.ok(spans.every((s) => s.service === "edge-agent" && s.scope === "edge-agent"));

  const [root] = byName(spans, "invoke_agent lead");
  assert.equal(root.parentSpanId, "00f067aa0ba902b7");
  assert.equal(root.attributes["gen_ai.operation.name"], "invoke_agent");
  assert.equal(root.attributes["gen_ai.conversation.id"], id);
  const chats = byName(spans, "chat claude-sonnet-4-5");
  assert.equal(chats.length, 2);
  for (const chat of chats) {
    assert.equal(chat.parentSpanId, root.spanId);
    assert.equal(chat.kind, 3, "SPAN_KIND_CLIENT");
    assert.equal(chat.attributes["gen_ai.provider.name"], "anthropic");
    assert.equal(chat.attributes["gen_ai.request.model"], "claude-sonnet-4-5");
    assert.equal(chat.attributes["gen_ai.response.id"], "msg_loop", "the provider's id for its answer");
    assert.ok(Number(chat.attributes["gen_ai.usage.output_tokens"]) > 0);
  }
  const [tool] = byName(spans, "execute_tool weather");
  assert.equal(tool.parentSpanId, root.spanId);
  assert.equal(tool.attributes["gen_ai.tool.call.id"], "toolu_w");
  const [agentTool] = byName(spans, "execute_tool researcher");
  const [child] = byName(spans, "invoke_agent researcher");
  assert.equal(child.parentSpanId, agentTool.spanId, "the sub-agent's turn hangs under its call");
  assert.equal(byName(spans, "chat claude-haiku-4-5")[0].parentSpanId, child.spanId);
  // Without OTEL_CAPTURE_CONTENT nothing anyone said is on a span.
  assert.doesNotMatch(JSON.stringify(spans), /Oslo|sunny/i);

  // The context went on to the provider and to the HTTP tool, within the turn's span.
  const sent = anthropic.requests.at(-1).headers.traceparent;
  assert.equal(sent, `00-${TRACE}-${root.spanId}-01`);
  assert.equal(toolHeaders.at(-1).traceparent, sent);
});

test("a turn without a traceparent starts a trace of its own; a failed call carries its error", async () => {
  const id = await e2e.create({ agent: "researcher" });
  anthropic.script({ status: 400, message: "bad request" });
  const before = collector.exports.length;
  const { chunks } = await readUiStream(await api(e2e.worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "hi" }));
  assert.ok(chunks.some((c) => c.type === "error"));
  await until(() => collector.exports.length > before, "an export");
  const { spans } = collector.exports.at(-1);
  const [root] = byName(spans, "invoke_agent researcher");
  assert.match(root.traceId, /^[0-9a-f]{32}$/);
  assert.notEqual(root.traceId, TRACE);
  assert.equal(root.parentSpanId, "");
  assert.equal(root.attributes["error.type"], "turn_error");
  assert.equal(root.status.code, 2, "STATUS_CODE_ERROR");
  assert.equal(root.attributes["edge_agent.turn.outcome"], "failed");
  // The stream's public text, never the provider's own words.
  assert.doesNotMatch(JSON.stringify(spans), /bad request/);
});

test("a caller's unsampled traceparent keeps its turn out of the trace", async () => {
  const id = await e2e.create({ agent: "researcher" });
  anthropic.script({ text: "Fine." });
  const before = collector.exports.length;
  const unsampled = `00-${TRACE}-00f067aa0ba902b7-00`;
  await readUiStream(await api(e2e.worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "hi" }, { traceparent: unsampled }));
  // A sampled turn after it is exported: the unsampled one, before it, was not.
  anthropic.script({ text: "Fine again." });
  await readUiStream(await api(e2e.worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "again" }));
  await until(() => collector.exports.length > before, "an export");
  await sleep(300);
  assert.equal(collector.exports.length, before + 1);
  assert.notEqual(collector.exports.at(-1).spans[0].traceId, TRACE);
});

test("content is on the spans only with OTEL_CAPTURE_CONTENT; a collector down or slow changes nothing a user sees", async () => {
  const slow = await receiver(["--delay-ms", "3000"]);
  const down = await receiver(["--status", "503"]);
  const workers = [];
  try {
    for (const [name, port, capture] of [["slow", slow.port, "true"], ["down", down.port, "false"]]) {
      const worker = await startWorker({
        persistDir: freshPersistDir(),
        vars: { ...anthropicVars(anthropic), OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`, OTEL_CAPTURE_CONTENT: capture },
      });
      workers.push(worker);
      const { id } = await (await api(worker.url, "POST", "/v1/conversations", {})).json();
      anthropic.script({ text: `Answered by ${name}.` });
      const started = Date.now();
      const { chunks } = await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: `Hello ${name}` }));
      const took = Date.now() - started;
      assert.equal(chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join(""), `Answered by ${name}.`);
      if (name === "slow") assert.ok(took < 3000, `the answer waited for the collector (${took} ms)`);
      // The next message is answered as usual while the last export is still on its way.
      anthropic.script({ text: "Again." });
      const next = Date.now();
      const again = await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "again" }));
      assert.equal(again.chunks.find((c) => c.type === "finish").finishReason, "stop");
      if (name === "slow") assert.ok(Date.now() - next < 3000, "the next turn waited for the collector");
    }
    const [captured] = await until(() => slow.exports.length && slow.exports, "the slow collector's export");
    const chat = captured.spans.find((s) => s.name.startsWith("chat "));
    assert.match(chat.attributes["gen_ai.output.messages"], /Answered by slow\./);
    assert.match(captured.spans[0].attributes["gen_ai.input.messages"], /Hello slow/);
    await until(() => down.exports.length, "the export to the collector that is down");
    const failed = await workers[1].logLine((l) => l.event === "trace_export_failed");
    assert.match(failed.error, /503/);
    assert.equal(failed.collector, `127.0.0.1:${down.port}`);
  } finally {
    for (const w of workers) await w.stop();
    slow.stop();
    down.stop();
  }
});
