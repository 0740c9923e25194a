//! The conversation Durable Object (SQLite-backed): one per conversation, it owns the
//! conversation's turns.
//!
//! It receives every message, runs at most one turn at a time as work of the object (not of the
//! request that asked for it, so a turn outlives its client), queues what arrives meanwhile, and
//! keeps the running turn's stream for any reader. The queue, the cancel signal and the running
//! turn live in this one single-threaded object, so they talk directly: a cancel flips the turn's
//! token and aborts its provider call at once.
//!
//! - [`machine`]: the decisions (start or queue, what follows a turn, alarm recovery), pure
//! - [`storage`]: the object's SQLite tables
//! - [`log`]: the running turn's stream and its readers
//!
//! While a turn runs, an alarm is kept [`ALARM_MS`] ahead. If the object is evicted or the
//! runtime restarts mid-turn, the alarm finds the recorded turn with no task running it and
//! finishes it from D1 (see [`rules::recovery`]).

pub mod client;
pub mod replay;
pub mod rules;
pub mod storage;
pub mod turn;
pub mod ui_stream;

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use futures::channel::oneshot;
use futures::StreamExt;
use worker::{
    console_error, durable_object, AbortController, AbortSignal, DurableObject, Env, Method,
    Request, Response, Result, State,
};

use self::replay::{ChunkLog, LogReader, NoReader, MAX_READERS};
use self::rules::{
    Activity, AfterTurn, FailedStart, OnAlarm, OnExclusive, OnMessage, Orphan, PauseKind,
};
use self::storage::{Deleted, ObjectStorage, DELETED, FAILED_STARTS};
use self::turn::{choose_model, prepare, Kickoff, Prepared, Ready, Start, TurnEnv, TurnSummary};
use self::ui_stream::HEADERS;
use super::{error_response, json_response};
use crate::agent::{AgentMessage, CancelToken, TurnOutcome};
use crate::edge::d1::{is_conversation_id, scoped_id, Conversation, Store};
use crate::edge::error::ApiError;
use crate::edge::platform::clock::now_ms;
use crate::edge::platform::ids::new_id;
use crate::edge::protocol::{
    ChatStart, Delivery, Send, Status, TurnConversation, TurnRequest, ELSEWHERE,
    UNKNOWN_CONVERSATION,
};
use crate::llm::{ModelRef, Provider, ToolDef};

/// Most messages one conversation keeps waiting for its running turn.
pub const MAX_QUEUED: i64 = 50;

/// How long after a deletion the object finishes it itself, should the Worker not say it did.
pub const DELETION_MS: i64 = 5_000;

/// How far ahead of a running turn its alarm is kept.
pub const ALARM_MS: i64 = 30_000;

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
            (Method::Post, "/send") => {
                // serde_json over the text, not `Request::json` (JS `JSON.parse` read back
                // through serde_wasm_bindgen: slower, and a second copy of every reader).
                let send: Send = crate::llm::json::from_str(&req.text().await?)
                    .map_err(|e| ApiError::Internal(format!("a malformed hand-over: {e}")))?;
                super::own(self.send(send, request_id)).await
            }
            (Method::Get, "/stream") => self.attach(),
            (Method::Post, "/cancel") => {
                json_response(200, &serde_json::json!({ "cancelling": self.cancel() }))
            }
            (Method::Post, "/clear") => {
                let deleted: Deleted = crate::llm::json::from_str(&req.text().await?)
                    .map_err(|e| ApiError::Internal(format!("a malformed hand-over: {e}")))?;
                super::own(self.clear(deleted)).await?;
                json_response(200, &serde_json::json!({}))
            }
            (Method::Post, "/forget") => {
                super::own(self.forget()).await?;
                json_response(200, &serde_json::json!({}))
            }
            (Method::Get, "/status") => {
                let activity = self.activity()?;
                json_response(
                    200,
                    &Status {
                        running: activity != Activity::Idle,
                        steering: self.storage.queue_len(Some(Delivery::Steering))?,
                        followup: self.storage.queue_len(Some(Delivery::Followup))?,
                        paused: match activity {
                            Activity::Idle => {
                                self.storage.paused()?.map(|(k, _)| k.as_str().into())
                            }
                            _ => None,
                        },
                    },
                )
            }
            _ => Err(ApiError::NotFound(format!(
                "no conversation object route {path}"
            ))),
        }
    }

    fn turn_env(&self) -> std::result::Result<Rc<TurnEnv>, ApiError> {
        if let Some(env) = self.turn_env.borrow().as_ref() {
            return Ok(env.clone());
        }
        let env = Rc::new(TurnEnv {
            env: self.env.clone(),
            config: crate::edge::config::Config::cached(&self.env)?,
            store: Rc::new(Store::from_env(&self.env)?),
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

    /// A message, answers or a retry: starts a turn and answers with its stream (or its JSON),
    /// or queues the message (202), or refuses (409 while a turn runs).
    async fn send(
        self: &Rc<Self>,
        send: Send,
        request_id: &str,
    ) -> std::result::Result<Response, ApiError> {
        let Send {
            conversation,
            caller,
            request,
            client_tools,
            stream,
            toolsets: narrowed,
            chat,
        } = send;
        // Deleted, or being deleted: nothing may recreate it until its D1 rows are gone.
        if let Some(deleted) = self.storage.deleted()? {
            return Err(ApiError::conversation_not_found(&deleted.conversation));
        }
        let sql_before = self.storage.statements();
        // D1 round trips made for this request before its turn claims the conversation.
        let mut resolving = 0;
        // A chat id that cannot name a conversation names the caller's scoped one, whose D1 row
        // is always what a chat creates: nothing to read first. Every turn of such a chat
        // creates the row unless it exists, in its history's round trip (so a first turn that
        // failed before storing anything leaves no conversation without its row).
        let create = chat
            .as_ref()
            .filter(|c| !is_conversation_id(&c.raw_id) && c.target == scoped_id(&caller, &c.raw_id))
            .map(|c| {
                let now = now_ms();
                Conversation {
                    id: c.target.clone(),
                    owner: caller.clone(),
                    title: c.title.clone(),
                    system: None,
                    model: None,
                    metadata: None,
                    toolsets: None,
                    created_at: now,
                    updated_at: now,
                }
            });
        // `kept`: the row this object keeps already, not written again.
        let (conversation, kept) = match conversation {
            Some(given) => (given, false),
            None => match (self.storage.conversation()?, chat, &create) {
                (Some(kept), _, _) if kept.owner == caller => (kept, true),
                (_, _, Some(row)) => {
                    // New to this object, and perhaps new: within the owner's count, or refused
                    // before anything starts.
                    resolving = 1;
                    let turn_env = self.turn_env()?;
                    let max = turn_env.config.max_conversations_per_user;
                    // D1 failing is not a refusal: the message is kept here all the same, and
                    // answered once D1 is back.
                    match turn_env.store.may_create(&row.owner, &row.id, max).await {
                        Err(refused @ ApiError::TooManyRequests { .. }) => return Err(refused),
                        Err(e) => console_error!("counting conversations of {}: {e}", row.owner),
                        Ok(()) => {}
                    }
                    (TurnConversation::from(row), false)
                }
                (_, Some(chat), None) => {
                    resolving = 1;
                    match self.resolve_chat(&caller, chat).await? {
                        Ok(conversation) => (conversation, false),
                        Err(elsewhere) => return json_response(ELSEWHERE, &elsewhere),
                    }
                }
                (Some(kept), None, _) => return Err(ApiError::conversation_not_found(&kept.id)),
                (None, None, _) => return Ok(Response::empty()?.with_status(UNKNOWN_CONVERSATION)),
            },
        };
        if self.deleting.get() {
            return Err(ApiError::conversation_not_found(&conversation.id));
        }
        if !kept {
            self.storage.set_conversation(&conversation)?;
        }
        // A send whose idempotency key was accepted before runs nothing again: it re-attaches
        // to the turn it started, is queued once, or gets what was stored for it.
        if let TurnRequest::Message {
            id, keyed: true, ..
        } = &request
        {
            if let Some(repeat) = self.repeated(&conversation.id, id).await? {
                return Ok(repeat);
            }
        }
        let activity = self.activity()?;
        let now = now_ms();
        let busy = || {
            ApiError::Conflict(format!(
                "a turn is running in conversation `{}`; cancel it or wait for it to end",
                conversation.id
            ))
        };
        let (kickoff, own_message) = match request {
            TurnRequest::Message {
                id,
                message,
                delivery,
                ..
            } => match rules::on_message(activity) {
                OnMessage::StartTurn => (Kickoff::Queued, Some((id, message))),
                queue => {
                    if self.storage.queue_len(None)? >= MAX_QUEUED {
                        return Err(ApiError::TooManyRequests {
                            message: format!(
                                "conversation `{}` already has {MAX_QUEUED} messages waiting for \
                                 the running turn; wait for it or cancel it",
                                conversation.id
                            ),
                            retry_after_s: 10,
                        });
                    }
                    let body = serde_json::to_string(&message)?;
                    self.storage.enqueue(&id, delivery, &body, now)?;
                    let position = self.storage.waiting_len()?;
                    if queue == OnMessage::QueueAndRecover {
                        self.recover_orphan()?;
                    }
                    return json_response(
                        202,
                        &serde_json::json!({"queued": delivery.as_str(), "position": position}),
                    );
                }
            },
            TurnRequest::Resume {
                results,
                approvals,
                only_pending,
            } => {
                self.exclusive(activity)?.ok_or_else(busy)?;
                let kickoff = Kickoff::Resume {
                    results,
                    approvals,
                    only_pending,
                };
                (kickoff, None)
            }
            TurnRequest::Retry => {
                self.exclusive(activity)?.ok_or_else(busy)?;
                (Kickoff::Retry, None)
            }
        };
        // A client that resumes without repeating its tools gets the ones the pause offered (a
        // new message offers only what it brings).
        let resuming = matches!(kickoff, Kickoff::Resume { .. });
        let client_tools = if client_tools.is_empty() && resuming {
            self.storage.paused()?.map(|(_, t)| t).unwrap_or_default()
        } else {
            client_tools
        };
        let turn_env = self.turn_env()?;
        let message_id = match kickoff {
            Kickoff::Resume { .. } => None,
            _ => Some(new_id()?),
        };
        // What waited before this message; then the message itself is kept in the inbox, as a
        // queued one is, in the same write as the turn's start: an object that dies before the
        // message reaches D1 finds it there when it recovers. It leaves the inbox once in D1.
        let queued = self.storage.queued(None)?;
        let own = match own_message {
            Some((id, message)) => {
                let body = serde_json::to_string(&message)?;
                let seq = self.storage.hold(&id, &body, now)?;
                Some((id, message, seq))
            }
            None => None,
        };
        let mut claimed = self.claim(0, &client_tools, message_id, Some(request_id))?;
        if let (Some(live), Some((id, _, _))) = (self.live.borrow_mut().as_mut(), &own) {
            live.started_by = Some(id.clone());
        }
        claimed.d1_before = claimed.d1_before.wrapping_sub(resolving);
        claimed.sql_before = sql_before;
        let chosen = match choose_model(&turn_env, &conversation, &claimed.signal) {
            Ok(chosen) => chosen,
            Err(e) => {
                // Refused before any work: the message is not kept either.
                if let Some(seq) = own.as_ref().and_then(|(_, _, seq)| *seq) {
                    self.storage.dequeue(seq)?;
                }
                self.abandon(&claimed, &e);
                return Err(e);
            }
        };
        let new_message = matches!(kickoff, Kickoff::Queued);
        let start = Start {
            kickoff,
            queued,
            own,
            narrowed,
            settled: self.storage.paused()?.is_none(),
            create,
        };
        let reader = claimed.log.attach();
        // A new message is answered at once: the stream starts before the history loads, and a
        // failure to prepare ends it with an error chunk. Answers and retries are checked
        // against the history first, so a bad one is refused with its status.
        if stream && new_message {
            claimed.announce();
            let object = self.clone();
            self.state.wait_until(async move {
                // Preparing waits one timer turn so the response (and its `start`) leaves first
                // instead of queueing behind the history's parsing on this thread: measured, a
                // first byte 4-5 ms sooner and the first token no later.
                worker::Delay::from(std::time::Duration::ZERO).await;
                object
                    .prepare_and_run(turn_env, claimed, conversation, start, client_tools, chosen)
                    .await;
            });
            let reader = reader.map_err(|_| ApiError::Internal("the turn's log is full".into()))?;
            return sse(reader);
        }
        let ready = prepare(
            &turn_env,
            &conversation,
            start,
            client_tools,
            chosen,
            &claimed.signal,
        )
        .await;
        let prepared = match ready {
            Ok(Ready::Run(prepared)) => prepared,
            Ok(Ready::Nothing) => {
                self.finish(&claimed, &TurnOutcome::Completed, &[]);
                return Ok(Response::empty()?.with_status(204));
            }
            Err(e) => {
                self.abandon(&claimed, &e);
                return Err(e);
            }
        };
        claimed.announce();
        let (summary_tx, summary_rx) = oneshot::channel();
        self.run(
            turn_env,
            claimed,
            *prepared,
            (!stream).then_some(summary_tx),
        );
        let reader = reader.map_err(|_| ApiError::Internal("the turn's log is full".into()))?;
        if stream {
            return sse(reader);
        }
        let body: Vec<Vec<u8>> = reader.collect().await;
        let body = String::from_utf8(body.concat()).unwrap_or_default();
        let summary = summary_rx
            .await
            .map_err(|_| ApiError::Internal("the turn ended without a summary".into()))?;
        json_response(200, &summary.into_json(&body, &self.turn_env()?.config))
    }

    /// The conversation a `/v1/chat` id names when this object keeps none of the caller's:
    /// resolved in D1 as [`Store::chat_conversation`] does (created on first use). `Err` is the
    /// caller's conversation when it is another object's (the Worker guessed wrong).
    async fn resolve_chat(
        &self,
        caller: &str,
        chat: ChatStart,
    ) -> std::result::Result<std::result::Result<TurnConversation, TurnConversation>, ApiError>
    {
        let now = now_ms();
        let candidate = Conversation {
            id: scoped_id(caller, &chat.raw_id),
            owner: caller.to_string(),
            title: chat.title,
            system: None,
            model: None,
            metadata: None,
            toolsets: None,
            created_at: now,
            updated_at: now,
        };
        let turn_env = self.turn_env()?;
        let max = turn_env.config.max_conversations_per_user;
        let resolved = turn_env
            .store
            .chat_conversation(&chat.raw_id, &candidate, max)
            .await?;
        let conversation = TurnConversation::from(&resolved);
        Ok(if resolved.id == chat.target {
            Ok(conversation)
        } else {
            Err(conversation)
        })
    }

    /// `Some(())` when an exclusive request may start a turn; an interrupted turn is recovered.
    fn exclusive(self: &Rc<Self>, activity: Activity) -> std::result::Result<Option<()>, ApiError> {
        match rules::on_exclusive(activity) {
            OnExclusive::StartTurn => Ok(Some(())),
            OnExclusive::Busy => Ok(None),
            OnExclusive::BusyAndRecover => {
                self.recover_orphan()?;
                Ok(None)
            }
        }
    }

    /// Takes the conversation for a new turn, synchronously: from here on messages queue.
    fn claim(
        &self,
        recoveries: u32,
        client_tools: &[ToolDef],
        message_id: Option<String>,
        request_id: Option<&str>,
    ) -> std::result::Result<Claimed, ApiError> {
        let sql_before = self.storage.statements();
        let turn_id = new_id()?;
        self.storage
            .begin_turn(&turn_id, now_ms(), recoveries, client_tools)?;
        let log = Rc::new(ChunkLog::new(self.storage.clone()));
        let abort = AbortController::default();
        let signal = abort.signal();
        let cancel = CancelToken::default();
        *self.live.borrow_mut() = Some(Live {
            turn_id: turn_id.clone(),
            cancel: cancel.clone(),
            abort: Some(abort),
            log: log.clone(),
            started_by: None,
        });
        self.keep_alarm();
        Ok(Claimed {
            turn_id,
            started_at: now_ms(),
            requests_before: self.requests.get(),
            d1_before: self.turn_env()?.store.round_trips(),
            sql_before,
            sql_ended: Cell::new(None),
            cancel,
            signal,
            log,
            message_id,
            announced: Cell::new(false),
            request_id: request_id.filter(|r| !r.is_empty()).map(str::to_string),
        })
    }

    /// Runs a prepared turn as work of the object; its end step follows synchronously.
    fn run(
        self: &Rc<Self>,
        turn_env: Rc<TurnEnv>,
        claimed: Claimed,
        prepared: Prepared,
        summary: Option<oneshot::Sender<TurnSummary>>,
    ) {
        if let Err(e) = self.storage.clear_paused() {
            console_error!("clearing the pause: {e}");
        }
        if let Err(e) = self.storage.clear_mark(FAILED_STARTS) {
            console_error!("clearing the failed starts: {e}");
        }
        let object = self.clone();
        let of = prepared.conversation();
        let who = (of.id.clone(), of.owner.clone());
        self.state.wait_until(async move {
            let result = prepared
                .run(
                    &turn_env,
                    claimed.cancel.clone(),
                    claimed.signal.clone(),
                    claimed.log.clone(),
                    claimed.reference(),
                )
                .await;
            object.finish(&claimed, &result.outcome, &result.client_tools);
            log_turn(&claimed, &result, &object, &turn_env, &who);
            if let Some(tx) = summary {
                let _ = tx.send(result);
            }
        });
    }

    /// Starts a turn nobody waits on (queued messages, a recovery) as work of the object.
    fn start_background(
        self: &Rc<Self>,
        kickoff: Kickoff,
        recoveries: u32,
        client_tools: Vec<ToolDef>,
    ) -> std::result::Result<(), ApiError> {
        let Some(conversation) = self.storage.conversation()? else {
            return Err(ApiError::Internal(
                "the conversation object does not know its conversation".into(),
            ));
        };
        let turn_env = self.turn_env()?;
        let claimed = self.claim(recoveries, &client_tools, Some(new_id()?), None)?;
        let chosen = match choose_model(&turn_env, &conversation, &claimed.signal) {
            Ok(chosen) => chosen,
            Err(e) => {
                self.abandon(&claimed, &e);
                return Err(e);
            }
        };
        // The D1 row is created unless it exists: a `/v1/chat` conversation's first message may
        // be kept here while the write that creates its row failed.
        let now = now_ms();
        let create = Conversation {
            id: conversation.id.clone(),
            owner: conversation.owner.clone(),
            title: None,
            system: conversation.system.clone(),
            model: conversation.model.clone(),
            metadata: None,
            toolsets: conversation.toolsets.clone(),
            created_at: now,
            updated_at: now,
        };
        let start = Start {
            kickoff,
            queued: self.storage.queued(None)?,
            own: None,
            narrowed: None,
            // It may follow a turn that just paused.
            settled: false,
            create: Some(create),
        };
        let object = self.clone();
        self.state.wait_until(async move {
            object
                .prepare_and_run(turn_env, claimed, conversation, start, client_tools, chosen)
                .await;
        });
        Ok(())
    }

    async fn prepare_and_run(
        self: Rc<Self>,
        turn_env: Rc<TurnEnv>,
        claimed: Claimed,
        conversation: TurnConversation,
        start: Start,
        client_tools: Vec<ToolDef>,
        chosen: (ModelRef, Rc<dyn Provider>),
    ) {
        let prepared = prepare(
            &turn_env,
            &conversation,
            start,
            client_tools,
            chosen,
            &claimed.signal,
        )
        .await;
        match prepared {
            Ok(Ready::Run(prepared)) => {
                claimed.announce();
                self.run(turn_env, claimed, *prepared, None)
            }
            Ok(Ready::Nothing) => self.finish(&claimed, &TurnOutcome::Completed, &[]),
            Err(e) => {
                console_error!(
                    "{}",
                    e.log_line(claimed.reference(), "turn", &conversation.id)
                );
                // Whoever reads the stream learns why it ends.
                claimed.announce();
                let mut out = String::new();
                ui_stream::failed_to_start(&e.public_message(claimed.reference()), &mut out);
                claimed.log.push(&out, now_ms());
                self.abandon(&claimed, &e);
            }
        }
    }

    /// The end step of every turn, synchronous so no message can slip between "the turn ends"
    /// and "the queue is looked at": queued messages start the next turn at once.
    fn finish(self: &Rc<Self>, claimed: &Claimed, outcome: &TurnOutcome, client_tools: &[ToolDef]) {
        claimed.log.close();
        if !self.release(claimed) {
            return;
        }
        let paused = match outcome {
            TurnOutcome::AwaitingToolResults(_) => Some(PauseKind::ToolResults),
            TurnOutcome::AwaitingApproval(_) => Some(PauseKind::Approval),
            _ => None,
        };
        let queued = self.storage.queue_len(None).unwrap_or(0) as usize;
        let next = rules::after_turn(paused, queued, self.deleting.get());
        let ended = match next {
            AfterTurn::Idle { paused } => self
                .storage
                .end_turn(paused.map(|kind| (kind, client_tools))),
            AfterTurn::NextTurn => self.storage.end_turn(None),
        };
        if let Err(e) = ended {
            console_error!("ending turn {}: {e}", claimed.turn_id);
        }
        claimed.sql_ended.set(Some(self.storage.statements()));
        if matches!(next, AfterTurn::Idle { .. }) {
            self.drop_alarm();
        }
        if next == AfterTurn::NextTurn {
            if let Err(e) = self.start_background(Kickoff::Queued, 0, Vec::new()) {
                console_error!("starting the next turn: {e}; the alarm will");
                self.keep_alarm();
            }
        }
    }

    /// A turn that could not start (`why`): the conversation is free again. Queued messages are
    /// left for the alarm rather than retried at once, so a failing store cannot spin, and only
    /// so often in a row ([`rules::after_failed_start`]): then they wait for the next message,
    /// and the history says why.
    fn abandon(self: &Rc<Self>, claimed: &Claimed, why: &ApiError) {
        claimed.log.close();
        if !self.release(claimed) {
            return;
        }
        if let Err(e) = self.storage.end_turn(None) {
            console_error!("ending turn {}: {e}", claimed.turn_id);
        }
        let waiting = self.storage.queue_len(None).unwrap_or(0);
        if waiting == 0 {
            return;
        }
        let failed = self
            .storage
            .mark(FAILED_STARTS)
            .ok()
            .flatten()
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(0)
            + 1;
        if let Err(e) = self.storage.set_mark(FAILED_STARTS, &failed.to_string()) {
            console_error!("counting a failed start: {e}");
        }
        if rules::after_failed_start(failed) == FailedStart::Later {
            self.keep_alarm();
            return;
        }
        self.drop_alarm();
        let text = format!(
            "{waiting} waiting message(s) could not start a turn ({failed} attempts; the last: {}); \
             they wait for the next message",
            why.public_message(claimed.reference())
        );
        let Some(conversation) = self.storage.conversation().ok().flatten() else {
            return;
        };
        let Ok(turn_env) = self.turn_env() else {
            return;
        };
        self.state.wait_until(async move {
            let noted = match new_id() {
                Ok(id) => {
                    let event = AgentMessage::SystemEvent { text };
                    turn_env
                        .store
                        .append_message(&conversation.id, &id, &event, now_ms())
                        .await
                }
                Err(e) => Err(e),
            };
            if let Err(e) = noted {
                console_error!("noting the failed starts of {}: {e}", conversation.id);
            }
        });
    }

    /// Forgets the live turn if it is `claimed`'s; `false` if another took its place.
    fn release(&self, claimed: &Claimed) -> bool {
        let mut live = self.live.borrow_mut();
        if live.as_ref().map(|l| l.turn_id.as_str()) != Some(claimed.turn_id.as_str()) {
            return false;
        }
        *live = None;
        true
    }

    /// Resumes (or gives up) the turn storage records but no task runs.
    fn recover_orphan(self: &Rc<Self>) -> std::result::Result<(), ApiError> {
        let Some(row) = self.storage.turn()? else {
            return Ok(());
        };
        let partial = row
            .partial
            .as_deref()
            .and_then(|p| crate::llm::json::from_str(p).ok());
        let recoveries = u32::try_from(row.recoveries).unwrap_or(u32::MAX);
        match rules::orphan(recoveries) {
            Orphan::Recover { attempt } => {
                worker::console_warn!(
                    "recovering interrupted turn {} (attempt {attempt})",
                    row.turn_id
                );
                self.start_background(Kickoff::Recover { partial }, attempt, row.client_tools())
            }
            Orphan::GiveUp => {
                self.start_background(Kickoff::GiveUp { partial }, recoveries, Vec::new())
            }
        }
    }

    fn alarm(self: &Rc<Self>) -> std::result::Result<(), ApiError> {
        if let Some(deleted) = self.storage.deleted()? {
            return self.finish_deletion(deleted);
        }
        let recoveries = self
            .storage
            .turn()?
            .map_or(0, |t| u32::try_from(t.recoveries).unwrap_or(u32::MAX));
        let queued = self.storage.queue_len(None)? as usize;
        match rules::on_alarm(self.activity()?, recoveries, queued) {
            OnAlarm::Nothing => Ok(()),
            OnAlarm::Rearm => {
                self.keep_alarm();
                Ok(())
            }
            OnAlarm::Orphan(_) => self.recover_orphan(),
            OnAlarm::StartQueued => self.start_background(Kickoff::Queued, 0, Vec::new()),
        }
    }

    /// Sets the alarm [`ALARM_MS`] ahead.
    fn keep_alarm(&self) {
        let storage = self.state.storage();
        self.state.wait_until(async move {
            if let Err(e) = storage.set_alarm(ALARM_MS).await {
                console_error!("setting the conversation alarm: {e}");
            }
        });
    }

    /// The conversation rests: no alarm is needed (storage calls run in the order they are
    /// made, so a turn claimed after this still gets its alarm).
    fn drop_alarm(&self) {
        let storage = self.state.storage();
        self.state.wait_until(async move {
            if let Err(e) = storage.delete_alarm().await {
                console_error!("deleting the conversation alarm: {e}");
            }
        });
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

    /// What a repeated send of message `id` gets: the running turn's stream when it started
    /// that turn, 202 when it waits in the queue, or the stored message and what followed it
    /// when it is in D1 (one D1 read, for keyed sends only). `None`: never accepted.
    async fn repeated(
        &self,
        conversation_id: &str,
        id: &str,
    ) -> std::result::Result<Option<Response>, ApiError> {
        let started = self
            .live
            .borrow()
            .as_ref()
            .filter(|l| l.started_by.as_deref() == Some(id))
            .map(|l| l.log.attach());
        if let Some(reader) = started {
            return match reader {
                Ok(reader) => sse(reader).map(Some),
                Err(NoReader::Full) => self.attach().map(Some),
                Err(NoReader::Overflowed) => Ok(Some(Response::empty()?.with_status(204))),
            };
        }
        if let Some(row) = self.storage.queued(None)?.into_iter().find(|r| r.id == id) {
            let position = self.storage.waiting_len()?;
            let delivery = if row.delivery == Delivery::Followup.as_str() {
                Delivery::Followup
            } else {
                Delivery::Steering
            };
            return json_response(
                202,
                &serde_json::json!({"queued": delivery.as_str(), "position": position}),
            )
            .map(Some);
        }
        let store = &self.turn_env()?.store;
        let Some(seq) = store.message_seq(conversation_id, id).await? else {
            return Ok(None);
        };
        let (messages, _) = store.history_page(conversation_id, seq - 1, 50).await?;
        json_response(
            200,
            // The shape of a `stream: false` turn's answer, with nothing run.
            &serde_json::json!({
                "repeated": true,
                "message_id": id,
                "messages": messages,
                "events": [],
            }),
        )
        .map(Some)
    }

    /// The running turn's stream from its start, then live; 204 when none runs (or the stream
    /// outgrew its log), 429 when as many readers as may follow it do.
    fn attach(&self) -> std::result::Result<Response, ApiError> {
        let reader = self.live.borrow().as_ref().map(|l| l.log.attach());
        match reader {
            Some(Ok(reader)) => sse(reader),
            Some(Err(NoReader::Full)) => Err(ApiError::TooManyRequests {
                message: format!(
                    "{MAX_READERS} readers follow this turn already; attach again when one leaves"
                ),
                retry_after_s: 1,
            }),
            Some(Err(NoReader::Overflowed)) | None => Ok(Response::empty()?.with_status(204)),
        }
    }

    /// The conversation is being deleted: the running turn is cancelled and has ended before
    /// the object forgets everything but that it is being deleted (the [`DELETED`] mark). It
    /// refuses messages until the Worker, its D1 rows gone, says [`Object::forget`]; should the
    /// Worker never come back, the alarm deletes the rows itself.
    async fn clear(&self, deleted: Deleted) -> std::result::Result<(), ApiError> {
        self.deleting.set(true);
        self.cancel();
        for _ in 0..200 {
            if self.live.borrow().is_none() {
                break;
            }
            worker::Delay::from(std::time::Duration::from_millis(25)).await;
        }
        let cleared = self.empty().await;
        let marked = serde_json::to_string(&deleted)
            .map_err(ApiError::from)
            .and_then(|json| Ok(self.storage.set_mark(DELETED, &json)?));
        if marked.is_ok() {
            if let Err(e) = self.state.storage().set_alarm(DELETION_MS).await {
                console_error!("setting the deletion's alarm: {e}");
            }
        }
        self.deleting.set(false);
        cleared?;
        marked
    }

    /// The conversation's D1 rows are gone: the object keeps nothing, not even the mark.
    async fn forget(&self) -> std::result::Result<(), ApiError> {
        if self.storage.deleted()?.is_none() {
            return Ok(());
        }
        self.empty().await
    }

    /// Everything goes, tables and all: an object whose storage is empty does not exist, and
    /// costs nothing. The alarm is deleted first, so none fires on tables that are gone (with
    /// this compatibility date `deleteAll` deletes it too).
    async fn empty(&self) -> std::result::Result<(), ApiError> {
        let storage = self.state.storage();
        if let Err(e) = storage.delete_alarm().await {
            console_error!("deleting the conversation alarm: {e}");
        }
        let cleared = storage.delete_all().await;
        match cleared {
            Ok(()) => self.storage.emptied(),
            Err(_) => self.storage.maybe_emptied(),
        }
        Ok(cleared?)
    }

    /// Finishes a deletion the Worker left half done: the D1 rows, then the object's mark.
    fn finish_deletion(self: &Rc<Self>, deleted: Deleted) -> std::result::Result<(), ApiError> {
        let store = self.turn_env()?.store.clone();
        let object = self.clone();
        self.state.wait_until(async move {
            let done = match store
                .delete_conversation(&deleted.owner, &deleted.conversation)
                .await
            {
                Ok(_) => object.forget().await,
                Err(e) => Err(e),
            };
            if let Err(e) = done {
                console_error!("finishing the deletion of {}: {e}", deleted.conversation);
                object.keep_alarm();
            }
        });
        Ok(())
    }
}

/// One structured log line per turn, with no message content and no secret: who (`who`: its
/// conversation and user), which models, how it ended, how long the first token took, what it
/// cost, and the requests to this object, D1 round trips and SQL statements it took (the
/// Worker adds one request and, for a conversation it resolves, one round trip).
fn log_turn(
    claimed: &Claimed,
    result: &TurnSummary,
    object: &Object,
    turn_env: &TurnEnv,
    (conversation_id, user): &(String, String),
) {
    let outcome = match &result.outcome {
        TurnOutcome::Completed => "completed",
        TurnOutcome::Stopped => "stopped",
        TurnOutcome::AwaitingToolResults(_) => "awaiting_tool_results",
        TurnOutcome::AwaitingApproval(_) => "awaiting_approval",
        TurnOutcome::LimitReached(_) => "limit_reached",
        TurnOutcome::Failed { .. } => "failed",
        TurnOutcome::Cancelled => "cancelled",
    };
    let stats = &result.stats;
    let mut cost: Option<f64> = None;
    let calls: Vec<serde_json::Value> = stats
        .calls
        .iter()
        .map(|call| {
            let model = ModelRef {
                provider: call.provider.clone(),
                model: call.model.clone(),
            };
            let call_cost = turn_env.config.models.info(&model).cost(&call.usage);
            if let Some(c) = call_cost {
                cost = Some(cost.unwrap_or(0.0) + c);
            }
            serde_json::json!({
                "provider": call.provider,
                "model": call.model,
                "input_tokens": call.usage.input_tokens,
                "output_tokens": call.usage.output_tokens,
            })
        })
        .collect();
    let usage = stats.usage();
    let line = serde_json::json!({
        "event": "turn",
        "level": "info",
        "request_id": claimed.request_id,
        "turn_id": claimed.turn_id,
        "conversation_id": conversation_id,
        "user": user,
        "outcome": outcome,
        "calls": calls,
        "first_token_ms": stats.first_token_ms,
        "duration_ms": now_ms() - claimed.started_at,
        "llm_calls": stats.calls.len(),
        "tool_calls": stats.tool_calls,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cost_usd": cost,
        "retries": stats.retries,
        "fallbacks": stats.fallbacks,
        "budget_switches": stats.budget_switches,
        "messages": result.messages.len(),
        "object_requests": object.requests.get().wrapping_sub(claimed.requests_before),
        "d1_round_trips": turn_env.store.round_trips().wrapping_sub(claimed.d1_before),
        "sql_statements": claimed
            .sql_ended
            .get()
            .unwrap_or_else(|| object.storage.statements())
            .wrapping_sub(claimed.sql_before),
    });
    worker::console_log!("{line}");
}

/// A write that follows the last one within this window waits for the window's end and takes
/// every chunk that arrived by then, so a burst of tokens costs one write per window, not one
/// each; a write after a quieter spell (the `start` chunk, the first token after the model's
/// pause, a trickle) goes out at once.
const WRITE_WINDOW_MS: i64 = 4;
/// ...or until this many bytes wait.
const WRITE_MAX_BYTES: usize = 16 << 10;

/// A reader's stream as the UI message stream response. Each write is a crossing out of wasm, so
/// chunks are coalesced: whatever waits when the runtime pulls, plus, right after another write,
/// what arrives within [`WRITE_WINDOW_MS`] of it.
fn sse(reader: LogReader) -> std::result::Result<Response, ApiError> {
    let headers = worker::Headers::new();
    for (name, value) in HEADERS {
        headers.set(name, value)?;
    }
    let writes = futures::stream::unfold((reader, 0i64), |(mut reader, written_at)| async move {
        // Everything the log holds for this reader comes as one piece.
        let mut write = reader.next().await?;
        // The clock only moves on I/O: a chunk in the same instant as the last write is part
        // of a burst.
        let since = now_ms() - written_at;
        if since < WRITE_WINDOW_MS {
            let rest = (WRITE_WINDOW_MS - since) as u64;
            let mut window = Box::pin(worker::Delay::from(std::time::Duration::from_millis(rest)));
            while write.len() < WRITE_MAX_BYTES {
                match futures::future::select(reader.next(), &mut window).await {
                    futures::future::Either::Left((Some(chunk), _)) => {
                        write.extend_from_slice(&chunk)
                    }
                    _ => break,
                }
            }
        }
        Some((Ok::<Vec<u8>, worker::Error>(write), (reader, now_ms())))
    });
    Ok(Response::from_stream(writes)?.with_headers(headers))
}
