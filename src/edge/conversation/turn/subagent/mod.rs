//! Agent tools: an agent asks another (`{"type": "agent"}` in its `tools`). A call runs a turn
//! of the child agent in a child conversation, in that conversation's own object, whose id is
//! derived from the parent conversation and the call's id: a call run again (the parent's turn
//! recovered after a crash) reaches the same child, and its keyed message re-attaches to the
//! child's turn or reads its stored answer, so the child never runs twice. The child's stream
//! is shown on the parent's as the call's preliminary outputs; the parent's model sees only the
//! child's answer, or a failure it can act on ([`progress::failure`]).
//!
//! The child is the same user's: its calls reserve and settle on the same spend object, its
//! toolsets are cut to those the parent's turn may use, and its time counts within the parent
//! turn's deadline. Cancelling the parent cancels it; deleting the parent deletes it.

pub mod progress;

use std::rc::Rc;

use async_trait::async_trait;
use futures::future::{select, Either, LocalBoxFuture};
use futures::StreamExt;
use serde_json::{Map, Value};
use worker::{console_error, Env, Response};

use crate::agent::tools::{Ran, NESTED};
use crate::agent::trace::{tool_span_id, TraceContext};
use crate::agent::{AgentMessage, Approval, CancelToken, ServerTool};
use crate::edge::config::agents::{AgentToolSpec, ChildHistory};
use crate::edge::conversation::client::ConversationClient;
use crate::edge::conversation::replay::ChunkLog;
use crate::edge::d1::{Conversation, Store};
use crate::edge::error::ApiError;
use crate::edge::platform::clock::now_ms;
use crate::edge::protocol::{
    body_digest, keyed_id, ApprovalIn, Delivery, Handover, Keyed, TurnConversation, TurnRequest,
};
use crate::llm::sse::SseDecoder;
use crate::llm::{ToolCall, ToolDef};
use progress::{failure, stored_result, Progress, Status};

/// How often a running child is checked on: the parent cancelled, the deadline passed.
const WATCH_MS: u64 = 200;
/// A child's message re-shown at most this often while its text grows.
const SHOW_EVERY_MS: i64 = 100;
/// Past [`SMALL_MESSAGE`], a part's change alone is shown at most this often.
const SHOW_CHANGE_MS: i64 = 1_000;
/// Past this much text, a growing child's message is re-shown only once its text grew by an
/// eighth: each show re-sends the whole message.
const SMALL_MESSAGE: usize = 4 * 1024;
/// The first wait before a child whose stream was lost is looked at again; it doubles.
const SETTLE_FIRST_MS: u64 = 500;
/// The longest wait between looks at such a child.
const SETTLE_MAX_MS: u64 = 10_000;
/// Most bytes of the parent's latest exchanges a child with `history: "summary"` is given.
const EXCERPT_BYTES: usize = 4 * 1024;

/// What every agent tool of one parent turn shares.
pub struct Parent {
    pub env: Env,
    pub store: Rc<Store>,
    pub conversation: String,
    pub owner: String,
    /// The toolsets the parent's turn may use (`None`: all): a child gets no more.
    pub toolsets: Option<Vec<String>>,
    /// The parent's latest exchanges, for children declared with `history: "summary"`.
    pub excerpt: Option<String>,
    /// The parent's stream, which shows the children's progress.
    pub log: Rc<ChunkLog>,
    pub cancel: CancelToken,
    /// When the parent's turn passes its `TURN_DEADLINE_MS` (ms since the epoch).
    pub deadline_at: i64,
    pub request_id: String,
    /// The parent turn's trace id, when it is traced.
    pub trace: Option<String>,
}

/// One agent tool of a parent turn.
pub struct AgentTool {
    definition: ToolDef,
    spec: Rc<AgentToolSpec>,
    parent: Rc<Parent>,
}

impl AgentTool {
    pub fn new(spec: Rc<AgentToolSpec>, description: &str, parent: Rc<Parent>) -> Self {
        Self {
            definition: ToolDef {
                name: spec.name.clone(),
                description: spec
                    .description
                    .clone()
                    .unwrap_or_else(|| description.to_string()),
                input_schema: spec.input_schema.clone(),
            },
            spec,
            parent,
        }
    }
}

/// The id of the child conversation that answers call `call_id` of conversation `parent`: 32
/// hex digits, the shape of every conversation id.
pub fn child_id(parent: &str, call_id: &str) -> String {
    crate::edge::d1::conversations::derived_id(b"edge-agent child conversation\0", parent, call_id)
}

/// What the child is asked: the task when the arguments are just that, else the arguments as
/// JSON; after the parent's excerpt when there is one.
fn task_text(arguments: &Map<String, Value>, excerpt: Option<&str>) -> String {
    let task = match (arguments.len(), arguments.get("task")) {
        (1, Some(Value::String(task))) => task.clone(),
        _ => Value::Object(arguments.clone()).to_string(),
    };
    match excerpt {
        Some(excerpt) => format!(
            "The conversation that asks you this, its latest exchanges:\n\n{excerpt}\n\nYour task:\n{task}"
        ),
        None => task,
    }
}

/// The parent's latest user and assistant text, newest last, within `EXCERPT_BYTES`.
pub fn excerpt(history: &[AgentMessage]) -> String {
    let mut lines = Vec::new();
    let mut size = 0;
    for message in history.iter().rev() {
        let (who, text) = match message {
            AgentMessage::User { .. } => ("user", message.user_said().unwrap_or_default()),
            AgentMessage::Assistant(a) => ("assistant", a.text()),
            _ => continue,
        };
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        let clipped = crate::agent::text::clip(text, 600);
        size += clipped.len() + who.len() + 2;
        if size > EXCERPT_BYTES {
            break;
        }
        lines.push(format!("{who}: {clipped}"));
    }
    lines.reverse();
    lines.join("\n")
}

#[async_trait(?Send)]
impl ServerTool for AgentTool {
    fn definition(&self) -> &ToolDef {
        &self.definition
    }

    /// Children asked in one answer work at once.
    fn concurrent(&self) -> bool {
        true
    }

    fn bounds_own_time(&self) -> bool {
        true
    }

    /// Never called by the loop, which runs calls by their ids ([`ServerTool::run`]): a child
    /// is named by its call, so one without an id has none.
    async fn call(&self, _arguments: &Map<String, Value>) -> Result<Value, String> {
        Err(failure(
            Status::Error,
            "an agent tool is called by its call's id",
        ))
    }

    async fn run(
        &self,
        call_id: &str,
        arguments: &Map<String, Value>,
        decisions: Vec<(String, Approval)>,
    ) -> Ran {
        let parent = &self.parent;
        let agent = self.spec.agent.as_str();
        let child = child_id(&parent.conversation, call_id);
        let excerpt = match self.spec.history {
            ChildHistory::Summary => parent.excerpt.as_deref().filter(|e| !e.is_empty()),
            ChildHistory::None => None,
        };
        let task = task_text(arguments, excerpt);
        let now = now_ms();
        let row = Conversation {
            id: child.clone(),
            owner: parent.owner.clone(),
            title: Some(crate::agent::text::clip(&task_text(arguments, None), 100).to_string()),
            system: None,
            model: None,
            metadata: None,
            toolsets: parent.toolsets.clone(),
            agent: Some(agent.to_string()),
            created_at: now,
            updated_at: now,
            parent: Some(parent.conversation.clone()),
            tool_call_id: Some(call_id.to_string()),
            // A child's turns run its parent's tasks: they keep no memory of their own.
            memory: crate::edge::d1::conversations::Remembered::Off,
        };
        let unavailable = |e: &dyn std::fmt::Display| {
            Ran::Done(Err(failure(
                Status::Error,
                &format!("the agent `{agent}` could not start: {e}"),
            )))
        };
        match parent.store.create_child(&row).await {
            Ok(()) => {}
            Err(ApiError::Conflict(why)) => return unavailable(&why),
            Err(e) => {
                console_error!("creating child conversation {child}: {e}");
                return unavailable(&"its conversation could not be stored");
            }
        }
        let client = match ConversationClient::for_conversation(&parent.env, &child) {
            Ok(client) => client.for_request(&parent.request_id),
            Err(e) => return unavailable(&e),
        };
        // Keyed by the call: sent again (a recovered parent), it re-attaches or reads what was
        // stored. The digest is of the arguments, which a call sent again repeats exactly.
        let keyed = Keyed {
            key: format!("agent-tool:{call_id}"),
            body: body_digest(Value::Object(arguments.clone()).to_string().as_bytes()),
        };
        let mut conversation = TurnConversation::from(&row);
        conversation.max_llm_calls = self.spec.max_llm_calls;
        let request = TurnRequest::Message {
            id: keyed_id(&parent.owner, &child, &keyed.key),
            message: AgentMessage::user_text(&task),
            delivery: Delivery::Steering,
            keyed: Some(keyed),
        };
        // A traced parent's call is the child's turn's parent span (its id derived from the
        // call's, so known before the call's span is).
        // An untraced parent's child is not traced either (its own sampling would scatter
        // children without their parents).
        let traceparent = match &parent.trace {
            Some(trace) => {
                let context = TraceContext {
                    trace_id: trace.clone(),
                    parent_id: None,
                    sampled: Some(true),
                };
                Some(context.header(&tool_span_id(trace, call_id)))
            }
            None => crate::edge::platform::ids::new_id()
                .ok()
                .map(|id| format!("00-{id}-{}-00", tool_span_id(&id, call_id))),
        };
        let start = from_parent(Some(conversation), &parent.owner, request, traceparent);
        let deadline_at = match self.spec.timeout_ms {
            Some(ms) => parent.deadline_at.min(now + i64::from(ms)),
            None => parent.deadline_at,
        };
        let call = Call {
            client: &client,
            child: &child,
            id: call_id,
        };
        let follow = std::pin::pin!(self.follow(&call, start, decisions));
        let watch = std::pin::pin!(watch(&parent.cancel, deadline_at));
        match select(follow, watch).await {
            Either::Left((ran, _)) => ran,
            Either::Right((why, _)) => {
                // The child's turn outlives the request that follows it: it is stopped.
                if let Err(e) = client.cancel().await {
                    console_error!("cancelling child conversation {child}: {e}");
                }
                Ran::Done(Err(match why {
                    Stopped::Cancelled => {
                        failure(Status::Cancelled, "the turn that asked was cancelled")
                    }
                    Stopped::Deadline => failure(
                        Status::LimitReached,
                        &format!("the agent `{agent}` did not answer in the time it had"),
                    ),
                }))
            }
        }
    }
}

/// Why a child was stopped.
enum Stopped {
    Cancelled,
    Deadline,
}

/// Resolves once the parent is cancelled or the deadline passes.
async fn watch(cancel: &CancelToken, deadline_at: i64) -> Stopped {
    use crate::llm::Sleeper;
    let timer = crate::edge::platform::timers::WorkerSleeper;
    loop {
        if cancel.is_cancelled() {
            return Stopped::Cancelled;
        }
        let left = deadline_at - now_ms();
        if left <= 0 {
            return Stopped::Deadline;
        }
        timer.sleep(WATCH_MS.min(left as u64)).await;
    }
}

/// One call of an agent tool: the child's object, the child's id, the call's id.
struct Call<'a> {
    client: &'a ConversationClient,
    child: &'a str,
    id: &'a str,
}

impl Call<'_> {
    /// The id the parent shows a child's call under.
    fn nested(&self, child_call: &str) -> String {
        format!("{}{NESTED}{child_call}", self.id)
    }
}

/// How reading a child's stream ended.
enum Followed {
    /// Its turn ended: the call's result.
    Ended(Ran),
    /// Its turn paused for approvals: the child's message as it stands.
    Paused(Value),
    /// The stream was cut off before the turn ended.
    Cut,
}

impl AgentTool {
    /// Sends the task (or a person's decisions on calls the child waits on) and follows the
    /// child's turn to its end: its result, or the calls it waits to have approved.
    async fn follow(
        &self,
        call: &Call<'_>,
        start: Handover,
        decisions: Vec<(String, Approval)>,
    ) -> Ran {
        let agent = self.spec.agent.as_str();
        let failed = |status, message: String| Ran::Done(Err(failure(status, &message)));
        if !decisions.is_empty() {
            // The child's own ids: this call's prefix off.
            let prefix = call.nested("");
            let approvals: Vec<ApprovalIn> = decisions
                .into_iter()
                .filter_map(|(id, a)| {
                    Some(ApprovalIn {
                        tool_call_id: id.strip_prefix(&prefix)?.to_string(),
                        approved: a.approved,
                        reason: a.reason,
                    })
                })
                .collect();
            let decided: Vec<String> = approvals.iter().map(|a| a.tool_call_id.clone()).collect();
            let request = TurnRequest::Resume {
                results: Vec::new(),
                approvals,
                // Decisions on calls the child no longer waits on (taken by an earlier run of
                // this call) are dropped, not refused with the rest.
                only_pending: true,
            };
            let resume = from_parent(None, &start.caller, request, start.traceparent.clone());
            match call.client.send(&resume).await {
                Ok(response) if response.status_code() == 200 && is_stream(&response) => {
                    match self.read(response, call, &decided).await {
                        Followed::Ended(ran) => return ran,
                        Followed::Paused(shown) => return self.paused(call, shown).await,
                        Followed::Cut => {}
                    }
                }
                // Busy (a turn of the child's runs: this call's, resumed by an earlier run), or
                // nothing it waits on: followed below.
                Ok(response) if matches!(response.status_code(), 400 | 409) => {}
                Ok(response) => return refused(agent, "could not go on", response).await,
                Err(e) => {
                    return failed(
                        Status::Interrupted,
                        format!("the agent `{agent}` cannot be reached: {e}"),
                    )
                }
            }
        }
        let response = match call.client.send(&start).await {
            Ok(response) => response,
            Err(e) => {
                return failed(
                    Status::Error,
                    format!("the agent `{agent}` could not start: {e}"),
                )
            }
        };
        match response.status_code() {
            200 if is_stream(&response) => match self.read(response, call, &[]).await {
                Followed::Ended(ran) => return ran,
                Followed::Paused(shown) => return self.paused(call, shown).await,
                Followed::Cut => {}
            },
            // Taken before (a call run again): its turn is followed, or its answer read back
            // (204: it started this turn, whose stream outgrew its log).
            200 | 202 | 204 => {}
            _ => return refused(agent, "could not start", response).await,
        }
        self.settle(call).await
    }

    /// Reads a child's stream, showing its progress (the outcomes of the calls `decided` under
    /// their nested ids).
    ///
    /// Boxed, as are [`AgentTool::paused`] and [`AgentTool::settle`]: each is awaited from
    /// several places, whose state machines would each hold a copy.
    fn read<'a>(
        &'a self,
        response: Response,
        call: &'a Call<'a>,
        decided: &'a [String],
    ) -> LocalBoxFuture<'a, Followed> {
        Box::pin(self.read_stream(response, call, decided))
    }

    async fn read_stream(
        &self,
        mut response: Response,
        call: &Call<'_>,
        decided: &[String],
    ) -> Followed {
        let agent = self.spec.agent.as_str();
        let mut progress = Progress::default();
        let mut decoder = SseDecoder::new();
        let mut spacing = Spacing::default();
        let Ok(mut body) = response.stream() else {
            return Followed::Cut;
        };
        while let Some(bytes) = body.next().await {
            let Ok(bytes) = bytes else {
                break;
            };
            let mut answered = String::new();
            let _ = decoder.push(&bytes, &mut |_, data| {
                if let Ok(mut chunk) = crate::llm::json::from_str::<Value>(data) {
                    progress.apply(&chunk);
                    // A decided call's outcome, shown where its approval was asked.
                    let id = chunk["toolCallId"].as_str().unwrap_or_default();
                    let outcome = chunk["type"]
                        .as_str()
                        .is_some_and(|t| t.starts_with("tool-output-"));
                    if outcome && decided.iter().any(|d| d == id) {
                        chunk["toolCallId"] = call.nested(id).into();
                        answered.push_str(&format!("data: {chunk}\n\n"));
                    }
                }
                Ok::<(), ()>(())
            });
            let now = now_ms();
            if !answered.is_empty() {
                self.parent.log.push(&answered, now);
            }
            if progress.finished() {
                if progress.paused_for_approval() {
                    let mut shown = progress.shown(call.child, agent);
                    shown["status"] = "awaiting_approval".into();
                    return Followed::Paused(shown);
                }
                return Followed::Ended(Ran::Done(progress.result(agent)));
            }
            if spacing.due(&mut progress, now) {
                self.show(call.id, &progress.shown(call.child, agent), true, now);
            }
        }
        Followed::Cut
    }

    /// The child paused for approvals: which calls, as the child keeps them (its stream shows
    /// only those asked in its last step).
    fn paused<'a>(&'a self, call: &'a Call<'a>, shown: Value) -> LocalBoxFuture<'a, Ran> {
        Box::pin(self.paused_calls(call, shown))
    }

    async fn paused_calls(&self, call: &Call<'_>, shown: Value) -> Ran {
        let agent = self.spec.agent.as_str();
        match call.client.status().await {
            Ok(status) if !status.waiting.is_empty() => {
                let waiting = status
                    .waiting
                    .into_iter()
                    .map(|c| (c.id, c.name, c.input))
                    .collect();
                self.wait(call, shown, waiting, now_ms())
            }
            Ok(_) => Ran::Done(Err(failure(
                Status::Error,
                &format!("the agent `{agent}` stopped waiting on a tool"),
            ))),
            Err(e) => Ran::Done(Err(failure(
                Status::Interrupted,
                &format!("the agent `{agent}` cannot be reached: {e}"),
            ))),
        }
    }

    /// The child waits for approvals: its calls shown as parts of the parent's message under
    /// nested ids, and the parent's turn pauses for them. The agent tool's own part shows the
    /// child's message as it stands (not preliminary: a stock client that answers the
    /// approvals then sends them, as it does once every part of the step is settled).
    fn wait(
        &self,
        call: &Call<'_>,
        shown: Value,
        waiting: Vec<(String, String, Value)>,
        now: i64,
    ) -> Ran {
        self.show(call.id, &shown, false, now);
        let calls: Vec<ToolCall> = waiting
            .into_iter()
            .map(|(id, name, input)| ToolCall {
                id: call.nested(&id),
                name,
                input,
                signature: None,
            })
            .collect();
        let mut out = String::new();
        for c in &calls {
            let chunk = serde_json::json!({
                "type": "tool-input-available",
                "toolCallId": c.id,
                "toolName": c.name,
                "input": c.input,
            });
            out.push_str(&format!("data: {chunk}\n\n"));
        }
        self.parent.log.push(&out, now);
        Ran::Waiting(calls)
    }

    /// The child's message on the parent's stream, as the call's output.
    fn show(&self, call_id: &str, shown: &Value, preliminary: bool, now: i64) {
        let mut chunk = serde_json::json!({
            "type": "tool-output-available",
            "toolCallId": call_id,
            "output": shown,
        });
        if preliminary {
            chunk["preliminary"] = true.into();
        }
        self.parent.log.push(&format!("data: {chunk}\n\n"), now);
    }

    /// A child whose stream this call did not see end: followed while its turn runs (its
    /// stream again, from its start), then its answer read back from D1, or the calls its pause
    /// waits to have approved. Looked at less often the longer it takes (each look is a
    /// subrequest or two); the watch stops it at the deadline, and cancels the child.
    fn settle<'a>(&'a self, call: &'a Call<'a>) -> LocalBoxFuture<'a, Ran> {
        Box::pin(self.settle_child(call))
    }

    async fn settle_child(&self, call: &Call<'_>) -> Ran {
        use crate::llm::Sleeper;
        let agent = self.spec.agent.as_str();
        let timer = crate::edge::platform::timers::WorkerSleeper;
        let mut wait_ms = SETTLE_FIRST_MS;
        loop {
            let status = match call.client.status().await {
                Ok(status) => status,
                Err(e) => {
                    return Ran::Done(Err(failure(
                        Status::Interrupted,
                        &format!("the agent `{agent}` cannot be reached: {e}"),
                    )))
                }
            };
            if !status.running {
                if status.paused.as_deref() == Some("approval") && !status.waiting.is_empty() {
                    let shown = serde_json::json!({
                        "conversation_id": call.child,
                        "agent": agent,
                        "status": "awaiting_approval",
                        "parts": [],
                    });
                    let waiting = status
                        .waiting
                        .into_iter()
                        .map(|c| (c.id, c.name, c.input))
                        .collect();
                    return self.wait(call, shown, waiting, now_ms());
                }
                break;
            }
            if let Ok(response) = call.client.stream().await {
                if response.status_code() == 200 {
                    match self.read(response, call, &[]).await {
                        Followed::Ended(ran) => return ran,
                        Followed::Paused(shown) => return self.paused(call, shown).await,
                        Followed::Cut => {}
                    }
                }
            }
            timer.sleep(wait_ms).await;
            wait_ms = (wait_ms * 2).min(SETTLE_MAX_MS);
        }
        let last = match self.parent.store.last_answer(call.child).await {
            Ok(last) => last,
            Err(e) => {
                return Ran::Done(Err(failure(
                    Status::Interrupted,
                    &format!("the agent `{agent}`'s answer cannot be read: {e}"),
                )))
            }
        };
        Ran::Done(stored_result(agent, last.as_ref()))
    }
}

/// When a child's message is shown again: once it changed, at most every [`SHOW_EVERY_MS`]
/// and, past [`SMALL_MESSAGE`], once it grew by an eighth or, for a new part or a part's new
/// state, after [`SHOW_CHANGE_MS`]. Each show re-sends the whole message: this bounds what a
/// long child re-sends to a small multiple of its size, plus one show a second.
#[derive(Default)]
struct Spacing {
    /// When last shown, with the message's weight then.
    shown: Option<(i64, usize)>,
    /// A part came or changed state since.
    changed: bool,
}

impl Spacing {
    fn due(&mut self, progress: &mut Progress, now: i64) -> bool {
        self.changed |= progress.take_changed();
        let weight = progress.weight();
        let due = match self.shown {
            None => self.changed || weight > 0,
            Some((at, at_weight)) => {
                let since = now - at;
                let grown = weight > at_weight
                    && (at_weight < SMALL_MESSAGE || weight - at_weight >= at_weight / 8);
                since >= SHOW_EVERY_MS
                    && (grown
                        || (self.changed && (at_weight < SMALL_MESSAGE || since >= SHOW_CHANGE_MS)))
            }
        };
        if due {
            self.shown = Some((now, weight));
            self.changed = false;
        }
        due
    }
}

/// What the parent's agent tool hands the child's object: `request`, streamed, with no client
/// tools, narrowing or typed answer of its own (the child's agent has those).
fn from_parent(
    conversation: Option<TurnConversation>,
    owner: &str,
    request: TurnRequest,
    traceparent: Option<String>,
) -> Handover {
    Handover {
        conversation,
        caller: owner.to_string(),
        request,
        client_tools: Vec::new(),
        stream: true,
        toolsets: None,
        chat: None,
        output: None,
        probe: false,
        from_parent: true,
        traceparent,
    }
}

fn is_stream(response: &Response) -> bool {
    response
        .headers()
        .get("content-type")
        .ok()
        .flatten()
        .is_some_and(|t| t.starts_with("text/event-stream"))
}

/// A child's object refused the call's request: a budget spent is `limit_reached`, anything
/// else an error, with the object's message.
async fn refused(agent: &str, doing: &str, response: Response) -> Ran {
    let kind = if response.status_code() == 402 {
        Status::LimitReached
    } else {
        Status::Error
    };
    let message = error_message(response).await;
    Ran::Done(Err(failure(
        kind,
        &format!("the agent `{agent}` {doing}: {message}"),
    )))
}

/// The message of a JSON error answer (`{error: {message}}`), else its status.
async fn error_message(mut response: Response) -> String {
    let status = response.status_code();
    let text = response.text().await.unwrap_or_default();
    crate::llm::json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| format!("status {status}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_long_child_re_sends_a_small_multiple_of_its_message() {
        let mut progress = Progress::default();
        let mut spacing = Spacing::default();
        progress.apply(&json!({"type": "start-step"}));
        progress.apply(&json!({"type": "text-start", "id": "t"}));
        let (mut shows, mut sent) = (0, 0);
        // 200 KB of text in 20-byte pieces, one every 5 ms (a fast model), with a tool call
        // whose state changes every 500 pieces.
        for i in 0..10_000i64 {
            progress
                .apply(&json!({"type": "text-delta", "id": "t", "delta": "twenty bytes of text"}));
            if i % 500 == 0 {
                let call = format!("c{i}");
                progress.apply(&json!({"type": "tool-input-available", "toolCallId": call, "toolName": "t", "input": {}}));
            }
            if spacing.due(&mut progress, i * 5) {
                shows += 1;
                sent += progress.weight();
            }
        }
        let size = progress.weight();
        assert!(shows >= 20, "shown as it grew: {shows}");
        assert!(
            sent < 12 * size,
            "re-sent {sent} bytes for a {size}-byte message in {shows} shows"
        );
        // A first part is shown at once; then nothing until something changed.
        let mut quiet = Progress::default();
        let mut spacing = Spacing::default();
        quiet.apply(&json!({"type": "text-start", "id": "t"}));
        assert!(spacing.due(&mut quiet, 0));
        assert!(!spacing.due(&mut quiet, 10_000));
    }

    #[test]
    fn a_child_id_is_the_parent_s_and_the_call_s_alone() {
        let a = child_id("p1", "call_1");
        assert_eq!(a, child_id("p1", "call_1"));
        assert!(crate::edge::d1::is_conversation_id(&a));
        assert_ne!(a, child_id("p1", "call_2"));
        assert_ne!(a, child_id("p2", "call_1"));
        assert_ne!(child_id("p1", "c"), child_id("p1c", ""));
    }

    #[test]
    fn the_task_is_its_words_or_the_arguments_after_the_excerpt() {
        let args = |v: Value| v.as_object().unwrap().clone();
        assert_eq!(task_text(&args(json!({"task": "find x"})), None), "find x");
        assert_eq!(
            task_text(&args(json!({"city": "Oslo", "days": 2})), None),
            r#"{"city":"Oslo","days":2}"#
        );
        let with = task_text(&args(json!({"task": "find x"})), Some("user: hi"));
        assert!(
            with.starts_with("The conversation that asks you this")
                && with.ends_with("Your task:\nfind x")
        );
        let history = vec![
            AgentMessage::user_text("first"),
            AgentMessage::user_text("y".repeat(10_000)),
            AgentMessage::user_text("latest"),
        ];
        let e = excerpt(&history);
        assert!(
            e.ends_with("user: latest") && e.len() <= EXCERPT_BYTES,
            "{e}"
        );
    }
}
