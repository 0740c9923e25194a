// Semantic recall's bindings for `wrangler dev`: a loopback in the test's process that plays a
// Vectorize index and a Workers AI embedding model, behind the stand-in Worker
// (`vectors/stand_in.js`) bound as `VECTORS` and `AI`.

import http from "node:http";
import { setTimeout as sleep } from "node:timers/promises";
import { standInConfigs } from "./golden.mjs";
import { freshPersistDir, startWorker } from "./worker.mjs";

/** Words that mean the same to the stand-in's embedding: what semantic recall finds and
 * full-text search does not. */
const SYNONYMS = { automobile: "car", vehicle: "car", sedan: "car", hound: "dog", puppy: "dog", canine: "dog" };
const DIMENSIONS = 64;

/** A deterministic embedding: each word (its synonym's, lowercased, crudely singular) hashed
 * into one of `DIMENSIONS`, the whole normalised. */
export function embed(text) {
  const v = new Array(DIMENSIONS).fill(0);
  for (let word of text.toLowerCase().match(/[a-z0-9]+/g) ?? []) {
    word = word.replace(/s$/, "");
    word = SYNONYMS[word] ?? word;
    if (word.length < 3) continue;
    let h = 0;
    for (const c of word) h = (h * 31 + c.charCodeAt(0)) >>> 0;
    v[h % DIMENSIONS] += 1;
  }
  const norm = Math.hypot(...v) || 1;
  return v.map((x) => x / norm);
}

/** The loopback: `vectors` (id → {values, namespace}), `calls` ([op, body]), and
 * `queryDelayMs`, how long a query takes. */
export function vectorLoopback() {
  const vectors = new Map();
  const calls = [];
  const loop = { vectors, calls, queryDelayMs: 0, url: "" };
  const server = http.createServer(async (req, res) => {
    let raw = "";
    for await (const chunk of req) raw += chunk;
    const body = JSON.parse(raw || "{}");
    const op = req.url.slice(1);
    calls.push([op, body]);
    const answer = (json) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(json));
    };
    const mutation = () => answer({ mutationId: `m-${calls.length}` });
    if (op === "embed") {
      const data = body.text.map(embed);
      return answer({ shape: [data.length, DIMENSIONS], data });
    }
    if (op === "upsert") {
      for (const v of body.vectors) vectors.set(v.id, { values: v.values, namespace: v.namespace ?? "" });
      return mutation();
    }
    if (op === "deleteByIds") {
      for (const id of body.ids) vectors.delete(id);
      return mutation();
    }
    if (op === "query") {
      if (loop.queryDelayMs) await sleep(loop.queryDelayMs);
      const { topK = 5, namespace = "" } = body.options ?? {};
      const dot = (a, b) => a.reduce((s, x, i) => s + x * b[i], 0);
      const matches = [...vectors.entries()]
        .filter(([, v]) => v.namespace === namespace)
        .map(([id, v]) => ({ id, score: dot(v.values, body.vector) }))
        .filter((m) => m.score > 0)
        .sort((a, b) => b.score - a.score)
        .slice(0, topK);
      return answer({ count: matches.length, matches });
    }
    res.writeHead(404);
    res.end(`no ${op}`);
  });
  loop.listen = () => new Promise((resolve) => server.listen(0, "127.0.0.1", () => {
    loop.url = `http://127.0.0.1:${server.address().port}`;
    resolve();
  }));
  loop.close = () => new Promise((resolve) => server.close(resolve));
  return loop;
}

/** Starts `wrangler dev` with `VECTORS` and `AI` bound to the stand-in, which passes each call
 * to `loop`; `vars` as `startWorker`'s. */
export async function startWithVectors(loop, vars) {
  const config = standInConfigs("vectors-stand-in", "tests/e2e/vectors/stand_in.js", loop.url, { VECTORS: "Vectors", AI: "Ai" });
  const persistDir = freshPersistDir();
  return Object.assign(await startWorker({ persistDir, config, migrate: ["DB"], vars }), { persistDir });
}
