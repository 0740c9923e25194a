// Declarative HTTP tools end to end: a tool declared in HTTP_TOOLS calls a loopback API with a
// secret header that never appears in any stream, history row, provider request or log line; a
// service that keeps failing is retried, then its circuit opens and its tool answers
// "unavailable" at once without calling it, and the conversation goes on.

import assert from "node:assert/strict";
import http from "node:http";
import { after, test } from "node:test";
import { api, readUiStream, setup } from "./harness.mjs";

const SECRET = "sk-weather-7f3a9c2e-SECRET";
let server, apiUrl, elsewhere, elsewhereUrl;
const hits = { weather: [], down: 0, moved: 0, elsewhere: [] };

async function startServers() {
  server = http.createServer((req, res) => {
    const url = new URL(req.url, "http://x");
    if (url.pathname.startsWith("/weather/")) {
      hits.weather.push({ key: req.headers["x-api-key"], path: url.pathname, query: url.search, idempotency: req.headers["idempotency-key"] });
      if (req.headers["x-api-key"] !== SECRET) {
        res.writeHead(401, { "content-type": "application/json" }).end('{"error":"bad key"}');
        return;
      }
      const city = decodeURIComponent(url.pathname.slice("/weather/".length));
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ city, forecast: { today: "sunny", days: Number(url.searchParams.get("days")) } }));
      return;
    }
    if (url.pathname.startsWith("/moved/")) {
      // Same origin first, then another server (another origin), as an API that moved would.
      hits.moved++;
      const to = url.pathname.endsWith("/away") ? `${elsewhereUrl}/landing?from=moved` : `${url.pathname}/away`;
      res.writeHead(hits.moved % 2 ? 301 : 302, { location: to }).end();
      return;
    }
    if (url.pathname.startsWith("/loop/")) {
      res.writeHead(307, { location: url.pathname + "x" }).end();
      return;
    }
    hits.down++;
    res.writeHead(503, { "content-type": "text/plain" }).end("maintenance");
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  elsewhere = http.createServer((req, res) => {
    hits.elsewhere.push({ key: req.headers["x-api-key"], url: req.url, method: req.method });
    res.writeHead(200, { "content-type": "application/json" }).end('{"landed": true}');
  });
  await new Promise((r) => elsewhere.listen(0, "127.0.0.1", r));
  elsewhereUrl = `http://127.0.0.1:${elsewhere.address().port}`;
  apiUrl = `http://127.0.0.1:${server.address().port}`;
}

// The Worker's vars name the servers above: they are made once those listen.
const { anthropic, worker } = setup({
  prepare: startServers,
  vars: () => ({
    DEFAULT_MODEL: "anthropic:claude-sonnet-4-5",
    HTTP_TOOLS: JSON.stringify(tools()), WEATHER_KEY: SECRET, ALLOW_PRIVATE_TOOL_HOSTS: "true",
  }),
});

after(async () => {
  await new Promise((r) => server.close(r));
  await new Promise((r) => elsewhere.close(r));
});

function tools() {
  return [
    {
      name: "weather",
      description: "Today's weather for a city.",
      input_schema: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } }, required: ["city"] },
      url: `${apiUrl}/weather/{city}`,
      query: { days: "{days}" },
      headers: { "x-api-key": "secret:WEATHER_KEY" },
      result: { pointer: "/forecast" },
    },
    {
      name: "stock_price",
      description: "A stock's price.",
      input_schema: { type: "object", properties: { symbol: { type: "string" } } },
      url: `${apiUrl}/down/{symbol}`,
    },
    {
      name: "moved",
      description: "An API that moved.",
      input_schema: { type: "object", properties: { q: { type: "string" } } },
      url: `${apiUrl}/moved/{q}`,
      headers: { "x-api-key": "secret:WEATHER_KEY" },
    },
    {
      name: "loop",
      description: "An API that redirects forever.",
      input_schema: { type: "object", properties: { q: { type: "string" } } },
      url: `${apiUrl}/loop/{q}`,
    },
  ];
}

async function turn(id, calls, text = "Done.") {
  anthropic.script({ tools: calls }, { text });
  const started = Date.now();
  const { chunks } = await readUiStream(await api(worker.url, "POST", `/v1/conversations/${id}/messages`, { message: "Go." }));
  return { chunks, ms: Date.now() - started, raw: JSON.stringify(chunks) };
}

test("an HTTP tool calls its API with the secret, which goes nowhere else", async () => {
  const { id } = await (await api(worker.url, "POST", "/v1/conversations", {})).json();
  const { chunks, raw } = await turn(id, [{ id: "toolu_w1", name: "weather", input: { city: "São Paulo", days: 2 } }], "Sunny.");
  const output = chunks.find((c) => c.type === "tool-output-available");
  assert.deepEqual(output.output, { status: "ok", result: { today: "sunny", days: 2 } });
  const { idempotency, ...hit } = hits.weather.at(-1);
  assert.deepEqual(hit, { key: SECRET, path: "/weather/S%C3%A3o%20Paulo", query: "?days=2" });
  // The call's Idempotency-Key comes from its id: the same call again would carry the same one.
  assert.match(idempotency, /^[0-9a-f]{32}$/);
  // The model saw the tool and its result, never the key.
  const sent = anthropic.requests.at(-1).body;
  assert.ok(anthropic.requests.at(-2).body.tools.some((t) => t.name === "weather"));
  assert.match(JSON.stringify(sent.messages), /sunny/);
  const history = await (await api(worker.url, "GET", `/v1/conversations/${id}/messages`)).text();
  for (const [where, text] of [["stream", raw], ["history", history], ["provider requests", JSON.stringify(anthropic.requests.map((r) => r.body))], ["log", worker.log()]]) {
    assert.ok(!text.includes(SECRET), `the secret leaked into the ${where}`);
  }
});

test("a failing service is retried, then its circuit opens and the conversation goes on", async () => {
  const { id } = await (await api(worker.url, "POST", "/v1/conversations", {})).json();
  for (let i = 1; i <= 3; i++) {
    const { chunks } = await turn(id, [{ id: `toolu_s${i}`, name: "stock_price", input: { symbol: "ACME" } }], `Try ${i} failed.`);
    const error = JSON.parse(chunks.find((c) => c.type === "tool-output-error").errorText);
    assert.equal(error.status, "error");
    assert.match(error.message, /HTTP 503 \(after 3 attempts\)/);
    assert.equal(hits.down, 3 * i, "three attempts per call");
  }
  const { chunks, ms } = await turn(id, [{ id: "toolu_s4", name: "stock_price", input: { symbol: "ACME" } }], "It is down; ask later.");
  const error = JSON.parse(chunks.find((c) => c.type === "tool-output-error").errorText);
  assert.match(error.message, /^unavailable: `stock_price` failed repeatedly/);
  assert.equal(hits.down, 9, "an open circuit calls nothing");
  assert.ok(ms < 3_000, `answered fast (${ms} ms)`);
  // The turn went on to the model's answer, and another tool still works.
  assert.ok(chunks.some((c) => c.type === "text-delta" && c.delta.includes("down")));
  const weather = await turn(id, [{ id: "toolu_w2", name: "weather", input: { city: "Oslo" } }]);
  assert.equal(weather.chunks.find((c) => c.type === "tool-output-available").output.status, "ok");
});

test("redirects are followed by hand: the secret stays with its origin, and a loop ends", async () => {
  const { id } = await (await api(worker.url, "POST", "/v1/conversations", {})).json();
  const { chunks } = await turn(id, [{ id: "toolu_m1", name: "moved", input: { q: "a" } }], "Landed.");
  assert.deepEqual(chunks.find((c) => c.type === "tool-output-available").output, { status: "ok", result: { landed: true } });
  assert.equal(hits.moved, 2, "the same-origin hop kept the key and was followed");
  assert.deepEqual(hits.elsewhere, [{ key: undefined, url: "/landing?from=moved", method: "GET" }]);
  const looped = await turn(id, [{ id: "toolu_l1", name: "loop", input: { q: "a" } }], "It loops.");
  const error = JSON.parse(looped.chunks.find((c) => c.type === "tool-output-error").errorText);
  assert.match(error.message, /redirected more than 3 times/);
});
