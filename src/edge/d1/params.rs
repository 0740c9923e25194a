//! A statement's parameters, bound in one call into JavaScript (`bind.js`). Each value
//! workers-rs's `bind` takes is a JavaScript value made by a call out of wasm, pushed onto an
//! array by another; a statement of six parameters cost thirteen calls, this costs one.

use std::borrow::Cow;

use worker::wasm_bindgen::prelude::wasm_bindgen;
use worker::wasm_bindgen::{JsCast, JsValue};
use worker::worker_sys::types::D1PreparedStatement as PreparedSys;
use worker::D1PreparedStatement;

use crate::edge::error::ApiError;

/// One parameter of a statement: what D1 binds (SQLite's NULL, REAL or INTEGER, TEXT).
#[derive(Debug, Clone, PartialEq)]
pub enum Param<'a> {
    Null,
    Number(f64),
    Text(Cow<'a, str>),
}

impl<'a> From<&'a str> for Param<'a> {
    fn from(text: &'a str) -> Self {
        Param::Text(Cow::Borrowed(text))
    }
}

impl From<String> for Param<'_> {
    fn from(text: String) -> Self {
        Param::Text(Cow::Owned(text))
    }
}

impl From<f64> for Param<'_> {
    fn from(number: f64) -> Self {
        Param::Number(number)
    }
}

impl<'a, T: Into<Param<'a>>> From<Option<T>> for Param<'a> {
    fn from(value: Option<T>) -> Self {
        value.map_or(Param::Null, Into::into)
    }
}

const NULL: u8 = 0;
const NUMBER: u8 = 1;
const TEXT: u8 = 2;

/// The parameters laid out as `bind.js` reads them.
fn pack(params: &[Param<'_>]) -> Vec<u8> {
    let size = params
        .iter()
        .map(|p| match p {
            Param::Null => 1,
            Param::Number(_) => 9,
            Param::Text(t) => 5 + t.len(),
        })
        .sum();
    let mut out = Vec::with_capacity(size);
    for param in params {
        match param {
            Param::Null => out.push(NULL),
            Param::Number(n) => {
                out.push(NUMBER);
                out.extend_from_slice(&n.to_le_bytes());
            }
            Param::Text(t) => {
                out.push(TEXT);
                // D1 refuses a statement long before 4 GiB; the length cannot wrap.
                out.extend_from_slice(&(t.len() as u32).to_le_bytes());
                out.extend_from_slice(t.as_bytes());
            }
        }
    }
    out
}

#[wasm_bindgen(module = "/src/edge/d1/bind.js")]
extern "C" {
    #[wasm_bindgen(catch, js_name = bindPacked)]
    fn bind_packed(statement: &JsValue, packed: &[u8]) -> Result<JsValue, JsValue>;
}

/// Binding a statement's parameters in one call.
pub trait BindParams: Sized {
    /// The statement with `params` bound to `?1`, `?2`, ... in order.
    fn bind_params(self, params: &[Param<'_>]) -> Result<Self, ApiError>;
}

impl BindParams for D1PreparedStatement {
    fn bind_params(self, params: &[Param<'_>]) -> Result<Self, ApiError> {
        let bound = bind_packed(self.inner(), &pack(params)).map_err(super::rows::d1_error)?;
        Ok(D1PreparedStatement::from(
            bound.unchecked_into::<PreparedSys>(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_each_kind_with_its_tag() {
        let packed = pack(&["é".into(), 2.5.into(), Param::Null, None::<&str>.into()]);
        let mut expected = vec![TEXT, 2, 0, 0, 0, 0xc3, 0xa9, NUMBER];
        expected.extend_from_slice(&2.5f64.to_le_bytes());
        expected.extend_from_slice(&[NULL, NULL]);
        assert_eq!(packed, expected);
    }

    #[test]
    fn an_empty_text_is_a_text() {
        assert_eq!(pack(&["".into()]), vec![TEXT, 0, 0, 0, 0]);
    }
}
