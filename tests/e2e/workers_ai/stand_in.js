// A stand-in for the Workers AI binding under `wrangler dev`, which cannot reach the real one
// offline: bound to the Worker as `AI` (a service binding to this entrypoint), it offers the
// binding's `run(model, input)` over RPC. Each call is passed to the loopback server at
// `LOOPBACK_URL`, which records it and answers with the binding's documented stream (SSE of
// `{"response": ...}` chunks, tool calls, usage, `[DONE]`); that stream is what `run` returns,
// as the real binding returns a ReadableStream for `stream: true`. A loopback error becomes a
// thrown error, as the binding throws.
import { WorkerEntrypoint } from "cloudflare:workers";

export class Ai extends WorkerEntrypoint {
  async run(model, input) {
    const response = await fetch(this.env.LOOPBACK_URL, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model, ...input }) });
    if (!response.ok) throw new Error(`AiError: ${(await response.json()).errors?.[0]?.message ?? response.status}`);
    return response.body;
  }
}

export default {
  fetch: () => new Response("the Workers AI stand-in", { status: 404 }),
};
