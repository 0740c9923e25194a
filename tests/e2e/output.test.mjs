// Typed answers (`output`) through the Worker, for each wire API against its loopback: the
// answer streams to a stock `readUIMessageStream` as one `data-output` part that forms in place
// and ends complete, asked for in each provider's own form (OpenAI's strict `response_format`,
// Claude's `output_config`, Ollama's `format`, and the answer tool for Gemini beside tools and
// for Workers AI, which is never sent a schema on a streamed call); after a tool round trip; an
// invalid answer repaired by a second call; then, once, `on_invalid`, `stream: false`, bad
// schemas, an agent's own `output` and the step past its limit, and an array's elements.

import assert from "node:assert/strict";
import { after, before, beforeEach, describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { api, everyLoopback, readUiStream, startEveryProvider, uiMessage } from "./harness.mjs";

let worker;
let loops = {};

const CITY = {
  type: "object",
  schema: {
    type: "object",
    properties: { city: { type: "string" }, population: { type: "integer" } },
    required: ["city", "population"],
  },
};
const PARIS = { city: "Paris, Île-de-France", population: 2102650 };

/** An answer given as the answer tool's call. */
const viaTool = (input) => ({ tools: [{ id: "call_answer", name: "answer", input }] });
/** An answer given as JSON text. */
const asText = (object) => ({ text: JSON.stringify(object) });

/** Each wire API: its model, how it is asked for the answer (and so how it gives it). */
const PROVIDERS = {
  anthropic: {
    model: "anthropic:claude-sonnet-4-5",
    answer: asText,
    // Without tools (the repair call), Claude is made to call the answer tool.
    alone: viaTool,
    asked: (body) => {
      assert.equal(body.output_config.format.type, "json_schema");
      assert.equal(body.output_config.format.schema.additionalProperties, false);
      assert.equal(body.tool_choice, undefined);
    },
  },
  openai: {
    model: "openai:gpt-4o",
    answer: asText,
    asked: (body) => {
      assert.equal(body.response_format.type, "json_schema");
      assert.equal(body.response_format.json_schema.strict, true);
      assert.deepEqual(body.response_format.json_schema.schema.required, ["city", "population"]);
    },
  },
  gemini: {
    model: "gemini:gemini-2.5-flash",
    answer: viaTool,
    // Without tools (the repair call), held to the schema: the answer is text.
    alone: asText,
    // Offered tools, Gemini cannot also be held to a schema: the answer is a tool beside them.
    asked: (body) => {
      const names = body.tools[0].functionDeclarations.map((f) => f.name);
      assert.ok(names.includes("answer") && names.includes("current_time"), names.join());
      assert.equal(body.generationConfig.responseJsonSchema, undefined);
      assert.equal(body.generationConfig.responseMimeType, undefined);
    },
  },
  ollama: {
    model: "ollama:llama3.2",
    answer: asText,
    asked: (body) => assert.deepEqual(body.format.required, ["city", "population"]),
  },
  "workers-ai": {
    model: "workers-ai:@cf/meta/llama-4-scout-17b-16e-instruct",
    answer: viaTool,
    // Never a schema on a streamed call (AiError 5023): the answer tool instead.
    asked: (body) => {
      assert.equal(body.response_format, undefined);
      assert.ok(body.tools.some((t) => t.function.name === "answer"));
    },
  },
};

const AGENTS = {
  assistant: { description: "Talks", model: "anthropic:claude-sonnet-4-5" },
  // One step each: the extra step past the limit, per provider.
  ...Object.fromEntries(Object.entries(PROVIDERS).map(([name, p]) => [`one-step-${name}`, { description: `One step on ${name}`, model: p.model, max_llm_calls: 1 }])),
  // Its fallback cannot take a schema on a streamed call: it is asked for the answer tool.
  resilient: {
    description: "Falls back to Workers AI",
    model: "openai:gpt-4o",
    fallback_models: ["workers-ai:@cf/meta/llama-4-scout-17b-16e-instruct"],
  },
  extractor: {
    description: "Extracts a city",
    model: "anthropic:claude-sonnet-4-5",
    output: CITY,
    max_llm_calls: 1,
  },
};

before(async () => {
  loops = await everyLoopback();
  // A keyed user beside the anonymous one, for the export (the shared anonymous user has none).
  worker = await startEveryProvider(loops, { AGENTS: JSON.stringify(AGENTS), API_KEYS: "tester:sk-typed" });
});

after(async () => {
  await worker?.stop();
  await Promise.all(Object.values(loops).map((l) => l?.close()));
});

const create = async (body) => (await (await api(worker.url, "POST", "/v1/conversations", body)).json()).id;
const send = async (id, body) => readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, body));
const history = async (id) => (await (await api(worker.url, "GET", `/v1/conversations/${id}/messages`)).json()).messages;


/** Checks a stream that answered `object`: one `data-output` part, formed in place, complete. */
async function answeredWith(chunks, object) {
  assert.ok(!chunks.some((c) => c.type === "text-delta"), "the JSON is not also streamed as text");
  assert.ok(!chunks.some((c) => c.type.startsWith("tool-") && c.toolName === "answer"), "the answer tool is not shown");
  const outputs = chunks.filter((c) => c.type === "data-output");
  const messageId = chunks.find((c) => c.type === "start").messageId;
  assert.ok(outputs.every((c) => c.id === `output:${messageId}`), JSON.stringify(outputs.map((c) => c.id)));
  assert.ok(outputs.length >= 2, "shown forming, then complete");
  for (const c of outputs.slice(0, -1)) {
    assert.equal(c.data.status, "streaming");
    // What is shown is always a prefix of the answer.
    if (c.data.partial.city !== undefined) assert.ok(object.city.startsWith(c.data.partial.city), c.data.partial.city);
  }
  assert.deepEqual(outputs.at(-1).data, { status: "complete", object });
  const message = await uiMessage(chunks);
  const parts = message.parts.filter((p) => p.type === "data-output");
  assert.equal(parts.length, 1, "useChat keeps one part, updated in place");
  assert.deepEqual(parts[0].data, { status: "complete", object });
}

for (const [name, p] of Object.entries(PROVIDERS)) {
  describe(`${name}: a typed answer`, () => {
    const loop = () => loops[name];
    /** The requests this test made (the loopback keeps every file's). */
    let sent;
    beforeEach(() => {
      Object.values(loops).forEach((l) => l.clear());
      const from = loop().requests.length;
      sent = () => loop().requests.slice(from);
    });

    test("streams as one data-output part that ends complete, asked in the provider's form, and is kept", async () => {
      const id = await create({ model: p.model });
      loop().script(p.answer(PARIS));
      const { chunks } = await send(id, { message: "Which city?", output: CITY });
      await answeredWith(chunks, PARIS);
      assert.equal(sent().length, 1);
      p.asked(sent()[0].body);
      const answer = (await history(id)).filter((m) => m.kind === "assistant").at(-1);
      assert.deepEqual(answer.output, { status: "complete", object: PARIS });
    });

    test("comes after a tool round trip", async () => {
      const id = await create({ model: p.model });
      loop().script({ tools: [{ id: "call_time", name: "current_time", input: {} }] }, p.answer(PARIS));
      const { chunks } = await send(id, { message: "Which city, and when?", output: CITY });
      assert.ok(chunks.some((c) => c.type === "tool-output-available"), "the tool ran");
      await answeredWith(chunks, PARIS);
      assert.equal(sent().length, 2);
    });

    test("steps that run out on a tool call get one more, with tools off, that answers", async () => {
      const id = await create({ agent: `one-step-${name}` });
      loop().script({ tools: [{ id: "call_time", name: "current_time", input: {} }] }, (p.alone ?? p.answer)(PARIS));
      const { chunks } = await send(id, { message: "Which city?", output: CITY });
      await answeredWith(chunks, PARIS);
      assert.equal(sent().length, 2);
      // Only the answer's tool, if any, on the extra step.
      const offered = JSON.stringify(sent()[1].body.tools ?? []);
      assert.ok(!offered.includes("current_time"), offered);
    });

    test("on_invalid error ends on the error; stream: false answers the object, or a 422", async () => {
      const id = await create({ model: p.model });
      loop().script({ text: "I would rather not say." });
      const { chunks } = await send(id, { message: "Which city?", output: { ...CITY, on_invalid: "error" } });
      const end = chunks.filter((c) => c.type === "data-output").at(-1).data;
      assert.equal(end.status, "error");
      assert.equal(end.raw, "I would rather not say.");
      loop().script(p.answer(PARIS));
      const ok = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Again?", output: CITY, stream: false });
      assert.equal(ok.status, 200);
      assert.deepEqual((await ok.json()).output, PARIS);
      loop().script({ text: "Still no." });
      const no = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Once more?", output: { ...CITY, on_invalid: "error" }, stream: false });
      assert.equal(no.status, 422);
      assert.equal((await no.json()).error.code, "no_object_generated");
    });

    test("an invalid answer is repaired by one more call, told what was wrong", async () => {
      const id = await create({ model: p.model });
      loop().script(p.answer({ city: 7, population: 1 }), (p.alone ?? p.answer)(PARIS));
      const { chunks } = await send(id, { message: "Which city?", output: CITY });
      assert.deepEqual(chunks.filter((c) => c.type === "data-output").at(-1).data, { status: "complete", object: PARIS });
      assert.equal(sent().length, 2);
      const repair = JSON.stringify(sent()[1].body);
      assert.match(repair, /could not be used: .*at \/city/);
      // Only the valid answer is kept.
      const answers = (await history(id)).filter((m) => m.kind === "assistant");
      assert.equal(answers.length, 1);
    });
  });
}

describe("typed answers, once", () => {
  /** The requests to `name`'s loopback this test made. */
  let sent;
  beforeEach(() => {
    Object.values(loops).forEach((l) => l.clear());
    const from = Object.fromEntries(Object.entries(loops).map(([name, l]) => [name, l.requests.length]));
    sent = (name) => loops[name].requests.slice(from[name]);
  });

  test("on_invalid error ends on the error and the raw answer; stream: false is a 422", async () => {
    const id = await create({ model: "openai:gpt-4o" });
    const output = { ...CITY, on_invalid: "error" };
    loops.openai.script({ text: "I think it is Paris." });
    const { chunks } = await send(id, { message: "Which city?", output });
    const end = chunks.filter((c) => c.type === "data-output").at(-1).data;
    assert.equal(end.status, "error");
    assert.equal(end.error.type, "no_object_generated");
    assert.equal(end.raw, "I think it is Paris.");
    assert.equal(sent("openai").length, 1, "no repair call");
    loops.openai.script({ text: '{"city": "Paris"}' });
    const r = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Again?", output, stream: false });
    assert.equal(r.status, 422);
    const body = await r.json();
    assert.equal(body.error.code, "no_object_generated");
    assert.match(body.error.message, /population/);
    assert.equal(body.error.raw, '{"city": "Paris"}');
  });

  test("stream: false answers {message_id, output, usage}, the id that of the kept answer; the export holds it", async () => {
    const as = { authorization: "Bearer sk-typed" };
    const id = (await (await api(worker.url, "POST", "/v1/conversations", { model: "openai:gpt-4o" }, as)).json()).id;
    loops.openai.script(asText(PARIS));
    const r = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Which city?", output: CITY, stream: false }, as);
    assert.equal(r.status, 200);
    const body = await r.json();
    assert.deepEqual(body.output, PARIS);
    assert.equal(body.usage.input_tokens, 42);
    const messages = (await (await api(worker.url, "GET", `/v1/conversations/${id}/messages`, undefined, as)).json()).messages;
    const answer = messages.filter((m) => m.kind === "assistant").at(-1);
    assert.equal(body.message_id, answer.id);
    // The user's export holds it as the history does.
    const exported = await (await fetch(`${worker.url}/v1/me/export`, { headers: as })).json();
    const kept = exported.conversations.find((c) => c.id === id).messages.find((m) => m.id === answer.id);
    assert.deepEqual(kept.output, { status: "complete", object: PARIS });
  });

  test("a typed turn cut off by the runtime's death is finished typed after a restart", async () => {
    const id = await create({ model: "openai:gpt-4o" });
    // About 10 s of answer, in 1-9 byte pieces.
    loops.openai.script({ text: JSON.stringify({ city: "Paris".repeat(60), population: 1 }), gapMs: 25 });
    const dying = api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Which city?", output: CITY }).then((r) => r.text()).catch(() => "");
    while (sent("openai").length < 1) await sleep(10);
    await sleep(2500); // a batch of the stream, and the partial answer, saved
    await worker.kill();
    await dying;
    loops.openai.script(asText(PARIS));
    await worker.restart();
    const deadline = Date.now() + 60_000;
    let answers;
    for (;;) {
      answers = (await history(id)).filter((m) => m.kind === "assistant");
      if (answers.at(-1)?.output || Date.now() > deadline) break;
      await sleep(200);
    }
    assert.equal(answers.at(-1)?.stop_reason, "end_turn", JSON.stringify(answers));
    assert.deepEqual(answers.at(-1).output, { status: "complete", object: PARIS }, "the recovered turn answered typed");
    assert.equal(sent("openai").at(-1).body.response_format.type, "json_schema");
  });

  test("on_invalid fallback answers the fallback", async () => {
    const id = await create({ model: "openai:gpt-4o" });
    const fallback = { city: "unknown", population: 0 };
    loops.openai.script({ text: "no idea" });
    const { chunks } = await send(id, { message: "Which city?", output: { ...CITY, on_invalid: "fallback", fallback } });
    assert.deepEqual(chunks.filter((c) => c.type === "data-output").at(-1).data, { status: "complete", object: fallback, fallback: true });
  });

  test("a bad output is a 400 naming its place, and a form the provider cannot take one naming why", async () => {
    const id = await create({ model: "workers-ai:@cf/meta/llama-4-scout-17b-16e-instruct" });
    const bad = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, {
      message: "x", output: { type: "object", schema: { type: "object", properties: { a: { $ref: "https://example.com/s.json" } } } },
    });
    assert.equal(bad.status, 400);
    assert.match((await bad.json()).error.message, /`output\/schema\/properties\/a\/\$ref`/);
    const native = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "x", output: { ...CITY, strategy: "native" } });
    assert.equal(native.status, 400);
    assert.match((await native.json()).error.message, /Workers AI does not take a JSON schema on a streamed call/);
    const chat = await api(worker.url, "POST", "/v1/chat", {
      id: "typed-bad", output: { type: "choice", options: [] },
      messages: [{ id: "m1", role: "user", parts: [{ type: "text", text: "x" }] }],
    });
    assert.equal(chat.status, 400);
    assert.match((await chat.json()).error.message, /`output\/options`/);
    assert.equal(sent("workers-ai").length, 0, "no model was called");
    // Nothing was kept of the refused messages.
    assert.equal((await history(id)).length, 0);
  });

  test("an agent's own output: listed, used by every turn, and its one step past the limit answers with tools off", async () => {
    const agents = (await (await api(worker.url, "GET", "/v1/agents")).json()).agents;
    assert.deepEqual(agents.filter((a) => !a.name.startsWith("one-step-")).map((a) => [a.name, a.output]), [["assistant", false], ["resilient", false], ["extractor", true]]);
    const id = await create({ agent: "extractor" });
    // Its one step ends on a tool call: one more, without tools, gives the answer.
    loops.anthropic.script({ tools: [{ id: "toolu_time", name: "current_time", input: {} }] }, viaTool(PARIS));
    const { chunks } = await send(id, { message: "Which city?" });
    assert.deepEqual(chunks.filter((c) => c.type === "data-output").at(-1).data, { status: "complete", object: PARIS });
    assert.equal(sent("anthropic").length, 2);
    // Its tools off, Claude is made to call the answer tool (a request whose history holds tool
    // calls must define a tool).
    const extra = sent("anthropic")[1].body;
    assert.deepEqual(extra.tools.map((t) => t.name), ["answer"], "no other tool on the extra step");
    assert.deepEqual(extra.tool_choice, { type: "tool", name: "answer", disable_parallel_tool_use: true });
  });

  test("a fallback model is asked in a form it takes, and its answer is read", async () => {
    const id = await create({ agent: "resilient" });
    const overloaded = { status: 503, message: "The server is overloaded", headers: { "retry-after": "0" } };
    loops.openai.script(overloaded, overloaded, overloaded);
    loops["workers-ai"].script(viaTool(PARIS));
    const { chunks } = await send(id, { message: "Which city?", output: CITY });
    assert.ok(chunks.some((c) => c.type === "data-provider-switch"));
    await answeredWith(chunks, PARIS);
    assert.equal(sent("openai")[0].body.response_format.type, "json_schema");
    const fallback = sent("workers-ai")[0].body;
    assert.equal(fallback.response_format, undefined, "never a schema on a streamed Workers AI call");
    assert.ok(fallback.tools.some((t) => t.function.name === "answer"));
    // Offered beside the turn's tools, the answer tool is named in its prompt.
    const system = fallback.messages.filter((m) => m.role === "system").map((m) => m.content).join("");
    assert.match(system, /calling the `answer` tool/);
  });

  test("a message's typed answer holds through a pause: the resumed turn answers typed", async () => {
    const pickCity = { name: "pick_city", description: "Ask the user for a city", input_schema: { type: "object", properties: {} } };
    const id = await create({ model: "openai:gpt-4o" });
    loops.openai.script({ tools: [{ id: "call_pick", name: "pick_city", input: {} }] });
    const first = await send(id, { message: "Which city?", output: CITY, tools: [pickCity] });
    assert.equal(first.chunks.at(-1).finishReason, "tool-calls");
    loops.openai.script(asText(PARIS));
    const { chunks } = await send(id, { tool_results: [{ tool_call_id: "call_pick", output: { city: "Paris" } }], tools: [pickCity] });
    assert.deepEqual(chunks.filter((c) => c.type === "data-output").at(-1).data, { status: "complete", object: PARIS });
    assert.equal(sent("openai")[1].body.response_format.type, "json_schema", "the resumed call is asked for the schema");
    // Ended, the turn's answer goes with it: a later turn that pauses and resumes answers as it
    // likes.
    loops.openai.script({ tools: [{ id: "call_pick2", name: "pick_city", input: {} }] });
    await send(id, { message: "Another one?", tools: [pickCity] });
    loops.openai.script({ text: "Rome, then." });
    const next = await send(id, { tool_results: [{ tool_call_id: "call_pick2", output: { city: "Rome" } }], tools: [pickCity] });
    assert.ok(next.chunks.some((c) => c.type === "text-delta"));
    assert.ok(!next.chunks.some((c) => c.type === "data-output"));
    assert.equal(sent("openai").length, 4);
    assert.equal(sent("openai")[3].body.response_format, undefined);
  });

  test("a retry may ask for the typed answer again", async () => {
    const id = await create({ model: "openai:gpt-4o" });
    loops.openai.script(asText(PARIS));
    await send(id, { message: "Which city?", output: CITY });
    loops.openai.script(asText({ ...PARIS, population: 2102651 }));
    const { chunks } = await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/retry`, { output: CITY }));
    assert.equal(chunks.filter((c) => c.type === "data-output").at(-1).data.object.population, 2102651);
    assert.equal(sent("openai")[1].body.response_format.type, "json_schema");
  });

  test("an output named like a tool the turn offers is a conflict", async () => {
    const id = await create({ model: "openai:gpt-4o" });
    const r = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "x", output: { ...CITY, name: "current_time" } });
    assert.equal(r.status, 409);
    assert.match((await r.json()).error.message, /`current_time`/);
    assert.equal(sent("openai").length, 0);
  });

  test("an array shows each whole, valid element as its own part", async () => {
    const id = await create({ model: "openai:gpt-4o" });
    const output = { type: "array", schema: { type: "object", properties: { name: { type: "string" } }, required: ["name"] } };
    const elements = [{ name: "Ada" }, { name: "Grace" }, { name: "Barbara" }];
    loops.openai.script(asText({ elements }));
    const { chunks } = await send(id, { message: "Three names", output });
    const shown = chunks.filter((c) => c.type === "data-output-element");
    assert.deepEqual(shown.map((c) => c.data), elements.map((element, index) => ({ index, element })));
    assert.equal(new Set(shown.map((c) => c.id)).size, 3);
    assert.deepEqual(chunks.filter((c) => c.type === "data-output").at(-1).data, { status: "complete", object: elements });
  });

  test("a choice answers one of its options", async () => {
    const id = await create({ model: "ollama:llama3.2" });
    loops.ollama.script(asText({ result: "red" }));
    const { chunks } = await send(id, { message: "Pick", output: { type: "choice", options: ["red", "green"] } });
    assert.deepEqual(chunks.filter((c) => c.type === "data-output").at(-1).data, { status: "complete", object: "red" });
    assert.deepEqual(sent("ollama")[0].body.format.properties.result.enum, ["red", "green"]);
  });
});
