//! The conversation Durable Object (SQLite-backed): one per conversation, it coordinates turns.
//!
//! It holds the turn lease (at most one turn runs per conversation; the lease expires if the
//! turn dies, so a conversation never stays locked) and the queue of messages sent while a turn
//! runs. Each request below runs its SQL without an `await` in between, so it is atomic with
//! respect to every other request to this object: that is what makes "end the turn" and "queue
//! a message" unable to miss each other.

use serde::Deserialize;
use worker::{
    durable_object, DurableObject, Env, Method, Request, Response, Result, SqlStorage, State,
};

use super::coordinator::{
    Delivery, Drain, Drained, Release, Renew, Renewed, Status, Submit, Submitted,
};

#[durable_object]
pub struct ConversationCoordinator {
    sql: SqlStorage,
}

#[derive(Deserialize)]
struct LeaseRow {
    turn_id: String,
    expires_at: i64,
}

#[derive(Deserialize)]
struct QueueRow {
    seq: i64,
    message: String,
}

#[derive(Deserialize)]
struct Count {
    n: i64,
}

impl DurableObject for ConversationCoordinator {
    fn new(state: State, _env: Env) -> Self {
        let sql = state.storage().sql();
        let schema = [
            "CREATE TABLE IF NOT EXISTS lease (
               id INTEGER PRIMARY KEY CHECK (id = 1),
               turn_id TEXT NOT NULL,
               expires_at INTEGER NOT NULL)",
            // Turns asked to stop (`/cancel`), until their lease ends.
            "CREATE TABLE IF NOT EXISTS cancelled (turn_id TEXT PRIMARY KEY)",
            "CREATE TABLE IF NOT EXISTS queue (
               seq INTEGER PRIMARY KEY AUTOINCREMENT,
               delivery TEXT NOT NULL,
               message TEXT NOT NULL,
               queued_at INTEGER NOT NULL)",
        ];
        for statement in schema {
            if let Err(e) = sql.exec(statement, None) {
                worker::console_error!("conversation coordinator schema: {e}");
            }
        }
        Self { sql }
    }

    async fn fetch(&self, mut req: Request) -> Result<Response> {
        let now = worker::Date::now().as_millis() as i64;
        let path = req.path();
        match (req.method(), path.as_str()) {
            (Method::Post, "/submit") => {
                let body: Submit = req.json().await?;
                Response::from_json(&self.submit(body, now)?)
            }
            (Method::Post, "/drain") => {
                let body: Drain = req.json().await?;
                Response::from_json(&self.drain(body, now)?)
            }
            (Method::Post, "/renew") => {
                let body: Renew = req.json().await?;
                let held = self.holder(now)?.as_deref() == Some(body.turn_id.as_str());
                if held {
                    self.set_lease(&body.turn_id, now + body.ttl_ms)?;
                }
                let rows: Vec<Count> = self
                    .sql
                    .exec(
                        "SELECT COUNT(*) AS n FROM cancelled WHERE turn_id = ?",
                        vec![body.turn_id.into()],
                    )?
                    .to_array()?;
                let cancelled = rows.first().is_some_and(|c| c.n > 0);
                Response::from_json(&Renewed { held, cancelled })
            }
            // Asks the running turn to stop; it learns so when it next renews its lease.
            (Method::Post, "/cancel") => match self.holder(now)? {
                Some(turn_id) => {
                    self.sql.exec(
                        "INSERT OR IGNORE INTO cancelled (turn_id) VALUES (?)",
                        vec![turn_id.into()],
                    )?;
                    Response::from_json(&serde_json::json!({ "cancelling": true }))
                }
                None => Response::from_json(&serde_json::json!({ "cancelling": false })),
            },
            (Method::Post, "/release") => {
                let body: Release = req.json().await?;
                self.sql.exec(
                    "DELETE FROM lease WHERE turn_id = ?",
                    vec![body.turn_id.clone().into()],
                )?;
                self.sql.exec(
                    "DELETE FROM cancelled WHERE turn_id = ?",
                    vec![body.turn_id.into()],
                )?;
                Response::from_json(&serde_json::json!({}))
            }
            // The conversation is being deleted: forget its lease and queue.
            (Method::Post, "/clear") => {
                self.sql.exec("DELETE FROM lease", None)?;
                self.sql.exec("DELETE FROM queue", None)?;
                self.sql.exec("DELETE FROM cancelled", None)?;
                Response::from_json(&serde_json::json!({}))
            }
            (Method::Get, "/status") => Response::from_json(&Status {
                running: self.holder(now)?.is_some(),
                steering: self.queue_len(Some(Delivery::Steering))?,
                followup: self.queue_len(Some(Delivery::Followup))?,
            }),
            _ => Response::error("no such coordinator route", 404),
        }
    }
}

impl ConversationCoordinator {
    /// Starts a turn if none runs (handing it any messages a dead turn left queued), or queues
    /// the message for the running turn.
    fn submit(&self, body: Submit, now: i64) -> Result<Submitted> {
        if self.holder(now)?.is_some() {
            let Some(message) = body.message else {
                return Ok(Submitted::Busy);
            };
            self.sql.exec(
                "INSERT INTO queue (delivery, message, queued_at) VALUES (?, ?, ?)",
                vec![body.delivery.as_str().into(), message.into(), now.into()],
            )?;
            return Ok(Submitted::Queued {
                delivery: body.delivery,
                position: self.queue_len(None)?,
            });
        }
        self.set_lease(&body.turn_id, now + body.ttl_ms)?;
        Ok(Submitted::Acquired {
            stranded: self.take_queue(None)?,
        })
    }

    /// Steering (mid-turn) or everything (at the end). At the end, an empty queue releases the
    /// lease in the same step.
    fn drain(&self, body: Drain, now: i64) -> Result<Drained> {
        if self.holder(now)?.as_deref() != Some(body.turn_id.as_str()) {
            // The lease expired and another turn took over: this turn must not take its messages.
            return Ok(Drained {
                messages: vec![],
                lease_lost: true,
            });
        }
        // Mid-turn only steering is taken; follow-ups wait for the end.
        let messages = self.take_queue((!body.at_end).then_some(Delivery::Steering))?;
        if body.at_end && messages.is_empty() {
            self.sql.exec("DELETE FROM lease", None)?;
        } else {
            self.set_lease(&body.turn_id, now + body.ttl_ms)?;
        }
        Ok(Drained {
            messages,
            lease_lost: false,
        })
    }

    /// The turn holding an unexpired lease.
    fn holder(&self, now: i64) -> Result<Option<String>> {
        let rows: Vec<LeaseRow> = self
            .sql
            .exec("SELECT turn_id, expires_at FROM lease WHERE id = 1", None)?
            .to_array()?;
        Ok(rows
            .into_iter()
            .find(|l| l.expires_at > now)
            .map(|l| l.turn_id))
    }

    fn set_lease(&self, turn_id: &str, expires_at: i64) -> Result<()> {
        self.sql.exec(
            "INSERT INTO lease (id, turn_id, expires_at) VALUES (1, ?, ?)
             ON CONFLICT (id) DO UPDATE SET turn_id = excluded.turn_id, expires_at = excluded.expires_at",
            vec![turn_id.into(), expires_at.into()],
        )?;
        Ok(())
    }

    /// Takes queued messages of one delivery (or all), oldest first.
    fn take_queue(&self, only: Option<Delivery>) -> Result<Vec<String>> {
        let kind = only.map_or("%", |d| d.as_str());
        let rows: Vec<QueueRow> = self
            .sql
            .exec(
                "SELECT seq, message FROM queue WHERE delivery LIKE ? ORDER BY seq",
                vec![kind.into()],
            )?
            .to_array()?;
        if let Some(last) = rows.last() {
            self.sql.exec(
                "DELETE FROM queue WHERE delivery LIKE ? AND seq <= ?",
                vec![kind.into(), last.seq.into()],
            )?;
        }
        Ok(rows.into_iter().map(|r| r.message).collect())
    }

    fn queue_len(&self, only: Option<Delivery>) -> Result<i64> {
        let kind = only.map_or("%", |d| d.as_str());
        let rows: Vec<Count> = self
            .sql
            .exec(
                "SELECT COUNT(*) AS n FROM queue WHERE delivery LIKE ?",
                vec![kind.into()],
            )?
            .to_array()?;
        Ok(rows.first().map_or(0, |c| c.n))
    }
}
