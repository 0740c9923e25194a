//! Timers and randomness for the `llm` layer's retries, from the Workers runtime.

use async_trait::async_trait;
use worker::AbortSignal;

use crate::llm::Sleeper;

/// Waits that end early once `signal` is aborted (looked at every 50 ms: these are only the
/// waits between retries).
pub struct UntilAborted(pub AbortSignal);

#[async_trait(?Send)]
impl Sleeper for UntilAborted {
    async fn sleep(&self, ms: u64) {
        let mut left = ms;
        while left > 0 && !self.0.aborted() {
            let step = left.min(50);
            WorkerSleeper.sleep(step).await;
            left -= step;
        }
    }

    fn random(&self) -> f64 {
        WorkerSleeper.random()
    }
}

/// Timers and randomness for retries, from the Workers runtime.
pub struct WorkerSleeper;

#[async_trait(?Send)]
impl Sleeper for WorkerSleeper {
    async fn sleep(&self, ms: u64) {
        worker::Delay::from(std::time::Duration::from_millis(ms)).await;
    }

    fn random(&self) -> f64 {
        worker::js_sys::Math::random()
    }
}
