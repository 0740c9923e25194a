//! The `schedules` table: each schedule as JSON, with the time it is next due (`NULL` while its
//! turn runs, once paused or done) and whether its turn runs, so the alarm's question "what is
//! due first" is one read. A conversation keeps a few dozen at most, so no index is needed.

use worker::Result;

use super::{rows, ObjectStorage, Text};
use crate::agent::schedules::{Schedule, Status};

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
