// The memory of a Worker's isolate, read through workerd's V8 inspector (the Worker started with
// an `inspectorPort`): what counts against the isolate's 128 MB, which workerd's RSS does not
// show apart from the rest of the process (under Miniflare, the local simulators of D1, R2 and
// the rate limiter, and each Durable Object's SQLite database, live in the same process).
//
// Two parts make the isolate's memory: V8's heap (JavaScript objects, and the array buffers
// behind response bodies) and wasm's linear memory, which V8 keeps outside its heap and never
// shrinks. `read()` gives both, in bytes, after a garbage collection; `sampleHeap()` follows the
// heap's highest use while work runs.

import { connectInspector } from "./inspector.mjs";

/** Reads the memory of the user Worker whose workerd's inspector is at `inspectorPort`. */
export async function isolateMemory(inspectorPort) {
  const { send, onEvent, close } = await connectInspector(inspectorPort);
  let context;
  const contextSeen = new Promise((resolve) =>
    onEvent((msg) => {
      if (msg.method === "Runtime.executionContextCreated") {
        context ??= msg.params.context.id;
        resolve();
      }
    }),
  );
  await send("Runtime.enable");
  await contextSeen;

  /** Bytes of wasm linear memory, all instances together (the heap's query collects garbage). */
  async function wasmBytes() {
    const proto = await send("Runtime.evaluate", { expression: "WebAssembly.Memory.prototype", contextId: context });
    const found = await send("Runtime.queryObjects", { prototypeObjectId: proto.result.objectId });
    const sizes = await send("Runtime.callFunctionOn", {
      objectId: found.objects.objectId,
      functionDeclaration: "function () { return this.map((m) => m.buffer.byteLength); }",
      returnByValue: true,
    });
    return sizes.result.value.reduce((a, b) => a + b, 0);
  }

  /** V8's heap in use, its array buffers' backing stores included. */
  async function heapBytes() {
    const usage = await send("Runtime.getHeapUsage");
    return usage.usedSize + (usage.backingStorageSize ?? 0);
  }

  return {
    /** The heap (after a collection) and wasm memory, in bytes. */
    async read() {
      const wasm = await wasmBytes();
      return { heap: await heapBytes(), wasm };
    },
    /** Samples the heap every `everyMs` until `stop()`, which resolves to its highest use. */
    sampleHeap(everyMs = 20) {
      let highest = 0;
      let stopped = false;
      const running = (async () => {
        while (!stopped) {
          highest = Math.max(highest, await heapBytes());
          await new Promise((r) => setTimeout(r, everyMs));
        }
      })();
      return {
        async stop() {
          stopped = true;
          await running;
          return highest;
        },
      };
    },
    close,
  };
}
