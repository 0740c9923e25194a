//! The conversation Durable Object (SQLite-backed): one per conversation, it owns the
//! conversation's turns.
//!
//! It receives every message, runs at most one turn at a time as work of the object (not of the
//! request that asked for it, so a turn outlives its client), queues what arrives meanwhile, and
//! keeps the running turn's stream for any reader. The queue, the cancel signal and the running
//! turn live in this one single-threaded object, so they talk directly: a cancel flips the turn's
//! token and aborts its provider call at once.
//!
//! - `mod.rs`: the object, its routes and its state
//! - `send`, `lifecycle`, `deletion`: a request arriving; a turn's life; a conversation deleted
//! - [`schedules`]: turns the conversation runs later, started by the alarm
//! - [`rules`]: the decisions (start or queue, what follows a turn, alarm recovery), pure
//! - [`storage`]: the object's SQLite tables
//! - [`replay`]: the running turn's stream and its readers; `sse`: it as a response
//! - [`turn`]: one turn (prepare, run, hooks), [`ui_stream`]: its events as the UI stream
//! - [`client`]: the Worker's way to the object; `report`: the turn's log line
//!
//! While a turn runs, an alarm is kept [`ALARM_MS`] ahead (or sooner, for a schedule: one alarm
//! serves both, see [`rules::alarm_at`]). If the object is evicted or the
//! runtime restarts mid-turn, the alarm finds the recorded turn with no task running it and
//! finishes it from D1 (see [`rules::recovery`]).

pub mod client;
pub mod deletion;
mod lifecycle;
pub mod replay;
mod report;
pub mod rules;
pub mod schedules;
mod send;
mod sse;
pub mod storage;
pub mod turn;
pub mod ui_stream;

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use worker::{
    console_error, durable_object, AbortController, AbortSignal, DurableObject, Env, Method,
    Request, Response, Result, State,
};

use self::replay::{ChunkLog, NoReader, MAX_READERS};
use self::rules::Activity;
use self::sse::sse;
use self::storage::{Deleted, ObjectStorage, SHARD};
use self::turn::TurnEnv;
use super::{error_response, json_response};
use crate::agent::CancelToken;
use crate::edge::d1::{shards, Store};
use crate::edge::error::ApiError;
use crate::edge::platform::clock::now_ms;
use crate::edge::protocol::{route, Delivery, Handover, Status};

/// How long after a deletion the object finishes it itself, should the Worker not say it did.
pub const DELETION_MS: i64 = 5_000;

pub use rules::ALARM_MS;

#[durable_object]
pub struct ConversationCoordinator {
    object: Rc<Object>,
}

impl DurableObject for ConversationCoordinator {
    fn new(state: State, env: Env) -> Self {
        let storage = Rc::new(ObjectStorage::open(state.storage().sql()));
        Self {
            object: Rc::new(Object {
                state,
                env,
                storage,
                turn_env: RefCell::default(),
                shard: RefCell::default(),
                live: RefCell::default(),
                deleting: Cell::new(false),
                requests: Cell::new(0),
            }),
        }
    }

    async fn fetch(&self, req: Request) -> Result<Response> {
        self.object
            .requests
            .set(self.object.requests.get().wrapping_add(1));
        let request_id = req
            .headers()
            .get(crate::edge::protocol::REQUEST_ID)
            .ok()
            .flatten()
            .unwrap_or_default();
        match self.object.handle(req, &request_id).await {
            Ok(response) => Ok(response),
            Err(e) => {
                if e.status() >= 500 {
                    console_error!("{}", e.log_line(&request_id, "object", "/"));
                }
                error_response(&e, &request_id)
            }
        }
    }

    async fn alarm(&self) -> Result<Response> {
        if let Err(e) = self.object.alarm() {
            console_error!("conversation alarm: {e}");
        }
        Response::ok("")
    }
}

/// The object's state, shared with the turns it runs.
struct Object {
    state: State,
    env: Env,
    storage: Rc<ObjectStorage>,
    /// Built on first use: configuration parsed from the environment, D1.
    turn_env: RefCell<Option<Rc<TurnEnv>>>,
    /// The D1 binding that holds the conversation, once looked up ([`Object::know_shard`]).
    shard: RefCell<Option<String>>,
    /// The turn a task of this isolate runs.
    live: RefCell<Option<Live>>,
    /// The conversation is being deleted: its turn ends and nothing new starts.
    deleting: Cell<bool>,
    /// Requests this object received, for the per-turn log line.
    requests: Cell<u32>,
}

struct Live {
    turn_id: String,
    cancel: CancelToken,
    abort: Option<AbortController>,
    log: Rc<ChunkLog>,
    /// The id of the message that started the turn, if one did.
    started_by: Option<String>,
}

/// A turn that holds the conversation.
struct Claimed {
    turn_id: String,
    started_at: i64,
    /// The object's request, D1 round-trip and SQL statement counts when the turn began (for
    /// a message, when its hand-over came).
    requests_before: u32,
    d1_before: u32,
    sql_before: u32,
    /// The SQL statement count once the turn was ended (before a queued message's turn).
    sql_ended: Cell<Option<u32>>,
    cancel: CancelToken,
    signal: AbortSignal,
    log: Rc<ChunkLog>,
    /// The UI message id of the `start` chunk: `None` continues a paused turn's message.
    message_id: Option<String>,
    /// Whether the `start` chunk is in the log.
    announced: Cell<bool>,
    /// The Worker request that started the turn (`None` for queued messages and recoveries).
    request_id: Option<String>,
    /// That request's W3C trace context, which the turn's spans continue.
    traceparent: Option<String>,
}

impl Claimed {
    /// What error chunks and log lines name: the request, or the turn nobody asked for.
    fn reference(&self) -> &str {
        self.request_id.as_deref().unwrap_or(&self.turn_id)
    }

    /// Writes the `start` chunk, once.
    fn announce(&self) {
        if !self.announced.replace(true) {
            let mut out = String::new();
            ui_stream::start(self.message_id.as_deref(), &mut out);
            self.log.push(&out, now_ms());
        }
    }
}

impl Object {
    async fn handle(
        self: &Rc<Self>,
        mut req: Request,
        request_id: &str,
    ) -> std::result::Result<Response, ApiError> {
        let path = req.path();
        match (req.method(), path.as_str()) {
            (Method::Post, route::SEND) => {
                // `llm::json` over the text, not `Request::json` (JS `JSON.parse` read back
                // through serde_wasm_bindgen: slower, and a second copy of every reader).
                let send: Handover = crate::llm::json::from_str(&req.text().await?)
                    .map_err(|e| ApiError::Internal(format!("a malformed hand-over: {e}")))?;
                super::out_of_line(self.send(send, request_id)).await
            }
            (_, route::SCHEDULES) => self.schedules_route(req, None).await,
            (Method::Delete, schedule) if schedule.starts_with(route::SCHEDULE) => {
                let id = schedule.trim_start_matches(route::SCHEDULE).to_string();
                self.schedules_route(req, Some(&id)).await
            }
            (Method::Get, route::STREAM) => self.attach(),
            (Method::Post, route::CANCEL) => {
                json_response(200, &serde_json::json!({ "cancelling": self.cancel() }))
            }
            (Method::Post, route::CLEAR) => {
                let deleted: Deleted = crate::llm::json::from_str(&req.text().await?)
                    .map_err(|e| ApiError::Internal(format!("a malformed hand-over: {e}")))?;
                super::out_of_line(self.clear(deleted)).await?;
                json_response(200, &serde_json::json!({}))
            }
            (Method::Post, route::FORGET) => {
                super::out_of_line(self.forget()).await?;
                json_response(200, &serde_json::json!({}))
            }
            (Method::Get, route::STATUS) => {
                let activity = self.activity()?;
                json_response(
                    200,
                    &Status {
                        running: activity != Activity::Idle,
                        steering: self.storage.queue_len(Some(Delivery::Steering))?,
                        followup: self.storage.queue_len(Some(Delivery::Followup))?,
                        paused: match activity {
                            Activity::Idle => {
                                self.storage.paused()?.map(|(k, _, _)| k.as_str().into())
                            }
                            _ => None,
                        },
                        waiting: match activity {
                            Activity::Idle => self.storage.waiting()?,
                            _ => Vec::new(),
                        },
                    },
                )
            }
            _ => Err(ApiError::NotFound(format!(
                "no conversation object route {path}"
            ))),
        }
    }

    /// Looks up (once) which D1 database holds `owner`'s data, the conversation's owner, and
    /// keeps it in the object's storage, where the alarm finds it after an eviction. Every entry
    /// that may reach D1 with a request to answer calls it first.
    async fn know_shard(&self, owner: &str) -> std::result::Result<(), ApiError> {
        if self.shard.borrow().is_some() {
            return Ok(());
        }
        if let Some(kept) = self.storage.mark(SHARD)? {
            *self.shard.borrow_mut() = Some(kept);
            return Ok(());
        }
        let config = crate::edge::config::Config::cached(&self.env)?;
        let listed = &config.d1_shards;
        let binding = shards::binding_of(&self.env, listed, owner).await?;
        *self.shard.borrow_mut() = Some(binding);
        self.keep_shard()
    }

    /// Writes the looked-up database into the `shard` mark, for an alarm after an eviction.
    /// With one database there is nothing to keep: every turn environment falls back to it.
    fn keep_shard(&self) -> std::result::Result<(), ApiError> {
        let Some(shard) = self.shard.borrow().clone() else {
            return Ok(());
        };
        if crate::edge::config::Config::cached(&self.env)?
            .d1_shards
            .len()
            > 1
        {
            self.storage.set_mark(SHARD, &shard)?;
        }
        Ok(())
    }

    fn turn_env(&self) -> std::result::Result<Rc<TurnEnv>, ApiError> {
        if let Some(env) = self.turn_env.borrow().as_ref() {
            return Ok(env.clone());
        }
        let config = crate::edge::config::Config::cached(&self.env)?;
        // Not looked up in this isolate (an alarm after an eviction): the kept mark; without
        // one, the first database, where every conversation from before `D1_SHARDS` lived.
        let shard = match self.shard.borrow().clone() {
            Some(known) => known,
            None => match self.storage.mark(SHARD)? {
                Some(kept) => kept,
                None => config
                    .d1_shards
                    .first()
                    .cloned()
                    .ok_or_else(|| ApiError::config("D1_SHARDS", "names no D1 binding"))?,
            },
        };
        let env = Rc::new(TurnEnv {
            env: self.env.clone(),
            store: Rc::new(Store::on(&self.env, &shard)?),
            config,
            storage: self.storage.clone(),
        });
        *self.turn_env.borrow_mut() = Some(env.clone());
        Ok(env)
    }

    fn activity(&self) -> std::result::Result<Activity, ApiError> {
        Ok(rules::activity(
            self.storage.has_turn()?,
            self.live.borrow().is_some(),
        ))
    }

    /// Stops the running turn at once: its token tells the loop, the abort ends the provider
    /// call. `false` when no turn runs.
    fn cancel(&self) -> bool {
        let mut live = self.live.borrow_mut();
        let Some(live) = live.as_mut() else {
            return false;
        };
        live.cancel.cancel();
        if let Some(abort) = live.abort.take() {
            abort.abort();
        }
        true
    }

    /// The running turn's stream from its start, then live; 204 when none runs (or the stream
    /// outgrew its log), 429 when as many readers as may follow it do.
    fn attach(&self) -> std::result::Result<Response, ApiError> {
        let body = self.live.borrow().as_ref().map(|l| l.log.attach_body());
        match body {
            Some(Ok(body)) => sse(&body),
            Some(Err(NoReader::Full)) => Err(ApiError::TooManyRequests {
                message: format!(
                    "{MAX_READERS} readers follow this turn already; attach again when one leaves"
                ),
                retry_after_s: 1,
            }),
            Some(Err(NoReader::Overflowed)) | None => Ok(Response::empty()?.with_status(204)),
        }
    }
}
