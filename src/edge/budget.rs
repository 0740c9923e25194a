//! Budgets: each user has one in US dollars per UTC day or month (`budgets` rows set by an
//! admin, else `USER_BUDGET_USD` / `USER_BUDGET_PERIOD` for everyone), spent as the usage ledger
//! records it. This is the budget as read and its period arithmetic; the turn's resolver
//! (`conversation/turn/resolver.rs`) spends it call by call through the user's spend object
//! (`spend/`), and the Worker refuses new messages with 402 once it is spent.

use serde::Serialize;

use crate::agent::calendar::{civil_from_days, days_from_civil, format_utc, DAY_MS};

/// A share of the budget past which the user is warned, once per period.
pub const WARN_AT: f64 = 0.8;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Period {
    Day,
    Month,
}

crate::json_enum!(Period { "day" => Day, "month" => Month });

impl Period {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "day" => Some(Period::Day),
            "month" => Some(Period::Month),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Month => "month",
        }
    }

    /// The UTC start of the period holding `now_ms`, and the start of the next one.
    pub fn bounds(self, now_ms: i64) -> (i64, i64) {
        let day = now_ms.div_euclid(DAY_MS);
        match self {
            Period::Day => (day * DAY_MS, (day + 1) * DAY_MS),
            Period::Month => {
                let (y, m, _) = civil_from_days(day);
                let start = days_from_civil(y, m, 1);
                let next = if m == 12 {
                    days_from_civil(y + 1, 1, 1)
                } else {
                    days_from_civil(y, m + 1, 1)
                };
                (start * DAY_MS, next * DAY_MS)
            }
        }
    }
}

/// A user's budget for the current period and what they spent of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    pub limit_usd: f64,
    pub period: Period,
    pub spent_usd: f64,
    /// When the period resets (ms since the epoch).
    pub resets_at: i64,
    /// The user was already warned this period.
    pub warned: bool,
}

impl Budget {
    pub fn over(&self) -> bool {
        self.spent_usd >= self.limit_usd
    }

    /// The ledger's total, for a spend object that holds none for this period.
    pub fn seed(&self) -> Seed {
        Seed {
            period_start: self.period.bounds(self.resets_at - 1).0,
            spent_usd: self.spent_usd,
        }
    }

    /// Why a call may not be made: the budget is spent, or what is left (`spent_usd` counting
    /// the calls in flight) is too little for an answer.
    pub fn short_message(&self) -> String {
        if self.over() {
            return self.exhausted_message();
        }
        format!(
            "your budget of {} per {} has {} left, too little for an answer; it resets at {}",
            usd(self.limit_usd),
            self.period.as_str(),
            usd(self.limit_usd - self.spent_usd),
            format_utc(self.resets_at)
        )
    }

    /// Why nothing more may be spent, with when that changes.
    pub fn exhausted_message(&self) -> String {
        format!(
            "your budget of {} per {} is spent ({}); it resets at {}",
            usd(self.limit_usd),
            self.period.as_str(),
            usd(self.spent_usd),
            format_utc(self.resets_at)
        )
    }
}

/// `$1.25`, or four decimals below a cent (`$0.0003`).
pub fn usd(amount: f64) -> String {
    // Whole hundredths (or ten-thousandths) in integers: `{:.2}` on a float would ship core's
    // exact float formatting (14 KB of wasm) for this one line.
    let places: usize = if amount != 0.0 && amount.abs() < 0.01 {
        4
    } else {
        2
    };
    let scale: u64 = if places == 4 { 10_000 } else { 100 };
    let units = (amount.abs() * scale as f64).round() as u64;
    let sign = if amount < 0.0 && units != 0 { "-" } else { "" };
    format!("${sign}{}.{:0places$}", units / scale, units % scale)
}

/// A period's ledger total, as read at some time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Seed {
    /// The start of the period the total is of (ms since the epoch).
    pub period_start: i64,
    pub spent_usd: f64,
}

crate::json_struct!(Seed {
    "period_start" => period_start,
    "spent_usd" => spent_usd,
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_are_utc_days_and_calendar_months() {
        // 2026-11-22T08:30:00Z
        let now = 1_795_336_200_000;
        let (start, next) = Period::Day.bounds(now);
        assert_eq!(format_utc(start), "2026-11-22T00:00:00Z");
        assert_eq!(format_utc(next), "2026-11-23T00:00:00Z");
        let (start, next) = Period::Month.bounds(now);
        assert_eq!(format_utc(start), "2026-11-01T00:00:00Z");
        assert_eq!(format_utc(next), "2026-12-01T00:00:00Z");
        // December rolls into the next year; February of a leap year has 29 days.
        let december = 1_796_601_600_000 + 86_400_000 * 10; // 2026-12-11
        assert_eq!(
            format_utc(Period::Month.bounds(december).1),
            "2027-01-01T00:00:00Z"
        );
        let leap = 1_709_164_800_000; // 2024-02-29T00:00:00Z
        assert_eq!(format_utc(leap), "2024-02-29T00:00:00Z");
        assert_eq!(
            format_utc(Period::Month.bounds(leap).1),
            "2024-03-01T00:00:00Z"
        );
    }

    #[test]
    fn money_is_written_as_people_read_it() {
        let budget = |spent_usd| Budget {
            limit_usd: 1.0,
            period: Period::Day,
            spent_usd,
            resets_at: 0,
            warned: false,
        };
        assert!(budget(1.2)
            .short_message()
            .contains("$1.00 per day is spent ($1.20); it resets at 1970-01-01T00:00:00Z"));
        assert!(budget(0.999)
            .short_message()
            .contains("$1.00 per day has $0.0010 left, too little for an answer"));
        assert_eq!(usd(0.0003), "$0.0003");
        assert_eq!(usd(0.0), "$0.00");
        assert_eq!(usd(12.345_6), "$12.35");
        assert_eq!(usd(0.009_99), "$0.0100");
        assert_eq!(usd(-1.5), "$-1.50");
    }
}
