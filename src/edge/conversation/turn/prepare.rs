//! Preparing a turn: the history loaded once (with the budget, in the same round trip), the
//! kickoff applied, the queued messages moved into D1.

use super::files::{discard, file_ids};
use super::hooks::PendingWrite;
use super::{remote_tools, Kickoff, Prepared, Ready, Start, TurnEnv};
use crate::agent::output::OutputSpec;
use crate::agent::{pending_calls, AgentMessage, Approval, ToolAnswers, MOVED_ON};
use crate::edge::conversation::rules;
use crate::edge::conversation::rules::Recovery;
use crate::edge::d1::conversations::Remembered;
use crate::edge::d1::history::CreateRow;
use crate::edge::d1::{BudgetRead, Conversation, TurnHistory};
use crate::edge::error::ApiError;
use crate::edge::platform::clock::now_ms;
use crate::edge::protocol::{ApprovalIn, ToolResultIn, TurnConversation};
use crate::llm::{ModelRef, Provider, ToolDef, ToolResult};
use futures::channel::oneshot;
use std::collections::HashSet;
use std::rc::Rc;
use worker::{console_error, wasm_bindgen_futures, AbortSignal};

/// Loads what the model will see (once), applies the kickoff and moves the queued messages and
/// the turn's own into D1. `signal` is the turn's: it stops the MCP servers' listing too.
pub async fn prepare(
    turn_env: &TurnEnv,
    conversation: &TurnConversation,
    start: Start,
    client_tools: Vec<ToolDef>,
    (model, provider): (ModelRef, Rc<dyn Provider>),
    signal: &AbortSignal,
) -> Result<Ready, ApiError> {
    let Start {
        kickoff,
        queued,
        own,
        narrowed,
        output,
        settled,
        create,
        create_within,
        first_call,
    } = start;
    let own_id = own.as_ref().map(|(id, _, _)| id.clone());
    let agent = conversation.agent(&turn_env.config)?.clone();
    // The message's typed answer (checked when it came), else its agent's. One kept with a
    // turn that a later deployment reads no more is said and left: a recovery must go on.
    let output_raw = output;
    let asked = output_raw
        .as_ref()
        .and_then(|raw| match OutputSpec::parse(raw) {
            Ok(spec) => Some(Rc::new(spec)),
            Err(e) => {
                console_error!("a turn's kept typed answer is no longer read: {e}");
                None
            }
        });
    let output = asked.or_else(|| agent.output.clone());
    let store = &turn_env.store;
    let id = conversation.id.as_str();
    if matches!(kickoff, Kickoff::Retry) {
        let retried = store.supersede_after_last_user(id).await?;
        if !retried && turn_env.storage.queue_len(None)? == 0 {
            return Err(ApiError::Conflict(format!(
                "conversation `{id}` has no user message to retry"
            )));
        }
    }
    // The queue moves into D1; each message leaves the queue only once it is stored.
    let mut incoming: Vec<_> = queued
        .into_iter()
        .filter_map(|row| {
            let message = turn_env.storage.read(&row)?;
            Some((row.id, message, Some(row.seq)))
        })
        .collect();
    incoming.extend(own);
    // New messages join the history in the round trip that loads it, unless calls may wait for
    // answers: those are answered (for the record) before a message follows them.
    let together = settled && matches!(kickoff, Kickoff::Queued) && !incoming.is_empty();
    // They are written alongside the read and the model's call, not before them: they are safe
    // in the object's inbox until they are in D1. Only a new chat's first message is stored
    // with the read, which learns whether its conversation may be made.
    let alongside = together && create_within.is_none();
    let stored_first: Vec<(&str, &AgentMessage)> = if together && !alongside {
        incoming.iter().map(|(i, m, _)| (i.as_str(), m)).collect()
    } else {
        Vec::new()
    };
    let left_out: Vec<&str> = if alongside {
        incoming.iter().map(|(i, _, _)| i.as_str()).collect()
    } else {
        Vec::new()
    };
    // An indexed conversation's messages are indexed as they are written: the index must be
    // there first (made once per isolate and database).
    if conversation.memory == Remembered::Indexed {
        if let Err(e) = store.ensure_recall().await {
            console_error!("making the recall index: {e}; this turn's messages are not indexed");
        }
    }
    let writing = alongside.then(|| write_alongside(turn_env, id, create.clone(), &incoming));
    // With budgets on, the owner's is read in the same round trip as the history.
    let budget_read = turn_env.config.user_budget_usd.map(|limit| BudgetRead {
        owner: &conversation.owner,
        default: (limit, turn_env.config.budget_period),
    });
    // What recall looks for: the turn's newest message of the user's own (its id and text).
    let asked: Option<(String, String)> = incoming
        .iter()
        .rev()
        .find_map(|(id, m, _)| Some((id.clone(), m.user_said()?)));
    // The MCP servers' tools are listed (when the isolate's lists are stale) and memory is read
    // while the history loads, not after it.
    let ((history, mcp), memory) = futures::future::join(
        futures::future::join(
            store.turn_history(
                id,
                create.as_ref().filter(|_| !alongside).map(|row| CreateRow {
                    row,
                    within: create_within,
                }),
                &stored_first,
                budget_read,
                &left_out,
                now_ms(),
            ),
            remote_tools::list(&turn_env.config, id, signal),
        ),
        super::memory::load(
            turn_env,
            conversation,
            &agent,
            asked
                .as_ref()
                .map(|(id, text)| (id.as_str(), text.as_str())),
        ),
    )
    .await;
    let TurnHistory {
        mut seqs,
        messages: mut history,
        artifacts,
        budget,
        refused,
    } = history?;
    drop(stored_first);
    drop(left_out);
    // A message stored before a crash left it in the inbox is in what was read: stored again
    // (a repeat is harmless), it must not reach the model twice. A new row's `seq` is past
    // every row there is.
    let newest_read = seqs.iter().flatten().max().copied();
    let mut pending = None;
    let mut taken = HashSet::new();
    if let Some(stored) = writing {
        // The loop does not take them from the queue again while they are on their way.
        pending = Some(PendingWrite {
            stored,
            at: history.len(),
        });
        for (_, message, queue_seq) in incoming.drain(..) {
            taken.extend(queue_seq);
            history.push(message);
            seqs.push(None);
        }
    }
    if let (true, Some(max)) = (refused, create_within) {
        // Nothing of it was stored, and nothing of it is kept: its files neither.
        for (_, _, queue_seq) in &incoming {
            if let Some(queue_seq) = queue_seq {
                turn_env.storage.dequeue(*queue_seq)?;
            }
        }
        turn_env.storage.forget_conversation()?;
        discard(turn_env, &file_ids(incoming.iter().map(|(_, m, _)| m))).await;
        return Err(store.refused_conversation(&conversation.owner, max).await);
    }
    if together {
        for (_, _, queue_seq) in incoming.drain(..) {
            if let Some(queue_seq) = queue_seq {
                turn_env.storage.dequeue(queue_seq)?;
            }
        }
    }
    let mut answers = ToolAnswers::default();
    let mut recovered = Vec::new();
    match kickoff {
        Kickoff::Queued | Kickoff::Retry => {}
        Kickoff::Resume {
            results,
            approvals,
            only_pending,
        } => {
            // The calls the pause keeps as waiting: a sub-agent's are in no history.
            let waiting: Vec<String> = turn_env
                .storage
                .waiting()?
                .into_iter()
                .map(|c| c.id)
                .collect();
            let pending = (pending_ids(&history), waiting);
            answers = resume_answers(&pending, results, approvals, only_pending)?;
        }
        Kickoff::Recover { partial } => match rules::recovery(&history, partial, &|name| {
            agent.agent_tools.iter().any(|t| t.name == name)
        }) {
            Recovery::Answered => return Ok(Ready::Nothing),
            Recovery::Continue(messages) => recovered = messages,
            Recovery::Closed(messages) => {
                for m in messages {
                    super::partial::store_recovered(turn_env, conversation, &history, m).await?;
                }
                return Ok(Ready::Nothing);
            }
        },
        Kickoff::GiveUp { partial } => {
            let messages = match rules::recovery(&history, partial, &|_| false) {
                Recovery::Answered => vec![],
                Recovery::Continue(messages) | Recovery::Closed(messages) => messages,
            };
            for m in messages.into_iter().chain([rules::given_up_note()]) {
                super::partial::store_recovered(turn_env, conversation, &history, m).await?;
            }
            return Ok(Ready::GivenUp);
        }
    }
    // The interrupted answer is charged as it is stored (what was reported, the rest estimated).
    for message in recovered {
        let (seq, message) =
            super::partial::store_recovered(turn_env, conversation, &history, message).await?;
        seqs.push(Some(seq));
        history.push(message);
    }

    // A new user message (or a schedule's instruction) instead of the answers a paused turn
    // waits for: the open calls are answered for the record, so every call keeps a result.
    if incoming.iter().any(|(_, m, _)| {
        matches!(
            m,
            AgentMessage::User { .. }
                | AgentMessage::SystemEvent {
                    schedule: Some(_),
                    ..
                }
        )
    }) {
        for call in pending_calls(&history) {
            let result = AgentMessage::ToolResult(ToolResult {
                tool_call_id: call.id,
                tool_name: call.name,
                content: MOVED_ON.to_string(),
                is_error: true,
            });
            let seq = store.append_new(id, &result).await?;
            history.push(result);
            seqs.push(Some(seq));
        }
    }
    for (message_id, message, queue_seq) in incoming {
        let seq = store
            .append_message(id, &message_id, &message, now_ms())
            .await?;
        if let Some(queue_seq) = queue_seq {
            turn_env.storage.dequeue(queue_seq)?;
        }
        if rules::stored_before(seq, newest_read) {
            continue;
        }
        history.push(message);
        seqs.push(Some(seq));
    }
    // The toolsets the message or the conversation chose; an agent handed to takes them within
    // its own.
    let chosen_toolsets = narrowed.or_else(|| conversation.toolsets.clone());
    Ok(Ready::Run(Box::new(Prepared {
        pending,
        taken,
        conversation: conversation.clone(),
        model,
        provider,
        history,
        seqs,
        answers,
        client_tools,
        artifacts,
        budget,
        mcp,
        toolsets: agent.toolsets_within(chosen_toolsets.clone()),
        chosen_toolsets,
        output,
        output_raw,
        agent,
        first_call,
        own_id,
        new_chat: create_within.is_some(),
        memory,
    })))
}

/// Starts writing the turn's new messages (and the chat's row, unless it exists) as work of its
/// own; each leaves the inbox once it is in D1.
fn write_alongside(
    turn_env: &TurnEnv,
    conversation_id: &str,
    create: Option<Conversation>,
    incoming: &[(String, AgentMessage, Option<i64>)],
) -> oneshot::Receiver<Result<Vec<Option<i64>>, String>> {
    let (tx, rx) = oneshot::channel();
    let store = turn_env.store.clone();
    let storage = turn_env.storage.clone();
    let conversation_id = conversation_id.to_string();
    let messages: Vec<(String, AgentMessage)> = incoming
        .iter()
        .map(|(id, message, _)| (id.clone(), message.clone()))
        .collect();
    let queue_rows: Vec<i64> = incoming.iter().filter_map(|(_, _, row)| *row).collect();
    wasm_bindgen_futures::spawn_local(async move {
        let refs: Vec<(&str, &AgentMessage)> =
            messages.iter().map(|(id, m)| (id.as_str(), m)).collect();
        let stored = store
            .store_new(&conversation_id, create.as_ref(), &refs, now_ms())
            .await;
        if stored.is_ok() {
            for row in queue_rows {
                if let Err(e) = storage.dequeue(row) {
                    console_error!("dequeuing a stored message: {e}");
                }
            }
        }
        let _ = tx.send(stored.map_err(|e| e.to_string()));
    });
    rx
}

pub(super) fn pending_ids(history: &[AgentMessage]) -> Vec<String> {
    pending_calls(history).into_iter().map(|c| c.id).collect()
}

/// Answers for the calls in `pending` (those of the history, and the pause's nested ones: a
/// sub-agent's, `p1/c9`, which its parent passes on). Answers to other calls are a 409, or
/// dropped when the client repeats earlier outputs by design (`only_pending`); nothing left is
/// a 400.
pub(super) fn resume_answers(
    (pending, waiting): &(Vec<String>, Vec<String>),
    results: Vec<ToolResultIn>,
    approvals: Vec<ApprovalIn>,
    only_pending: bool,
) -> Result<ToolAnswers, ApiError> {
    let mut answers = ToolAnswers::default();
    // A call made within a pending call (a sub-agent's, `p1/c9`), as the pause keeps them.
    let nested = |id: &String| {
        id.split_once(crate::agent::tools::NESTED)
            .is_some_and(|(parent, _)| pending.iter().any(|p| p == parent))
            && waiting.contains(id)
    };
    let waits = |id: &String| -> Result<bool, ApiError> {
        match (pending.contains(id) || nested(id), only_pending) {
            (true, _) => Ok(true),
            (false, true) => Ok(false),
            (false, false) => Err(ApiError::Conflict(format!(
                "tool call `{id}` is not waiting for an answer (unknown, or already answered)"
            ))),
        }
    };
    for r in results {
        if waits(&r.tool_call_id)? {
            let content = match r.output {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            };
            answers
                .results
                .insert(r.tool_call_id, (content, r.is_error));
        }
    }
    for a in approvals {
        if waits(&a.tool_call_id)? {
            let approval = Approval {
                approved: a.approved,
                reason: a.reason,
            };
            answers.approvals.insert(a.tool_call_id, approval);
        }
    }
    if answers == ToolAnswers::default() {
        return Err(ApiError::BadRequest(
            "nothing new: no answer is for a call the conversation waits on".into(),
        ));
    }
    Ok(answers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(id: &str, output: serde_json::Value) -> ToolResultIn {
        ToolResultIn {
            tool_call_id: id.into(),
            output,
            is_error: false,
        }
    }

    #[test]
    fn answers_are_taken_for_the_calls_a_turn_waits_on_only() {
        let pending = (
            vec!["call_a".to_string(), "call_b".to_string()],
            vec!["call_a/c9".to_string(), "call_b/c2/g1".to_string()],
        );
        let approval = ApprovalIn {
            tool_call_id: "call_b".into(),
            approved: false,
            reason: Some("not now".into()),
        };
        let answers = resume_answers(
            &pending,
            vec![result("call_a", serde_json::json!({"temp": 21}))],
            vec![approval.clone()],
            false,
        )
        .expect("both wait");
        // A JSON output reaches the model as its text; a string as it is.
        assert_eq!(answers.results["call_a"], ("{\"temp\":21}".into(), false));
        assert!(!answers.approvals["call_b"].approved);

        // An answer for a call nobody waits on is a conflict, unless the client repeats every
        // earlier output (`useChat`), when it is dropped.
        let stale = vec![result("call_old", serde_json::json!("done"))];
        assert!(matches!(
            resume_answers(&pending, stale.clone(), vec![], false),
            Err(ApiError::Conflict(_))
        ));
        let mut repeated = stale;
        repeated.push(result("call_a", serde_json::json!("sunny")));
        let answers = resume_answers(&pending, repeated, vec![], true).expect("one waits");
        assert_eq!(answers.results.len(), 1);
        assert_eq!(answers.results["call_a"].0, "sunny");
        // Nothing for a waiting call at all: nothing new.
        assert!(matches!(
            resume_answers(
                &pending,
                vec![result("call_old", serde_json::json!(1))],
                vec![],
                true
            ),
            Err(ApiError::BadRequest(_))
        ));
        // A decision on a call made within a waiting call (a sub-agent's) is its parent's to
        // pass on, at any depth; one under a call that waits for nothing is not.
        let nested = |id: &str| ApprovalIn {
            tool_call_id: id.into(),
            approved: true,
            reason: None,
        };
        let answers = resume_answers(
            &pending,
            vec![],
            vec![nested("call_a/c9"), nested("call_b/c2/g1")],
            false,
        )
        .expect("nested calls wait with their parents");
        assert!(
            answers.approvals["call_a/c9"].approved
                && answers.approvals.contains_key("call_b/c2/g1")
        );
        assert!(matches!(
            resume_answers(&pending, vec![], vec![nested("call_x/c9")], false),
            Err(ApiError::Conflict(_))
        ));
        // Nor one the pause does not keep as waiting.
        assert!(matches!(
            resume_answers(&pending, vec![], vec![nested("call_a/c8")], false),
            Err(ApiError::Conflict(_))
        ));
    }
}
