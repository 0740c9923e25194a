//! `GET /healthz`: liveness plus D1 reachability.

use worker::{Env, Response};

use crate::edge::error::ApiError;
use crate::edge::json_response;

pub async fn get(env: &Env) -> Result<Response, ApiError> {
    let db = env.d1(crate::edge::d1::BINDING)?;
    let d1 = crate::edge::d1::rows::first::<serde_json::Value>(&db.prepare("SELECT 1 AS ok")).await;
    match d1 {
        Ok(Some(_)) => json_response(200, &serde_json::json!({"ok": true, "d1": "reachable"})),
        Ok(None) | Err(_) => {
            json_response(503, &serde_json::json!({"ok": false, "d1": "unreachable"}))
        }
    }
}
