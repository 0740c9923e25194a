// End-to-end harness: the real wasm Worker under `wrangler dev` (workerd, local D1 and Durable
// Objects) with loopback servers playing the LLM providers in their exact wire formats. Each
// part lives in harness/ by its job; this file re-exports them all, so one import serves.
//   harness/worker.mjs     the Worker's process: startWorker, freshPersistDir, freePort, ROOT
//   harness/storage.mjs    the persist dir's state: d1Query, conversationObjects, r2Keys
//   harness/providers.mjs  loopback providers: anthropicLoopback, openaiLoopback, ..., their vars
//   harness/stream.mjs     the UI message stream: readUiStream, parseUiStream, shape
//   harness/client.mjs     requests as clients make them: api, chatMessage, chatSession, PNG
//   harness/local.mjs      local Python servers: startLocalModel, startMcpServer
//   harness/setup.mjs      a file's usual set-up: setup() (loopbacks and a Worker, create/send/talk)
//   harness/golden.mjs     every wire API at once: everyLoopback, startEveryProvider
//   harness/vectors.mjs    semantic recall's bindings: vectorLoopback, startWithVectors

export * from "./harness/worker.mjs";
export * from "./harness/storage.mjs";
export * from "./harness/providers.mjs";
export * from "./harness/stream.mjs";
export * from "./harness/client.mjs";
export * from "./harness/local.mjs";
export * from "./harness/setup.mjs";
export * from "./harness/golden.mjs";
export * from "./harness/vectors.mjs";
