//! `run_agent_turn`: the agent loop, in the order docs/design.md gives.
//!
//! ```text
//! first: answer the calls a paused turn left pending (client results, approvals)
//! loop:
//!   check limits; resolve the provider (a change emits ProviderSwitch)
//!   compact if the history is too long; convert it for the LLM, hand it over, transform
//!   recite the plan; call the LLM, streaming its events through
//!   store the answer (on_message), on_step_end (false stops)
//!   no tool calls: drain the queues at the end; nothing there ends the turn
//!   for each tool call: drain steering first (a message skips the rest), then run it;
//!   client tools and unapproved calls pause the turn
//! ```
//!
//! The tool calls of a step are run by [`super::tool_calls`].

use std::future::Future;
use std::pin::Pin;

use super::estimate::{
    block_tokens, charge_unreported, estimate_tokens, message_tokens, tool_tokens,
};
use super::output::{Answering, Settled};
use super::resolve::{AttemptLedger, CallSize, ProviderResolver, Resolved, ResolverBilling};
use super::state::{add_message, deadline_passed, inject, TurnOutcome};
use super::tool_calls::{error_result, CANCELLED};
use super::{AgentEvent, AgentMessage, AgentState, StepEndInfo, ToolRegistry, TurnHooks};
use crate::llm::transform::prepare_for;
use crate::llm::{LlmError, LlmEvent, LlmRequest, Message, ModelRef, StopReason, ToolCall};
use async_trait::async_trait;

/// The result content given to pending calls when the user sends a new message instead.
pub const MOVED_ON: &str = "no result: the user moved on";

/// The turn's hooks as the ledger of attempts given up on (`on_unstored_call`).
struct HooksLedger<'a>(&'a dyn TurnHooks);

#[async_trait(?Send)]
impl AttemptLedger for HooksLedger<'_> {
    async fn record(&self, attempt: &crate::llm::AssistantMessage) {
        charge_unstored(self.0, attempt).await;
    }
}

/// Rewrites the LLM's view of the history before a call (compaction, recitation).
#[async_trait(?Send)]
pub trait ContextTransform {
    async fn transform(&self, messages: Vec<Message>) -> Vec<Message>;
}

/// Runs one turn on `state`, reporting through `emit` as it goes.
pub async fn run_agent_turn(
    resolver: &dyn ProviderResolver,
    state: &mut AgentState,
    tools: &ToolRegistry,
    transform: Option<&dyn ContextTransform>,
    hooks: &dyn TurnHooks,
    emit: &mut dyn FnMut(AgentEvent<'_>),
) -> TurnOutcome {
    let started = web_time::Instant::now();
    let mut previous: Option<ModelRef> = resolver.intended();
    // A paused turn resumes with the calls its last answer left without results.
    let mut pending = pending_calls(&state.messages);
    // The tools offered to the call that made `pending` (`None`: a paused turn's calls).
    let mut offered: Option<Vec<String>> = None;
    let mut answering = state.output.clone().map(Answering::new);
    loop {
        if !pending.is_empty() {
            // Behind a `dyn Future`: the tool machinery then stays a function of its own rather
            // than being inlined into this loop, and a Worker compiles it (V8 compiles a wasm
            // function whole) only for turns that call tools.
            let allowed = super::tool_calls::Offered {
                tools,
                names: offered.as_deref(),
            };
            let tools_run: Pin<Box<dyn Future<Output = Option<TurnOutcome>> + '_>> = Box::pin(
                super::tool_calls::run_tools(&pending, state, &allowed, hooks, emit, started),
            );
            if let Some(paused) = tools_run.await {
                return paused;
            }
            // Calls that need no reply, made alongside an answer, that went through: the answer
            // stands. (One that failed is the model's to read and act on.)
            let went_through = |call: &ToolCall| {
                state.messages.iter().rev().any(|m| {
                    matches!(m, AgentMessage::ToolResult(r) if r.tool_call_id == call.id && !r.is_error)
                })
            };
            let answered = answering.is_none()
                && pending
                    .iter()
                    .all(|c| tools.quiet(&c.name) && went_through(c))
                && state.messages.iter().rev().find_map(|m| match m {
                    AgentMessage::Assistant(a) => Some(!a.text().trim().is_empty()),
                    _ => None,
                }) == Some(true);
            pending.clear();
            // A message that arrived during the last tool joins before the next call.
            let steering = state.queues.drain_steering().await;
            if !steering.is_empty() {
                inject(state, hooks, emit, &[], steering).await;
            } else if answered {
                // Ends as an answer without calls does: with the follow-ups, if any.
                let waiting = state.queues.drain_at_end().await;
                if waiting.is_empty() {
                    done(state, emit);
                    return TurnOutcome::Completed;
                }
                inject(state, hooks, emit, &[], waiting).await;
            }
        }
        if state.cancel.is_cancelled() {
            return TurnOutcome::Cancelled;
        }
        // A typed answer's repair call runs with tools off, and so does one step past the
        // limit when the steps ran out on a tool call: an answer is always attempted.
        let at_limit = state.llm_calls >= state.max_llm_calls;
        let past_limit = at_limit && answering.as_mut().is_some_and(Answering::past_limit);
        let tools_off = past_limit || answering.as_ref().is_some_and(Answering::repairing);
        let limit = if at_limit && !past_limit {
            Some(format!(
                "stopped after {} LLM calls in one turn (MAX_LLM_CALLS)",
                state.max_llm_calls
            ))
        } else {
            deadline_passed(state, started)
        };
        if let Some(message) = limit {
            emit(AgentEvent::Error {
                message: message.clone(),
                public: message.clone(),
                is_retryable: false,
            });
            return TurnOutcome::LimitReached(message);
        }

        // Old exchanges a summary does not cover are left out of this call only.
        let mut hidden = 0..0;
        if let Some(compactor) = state.compactor.clone() {
            let ledger = HooksLedger(hooks);
            let began = web_time::Instant::now();
            if let Some(compaction) = compactor.compact(&state.messages, &ledger).await {
                // Its attempts given up on were recorded as they happened.
                for (model, usage) in &compaction.calls {
                    charge_call(hooks, model, usage).await;
                }
                if compaction.summary.is_some() {
                    emit(AgentEvent::Compacted {
                        duration_ms: began.elapsed().as_millis() as u64,
                    });
                    if let Err(e) = hooks.on_compaction(&compaction).await {
                        hooks.warn(&format!("on_compaction failed; the turn goes on: {e}"));
                    }
                }
                compaction.apply(&mut state.messages);
                hidden = compaction.hidden_after_apply();
            }
        }
        let mut definitions = tools.offered(&state.messages);
        if tools_off {
            definitions.clear();
        }
        offered = Some(definitions.iter().map(|d| d.name.clone()).collect());
        let system = hooks.system_prompt(state.system_prompt.as_deref()).await;
        let system = system.as_deref().or(state.system_prompt.as_deref());
        // What the call sends, estimated once if a resolver or a cut-short answer asks.
        let estimated = std::cell::OnceCell::new();
        let typed_tokens = answering.as_ref().map_or(0, Answering::extra_tokens);
        let input_tokens = || {
            *estimated.get_or_init(|| {
                let visible = state.messages[..hidden.start]
                    .iter()
                    .chain(&state.messages[hidden.end..]);
                typed_tokens
                    + system.map_or(0, estimate_tokens)
                    + visible
                        .map(|m| message_tokens(m, None))
                        .sum::<u64>()
                    + definitions
                        .iter()
                        .map(tool_tokens)
                        .sum::<u64>()
                    // The plan recited at the end of the call (written by the model: no cap).
                    + match super::plan::recitation(&state.plan.borrow()) {
                        Some(Message::User { content }) => content
                            .iter()
                            .map(|b| block_tokens(b, None))
                            .sum::<u64>(),
                        _ => 0,
                    }
            })
        };
        let size = CallSize {
            max_tokens: state.max_tokens,
            input_tokens: &input_tokens,
        };
        let Resolved {
            provider,
            max_tokens,
        } = match resolver.resolve(size).await {
            Ok(resolved) => resolved,
            Err(e) => return fail(hooks, emit, &e).await,
        };
        let model = provider.model().clone();
        // The typed answer's form for this provider: its tools (the answer tool joining them)
        // and its prompt; copied only for a typed answer.
        let mut watch = None;
        let typed_tools;
        let mut typed_system = None;
        let offered: &[crate::llm::ToolDef] = match answering.as_mut() {
            Some(answering) => {
                let mut with_answer = definitions.clone();
                let native = provider.capabilities().structured_output;
                match answering.begin_call(&model.provider, native, &mut with_answer, tools_off) {
                    Ok(w) => watch = Some(w),
                    Err(why) => return fail(hooks, emit, &LlmError::Config(why)).await,
                }
                typed_system = answering.system(system);
                typed_tools = with_answer;
                &typed_tools
            }
            None => &definitions,
        };
        let system = typed_system.as_deref().or(system);
        if let Some(from) = previous.as_ref().filter(|from| **from != model) {
            emit(AgentEvent::ProviderSwitch { from, to: &model });
        }

        // Normalised for this model: the history may come from another provider (handoff).
        let seen = if hidden.is_empty() {
            super::convert_to_llm(&state.messages)
        } else {
            let mut seen = super::convert_to_llm(&state.messages[..hidden.start]);
            seen.extend(super::convert_to_llm(&state.messages[hidden.end..]));
            seen
        };
        let mut history = prepare_for(seen, &model, &provider.capabilities());
        if let Some(t) = transform {
            history = t.transform(history).await;
        }
        if let Some(answering) = &answering {
            answering.extend_history(&mut history);
        }
        // Recited last, where the model attends most; never stored.
        if let Some(plan) = super::plan::recitation(&state.plan.borrow()) {
            history.push(plan);
        }
        state.llm_calls += 1;
        let step = state.llm_calls;
        emit(AgentEvent::StepStart {
            step,
            model: &model,
        });
        let call_ids = match state.call_id_nonce.as_str() {
            "" => format!("call_{step}_"),
            nonce => format!("call_{nonce}_{step}_"),
        };
        let ledger = HooksLedger(hooks);
        let billed = ResolverBilling {
            resolver,
            ledger: &ledger,
        };
        let request = LlmRequest {
            system,
            messages: &history,
            tools: offered,
            max_tokens,
            temperature: state.temperature,
            call_ids: &call_ids,
            billing: Some(&billed),
            answer: answering.as_ref().and_then(Answering::format),
        };
        let mut completion = provider
            .stream(&request, &mut |event| match event {
                // A fallback inside the provider is a provider switch like any other.
                LlmEvent::Fallback { from, to, .. } => {
                    emit(AgentEvent::ProviderSwitch { from, to })
                }
                other => {
                    emit(AgentEvent::Llm(other));
                    if let Some(watch) = watch.as_mut() {
                        watch.observe(other, emit);
                    }
                }
            })
            .await;
        drop(history);
        // Whatever the provider did not report is estimated (see `charge_unreported`).
        charge_unreported(&mut completion.message, input_tokens);
        resolver.settle(&completion.message).await;
        state.total_usage.add(&completion.message.usage);
        // Attempts a retry or a fallback gave up on were billed too, at their own models'
        // prices: charged and written to the ledger as they were given up on (`ResolverBilling`).
        for attempt in &completion.given_up {
            state.total_usage.add(&attempt.usage);
        }

        if state.cancel.is_cancelled() {
            // Keep what was said, marked aborted (never replayed to a model); its calls do not run.
            let mut partial = completion.message;
            partial.stop_reason = StopReason::Aborted;
            if let Some(answering) = &answering {
                answering.strip(&mut partial);
            }
            if partial.content.is_empty() {
                charge_unstored(hooks, &partial).await;
            } else {
                let calls: Vec<ToolCall> = partial.tool_calls().cloned().collect();
                add_message(state, hooks, AgentMessage::Assistant(partial)).await;
                for call in &calls {
                    add_message(
                        state,
                        hooks,
                        AgentMessage::ToolResult(error_result(call, CANCELLED)),
                    )
                    .await;
                }
            }
            return TurnOutcome::Cancelled;
        }

        if let Some(error) = completion.error {
            // Keep what was said before the failure; it is marked with stop reason `error`.
            if let Some(answering) = &answering {
                answering.strip(&mut completion.message);
            }
            if !completion.message.content.is_empty() {
                add_message(state, hooks, AgentMessage::Assistant(completion.message)).await;
            } else {
                charge_unstored(hooks, &completion.message).await;
            }
            return fail(hooks, emit, &error).await;
        }

        let mut answer = completion.message;
        // A typed answer: the end state kept on the message; an invalid one to repair is not
        // kept, only charged.
        let settled = match (answering.as_mut(), watch.as_mut()) {
            (Some(answering), Some(watch)) => answering.settle(&mut answer, watch, emit),
            _ => Settled::NotFinal,
        };
        if let Settled::Done(end) = &settled {
            answer.output = Some(end.clone());
        }
        if settled == Settled::Repair {
            charge_unstored(hooks, &answer).await;
        } else {
            add_message(state, hooks, AgentMessage::Assistant(answer.clone())).await;
        }
        if let Settled::Done(end) = &settled {
            emit(AgentEvent::Output(end));
        }
        emit(AgentEvent::StepEnd {
            step,
            message: &answer,
        });
        let info = StepEndInfo {
            step,
            usage: &answer.usage,
            model: &answer.model,
            provider: &answer.provider,
        };
        match hooks.on_step_end(info).await {
            Ok(true) => {}
            Ok(false) => {
                done(state, emit);
                return TurnOutcome::Stopped;
            }
            Err(e) => {
                let message = format!("on_step_end failed: {e}");
                emit(AgentEvent::Error {
                    message: message.clone(),
                    public: "the turn could not go on: a server hook failed".into(),
                    is_retryable: false,
                });
                return TurnOutcome::Failed {
                    message,
                    is_retryable: false,
                };
            }
        }
        previous = Some(model);
        if settled == Settled::Repair {
            continue;
        }

        pending = answer.tool_calls().cloned().collect();
        if pending.is_empty() {
            let waiting = state.queues.drain_at_end().await;
            if waiting.is_empty() {
                done(state, emit);
                return TurnOutcome::Completed;
            }
            inject(state, hooks, emit, &[], waiting).await;
        }
    }
}

/// A call that showed nothing but was paid for (attempts a retry gave up on, a prompt read before
/// a failure): no message stores it, so its cost gets a ledger row of its own.
async fn charge_unstored(hooks: &dyn TurnHooks, answer: &crate::llm::AssistantMessage) {
    charge_call(hooks, &answer.model_ref(), &answer.usage).await;
}

/// A paid call's ledger row (`on_unstored_call`), unless it used nothing; a failure is logged
/// and the turn goes on (the hook stops it at its next step's end).
async fn charge_call(hooks: &dyn TurnHooks, model: &ModelRef, usage: &crate::llm::Usage) {
    if *usage == crate::llm::Usage::default() {
        return;
    }
    if let Err(e) = hooks.on_unstored_call(model, usage).await {
        hooks.warn(&format!(
            "a paid call's ledger row was not written; the turn goes on: {e}"
        ));
    }
}

/// The tool calls of the last answer that have no result yet, unless the user has spoken since
/// (then they were abandoned, and the handoff transform answers them for the model).
pub fn pending_calls(messages: &[AgentMessage]) -> Vec<ToolCall> {
    let Some(at) = messages
        .iter()
        .rposition(|m| matches!(m, AgentMessage::Assistant(_)))
    else {
        return vec![];
    };
    let AgentMessage::Assistant(answer) = &messages[at] else {
        return vec![];
    };
    let after = &messages[at + 1..];
    if after.iter().any(|m| matches!(m, AgentMessage::User { .. })) {
        return vec![];
    }
    // An answer that failed, was cancelled or interrupted is never replayed to a model: its
    // calls (perhaps half-written) never run and wait for nothing.
    if matches!(
        answer.stop_reason,
        StopReason::Error | StopReason::Aborted | StopReason::Interrupted
    ) {
        return vec![];
    }
    answer
        .tool_calls()
        .filter(|c| {
            !after
                .iter()
                .any(|m| matches!(m, AgentMessage::ToolResult(r) if r.tool_call_id == c.id))
        })
        .cloned()
        .collect()
}

fn done(state: &AgentState, emit: &mut dyn FnMut(AgentEvent<'_>)) {
    let final_text = state.final_text();
    emit(AgentEvent::Done {
        final_text: &final_text,
        total_steps: state.llm_calls,
        total_usage: state.total_usage,
    });
}

async fn fail(
    hooks: &dyn TurnHooks,
    emit: &mut dyn FnMut(AgentEvent<'_>),
    error: &LlmError,
) -> TurnOutcome {
    let message = error.to_string();
    let is_retryable = error.is_retryable();
    // Ignored by rule: a failing error hook must not hide the original error.
    let _ = hooks.on_error(&message, is_retryable).await;
    emit(AgentEvent::Error {
        message: message.clone(),
        public: error.public_message(),
        is_retryable,
    });
    TurnOutcome::Failed {
        message,
        is_retryable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{AssistantMessage, ContentBlock, Usage};

    fn cut_short(usage: Usage) -> AssistantMessage {
        AssistantMessage {
            content: vec![ContentBlock::Text {
                text: "x".repeat(400),
            }],
            stop_reason: StopReason::Aborted,
            model: "m".into(),
            provider: "p".into(),
            usage,
            output: None,
        }
    }

    #[test]
    fn an_answer_cut_short_without_usage_is_charged_from_estimates() {
        // OpenAI: nothing reported before the cut.
        let mut answer = cut_short(Usage::default());
        charge_unreported(&mut answer, || 1_200);
        assert_eq!(
            (answer.usage.input_tokens, answer.usage.output_tokens),
            (1_200, 100)
        );
        assert!(answer.usage.estimated);
        // Anthropic: input reported at the start, output only at the end.
        let mut answer = cut_short(Usage {
            input_tokens: 900,
            output_tokens: 1,
            ..Usage::default()
        });
        charge_unreported(&mut answer, || unreachable!("input was reported"));
        assert_eq!(
            (answer.usage.input_tokens, answer.usage.output_tokens),
            (900, 100)
        );
        assert!(answer.usage.estimated);
        // Nothing streamed (refused before any work): nothing is charged.
        let mut refused = cut_short(Usage::default());
        refused.content.clear();
        charge_unreported(&mut refused, || unreachable!());
        assert_eq!(refused.usage, Usage::default());
        // Everything reported: nothing changes.
        let reported = Usage {
            input_tokens: 900,
            output_tokens: 150,
            ..Usage::default()
        };
        let mut answer = cut_short(reported);
        charge_unreported(&mut answer, || unreachable!());
        assert_eq!(answer.usage, reported);
    }

    #[test]
    fn a_finished_answer_without_usage_is_charged_from_estimates_too() {
        // Issue 56: a server that never reports usage made its answers free.
        let mut answer = cut_short(Usage::default());
        answer.stop_reason = StopReason::EndTurn;
        charge_unreported(&mut answer, || 1_200);
        assert_eq!(
            (answer.usage.input_tokens, answer.usage.output_tokens),
            (1_200, 100)
        );
        assert!(answer.usage.estimated);
        // An empty answer still read its prompt.
        let mut empty = cut_short(Usage::default());
        empty.stop_reason = StopReason::EndTurn;
        empty.content.clear();
        charge_unreported(&mut empty, || 1_200);
        assert_eq!(
            (empty.usage.input_tokens, empty.usage.output_tokens),
            (1_200, 0)
        );
        // What a finished answer reported is what it cost, even below the estimate.
        let reported = Usage {
            input_tokens: 900,
            output_tokens: 40,
            ..Usage::default()
        };
        let mut answer = cut_short(reported);
        answer.stop_reason = StopReason::EndTurn;
        charge_unreported(&mut answer, || unreachable!());
        assert_eq!(answer.usage, reported);
        // An interrupted answer (the runtime died under it) is cut short.
        let mut interrupted = cut_short(Usage {
            input_tokens: 900,
            output_tokens: 1,
            ..Usage::default()
        });
        interrupted.stop_reason = StopReason::Interrupted;
        charge_unreported(&mut interrupted, || unreachable!());
        assert_eq!(interrupted.usage.output_tokens, 100);
    }
}
