// A stand-in for the Vectorize index (`VECTORS`) and the Workers AI embeddings (`AI`) under
// `wrangler dev`, which reaches neither offline: bound to the Worker as service bindings to
// these entrypoints, each offers the binding's methods over RPC (`query`, `upsert`,
// `deleteByIds`; `run`) with the documented shapes, and passes each call to the loopback at
// `LOOPBACK_URL` (the test's own process), which keeps the vectors, answers, and records every
// call. A loopback error becomes a thrown error, as the bindings throw.
import { WorkerEntrypoint } from "cloudflare:workers";

async function post(env, op, body) {
  const response = await fetch(`${env.LOOPBACK_URL}/${op}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  if (!response.ok) throw new Error(`${op} failed: ${await response.text()}`);
  return response.json();
}

export class Vectors extends WorkerEntrypoint {
  query(vector, options) {
    return post(this.env, "query", { vector: Array.from(vector), options });
  }
  upsert(vectors) {
    return post(this.env, "upsert", { vectors: vectors.map((v) => ({ ...v, values: Array.from(v.values) })) });
  }
  deleteByIds(ids) {
    return post(this.env, "deleteByIds", { ids });
  }
}

export class Ai extends WorkerEntrypoint {
  run(model, input) {
    return post(this.env, "embed", { model, ...input });
  }
}

export default {
  fetch: () => new Response("the Vectorize stand-in", { status: 404 }),
};
