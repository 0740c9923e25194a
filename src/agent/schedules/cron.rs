//! Cron expressions, UTC: the standard five fields (minute, hour, day of month, month, day of
//! week), or six with a leading seconds field, and the `@hourly`-style shorthands.
//!
//! Each field is a set of allowed values (a bit mask); the next occurrence is found by moving
//! to the start of the next month, day, hour, minute or second whenever a field does not match,
//! so it takes a few hundred steps at most per year searched. Day of month and day of week
//! combine as in Vixie cron: when both are restricted, a day matching either runs.

use crate::agent::calendar::{days_from_civil, fields, MS_PER_SECOND, SECONDS_PER_DAY};

/// How far ahead an occurrence is searched for: an expression with none within this many
/// years (`0 0 30 2 *`) never runs.
const SEARCH_YEARS: i64 = 8;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    seconds: u64,
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    weekdays: u64,
    /// Day of month and day of week were `*`: only the other one restricts the day.
    any_day: bool,
    any_weekday: bool,
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

impl Cron {
    /// Reads an expression, or says what is wrong with it.
    pub fn parse(expression: &str) -> Result<Cron, String> {
        let expanded = match expression.trim().to_ascii_lowercase().as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *".to_string(),
            "@monthly" => "0 0 1 * *".to_string(),
            "@weekly" => "0 0 * * 0".to_string(),
            "@daily" | "@midnight" => "0 0 * * *".to_string(),
            "@hourly" => "0 * * * *".to_string(),
            other => other.to_string(),
        };
        let parts: Vec<&str> = expanded.split_whitespace().collect();
        let (seconds, rest) = match parts.len() {
            5 => ("0", &parts[..]),
            6 => (parts[0], &parts[1..]),
            n => {
                return Err(format!(
                    "`{expression}` has {n} fields; a cron expression has 5 (minute hour \
                     day-of-month month day-of-week) or 6 (seconds first)"
                ))
            }
        };
        let field = |text: &str, name: &str, min: u32, max: u32, names: &[&str]| {
            parse_field(text, min, max, names)
                .map_err(|why| format!("`{expression}`: the {name} field `{text}` {why}"))
        };
        let mut weekdays = field(rest[4], "day-of-week", 0, 7, &WEEKDAYS)?;
        // 7 is Sunday too.
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays & !(1 << 7)) | 1;
        }
        Ok(Cron {
            seconds: field(seconds, "seconds", 0, 59, &[])?,
            minutes: field(rest[0], "minute", 0, 59, &[])?,
            hours: field(rest[1], "hour", 0, 23, &[])?,
            days: field(rest[2], "day-of-month", 1, 31, &[])?,
            months: field(rest[3], "month", 1, 12, &MONTHS)?,
            weekdays,
            any_day: is_any(rest[2]),
            any_weekday: is_any(rest[4]),
        })
    }

    /// The first occurrence strictly after `after_ms`, or `None` if none comes within
    /// `SEARCH_YEARS` years.
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        let mut t = after_ms.div_euclid(MS_PER_SECOND) + 1;
        let limit = fields(t).year + SEARCH_YEARS;
        loop {
            let f = fields(t);
            if f.year > limit {
                return None;
            }
            let day_start = t - t.rem_euclid(SECONDS_PER_DAY);
            if !has(self.months, f.month) {
                let (year, month) = if f.month == 12 {
                    (f.year + 1, 1)
                } else {
                    (f.year, f.month + 1)
                };
                t = days_from_civil(year, month, 1) * SECONDS_PER_DAY;
            } else if !self.day_matches(f.day, f.weekday) {
                t = day_start + SECONDS_PER_DAY;
            } else if !has(self.hours, f.hour) {
                t = day_start + i64::from(f.hour + 1) * 3_600;
            } else if !has(self.minutes, f.minute) {
                t = day_start + i64::from(f.hour) * 3_600 + i64::from(f.minute + 1) * 60;
            } else if !has(self.seconds, f.second) {
                t += 1;
            } else {
                return Some(t * MS_PER_SECOND);
            }
        }
    }

    /// A lower bound on the time between two occurrences, in seconds: the smallest step of the
    /// finest field with more than one value, counted around its wrap (so `0,59 * * * *` counts
    /// one minute). An expression at most daily counts a day.
    pub fn shortest_gap_s(&self) -> i64 {
        for (mask, span, unit) in [
            (self.seconds, 60, 1),
            (self.minutes, 60, 60),
            (self.hours, 24, 3_600),
        ] {
            if mask.count_ones() > 1 {
                return circular_gap(mask, span) * unit;
            }
        }
        SECONDS_PER_DAY
    }

    fn day_matches(&self, day: u32, weekday: u32) -> bool {
        let by_day = has(self.days, day);
        let by_weekday = has(self.weekdays, weekday);
        match (self.any_day, self.any_weekday) {
            (true, true) => true,
            (true, false) => by_weekday,
            (false, true) => by_day,
            (false, false) => by_day || by_weekday,
        }
    }
}

fn has(mask: u64, value: u32) -> bool {
    mask & (1 << value) != 0
}

fn is_any(field: &str) -> bool {
    field == "*" || field == "?"
}

/// The smallest distance between neighbouring set bits of `mask`, within `0..span`, wrapping.
fn circular_gap(mask: u64, span: i64) -> i64 {
    let set: Vec<i64> = (0..span).filter(|v| mask & (1 << v) != 0).collect();
    let wrap = set
        .first()
        .zip(set.last())
        .map_or(span, |(first, last)| first + span - last);
    set.windows(2).map(|w| w[1] - w[0]).fold(wrap, i64::min)
}

/// One field: a comma-separated list of `*`, `v`, `a-b`, each optionally `/step`; values are
/// numbers or, where `names` are given, their three-letter names.
fn parse_field(text: &str, min: u32, max: u32, names: &[&str]) -> Result<u64, String> {
    let value = |v: &str| -> Result<u32, String> {
        let n = match names.iter().position(|name| *name == v) {
            // Month names count from 1, day names from 0 (Sunday).
            Some(i) => i as u32 + min.min(1),
            None => v
                .parse::<u32>()
                .map_err(|_| format!("has `{v}`, which is not a number from {min} to {max}"))?,
        };
        if n < min || n > max {
            return Err(format!("has {n}, outside {min}-{max}"));
        }
        Ok(n)
    };
    let mut mask = 0u64;
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => {
                let step: u32 = step
                    .parse()
                    .ok()
                    .filter(|s| *s >= 1)
                    .ok_or_else(|| format!("has the step `{step}`, not a number from 1"))?;
                (range, step)
            }
            None => (item, 1),
        };
        let (low, high) = if is_any(range) {
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a)?, value(b)?)
        } else {
            let v = value(range)?;
            // `5/15` means from 5 to the end, every 15.
            (v, if item.contains('/') { max } else { v })
        };
        if low > high {
            return Err(format!("has the range {low}-{high}, which runs backwards"));
        }
        for v in (low..=high).step_by(step as usize) {
            mask |= 1 << v;
        }
    }
    Ok(mask)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::calendar::{format_utc, parse_utc};

    fn next(expression: &str, after: &str) -> String {
        let cron = Cron::parse(expression).unwrap();
        format_utc(cron.next_after(parse_utc(after).unwrap()).unwrap())
    }

    #[test]
    fn the_next_occurrence_is_strictly_after_and_on_the_fields() {
        assert_eq!(
            next("*/15 * * * *", "2026-11-26T09:30:00Z"),
            "2026-11-26T09:45:00Z"
        );
        assert_eq!(
            next("*/15 * * * *", "2026-11-26T09:29:59.900Z"),
            "2026-11-26T09:30:00Z"
        );
        assert_eq!(
            next("0 9 * * mon-fri", "2026-11-27T10:00:00Z"),
            "2026-11-30T09:00:00Z"
        );
        assert_eq!(
            next("30 23 31 dec *", "2026-01-01T00:00:00Z"),
            "2026-12-31T23:30:00Z"
        );
        assert_eq!(
            next("0 0 29 2 *", "2026-03-01T00:00:00Z"),
            "2028-02-29T00:00:00Z"
        );
        assert_eq!(
            next("@hourly", "2026-11-26T23:59:59Z"),
            "2026-11-27T00:00:00Z"
        );
        assert_eq!(
            next("*/5 * * * * *", "2026-11-26T09:30:02Z"),
            "2026-11-26T09:30:05Z"
        );
        // 7 is Sunday as 0 is; 2026-11-29 is a Sunday.
        assert_eq!(
            next("0 12 * * 7", "2026-11-26T00:00:00Z"),
            "2026-11-29T12:00:00Z"
        );
        // Day of month or day of week, when both are given: the 1st, or a Sunday.
        assert_eq!(
            next("0 0 1 * sun", "2026-11-26T00:00:00Z"),
            "2026-11-29T00:00:00Z"
        );
        assert_eq!(
            next("0 0 1 * sun", "2026-11-29T00:00:00Z"),
            "2026-12-01T00:00:00Z"
        );
        assert_eq!(
            next("10-20/5 4 * * *", "2026-11-26T04:15:00Z"),
            "2026-11-26T04:20:00Z"
        );
        assert_eq!(
            next("7/20 * * * *", "2026-11-26T04:28:00Z"),
            "2026-11-26T04:47:00Z"
        );
    }

    #[test]
    fn an_expression_that_never_comes_has_no_next_occurrence() {
        let never = Cron::parse("0 0 30 2 *").unwrap();
        assert_eq!(never.next_after(0), None);
    }

    #[test]
    fn bad_expressions_say_which_field_is_wrong() {
        for (bad, says) in [
            ("* * * *", "has 4 fields"),
            ("61 * * * *", "minute field `61`"),
            ("* 24 * * *", "hour field"),
            ("* * 0 * *", "day-of-month field"),
            ("* * * foo *", "month field"),
            ("* * * * 8", "day-of-week field"),
            ("*/0 * * * *", "step `0`"),
            ("5-1 * * * *", "runs backwards"),
            ("a b c d e f g", "has 7 fields"),
        ] {
            let error = Cron::parse(bad).unwrap_err();
            assert!(error.contains(says), "{bad}: {error}");
        }
    }

    #[test]
    fn the_shortest_gap_is_the_finest_repeating_fields_step() {
        let gap = |e: &str| Cron::parse(e).unwrap().shortest_gap_s();
        assert_eq!(gap("* * * * *"), 60);
        assert_eq!(gap("*/5 * * * *"), 300);
        assert_eq!(gap("0,59 * * * *"), 60);
        assert_eq!(gap("0 */2 * * *"), 7_200);
        assert_eq!(gap("@daily"), 86_400);
        assert_eq!(gap("*/3 * * * * *"), 3);
        assert_eq!(gap("0 0 * * 1,2"), 86_400);
    }
}
