//! A user message's files on their way in: read (base64, a `data:` URL, or an http(s) URL the
//! Worker fetches under the tool host rules), held to the limits (`MAX_FILE_BYTES`,
//! `MAX_FILES_PER_MESSAGE`), typed from their bytes ([`sniff`]), stored in R2, and turned into
//! the references history keeps. Every file is checked before the message goes on; a refusal
//! names the file and the rule, and the files stored before it are removed, so nothing of a
//! refused message is kept. Each file is recorded in D1 (`stored_files`: its owner, their
//! quota `MAX_FILE_BYTES_PER_USER`) before its bytes are put, so an upload cut off anywhere is
//! still found and removed (by the scheduled run, after an hour).

pub mod sniff;

use base64::Engine;
use futures::StreamExt;
use worker::{console_error, Env, Response};

use crate::agent::remote::redirects;
use crate::agent::AgentMessage;
use crate::edge::config::Config;
use crate::edge::d1::files::NewFile;
use crate::edge::d1::Store;
use crate::edge::error::ApiError;
use crate::edge::out_of_line;
use crate::edge::platform::clock::now_ms;
use crate::edge::platform::fetch::FetchTransport;
use crate::edge::platform::files::Files;
use crate::edge::platform::ids::new_id;
use crate::llm::{ApiRequest, Attachment, ContentBlock};

/// Longest text of a user message, in characters.
pub const MAX_MESSAGE_CHARS: usize = 100_000;

/// Largest body of a request that sends a message: its files come in it base64 (4 bytes for
/// every 3), and it is read whole before they are checked.
pub const MAX_MESSAGE_BODY_BYTES: usize = 32 << 20;

/// The largest message body this deployment takes: what its files may need
/// (`MAX_FILES_PER_MESSAGE` × `MAX_FILE_BYTES`, base64) and its text (UTF-8, escaped), within
/// [`MAX_MESSAGE_BODY_BYTES`]. A body past it is refused as it streams in, never held whole.
pub fn message_body_limit(config: &Config) -> usize {
    let files = u64::from(config.max_files_per_message) * u64::from(config.max_file_bytes);
    // Base64, plus a `data:` URL's head and a part's other members.
    let files = files.div_ceil(3) * 4 + u64::from(config.max_files_per_message) * 1024;
    // A character may take 12 bytes as JSON (`\uD83D\uDE00`); and the body's other members
    // (tool results, tool definitions) as much as any body may be.
    let text = (MAX_MESSAGE_CHARS as u64) * 12 + crate::edge::gateway::body::MAX_BODY_BYTES as u64;
    usize::try_from(files + text)
        .unwrap_or(usize::MAX)
        .min(MAX_MESSAGE_BODY_BYTES)
}

/// One part of a user message as a request carries it.
pub enum Piece {
    Text(String),
    File(FileIn),
}

/// A file as a request carries it, before anything is checked.
pub struct FileIn {
    pub name: Option<String>,
    /// The media type the client declared: it must agree with the bytes.
    pub declared: Option<String>,
    pub source: Source,
}

pub enum Source {
    /// The bytes, base64.
    Base64(String),
    /// A `data:` URL, or an http(s) URL to fetch.
    Url(String),
}

/// Whose a message's files are, and the conversation the request names.
#[derive(Clone, Copy)]
pub struct Upload<'a> {
    pub owner: &'a str,
    pub conversation: &'a str,
}

/// The user message `pieces` make, with its files stored (returned too, so that a message the
/// conversation then refuses can have them removed: [`kept_if_taken`]).
pub async fn user_message(
    env: &Env,
    config: &Config,
    upload: Upload<'_>,
    pieces: Vec<Piece>,
) -> Result<(AgentMessage, Vec<Attachment>), ApiError> {
    let chars: usize = pieces
        .iter()
        .map(|p| match p {
            Piece::Text(text) => text.chars().count(),
            Piece::File(_) => 0,
        })
        .sum();
    let files = pieces
        .iter()
        .filter(|p| matches!(p, Piece::File(_)))
        .count();
    if chars == 0 && files == 0 {
        return Err(ApiError::BadRequest("`message` is empty".into()));
    }
    if chars > MAX_MESSAGE_CHARS {
        return Err(ApiError::PayloadTooLarge(format!(
            "`message` is {chars} characters; the limit is {MAX_MESSAGE_CHARS}"
        )));
    }
    let max_files = config.max_files_per_message as usize;
    if files > max_files {
        return Err(ApiError::BadRequest(format!(
            "the message carries {files} files; at most {max_files} are accepted per message \
             (MAX_FILES_PER_MESSAGE)"
        )));
    }
    let bucket = if files > 0 {
        Some((
            Files::required(env)?,
            Store::for_owner(env, upload.owner).await?,
        ))
    } else {
        None
    };
    let mut content = Vec::with_capacity(pieces.len());
    let mut stored: Vec<Attachment> = Vec::new();
    for (n, piece) in pieces.into_iter().enumerate() {
        match (piece, &bucket) {
            (Piece::Text(text), _) if text.is_empty() => {}
            (Piece::Text(text), _) => content.push(ContentBlock::Text { text }),
            // Behind `own`, as the removals below: storing files stays out of `user_message`'s
            // own code, so a message without files (most of them) does not compile it.
            (Piece::File(file), Some((bucket, store))) => {
                match out_of_line(store_one((bucket, store, upload), config, file, n)).await {
                    Ok(attachment) => {
                        stored.push(attachment.clone());
                        content.push(ContentBlock::File(attachment));
                    }
                    Err(refused) => {
                        out_of_line(discard_from(bucket, store, &stored)).await;
                        return Err(refused);
                    }
                }
            }
            (Piece::File(_), None) => {}
        }
    }
    Ok((AgentMessage::User { content }, stored))
}

/// The conversation's answer to a message that carried `stored`: when it refused the message
/// (a 4xx) the files are removed (best effort: what fails is left to the scheduled run's
/// sweep); otherwise they are marked taken. An answer that failed or never came (a 5xx, a reset
/// object) does not say the message was not taken: it may be held, and stored later, so its
/// files stay, and the sweep removes them if no message ever names them.
pub async fn kept_if_taken(
    env: &Env,
    owner: &str,
    stored: &[Attachment],
    answer: Result<Response, ApiError>,
) -> Result<Response, ApiError> {
    if stored.is_empty() {
        return answer;
    }
    out_of_line(settle_files(env, owner, stored, &answer)).await;
    answer
}

async fn settle_files(
    env: &Env,
    owner: &str,
    stored: &[Attachment],
    answer: &Result<Response, ApiError>,
) {
    let refused = answer
        .as_ref()
        .is_ok_and(|a| (400..500).contains(&a.status_code()))
        || answer
            .as_ref()
            .is_err_and(|e| (400..500).contains(&e.status()));
    let (Some(bucket), Ok(store)) = (Files::from_env(env), Store::for_owner(env, owner).await)
    else {
        return;
    };
    if refused {
        return discard_from(&bucket, &store, stored).await;
    }
    let ids: Vec<String> = stored.iter().map(|a| a.id.clone()).collect();
    if let Err(e) = store.accept_files(&ids).await {
        console_error!("marking the files of a taken message: {e}");
    }
}

/// Removes `stored` from R2, then their records (a failure leaves them for the sweep).
async fn discard_from(bucket: &Files, store: &Store, stored: &[Attachment]) {
    let ids: Vec<String> = stored.iter().map(|a| a.id.clone()).collect();
    if let Err(e) = store.discard_files(bucket, &ids).await {
        console_error!("removing the files of a refused message: {e}");
    }
}

/// Reads, checks, records and stores one file (`n`: its place in the message, for errors).
async fn store_one(
    (bucket, store, upload): (&Files, &Store, Upload<'_>),
    config: &Config,
    file: FileIn,
    n: usize,
) -> Result<Attachment, ApiError> {
    let label = match &file.name {
        Some(name) => format!("file `{name}`"),
        None => format!("the file in part {}", n + 1),
    };
    let max = u64::from(config.max_file_bytes);
    let too_large = |size: u64| {
        ApiError::PayloadTooLarge(format!(
            "{label} is {size} bytes; the limit is {max} bytes per file (MAX_FILE_BYTES)"
        ))
    };
    let (bytes, declared_in_url) = match file.source {
        Source::Base64(data) => (decode_base64(&data, max, &label, &too_large)?, None),
        Source::Url(url) if url.starts_with("data:") => {
            let (declared, bytes) = data_url(&url, max, &label, &too_large)?;
            (bytes, declared)
        }
        Source::Url(url) => (fetch(config, &url, max, &label, &too_large).await?, None),
    };
    let declared = file.declared.or(declared_in_url);
    let markdown = declared.as_deref().is_some_and(|d| d.contains("markdown"))
        || file
            .name
            .as_deref()
            .is_some_and(|n| n.ends_with(".md") || n.ends_with(".markdown"));
    let Some(found) = sniff::sniff(&bytes, markdown) else {
        return Err(ApiError::BadRequest(format!(
            "{label} is not an accepted type: its bytes are not a PNG, JPEG, GIF or WebP image, \
             a PDF, or UTF-8 text"
        )));
    };
    if let Some(declared) = declared.as_deref().filter(|d| !agrees(d, found.media_type)) {
        return Err(ApiError::BadRequest(format!(
            "{label} is declared `{declared}` but its bytes are {}",
            found.media_type
        )));
    }
    let id = new_id()?;
    let attachment = Attachment {
        id,
        media_type: found.media_type.to_string(),
        size: bytes.len() as u64,
        name: file.name,
        width: found.width,
        height: found.height,
        pages: found.pages,
        data: None,
    };
    let new = NewFile {
        id: &attachment.id,
        owner: upload.owner,
        conversation_id: upload.conversation,
        size: attachment.size,
    };
    let quota = config.max_file_bytes_per_user;
    if !store.record_file(&new, quota, now_ms()).await? {
        let used = store.file_bytes_used(upload.owner).await?;
        return Err(ApiError::PayloadTooLarge(format!(
            "{label} is {} bytes, and your files take {used} of the {quota} bytes one user may \
             keep (MAX_FILE_BYTES_PER_USER); delete conversations whose files you no longer need",
            attachment.size
        )));
    }
    let put = bucket
        .put(
            &attachment.id,
            bytes,
            &attachment.media_type,
            attachment.name.as_deref(),
        )
        .await;
    // A put that failed may still have written the object: its row stays, for the sweep.
    put?;
    Ok(attachment)
}

/// Whether a declared media type agrees with the one the bytes are (`image/jpg` is a JPEG's
/// common misspelling; any text type fits text).
fn agrees(declared: &str, found: &str) -> bool {
    let declared = declared
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    declared.is_empty()
        || declared == "application/octet-stream"
        || declared == found
        || (declared == "image/jpg" && found == "image/jpeg")
        || (declared.starts_with("text/") && found.starts_with("text/"))
}

fn decode_base64(
    data: &str,
    max: u64,
    label: &str,
    too_large: &dyn Fn(u64) -> ApiError,
) -> Result<Vec<u8>, ApiError> {
    // Refused before decoding: what it would decode to is known from its length.
    let decoded = data.len() as u64 / 4 * 3;
    if decoded > max + 3 {
        return Err(too_large(decoded));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| ApiError::BadRequest(format!("{label} is not valid base64: {e}")))?;
    if bytes.len() as u64 > max {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// A `data:[<media type>][;base64],<data>` URL's declared type and bytes.
fn data_url(
    url: &str,
    max: u64,
    label: &str,
    too_large: &dyn Fn(u64) -> ApiError,
) -> Result<(Option<String>, Vec<u8>), ApiError> {
    let Some((head, data)) = url["data:".len()..].split_once(',') else {
        return Err(ApiError::BadRequest(format!(
            "{label} is a `data:` URL without a `,`"
        )));
    };
    let (media_type, base64) = match head.strip_suffix(";base64") {
        Some(media_type) => (media_type, true),
        None => (head, false),
    };
    let declared = Some(media_type.to_string()).filter(|t| !t.is_empty());
    let bytes = if base64 {
        decode_base64(data, max, label, too_large)?
    } else {
        // Each byte is 1 to 3 characters: refused before decoding when even a third is too
        // much, and never decoded past the limit.
        if data.len() as u64 / 3 > max {
            return Err(too_large(data.len() as u64 / 3));
        }
        let bytes: Vec<u8> = percent_encoding::percent_decode_str(data)
            .take(usize::try_from(max).unwrap_or(usize::MAX).saturating_add(1))
            .collect();
        if bytes.len() as u64 > max {
            return Err(too_large(bytes.len() as u64));
        }
        bytes
    };
    Ok((declared, bytes))
}

/// Fetches a file's URL as a tool would call it: https (http too where private hosts are
/// allowed, for local development), public hosts only, redirects checked hop by hop.
async fn fetch(
    config: &Config,
    url: &str,
    max: u64,
    label: &str,
    too_large: &dyn Fn(u64) -> ApiError,
) -> Result<Vec<u8>, ApiError> {
    let https = url
        .get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"));
    if !https && !config.allow_private_tool_hosts {
        return Err(ApiError::BadRequest(format!(
            "{label}: a file's URL must be a `data:` or an `https:` URL"
        )));
    }
    let transport = FetchTransport {
        signal: None,
        idle_timeout_ms: Some(config.tool_timeout_ms.into()),
    };
    let request = ApiRequest {
        method: "GET",
        url: url.to_string(),
        headers: Vec::new(),
        body: None,
    };
    let mut response = redirects::send(&transport, request, config.allow_private_tool_hosts, &[])
        .await
        .map_err(|e| ApiError::BadRequest(format!("{label} could not be fetched: {e}")))?;
    if response.status != 200 {
        return Err(ApiError::BadRequest(format!(
            "{label} could not be fetched: its URL answered {}",
            response.status
        )));
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response.body.next().await {
        let chunk = chunk
            .map_err(|e| ApiError::BadRequest(format!("{label} could not be fetched: {e}")))?;
        if (bytes.len() + chunk.len()) as u64 > max {
            return Err(too_large((bytes.len() + chunk.len()) as u64));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn too_large(size: u64) -> ApiError {
        ApiError::PayloadTooLarge(size.to_string())
    }

    #[test]
    fn data_urls_give_their_type_and_bytes() {
        let (declared, bytes) = data_url("data:image/png;base64,iVBORw==", 100, "f", &too_large)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(declared.as_deref(), Some("image/png"));
        assert_eq!(bytes, [0x89, b'P', b'N', b'G']);
        let (declared, bytes) =
            data_url("data:,hello%20there", 100, "f", &too_large).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((declared, bytes), (None, b"hello there".to_vec()));
        // Percent-encoded past the limit: refused by its length, or as soon as decoding passes.
        assert!(matches!(
            data_url(&format!("data:,{}", "a".repeat(400)), 100, "f", &too_large),
            Err(ApiError::PayloadTooLarge(size)) if size == "133"
        ));
        assert!(matches!(
            data_url(&format!("data:,{}", "a".repeat(150)), 100, "f", &too_large),
            Err(ApiError::PayloadTooLarge(size)) if size == "101"
        ));
        assert!(matches!(
            data_url(
                "data:text/plain;base64,aGVsbG8gdGhlcmU=",
                5,
                "f",
                &too_large
            ),
            Err(ApiError::PayloadTooLarge(_))
        ));
        assert!(matches!(
            data_url("data:image/png;base64,@@@@", 100, "f", &too_large),
            Err(ApiError::BadRequest(m)) if m.contains("not valid base64")
        ));
    }

    #[test]
    fn a_message_body_is_capped_at_what_its_files_may_need() {
        let mut config = Config::from_lookup(|_| None).unwrap_or_else(|e| panic!("{e}"));
        // The defaults (5 files of 10 MiB) need more than the fixed ceiling.
        assert_eq!(message_body_limit(&config), MAX_MESSAGE_BODY_BYTES);
        config.max_file_bytes = 4096;
        let limit = message_body_limit(&config);
        assert!(limit >= 5 * 4096 * 4 / 3 + MAX_MESSAGE_CHARS, "{limit}");
        assert!(limit < 3 << 20, "{limit}");
        config.max_files_per_message = 0;
        assert!(message_body_limit(&config) < limit);
    }

    #[test]
    fn a_declared_type_must_agree_with_the_bytes() {
        assert!(agrees("image/png", "image/png"));
        assert!(agrees("IMAGE/JPG", "image/jpeg"));
        assert!(agrees("text/markdown; charset=utf-8", "text/plain"));
        assert!(agrees("application/octet-stream", "application/pdf"));
        assert!(!agrees("image/png", "text/plain"));
        assert!(!agrees("application/pdf", "image/gif"));
    }
}
