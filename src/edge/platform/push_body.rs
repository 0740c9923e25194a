//! A response body that the conversation's turn writes into (`push_body.js`): each write is one
//! call out of wasm, and the stream's own queue holds the bytes until the runtime reads them.

use wasm_bindgen::prelude::wasm_bindgen;
use worker::web_sys;

#[wasm_bindgen(module = "/src/edge/platform/push_body.js")]
extern "C" {
    pub type PushBody;

    /// A new body; a reader that leaves more than `behind` bytes unread of what comes after
    /// its first `backlog` bytes is closed, with an `error` chunk.
    #[wasm_bindgen(constructor)]
    pub fn new(behind: u32, backlog: u32) -> PushBody;

    /// Sends a copy of `bytes` (held a few milliseconds while a burst lasts); `false` once the
    /// reader has gone away or been closed for falling behind.
    #[wasm_bindgen(method)]
    pub fn write(this: &PushBody, bytes: &[u8]) -> bool;

    /// Sends what is held and ends the stream.
    #[wasm_bindgen(method)]
    pub fn close(this: &PushBody);

    /// Whether the reader has gone away (or been closed).
    #[wasm_bindgen(method, getter)]
    pub fn gone(this: &PushBody) -> bool;

    /// The stream to answer with.
    #[wasm_bindgen(method, getter)]
    pub fn stream(this: &PushBody) -> web_sys::ReadableStream;
}
