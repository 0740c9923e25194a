// The contract, fuzzed: Schemathesis generates requests from GET /openapi.json against the real
// Worker, with and without credentials. No 5xx, no response outside the document, no crash; what
// the document allows is accepted and what it does not is refused (`schemathesis.toml` says
// where and why not); afterwards every conversation the fuzzer made still reads back and answers
// a new message.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import path from "node:path";
import { test } from "node:test";
import { ROOT, api, readUiStream, setup } from "./harness.mjs";

const ST = path.join(ROOT, ".tools/fuzz-venv/bin/st");
const KEY = { authorization: "Bearer sk-fuzz" };
const { anthropic, worker } = setup({ vars: { ALLOW_ANONYMOUS: "false", API_KEYS: "fuzz:sk-fuzz" } });
anthropic.respond = () => ({ text: "ok" });

// One worker: with two threads, Hypothesis describing its strategies' lambdas in both at once
// trips a CPython 3.11 bug (gh-106905, "AST constructor recursion depth mismatch"), which
// Schemathesis reports as a runtime error of its own after every case passed. One worker still
// makes thousands of requests within --max-time.
function schemathesis(extra) {
  const args = [
    "--config-file", path.join(ROOT, "tests/e2e/schemathesis.toml"),
    "run", `${worker.url}/openapi.json`, "--url", worker.url,
    "--phases", "examples,coverage,fuzzing", "--max-examples", "30", "--seed", "20261122",
    "--workers", "1", "--request-timeout", "30", "--max-time", "70", "--no-color",
    "--suppress-health-check", "all", ...extra,
  ];
  return new Promise((resolve) => {
    const child = spawn(ST, args, { env: { ...process.env, SCHEMATHESIS_TELEMETRY: "false" } });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    child.on("exit", (code) => resolve({ code, out }));
  });
}

/** Requests the Worker answered, as wrangler dev logged them. */
const served = () => worker.log().split("\n").filter((l) => /\[wrangler:info\] (GET|POST|PUT|DELETE|PATCH|OPTIONS|HEAD) /.test(l)).length;

test("Schemathesis finds no 5xx and no response outside the document, with and without credentials", { timeout: 600_000 }, async () => {
  const before = served();
  // With credentials DELETE is left out, so what the fuzzer created is there to check afterwards
  // (deletion has its own end-to-end tests); without credentials every operation is tried.
  const authed = await schemathesis(["-H", `Authorization: ${KEY.authorization}`, "--exclude-method", "DELETE"]);
  assert.equal(authed.code, 0, authed.out.slice(-6000));
  const anonymous = await schemathesis([]);
  assert.equal(anonymous.code, 0, anonymous.out.slice(-6000));
  const requests = served() - before;
  console.log(`# schemathesis: ${requests} requests`);
  assert.ok(requests >= 1000, `only ${requests} requests were made`);
  assert.equal((await fetch(`${worker.url}/healthz`)).status, 200, "the Worker is still up");
  assert.doesNotMatch(worker.log(), /panicked|RuntimeError: unreachable/);
});

test("every conversation the fuzzer made still reads back and accepts a new message", { timeout: 300_000 }, async () => {
  const ids = [];
  for (let cursor = null; ;) {
    const page = await (await api(worker.url, "GET", `/v1/conversations?limit=100${cursor ? `&cursor=${cursor}` : ""}`, undefined, KEY)).json();
    ids.push(...page.conversations.map((c) => c.id));
    if (!page.next_cursor) break;
    cursor = encodeURIComponent(page.next_cursor);
  }
  assert.ok(ids.length > 0, "the fuzzer created conversations");
  for (const id of ids) {
    const history = await api(worker.url, "GET", `/v1/conversations/${id}/messages`, undefined, KEY);
    assert.equal(history.status, 200, id);
    const sent = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "still there?", delivery: "followup" }, KEY);
    assert.ok([200, 202].includes(sent.status), `${id}: ${sent.status} ${sent.status === 200 ? "" : await sent.text()}`);
    if (sent.status === 200) {
      const { chunks } = await readUiStream(sent);
      assert.equal(chunks.at(-1).type, "finish", `${id}: ${JSON.stringify(chunks.slice(-3))}`);
    }
  }
  console.log(`# ${ids.length} conversations checked`);
});
