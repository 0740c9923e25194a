//! The `UserSpend` Durable Object: one per user, the single writer of that user's [`Spend`].

use std::cell::RefCell;

use worker::{durable_object, DurableObject, Env, Request, Response, Result, State};

use super::{Ask, Charge, Renew, Settle, Spend};

/// The object of one user's spend.
#[durable_object]
pub struct UserSpend {
    state: State,
    /// The spend as last written (read from storage on the first request).
    spend: RefCell<Option<Option<Spend>>>,
}

impl DurableObject for UserSpend {
    fn new(state: State, _env: Env) -> Self {
        Self {
            state,
            spend: RefCell::default(),
        }
    }

    async fn fetch(&self, mut req: Request) -> Result<Response> {
        let body = req.text().await?;
        // Between the read and the write nothing awaits: each request's change is atomic.
        let mut spend = match self.spend.borrow_mut().take() {
            Some(known) => known,
            None => self.load()?,
        };
        let now = crate::edge::platform::clock::now_ms();
        let answer = match req.path().as_str() {
            "/reserve" => {
                let ask: Ask = crate::llm::json::from_str(&body)?;
                let reply = Spend::reserve(&mut spend, &ask, now);
                Some(serde_json::to_string(&reply)?)
            }
            "/renew" => {
                let renew: Renew = crate::llm::json::from_str(&body)?;
                let held = spend.as_mut().is_some_and(|s| s.renew(&renew.call, now));
                Some(serde_json::to_string(&held)?)
            }
            "/charge" => {
                let charge: Charge = crate::llm::json::from_str(&body)?;
                let committed = Spend::charge(&mut spend, &charge, now);
                Some(serde_json::to_string(&committed)?)
            }
            "/settle" => {
                let settle: Settle = crate::llm::json::from_str(&body)?;
                if let Some(spend) = spend.as_mut() {
                    spend.settle(&settle, now);
                }
                None
            }
            _ => return Response::error("no such route", 404),
        };
        let saved = self.save(spend.as_ref());
        // What was not saved is read again by the next request.
        if saved.is_ok() {
            *self.spend.borrow_mut() = Some(spend);
        }
        saved?;
        match answer {
            Some(json) => Response::ok(json),
            None => Response::empty(),
        }
    }
}

impl UserSpend {
    fn load(&self) -> Result<Option<Spend>> {
        struct Row {
            state: String,
        }

        crate::json_struct!(Row {
            "state" => state,
        });
        let sql = self.state.storage().sql();
        sql.exec(
            "CREATE TABLE IF NOT EXISTS spend (id INTEGER PRIMARY KEY CHECK (id = 1), state TEXT NOT NULL)",
            None,
        )?;
        let rows: Vec<Row> =
            crate::edge::d1::rows::cursor(sql.exec("SELECT state FROM spend WHERE id = 1", None)?)?;
        Ok(rows
            .first()
            .and_then(|row| crate::llm::json::from_str(&row.state).ok()))
    }

    fn save(&self, spend: Option<&Spend>) -> Result<()> {
        let Some(spend) = spend else {
            return Ok(());
        };
        self.state.storage().sql().exec(
            "INSERT INTO spend (id, state) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET state = excluded.state",
            Some(vec![serde_json::to_string(spend)?.into()]),
        )?;
        Ok(())
    }
}
