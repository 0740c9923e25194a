//! Each user's spend, serialised. A Durable Object per user (binding `SPEND`, named by the user
//! id) is the single writer of that user's running total for the budget period and of the
//! reservations the calls in flight hold. Before each LLM call the budget resolver reserves the
//! call's worst case here, and settles it to what the call cost when the call ends; so turns of
//! one user that run at once see each other's calls, which separate reads of the D1 ledger
//! cannot. The ledger stays the record: a period's total is seeded from it, once, with the
//! figure the first caller read with its turn's history.
//!
//! A call may stream for longer than a reservation holds (200,000 output tokens of a slow model
//! take hours): while it runs, its caller renews the reservation every [`RENEW_MS`], so only
//! the reservation of a call whose runtime died lapses.
//!
//! - `mod.rs`: the rules ([`Spend`]: reserve, renew, settle, expire), pure and natively tested
//! - [`object`]: the `UserSpend` Durable Object, which keeps a [`Spend`] in its SQLite
//! - [`client`]: the resolver's way to it

use serde::Serialize;

use crate::edge::budget::Period;
pub use crate::edge::budget::Seed;
use crate::llm::json::{self, FromJson, Reader};

pub mod client;
pub mod object;

pub use object::UserSpend;

/// The binding of the spend objects.
pub const BINDING: &str = "SPEND";

/// How long a reservation holds unless renewed: what a call whose runtime died mid-call keeps
/// of the budget, and for how long.
pub const RESERVATION_MS: i64 = 10 * 60_000;

/// How often a call in flight renews its reservation: four renewals may fail before it lapses.
pub const RENEW_MS: i64 = RESERVATION_MS / 5;

/// Most reservations one user holds at once; a call past them is refused as if short.
pub const MAX_OPEN: usize = 256;

/// What a call asks to reserve.
#[derive(Debug, Clone, Serialize)]
pub struct Ask {
    pub limit_usd: f64,
    pub period: Period,
    /// The ledger's total as the caller read it: seeds a period the object has not seen.
    pub ledger: Seed,
    /// The request's estimated input at the model's input price.
    pub input_usd: f64,
    pub usd_per_output_token: f64,
    pub max_tokens: u32,
    /// Below this many output tokens the call is not worth making on this model.
    pub min_tokens: u32,
}

crate::json_struct!(Ask {
    "limit_usd" => limit_usd,
    "period" => period,
    "ledger" => ledger,
    "input_usd" => input_usd,
    "usd_per_output_token" => usd_per_output_token,
    "max_tokens" => max_tokens,
    "min_tokens" => min_tokens,
});

/// The object's answer to an [`Ask`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// The call may write up to `max_tokens` (lowered when the rest of the budget covers less
    /// than it asked); `call` names the reservation to settle.
    Granted {
        call: String,
        max_tokens: u32,
        /// Spent and held by other calls before this one.
        committed_usd: f64,
    },
    /// What is left cannot cover the call's input and `min_tokens` of output.
    Short { committed_usd: f64 },
    /// The object has no total for this period and the caller's figure is of another: the
    /// caller reads the ledger again.
    Reseed,
}

impl<'a> FromJson<'a> for Reply {
    fn read(r: &mut Reader<'a>) -> json::Result<Self> {
        const NAMES: &[&str] = &["granted", "short", "reseed"];
        let reply = match r.variant("enum Reply")? {
            (name, false) if name == "reseed" => return Ok(Reply::Reseed),
            (name, true) if name == "granted" => crate::json_fields!(
                r,
                "struct variant Reply::Granted",
                Reply::Granted {
                    "call" => call,
                    "max_tokens" => max_tokens,
                    "committed_usd" => committed_usd,
                }
            ),
            (name, true) if name == "short" => crate::json_fields!(
                r,
                "struct variant Reply::Short",
                Reply::Short { "committed_usd" => committed_usd }
            ),
            (name, _) => return Err(r.unknown_name("variant", &name, NAMES)),
        };
        r.end_variant()?;
        Ok(reply)
    }
}

/// What a call that ended cost (`call`: its reservation, if it held one).
#[derive(Debug, Clone, Serialize)]
pub struct Settle {
    pub call: Option<String>,
    pub cost_usd: f64,
}

crate::json_struct!(Settle {
    "call" => call,
    "cost_usd" => cost_usd,
});

/// What an attempt of a call in flight cost that was given up on (a retry or a fallback comes
/// next): charged at once, the call's reservation still held for the next attempt.
#[derive(Debug, Clone, Serialize)]
pub struct Charge {
    pub call: String,
    pub cost_usd: f64,
}

crate::json_struct!(Charge {
    "call" => call,
    "cost_usd" => cost_usd,
});

/// A call in flight that renews its reservation; the object answers whether it still holds
/// one (`false`: settled, lapsed, or of a period that ended, and the caller stops renewing).
#[derive(Debug, Clone, Serialize)]
pub struct Renew {
    pub call: String,
}

crate::json_struct!(Renew {
    "call" => call,
});

#[derive(Debug, Clone, PartialEq, Serialize)]
struct Open {
    call: String,
    usd: f64,
    expires_at: i64,
}

crate::json_struct!(Open {
    "call" => call,
    "usd" => usd,
    "expires_at" => expires_at,
});

/// A user's spend in the current period and the calls holding part of the rest.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Spend {
    period: Period,
    period_start: i64,
    spent_usd: f64,
    open: Vec<Open>,
    /// Numbers reservations.
    next: u64,
}

crate::json_struct!(Spend {
    "period" => period,
    "period_start" => period_start,
    "spent_usd" => spent_usd,
    "open" => open,
    "next" => next,
});

/// A millionth of a cent of slack, so that float rounding does not refuse an exact fit.
const SLACK: f64 = 1e-8;

/// How many output tokens `available` dollars cover for a call of `ask`'s size (its full
/// `max_tokens` when they all fit), or `None` when not even `min_tokens`.
pub fn covered_tokens(available: f64, ask: &Ask) -> Option<u32> {
    let worst = ask.input_usd + f64::from(ask.max_tokens) * ask.usd_per_output_token;
    if available + SLACK >= worst {
        return Some(ask.max_tokens);
    }
    if ask.usd_per_output_token <= 0.0 {
        return None;
    }
    let tokens = ((available + SLACK - ask.input_usd) / ask.usd_per_output_token).floor();
    let floor = ask.min_tokens.min(ask.max_tokens);
    (tokens >= f64::from(floor)).then_some(tokens as u32)
}

impl Spend {
    /// Reserves `ask`'s worst case at `now_ms` in `spend` (made from the caller's seed when it
    /// holds no total for the current period).
    pub fn reserve(spend: &mut Option<Spend>, ask: &Ask, now_ms: i64) -> Reply {
        let (start, _) = ask.period.bounds(now_ms);
        let current = spend
            .as_ref()
            .is_some_and(|s| s.period == ask.period && s.period_start == start);
        if !current && ask.ledger.period_start != start {
            return Reply::Reseed;
        }
        // Ids go on counting across periods: a call that streams past a period's turn settles
        // its own reservation, never the new period's call of the same number.
        let next = spend.as_ref().map_or(0, |s| s.next);
        let spend = match spend {
            Some(held) if current => held,
            _ => spend.insert(Spend {
                period: ask.period,
                period_start: start,
                spent_usd: ask.ledger.spent_usd,
                open: vec![],
                next,
            }),
        };
        spend.open.retain(|o| o.expires_at > now_ms);
        let committed_usd = spend.spent_usd + spend.open.iter().map(|o| o.usd).sum::<f64>();
        let granted = covered_tokens(ask.limit_usd - committed_usd, ask)
            .filter(|_| spend.open.len() < MAX_OPEN);
        let Some(max_tokens) = granted else {
            return Reply::Short { committed_usd };
        };
        spend.next += 1;
        let call = format!("c{}", spend.next);
        spend.open.push(Open {
            call: call.clone(),
            usd: ask.input_usd + f64::from(max_tokens) * ask.usd_per_output_token,
            expires_at: now_ms + RESERVATION_MS,
        });
        Reply::Granted {
            call,
            max_tokens,
            committed_usd,
        }
    }

    /// Holds `call`'s reservation for another [`RESERVATION_MS`] from `now_ms`; `false` when
    /// there is none to hold (settled, lapsed, or dropped with the period it was of).
    pub fn renew(&mut self, call: &str, now_ms: i64) -> bool {
        let open = self
            .open
            .iter_mut()
            .find(|o| o.call == call && o.expires_at > now_ms);
        match open {
            Some(open) => {
                open.expires_at = now_ms + RESERVATION_MS;
                true
            }
            None => false,
        }
    }

    /// Charges an attempt of a call in flight that was given up on (see [`Charge`]), and
    /// answers what is spent and held now, while the call's reservation is still held in the
    /// current period: within the limit, the next attempt is covered as the first was. `None`
    /// when the reservation lapsed (the cost is charged all the same) or its period ended (the
    /// cost is left to the ledger, as [`Spend::settle`] leaves it): the call is not tried again.
    pub fn charge(spend: &mut Option<Spend>, charge: &Charge, now_ms: i64) -> Option<f64> {
        let spend = spend.as_mut()?;
        if spend.period.bounds(now_ms).0 != spend.period_start {
            return None;
        }
        spend.spent_usd += charge.cost_usd.max(0.0);
        spend.open.retain(|o| o.expires_at > now_ms);
        let held = spend.open.iter().any(|o| o.call == charge.call);
        held.then(|| spend.spent_usd + spend.open.iter().map(|o| o.usd).sum::<f64>())
    }

    /// Whether `committed_usd` (what [`Spend::charge`] answered) leaves the call's next
    /// attempt covered under `limit_usd`.
    pub fn covers(committed_usd: f64, limit_usd: f64) -> bool {
        committed_usd <= limit_usd + SLACK
    }

    /// Replaces a call's reservation by what it cost. A cost from another period than the one
    /// held is left to the ledger, which the next period is seeded from.
    pub fn settle(&mut self, settle: &Settle, now_ms: i64) {
        if let Some(call) = &settle.call {
            self.open.retain(|o| o.call != *call);
        }
        if self.period.bounds(now_ms).0 == self.period_start {
            self.spent_usd += settle.cost_usd.max(0.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_795_336_200_000; // 2026-11-22T08:30:00Z

    fn ask(limit_usd: f64, max_tokens: u32) -> Ask {
        Ask {
            limit_usd,
            period: Period::Day,
            ledger: Seed {
                period_start: Period::Day.bounds(NOW).0,
                spent_usd: 0.0,
            },
            input_usd: 0.001,
            usd_per_output_token: 0.000_01,
            max_tokens,
            min_tokens: 256,
        }
    }

    fn granted(reply: &Reply) -> Option<u32> {
        match reply {
            Reply::Granted { max_tokens, .. } => Some(*max_tokens),
            _ => None,
        }
    }

    #[test]
    fn calls_at_once_share_one_budget() {
        // Each call's worst case is $0.001 + 1,000 × $0.00001 = $0.011; $0.03 covers two whole
        // calls, then 700 tokens of a third, then nothing (less than 256 tokens are left).
        let mut spend = None;
        let replies: Vec<Reply> = (0..5)
            .map(|_| Spend::reserve(&mut spend, &ask(0.03, 1_000), NOW))
            .collect();
        let tokens: Vec<Option<u32>> = replies.iter().map(granted).collect();
        assert_eq!(tokens, [Some(1_000), Some(1_000), Some(700), None, None]);
        assert!(
            matches!(replies[3], Reply::Short { committed_usd } if (committed_usd - 0.03).abs() < 1e-9)
        );

        // The first call cost less than it held: its rest is free again.
        let Reply::Granted { call, .. } = &replies[0] else {
            panic!("granted")
        };
        let state = spend.as_mut().expect("seeded");
        state.settle(
            &Settle {
                call: Some(call.clone()),
                cost_usd: 0.002,
            },
            NOW,
        );
        assert_eq!(
            granted(&Spend::reserve(&mut spend, &ask(0.03, 1_000), NOW)),
            Some(800)
        );
    }

    #[test]
    fn an_attempt_given_up_on_is_charged_at_once_and_a_retry_only_while_covered() {
        // Issue 56: a call's reservation covers one attempt; an attempt billed and given up on
        // (an overload after the prompt was counted) is charged as it happens, so calls at
        // once see it, and the call is tried again only while the budget still covers it.
        let mut spend = None;
        let Reply::Granted { call, .. } = Spend::reserve(&mut spend, &ask(0.03, 1_000), NOW) else {
            panic!("granted")
        };
        let charge = |cost_usd| Charge {
            call: call.clone(),
            cost_usd,
        };
        let covered = |committed: Option<f64>| committed.map(|c| Spend::covers(c, 0.03));
        // $0.011 held, $0.001 charged: $0.018 left, the retry is covered.
        assert_eq!(
            covered(Spend::charge(&mut spend, &charge(0.001), NOW)),
            Some(true)
        );
        // Another call at once sees the charge: the $0.018 left covers its $0.011.
        assert_eq!(
            granted(&Spend::reserve(&mut spend, &ask(0.03, 1_000), NOW)),
            Some(1_000)
        );
        // Spent $0.001 + $0.007, held $0.022: $0.03, still covered.
        assert_eq!(
            covered(Spend::charge(&mut spend, &charge(0.007), NOW)),
            Some(true)
        );
        // One more attempt billed: spent and held pass the limit, no attempt is made past it.
        assert_eq!(
            covered(Spend::charge(&mut spend, &charge(0.001), NOW)),
            Some(false)
        );
        // A call whose reservation is gone (settled or lapsed) is not tried again.
        let later = NOW + RESERVATION_MS + 1;
        assert_eq!(Spend::charge(&mut spend, &charge(0.0), later), None);
        assert_eq!(Spend::charge(&mut None, &charge(0.0), NOW), None);
    }

    #[test]
    fn a_reservation_that_never_settles_expires() {
        let mut spend = None;
        assert_eq!(
            granted(&Spend::reserve(&mut spend, &ask(0.012, 1_000), NOW)),
            Some(1_000)
        );
        assert_eq!(
            granted(&Spend::reserve(&mut spend, &ask(0.012, 1_000), NOW)),
            None
        );
        let later = NOW + RESERVATION_MS + 1;
        assert_eq!(
            granted(&Spend::reserve(&mut spend, &ask(0.012, 1_000), later)),
            Some(1_000)
        );
    }

    #[test]
    fn a_call_that_streams_past_the_reservation_keeps_it_by_renewing() {
        // Issue 56: a call may stream for longer than a reservation holds; renewed, it is held
        // for as long as the call runs, and no other call gets its share meanwhile.
        let mut spend = None;
        let Reply::Granted { call, .. } = Spend::reserve(&mut spend, &ask(0.012, 1_000), NOW)
        else {
            panic!("granted")
        };
        let mut now = NOW;
        for _ in 0..10 {
            now += RENEW_MS;
            assert!(spend.as_mut().expect("seeded").renew(&call, now));
        }
        assert!(now > NOW + RESERVATION_MS);
        assert_eq!(
            granted(&Spend::reserve(&mut spend, &ask(0.012, 1_000), now + 1)),
            None,
            "still held"
        );
        // Settled, there is nothing to renew: the renewals stop.
        let state = spend.as_mut().expect("seeded");
        state.settle(
            &Settle {
                call: Some(call.clone()),
                cost_usd: 0.001,
            },
            now,
        );
        assert!(!state.renew(&call, now));
        // A reservation that lapsed (its runtime died) is not brought back.
        let Reply::Granted { call, .. } = Spend::reserve(&mut spend, &ask(1.0, 1_000), now) else {
            panic!("granted")
        };
        let state = spend.as_mut().expect("seeded");
        assert!(!state.renew(&call, now + RESERVATION_MS));
    }

    #[test]
    fn a_period_is_seeded_once_from_the_ledger_and_a_stale_figure_is_refused() {
        let mut spend = None;
        let mut first = ask(0.03, 1_000);
        first.ledger.spent_usd = 0.018;
        assert_eq!(
            granted(&Spend::reserve(&mut spend, &first, NOW)),
            Some(1_000)
        );
        // A later caller's older, lower figure does not replace the object's total.
        assert_eq!(
            granted(&Spend::reserve(&mut spend, &ask(0.03, 1_000), NOW)),
            None
        );

        // The next day starts from the ledger again, and a figure of the day before is sent
        // back to be read again.
        let tomorrow = NOW + 86_400_000;
        assert_eq!(Spend::reserve(&mut spend, &first, tomorrow), Reply::Reseed);
        let mut fresh = ask(0.03, 1_000);
        fresh.ledger = Seed {
            period_start: Period::Day.bounds(tomorrow).0,
            spent_usd: 0.0,
        };
        assert_eq!(
            granted(&Spend::reserve(&mut spend, &fresh, tomorrow)),
            Some(1_000)
        );
    }

    #[test]
    fn a_cost_settled_after_its_period_is_left_to_the_ledger() {
        let mut spend = None;
        let reply = Spend::reserve(&mut spend, &ask(1.0, 1_000), NOW);
        let Reply::Granted { call, .. } = reply else {
            panic!("granted")
        };
        let state = spend.as_mut().expect("seeded");
        state.settle(
            &Settle {
                call: Some(call),
                cost_usd: 0.5,
            },
            NOW + 86_400_000,
        );
        assert!(state.open.is_empty());
        assert_eq!(state.spent_usd, 0.0);
    }

    #[test]
    fn the_tokens_a_budget_covers() {
        let a = ask(0.0, 4_000);
        assert_eq!(covered_tokens(1.0, &a), Some(4_000));
        assert_eq!(covered_tokens(0.001 + 0.003, &a), Some(300));
        assert_eq!(covered_tokens(0.001 + 0.002_55, &a), None);
        // A call asking for fewer tokens than the floor gets them all or nothing.
        let small = ask(0.0, 100);
        assert_eq!(covered_tokens(0.002, &small), Some(100));
        assert_eq!(covered_tokens(0.001_5, &small), None);
        // A free model is always covered.
        let free = Ask {
            input_usd: 0.0,
            usd_per_output_token: 0.0,
            ..a
        };
        assert_eq!(covered_tokens(0.0, &free), Some(4_000));
    }
}
