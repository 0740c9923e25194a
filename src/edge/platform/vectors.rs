//! Semantic recall's bindings: a Vectorize index bound as `VECTORS` and Workers AI (`AI`) for
//! its embeddings. Each is reached by method calls on the binding, so a Worker bound in its
//! place that offers the same methods over RPC (the end-to-end tests' stand-in) serves as well.
//! The embeddings stay JavaScript arrays: from the model's answer to the index, never copied
//! into wasm.

use worker::js_sys::{Array, Function, Object, Promise, Reflect, JSON};
use worker::wasm_bindgen::{JsCast, JsValue};
use worker::wasm_bindgen_futures::JsFuture;
use worker::Env;

use super::js_message;

pub const BINDING: &str = "VECTORS";

/// The index and the embedding model, both bound.
pub struct Vectors {
    index: JsValue,
    ai: JsValue,
    /// The Workers AI model that embeds (`MEMORY_EMBEDDING_MODEL`).
    model: String,
}

/// One message's embedding, as the model gave it.
pub struct Embedding(JsValue);

impl Vectors {
    /// The bindings, when both are there (`None`: recall is full-text search only).
    pub fn from_env(env: &Env, model: &str) -> Option<Self> {
        let bound = |name: &str, method: &str| {
            let binding = Reflect::get(env, &JsValue::from_str(name)).ok()?;
            let f = Reflect::get(&binding, &JsValue::from_str(method)).ok()?;
            (!binding.is_undefined() && f.is_function()).then_some(binding)
        };
        Some(Self {
            index: bound(BINDING, "query")?,
            ai: bound(super::ai::BINDING, "run")?,
            model: model.to_string(),
        })
    }

    /// The embeddings of `texts`, in order.
    pub async fn embed(&self, texts: &[&str]) -> Result<Vec<Embedding>, String> {
        let input = Object::new();
        let list: Array = texts.iter().map(|t| JsValue::from_str(t)).collect();
        set(&input, "text", &list)?;
        let output = call(
            &self.ai,
            "run",
            &[JsValue::from_str(&self.model), input.into()],
        )
        .await?;
        let data = Reflect::get(&output, &JsValue::from_str("data")).map_err(js_message)?;
        let data: Array = data
            .dyn_into()
            .map_err(|_| "the embedding model answered no `data` array".to_string())?;
        if data.length() as usize != texts.len() {
            return Err(format!(
                "the embedding model answered {} embeddings for {} texts",
                data.length(),
                texts.len()
            ));
        }
        Ok(data.iter().map(Embedding).collect())
    }

    /// The ids of the `top_k` vectors in `namespace` nearest `vector`, nearest first.
    pub async fn query(
        &self,
        vector: &Embedding,
        namespace: &str,
        top_k: u32,
    ) -> Result<Vec<String>, String> {
        let options = JSON::parse(&format!(
            "{{\"topK\":{top_k},\"namespace\":{},\"returnValues\":false,\"returnMetadata\":\"none\"}}",
            serde_json::Value::from(namespace)
        ))
        .map_err(js_message)?;
        let found = call(&self.index, "query", &[vector.0.clone(), options]).await?;
        let matches = Reflect::get(&found, &JsValue::from_str("matches")).map_err(js_message)?;
        let matches: Array = matches
            .dyn_into()
            .map_err(|_| "the index answered no `matches` array".to_string())?;
        Ok(matches
            .iter()
            .filter_map(|m| Reflect::get(&m, &JsValue::from_str("id")).ok()?.as_string())
            .collect())
    }

    /// Writes each `(id, embedding)` into `namespace`.
    pub async fn upsert(
        &self,
        namespace: &str,
        vectors: Vec<(&str, Embedding)>,
    ) -> Result<(), String> {
        let list = Array::new();
        for (id, values) in vectors {
            let vector = Object::new();
            set(&vector, "id", &JsValue::from_str(id))?;
            set(&vector, "values", &values.0)?;
            set(&vector, "namespace", &JsValue::from_str(namespace))?;
            list.push(&vector);
        }
        call(&self.index, "upsert", &[list.into()]).await.map(drop)
    }

    /// Deletes the vectors of `ids` (any namespace: ids are the index's).
    pub async fn delete(&self, ids: &[String]) -> Result<(), String> {
        // The index takes at most 1,000 ids a call.
        for chunk in ids.chunks(1000) {
            let list: Array = chunk.iter().map(|id| JsValue::from_str(id)).collect();
            call(&self.index, "deleteByIds", &[list.into()]).await?;
        }
        Ok(())
    }
}

fn set(target: &Object, key: &str, value: &JsValue) -> Result<(), String> {
    Reflect::set(target, &JsValue::from_str(key), value)
        .map(drop)
        .map_err(js_message)
}

/// `binding.method(...args)`, awaited. `Reflect.apply`, not `f.call(...)`: on an RPC stub
/// `call` would be a remote method; and the answer adopted rather than cast, since a call over
/// RPC answers with a thenable.
async fn call(binding: &JsValue, method: &str, args: &[JsValue]) -> Result<JsValue, String> {
    let f: Function = Reflect::get(binding, &JsValue::from_str(method))
        .map_err(js_message)?
        .dyn_into()
        .map_err(|_| format!("the binding has no {method}()"))?;
    let args: Array = args.iter().collect();
    let called = Reflect::apply(&f, binding, &args).map_err(js_message)?;
    JsFuture::from(Promise::resolve(&called))
        .await
        .map_err(js_message)
}
