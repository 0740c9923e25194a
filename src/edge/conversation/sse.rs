//! The turn's stream as a response: a body the chunk log writes into
//! ([`ChunkLog::attach_body`](super::replay::ChunkLog::attach_body)), with the UI message
//! stream's headers.

use crate::edge::conversation::ui_stream::HEADERS;
use crate::edge::error::ApiError;
use crate::edge::platform::push_body::PushBody;
use worker::{Response, ResponseBody};

/// `body` as the UI message stream response.
pub(super) fn sse(body: &PushBody) -> std::result::Result<Response, ApiError> {
    let headers = worker::Headers::new();
    for (name, value) in HEADERS {
        headers.set(name, value)?;
    }
    Ok(Response::from_body(ResponseBody::Stream(body.stream()))?.with_headers(headers))
}
