//! How the isolate wakes Rust futures (`microtasks.js`): as promise reactions instead of
//! workerd's `queueMicrotask`, which costs more than the rest of a woken task's scheduling.
//!
//! wasm-bindgen's glue calls the global `queueMicrotask` by name at every wake (its task queue
//! only checks once that there is one), so replacing the global reroutes every wake after it.
//! It is replaced when the wasm starts, once, before any request's future is woken.

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
