//! A circuit breaker per remote service: after `FAILURES_TO_OPEN` failures in a row its tools
//! answer "unavailable" at once for `COOL_DOWN_MS`; then one call is let through (half-open) and
//! its outcome closes the circuit or opens it again.

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
    /// One trial call is out; others are refused until it ends.
    HalfOpen,
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
                self.state = State::HalfOpen;
                Ok(())
            }
            State::Open { until_ms } => Err(until_ms - now_ms),
            State::HalfOpen => Err(COOL_DOWN_MS),
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
        assert_eq!(b.state, State::HalfOpen);
        assert!(b.admit(1_000 + COOL_DOWN_MS).is_err());
        b.record(true, 1_000 + COOL_DOWN_MS);
        assert_eq!(b.state, State::Closed { failures: 0 });
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
