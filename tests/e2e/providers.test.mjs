// The golden set: the same turns run through the Worker for each wire API, against a loopback
// server speaking that API's documented stream format (Anthropic Messages SSE, OpenAI Chat
// Completions SSE, Gemini `streamGenerateContent` SSE, Ollama `/api/chat` NDJSON, and Workers AI
// through a stand-in `AI` binding, a Worker offering the binding's `run` over RPC whose stream
// is the binding's documented one, since `wrangler dev` cannot reach the real one): plain text, a
// server tool round trip with parallel calls, a client tool and its resume, an approval, a
// steering message, a follow-up, an image, and a handoff to another provider mid-conversation.
// Each checks what the user sees (the UI stream, the history) and what the provider was sent,
// in that provider's own form.

import assert from "node:assert/strict";
import { after, before, beforeEach, describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import {
  PNG, api, everyLoopback, readUiStream, startEveryProvider,
} from "./harness.mjs";

const pickColor = { name: "pick_color", description: "Ask the user for a color", input_schema: { type: "object", properties: {} } };

let worker;
const loops = {};

/** Each wire API: its model, its loopback, and where its requests carry what the tests look for. */
const PROVIDERS = {
  anthropic: {
    model: "anthropic:claude-sonnet-4-5",
    overloaded: { status: 529, message: "Overloaded" },
    userText: (body) => body.messages.filter((m) => m.role === "user").flatMap((m) => m.content).filter((b) => b.type === "text").map((b) => b.text),
    results: (body) => body.messages.flatMap((m) => (Array.isArray(m.content) ? m.content : [])).filter((b) => b.type === "tool_result").map((b) => b.content),
    calls: (body) => body.messages.flatMap((m) => (Array.isArray(m.content) ? m.content : [])).filter((b) => b.type === "tool_use").map((b) => b.name),
    image: (body) => body.messages.at(-1).content.find((b) => b.type === "image")?.source.data,
  },
  openai: {
    model: "openai:gpt-4o",
    overloaded: { status: 503, message: "The server is overloaded" },
    userText: (body) => body.messages.filter((m) => m.role === "user").flatMap((m) => (typeof m.content === "string" ? [m.content] : m.content.filter((p) => p.type === "text").map((p) => p.text))),
    results: (body) => body.messages.filter((m) => m.role === "tool").map((m) => m.content),
    calls: (body) => body.messages.flatMap((m) => m.tool_calls ?? []).map((c) => c.function.name),
    image: (body) => body.messages.at(-1).content.find?.((p) => p.type === "image_url")?.image_url.url.replace("data:image/png;base64,", ""),
  },
  gemini: {
    model: "gemini:gemini-2.5-flash",
    overloaded: { status: 503, message: "The model is overloaded. Please try again later." },
    userText: (body) => body.contents.filter((c) => c.role === "user").flatMap((c) => c.parts).filter((p) => typeof p.text === "string").map((p) => p.text),
    results: (body) => body.contents.flatMap((c) => c.parts).filter((p) => p.functionResponse).map((p) => JSON.stringify(p.functionResponse.response)),
    calls: (body) => body.contents.flatMap((c) => c.parts).filter((p) => p.functionCall).map((p) => p.functionCall.name),
    image: (body) => body.contents.at(-1).parts.find((p) => p.inlineData)?.inlineData.data,
  },
  ollama: {
    model: "ollama:llava",
    overloaded: { status: 503, message: "server busy, please try again" },
    userText: (body) => body.messages.filter((m) => m.role === "user").map((m) => m.content),
    results: (body) => body.messages.filter((m) => m.role === "tool").map((m) => m.content),
    calls: (body) => body.messages.flatMap((m) => m.tool_calls ?? []).map((c) => c.function.name),
    image: (body) => body.messages.at(-1).images?.[0],
  },
  "workers-ai": {
    model: "workers-ai:@cf/meta/llama-4-scout-17b-16e-instruct",
    overloaded: { status: 429, message: "Capacity temporarily exceeded, please try again." },
    // The binding's input: `messages` in the OpenAI-compatible shape the model takes.
    userText: (body) => PROVIDERS.openai.userText(body),
    results: (body) => PROVIDERS.openai.results(body),
    calls: (body) => PROVIDERS.openai.calls(body),
    image: (body) => PROVIDERS.openai.image(body),
  },
};

before(async () => {
  Object.assign(loops, await everyLoopback());
  worker = await startEveryProvider(loops, {
    APPROVAL_REQUIRED_TOOLS: "update_plan",
    // The provider a failing one hands the conversation to: Anthropic, or OpenAI for Anthropic.
    FALLBACK_MODELS: "anthropic:claude-sonnet-4-5,openai:gpt-4o",
    // Ollama's llava sees images; the registry cannot know a local model's capabilities.
    MODELS: JSON.stringify([
      { id: "ollama:llava", context_window: 32768, max_output_tokens: 4096, capabilities: { tools: true, vision: true } },
      { id: "workers-ai:@cf/meta/llama-4-scout-17b-16e-instruct", context_window: 131072, max_output_tokens: 4096, capabilities: { tools: true, vision: true } },
      // Each provider's model with a window small enough to compact in a few turns.
        ...Object.keys(PROVIDERS).map((name) => ({ id: tiny(name), context_window: 2048, max_output_tokens: 256 })),
    ]),
  });
});

after(async () => {
  await worker?.stop();
  await Promise.all(Object.values(loops).map((l) => l?.close()));
});

/** A model of provider `name` with a 2,048-token window (declared in `MODELS`). */
const tiny = (name) => (name === "workers-ai" ? "workers-ai:@cf/golden/tiny" : `${name}:tiny-golden`);
const textOf = (chunks) => chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join("");
const create = async (model) => (await (await api(worker.url, "POST", "/v1/conversations", { model })).json()).id;
const send = async (id, body) => readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, body));
const history = async (id) => (await (await api(worker.url, "GET", `/v1/conversations/${id}/messages`)).json()).messages;

async function untilRequests(loop, n) {
  const deadline = Date.now() + 20_000;
  while (loop.requests.length < n) {
    if (Date.now() > deadline) throw new Error(`the loopback saw ${loop.requests.length} requests, expected ${n}`);
    await sleep(20);
  }
}

for (const [name, p] of Object.entries(PROVIDERS)) {
  describe(`${name} through the Worker`, () => {
    const loop = () => loops[name];
    beforeEach(() => Object.values(loops).forEach((l) => l.clear()));

    test("plain text streams and is stored with its provider", async () => {
      const id = await create(p.model);
      loop().script({ text: "Hello from the loopback, with é and 日本." });
      const { chunks } = await send(id, { message: "Say hello." });
      assert.equal(textOf(chunks), "Hello from the loopback, with é and 日本.");
      assert.equal(chunks.at(-1).type, "finish");
      const stored = await history(id);
      assert.deepEqual(stored.map((m) => m.kind), ["user", "assistant"]);
      assert.equal(`${stored[1].provider}:${stored[1].model}`, p.model);
      assert.deepEqual(p.userText(loop().requests.at(-1).body), ["Say hello."]);
    });

    test("parallel server tool calls run, and their results go back in the provider's form", async () => {
      const id = await create(p.model);
      loop().script(
        { text: "Checking twice.", tools: [{ id: `${name}_t1`, name: "current_time", input: {} }, { id: `${name}_t2`, name: "current_time", input: { timezone: "UTC" } }] },
        { text: "It is noon." },
      );
      const { chunks } = await send(id, { message: "What time is it?" });
      assert.equal(chunks.filter((c) => c.type === "tool-output-available").length, 2);
      assert.equal(textOf(chunks), "Checking twice.It is noon.");
      const second = loop().requests.at(-1).body;
      assert.deepEqual(p.calls(second), ["current_time", "current_time"]);
      const results = p.results(second);
      assert.equal(results.length, 2);
      for (const r of results) assert.match(r, /utc/);
      assert.deepEqual((await history(id)).map((m) => m.kind), ["user", "assistant", "tool_result", "tool_result", "assistant"]);
    });

    test("a client tool pauses the turn and its result resumes it", async () => {
      const id = await create(p.model);
      loop().script({ tools: [{ id: `${name}_pick`, name: "pick_color", input: {} }] });
      const first = await send(id, { message: "Pick a color.", tools: [pickColor] });
      const call = first.chunks.find((c) => c.type === "tool-input-available");
      assert.equal(call.toolName, "pick_color");
      assert.equal(first.chunks.find((c) => c.type === "finish").finishReason, "tool-calls");
      loop().script({ text: "Amber it is." });
      const resumed = await send(id, { tool_results: [{ tool_call_id: call.toolCallId, output: { color: "amber" } }] });
      assert.equal(textOf(resumed.chunks), "Amber it is.");
      assert.deepEqual(p.results(loop().requests.at(-1).body).map((r) => r.includes("amber")), [true]);
    });

    test("an approval-required tool waits for the person, then runs", async () => {
      const id = await create(p.model);
      loop().script({ tools: [{ id: `${name}_plan`, name: "update_plan", input: { items: [{ title: "Pack", done: false }] } }] });
      const first = await send(id, { message: "Make a plan." });
      const request = first.chunks.find((c) => c.type === "tool-approval-request");
      assert.ok(request, "the call waits for approval");
      assert.ok(!first.chunks.some((c) => c.type === "tool-output-available"));
      loop().script({ text: "Planned." });
      const decided = await send(id, { approvals: [{ tool_call_id: request.toolCallId, approved: true }] });
      assert.ok(decided.chunks.some((c) => c.type === "tool-output-available"), "the approved tool ran");
      assert.equal(textOf(decided.chunks), "Planned.");
      assert.equal(p.results(loop().requests.at(-1).body).length, 1);
    });

    test("a steering message joins before the next call; a follow-up runs after the turn", async () => {
      const id = await create(p.model);
      loop().script(
        { text: "Checking the clock, slowly.", tools: [{ id: `${name}_slow`, name: "current_time", input: {} }], gapMs: 4 },
        { text: "Changing course." },
        { text: "And the follow-up." },
      );
      const before = loop().requests.length;
      const running = api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "What time is it?" });
      await untilRequests(loop(), before + 1);
      const steer = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Tell me a joke instead.", delivery: "steer" });
      assert.deepEqual(await steer.json(), { queued: "steering", position: 1 });
      const follow = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Then say goodbye.", delivery: "followup" });
      // Second in the queue, behind the steering message.
      assert.deepEqual(await follow.json(), { queued: "followup", position: 2 });
      const { chunks } = await readUiStream(await running);
      assert.ok(chunks.some((c) => c.type === "data-steering"));
      assert.equal(textOf(chunks), "Checking the clock, slowly.Changing course.And the follow-up.");
      const [, second, third] = loop().requests.slice(before).map((r) => r.body);
      assert.equal(p.userText(second).at(-1), "Tell me a joke instead.");
      assert.equal(p.userText(third).at(-1), "Then say goodbye.");
    });

    test("an image reaches the model in the provider's form", async () => {
      const id = await create(p.model);
      loop().script({ text: "A red pixel." });
      const { chunks } = await send(id, { message: [{ type: "text", text: "What is this?" }, { type: "file", media_type: "image/png", data: PNG.toString("base64"), filename: "dot.png" }] });
      assert.equal(textOf(chunks), "A red pixel.");
      assert.equal(p.image(loop().requests.at(-1).body), PNG.toString("base64"));
    });

    test("a long conversation is compacted: the provider writes the summary, and its next call starts from it", async () => {
      const id = await create(tiny(name));
      let summaries = 0;
      loop().respond = (body) => {
        const last = p.userText(body).at(-1) ?? "";
        if (last.startsWith("Summarise the conversation")) return { text: `Notes ${++summaries}: a trip along the coast, leg by leg.` };
        return { text: `Leg ${last.slice(4, 6)} noted. ` + "A careful answer about that leg of the journey. ".repeat(6) };
      };
      try {
        for (let i = 0; i < 14; i++) {
          const leg = String(i).padStart(2, "0");
          const { chunks } = await send(id, { message: `Leg ${leg}: ` + "I want to travel further along the coast and see the old towns. ".repeat(8) });
          assert.match(textOf(chunks), new RegExp(`^Leg ${leg} noted`), `turn ${i}`);
        }
      } finally {
        loop().respond = null;
      }
      assert.ok(summaries >= 1, "the provider was asked for a summary");
      assert.match(p.userText(loop().requests.at(-1).body)[0], /^Summary of the earlier conversation:\nNotes/);
      assert.ok((await history(id)).some((m) => m.kind === "summary"));
    });

    test("a failing provider hands the conversation, tool calls and all, to the next one", async () => {
      const id = await create(p.model);
      loop().script({ tools: [{ id: `${name}_h`, name: "current_time", input: {} }] }, { text: "Noon, by my tool." });
      await send(id, { message: "What time is it?" });
      const to = name === "anthropic" ? "openai" : "anthropic";
      const overloaded = { ...p.overloaded, headers: { "retry-after": "0" } };
      loop().script(overloaded, overloaded, overloaded);
      loops[to].script({ text: `${to} here, I read the history.` });
      const { chunks } = await send(id, { message: "Again?" });
      assert.deepEqual(chunks.find((c) => c.type === "data-provider-switch").data, { from: p.model, to: PROVIDERS[to].model });
      assert.equal(textOf(chunks), `${to} here, I read the history.`);
      const handed = loops[to].requests.at(-1).body;
      assert.deepEqual(PROVIDERS[to].calls(handed), ["current_time"]);
      assert.equal(PROVIDERS[to].results(handed).length, 1);
      assert.deepEqual(PROVIDERS[to].userText(handed), ["What time is it?", "Again?"]);
    });
  });
}
