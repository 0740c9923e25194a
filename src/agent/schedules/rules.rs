//! The rules of schedules, plain functions of a schedule and the time: how a request becomes a
//! schedule within its conversation's limits, when its next run comes, how the end of a run
//! moves it on (pausing or ending it), and how long its conversation must be kept for it.

use super::cron::Cron;
use super::{Finished, Limits, RunOutcome, Schedule, ScheduleError, ScheduleRequest, Status};
use crate::agent::calendar::{format_utc, parse_utc, DAY_MS, MS_PER_SECOND, SECONDS_PER_DAY};

/// Failed runs in a row after which a recurring schedule pauses itself.
pub const MAX_FAILURES: u32 = 3;

/// The longest instruction, in characters.
pub const MAX_INSTRUCTION_CHARS: usize = 4_000;

/// How far ahead a one-time schedule may be set, in days.
pub const MAX_AHEAD_DAYS: i64 = 366;

/// Runs after which a recurring schedule ends when its request gives no `max_runs`: a forgotten
/// `* * * * *` stops within two hours, a daily one after about three months.
pub const DEFAULT_MAX_RUNS: u32 = 100;

/// The most runs a recurring schedule may be given (`max_runs`).
pub const MAX_RUNS: u32 = 10_000;

/// Why a one-time request may not give an end.
const ENDS_ONLY_RECURRING: &str =
    "`max_runs` and `until` end a recurring schedule (`cron`); a one-time schedule runs once";

/// Checks a request and makes the schedule it asks for. `kept`: the schedules the conversation
/// keeps that still count (active or paused); `made`: when it made schedules lately (any kept
/// record; those of the last 24 hours count against [`Limits::per_day`]).
pub fn new_schedule(
    request: ScheduleRequest,
    id: String,
    now: i64,
    limits: &Limits,
    kept: usize,
    made: &[i64],
) -> Result<Schedule, ScheduleError> {
    let invalid = |why: String| Err(ScheduleError::Invalid(why));
    // Blank as JSON Schema's `\S` sees it (a byte-order mark is a space there), and counted
    // before trimming, as `maxLength` counts: the API's document states both.
    let chars = request.instruction.chars().count();
    let instruction = request
        .instruction
        .trim_matches(|c: char| c.is_whitespace() || c == '\u{feff}')
        .to_string();
    if instruction.is_empty() {
        return invalid("`instruction` must say what the scheduled turn is to do".into());
    }
    if chars > MAX_INSTRUCTION_CHARS {
        return invalid(format!(
            "`instruction` is {chars} characters; the limit is {MAX_INSTRUCTION_CHARS}"
        ));
    }
    let latest = now + MAX_AHEAD_DAYS * DAY_MS;
    // A one-time schedule is held to the interval a recurring one is: one that schedules
    // itself again when it runs must not loop faster than a cron expression may.
    let min_ms = i64::from(limits.min_interval_s) * MS_PER_SECOND;
    let too_soon = |what: String| {
        invalid(format!(
            "{what}; a one-time schedule must be at least {} s ahead \
             (SCHEDULE_MIN_INTERVAL_SECONDS)",
            limits.min_interval_s
        ))
    };
    let (at, cron, next) = match (request.at, request.delay_seconds, request.cron) {
        (Some(at), None, None) => {
            let when = parse_utc(&at).map_err(ScheduleError::Invalid)?;
            if when <= now {
                return invalid(format!(
                    "`at` ({at}) has passed; it is {} now",
                    format_utc(now)
                ));
            }
            if when - now < min_ms {
                let ahead = (when - now) as f64 / MS_PER_SECOND as f64;
                return too_soon(format!("`at` ({at}) is {ahead:.1} s from now"));
            }
            (Some(when), None, when)
        }
        (None, Some(delay), None) => {
            if !(delay.is_finite() && delay >= f64::from(limits.min_interval_s)) {
                return too_soon(format!("`delay_seconds` is {delay}"));
            }
            let when = now.saturating_add((delay * 1_000.0).min(i64::MAX as f64 / 2.0) as i64);
            (Some(when), None, when)
        }
        (None, None, Some(expression)) => {
            let parsed = Cron::parse(&expression).map_err(ScheduleError::Invalid)?;
            let gap = parsed.shortest_gap_s();
            if gap < i64::from(limits.min_interval_s) {
                return invalid(format!(
                    "`{expression}` can run every {gap} s; schedules may recur at most every {} s \
                     (SCHEDULE_MIN_INTERVAL_SECONDS)",
                    limits.min_interval_s
                ));
            }
            let Some(next) = parsed.next_after(now) else {
                return invalid(format!("`{expression}` never comes"));
            };
            (None, Some(expression.trim().to_string()), next)
        }
        _ => {
            return invalid(
                "give exactly one of `at` (an RFC 3339 time), `delay_seconds` or `cron`".into(),
            )
        }
    };
    if next > latest {
        return invalid(format!(
            "the first run ({}) is more than {MAX_AHEAD_DAYS} days away",
            format_utc(next)
        ));
    }
    let (max_runs, until) = match (&cron, request.max_runs, request.until) {
        (None, None, None) => (None, None),
        (None, _, _) => return invalid(ENDS_ONLY_RECURRING.into()),
        (Some(_), max_runs, until) => recurring_end(max_runs, until, next, latest)?,
    };
    if kept >= limits.per_conversation as usize {
        return Err(ScheduleError::TooMany {
            max: limits.per_conversation,
        });
    }
    let today = made_within_day(made, now);
    if today.len() >= limits.per_day as usize {
        // The place the oldest of the day holds frees once it is a day old.
        let oldest = today.iter().copied().min().unwrap_or(now);
        let wait_ms = oldest + DAY_MS - now;
        return Err(ScheduleError::TooManyToday {
            max: limits.per_day,
            retry_after_s: (wait_ms + MS_PER_SECOND - 1)
                .div_euclid(MS_PER_SECOND)
                .clamp(1, SECONDS_PER_DAY) as u32,
        });
    }
    Ok(Schedule {
        id,
        instruction,
        at,
        cron,
        max_runs,
        until,
        status: Status::Active,
        running: false,
        next_run_at: Some(next),
        last_run_at: None,
        last_outcome: None,
        last_error: None,
        runs: 0,
        failures: 0,
        created_at: now,
    })
}

/// A recurring schedule's end from its request: `max_runs` (default [`DEFAULT_MAX_RUNS`], at
/// most [`MAX_RUNS`]) and `until`, which must fall between its first run (`next`) and `latest`.
fn recurring_end(
    max_runs: Option<u32>,
    until: Option<String>,
    next: i64,
    latest: i64,
) -> Result<(Option<u32>, Option<i64>), ScheduleError> {
    let invalid = |why: String| Err(ScheduleError::Invalid(why));
    let max_runs = max_runs.unwrap_or(DEFAULT_MAX_RUNS);
    if !(1..=MAX_RUNS).contains(&max_runs) {
        return invalid(format!(
            "`max_runs` is {max_runs}; a recurring schedule may run from 1 to {MAX_RUNS} times"
        ));
    }
    // Without an end date it ends within the farthest a schedule may be set: a yearly cron with
    // thousands of runs would otherwise keep its conversation from retention for ever.
    let Some(text) = until else {
        return Ok((Some(max_runs), Some(latest)));
    };
    let end = parse_utc(&text).map_err(|why| ScheduleError::Invalid(format!("`until`: {why}")))?;
    if end < next {
        return invalid(format!(
            "`until` ({text}) comes before the first run ({})",
            format_utc(next)
        ));
    }
    if end > latest {
        return invalid(format!(
            "`until` ({text}) is more than {MAX_AHEAD_DAYS} days away"
        ));
    }
    Ok((Some(max_runs), Some(end)))
}

/// Of the times schedules were made (`made`), those within the 24 hours before `now`: what
/// [`Limits::per_day`] counts, and all a conversation need keep of them.
pub fn made_within_day(made: &[i64], now: i64) -> Vec<i64> {
    made.iter().copied().filter(|t| *t > now - DAY_MS).collect()
}

/// What a conversation's schedules ask of retention (`RETENTION_DAYS`): `None` when none will
/// run again, so it may go; else keep it at least until the earliest run to come (`now` when
/// the only one is under way), after which it is asked again. A paused schedule runs no more
/// and keeps nothing.
pub fn retain_until(schedules: &[Schedule], now: i64) -> Option<i64> {
    schedules
        .iter()
        .filter(|s| s.status == Status::Active)
        .filter_map(|s| s.next_run_at.or(s.running.then_some(now)))
        .min()
}

impl Schedule {
    /// Counts toward the conversation's limit (a one-time schedule that ran, or a recurring one
    /// that ended, does not).
    pub fn counts(&self) -> bool {
        self.status != Status::Done
    }

    /// Its run is due at `now`.
    pub fn due(&self, now: i64) -> bool {
        self.status == Status::Active && !self.running && self.next_run_at.is_some_and(|t| t <= now)
    }

    /// Its turn starts at `now`. The next run is the first occurrence after `now`, not after
    /// the time it was due: occurrences missed while nothing ran (an eviction, a deploy, a long
    /// turn) run once, not once each. A recurring schedule whose end comes with this run
    /// (`max_runs`, `until`) gets no next run.
    pub fn start_run(&mut self, now: i64) {
        self.running = true;
        self.last_run_at = Some(now);
        self.runs = self.runs.saturating_add(1);
        let next = self
            .cron
            .as_deref()
            .and_then(|c| Cron::parse(c).ok())
            .and_then(|c| c.next_after(now))
            .filter(|next| !self.ends_before(*next));
        self.next_run_at = next;
    }

    /// The runs a recurring schedule makes in all.
    fn run_limit(&self) -> u32 {
        self.max_runs.unwrap_or(DEFAULT_MAX_RUNS)
    }

    /// A run at `next` would be past the schedule's end: it has run its `max_runs`, or `next`
    /// is after `until`.
    fn ends_before(&self, next: i64) -> bool {
        self.runs >= self.run_limit() || self.until.is_some_and(|until| next > until)
    }

    /// Records how its turn ended.
    pub fn finish_run(&mut self, outcome: &RunOutcome) -> Finished {
        self.running = false;
        let (name, error) = match outcome {
            RunOutcome::Completed => ("completed", None),
            RunOutcome::Failed(why) => ("failed", Some(why.clone())),
            RunOutcome::Cancelled => ("cancelled", None),
            RunOutcome::LimitReached(which) => ("limit_reached", Some(which.clone())),
        };
        self.last_outcome = Some(name.to_string());
        self.last_error = error;
        if matches!(outcome, RunOutcome::Failed(_)) {
            self.failures = self.failures.saturating_add(1);
        } else {
            self.failures = 0;
        }
        if self.cron.is_none() {
            self.status = Status::Done;
            self.next_run_at = None;
            Finished::Recorded
        } else if self.next_run_at.is_none() {
            // `start_run` found no run to come: its end, which outranks a pause.
            self.status = Status::Done;
            Finished::Ended
        } else if self.failures >= MAX_FAILURES {
            self.status = Status::Paused;
            self.next_run_at = None;
            Finished::Paused
        } else {
            Finished::Recorded
        }
    }

    /// What the history says when the schedule paused itself.
    pub fn paused_note(&self) -> String {
        format!(
            "Schedule `{}` ({}) paused after {} failed runs in a row; the last: {}. Cancel it \
             and schedule it again to resume.",
            self.id,
            self.describe_when(),
            self.failures,
            self.last_error.as_deref().unwrap_or("no reason given")
        )
    }

    /// What the history says when a recurring schedule reached its end.
    pub fn ended_note(&self) -> String {
        let why = if self.runs >= self.run_limit() {
            format!("`max_runs` is {}", self.run_limit())
        } else if let Some(until) = self.until {
            format!(
                "its next occurrence is after its end, `until` {}",
                format_utc(until)
            )
        } else {
            "its expression has no occurrence to come".into()
        };
        format!(
            "Schedule `{}` ({}) ended after {} runs: {why}. Schedule it again to go on.",
            self.id,
            self.describe_when(),
            self.runs
        )
    }

    pub(super) fn describe_when(&self) -> String {
        match (&self.cron, self.at) {
            (Some(cron), _) => format!("cron `{cron}`, UTC"),
            (None, Some(at)) => format!("at {}", format_utc(at)),
            (None, None) => "no time".into(),
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The limits and the time the schedule tests run at (the tools' tests too).
    pub(in crate::agent::schedules) const LIMITS: Limits = Limits {
        per_conversation: 2,
        min_interval_s: 60,
        per_day: 50,
        approval: false,
    };
    pub(in crate::agent::schedules) const NOW: i64 = 1_795_685_400_000; // 2026-11-26T09:30:00Z
    const HOUR: i64 = 3_600_000;

    fn request(at: Option<&str>, delay: Option<f64>, cron: Option<&str>) -> ScheduleRequest {
        ScheduleRequest {
            instruction: "check the build".into(),
            at: at.map(str::to_string),
            delay_seconds: delay,
            cron: cron.map(str::to_string),
            ..ScheduleRequest::default()
        }
    }

    fn make(r: ScheduleRequest) -> Result<Schedule, ScheduleError> {
        new_schedule(r, "s1".into(), NOW, &LIMITS, 0, &[])
    }

    /// `r` is refused as invalid, with a reason that says `says`.
    fn refused(r: ScheduleRequest, says: &str) {
        match make(r) {
            Err(ScheduleError::Invalid(why)) => assert!(why.contains(says), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_request_names_one_time_in_the_future_within_the_limits() {
        let at = make(request(Some("2026-11-26T10:00:00+00:00"), None, None)).unwrap();
        assert_eq!(at.next_run_at, Some(NOW + 1_800_000));
        let delay = make(request(None, Some(90.0), None)).unwrap();
        assert_eq!(delay.next_run_at, Some(NOW + 90_000));
        assert_eq!(delay.at, Some(NOW + 90_000));
        let cron = make(request(None, None, Some("*/15 * * * *"))).unwrap();
        assert_eq!(cron.next_run_at, Some(NOW + 900_000));

        refused(request(None, None, None), "exactly one");
        refused(request(Some("x"), Some(90.0), None), "exactly one");
        refused(
            request(Some("2026-11-26T09:00:00Z"), None, None),
            "has passed",
        );
        refused(request(None, Some(0.5), None), "at least 60 s ahead");
        refused(request(None, Some(f64::NAN), None), "at least 60 s ahead");
        refused(request(None, Some(400.0 * 86_400.0), None), "366 days");
        refused(request(None, None, Some("*/30 * * * * *")), "every 30 s");
        refused(
            request(None, None, Some("*/30 * * * * *")),
            "SCHEDULE_MIN_INTERVAL_SECONDS",
        );
        refused(request(None, None, Some("0 0 30 2 *")), "never comes");
        refused(request(None, None, Some("nonsense")), "1 fields");
        let mut blank = request(None, Some(90.0), None);
        blank.instruction = " \u{feff}\n".into();
        refused(blank, "instruction");
        let mut long = request(None, Some(90.0), None);
        long.instruction = "x".repeat(MAX_INSTRUCTION_CHARS) + " ";
        refused(long, "limit");

        let full = new_schedule(
            request(None, Some(90.0), None),
            "s3".into(),
            NOW,
            &LIMITS,
            2,
            &[],
        );
        assert_eq!(full, Err(ScheduleError::TooMany { max: 2 }));
        let said = ScheduleError::TooMany { max: 2 }.to_string();
        assert!(said.contains("MAX_SCHEDULES_PER_CONVERSATION"), "{said}");
        // Every minute is allowed where the shortest interval is a minute.
        assert!(make(request(None, None, Some("* * * * *"))).is_ok());
    }

    #[test]
    fn a_one_time_schedule_is_at_least_the_minimum_interval_ahead() {
        // The loop a self-rescheduling instruction makes is no faster than a cron expression's.
        refused(
            request(None, Some(1.0), None),
            "`delay_seconds` is 1; a one-time schedule must be at least 60 s ahead \
             (SCHEDULE_MIN_INTERVAL_SECONDS)",
        );
        refused(request(None, Some(59.9), None), "at least 60 s ahead");
        refused(
            request(Some("2026-11-26T09:30:01Z"), None, None),
            "is 1.0 s from now; a one-time schedule must be at least 60 s ahead",
        );
        refused(
            request(Some("2026-11-26T09:30:59.999Z"), None, None),
            "SCHEDULE_MIN_INTERVAL_SECONDS",
        );
        assert_eq!(
            make(request(None, Some(60.0), None)).unwrap().next_run_at,
            Some(NOW + 60_000)
        );
        assert_eq!(
            make(request(Some("2026-11-26T09:31:00Z"), None, None))
                .unwrap()
                .next_run_at,
            Some(NOW + 60_000)
        );
        // A deployment with a shorter interval allows a shorter delay.
        let quick = Limits {
            min_interval_s: 2,
            ..LIMITS
        };
        assert!(new_schedule(
            request(None, Some(2.0), None),
            "s".into(),
            NOW,
            &quick,
            0,
            &[]
        )
        .is_ok());
        assert!(new_schedule(
            request(None, Some(1.0), None),
            "s".into(),
            NOW,
            &quick,
            0,
            &[]
        )
        .is_err());
    }

    #[test]
    fn a_conversation_makes_at_most_its_daily_schedules_in_any_24_hours() {
        let limits = Limits {
            per_day: 3,
            ..LIMITS
        };
        // Times schedules were made, cancelled or run since: the first is over a day old.
        let made = [NOW - 25 * HOUR, NOW - 23 * HOUR, NOW - 2 * HOUR, NOW - HOUR];
        assert_eq!(
            made_within_day(&made, NOW),
            vec![NOW - 23 * HOUR, NOW - 2 * HOUR, NOW - HOUR]
        );
        let again = |now: i64| {
            new_schedule(
                request(None, Some(90.0), None),
                "s".into(),
                now,
                &limits,
                0,
                &made,
            )
        };
        let refusal = again(NOW).unwrap_err();
        // The oldest of the day is a day old an hour from now.
        assert_eq!(
            refusal,
            ScheduleError::TooManyToday {
                max: 3,
                retry_after_s: 3_600
            }
        );
        let said = refusal.to_string();
        assert!(
            said.contains("made 3 schedules in the last 24 hours")
                && said.contains("MAX_SCHEDULES_PER_DAY")
                && said.contains("3600 s"),
            "{said}"
        );
        assert!(again(NOW + HOUR - 1).is_err());
        assert!(again(NOW + HOUR).is_ok());
        // Counted whatever became of them: only the creation times are read.
        assert!(new_schedule(
            request(None, Some(90.0), None),
            "s".into(),
            NOW,
            &limits,
            0,
            &made[..3]
        )
        .is_ok());
    }

    #[test]
    fn a_recurring_schedule_ends_after_its_max_runs() {
        let mut r = request(None, None, Some("@hourly"));
        r.max_runs = Some(2);
        let mut s = make(r).unwrap();
        // Without `until` it ends within the farthest a schedule may be set.
        assert_eq!(
            (s.max_runs, s.until),
            (Some(2), Some(NOW + MAX_AHEAD_DAYS * DAY_MS))
        );
        s.start_run(NOW + HOUR);
        assert!(s.next_run_at.is_some());
        assert_eq!(s.finish_run(&RunOutcome::Completed), Finished::Recorded);
        assert_eq!(s.status, Status::Active);
        s.start_run(NOW + 2 * HOUR);
        assert_eq!(s.next_run_at, None, "its last run has no next");
        assert_eq!(s.finish_run(&RunOutcome::Completed), Finished::Ended);
        assert_eq!(s.status, Status::Done);
        assert!(!s.due(NOW + 10 * HOUR));
        assert!(!s.counts(), "an ended schedule frees its place");
        let note = s.ended_note();
        assert!(
            note.contains("ended after 2 runs") && note.contains("`max_runs` is 2"),
            "{note}"
        );
        // Its last run failing ends it rather than pausing it.
        let mut r = request(None, None, Some("@hourly"));
        r.max_runs = Some(1);
        let mut s = make(r).unwrap();
        s.failures = MAX_FAILURES - 1;
        s.start_run(NOW + HOUR);
        assert_eq!(
            s.finish_run(&RunOutcome::Failed("x".into())),
            Finished::Ended
        );
    }

    #[test]
    fn a_recurring_schedule_ends_at_until_and_has_a_default_end() {
        let mut r = request(None, None, Some("@hourly"));
        r.until = Some("2026-11-26T11:30:00Z".into());
        let mut s = make(r).unwrap();
        assert_eq!(s.max_runs, Some(DEFAULT_MAX_RUNS));
        assert_eq!(
            s.until.map(format_utc).as_deref(),
            Some("2026-11-26T11:30:00Z")
        );
        s.start_run(NOW + HOUR / 2); // 10:00
        assert_eq!(s.finish_run(&RunOutcome::Completed), Finished::Recorded);
        s.start_run(NOW + 3 * HOUR / 2); // 11:00; the next, 12:00, is after the end
        assert_eq!(s.next_run_at, None);
        assert_eq!(s.finish_run(&RunOutcome::Completed), Finished::Ended);
        assert!(s.ended_note().contains("`until` 2026-11-26T11:30:00Z"));

        // Given no end, a recurring schedule stops after the default number of runs.
        let mut s = make(request(None, None, Some("* * * * *"))).unwrap();
        for run in 1..=DEFAULT_MAX_RUNS {
            s.start_run(NOW + i64::from(run) * 60_000);
            let finished = s.finish_run(&RunOutcome::Completed);
            assert_eq!(
                finished == Finished::Ended,
                run == DEFAULT_MAX_RUNS,
                "run {run}"
            );
        }
        // One made before schedules had an end gets the default.
        let mut old = make(request(None, None, Some("@daily"))).unwrap();
        old.max_runs = None;
        old.runs = DEFAULT_MAX_RUNS - 1;
        old.start_run(NOW + 24 * HOUR);
        assert_eq!(old.finish_run(&RunOutcome::Completed), Finished::Ended);

        let mut once = request(None, Some(90.0), None);
        once.max_runs = Some(3);
        refused(once, "a one-time schedule runs once");
        let mut once = request(Some("2026-11-27T00:00:00Z"), None, None);
        once.until = Some("2026-11-28T00:00:00Z".into());
        refused(once, "`until` end a recurring schedule");
        for (max_runs, until, says) in [
            (Some(0), None, "from 1 to 10000"),
            (Some(MAX_RUNS + 1), None, "from 1 to 10000"),
            (None, Some("2026-11-26T09:40:00Z"), "before the first run"),
            (None, Some("2028-01-01T00:00:00Z"), "366 days"),
            (None, Some("soon"), "`until`"),
        ] {
            let mut r = request(None, None, Some("@hourly"));
            r.max_runs = max_runs;
            r.until = until.map(str::to_string);
            refused(r, says);
        }
    }

    #[test]
    fn retention_keeps_a_conversation_until_its_earliest_run_to_come() {
        let later = make(request(None, Some(7_200.0), None)).unwrap();
        let sooner = make(request(None, Some(600.0), None)).unwrap();
        assert_eq!(
            retain_until(&[later.clone(), sooner.clone()], NOW),
            Some(NOW + 600_000)
        );
        let mut running = sooner;
        running.start_run(NOW + 600_000);
        assert_eq!(retain_until(&[running.clone()], NOW), Some(NOW));
        running.finish_run(&RunOutcome::Completed);
        assert_eq!(retain_until(&[running.clone()], NOW), None, "done");
        let mut paused = make(request(None, None, Some("@hourly"))).unwrap();
        paused.status = Status::Paused;
        paused.next_run_at = None;
        assert_eq!(retain_until(&[running, paused], NOW), None);
        assert_eq!(retain_until(&[], NOW), None);
        assert_eq!(retain_until(&[later], NOW), Some(NOW + 7_200_000));
    }

    #[test]
    fn a_missed_occurrence_runs_once_and_the_next_is_after_now() {
        let mut s = make(request(None, None, Some("*/15 * * * *"))).unwrap();
        // Due at 09:45; the object was away until 11:07.
        let late = NOW + 97 * 60_000;
        assert!(s.due(late));
        s.start_run(late);
        assert!(!s.due(late), "running, it is not due again");
        assert_eq!(
            s.next_run_at.map(format_utc).as_deref(),
            Some("2026-11-26T11:15:00Z")
        );
        assert_eq!(s.finish_run(&RunOutcome::Completed), Finished::Recorded);
        assert!(!s.due(late + 1_000));
        assert!(s.due(NOW + 105 * 60_000));
        assert_eq!(s.runs, 1);
    }

    #[test]
    fn a_recurring_schedule_pauses_after_three_failures_in_a_row_and_a_success_resets_them() {
        let mut s = make(request(None, None, Some("@hourly"))).unwrap();
        let mut t = NOW;
        let mut run = |s: &mut Schedule, outcome: RunOutcome| {
            t += 3_600_000;
            s.start_run(t);
            s.finish_run(&outcome)
        };
        let fail = || RunOutcome::Failed("the provider answered 400".into());
        assert_eq!(run(&mut s, fail()), Finished::Recorded);
        assert_eq!(run(&mut s, fail()), Finished::Recorded);
        assert_eq!(run(&mut s, RunOutcome::Completed), Finished::Recorded);
        assert_eq!(s.failures, 0);
        assert_eq!(run(&mut s, fail()), Finished::Recorded);
        assert_eq!(run(&mut s, RunOutcome::Cancelled), Finished::Recorded);
        assert_eq!(run(&mut s, fail()), Finished::Recorded);
        assert_eq!(run(&mut s, fail()), Finished::Recorded);
        assert_eq!(run(&mut s, fail()), Finished::Paused);
        assert_eq!(s.status, Status::Paused);
        assert_eq!(s.next_run_at, None);
        assert!(!s.due(t + 10 * 3_600_000));
        assert!(
            s.counts(),
            "a paused schedule still counts toward the limit"
        );
        let note = s.paused_note();
        assert!(
            note.contains("3 failed runs") && note.contains("400"),
            "{note}"
        );
    }

    #[test]
    fn a_one_time_schedule_is_done_after_its_run_whatever_the_outcome() {
        for outcome in [RunOutcome::Completed, RunOutcome::Failed("x".into())] {
            let mut s = make(request(None, Some(90.0), None)).unwrap();
            s.start_run(NOW + 90_000);
            assert_eq!(s.next_run_at, None);
            assert_eq!(s.finish_run(&outcome), Finished::Recorded);
            assert_eq!(s.status, Status::Done);
            assert!(!s.counts());
        }
    }
}
