//! Ids: random 128-bit ones from the runtime's CSPRNG, as 32 hex digits.

use worker::wasm_bindgen::{JsCast, JsValue};

use crate::edge::error::ApiError;

/// A random 128-bit id as 32 hex digits, from the runtime's CSPRNG.
pub fn new_id() -> Result<String, ApiError> {
    let crypto = js_sys_get(&worker::js_sys::global(), "crypto")?;
    let random_uuid: worker::js_sys::Function = js_sys_get(&crypto, "randomUUID")?
        .dyn_into()
        .map_err(|_| ApiError::Internal("crypto.randomUUID is not a function".into()))?;
    let uuid = random_uuid
        .call0(&crypto)
        .map_err(|e| ApiError::Internal(format!("crypto.randomUUID failed: {e:?}")))?;
    Ok(uuid.as_string().unwrap_or_default().replace('-', ""))
}

fn js_sys_get(target: &JsValue, key: &str) -> Result<JsValue, ApiError> {
    worker::js_sys::Reflect::get(target, &JsValue::from_str(key))
        .map_err(|e| ApiError::Internal(format!("reading {key}: {e:?}")))
}
