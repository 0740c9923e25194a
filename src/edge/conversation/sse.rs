//! The turn's stream as a response: the replay log's reader written out as server-sent events.

use crate::edge::conversation::replay::LogReader;
use crate::edge::conversation::ui_stream::HEADERS;
use crate::edge::error::ApiError;
use crate::edge::platform::clock::now_ms;
use futures::StreamExt;
use worker::Response;

/// A write that follows the last one within this window waits for the window's end and takes
/// every chunk that arrived by then, so a burst of tokens costs one write per window, not one
/// each; a write after a quieter spell (the `start` chunk, the first token after the model's
/// pause, a trickle) goes out at once.
const WRITE_WINDOW_MS: i64 = 4;
/// ...or until this many bytes wait.
const WRITE_MAX_BYTES: usize = 16 << 10;

/// A reader's stream as the UI message stream response. Each write is a crossing out of wasm, so
/// chunks are coalesced: whatever waits when the runtime pulls, plus, right after another write,
/// what arrives within [`WRITE_WINDOW_MS`] of it.
pub(super) fn sse(reader: LogReader) -> std::result::Result<Response, ApiError> {
    let headers = worker::Headers::new();
    for (name, value) in HEADERS {
        headers.set(name, value)?;
    }
    let writes = futures::stream::unfold((reader, 0i64), |(mut reader, written_at)| async move {
        // Everything the log holds for this reader comes as one piece.
        let mut write = reader.next().await?;
        // The clock only moves on I/O: a chunk in the same instant as the last write is part
        // of a burst.
        let since = now_ms() - written_at;
        if since < WRITE_WINDOW_MS {
            let rest = (WRITE_WINDOW_MS - since) as u64;
            let mut window = Box::pin(worker::Delay::from(std::time::Duration::from_millis(rest)));
            while write.len() < WRITE_MAX_BYTES {
                match futures::future::select(reader.next(), &mut window).await {
                    futures::future::Either::Left((Some(chunk), _)) => {
                        write.extend_from_slice(&chunk)
                    }
                    _ => break,
                }
            }
        }
        Some((Ok::<Vec<u8>, worker::Error>(write), (reader, now_ms())))
    });
    Ok(Response::from_stream(writes)?.with_headers(headers))
}
