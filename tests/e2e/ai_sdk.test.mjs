// A stock AI SDK client, as `useChat` drives it: the `ai` package's AbstractChat and
// DefaultChatTransport pointed at /v1/chat, unmodified, holding one conversation through text,
// a server tool, a client tool (addToolOutput) and an approval (addToolApprovalResponse).

import assert from "node:assert/strict";
import { test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls,
} from "ai";
import { api, setup } from "./harness.mjs";

/** The state `useChat` keeps in React, kept in plain fields. */
class NodeChatState {
  messages = [];
  status = "ready";
  error = undefined;
  pushMessage = (m) => { this.messages = this.messages.concat(m); };
  popMessage = () => { this.messages = this.messages.slice(0, -1); };
  replaceMessage = (i, m) => { this.messages = [...this.messages.slice(0, i), m, ...this.messages.slice(i + 1)]; };
  snapshot = (v) => structuredClone(v);
}

class NodeChat extends AbstractChat {
  constructor(init) {
    super({ ...init, state: new NodeChatState() });
  }
}

const { anthropic, worker } = setup({
  vars: {
    APPROVAL_REQUIRED_TOOLS: "update_plan",
    // A window past a megabyte of history (two-byte letters count a token each), for the
    // long chat below.
    MODELS: JSON.stringify([{ id: "anthropic:claude-sonnet-4-5", context_window: 2_000_000, max_output_tokens: 64_000, capabilities: { tools: true, thinking: true, vision: true } }]),
  },
});

async function settled(chat) {
  const deadline = Date.now() + 20_000;
  for (;;) {
    await sleep(100);
    if (chat.status === "ready" || chat.status === "error") {
      await sleep(300); // an automatic follow-up request may be about to start
      if (chat.status === "ready" || chat.status === "error") return;
    }
    if (Date.now() > deadline) throw new Error(`chat still ${chat.status}`);
  }
}

const toolParts = (message) => message.parts.filter((p) => p.type.startsWith("tool-"));
const textOf = (message) => message.parts.filter((p) => p.type === "text").map((p) => p.text).join("");

test("useChat's transport and chat hold a conversation with text, tools and an approval", async () => {
  const errors = [];
  const id = "aisdk-" + Date.now().toString(36);
  const chat = new NodeChat({
    id,
    transport: new DefaultChatTransport({
      api: `${worker.url}/v1/chat`,
      body: { tools: [{ name: "pick_color", description: "Let the user pick a color", input_schema: { type: "object", properties: { palette: { type: "string" } } } }] },
    }),
    sendAutomaticallyWhen: (o) => lastAssistantMessageIsCompleteWithToolCalls(o) || lastAssistantMessageIsCompleteWithApprovalResponses(o),
    onError: (e) => errors.push(e),
    onToolCall: ({ toolCall }) => {
      if (toolCall.toolName === "pick_color") {
        // As the docs say: do not await addToolOutput inside onToolCall.
        chat.addToolOutput({ tool: "pick_color", toolCallId: toolCall.toolCallId, output: { color: "amber" } });
      }
    },
  });

  // 1. Text.
  anthropic.script({ text: "Hi there." });
  await chat.sendMessage({ text: "Hello!" });
  await settled(chat);
  assert.equal(textOf(chat.messages[1]), "Hi there.");

  // 2. A server tool.
  anthropic.script({ text: "Checking.", tools: [{ id: "toolu_time", name: "current_time", input: {} }] }, { text: "It is noon." });
  await chat.sendMessage({ text: "What time is it?" });
  await settled(chat);
  const [time] = toolParts(chat.messages[3]);
  assert.equal(time.type, "tool-current_time");
  assert.equal(time.state, "output-available");
  assert.ok(time.output.utc);
  assert.equal(textOf(chat.messages[3]), "Checking.It is noon.");

  // 3. A client tool, answered by onToolCall; the chat resends by itself.
  anthropic.script({ tools: [{ id: "toolu_pick", name: "pick_color", input: { palette: "warm" } }] }, { text: "Amber it is." });
  await chat.sendMessage({ text: "Pick a color for me." });
  await settled(chat);
  assert.equal(chat.messages.length, 6);
  const [pick] = toolParts(chat.messages[5]);
  assert.deepEqual([pick.type, pick.state, pick.output], ["tool-pick_color", "output-available", { color: "amber" }]);
  assert.equal(textOf(chat.messages[5]), "Amber it is.");

  // 4. An approval: the chat shows the request, the user approves, the server runs the tool.
  anthropic.script({ tools: [{ id: "toolu_plan", name: "update_plan", input: { items: [{ title: "Pack", done: false }] } }] }, { text: "Plan saved." });
  await chat.sendMessage({ text: "Make a plan." });
  await settled(chat);
  const [waiting] = toolParts(chat.messages[7]);
  assert.equal(waiting.state, "approval-requested");
  await chat.addToolApprovalResponse({ id: waiting.approval.id, approved: true });
  await settled(chat);
  const [plan] = toolParts(chat.messages[7]);
  assert.equal(plan.state, "output-available");
  assert.equal(plan.output, "Plan updated: 0 of 1 done.");
  assert.equal(textOf(chat.messages[7]), "Plan saved.");

  // 5. regenerate() is a retry: a new last answer; the old one stays stored, superseded.
  anthropic.script({ text: "A better plan." });
  await chat.regenerate();
  await settled(chat);
  assert.equal(textOf(chat.messages.at(-1)), "A better plan.");
  const regenerated = anthropic.requests.at(-1).body.messages;
  assert.equal(regenerated.at(-1).content.at(-1).text, "Make a plan.", "the model was asked the last user message again");

  assert.deepEqual(errors, []);
  assert.equal(chat.error, undefined);
  assert.deepEqual(chat.messages.map((m) => m.role), ["user", "assistant", "user", "assistant", "user", "assistant", "user", "assistant"]);

  // What the client rebuilt matches what the server stored (superseded answers aside).
  const everything = (await (await api(worker.url, "GET", `/v1/conversations/${id}/messages`)).json()).messages;
  assert.ok(everything.some((m) => m.superseded), "the regenerated answer is kept, marked superseded");
  const stored = everything.filter((m) => !m.superseded);
  const storedUsers = stored.filter((m) => m.kind === "user").map((m) => m.content[0].text);
  assert.deepEqual(storedUsers, chat.messages.filter((m) => m.role === "user").map(textOf));
  const storedText = stored.filter((m) => m.kind === "assistant").flatMap((m) => m.content.filter((b) => b.type === "text").map((b) => b.text)).join("");
  assert.equal(storedText, chat.messages.filter((m) => m.role === "assistant").map(textOf).join(""));
  const storedResults = stored.filter((m) => m.kind === "tool_result");
  const clientParts = chat.messages.flatMap(toolParts);
  assert.deepEqual(storedResults.map((r) => r.tool_call_id), clientParts.map((p) => p.toolCallId));
  for (const r of storedResults) {
    const part = clientParts.find((p) => p.toolCallId === r.tool_call_id);
    const output = typeof part.output === "string" ? part.output : JSON.stringify(part.output);
    assert.equal(output, r.content, `${r.tool_call_id}: client and server agree on the output`);
  }
});

test("a chat whose messages pass a megabyte goes on: the transport sends them all, the Worker reads only the new one", async () => {
  const errors = [];
  const sizes = [];
  const chat = new NodeChat({
    id: "aisdk-long-" + Date.now().toString(36),
    transport: new DefaultChatTransport({
      api: `${worker.url}/v1/chat`,
      // The transport's own body, measured on its way out.
      fetch: (url, init) => {
        sizes.push(Buffer.byteLength(init.body));
        return fetch(url, init);
      },
    }),
    onError: (e) => errors.push(e),
  });
  // Two-byte characters: over a megabyte of body while the history stays under the share of
  // the model's (large) window that starts a compaction. Six answers of 190 KB rather than
  // three of 380: one answer's stream stays far within what a reader may leave unread (1 MB),
  // which a slow reader on a loaded machine came near.
  const answers = [0, 1, 2, 3, 4, 5].map((i) => `answer ${i} ${"ü".repeat(95_000)}`);
  for (const [i, answer] of answers.entries()) {
    anthropic.script({ text: answer, writes: "one" });
    await chat.sendMessage({ text: `question ${i}` });
    await settled(chat);
    assert.deepEqual(errors, []);
    assert.ok(textOf(chat.messages.at(-1)) === answer, `answer ${i}`);
  }
  anthropic.script({ text: "Still here." });
  await chat.sendMessage({ text: "And now?" });
  await settled(chat);
  assert.deepEqual(errors, []);
  assert.ok(sizes.at(-1) > 1 << 20, `the last body was ${sizes.at(-1)} bytes`);
  assert.equal(textOf(chat.messages.at(-1)), "Still here.");
  // The model got the conversation from the Worker's own history: every message once, in order.
  const seen = anthropic.requests.at(-1).body.messages;
  assert.deepEqual(seen.map((m) => m.role), [...answers.flatMap(() => ["user", "assistant"]), "user"]);
  const text = (m) => (typeof m.content === "string" ? m.content : m.content.map((c) => c.text).join(""));
  assert.equal(text(seen[0]), "question 0");
  assert.ok(text(seen[11]) === answers[5]);
  assert.equal(text(seen[12]), "And now?");
});
