//! The `turn` and `paused` tables, a row each at most: the running turn (how often it was
//! recovered, the client tools it offered, the answer it was streaming, for recovery), and what
//! the last turn paused for. Ending a turn empties its stream log (`chunks`) too.

use serde_json::Value;
use worker::{Result, SqlStorageValue};

use super::{rows, ObjectStorage};
use crate::edge::conversation::rules::PauseKind;
use crate::llm::{ToolCall, ToolDef};

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
    /// The client tools the turn offered, and the typed answer its message asked for.
    pub fn offered(&self) -> (Vec<ToolDef>, Option<Value>) {
        read_offered(&self.client_tools)
    }
}

/// A `client_tools` column as a turn (or its pause) keeps it: the client tools' JSON list, or,
/// when its message asked for a typed answer, `{"tools": [...], "output": {...}}` (the
/// request's `output`), so that a recovered or resumed turn answers typed too and the answer
/// goes with the turn's row and its pause's.
/// A pause's row adds `"waiting"`: the calls that wait for a person's approval, its own and
/// those made within them (a sub-agent's, `p1/c9`), which its history does not hold.
fn offered_json(tools: &[ToolDef], output: Option<&Value>, waiting: &[ToolCall]) -> String {
    #[derive(serde::Serialize)]
    struct Both<'a> {
        tools: &'a [ToolDef],
        #[serde(skip_serializing_if = "Option::is_none")]
        output: Option<&'a Value>,
        #[serde(skip_serializing_if = "<[ToolCall]>::is_empty")]
        waiting: &'a [ToolCall],
    }
    let encoded = match (output, waiting) {
        (None, []) => serde_json::to_string(tools),
        _ => serde_json::to_string(&Both {
            tools,
            output,
            waiting,
        }),
    };
    encoded.unwrap_or_else(|_| "[]".into())
}

struct Offered {
    tools: Vec<ToolDef>,
    output: Option<Value>,
    waiting: Vec<ToolCall>,
}

crate::json_struct!(Offered {
    "tools" => tools: default,
    "output" => output: default,
    "waiting" => waiting: default,
});

fn read_offered(text: &str) -> (Vec<ToolDef>, Option<Value>) {
    if text.starts_with('{') {
        let offered: Option<Offered> = crate::llm::json::from_str(text).ok();
        return offered.map_or((Vec::new(), None), |o| (o.tools, o.output));
    }
    (crate::llm::json::from_str(text).unwrap_or_default(), None)
}

/// What a turn paused for, the client tools it offered and its message's typed answer.
pub type Paused = (PauseKind, Vec<ToolDef>, Option<Value>);

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
        (client_tools, output): (&[ToolDef], Option<&Value>),
    ) -> Result<()> {
        let tools = offered_json(client_tools, output, &[]);
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

    /// The turn ended: forget it, and remember what a pause waits for (with the client tools
    /// and the typed answer the turn that resumes it takes on).
    pub fn end_turn(
        &self,
        paused: Option<(PauseKind, &[ToolDef], Option<&Value>)>,
        waiting: &[ToolCall],
    ) -> Result<()> {
        self.write("DELETE FROM turn; DELETE FROM chunks", vec![])?;
        self.known.turn.set(Some(false));
        self.known.chunks.set(Some(false));
        if let Some((kind, tools, output)) = paused {
            let tools = offered_json(tools, output, waiting);
            self.write(
                "INSERT INTO paused (id, kind, client_tools) VALUES (1, ?, ?)
                 ON CONFLICT (id) DO UPDATE SET kind = excluded.kind, client_tools = excluded.client_tools",
                vec![kind.as_str().into(), tools.into()],
            )?;
            self.known.paused.set(Some(true));
        }
        Ok(())
    }

    /// The calls the paused turn waits to have approved, a sub-agent's among them.
    pub fn waiting(&self) -> Result<Vec<ToolCall>> {
        if self.known.paused.get() == Some(false) {
            return Ok(Vec::new());
        }
        let rows: Vec<PausedRow> =
            rows::cursor(self.exec("SELECT kind, client_tools FROM paused WHERE id = 1", None)?)?;
        Ok(rows
            .first()
            .filter(|r| r.client_tools.starts_with('{'))
            .and_then(|r| crate::llm::json::from_str::<Offered>(&r.client_tools).ok())
            .map(|o| o.waiting)
            .unwrap_or_default())
    }

    /// What the last turn paused for, the client tools it had offered and the typed answer its
    /// message asked for.
    pub fn paused(&self) -> Result<Option<Paused>> {
        if self.known.paused.get() == Some(false) {
            return Ok(None);
        }
        let rows: Vec<PausedRow> =
            rows::cursor(self.exec("SELECT kind, client_tools FROM paused WHERE id = 1", None)?)?;
        self.known.paused.set(Some(!rows.is_empty()));
        Ok(rows.into_iter().next().and_then(|r| {
            let kind = PauseKind::parse(&r.kind)?;
            let (tools, output) = read_offered(&r.client_tools);
            Some((kind, tools, output))
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turns_client_tools_carry_its_typed_answer_and_read_as_before_without_one() {
        let tool = ToolDef {
            name: "pick_city".into(),
            description: String::new(),
            input_schema: serde_json::json!({"type": "object"}),
        };
        let output = serde_json::json!({"type": "choice", "options": ["a", "b"]});
        let with = offered_json(std::slice::from_ref(&tool), Some(&output), &[]);
        assert_eq!(read_offered(&with), (vec![tool.clone()], Some(output)));
        // Without one, the column is the list it always was (and an old row reads the same).
        let without = offered_json(std::slice::from_ref(&tool), None, &[]);
        assert!(without.starts_with('['));
        assert_eq!(read_offered(&without), (vec![tool], None));
        assert_eq!(read_offered("not json"), (vec![], None));
    }
}
