//! The `AI` binding (Workers AI) as Layer 1's `AiBinding`.

use async_trait::async_trait;
use worker::js_sys::{Array, Function, Promise, Reflect, JSON};
use worker::wasm_bindgen::{JsCast, JsValue};
use worker::wasm_bindgen_futures::JsFuture;
use worker::Env;

use super::js_message;
use crate::llm::providers::AiBinding;
use crate::llm::ByteStream;

pub const BINDING: &str = "AI";

pub struct WorkersAiBinding(JsValue);

impl WorkersAiBinding {
    /// The binding, or why it is missing: anything bound as `AI` with a `run(model, input)`
    /// that streams, which is the Workers AI binding, or a Worker bound in its place that offers
    /// the same `run` over RPC (the end-to-end tests' stand-in, where `wrangler dev` cannot reach
    /// the real one).
    pub fn from_env(env: &Env) -> Result<Self, String> {
        let missing =
            || format!("workers-ai models need an `[ai] binding = \"{BINDING}\"` in wrangler.toml");
        let ai = Reflect::get(env, &JsValue::from_str(BINDING)).map_err(|_| missing())?;
        let run = Reflect::get(&ai, &JsValue::from_str("run")).map_err(|_| missing())?;
        if ai.is_undefined() || !run.is_function() {
            return Err(missing());
        }
        Ok(Self(ai))
    }
}

#[async_trait(?Send)]
impl AiBinding for WorkersAiBinding {
    async fn run_stream(&self, model: &str, input: &str) -> Result<ByteStream, String> {
        // `JSON.parse` rather than serde_wasm_bindgen, which would make JSON objects into `Map`s.
        let input = JSON::parse(input).map_err(|e| format!("{e:?}"))?;
        let run: Function = Reflect::get(&self.0, &JsValue::from_str("run"))
            .map_err(|e| format!("{e:?}"))?
            .dyn_into()
            .map_err(|_| "the AI binding has no run()".to_string())?;
        // `Reflect.apply`, not `run.call(...)`: on an RPC stub `call` would be a remote method.
        let args = Array::of2(&JsValue::from_str(model), &input);
        let called = Reflect::apply(&run, &self.0, &args).map_err(js_message)?;
        // Adopted rather than cast: a call over RPC answers with a thenable, not a `Promise`.
        let output = JsFuture::from(Promise::resolve(&called))
            .await
            .map_err(js_message)?;
        let stream: worker::web_sys::ReadableStream = output
            .dyn_into()
            .map_err(|_| "the model did not stream (no ReadableStream)".to_string())?;
        // Read as a fetched body is: the chunks that arrive together in one read.
        Ok(Box::pin(super::fetch::Piped::new(&stream)?))
    }
}
