//! The running turn's UI message stream, kept so any number of readers can follow it: each
//! reader gets everything from the turn's `start`, then live chunks. The POST that started the
//! turn is just the first reader; a reader going away never affects the turn.
//!
//! A streamed response is a body the log writes into (`platform::push_body`), once per poll of
//! the turn ([`ChunkLog::delivering`]): no task and no promise per write. A `stream: false`
//! request reads the log as a task's [`LogReader`] instead.
//!
//! The log is written to the object's SQLite in batches (by size or age, and at the end), never
//! per chunk, and is bounded: past [`MAX_LOG_BYTES`] it stops growing and a late reader is told
//! there is nothing to replay (204) rather than given a stream with a hole in it.
//!
//! What readers hold is bounded too, since each live chunk is copied to every reader that has
//! not taken it yet: at most [`MAX_READERS`] follow a turn, and a reader that falls more than
//! [`MAX_BEHIND_BYTES`] behind is closed (it may attach again and replay from the log). The
//! bound counts what came after the reader attached: the backlog it is given at once (the stream
//! so far, up to [`MAX_LOG_BYTES`]) is not a lag, and a reader attaching to a long turn is not
//! closed for it. A reader closed for lagging ends with an `error` chunk ([`LAGGED`]), so its
//! client can tell it from the turn's end.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use futures::Stream;

use super::storage::ObjectStorage;
use crate::edge::platform::push_body::PushBody;

/// Largest stream a re-attaching reader can replay.
pub const MAX_LOG_BYTES: usize = 4 << 20;
/// A batch is written once it is this large...
const FLUSH_BYTES: usize = 16 << 10;
/// ...or this old (so a crash loses little of a slow answer).
const FLUSH_MS: i64 = 1_000;
/// Most readers following one turn (the request that started it among them).
pub const MAX_READERS: usize = 16;
/// Most a reader may leave untaken before it is closed, beyond the backlog it attached to.
pub const MAX_BEHIND_BYTES: usize = 1 << 20;
/// The last chunk of a reader closed for falling [`MAX_BEHIND_BYTES`] behind: a UI message
/// stream `error` chunk, for a clean close would read as the turn's end.
pub const LAGGED: &str = "data: {\"type\":\"error\",\"errorText\":\"This reader fell more than \
    1 MB behind the turn's stream and was closed; attach to the conversation's stream again to \
    follow the turn.\"}\n\n";

/// Why a reader cannot attach.
#[derive(Debug, PartialEq, Eq)]
pub enum NoReader {
    /// The stream outgrew the log: there is nothing whole to replay.
    Overflowed,
    /// [`MAX_READERS`] follow the turn already.
    Full,
}

pub struct ChunkLog {
    storage: Rc<ObjectStorage>,
    readers: RefCell<Vec<Rc<Follower>>>,
    /// Chunks not yet written to storage.
    pending: RefCell<String>,
    pending_since: Cell<Option<i64>>,
    logged: Cell<usize>,
    overflowed: Cell<bool>,
    closed: Cell<bool>,
    /// Set while the turn's task is polled ([`ChunkLog::delivering`]): what the poll pushes is
    /// sent to response bodies when it ends, in one write each.
    holding: Cell<bool>,
}

impl ChunkLog {
    /// A new, empty log (whatever an earlier turn left is pruned).
    pub fn new(storage: Rc<ObjectStorage>) -> Self {
        if let Err(e) = storage.clear_chunks() {
            worker::console_error!("pruning the chunk log: {e}");
        }
        Self {
            storage,
            readers: RefCell::default(),
            pending: RefCell::default(),
            pending_since: Cell::new(None),
            logged: Cell::new(0),
            overflowed: Cell::new(false),
            closed: Cell::new(false),
            holding: Cell::new(false),
        }
    }

    /// Sends `chunk` to every reader and logs it. `true` when this wrote a batch to storage.
    pub fn push(&self, chunk: &str, now_ms: i64) -> bool {
        if chunk.is_empty() {
            return false;
        }
        // A reader whose stream was dropped has gone away: forget it.
        self.readers
            .borrow_mut()
            .retain(|reader| reader.append(chunk));
        if !self.holding.get() {
            self.deliver();
        }
        if self.overflowed.get() {
            return false;
        }
        self.pending.borrow_mut().push_str(chunk);
        let since = *self.pending_since.get().get_or_insert(now_ms);
        self.pending_since.set(Some(since));
        if self.pending.borrow().len() >= FLUSH_BYTES || now_ms - since >= FLUSH_MS {
            self.flush();
            return true;
        }
        false
    }

    /// Writes the pending batch.
    pub fn flush(&self) {
        let batch = std::mem::take(&mut *self.pending.borrow_mut());
        self.pending_since.set(None);
        if batch.is_empty() || self.overflowed.get() {
            return;
        }
        if self.logged.get() + batch.len() > MAX_LOG_BYTES {
            self.overflowed.set(true);
            return;
        }
        self.logged.set(self.logged.get() + batch.len());
        if let Err(e) = self.storage.append_chunks(&batch) {
            worker::console_error!("writing the chunk log: {e}");
        }
    }

    /// Sends what response bodies have not yet been given (see [`ChunkLog::delivering`]).
    pub fn deliver(&self) {
        for reader in self.readers.borrow().iter() {
            reader.deliver();
        }
    }

    /// `task` (the turn), with what each of its polls pushes sent to response bodies when the
    /// poll ends: a read's worth of tokens is one write out of wasm, not one per token.
    pub fn delivering<'a, F: Future + 'a>(&'a self, task: F) -> Delivering<'a, F> {
        Delivering {
            log: self,
            task: Box::pin(task),
        }
    }

    /// A new reader taken by a task: the stream so far, then live chunks until the turn ends.
    pub fn attach(&self) -> Result<LogReader, NoReader> {
        let backlog = self.backlog()?;
        Ok(LogReader(
            self.follow(backlog, Taker::Task(RefCell::default())),
        ))
    }

    /// A new reader that is a response body: the stream so far, written at once, then live
    /// chunks as they come, until the turn ends.
    pub fn attach_body(&self) -> Result<Rc<PushBody>, NoReader> {
        let backlog = self.backlog()?;
        // The body bounds what its reader leaves unread of what comes after the backlog, its
        // first write: only that counts toward MAX_BEHIND_BYTES, and once the backlog is read
        // the bound is MAX_BEHIND_BYTES again.
        let behind = u32::try_from(MAX_BEHIND_BYTES).unwrap_or(u32::MAX);
        let backlog_len = u32::try_from(backlog.len()).unwrap_or(u32::MAX);
        let body = Rc::new(PushBody::new(behind, backlog_len));
        let follower = self.follow(backlog, Taker::Body(body.clone()));
        follower.deliver();
        if follower.ended.get() {
            body.close();
        }
        Ok(body)
    }

    /// The stream so far, for a new reader, unless it cannot attach.
    fn backlog(&self) -> Result<String, NoReader> {
        if self.overflowed.get() {
            return Err(NoReader::Overflowed);
        }
        if !self.closed.get() {
            let mut readers = self.readers.borrow_mut();
            readers.retain(|reader| !reader.is_gone());
            if readers.len() >= MAX_READERS {
                return Err(NoReader::Full);
            }
        }
        // Storage holds only what this log wrote (`new` pruned the rest): nothing to read when
        // it wrote nothing, as for the POST that starts the turn.
        let mut backlog = if self.logged.get() == 0 {
            String::new()
        } else {
            match self.storage.chunks() {
                Ok(logged) => logged,
                Err(e) => {
                    worker::console_error!("reading the chunk log: {e}");
                    return Err(NoReader::Overflowed);
                }
            }
        };
        backlog.push_str(&self.pending.borrow());
        Ok(backlog)
    }

    /// A new reader, given `backlog` first (what [`ChunkLog::backlog`] read, with no await
    /// since: nothing has been pushed meanwhile).
    fn follow(&self, backlog: String, taker: Taker) -> Rc<Follower> {
        let follower = Follower::new(backlog, taker, self.closed.get());
        if !self.closed.get() {
            self.readers.borrow_mut().push(follower.clone());
        }
        follower
    }

    /// The turn ended: every reader's stream closes. The log is pruned by the turn's end step.
    pub fn close(&self) {
        self.closed.set(true);
        for reader in self.readers.borrow_mut().drain(..) {
            reader.end();
        }
    }
}

/// See [`ChunkLog::delivering`].
pub struct Delivering<'a, F> {
    log: &'a ChunkLog,
    task: Pin<Box<F>>,
}

impl<F: Future> Future for Delivering<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.log.holding.set(true);
        let polled = self.task.as_mut().poll(cx);
        self.log.holding.set(false);
        self.log.deliver();
        polled
    }
}

/// How a reader takes what the log sends it.
enum Taker {
    /// A [`LogReader`], polled by a task: woken when something arrives while it waits.
    Task(RefCell<Option<Waker>>),
    /// A response body the log writes into: no task, no wake-up.
    Body(Rc<PushBody>),
}

/// What one reader has not yet taken. The log appends each chunk to it and wakes a task reader
/// only if it waits, or writes to a body reader once per poll of the turn, so a read's worth of
/// tokens is taken as one piece, not as a message per chunk.
struct Follower {
    unread: RefCell<Vec<u8>>,
    /// How much of the head of `unread` is the backlog the reader attached to, not yet taken:
    /// it does not count toward [`MAX_BEHIND_BYTES`].
    backlog: Cell<usize>,
    taker: Taker,
    ended: Cell<bool>,
    /// Its [`LogReader`] was dropped (or the reader was closed for lagging).
    gone: Cell<bool>,
}

impl Follower {
    /// A reader given `backlog` first; `ended` when the turn has already.
    fn new(backlog: String, taker: Taker, ended: bool) -> Rc<Self> {
        Rc::new(Self {
            backlog: Cell::new(backlog.len()),
            unread: RefCell::new(backlog.into_bytes()),
            taker,
            ended: Cell::new(ended),
            gone: Cell::new(false),
        })
    }

    /// Appends `chunk`; `false` when the reader has gone away, or is closed now for having
    /// fallen [`MAX_BEHIND_BYTES`] behind (see [`Follower::lag_out`]).
    fn append(&self, chunk: &str) -> bool {
        if self.gone.get() {
            return false;
        }
        let mut unread = self.unread.borrow_mut();
        let behind = unread.len().saturating_sub(self.backlog.get());
        if behind + chunk.len() > MAX_BEHIND_BYTES {
            drop(unread);
            self.lag_out();
            return false;
        }
        unread.extend_from_slice(chunk.as_bytes());
        drop(unread);
        self.wake();
        true
    }

    /// Closes a reader that fell [`MAX_BEHIND_BYTES`] behind: what it had not taken is dropped
    /// (it may attach again and replay from the log), and [`LAGGED`] is all it gets before its
    /// stream ends.
    fn lag_out(&self) {
        *self.unread.borrow_mut() = LAGGED.as_bytes().to_vec();
        self.backlog.set(0);
        self.ended.set(true);
        // A body is written the chunk now, before it is closed; a task takes it when it polls.
        self.deliver();
        self.gone.set(true);
        self.wake();
    }

    /// The turn ended: a body is written what it has not been given, and the stream ends.
    fn end(&self) {
        self.deliver();
        self.ended.set(true);
        self.wake();
    }

    fn wake(&self) {
        match &self.taker {
            Taker::Task(waiting) => {
                if let Some(waker) = waiting.borrow_mut().take() {
                    waker.wake();
                }
            }
            Taker::Body(body) => {
                if self.ended.get() {
                    body.close();
                }
            }
        }
    }

    /// Writes what a body reader has not yet been given.
    fn deliver(&self) {
        let Taker::Body(body) = &self.taker else {
            return;
        };
        let mut unread = self.unread.borrow_mut();
        if unread.is_empty() || self.gone.get() {
            return;
        }
        if !body.write(&unread) {
            self.gone.set(true);
        }
        // The backlog's buffer (up to MAX_LOG_BYTES) is freed, not kept for the live chunks.
        if self.backlog.replace(0) > 0 {
            *unread = Vec::new();
        } else {
            unread.clear();
        }
    }

    fn is_gone(&self) -> bool {
        self.gone.get() || matches!(&self.taker, Taker::Body(body) if body.gone())
    }
}

/// A reader of the log: each item is everything written since the last one was taken; the
/// stream ends with the turn.
pub struct LogReader(Rc<Follower>);

impl Stream for LogReader {
    type Item = Vec<u8>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Vec<u8>>> {
        let follower = &self.0;
        let mut unread = follower.unread.borrow_mut();
        if !unread.is_empty() {
            follower.backlog.set(0);
            return Poll::Ready(Some(std::mem::take(&mut *unread)));
        }
        if follower.ended.get() {
            return Poll::Ready(None);
        }
        if let Taker::Task(waiting) = &follower.taker {
            *waiting.borrow_mut() = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}

impl Drop for LogReader {
    fn drop(&mut self) {
        self.0.gone.set(true);
    }
}

#[cfg(test)]
mod tests {
    use futures::executor::block_on;
    use futures::StreamExt;

    use super::*;

    fn follower() -> Rc<Follower> {
        attached_to("")
    }

    /// A task's reader attaching to a turn whose stream so far is `backlog`.
    fn attached_to(backlog: &str) -> Rc<Follower> {
        Follower::new(backlog.to_string(), Taker::Task(RefCell::default()), false)
    }

    const LIVE: &str = "data: {\"type\":\"text-delta\",\"id\":\"t1\",\"delta\":\"live\"}\n\n";
    const FINISH: &str =
        "data: {\"type\":\"finish\",\"finishReason\":\"stop\"}\n\ndata: [DONE]\n\n";

    #[test]
    fn a_reader_that_falls_a_megabyte_behind_is_closed_and_holds_nothing_but_its_error() {
        let slow = follower();
        let reader = LogReader(slow.clone());
        let chunk = format!("data: {}\n\n", "x".repeat(64 * 1024));
        let mut kept = 0;
        while slow.append(&chunk) {
            kept += 1;
            assert!(kept < 100, "never closed");
        }
        // Closed at the chunk that would pass the bound, what it had not taken dropped.
        assert_eq!(kept, MAX_BEHIND_BYTES / chunk.len());
        assert!(*slow.unread.borrow() == LAGGED.as_bytes() && slow.ended.get());
        assert!(!slow.append("data: more\n\n"), "it takes nothing more");
        assert_eq!(
            block_on(reader.collect::<Vec<_>>()),
            vec![LAGGED.as_bytes().to_vec()]
        );
        // A reader that keeps up is never closed, however much passes through it.
        let quick = follower();
        let mut reader = LogReader(quick.clone());
        for _ in 0..100 {
            assert!(quick.append(&chunk));
            let taken = block_on(reader.next()).unwrap();
            assert_eq!(taken.len(), chunk.len());
        }
    }

    /// Issue 56: the backlog counted toward the reader's lag, so a reader attaching to a turn
    /// whose stream was past 1 MB was closed at the first live chunk: it got the backlog, then
    /// a clean end, never the rest of the turn.
    #[test]
    fn a_reader_attaching_past_a_megabyte_gets_the_backlog_then_the_live_part_and_the_finish() {
        let backlog = format!("data: {}\n\n", "x".repeat(MAX_BEHIND_BYTES * 3 / 2));
        let late = attached_to(&backlog);
        let reader = LogReader(late.clone());
        // Before the reader takes anything, up to a megabyte comes live.
        let mut sent = backlog.clone();
        while sent.len() - backlog.len() + LIVE.len() + FINISH.len() <= MAX_BEHIND_BYTES {
            assert!(
                late.append(LIVE),
                "closed after {} live bytes",
                sent.len() - backlog.len()
            );
            sent.push_str(LIVE);
        }
        assert!(late.append(FINISH));
        sent.push_str(FINISH);
        late.end();
        let taken = block_on(reader.collect::<Vec<_>>()).concat();
        assert_eq!(taken.len(), sent.len());
        assert!(taken == sent.as_bytes(), "the whole stream, in order");
    }

    /// Issue 56: a reader closed for lagging ended as cleanly as one whose turn had finished,
    /// so its client took a cut stream for a whole answer.
    #[test]
    fn an_overflowing_reader_ends_with_an_error_chunk_not_a_clean_close() {
        // The backlog is not a lag, but what comes after it is, however large the backlog.
        let backlog = format!("data: {}\n\n", "x".repeat(MAX_BEHIND_BYTES * 2));
        let slow = attached_to(&backlog);
        let mut reader = LogReader(slow.clone());
        let mut live = 0;
        while slow.append(LIVE) {
            live += LIVE.len();
            assert!(live <= MAX_BEHIND_BYTES, "never closed");
        }
        assert!(
            live + LIVE.len() > MAX_BEHIND_BYTES,
            "closed early, at {live} bytes"
        );
        let taken = block_on(reader.next()).unwrap();
        assert!(block_on(reader.next()).is_none(), "nothing after the error");
        // The last chunk is the UI message stream's `error`, as a client reads it.
        let text = String::from_utf8(taken).unwrap();
        let payload = text
            .strip_prefix("data: ")
            .and_then(|t| t.strip_suffix("\n\n"))
            .unwrap();
        let chunk: serde_json::Value = serde_json::from_str(payload).unwrap();
        assert_eq!(chunk["type"], "error");
        assert!(chunk["errorText"].as_str().unwrap().contains("1 MB behind"));
        assert_eq!(
            chunk.as_object().unwrap().len(),
            2,
            "only the protocol's fields"
        );
        // A reader that took its backlog counts its lag from there.
        let quick = attached_to(&backlog);
        let mut reader = LogReader(quick.clone());
        assert_eq!(block_on(reader.next()).unwrap().len(), backlog.len());
        for _ in 0..(MAX_BEHIND_BYTES / LIVE.len()) {
            assert!(quick.append(LIVE));
        }
        assert!(!quick.append(LIVE));
    }
}
