// The runtime's `queueMicrotask`, as promise reactions. Rust futures run on wasm-bindgen's task
// queue, which asks for a microtask (`queueMicrotask`) each time a woken task is due: once per
// event at a model's pace. workerd's `queueMicrotask` wraps every task in a new function so that
// it carries the caller's async context, since V8 attaches that context to promise reactions
// but not to plain microtasks; measured under workerd, the first call after an I/O wait costs
// about 12 µs of CPU, a promise reaction about 1 (docs/performance.md). A reaction to an
// already-settled promise runs at the same place in the same microtask queue, and carries the
// async context by itself.

const queue = globalThis.queueMicrotask;
const settled = Promise.resolve();
// A task that throws fails as it would have in a microtask of its own: thrown again from one,
// so the runtime reports it as uncaught (wasm-bindgen's glue reinitialises the wasm after a trap
// that it sees reported so).
const rethrow = (error) =>
  queue(() => {
    throw error;
  });

/** Makes `queueMicrotask` queue its task as a promise reaction. Idempotent; does nothing where
 * the runtime has no `queueMicrotask` (wasm-bindgen then uses promises already). */
export function queueMicrotasksAsReactions() {
  if (typeof queue !== "function" || globalThis.queueMicrotask !== queue) return;
  globalThis.queueMicrotask = function queueMicrotask(task) {
    // A task that is not a function is refused as the runtime's own refuses it.
    if (typeof task !== "function") return queue(task);
    settled.then(task).catch(rethrow);
  };
}
