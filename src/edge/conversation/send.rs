//! What arrives at the object: a message (which starts a turn, or waits for the running one),
//! answers for a paused turn, a retry; a `/v1/chat` id resolved; a repeated send recognised.

use super::sse::sse;
use super::storage::MAX_QUEUED;
use super::Object;
use crate::agent::AgentMessage;
use crate::edge::conversation::replay::{LogReader, NoReader};
use crate::edge::conversation::rules;
use crate::edge::conversation::rules::{Activity, OnExclusive, OnMessage};
use crate::edge::conversation::turn::files::{discard, file_ids, files_of};
use crate::edge::conversation::turn::resolver::FirstCall;
use crate::edge::conversation::turn::{
    check_output, choose_model, prepare, Kickoff, Start, TypedAnswer,
};
use crate::edge::d1::conversations::Remembered;
use crate::edge::d1::{is_conversation_id, scoped_id, Conversation};
use crate::edge::error::ApiError;
use crate::edge::platform::clock::now_ms;
use crate::edge::platform::ids::new_id;
use crate::edge::platform::push_body::PushBody;
use crate::edge::protocol::{
    ChatStart, Delivery, Handover, Keyed, TurnConversation, TurnRequest, ELSEWHERE,
    UNKNOWN_CONVERSATION,
};
use crate::edge::{json_response, out_of_line};
use crate::llm::FileKind;
use futures::channel::oneshot;
use futures::StreamExt;
use std::rc::Rc;
use worker::Response;

/// What a keyed send is.
enum KeyedSend {
    /// Taken before: what the repeat gets.
    Repeat(Response),
    New,
}

/// What the object keeps of an idempotency key (as mark `key:<message id>`): the body's
/// digest, when it was claimed, and whether the message was taken.
#[derive(serde::Serialize)]
struct KeyMark {
    body: String,
    at: i64,
    accepted: bool,
}

crate::json_struct!(KeyMark {
    "body" => body,
    "at" => at,
    "accepted" => accepted,
});

fn key_mark(id: &str) -> String {
    format!("key:{id}")
}

/// The reader of the request that starts a turn.
enum OwnReader {
    /// The streamed response's body.
    Body(Rc<PushBody>),
    /// For `stream: false`: the stream, collected into the JSON answer.
    Collected(LogReader),
}

impl Object {
    /// A message's files must be ones the conversation's model can take: a 400 naming the model
    /// otherwise, before anything of the message is kept.
    fn check_files_seen(
        &self,
        conversation: &TurnConversation,
        message: &AgentMessage,
    ) -> std::result::Result<(), ApiError> {
        let mut files = files_of(message).peekable();
        // A message without files reads no configuration.
        if files.peek().is_none() {
            return Ok(());
        }
        // Not the turn environment: this object may not know its database yet.
        let config = &crate::edge::config::Config::cached(&self.env)?;
        let model = conversation.model(config)?;
        let capabilities = config.models.info(&model).capabilities;
        match files.find(|f| !f.seen_by(&model.provider, &capabilities)) {
            None => Ok(()),
            Some(file) => Err(ApiError::BadRequest(format!(
                "model `{model}` cannot take {} ({}): {}; send it to a conversation whose model \
                 can, or send text",
                file.name
                    .as_deref()
                    .map_or_else(|| "the file".to_string(), |n| format!("`{n}`")),
                file.media_type,
                match file.kind() {
                    FileKind::Pdf if capabilities.vision => "its provider reads no PDFs",
                    _ => "its registry entry has no vision",
                }
            ))),
        }
    }

    /// A message, answers or a retry: starts a turn and answers with its stream (or its JSON),
    /// or queues the message (202), or refuses (409 while a turn runs).
    pub(super) async fn send(
        self: &Rc<Self>,
        send: Handover,
        request_id: &str,
    ) -> std::result::Result<Response, ApiError> {
        let Handover {
            conversation,
            caller,
            request,
            client_tools,
            stream,
            toolsets: narrowed,
            chat,
            output,
            probe,
            from_parent,
            traceparent,
        } = send;
        // Deleted, or being deleted: nothing may recreate it until its D1 rows are gone.
        if let Some(deleted) = self.storage.deleted()? {
            return Err(ApiError::conversation_not_found(&deleted.conversation));
        }
        if probe {
            return out_of_line(self.probe(conversation, &caller, &request)).await;
        }
        let sql_before = self.storage.statements();
        // D1 round trips made for this request before its turn claims the conversation.
        let mut resolving = 0;
        // A chat id that cannot name a conversation names the caller's scoped one, whose D1 row
        // is always what a chat creates: nothing to read first. Every turn of such a chat
        // creates the row unless it exists, in its history's round trip (so a first turn that
        // failed before storing anything leaves no conversation without its row).
        let config = crate::edge::config::Config::cached(&self.env)?;
        let create = chat
            .as_ref()
            .filter(|c| !is_conversation_id(&c.raw_id) && c.target == scoped_id(&caller, &c.raw_id))
            .map(|c| {
                Conversation::new_chat(
                    c.target.clone(),
                    caller.clone(),
                    c.title.clone(),
                    (
                        c.agent.clone(),
                        Remembered::of_chat(&config, c.agent.as_deref()),
                    ),
                    now_ms(),
                )
            });
        // `kept`: the row this object keeps already, not written again. `new_chat`: perhaps a
        // new conversation, created within its owner's count with the turn's history (one
        // round trip; a streamed turn's refusal comes in its stream).
        let mut new_chat = false;
        let (conversation, kept) = match conversation {
            Some(given) => (given, false),
            None => match (self.storage.conversation()?, chat, &create) {
                (Some(kept), _, _) if kept.owner == caller => (kept, true),
                (_, _, Some(row)) => {
                    new_chat = true;
                    (TurnConversation::from(row), false)
                }
                (_, Some(chat), None) => {
                    // Resolved in the caller's own database, whatever this object keeps: the
                    // id may name another user's conversation, in another shard.
                    resolving = 1;
                    // Behind `own` (as the keyed repeat and its files' removal below): rare,
                    // so kept out of `send`'s own code, which every message compiles and runs.
                    match out_of_line(self.resolve_chat(&caller, chat)).await? {
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
        // A sub-agent's conversation answers the conversation that asks it, and only that: a
        // message, an answer or a retry of anyone else's would change what the parent reads.
        if conversation.parent.is_some() && !from_parent {
            return Err(ApiError::Conflict(format!(
                "conversation `{}` is a sub-agent's: it takes messages and approvals only from \
                 the conversation that asks it (`{}`); answer there",
                conversation.id,
                conversation.parent.as_deref().unwrap_or_default()
            )));
        }
        if let TurnRequest::Message { message, .. } = &request {
            self.check_files_seen(&conversation, message)?;
        }
        // Looked up only once the owner is known, never for a caller refused above.
        self.know_shard(&conversation.owner).await?;
        // A send whose idempotency key was accepted before runs nothing again: it re-attaches
        // to the turn it started, is queued once, or gets what was stored for it; with another
        // body it is refused. The key is claimed before anything awaits, so a second request
        // with it meanwhile runs nothing either.
        if let TurnRequest::Message {
            id,
            keyed: Some(keyed),
            message,
            ..
        } = &request
        {
            if let KeyedSend::Repeat(repeat) =
                out_of_line(self.keyed_send(&conversation.id, id, keyed, true)).await?
            {
                out_of_line(self.discard_files(&[message])).await;
                return Ok(repeat);
            }
        }
        if !kept {
            self.storage.set_conversation(&conversation)?;
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
                keyed,
            } => match rules::on_message(activity) {
                OnMessage::StartTurn => (Kickoff::Queued, Some((id, message, keyed))),
                // Its answer would be the running turn's, in another shape or none.
                _ if output.is_some() => {
                    if keyed.is_some() {
                        self.storage.clear_mark(&key_mark(&id))?;
                    }
                    return Err(ApiError::Conflict(format!(
                        "a message with `output` needs a turn of its own, and one is running in \
                         conversation `{}`; wait for it to end or cancel it",
                        conversation.id
                    )));
                }
                queue => {
                    let body = serde_json::to_string(&message)?;
                    let Ok(position) = self.storage.offer(&id, delivery, &body, now)? else {
                        if keyed.is_some() {
                            // Refused: the same key may be sent again as a new message.
                            self.storage.clear_mark(&key_mark(&id))?;
                        }
                        return Err(ApiError::TooManyRequests {
                            message: format!(
                                "conversation `{}` already has {MAX_QUEUED} messages waiting for \
                                 the running turn; wait for it or cancel it",
                                conversation.id
                            ),
                            retry_after_s: 10,
                        });
                    };
                    self.accept_key(&id, keyed.as_ref(), now)?;
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
        // new message offers only what it brings), and the typed answer its message asked for
        // unless it asks for another.
        let resuming = matches!(kickoff, Kickoff::Resume { .. });
        // Read once: nothing below changes it before the turn runs.
        let pause = self.storage.paused()?;
        let settled = pause.is_none();
        let (client_tools, kept) = match (resuming, pause) {
            (true, Some((_, tools, kept))) if client_tools.is_empty() => (tools, kept),
            (true, Some((_, _, kept))) => (client_tools, kept),
            _ => (client_tools, None),
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
            Some((id, message, keyed)) => {
                let body = serde_json::to_string(&message)?;
                let seq = self.storage.hold(&id, &body, now)?;
                self.accept_key(&id, keyed.as_ref(), now)?;
                Some((id, message, seq))
            }
            None => None,
        };
        // The request's own typed answer is checked below; one the pause kept was when it came.
        let turn_output = output.clone().or(kept);
        let offered = (client_tools.as_slice(), turn_output.as_ref());
        let mut claimed = self.claim(0, offered, message_id, Some(request_id))?;
        if let (Some(live), Some((id, _, _))) = (self.live.borrow_mut().as_mut(), &own) {
            live.started_by = Some(id.clone());
        }
        claimed.d1_before = claimed.d1_before.wrapping_sub(resolving);
        claimed.traceparent = traceparent;
        claimed.sql_before = sql_before;
        let chosen = match choose_model(&turn_env, &conversation, &claimed.signal) {
            Ok(chosen) => chosen,
            Err(e) => {
                // Refused before any work: the message is not kept either.
                self.refuse(&claimed, own.as_ref().and_then(|(_, _, seq)| *seq), &e);
                return Err(e);
            }
        };
        let new_message = matches!(kickoff, Kickoff::Queued);
        let typed = TypedAnswer {
            raw: output.as_ref(),
            model: &chosen.0,
            client_tools: &client_tools,
        };
        if let Err(e) = check_output(&turn_env, &conversation, typed) {
            self.refuse(&claimed, own.as_ref().and_then(|(_, _, seq)| *seq), &e);
            return Err(e);
        }
        // With budgets on and no BUDGET_MODEL, a new message's answer waits for its turn's
        // first reservation: one the rest of the budget cannot cover is a 402, before any
        // stream (a budget spent already is refused by the Worker before it comes here).
        let config = &turn_env.config;
        // Not after a pause (`settled`): the calls it waits on are answered for the record
        // before the first call, and a refusal would leave them so.
        let (first_call, first_decided) = match (
            new_message && settled,
            config.user_budget_usd,
            &config.budget_model,
        ) {
            (true, Some(_), None) => {
                let (first, decided) = FirstCall::new();
                (Some(first), Some(decided))
            }
            _ => (None, None),
        };
        let start = Start {
            kickoff,
            queued,
            own,
            narrowed,
            output: turn_output,
            settled,
            create,
            create_within: new_chat.then_some(turn_env.config.max_conversations_per_user),
            first_call,
        };
        // The request's own reader, attached before the turn's first chunk: the response body
        // it streams into, or for `stream: false` a reader to collect the stream from.
        let log_full = |_| ApiError::Internal("the turn's log is full".into());
        let own_reader = if stream {
            OwnReader::Body(claimed.log.attach_body().map_err(log_full)?)
        } else {
            OwnReader::Collected(claimed.log.attach().map_err(log_full)?)
        };
        // A new message is answered at once, a new chat's first one too: the stream starts
        // before the history loads, and a failure to prepare (a chat past its owner's
        // `MAX_CONVERSATIONS_PER_USER` among them) ends it with an error chunk. Answers and
        // retries are checked against D1 first, so a bad one is refused with its status.
        if let (OwnReader::Body(body), true) = (&own_reader, new_message) {
            claimed.announce();
            let object = self.clone();
            self.state.wait_until(async move {
                // Preparing waits one timer turn so the response (and its `start`) leaves first
                // instead of queueing behind the history's parsing on this thread: the first
                // byte comes sooner and the first token no later.
                worker::Delay::from(std::time::Duration::ZERO).await;
                object
                    .prepare_and_run(turn_env, claimed, conversation, start, client_tools, chosen)
                    .await;
            });
            if let Some(decided) = first_decided {
                if let Ok(Some(why)) = decided.await {
                    return Err(ApiError::PaymentRequired(why));
                }
            }
            return sse(body);
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
        let Some(prepared) = self.settle_prepared(&claimed, ready, None)? else {
            return Ok(Response::empty()?.with_status(204));
        };
        claimed.announce();
        let (summary_tx, summary_rx) = oneshot::channel();
        self.run(
            turn_env,
            claimed,
            *prepared,
            (!stream).then_some(summary_tx),
            true,
        );
        if let Some(decided) = first_decided {
            if let Ok(Some(why)) = decided.await {
                return Err(ApiError::PaymentRequired(why));
            }
        }
        let reader = match own_reader {
            OwnReader::Body(body) => return sse(&body),
            OwnReader::Collected(reader) => reader,
        };
        let body: Vec<Vec<u8>> = reader.collect().await;
        let body = String::from_utf8(body.concat()).unwrap_or_default();
        let summary = summary_rx
            .await
            .map_err(|_| ApiError::Internal("the turn ended without a summary".into()))?;
        let (status, json) = summary.into_answer(&body, &self.turn_env()?.config);
        json_response(status, &json)
    }

    /// The conversation a `/v1/chat` id names when this object keeps none of the caller's:
    /// resolved in D1 as [`Store::chat_conversation`] does (created on first use). `Err` is the
    /// caller's conversation when it is another object's (the Worker guessed wrong).
    pub(super) async fn resolve_chat(
        &self,
        caller: &str,
        chat: ChatStart,
    ) -> std::result::Result<std::result::Result<TurnConversation, TurnConversation>, ApiError>
    {
        let config = crate::edge::config::Config::cached(&self.env)?;
        let memory = Remembered::of_chat(&config, chat.agent.as_deref());
        let candidate = Conversation::new_chat(
            scoped_id(caller, &chat.raw_id),
            caller.to_string(),
            chat.title,
            (chat.agent, memory),
            now_ms(),
        );
        // The caller's database, not this object's: the Worker guessed this object from an id
        // that may be another user's conversation (in another shard), whose row, count and
        // erasure are not the caller's.
        let store = crate::edge::d1::Store::for_owner(&self.env, caller).await?;
        let max = config.max_conversations_per_user;
        let resolved = store
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
    pub(super) fn exclusive(
        self: &Rc<Self>,
        activity: Activity,
    ) -> std::result::Result<Option<()>, ApiError> {
        match rules::on_exclusive(activity) {
            OnExclusive::StartTurn => Ok(Some(())),
            OnExclusive::Busy => Ok(None),
            OnExclusive::BusyAndRecover => {
                self.recover_orphan()?;
                Ok(None)
            }
        }
    }

    /// Removes the files `messages` carry from R2 and their records: a repeated send's own
    /// copies (the Worker stored them before the object knew the message was taken already), a
    /// refused message's, a deleted conversation's queue's; no history names them (best
    /// effort: a failure is logged and left to the scheduled run's sweep).
    pub(super) async fn discard_files(&self, messages: &[&AgentMessage]) {
        let ids = file_ids(messages.iter().copied());
        // No files, no turn environment made for them.
        if ids.is_empty() {
            return;
        }
        if let Ok(turn_env) = self.turn_env() {
            discard(&turn_env, &ids).await;
        }
    }

    /// A keyed send's probe ([`Handover::probe`]): the answer a repeat gets, a 422 for the key
    /// with another body, a 409 while a request with it is being handled, else 204 (unknown
    /// here: the Worker stores the message's files and sends it). Nothing is kept.
    async fn probe(
        &self,
        given: Option<TurnConversation>,
        caller: &str,
        request: &TurnRequest,
    ) -> std::result::Result<Response, ApiError> {
        let unknown = || Ok(Response::empty()?.with_status(204));
        let TurnRequest::Message {
            id,
            keyed: Some(keyed),
            ..
        } = request
        else {
            return unknown();
        };
        let conversation =
            match given.map_or_else(|| self.storage.conversation(), |c| Ok(Some(c)))? {
                Some(c) if c.owner == caller && !self.deleting.get() => c,
                _ => return unknown(),
            };
        self.know_shard(&conversation.owner).await?;
        match self.keyed_send(&conversation.id, id, keyed, false).await? {
            KeyedSend::Repeat(repeat) => Ok(repeat),
            KeyedSend::New => unknown(),
        }
    }

    /// Whether keyed message `id` was taken before ([`KeyedSend::Repeat`], with what its repeat
    /// gets) or is new. `claim`: a new one is claimed at once, before anything awaits.
    async fn keyed_send(
        &self,
        conversation_id: &str,
        id: &str,
        keyed: &Keyed,
        claim: bool,
    ) -> std::result::Result<KeyedSend, ApiError> {
        let name = key_mark(id);
        let now = now_ms();
        let kept: Option<KeyMark> = self
            .storage
            .mark(&name)?
            .and_then(|v| crate::llm::json::from_str(&v).ok());
        if kept.as_ref().is_some_and(|k| k.body != keyed.body) {
            return Err(ApiError::KeyReused(format!(
                "idempotency key `{}` was sent before with another body; a new message needs a \
                 new key",
                keyed.key
            )));
        }
        let in_flight = kept.is_some_and(|k| rules::key_in_flight(k.accepted, k.at, now));
        if claim && !in_flight {
            let mark = KeyMark {
                body: keyed.body.clone(),
                at: now,
                accepted: false,
            };
            self.storage
                .set_mark(&name, &serde_json::to_string(&mark)?)?;
        }
        if let Some(repeat) = self.repeated(conversation_id, id).await? {
            return Ok(KeyedSend::Repeat(repeat));
        }
        if in_flight {
            return Err(ApiError::Conflict(format!(
                "a request with idempotency key `{}` is being handled; send it again in a moment \
                 for its answer",
                keyed.key
            )));
        }
        Ok(KeyedSend::New)
    }

    /// Keyed message `id` was taken (queued, or starting its turn).
    fn accept_key(
        &self,
        id: &str,
        keyed: Option<&Keyed>,
        now: i64,
    ) -> std::result::Result<(), ApiError> {
        let Some(keyed) = keyed else {
            return Ok(());
        };
        let mark = KeyMark {
            body: keyed.body.clone(),
            at: now,
            accepted: true,
        };
        self.storage
            .set_mark(&key_mark(id), &serde_json::to_string(&mark)?)?;
        Ok(())
    }

    /// What a repeated send of message `id` gets: the running turn's stream when it started
    /// that turn, 202 when it waits in the queue, or the stored message and what followed it
    /// when it is in D1 (one D1 read, for keyed sends only). `None`: never accepted.
    pub(super) async fn repeated(
        &self,
        conversation_id: &str,
        id: &str,
    ) -> std::result::Result<Option<Response>, ApiError> {
        let started = self
            .live
            .borrow()
            .as_ref()
            .filter(|l| l.started_by.as_deref() == Some(id))
            .map(|l| l.log.attach_body());
        if let Some(body) = started {
            return match body {
                Ok(body) => sse(&body).map(Some),
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
}
