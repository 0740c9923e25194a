//! UTC calendar arithmetic: RFC 3339 times read and written, and the calendar fields of an
//! instant (what a cron expression matches, where a budget period starts). Instants are
//! milliseconds since the Unix epoch, as everywhere else in the runtime.
//!
//! The day conversions are Howard Hinnant's `days_from_civil` / `civil_from_days`: exact for the
//! proleptic Gregorian calendar, a few integer operations each, no tables and no time zone
//! database (everything here is UTC), which is why no date crate ships in the Worker.

pub const MS_PER_SECOND: i64 = 1_000;
pub const SECONDS_PER_DAY: i64 = 86_400;
/// A UTC day in milliseconds: every day is this long, as Unix time counts (no leap seconds).
pub const DAY_MS: i64 = SECONDS_PER_DAY * MS_PER_SECOND;

/// Days since 1970-01-01 of the date `year-month-day`.
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let shifted = if month > 2 { month - 3 } else { month + 9 };
    let day_of_year = (153 * shifted + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date (year, month 1-12, day 1-31) `days` after 1970-01-01.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * shifted + 2) / 5 + 1) as u32;
    let month = if shifted < 10 {
        shifted + 3
    } else {
        shifted - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Days in `month` of `year`.
pub fn days_in_month(year: i64, month: u32) -> u32 {
    let next = if month == 12 {
        days_from_civil(year + 1, 1, 1)
    } else {
        days_from_civil(year, month + 1, 1)
    };
    (next - days_from_civil(year, month, 1)) as u32
}

/// The calendar fields of an instant, UTC, to the second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fields {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    /// 0 is Sunday.
    pub weekday: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

/// The fields of second `seconds` since the epoch.
pub fn fields(seconds: i64) -> Fields {
    let days = seconds.div_euclid(SECONDS_PER_DAY);
    let of_day = seconds.rem_euclid(SECONDS_PER_DAY);
    let (year, month, day) = civil_from_days(days);
    Fields {
        year,
        month,
        day,
        // 1970-01-01 was a Thursday.
        weekday: (days + 4).rem_euclid(7) as u32,
        hour: (of_day / 3_600) as u32,
        minute: (of_day / 60 % 60) as u32,
        second: (of_day % 60) as u32,
    }
}

/// `ms` as RFC 3339 UTC to the second, e.g. `2026-11-26T09:30:00Z`.
pub fn format_utc(ms: i64) -> String {
    let f = fields(ms.div_euclid(MS_PER_SECOND));
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        f.year, f.month, f.day, f.hour, f.minute, f.second
    )
}

/// `ms` as RFC 3339 UTC to the millisecond, e.g. `2026-11-26T09:30:00.250Z`.
pub fn iso8601(ms: i64) -> String {
    let f = fields(ms.div_euclid(MS_PER_SECOND));
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        f.year,
        f.month,
        f.day,
        f.hour,
        f.minute,
        f.second,
        ms.rem_euclid(MS_PER_SECOND)
    )
}

/// An RFC 3339 date-time (`2026-11-26T09:30:00Z`, `2026-11-26T10:30:00.250+01:00`) as
/// milliseconds since the epoch. A time without its offset is refused rather than guessed.
pub fn parse_utc(text: &str) -> Result<i64, String> {
    let wrong = || {
        format!(
            "`{text}` is not an RFC 3339 time such as `2026-11-26T09:30:00Z` (a date, `T`, the \
             time and `Z` or an offset like `+01:00`)"
        )
    };
    let b = text.trim().as_bytes();
    let digits = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = b.get(range)?;
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    let at = |i: usize, c: &[u8]| b.get(i).is_some_and(|x| c.contains(x));
    if !(at(4, b"-") && at(7, b"-") && at(10, b"Tt ") && at(13, b":") && at(16, b":")) {
        return Err(wrong());
    }
    let (year, month, day) = (
        digits(0..4).ok_or_else(wrong)?,
        digits(5..7).ok_or_else(wrong)?,
        digits(8..10).ok_or_else(wrong)?,
    );
    let (hour, minute, second) = (
        digits(11..13).ok_or_else(wrong)?,
        digits(14..16).ok_or_else(wrong)?,
        digits(17..19).ok_or_else(wrong)?,
    );
    let mut i = 19;
    let mut millis = 0;
    if at(i, b".") {
        let start = i + 1;
        i = start;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return Err(wrong());
        }
        // Milliseconds: the first three digits, padded.
        let kept = &b[start..i.min(start + 3)];
        let mut value = 0;
        for (n, d) in kept.iter().enumerate() {
            value += i64::from(d - b'0') * 10_i64.pow(2 - n as u32);
        }
        millis = value;
    }
    let offset_minutes = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(sign @ (b'+' | b'-')) if i + 6 == b.len() && at(i + 3, b":") => {
            let hours = digits(i + 1..i + 3).ok_or_else(wrong)?;
            let minutes = digits(i + 4..i + 6).ok_or_else(wrong)?;
            if hours > 23 || minutes > 59 {
                return Err(wrong());
            }
            let offset = hours * 60 + minutes;
            if *sign == b'-' {
                -offset
            } else {
                offset
            }
        }
        _ => return Err(wrong()),
    };
    let valid = (1..=12).contains(&month)
        && day >= 1
        && day <= i64::from(days_in_month(year, month as u32))
        && hour <= 23
        && minute <= 59
        // A leap second is read as the second before it.
        && second <= 60;
    if !valid {
        return Err(format!("`{text}` names no such date or time"));
    }
    let days = days_from_civil(year, month as u32, day as u32);
    let seconds =
        days * SECONDS_PER_DAY + hour * 3_600 + minute * 60 + second.min(59) - offset_minutes * 60;
    Ok(seconds * MS_PER_SECOND + millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_convert_both_ways_across_leap_years_and_centuries() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        for days in (-800_000..800_000).step_by(997) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
        assert_eq!(days_in_month(2024, 2), 29);
        assert_eq!(days_in_month(2100, 2), 28);
        assert_eq!(days_in_month(2000, 2), 29);
        assert_eq!(days_in_month(2026, 12), 31);
    }

    #[test]
    fn an_instant_has_its_weekday_and_time_of_day() {
        // 2026-11-26 was a Thursday.
        let at = parse_utc("2026-11-26T09:30:15Z").unwrap();
        let f = fields(at / 1000);
        assert_eq!(
            f,
            Fields {
                year: 2026,
                month: 11,
                day: 26,
                weekday: 4,
                hour: 9,
                minute: 30,
                second: 15
            }
        );
        assert_eq!(fields(-1).second, 59);
        assert_eq!(fields(-1).weekday, 3);
    }

    #[test]
    fn iso8601_matches_known_instants() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso8601(1_795_238_698_123), "2026-11-21T05:24:58.123Z");
        assert_eq!(iso8601(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn rfc_3339_times_read_with_offsets_and_fractions_and_write_back_as_utc() {
        let z = parse_utc("2026-11-26T09:30:00Z").unwrap();
        assert_eq!(z, 1_795_685_400_000);
        assert_eq!(parse_utc("2026-11-26T10:30:00+01:00"), Ok(z));
        assert_eq!(parse_utc("2026-11-26t04:00:00-05:30"), Ok(z));
        assert_eq!(parse_utc("2026-11-26T09:30:00.25Z"), Ok(z + 250));
        assert_eq!(parse_utc("2026-11-26T09:30:00.123456Z"), Ok(z + 123));
        assert_eq!(format_utc(z + 999), "2026-11-26T09:30:00Z");
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        for bad in [
            "2026-11-26T09:30:00",
            "2026-11-26",
            "tomorrow",
            "2026-02-30T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-11-26T24:00:00Z",
            "2026-11-26T09:30:00.Z",
            "2026-11-26T09:30:00+1:00",
            "2026-11-26T09:30:00Zjunk",
            "２026-11-26T09:30:00Z",
            "",
        ] {
            assert!(parse_utc(bad).is_err(), "{bad}");
        }
    }
}
