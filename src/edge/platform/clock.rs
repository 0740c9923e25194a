//! A clock read once per poll of a task, not once per use.
//!
//! An isolate's clock stands still while its code runs: workerd moves `Date.now()` only when
//! I/O completes, between the runs of tasks. So every reading taken during one poll of a task
//! gives the same time, and each is a call out of wasm. A streamed turn handles hundreds of
//! events in one poll (a read's worth of tokens) and wants the time for each (the turn's
//! figures, the chunk log's batching): `PollClock` reads it for the first and hands the
//! same reading to the rest, and `PollClock::ticking` forgets it whenever the task is polled
//! again, when the time may have moved.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The time, in milliseconds since the epoch.
pub fn now_ms() -> i64 {
    // `Date.now()`: one call, where `worker::Date::now()` constructs a `Date` and reads it.
    worker::js_sys::Date::now() as i64
}

#[derive(Default)]
pub(crate) struct PollClock {
    reading: Cell<Option<i64>>,
}

impl PollClock {
    /// The time, in milliseconds since the epoch, as of this poll.
    pub(crate) fn now(&self) -> i64 {
        match self.reading.get() {
            Some(at) => at,
            None => {
                let at = now_ms();
                self.reading.set(Some(at));
                at
            }
        }
    }

    /// `task`, with this clock forgetting its reading around each poll of it.
    pub(crate) fn ticking<'a, F: Future + 'a>(&'a self, task: F) -> Ticking<'a, F> {
        Ticking {
            clock: self,
            task: Box::pin(task),
        }
    }
}

pub(crate) struct Ticking<'a, F> {
    clock: &'a PollClock,
    task: Pin<Box<F>>,
}

impl<F: Future> Future for Ticking<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.clock.reading.set(None);
        let polled = self.task.as_mut().poll(cx);
        self.clock.reading.set(None);
        polled
    }
}
