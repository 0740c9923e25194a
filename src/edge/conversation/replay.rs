//! The running turn's UI message stream, kept so any number of readers can follow it: each
//! reader gets everything from the turn's `start`, then live chunks. The POST that started the
//! turn is just the first reader; a reader going away never affects the turn.
//!
//! The log is written to the object's SQLite in batches (by size or age, and at the end), never
//! per chunk, and is bounded: past [`MAX_LOG_BYTES`] it stops growing and a late reader is told
//! there is nothing to replay (204) rather than given a stream with a hole in it.
//!
//! What readers hold is bounded too, since each live chunk is copied to every reader that has
//! not taken it yet: at most [`MAX_READERS`] follow a turn, and a reader that falls more than
//! [`MAX_BEHIND_BYTES`] behind is closed (it may attach again and replay from the log).

use std::cell::{Cell, RefCell};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use futures::Stream;

use super::storage::ObjectStorage;

/// Largest stream a re-attaching reader can replay.
pub const MAX_LOG_BYTES: usize = 4 << 20;
/// A batch is written once it is this large...
const FLUSH_BYTES: usize = 16 << 10;
/// ...or this old (so a crash loses little of a slow answer).
const FLUSH_MS: i64 = 1_000;
/// Most readers following one turn (the request that started it among them).
pub const MAX_READERS: usize = 16;
/// Most a reader may leave untaken before it is closed.
pub const MAX_BEHIND_BYTES: usize = 1 << 20;

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

    /// A new reader: the stream so far, then live chunks until the turn ends.
    pub fn attach(&self) -> Result<LogReader, NoReader> {
        if self.overflowed.get() {
            return Err(NoReader::Overflowed);
        }
        if !self.closed.get() {
            let mut readers = self.readers.borrow_mut();
            readers.retain(|reader| !reader.gone.get());
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
        let follower = Rc::new(Follower {
            unread: RefCell::new(backlog.into_bytes()),
            waiting: RefCell::default(),
            ended: Cell::new(self.closed.get()),
            gone: Cell::new(false),
        });
        if !self.closed.get() {
            self.readers.borrow_mut().push(follower.clone());
        }
        Ok(LogReader(follower))
    }

    /// The turn ended: every reader's stream closes. The log is pruned by the turn's end step.
    pub fn close(&self) {
        self.closed.set(true);
        for reader in self.readers.borrow_mut().drain(..) {
            reader.ended.set(true);
            reader.wake();
        }
    }
}

/// What one reader has not yet taken. The log appends each chunk to it and wakes the reader
/// only if it waits, so a read's worth of tokens costs the reader one wake and is taken as one
/// piece, not as a message per chunk.
struct Follower {
    unread: RefCell<Vec<u8>>,
    waiting: RefCell<Option<Waker>>,
    ended: Cell<bool>,
    /// Its [`LogReader`] was dropped.
    gone: Cell<bool>,
}

impl Follower {
    /// Appends `chunk`; `false` when the reader has gone away, or is closed now for having
    /// fallen [`MAX_BEHIND_BYTES`] behind (what it had not taken is dropped with it).
    fn append(&self, chunk: &str) -> bool {
        if self.gone.get() {
            return false;
        }
        let mut unread = self.unread.borrow_mut();
        if unread.len() + chunk.len() > MAX_BEHIND_BYTES {
            *unread = Vec::new();
            drop(unread);
            self.ended.set(true);
            self.gone.set(true);
            self.wake();
            return false;
        }
        unread.extend_from_slice(chunk.as_bytes());
        drop(unread);
        self.wake();
        true
    }

    fn wake(&self) {
        if let Some(waker) = self.waiting.borrow_mut().take() {
            waker.wake();
        }
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
            return Poll::Ready(Some(std::mem::take(&mut *unread)));
        }
        if follower.ended.get() {
            return Poll::Ready(None);
        }
        *follower.waiting.borrow_mut() = Some(cx.waker().clone());
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
    use futures::StreamExt;

    use super::*;

    fn follower() -> Rc<Follower> {
        Rc::new(Follower {
            unread: RefCell::default(),
            waiting: RefCell::default(),
            ended: Cell::new(false),
            gone: Cell::new(false),
        })
    }

    #[test]
    fn a_reader_that_falls_a_megabyte_behind_is_closed_and_holds_nothing() {
        let slow = follower();
        let reader = LogReader(slow.clone());
        let chunk = format!("data: {}\n\n", "x".repeat(64 * 1024));
        let mut kept = 0;
        while slow.append(&chunk) {
            kept += 1;
            assert!(kept < 100, "never closed");
        }
        // Closed at the chunk that would pass the bound, its backlog dropped with it.
        assert_eq!(kept, MAX_BEHIND_BYTES / chunk.len());
        assert!(slow.unread.borrow().capacity() == 0 && slow.ended.get());
        assert!(!slow.append("data: more\n\n"), "it takes nothing more");
        assert_eq!(
            futures::executor::block_on(reader.collect::<Vec<_>>()),
            Vec::<Vec<u8>>::new()
        );
        // A reader that keeps up is never closed, however much passes through it.
        let quick = follower();
        let mut reader = LogReader(quick.clone());
        for _ in 0..100 {
            assert!(quick.append(&chunk));
            let taken = futures::executor::block_on(reader.next()).unwrap();
            assert_eq!(taken.len(), chunk.len());
        }
    }
}
