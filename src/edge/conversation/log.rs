//! The running turn's UI message stream, kept so any number of readers can follow it: each
//! reader gets everything from the turn's `start`, then live chunks. The POST that started the
//! turn is just the first reader; a reader going away never affects the turn.
//!
//! The log is written to the object's SQLite in batches (by size or age, and at the end), never
//! per chunk, and is bounded: past [`MAX_LOG_BYTES`] it stops growing and a late reader is told
//! there is nothing to replay (204) rather than given a stream with a hole in it.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use futures::channel::mpsc::{unbounded, UnboundedReceiver, UnboundedSender};

use super::storage::ObjectStorage;

/// Largest stream a re-attaching reader can replay.
pub const MAX_LOG_BYTES: usize = 4 << 20;
/// A batch is written once it is this large...
const FLUSH_BYTES: usize = 16 << 10;
/// ...or this old (so a crash loses little of a slow answer).
const FLUSH_MS: i64 = 1_000;

pub struct ChunkLog {
    storage: Rc<ObjectStorage>,
    readers: RefCell<Vec<UnboundedSender<Vec<u8>>>>,
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
            .retain(|tx| tx.unbounded_send(chunk.as_bytes().to_vec()).is_ok());
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

    /// A new reader: the stream so far, then live chunks until the turn ends. `None` when the
    /// stream outgrew the log.
    pub fn attach(&self) -> Option<UnboundedReceiver<Vec<u8>>> {
        if self.overflowed.get() {
            return None;
        }
        let (tx, rx) = unbounded();
        // Storage holds only what this log wrote (`new` pruned the rest): nothing to read when
        // it wrote nothing, as for the POST that starts the turn.
        let mut backlog = if self.logged.get() == 0 {
            String::new()
        } else {
            match self.storage.chunks() {
                Ok(logged) => logged,
                Err(e) => {
                    worker::console_error!("reading the chunk log: {e}");
                    return None;
                }
            }
        };
        backlog.push_str(&self.pending.borrow());
        if !backlog.is_empty() {
            let _ = tx.unbounded_send(backlog.into_bytes());
        }
        if !self.closed.get() {
            self.readers.borrow_mut().push(tx);
        }
        Some(rx)
    }

    /// The turn ended: every reader's stream closes. The log is pruned by the turn's end step.
    pub fn close(&self) {
        self.closed.set(true);
        self.readers.borrow_mut().clear();
    }
}
