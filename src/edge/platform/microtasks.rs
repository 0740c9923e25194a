//! How the isolate wakes Rust futures (`microtasks.js`): as promise reactions instead of
//! workerd's `queueMicrotask`, which costs more than the rest of a woken task's scheduling.
//!
//! wasm-bindgen's task queue reads `queueMicrotask` once, when it first queues a task, so the
//! change is made when the wasm starts, before any request's future exists.

use wasm_bindgen::prelude::wasm_bindgen;
use worker::event;

#[wasm_bindgen(module = "/src/edge/platform/microtasks.js")]
extern "C" {
    #[wasm_bindgen(js_name = queueMicrotasksAsReactions)]
    fn queue_microtasks_as_reactions();
}

/// Runs when the wasm is instantiated (again, after a trap), before the first task is queued.
#[event(start)]
fn start() {
    queue_microtasks_as_reactions();
}
