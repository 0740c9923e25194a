// `src/edge/platform/microtasks.js`, which has `queueMicrotask` queue its tasks as promise
// reactions, on Node (the same V8 microtask queue workerd has): tasks still run after the code
// that queued them, in the order they were queued among other microtasks; a task that throws
// still fails as an uncaught exception; a task that is not a function is still refused. Under
// workerd every end-to-end test runs on it (wasm-bindgen wakes each Rust future through it);
// what it saves is in `make bench`'s paced answer.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { test } from "node:test";

const MODULE = new URL("../../src/edge/platform/microtasks.js", import.meta.url).href;
const { queueMicrotasksAsReactions } = await import(MODULE);
const runtimes = globalThis.queueMicrotask;

test("tasks run after the code that queued them, in order with other microtasks", async () => {
  queueMicrotasksAsReactions();
  assert.notEqual(globalThis.queueMicrotask, runtimes, "installed");
  const installed = globalThis.queueMicrotask;
  queueMicrotasksAsReactions();
  assert.equal(globalThis.queueMicrotask, installed, "installing twice changes nothing");

  const order = [];
  queueMicrotask(() => order.push("first task"));
  Promise.resolve().then(() => order.push("a reaction"));
  runtimes(() => order.push("the runtime's own microtask"));
  queueMicrotask(() => {
    order.push("second task");
    // Queued by a task: runs in the same turn, after what was already queued.
    queueMicrotask(() => order.push("queued by a task"));
  });
  assert.deepEqual(order, [], "nothing runs before the code that queued it returns");
  await new Promise((resolve) => setTimeout(resolve, 0));
  assert.deepEqual(order, ["first task", "a reaction", "the runtime's own microtask", "second task", "queued by a task"]);
});

test("a task that is not a function is refused at once", () => {
  queueMicrotasksAsReactions();
  assert.throws(() => queueMicrotask(42), TypeError);
  assert.throws(() => queueMicrotask(undefined), TypeError);
});

test("a task that throws is an uncaught exception, not a rejected promise", () => {
  // In a process of its own: the test runner fails whatever test an uncaught exception lands in.
  const script = `
    const { queueMicrotasksAsReactions } = await import(${JSON.stringify(MODULE)});
    queueMicrotasksAsReactions();
    process.on("unhandledRejection", (reason) => { console.log("rejection: " + reason.message); process.exit(3); });
    process.on("uncaughtException", (error) => { console.log("uncaught: " + error.message); process.exit(0); });
    const error = new Error("the task failed");
    queueMicrotask(() => { throw error; });
    setTimeout(() => { console.log("nothing was reported"); process.exit(4); }, 1000);
  `;
  const child = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" });
  assert.equal(child.stdout.trim(), "uncaught: the task failed", child.stderr);
  assert.equal(child.status, 0);
});
