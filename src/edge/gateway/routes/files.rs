//! `GET /v1/conversations/{id}/files/{file_id}`: a file attached to the conversation, to its
//! owner only (anyone else gets the 404 an unknown conversation gets), with its type and name.

use worker::{Env, Headers, Response};

use super::owned;
use crate::edge::d1::Store;
use crate::edge::error::ApiError;
use crate::edge::platform::files::Files;

pub async fn get(env: &Env, user: &str, id: &str, file_id: &str) -> Result<Response, ApiError> {
    // The conversation `id` names for the caller (a `/v1/chat` id resolves to theirs).
    let owned = owned(env, user, id).await?;
    let not_found = || ApiError::NotFound(format!("conversation `{id}` has no file `{file_id}`"));
    let row = Store::for_owner(env, user)
        .await?
        .file(&owned.id, file_id)
        .await?
        .ok_or_else(not_found)?;
    let Some(files) = Files::from_env(env) else {
        return Err(not_found());
    };
    let object = files.get(file_id).await?.ok_or_else(not_found)?;
    let body = object.body().ok_or_else(not_found)?.response_body()?;
    let headers = Headers::new();
    let content_type = if row.media_type.starts_with("text/") {
        format!("{}; charset=utf-8", row.media_type)
    } else {
        row.media_type.clone()
    };
    headers.set("content-type", &content_type)?;
    headers.set("content-length", &row.size.to_string())?;
    headers.set(
        "content-disposition",
        &disposition(row.name.as_deref().unwrap_or(file_id)),
    )?;
    // Its type was decided from its bytes; the browser is not to guess another.
    headers.set("x-content-type-options", "nosniff")?;
    // A file never changes under its id; only its owner's browser may keep it.
    headers.set("cache-control", "private, max-age=86400, immutable")?;
    Ok(Response::from_body(body)?.with_headers(headers))
}

/// `inline`, with the name as plain ASCII and, for any other character, RFC 8187's UTF-8 form.
fn disposition(name: &str) -> String {
    let ascii: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let encoded =
        percent_encoding::utf8_percent_encode(name, percent_encoding::NON_ALPHANUMERIC).to_string();
    format!("inline; filename=\"{ascii}\"; filename*=UTF-8''{encoded}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_name_is_given_safely_in_both_forms() {
        assert_eq!(
            super::disposition("été \"1\".png"),
            "inline; filename=\"_t_ _1_.png\"; filename*=UTF-8''%C3%A9t%C3%A9%20%221%22%2Epng"
        );
    }
}
