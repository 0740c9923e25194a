//! A step's tool calls: run in the order the model made them, a steering check before each
//! (a message from the user skips the rest), limits and approvals applied, consecutive calls
//! to tools that allow it run together, and client tools and unapproved calls left for the
//! client, which pauses the turn. Every call keeps a result: one that did not run gets an
//! error result saying why.

use serde_json::Value;

use super::state::{add_message, deadline_passed, inject, TurnOutcome};
use super::tools::Ran;
use super::{AgentEvent, AgentMessage, AgentState, ToolKind, ToolRegistry, TurnHooks};
use crate::llm::{ToolCall, ToolResult};

/// The result content of a tool call not run because the turn was cancelled.
pub const CANCELLED: &str = "not run: the turn was cancelled";

/// The result content of a tool call skipped because the user sent a new message.
pub const SKIPPED_FOR_STEERING: &str = "skipped: the user sent a new message";

/// The result content of a tool call a person did not approve (a reason may follow).
pub const DENIED: &str = "denied: the user did not approve this call";

/// The tools a step's calls may run: those offered to the call that made them (`offered`; a
/// model that names another, one a narrowed conversation left out, gets "unknown tool"), or,
/// for calls a paused turn resumes, every registered one.
pub(super) struct Offered<'a> {
    pub tools: &'a ToolRegistry,
    pub names: Option<&'a [String]>,
}

impl Offered<'_> {
    fn classify(&self, name: &str) -> Option<ToolKind<'_>> {
        if self
            .names
            .is_some_and(|names| !names.iter().any(|n| n == name))
        {
            return None;
        }
        self.tools.classify(name)
    }
}

/// Runs one answer's tool calls in order, with a steering check before each. `Some` when the
/// turn must pause for client results or approvals.
pub(super) async fn run_tools(
    calls: &[ToolCall],
    state: &mut AgentState,
    tools: &Offered<'_>,
    hooks: &dyn TurnHooks,
    emit: &mut dyn FnMut(AgentEvent<'_>),
    started: web_time::Instant,
) -> Option<TurnOutcome> {
    let mut client_calls = Vec::new();
    let mut approvals = Vec::new();
    let mut i = 0;
    while i < calls.len() {
        let call = &calls[i];
        i += 1;
        if state.cancel.is_cancelled() {
            for call in &calls[i - 1..] {
                add_message(
                    state,
                    hooks,
                    AgentMessage::ToolResult(error_result(call, CANCELLED)),
                )
                .await;
            }
            return Some(TurnOutcome::Cancelled);
        }
        let steering = state.queues.drain_steering().await;
        if !steering.is_empty() {
            let skipped = &calls[i - 1..];
            for call in skipped {
                let result = error_result(call, SKIPPED_FOR_STEERING);
                add_message(state, hooks, AgentMessage::ToolResult(result)).await;
            }
            inject(state, hooks, emit, skipped, steering).await;
            return None;
        }
        // Past a limit, the remaining calls are answered with why they did not run, so the
        // model sees it and every call keeps a result.
        let refusal = if let Some(message) = deadline_passed(state, started) {
            Some(format!("not run: {message}"))
        } else if state.tool_calls >= state.max_tool_calls {
            Some(format!(
                "not run: {} tool calls were made in this turn (MAX_TOOL_CALLS)",
                state.max_tool_calls
            ))
        } else {
            None
        };
        if let Some(message) = refusal {
            fail_call(state, hooks, emit, call, message).await;
            continue;
        }
        // Consecutive calls to tools that allow it run together (within MAX_TOOL_CALLS).
        let room = state.max_tool_calls.saturating_sub(state.tool_calls) as usize;
        let batch_end = (i - 1..calls.len())
            .take(room)
            .take_while(|&j| concurrent(tools, &calls[j]))
            .last()
            .map_or(i - 1, |j| j + 1);
        if batch_end > i {
            let waiting =
                run_concurrently(&calls[i - 1..batch_end], state, tools, hooks, emit).await;
            approvals.extend(waiting);
            i = batch_end;
            continue;
        }
        let mut ran = After::Done;
        match tools.classify(&call.name) {
            Some(ToolKind::Server(tool)) => ran = execute(tool, call, state, hooks, emit).await,
            Some(ToolKind::NeedsApproval(tool)) => match state.answers.approvals.remove(&call.id) {
                Some(decision) if decision.approved => {
                    ran = execute(tool, call, state, hooks, emit).await
                }
                Some(decision) => {
                    emit(AgentEvent::ToolDenied {
                        call,
                        reason: decision.reason.as_deref(),
                    });
                    let message = match &decision.reason {
                        Some(reason) => format!("{DENIED}: {reason}"),
                        None => DENIED.to_string(),
                    };
                    add_message(
                        state,
                        hooks,
                        AgentMessage::ToolResult(error_result(call, &message)),
                    )
                    .await;
                }
                None => approvals.push(call.clone()),
            },
            Some(ToolKind::Client(_)) => match state.answers.results.remove(&call.id) {
                Some((content, is_error)) => {
                    let result = ToolResult {
                        tool_call_id: call.id.clone(),
                        tool_name: call.name.clone(),
                        content,
                        is_error,
                    };
                    add_message(state, hooks, AgentMessage::ToolResult(result)).await;
                }
                None => client_calls.push(call.clone()),
            },
            None => {
                fail_call(
                    state,
                    hooks,
                    emit,
                    call,
                    format!("unknown tool `{}`", call.name),
                )
                .await
            }
        }
        match ran {
            After::Done => {}
            After::Waiting(calls) => approvals.extend(calls),
            // The calls after it are another agent's to make, or not.
            // The calls after it, and those before it still waiting for a person or the
            // client, are another agent's to make, or not: each gets a result saying so (a
            // sub-agent's waiting call is not the history's: the call that ran it stays open).
            After::HandOff(to) => {
                let waiting: Vec<ToolCall> = approvals
                    .drain(..)
                    .filter(|c| !c.id.contains(super::tools::NESTED))
                    .chain(client_calls.drain(..))
                    .collect();
                for call in waiting.iter().chain(&calls[i..]) {
                    let message =
                        format!("not run: the conversation was handed to the agent `{to}`");
                    fail_call(state, hooks, emit, call, message).await;
                }
                return Some(TurnOutcome::HandedOff(to));
            }
        }
    }
    if !approvals.is_empty() {
        emit(AgentEvent::ApprovalRequest { calls: &approvals });
    }
    if !client_calls.is_empty() {
        emit(AgentEvent::ClientToolRequest {
            calls: &client_calls,
        });
    }
    if !approvals.is_empty() {
        Some(TurnOutcome::AwaitingApproval(approvals))
    } else if !client_calls.is_empty() {
        Some(TurnOutcome::AwaitingToolResults(client_calls))
    } else {
        None
    }
}

fn concurrent(tools: &Offered<'_>, call: &ToolCall) -> bool {
    matches!(tools.classify(&call.name), Some(ToolKind::Server(tool)) if tool.concurrent())
}

/// Runs several concurrent-safe server tools at once; records their results in call order.
/// The calls those that wait need approved.
async fn run_concurrently(
    calls: &[ToolCall],
    state: &mut AgentState,
    tools: &Offered<'_>,
    hooks: &dyn TurnHooks,
    emit: &mut dyn FnMut(AgentEvent<'_>),
) -> Vec<ToolCall> {
    let decided: Vec<_> = calls.iter().map(|c| decisions(state, &c.id)).collect();
    let runs =
        calls
            .iter()
            .zip(decided)
            .filter_map(|(call, decided)| match tools.classify(&call.name) {
                Some(ToolKind::Server(tool)) => Some(invoke(tool, call, state, decided)),
                _ => None,
            });
    let outcomes = futures::future::join_all(runs).await;
    let mut waiting = Vec::new();
    for (call, invoked) in calls.iter().zip(outcomes) {
        state.tool_calls += 1;
        match invoked {
            Invoked::Done(output, is_error, duration_ms) => {
                record(call, output, is_error, duration_ms, state, hooks, emit).await
            }
            Invoked::Waiting(calls) => waiting.extend(calls),
            // A tool that hands over runs alone (it is not `concurrent`).
            Invoked::HandOff(output, duration_ms, _) => {
                record(call, output, false, duration_ms, state, hooks, emit).await
            }
        }
    }
    waiting
}

/// The decisions a person made on calls made within call `id` (a sub-agent's), taken out of
/// the turn's answers.
fn decisions(state: &mut AgentState, id: &str) -> Vec<(String, super::Approval)> {
    let prefix = format!("{id}{}", super::tools::NESTED);
    let approvals = &mut state.answers.approvals;
    let mut ids: Vec<String> = approvals
        .keys()
        .filter(|k| k.starts_with(&prefix))
        .cloned()
        .collect();
    ids.sort_unstable();
    ids.into_iter()
        .filter_map(|k| approvals.remove(&k).map(|a| (k, a)))
        .collect()
}

/// What follows a server tool's call.
enum After {
    Done,
    /// The calls it waits to have approved.
    Waiting(Vec<ToolCall>),
    /// The agent it handed the conversation to.
    HandOff(String),
}

/// Runs a server tool (arguments checked, timeout applied) and records its result.
async fn execute(
    tool: &dyn super::ServerTool,
    call: &ToolCall,
    state: &mut AgentState,
    hooks: &dyn TurnHooks,
    emit: &mut dyn FnMut(AgentEvent<'_>),
) -> After {
    state.tool_calls += 1;
    let decided = decisions(state, &call.id);
    match invoke(tool, call, state, decided).await {
        Invoked::Done(output, is_error, duration_ms) => {
            record(call, output, is_error, duration_ms, state, hooks, emit).await;
            After::Done
        }
        Invoked::Waiting(calls) => After::Waiting(calls),
        Invoked::HandOff(output, duration_ms, to) => {
            record(call, output, false, duration_ms, state, hooks, emit).await;
            After::HandOff(to)
        }
    }
}

/// How one tool call went.
enum Invoked {
    /// Its output, whether it is an error, its duration in ms.
    Done(Value, bool, u64),
    /// It waits for these calls to be approved.
    Waiting(Vec<ToolCall>),
    /// Its output and duration, and the agent it hands the conversation to.
    HandOff(Value, u64, String),
}

async fn invoke(
    tool: &dyn super::ServerTool,
    call: &ToolCall,
    state: &AgentState,
    decided: Vec<(String, super::Approval)>,
) -> Invoked {
    let tool_started = web_time::Instant::now();
    let ran = match checked_arguments(call, &tool.definition().input_schema) {
        Ok(arguments) if tool.bounds_own_time() => tool.run(&call.id, arguments, decided).await,
        Ok(arguments) => {
            run_with_timeout(tool.run(&call.id, arguments, decided), state, &call.name).await
        }
        Err(e) => Ran::Done(Err(e)),
    };
    let duration_ms = tool_started.elapsed().as_millis() as u64;
    match ran {
        Ran::Done(Ok(output)) => Invoked::Done(output, false, duration_ms),
        Ran::Done(Err(message)) => Invoked::Done(Value::String(message), true, duration_ms),
        Ran::Waiting(calls) => Invoked::Waiting(calls),
        Ran::HandOff { output, to } => Invoked::HandOff(output, duration_ms, to),
    }
}

/// Reports a finished call and stores its result.
async fn record(
    call: &ToolCall,
    output: Value,
    is_error: bool,
    duration_ms: u64,
    state: &mut AgentState,
    hooks: &dyn TurnHooks,
    emit: &mut dyn FnMut(AgentEvent<'_>),
) {
    emit(AgentEvent::ToolExecution {
        call,
        output: &output,
        is_error,
        duration_ms,
    });
    let result = ToolResult {
        tool_call_id: call.id.clone(),
        tool_name: call.name.clone(),
        content: match output {
            Value::String(s) => s,
            other => other.to_string(),
        },
        is_error,
    };
    add_message(state, hooks, AgentMessage::ToolResult(result)).await;
}

/// A call that did not run: reported and recorded as an error result.
async fn fail_call(
    state: &mut AgentState,
    hooks: &dyn TurnHooks,
    emit: &mut dyn FnMut(AgentEvent<'_>),
    call: &ToolCall,
    message: String,
) {
    let output = Value::String(message);
    emit(AgentEvent::ToolExecution {
        call,
        output: &output,
        is_error: true,
        duration_ms: 0,
    });
    let message = output.as_str().unwrap_or_default();
    add_message(
        state,
        hooks,
        AgentMessage::ToolResult(error_result(call, message)),
    )
    .await;
}

/// The call's arguments if they are an object that fits the tool's schema, else a message that
/// tells the model what to fix.
fn checked_arguments<'c>(
    call: &'c ToolCall,
    schema: &Value,
) -> Result<&'c serde_json::Map<String, Value>, String> {
    let arguments = call.arguments()?;
    let problems = super::schema::validate(schema, &call.input);
    if problems.is_empty() {
        Ok(arguments)
    } else {
        Err(format!(
            "invalid arguments for `{}`: {}. Fix them and call the tool again.",
            call.name,
            problems.join("; ")
        ))
    }
}

/// Runs a tool, giving up after `TOOL_TIMEOUT_MS` when a timer is available.
async fn run_with_timeout(
    call: impl std::future::Future<Output = Ran>,
    state: &AgentState,
    name: &str,
) -> Ran {
    let (Some(timer), Some(ms)) = (&state.timer, state.tool_timeout_ms) else {
        return call.await;
    };
    let call = std::pin::pin!(call);
    let timeout = std::pin::pin!(timer.sleep(ms));
    match futures::future::select(call, timeout).await {
        futures::future::Either::Left((result, _)) => result,
        futures::future::Either::Right(_) => Ran::Done(Err(format!(
            "`{name}` did not finish within {ms} ms (TOOL_TIMEOUT_MS)"
        ))),
    }
}

/// The error result of a call that did not run, saying why.
pub(crate) fn error_result(call: &ToolCall, message: &str) -> ToolResult {
    ToolResult {
        tool_call_id: call.id.clone(),
        tool_name: call.name.clone(),
        content: message.to_string(),
        is_error: true,
    }
}
