// Scheduled turns: the model's `schedule_turn` and the API's `POST .../schedules` make turns the
// conversation's object runs later with no request from anyone. Each runs as a message's turn
// would (the instruction a `system_event` the model reads), streams to a reader of `.../stream`,
// lands in history, records its outcome on the schedule; a recurring one pauses after 3 failed
// runs in a row; one due while a turn runs waits for it; a deleted conversation's go with it;
// occurrences missed while the runtime was down run once; one cut off by the runtime dying is
// finished after the restart, and one interrupted at every recovery is given up as a failure.
// `SCHEDULE_MIN_INTERVAL_SECONDS=2` lets a six-field (seconds) cron expression recur every 3 s
// and a one-time schedule run 2 s after it is made, not sooner; a recurring schedule ends after
// its `max_runs`; a conversation makes at most `MAX_SCHEDULES_PER_DAY` (5 here) a day.

import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { after, before, beforeEach, test } from "node:test";
import { anthropicLoopback, anthropicVars, api, conversationObjects, freshPersistDir, readUiStream, startWorker, withinOneRateWindow } from "./harness.mjs";

let anthropic, worker, persistDir, vars;

before(async () => {
  anthropic = await anthropicLoopback();
  persistDir = freshPersistDir();
  vars = {
    ...anthropicVars(anthropic),
    SCHEDULE_MIN_INTERVAL_SECONDS: "2",
    MAX_SCHEDULES_PER_CONVERSATION: "3",
    MAX_SCHEDULES_PER_DAY: "5",
    // Scheduled turns count against the rate limit and budgets as messages' do.
    RATE_LIMIT_PER_MINUTE: "30",
    USER_BUDGET_USD: "100",
    // Requests without a key are the anonymous user's; each key is someone else (each with a
    // rate limit of their own), `ops` an admin.
    API_KEYS: "bob:sk-schedules-bob,carol:sk-schedules-carol,dave:sk-schedules-dave,erin:sk-schedules-erin,ops:sk-schedules-ops:admin",
  };
  worker = await startWorker({ persistDir, vars });
});

after(async () => {
  await worker?.stop();
  await anthropic?.close();
});

beforeEach(() => {
  anthropic.clear();
  anthropic.requests.length = 0;
});

const as = (name) => ({ authorization: `Bearer sk-schedules-${name}` });
const newConversation = async (who) => (await (await api(worker.url, "POST", "/v1/conversations", {}, who)).json()).id;
const history = async (id, who) => (await (await api(worker.url, "GET", `/v1/conversations/${id}/messages?limit=100`, undefined, who)).json()).messages;
const schedules = async (id, who) => (await (await api(worker.url, "GET", `/v1/conversations/${id}/schedules`, undefined, who)).json()).schedules;

/** The schedule's list once its first schedule has `status`. */
const settled = (id, status, seconds, who) => eventually(async () => {
  const list = await schedules(id, who);
  return list[0]?.status === status ? list : null;
}, seconds, `the schedule to be ${status}`);

/** Polls until `check()` returns something truthy, or fails after `seconds`. */
async function eventually(check, seconds, what) {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`not within ${seconds} s: ${what}`);
    await sleep(150);
  }
}

/** The text the model was sent last in a request. */
const lastUserText = (request) => {
  const last = request.body.messages.at(-1);
  return typeof last.content === "string" ? last.content : last.content.map((b) => b.text ?? "").join("");
};

test("a turn the model schedules 5 s ahead runs with no request: a reader sees it stream and the history keeps it", async () => {
  const id = await newConversation();
  anthropic.script(
    { tools: [{ id: "toolu_s1", name: "schedule_turn", input: { instruction: "Tell the user their tea is ready.", delay_seconds: 5 } }] },
    { text: "I will remind you in 5 seconds." },
    // The scheduled turn's answer, slow enough for a reader to join it.
    { text: "Your tea is ready! Enjoy it while it is hot.", writes: "event", gapMs: 250 },
  );
  const asked = Date.now();
  const { chunks } = await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Remind me about my tea in 5 seconds." }));
  const output = chunks.find((c) => c.type === "tool-output-available");
  assert.equal(output.output.status, "scheduled");

  const [made] = await schedules(id);
  assert.equal(made.instruction, "Tell the user their tea is ready.");
  assert.equal(made.status, "active");
  assert.ok(Math.abs(made.next_run_at - (asked + 5_000)) < 3_000, `next run ${made.next_run_at - asked} ms after asking`);
  assert.equal(anthropic.requests.length, 2);

  // Nobody sends anything; a reader waits for a turn to stream.
  const stream = await eventually(async () => {
    const r = await api(worker.url, "GET", `/v1/conversations/${id}/stream`);
    if (r.status === 200) return r;
    await r.body?.cancel();
    return null;
  }, 20, "the scheduled turn to start");
  assert.ok(Date.now() >= made.next_run_at - 50, "not before its time");
  const seen = await readUiStream(stream);
  assert.equal(seen.chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join(""), "Your tea is ready! Enjoy it while it is hot.");
  assert.deepEqual(seen.chunks.at(-1), { type: "finish", finishReason: "stop" });

  // The model read the instruction as the reason for the turn, not as the user's words.
  assert.equal(anthropic.requests.length, 3);
  const reason = lastUserText(anthropic.requests[2]);
  assert.match(reason, /Scheduled turn: schedule `[^`]+` started this turn/);
  assert.ok(reason.endsWith("Tell the user their tea is ready."), reason);

  const rows = await eventually(async () => {
    const rows = await history(id);
    return rows.at(-1)?.kind === "assistant" && rows.length >= 6 ? rows : null;
  }, 5, "the scheduled answer in the history");
  const event = rows.at(-2);
  assert.deepEqual([event.kind, event.text, event.schedule], ["system_event", "Tell the user their tea is ready.", made.id]);
  assert.equal(rows.at(-1).content[0].text, "Your tea is ready! Enjoy it while it is hot.");

  const [ran] = await eventually(async () => {
    const list = await schedules(id);
    return list[0]?.status === "done" ? list : null;
  }, 5, "the schedule recorded as done");
  assert.deepEqual([ran.runs, ran.failures, ran.last_outcome, ran.next_run_at, ran.running], [1, 0, "completed", null, false]);
  assert.ok(ran.last_run_at >= made.next_run_at);
});

test("a cron schedule runs on each occurrence and pauses itself after 3 failed runs in a row", async () => {
  const id = await newConversation();
  anthropic.script(
    { text: "The build is green." },
    { status: 400, message: "the build check broke" },
    { status: 400, message: "the build check broke" },
    { status: 400, message: "the build check broke" },
  );
  const created = await api(worker.url, "POST", `/v1/conversations/${id}/schedules`, { instruction: "Check the build.", cron: "*/3 * * * * *" });
  assert.equal(created.status, 201);
  const schedule = await created.json();
  assert.equal(schedule.cron, "*/3 * * * * *");
  assert.equal(schedule.next_run_at % 3_000, 0);

  const [paused] = await eventually(async () => {
    const list = await schedules(id);
    return list[0]?.status === "paused" ? list : null;
  }, 40, "the schedule to pause");
  assert.deepEqual([paused.runs, paused.failures, paused.last_outcome, paused.next_run_at], [4, 3, "failed", null]);
  assert.match(paused.last_error, /400|build check/);

  // One run per occurrence: four requests, each on its own three-second mark.
  assert.equal(anthropic.requests.length, 4);
  const gaps = anthropic.requests.slice(1).map((r, i) => r.at - anthropic.requests[i].at);
  assert.ok(gaps.every((g) => g > 2_000), `gaps between runs: ${gaps.map(Math.round)} ms`);

  const rows = await eventually(async () => {
    const rows = await history(id);
    return rows.some((m) => m.kind === "system_event" && !m.schedule) ? rows : null;
  }, 5, "the pause noted in the history");
  assert.equal(rows.filter((m) => m.kind === "system_event" && m.schedule === schedule.id).length, 4);
  assert.equal(rows.find((m) => m.kind === "assistant").content[0].text, "The build is green.");
  const note = rows.find((m) => m.kind === "system_event" && !m.schedule);
  assert.match(note.text, /paused after 3 failed runs in a row/);

  // Paused, it runs no more.
  await sleep(4_000);
  assert.equal(anthropic.requests.length, 4);
});

test("a schedule due while a turn runs waits for it, then runs", async () => {
  const id = await newConversation();
  const long = "This answer takes a while to stream, word by word, to the very end.";
  anthropic.script({ text: long, writes: "event", gapMs: 200 }, { text: "Scheduled work done." });
  const running = api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Write slowly." }).then(readUiStream);
  await eventually(() => anthropic.requests.length === 1, 10, "the first turn to call the model");
  const created = await api(worker.url, "POST", `/v1/conversations/${id}/schedules`, { instruction: "Do the scheduled work.", delay_seconds: 2 });
  assert.equal(created.status, 201);
  const { chunks } = await running;
  assert.equal(chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join(""), long);

  const [done] = await eventually(async () => {
    const list = await schedules(id);
    return list[0]?.status === "done" ? list : null;
  }, 20, "the scheduled turn to run");
  assert.equal(done.last_outcome, "completed");
  // It started only once the first turn had stored its answer: the model saw it whole.
  const scheduled = anthropic.requests[1].body.messages;
  assert.equal(scheduled.at(-2).role, "assistant");
  assert.equal(scheduled.at(-2).content.map((b) => b.text).join(""), long);
  assert.ok(lastUserText(anthropic.requests[1]).endsWith("Do the scheduled work."));
  const kinds = (await history(id)).map((m) => m.kind);
  assert.deepEqual(kinds, ["user", "assistant", "system_event", "assistant"]);
});

test("requests are checked: a time in the past, a bad or too frequent expression, the limit, another's conversation", async () => {
  const dave = as("dave");
  const id = await newConversation(dave);
  const post = (body) => api(worker.url, "POST", `/v1/conversations/${id}/schedules`, body, dave);
  const refused = async (body, status, pattern) => {
    const r = await post(body);
    assert.equal(r.status, status, JSON.stringify(body));
    const { error } = await r.json();
    assert.match(error.message, pattern);
  };
  await refused({ instruction: "x", at: "2020-01-01T00:00:00Z" }, 400, /has passed/);
  await refused({ instruction: "x", at: "tomorrow" }, 400, /RFC 3339/);
  await refused({ instruction: "x", cron: "0 0 31 2 *" }, 400, /never comes/);
  await refused({ instruction: "x", cron: "* * * * * *" }, 400, /at most every 2 s/);
  await refused({ instruction: "x", cron: "61 * * * *" }, 400, /minute field/);
  await refused({ instruction: "x", delay_seconds: 5, cron: "@daily" }, 400, /exactly one/);
  await refused({ instruction: "x", at: null, delay_seconds: 5 }, 400, /null/);
  await refused({ instruction: "   ", delay_seconds: 5 }, 400, /instruction/);

  const far = (n) => ({ instruction: `far ${n}`, at: new Date(Date.now() + (n + 1) * 86_400_000).toISOString() });
  const ids = [];
  for (const n of [1, 2, 3]) {
    const r = await post(far(n));
    assert.equal(r.status, 201);
    ids.push((await r.json()).id);
  }
  await refused(far(4), 409, /keeps 3 schedules/);

  // Someone else's conversation is not there for them.
  const other = as("bob");
  const theirs = await api(worker.url, "GET", `/v1/conversations/${id}/schedules`, undefined, other);
  assert.equal(theirs.status, 404);
  assert.equal((await api(worker.url, "DELETE", `/v1/conversations/${id}/schedules/${ids[0]}`, undefined, other)).status, 404);

  // Cancelling frees a place.
  assert.equal((await api(worker.url, "DELETE", `/v1/conversations/${id}/schedules/${ids[0]}`, undefined, dave)).status, 204);
  assert.equal((await api(worker.url, "DELETE", `/v1/conversations/${id}/schedules/${ids[0]}`, undefined, dave)).status, 404);
  assert.deepEqual((await schedules(id, dave)).map((s) => s.instruction), ["far 2", "far 3"]);
  assert.equal((await post(far(5))).status, 201);
  assert.equal((await api(worker.url, "POST", "/v1/conversations/nope/schedules", far(6), dave)).status, 404);
});

test("a one-time schedule is at least SCHEDULE_MIN_INTERVAL_SECONDS ahead, and a conversation makes at most MAX_SCHEDULES_PER_DAY a day", async () => {
  const erin = as("erin");
  const id = await newConversation(erin);
  const post = (body) => api(worker.url, "POST", `/v1/conversations/${id}/schedules`, body, erin);
  const refused = async (body, status, pattern) => {
    const r = await post(body);
    assert.equal(r.status, status, JSON.stringify(body));
    const { error } = await r.json();
    assert.match(error.message, pattern);
    return r;
  };
  // Sooner than the interval a cron expression may recur at: a loop of self-rescheduling turns
  // would run faster than any recurring schedule could.
  await refused({ instruction: "Too soon.", delay_seconds: 1 }, 400, /at least 2 s ahead \(SCHEDULE_MIN_INTERVAL_SECONDS\)/);
  await refused({ instruction: "Too soon.", at: new Date(Date.now() + 1_000).toISOString() }, 400, /SCHEDULE_MIN_INTERVAL_SECONDS/);
  assert.deepEqual(await schedules(id, erin), []);

  // Made and cancelled at once, each still counts toward the day's.
  for (let n = 1; n <= 5; n++) {
    const made = await post({ instruction: `Later ${n}.`, delay_seconds: 3_600 });
    assert.equal(made.status, 201);
    const { id: sid } = await made.json();
    assert.equal((await api(worker.url, "DELETE", `/v1/conversations/${id}/schedules/${sid}`, undefined, erin)).status, 204);
  }
  const sixth = await refused({ instruction: "One too many.", delay_seconds: 3_600 }, 429, /made 5 schedules in the last 24 hours.*MAX_SCHEDULES_PER_DAY/);
  const wait = Number(sixth.headers.get("retry-after"));
  assert.ok(wait > 86_000 && wait <= 86_400, `retry after ${wait} s`);
  assert.deepEqual(await schedules(id, erin), []);
  // Another conversation counts its own.
  const other = await newConversation(erin);
  assert.equal((await api(worker.url, "POST", `/v1/conversations/${other}/schedules`, { instruction: "Fine here.", delay_seconds: 3_600 }, erin)).status, 201);
});

test("a recurring schedule ends after its max_runs, and the history says so", async () => {
  const id = await newConversation();
  anthropic.script({ text: "Tick one." }, { text: "Tick two." });
  const created = await api(worker.url, "POST", `/v1/conversations/${id}/schedules`, { instruction: "Tick.", cron: "*/2 * * * * *", max_runs: 2 });
  assert.equal(created.status, 201);
  const made = await created.json();
  assert.equal(made.max_runs, 2);

  const [ended] = await settled(id, "done", 20);
  assert.deepEqual([ended.runs, ended.last_outcome, ended.next_run_at, ended.running], [2, "completed", null, false]);
  const rows = await eventually(async () => {
    const rows = await history(id);
    return rows.some((m) => m.kind === "system_event" && !m.schedule) ? rows : null;
  }, 5, "the end noted in the history");
  assert.match(rows.find((m) => m.kind === "system_event" && !m.schedule).text, /ended after 2 runs: `max_runs` is 2/);
  assert.equal(rows.filter((m) => m.kind === "system_event" && m.schedule === made.id).length, 2);
  // Ended, it runs no more.
  await sleep(4_000);
  assert.equal(anthropic.requests.length, 2);
  assert.equal((await schedules(id))[0].runs, 2);
});

test("a deleted conversation's schedules go with it", async () => {
  const id = await newConversation();
  assert.equal((await api(worker.url, "POST", `/v1/conversations/${id}/schedules`, { instruction: "Daily digest.", cron: "@daily" })).status, 201);
  assert.ok((await conversationObjects(persistDir)).some((o) => o.conversation === id && o.tables.includes("schedules")));
  assert.equal((await api(worker.url, "DELETE", `/v1/conversations/${id}`)).status, 204);
  assert.equal((await api(worker.url, "GET", `/v1/conversations/${id}/schedules`)).status, 404);
  const left = (await conversationObjects(persistDir)).filter((o) => o.conversation === id);
  assert.deepEqual(left.flatMap((o) => o.tables), []);
});

test("a scheduled turn counts against its owner's rate limit: past it the run is refused and recorded, the model not called", async () => {
  const carol = as("carol");
  // All of this (about 4 s) must fall in one of the limiter's windows, or the run would find a
  // fresh one.
  await withinOneRateWindow(8_000);
  const id = await newConversation(carol);
  const created = await api(worker.url, "POST", `/v1/conversations/${id}/schedules`, { instruction: "Summarise the day.", delay_seconds: 3 }, carol);
  assert.equal(created.status, 201);
  // The rest of carol's 30 requests this minute.
  for (let i = 0; i < 28; i++) await api(worker.url, "POST", `/v1/conversations/${id}/schedules`, { instruction: "x", cron: "bad" }, carol);
  assert.equal((await api(worker.url, "POST", "/v1/conversations", {}, carol)).status, 429);

  const [ran] = await settled(id, "done", 15, carol);
  assert.equal(ran.last_outcome, "failed");
  assert.match(ran.last_error, /too many requests/);
  assert.equal(anthropic.requests.length, 0);
  // Refused as a message would be: nothing of it is kept.
  assert.deepEqual(await history(id, carol), []);
});

test("a scheduled turn is held to its owner's budget", async () => {
  const bob = as("bob");
  const set = await api(worker.url, "PUT", "/v1/admin/budgets/key%3Abob", { limit_usd: 0, period: "day" }, as("ops"));
  assert.equal(set.status, 200);
  const id = await newConversation(bob);
  assert.equal((await api(worker.url, "POST", `/v1/conversations/${id}/schedules`, { instruction: "Spend some.", delay_seconds: 2 }, bob)).status, 201);
  const [ran] = await settled(id, "done", 15, bob);
  assert.equal(ran.last_outcome, "failed");
  assert.match(ran.last_error, /budget/);
  assert.equal(anthropic.requests.length, 0);
});

test("occurrences missed while the runtime was down run once when it is back, not once each", async () => {
  const id = await newConversation();
  anthropic.respond = () => ({ text: "Caught up." });
  // Two occurrences a minute, both while `wrangler dev` is down; the next after it is back is
  // most of a minute away, so any run soon after the restart is the catch-up.
  const start = Date.now();
  const second = (ms) => Math.floor((start + ms) / 1000) % 60;
  const cron = `${second(8_000)},${second(14_000)} * * * * *`;
  const created = await api(worker.url, "POST", `/v1/conversations/${id}/schedules`, { instruction: "Catch up.", cron });
  assert.equal(created.status, 201);
  await worker.stop();
  await sleep(Math.max(0, start + 17_000 - Date.now()));
  worker = await startWorker({ persistDir, vars });
  const restarted = Date.now();

  const [ran] = await eventually(async () => {
    const list = await schedules(id);
    return list[0]?.runs >= 1 && !list[0].running ? list : null;
  }, 30, "the missed occurrences to run");
  await sleep(3_000);
  const [after] = await schedules(id);
  assert.equal(after.runs, 1, "two missed occurrences, one run");
  assert.equal(anthropic.requests.length, 1);
  assert.ok(ran.last_run_at >= restarted - 5_000, "it ran after the restart");
  // The next run is the next occurrence after the catch-up, a minute on from the first.
  assert.equal(after.next_run_at, Math.floor((start + 8_000) / 1000) * 1000 + 60_000);
  assert.equal(after.last_outcome, "completed");
  assert.equal((await api(worker.url, "DELETE", `/v1/conversations/${id}/schedules/${after.id}`)).status, 204);
  anthropic.respond = null;
});

test("a scheduled turn cut off by the runtime dying is finished after the restart, and its schedule records it", async () => {
  const id = await newConversation();
  // `gapMs` pauses between the 1-9 byte pieces the loopback writes: about 10 s in all.
  anthropic.script({ text: "This scheduled answer is cut off when the runtime dies. ".repeat(6), gapMs: 3 });
  assert.equal((await api(worker.url, "POST", `/v1/conversations/${id}/schedules`, { instruction: "Write the long report.", delay_seconds: 2 })).status, 201);
  await eventually(() => anthropic.requests.length === 1, 15, "the scheduled turn to call the model");
  await sleep(3_000); // long enough for a batch of the stream (and the partial answer) to be saved
  const [running] = await schedules(id);
  assert.equal(running.running, true);
  await worker.kill();
  anthropic.script({ text: "Here is the rest of the report." });
  worker = await startWorker({ persistDir, vars });

  const [done] = await settled(id, "done", 60);
  assert.deepEqual([done.runs, done.last_outcome, done.running], [1, "completed", false]);
  const rows = await eventually(async () => {
    const rows = await history(id);
    return rows.at(-1)?.stop_reason === "end_turn" ? rows : null;
  }, 10, "the finished answer in the history");
  assert.deepEqual(rows.map((m) => [m.kind, m.stop_reason]), [["system_event", undefined], ["assistant", "interrupted"], ["assistant", "end_turn"]]);
  assert.equal(rows[0].schedule, done.id);
  assert.equal(rows[2].content[0].text, "Here is the rest of the report.");
  // The model was asked again with the schedule's instruction as the reason.
  assert.ok(lastUserText(anthropic.requests.at(-1)).endsWith("Write the long report."));
});

test("a scheduled turn interrupted at every recovery is given up, and its schedule records a failure", async () => {
  const id = await newConversation();
  // Every call streams slowly (about 10 s), so each is still running when the runtime dies.
  anthropic.respond = () => ({ text: "An answer the runtime never lets finish. ".repeat(6), gapMs: 3 });
  assert.equal((await api(worker.url, "POST", `/v1/conversations/${id}/schedules`, { instruction: "Write the report nobody will read.", delay_seconds: 2 })).status, 201);
  await eventually(() => anthropic.requests.length === 1, 15, "the scheduled turn to call the model");
  // The runtime dies during the turn and during each of its 3 recoveries. A request to the
  // conversation after each restart (a retry, refused while the turn is unfinished) has the
  // object take the interrupted turn up at once rather than at its next alarm.
  for (let call = 2; call <= 5; call++) {
    await worker.kill();
    worker = await startWorker({ persistDir, vars });
    assert.equal((await api(worker.url, "POST", `/v1/conversations/${id}/retry`, {})).status, 409);
    if (call <= 4) await eventually(() => anthropic.requests.length === call, 30, `recovery ${call - 1} to call the model`);
  }
  const [given] = await settled(id, "done", 30);
  assert.deepEqual([given.runs, given.last_outcome, given.running], [1, "failed", false]);
  assert.match(given.last_error, /interrupted 3 times/);
  const last = (await history(id)).at(-1);
  assert.equal(last.kind, "system_event");
  assert.match(last.text, /interrupted 3 times .* was stopped/);
  await sleep(1_000);
  assert.equal(anthropic.requests.length, 4, "given up: the model is not called again");
  anthropic.respond = null;
});
