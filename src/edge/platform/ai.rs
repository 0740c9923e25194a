//! The `AI` binding (Workers AI) as Layer 1's `AiBinding`.

use async_trait::async_trait;
use worker::js_sys::{Function, Promise, Reflect, JSON};
use worker::wasm_bindgen::{JsCast, JsValue};
use worker::wasm_bindgen_futures::JsFuture;
use worker::Env;

use crate::llm::providers::AiBinding;
use crate::llm::ByteStream;

pub const BINDING: &str = "AI";

pub struct WorkersAiBinding(JsValue);

impl WorkersAiBinding {
    /// The binding, or why it is missing.
    pub fn from_env(env: &Env) -> Result<Self, String> {
        let ai = env.ai(BINDING).map_err(|_| {
            format!("workers-ai models need an `[ai] binding = \"{BINDING}\"` in wrangler.toml")
        })?;
        Ok(Self(ai.into()))
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
        let promise: Promise = run
            .call2(&self.0, &JsValue::from_str(model), &input)
            .map_err(js_message)?
            .dyn_into()
            .map_err(|_| "AI.run did not return a promise".to_string())?;
        let output = JsFuture::from(promise).await.map_err(js_message)?;
        let stream: worker::web_sys::ReadableStream = output
            .dyn_into()
            .map_err(|_| "the model did not stream (no ReadableStream)".to_string())?;
        // Read as a fetched body is: the chunks that arrive together in one read.
        Ok(Box::pin(super::fetch::Piped::new(&stream)?))
    }
}

fn js_message(e: JsValue) -> String {
    Reflect::get(&e, &JsValue::from_str("message"))
        .ok()
        .and_then(|m| m.as_string())
        .unwrap_or_else(|| format!("{e:?}"))
}
