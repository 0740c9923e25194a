//! The `turn` and `paused` tables, a row each at most: the running turn (how often it was
//! recovered, the client tools it offered, the answer it was streaming, for recovery), and what
//! the last turn paused for. Ending a turn empties its stream log (`chunks`) too.

use worker::{Result, SqlStorageValue};

use super::{rows, ObjectStorage};
use crate::edge::conversation::rules::PauseKind;
use crate::llm::ToolDef;

#[derive(Debug, Clone)]
pub struct TurnRow {
    pub turn_id: String,
    pub recoveries: i64,
    pub client_tools: String,
    /// The answer being streamed when last flushed (an `AssistantMessage`, JSON).
    pub partial: Option<String>,
}

crate::json_struct!(TurnRow {
    "turn_id" => turn_id,
    "recoveries" => recoveries,
    "client_tools" => client_tools,
    "partial" => partial,
});

impl TurnRow {
    pub fn client_tools(&self) -> Vec<ToolDef> {
        crate::llm::json::from_str(&self.client_tools).unwrap_or_default()
    }
}

struct PausedRow {
    kind: String,
    client_tools: String,
}

crate::json_struct!(PausedRow {
    "kind" => kind,
    "client_tools" => client_tools,
});

impl ObjectStorage {
    /// Whether a turn is recorded (running, or interrupted and not yet recovered).
    pub fn has_turn(&self) -> Result<bool> {
        match self.known.turn.get() {
            Some(known) => Ok(known),
            None => Ok(self.turn()?.is_some()),
        }
    }

    pub fn turn(&self) -> Result<Option<TurnRow>> {
        if self.known.turn.get() == Some(false) {
            return Ok(None);
        }
        let rows: Vec<TurnRow> = rows::cursor(self.exec(
            "SELECT turn_id, recoveries, client_tools, partial FROM turn WHERE id = 1",
            None,
        )?)?;
        self.known.turn.set(Some(!rows.is_empty()));
        Ok(rows.into_iter().next())
    }

    /// Records a new turn (or the recovery of the recorded one, keeping its count).
    pub fn begin_turn(
        &self,
        turn_id: &str,
        now: i64,
        recoveries: u32,
        client_tools: &[ToolDef],
    ) -> Result<()> {
        let tools = serde_json::to_string(client_tools).unwrap_or_else(|_| "[]".into());
        self.write(
            "INSERT INTO turn (id, turn_id, started_at, recoveries, client_tools, partial)
             VALUES (1, ?, ?, ?, ?, NULL)
             ON CONFLICT (id) DO UPDATE SET turn_id = excluded.turn_id, started_at = excluded.started_at,
               recoveries = excluded.recoveries, client_tools = excluded.client_tools, partial = NULL",
            vec![
                turn_id.into(),
                now.into(),
                i64::from(recoveries).into(),
                tools.into(),
            ],
        )?;
        self.known.turn.set(Some(true));
        Ok(())
    }

    /// A turn runs: the pause it answers (or moves on from) is over.
    pub fn clear_paused(&self) -> Result<()> {
        if self.known.paused.get() != Some(false) {
            self.write("DELETE FROM paused", vec![])?;
            self.known.paused.set(Some(false));
        }
        Ok(())
    }

    pub fn set_partial(&self, partial: Option<&str>) -> Result<()> {
        let value: SqlStorageValue = partial.map(str::to_string).into();
        self.write("UPDATE turn SET partial = ? WHERE id = 1", vec![value])?;
        Ok(())
    }

    /// The turn ended: forget it, and remember what a pause waits for.
    pub fn end_turn(&self, paused: Option<(PauseKind, &[ToolDef])>) -> Result<()> {
        self.write("DELETE FROM turn; DELETE FROM chunks", vec![])?;
        self.known.turn.set(Some(false));
        self.known.chunks.set(Some(false));
        if let Some((kind, tools)) = paused {
            let tools = serde_json::to_string(tools).unwrap_or_else(|_| "[]".into());
            self.write(
                "INSERT INTO paused (id, kind, client_tools) VALUES (1, ?, ?)
                 ON CONFLICT (id) DO UPDATE SET kind = excluded.kind, client_tools = excluded.client_tools",
                vec![kind.as_str().into(), tools.into()],
            )?;
            self.known.paused.set(Some(true));
        }
        Ok(())
    }

    /// What the last turn paused for, and the client tools it had offered.
    pub fn paused(&self) -> Result<Option<(PauseKind, Vec<ToolDef>)>> {
        if self.known.paused.get() == Some(false) {
            return Ok(None);
        }
        let rows: Vec<PausedRow> =
            rows::cursor(self.exec("SELECT kind, client_tools FROM paused WHERE id = 1", None)?)?;
        self.known.paused.set(Some(!rows.is_empty()));
        Ok(rows.into_iter().next().and_then(|r| {
            let kind = PauseKind::parse(&r.kind)?;
            Some((
                kind,
                crate::llm::json::from_str(&r.client_tools).unwrap_or_default(),
            ))
        }))
    }
}
