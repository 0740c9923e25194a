// Who may call, and that users only ever see their own conversations.

import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { test } from "node:test";
import { api, readUiStream, setup, withinOneRateWindow } from "./harness.mjs";

const SECRET = "jwt-secret-for-tests";

const b64url = (s) => Buffer.from(s).toString("base64url");
function jwt(claims, secret = SECRET) {
  const body = `${b64url(JSON.stringify({ alg: "HS256", typ: "JWT" }))}.${b64url(JSON.stringify(claims))}`;
  return `${body}.${createHmac("sha256", secret).update(body).digest("base64url")}`;
}
const now = () => Math.floor(Date.now() / 1000);
const as = (token) => ({ authorization: `Bearer ${token}` });
const alice = as(jwt({ sub: "alice", exp: now() + 600 }));
const bob = as(jwt({ sub: "bob", exp: now() + 600 }));

const { anthropic, worker } = setup({
  vars: { ALLOW_ANONYMOUS: "false", CORS_ORIGINS: "http://localhost:5173", JWT_SECRET: SECRET, API_KEYS: "backend:sk-server-key", RATE_LIMIT_PER_MINUTE: "30" },
});

test("requests without a valid token are 401 JSON errors that never echo the token", async () => {
  const cases = [
    [undefined, /Authorization: Bearer/],
    [{ authorization: "Basic YWxpY2U6cHc=" }, /Bearer <token>/],
    [as("sk-wrong"), /not a valid key or JWT/],
    [as(jwt({ sub: "alice" }, "another-secret")), /bad signature/],
    [as(jwt({ sub: "alice", exp: now() - 3600 })), /expired/],
    [as(jwt({ sub: "alice", nbf: now() + 3600, exp: now() + 7200 })), /not valid yet/],
    [as(jwt({ sub: "alice" })), /no `exp` claim/],
    [as(jwt({ sub: "key:backend", exp: now() + 600 })), /reserved/],
  ];
  for (const [headers, why] of cases) {
    const r = await api(worker.url, "POST", "/v1/conversations", {}, headers);
    assert.equal(r.status, 401, JSON.stringify(headers));
    const text = await r.text();
    const json = JSON.parse(text);
    assert.equal(json.error.code, "unauthorized");
    assert.match(json.error.message, why);
    if (headers?.authorization) assert.ok(!text.includes(headers.authorization.slice(7)), "the token is not echoed");
  }
  assert.equal((await api(worker.url, "GET", "/healthz")).status, 200, "health stays public");
});

test("a user sees and touches only their own conversations; others get 404 everywhere", async () => {
  const created = await api(worker.url, "POST", "/v1/conversations", { title: "alice's" }, alice);
  assert.equal(created.status, 201);
  const { id } = await created.json();
  anthropic.script({ text: "Hello Alice." });
  const { chunks } = await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "hi" }, alice));
  assert.equal(chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join(""), "Hello Alice.");

  const requests = anthropic.requests.length;
  for (const [method, path, body] of [
    ["GET", `/v1/conversations/${id}`],
    ["GET", `/v1/conversations/${id}/messages`],
    ["POST", `/v1/conversations/${id}/messages`, { message: "let me in" }],
    ["POST", `/v1/conversations/${id}/messages`, { tool_results: [{ tool_call_id: "toolu_x", output: "x" }] }],
    ["POST", `/v1/conversations/${id}/retry`],
    ["POST", `/v1/conversations/${id}/cancel`],
    ["DELETE", `/v1/conversations/${id}`],
  ]) {
    const r = await api(worker.url, method, path, body, bob);
    assert.equal(r.status, 404, `${method} ${path}`);
    assert.equal((await r.json()).error.code, "not_found");
  }
  assert.equal(anthropic.requests.length, requests, "bob's message never reached the model");
  const history = await (await api(worker.url, "GET", `/v1/conversations/${id}/messages`, undefined, alice)).json();
  assert.deepEqual(history.messages.map((m) => m.kind), ["user", "assistant"]);
});

test("CORS: preflight without credentials, allowed origins echoed on every response, others not", async () => {
  const preflight = (origin) => fetch(`${worker.url}/v1/conversations`, {
    method: "OPTIONS",
    headers: { origin, "access-control-request-method": "POST", "access-control-request-headers": "authorization, content-type, idempotency-key" },
  });
  const ok = await preflight("http://localhost:5173");
  assert.equal(ok.status, 204);
  assert.equal(ok.headers.get("access-control-allow-origin"), "http://localhost:5173");
  assert.match(ok.headers.get("access-control-allow-headers"), /authorization/);
  // A browser on another origin may make its sends repeatable.
  assert.match(ok.headers.get("access-control-allow-headers"), /idempotency-key/);
  assert.match(ok.headers.get("access-control-allow-methods"), /POST/);
  // The artifacts route takes PUT from a browser too.
  assert.match(ok.headers.get("access-control-allow-methods"), /\bPUT\b/);
  const other = await preflight("https://elsewhere.example");
  assert.equal(other.headers.get("access-control-allow-origin"), null);

  const denied = await api(worker.url, "POST", "/v1/conversations", {}, { origin: "http://localhost:5173" });
  assert.equal(denied.status, 401);
  assert.equal(denied.headers.get("access-control-allow-origin"), "http://localhost:5173", "a browser can read the error");
  const created = await api(worker.url, "POST", "/v1/conversations", {}, { ...alice, origin: "http://localhost:5173" });
  assert.equal(created.status, 201);
  assert.equal(created.headers.get("access-control-allow-origin"), "http://localhost:5173");
});

test("a server key from API_KEYS acts as its named user", async () => {
  const created = await api(worker.url, "POST", "/v1/conversations", {}, as("sk-server-key"));
  assert.equal(created.status, 201);
  const { id } = await created.json();
  assert.equal((await api(worker.url, "GET", `/v1/conversations/${id}`, undefined, as("sk-server-key"))).status, 200);
  assert.equal((await api(worker.url, "GET", `/v1/conversations/${id}`, undefined, alice)).status, 404);
});

test("each user may send 30 messages a minute; the 31st is a 429 with Retry-After, reads and other users go on", async () => {
  const carol = as(jwt({ sub: "carol", exp: now() + 600 }));
  // The 31 requests (about a second) must fall in one of the limiter's windows.
  await withinOneRateWindow(10_000);
  const { id } = await (await api(worker.url, "POST", "/v1/conversations", {}, carol)).json();
  // Counted before the body is read: a refused body still counts as a message request. The
  // conversation's creation counted too.
  for (let i = 0; i < 29; i++) {
    const r = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, {}, carol);
    assert.equal(r.status, 400, `request ${i + 1}`);
  }
  const limited = await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "hi" }, carol);
  assert.equal(limited.status, 429);
  assert.equal(limited.headers.get("retry-after"), "60");
  const body = await limited.json();
  assert.equal(body.error.code, "rate_limited");
  assert.match(body.error.message, /30 a minute/);
  assert.equal((await api(worker.url, "POST", "/v1/chat", { id: "c1", messages: [] }, carol)).status, 429);
  // So do writes that take D1 space: a new conversation, an artifact's new version.
  assert.equal((await api(worker.url, "POST", "/v1/conversations", {}, carol)).status, 429);
  assert.equal((await api(worker.url, "PUT", `/v1/conversations/${id}/artifacts/a1`, { content: "x" }, carol)).status, 429);
  // Reads are not counted, and the limit is per user.
  for (let i = 0; i < 5; i++) assert.equal((await api(worker.url, "GET", `/v1/conversations/${id}/messages`, undefined, carol)).status, 200);
  const dave = as(jwt({ sub: "dave", exp: now() + 600 }));
  assert.equal((await api(worker.url, "POST", `/v1/conversations/${id}/messages`, {}, dave)).status, 400);
});
