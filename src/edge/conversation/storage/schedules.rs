//! The `schedules` table: each schedule as JSON, with the time it is next due (`NULL` while its
//! turn runs, once paused or done) and whether its turn runs, so the alarm's question "what is
//! due first" is one read. A conversation keeps a few dozen at most, so no index is needed.
//!
//! When schedules were made over the last day is kept apart, in the `schedules_made` mark: a
//! cancelled schedule's row goes, and `MAX_SCHEDULES_PER_DAY` must still count it.

use worker::Result;

use super::{rows, ObjectStorage, Text};
use crate::agent::schedules::{Schedule, Status};

/// The mark holding when this conversation's schedules were made, those of the last day (a
/// JSON array of milliseconds, at most `MAX_SCHEDULES_PER_DAY` long).
const SCHEDULES_MADE: &str = "schedules_made";

struct Due {
    due: Option<i64>,
}

crate::json_struct!(Due {
    "due" => due,
});

impl ObjectStorage {
    /// Every schedule, oldest first (no SQL while none is known to be kept).
    pub fn schedules(&self) -> Result<Vec<Schedule>> {
        let all = self.read_schedules("SELECT row AS t FROM schedules ORDER BY rowid", vec![])?;
        if self.known.schedules.get().is_none() {
            self.known.schedules.set(Some(!all.is_empty()));
        }
        Ok(all)
    }

    /// The schedule due first at `now`, if any.
    pub fn due_schedule(&self, now: i64) -> Result<Option<Schedule>> {
        Ok(self
            .read_schedules(
                "SELECT row AS t FROM schedules WHERE due <= ? ORDER BY due LIMIT 1",
                vec![now.into()],
            )?
            .into_iter()
            .next())
    }

    /// The schedule whose turn runs, if one does.
    pub fn running_schedule(&self) -> Result<Option<Schedule>> {
        Ok(self
            .read_schedules(
                "SELECT row AS t FROM schedules WHERE running = 1 LIMIT 1",
                vec![],
            )?
            .into_iter()
            .next())
    }

    /// When the next schedule is due (perhaps already), if any is.
    pub fn next_due(&self) -> Result<Option<i64>> {
        if self.known.schedules.get() == Some(false) {
            return Ok(None);
        }
        let rows: Vec<Due> =
            rows::cursor(self.exec("SELECT MIN(due) AS due FROM schedules", None)?)?;
        Ok(rows.into_iter().next().and_then(|r| r.due))
    }

    /// Writes `schedule`, new or changed.
    pub fn put_schedule(&self, schedule: &Schedule) -> Result<()> {
        let row =
            serde_json::to_string(schedule).map_err(|e| worker::Error::from(e.to_string()))?;
        let due = schedule
            .next_run_at
            .filter(|_| schedule.status == Status::Active && !schedule.running);
        self.write(
            "INSERT INTO schedules (id, row, due, running) VALUES (?, ?, ?, ?)
             ON CONFLICT (id) DO UPDATE SET row = excluded.row, due = excluded.due,
               running = excluded.running",
            vec![
                schedule.id.as_str().into(),
                row.into(),
                due.into(),
                i64::from(schedule.running).into(),
            ],
        )?;
        self.known.schedules.set(Some(true));
        Ok(())
    }

    /// When schedules were made here lately (the `schedules_made` mark), oldest first; none
    /// when none were, or the mark does not read (the next schedule made rewrites it whole).
    pub fn schedules_made(&self) -> Result<Vec<i64>> {
        let Some(value) = self.mark(SCHEDULES_MADE)? else {
            return Ok(Vec::new());
        };
        Ok(
            crate::llm::json::from_str::<Vec<i64>>(&value).unwrap_or_else(|e| {
                worker::console_error!("an unreadable `{SCHEDULES_MADE}` mark: {e}");
                Vec::new()
            }),
        )
    }

    /// Writes when schedules were made here lately (the caller keeps only the last day's).
    pub fn set_schedules_made(&self, made: &[i64]) -> Result<()> {
        let value = serde_json::to_string(made).map_err(|e| worker::Error::from(e.to_string()))?;
        self.set_mark(SCHEDULES_MADE, &value)
    }

    /// Removes schedule `id`; `false` when there was none.
    pub fn delete_schedule(&self, id: &str) -> Result<bool> {
        if self.known.schedules.get() == Some(false) {
            return Ok(false);
        }
        let removed: Vec<Text> = rows::cursor(self.write(
            "DELETE FROM schedules WHERE id = ? RETURNING id AS t",
            vec![id.into()],
        )?)?;
        // Others may be left.
        self.known.schedules.set(None);
        Ok(!removed.is_empty())
    }

    fn read_schedules(
        &self,
        query: &str,
        bindings: Vec<worker::SqlStorageValue>,
    ) -> Result<Vec<Schedule>> {
        if self.known.schedules.get() == Some(false) {
            return Ok(Vec::new());
        }
        let rows: Vec<Text> = rows::cursor(self.exec(query, bindings)?)?;
        Ok(rows
            .iter()
            .filter_map(|r| match crate::llm::json::from_str(&r.t) {
                Ok(schedule) => Some(schedule),
                Err(e) => {
                    worker::console_error!("an unreadable schedule: {e}");
                    None
                }
            })
            .collect())
    }
}
