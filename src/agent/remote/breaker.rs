//! A circuit breaker per remote service: after `FAILURES_TO_OPEN` failures in a row its tools
//! answer "unavailable" at once for `COOL_DOWN_MS`; then one call is let through (half-open) and
//! its outcome closes the circuit or opens it again. A trial that ends with no outcome (it was
//! cancelled, or dropped by a timeout) releases the circuit for the next call, and one that is
//! never heard of again is given up on after another cool-down, so a lost trial cannot leave a
//! service refused for as long as the isolate lives.

/// Consecutive failures that open the circuit.
pub const FAILURES_TO_OPEN: u32 = 3;
/// How long an open circuit refuses calls before it lets one through.
pub const COOL_DOWN_MS: i64 = 30_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Closed {
        failures: u32,
    },
    Open {
        until_ms: i64,
    },
    /// One trial call is out (since `since_ms`); others are refused until it ends.
    HalfOpen {
        since_ms: i64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Breaker {
    pub state: State,
}

impl Default for Breaker {
    fn default() -> Self {
        Self {
            state: State::Closed { failures: 0 },
        }
    }
}

impl Breaker {
    /// Whether a call may go out now; `Err` says for how long the service is given up on.
    pub fn admit(&mut self, now_ms: i64) -> Result<(), i64> {
        match self.state {
            State::Closed { .. } => Ok(()),
            State::Open { until_ms } if now_ms >= until_ms => {
                self.state = State::HalfOpen { since_ms: now_ms };
                Ok(())
            }
            State::Open { until_ms } => Err(until_ms - now_ms),
            // The trial was lost without a word: another one goes.
            State::HalfOpen { since_ms } if now_ms - since_ms >= COOL_DOWN_MS => {
                self.state = State::HalfOpen { since_ms: now_ms };
                Ok(())
            }
            State::HalfOpen { since_ms } => Err(since_ms + COOL_DOWN_MS - now_ms),
        }
    }

    /// An admitted call ended with no outcome (cancelled, or dropped): it says nothing of the
    /// service, so it counts neither way, and a trial it was lets the next call try.
    pub fn release(&mut self) {
        if let State::HalfOpen { .. } = self.state {
            self.state = State::Open { until_ms: i64::MIN };
        }
    }

    /// Records how an admitted call went.
    pub fn record(&mut self, succeeded: bool, now_ms: i64) {
        self.state = match (self.state, succeeded) {
            (_, true) => State::Closed { failures: 0 },
            (State::Closed { failures }, false) if failures + 1 < FAILURES_TO_OPEN => {
                State::Closed {
                    failures: failures + 1,
                }
            }
            (_, false) => State::Open {
                until_ms: now_ms + COOL_DOWN_MS,
            },
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_repeated_failures_half_opens_after_the_cool_down_and_closes_on_success() {
        let mut b = Breaker::default();
        for _ in 0..FAILURES_TO_OPEN - 1 {
            assert!(b.admit(0).is_ok());
            b.record(false, 0);
        }
        assert_eq!(b.state, State::Closed { failures: 2 });
        assert!(b.admit(0).is_ok());
        b.record(false, 1_000);
        assert_eq!(b.admit(2_000), Err(COOL_DOWN_MS - 1_000));
        // After the cool-down one trial goes out; a second waits for it.
        assert!(b.admit(1_000 + COOL_DOWN_MS).is_ok());
        assert_eq!(
            b.state,
            State::HalfOpen {
                since_ms: 1_000 + COOL_DOWN_MS
            }
        );
        assert!(b.admit(1_000 + COOL_DOWN_MS).is_err());
        b.record(true, 1_000 + COOL_DOWN_MS);
        assert_eq!(b.state, State::Closed { failures: 0 });
    }

    #[test]
    fn a_trial_that_is_released_or_never_ends_does_not_keep_the_circuit_refusing() {
        let mut b = Breaker {
            state: State::Open { until_ms: 0 },
        };
        assert!(b.admit(0).is_ok());
        // Cancelled or dropped: the next call is the trial, at once.
        b.release();
        assert!(b.admit(5).is_ok());
        // Lost without a release: refused for a cool-down, then tried again.
        assert_eq!(b.admit(6), Err(COOL_DOWN_MS - 1));
        assert!(b.admit(5 + COOL_DOWN_MS).is_ok());
        b.record(true, 5 + COOL_DOWN_MS);
        assert_eq!(b.state, State::Closed { failures: 0 });
        // A released call of a closed circuit counts as nothing.
        b.record(false, 0);
        b.release();
        assert_eq!(b.state, State::Closed { failures: 1 });
    }

    #[test]
    fn a_failed_trial_opens_it_again_and_a_success_resets_the_count() {
        let mut b = Breaker {
            state: State::Open { until_ms: 10 },
        };
        assert!(b.admit(10).is_ok());
        b.record(false, 10);
        assert_eq!(
            b.state,
            State::Open {
                until_ms: 10 + COOL_DOWN_MS
            }
        );
        let mut b = Breaker::default();
        b.record(false, 0);
        b.record(false, 0);
        b.record(true, 0);
        b.record(false, 0);
        assert_eq!(b.state, State::Closed { failures: 1 });
    }
}
