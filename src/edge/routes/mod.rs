//! One module per resource; each handler is small: extract, call, answer.

pub mod artifacts;
pub mod chat;
pub mod chat_body;
pub mod conversations;
pub mod health;
pub mod messages;
pub mod models;
pub mod openapi;
pub mod usage;

/// The decoded `key=value` pairs of a request's query string.
///
/// Read from the raw URL rather than `Request::url()`, whose full WHATWG parser (with IDNA)
/// would be the only reason the `url` crate ships in the Worker.
pub fn query_pairs(req: &worker::Request) -> Vec<(String, String)> {
    let url = req.inner().url();
    let query = url.split_once('?').map_or("", |(_, q)| q);
    let query = query.split_once('#').map_or(query, |(q, _)| q);
    form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect()
}
