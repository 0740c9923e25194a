//! Rows from the platform (D1 results, the object's SQLite cursors) read as JSON text: one
//! `JSON.stringify` and one crossing per result (or cursor row), then `llm::json`. workers-rs
//! reads them field by field through serde_wasm_bindgen instead, which crosses into JS for
//! every value and compiles a second reader for every row type.

use worker::js_sys::{Array, Function, Reflect, Uint8Array, JSON};
use worker::wasm_bindgen::prelude::wasm_bindgen;
use worker::wasm_bindgen::{JsCast, JsValue};
use worker::wasm_bindgen_futures::JsFuture;
use worker::{D1Database, D1PreparedStatement, SqlCursor};

use crate::edge::error::ApiError;
use crate::llm::json::FromJsonOwned;

// The waiting is done by functions that are not generic, so that one copy of it serves every
// row type; only the reading of the rows is compiled per type.

/// The rows of a statement.
pub async fn all<T: FromJsonOwned>(statement: &D1PreparedStatement) -> Result<Vec<T>, ApiError> {
    results(&run(statement, false).await?)
}

/// The first row of a statement, if any.
pub async fn first<T: FromJsonOwned>(
    statement: &D1PreparedStatement,
) -> Result<Option<T>, ApiError> {
    let row = run(statement, true).await?;
    if row.is_null() || row.is_undefined() {
        return Ok(None);
    }
    parse(&row).map(Some)
}

/// D1's answer to `all()`, or to `first()` (its first row, or null).
async fn run(statement: &D1PreparedStatement, first: bool) -> Result<JsValue, ApiError> {
    let statement = statement.inner();
    let promise = if first {
        statement.first(None)
    } else {
        statement.all()
    };
    JsFuture::from(promise.map_err(d1_error)?)
        .await
        .map_err(d1_error)
}

/// Runs statements as one batch (one round trip, one transaction); each result's rows as a
/// JS value for [`results`].
pub async fn batch(
    db: &D1Database,
    statements: &[D1PreparedStatement],
) -> Result<Vec<JsValue>, ApiError> {
    let db: &JsValue = db.as_ref();
    let run: Function = Reflect::get(db, &"batch".into())
        .map_err(d1_error)?
        .dyn_into()
        .map_err(|_| ApiError::Internal("D1 has no batch()".into()))?;
    let list: Array = statements
        .iter()
        .map(|s| JsValue::from(s.inner()))
        .collect();
    let promise = run.call1(db, &list).map_err(d1_error)?;
    let answered = JsFuture::from(worker::js_sys::Promise::from(promise))
        .await
        .map_err(d1_error)?;
    Ok(Array::from(&answered).to_vec())
}

/// The rows of one D1 result object (`{results, meta, success}`).
pub fn results<T: FromJsonOwned>(result: &JsValue) -> Result<Vec<T>, ApiError> {
    parse(&rows_of(result)?)
}

/// The rows of a D1 result as one JSON array whose `column` (text that is itself JSON, such as
/// a stored message) is embedded as it is: through [`results`] it would come back quoted inside
/// the rows' JSON, escaped there and unescaped again before its own read. The document is
/// written and encoded by the runtime (`text.js`), as befits a long text; a value of `column`
/// that is not JSON leaves a document that does not read.
pub fn embedding(result: &JsValue, column: &str) -> Result<String, ApiError> {
    let bound = embed(&rows_of(result)?, column).map_err(d1_error)?;
    let bound = usize::try_from(bound.max(0.0) as u64)
        .map_err(|_| ApiError::Internal(format!("a D1 result of {bound} bytes")))?;
    let mut bytes: Vec<u8> = Vec::with_capacity(bound);
    // SAFETY: the view covers the vector's spare capacity and is used only by `embed_into`,
    // right here, before anything else can allocate (and so move or grow wasm's memory). The
    // length is set to what it reports written, which is at most the view's length.
    unsafe {
        let view = Uint8Array::view_mut_raw(bytes.as_mut_ptr(), bound);
        let written = embed_into(&view).map_err(d1_error)?;
        bytes.set_len((written.max(0.0) as usize).min(bound));
    }
    String::from_utf8(bytes)
        .map_err(|e| ApiError::Internal(format!("D1 answered text that is not UTF-8: {e}")))
}

#[wasm_bindgen(module = "/src/edge/platform/text.js")]
extern "C" {
    /// Lays out [`embedding`]'s document and says how many bytes it can take at most.
    #[wasm_bindgen(catch)]
    fn embed(rows: &JsValue, column: &str) -> Result<f64, JsValue>;
    /// Writes the document [`embed`] laid out into `out`; returns how many bytes it took.
    #[wasm_bindgen(catch, js_name = embedInto)]
    fn embed_into(out: &Uint8Array) -> Result<f64, JsValue>;
}

fn rows_of(result: &JsValue) -> Result<JsValue, ApiError> {
    let rows = Reflect::get(result, &"results".into()).map_err(d1_error)?;
    Ok(if rows.is_undefined() || rows.is_null() {
        Array::new().into()
    } else {
        rows
    })
}

/// The rows a cursor of the object's SQLite storage yields.
pub fn cursor<T: FromJsonOwned>(cursor: SqlCursor) -> worker::Result<Vec<T>> {
    parse(&gather(cursor)?).map_err(|e| worker::Error::RustError(e.to_string()))
}

/// A cursor's rows as one JS array (not generic: compiled once).
fn gather(cursor: SqlCursor) -> worker::Result<JsValue> {
    let rows = Array::new();
    for row in cursor {
        rows.push(&row?);
    }
    Ok(rows.into())
}

fn parse<T: FromJsonOwned>(value: &JsValue) -> Result<T, ApiError> {
    crate::llm::json::from_str(&stringify(value)?)
        .map_err(|e| ApiError::Internal(format!("an unexpected row from storage: {e}")))
}

fn stringify(value: &JsValue) -> Result<String, ApiError> {
    Ok(JSON::stringify(value)
        .map_err(d1_error)?
        .as_string()
        .unwrap_or_default())
}

/// D1's error, with its cause (where D1 puts the SQLite message).
pub(super) fn d1_error(e: JsValue) -> ApiError {
    let message = |v: &JsValue| {
        Reflect::get(v, &"message".into())
            .ok()
            .and_then(|m| m.as_string())
    };
    let cause = Reflect::get(&e, &"cause".into()).ok();
    let text = match (message(&e), cause.as_ref().and_then(message)) {
        (Some(m), Some(c)) if !m.contains(&c) => format!("{m}: {c}"),
        (Some(m), _) => m,
        (None, _) => e.as_string().unwrap_or_else(|| "D1 failed".into()),
    };
    ApiError::Internal(format!("D1: {text}"))
}
