//! A finished turn as the JSON a `stream: false` request gets.

use super::TurnResult;
use crate::agent::{AgentMessage, TurnOutcome};
use crate::edge::config::Config;

impl TurnResult {
    /// The status and body a `stream: false` request gets: a typed answer's `{message_id,
    /// output, usage, cost_usd, finish_reason}` (422 when no valid object was made: invalid,
    /// or the turn ended without one), else [`TurnResult::into_json`]. A turn that paused
    /// answers as an untyped one: its answer is yet to come.
    pub fn into_answer(self, stream: &str, config: &Config) -> (u16, serde_json::Value) {
        let paused = matches!(
            self.outcome,
            TurnOutcome::AwaitingToolResults(_) | TurnOutcome::AwaitingApproval(_)
        );
        if !self.typed || paused {
            return (200, self.into_json(stream, config));
        }
        let end = match self.messages.last() {
            Some(AgentMessage::Assistant(a)) => a.output.clone(),
            _ => None,
        };
        let message_id = self.answer_id.clone();
        let Some(end) = end else {
            // Ended without an answer (failed, cancelled, at a limit): what the stream said.
            let json = self.into_json(stream, config);
            let why = match &json["error"] {
                serde_json::Value::Null => "the turn ended before its answer".into(),
                said => said.clone(),
            };
            let body = serde_json::json!({"error": {
                "code": crate::agent::output::answer::NO_OBJECT,
                "message": why,
                "finish_reason": json["finish_reason"],
            }});
            return (422, body);
        };
        if end["status"] == "complete" {
            let json = self.into_json(stream, config);
            let body = serde_json::json!({
                "message_id": message_id,
                "output": end["object"],
                "usage": json["usage"],
                "cost_usd": json["cost_usd"],
                "finish_reason": json["finish_reason"],
            });
            return (200, body);
        }
        let body = serde_json::json!({"error": {
            "code": crate::agent::output::answer::NO_OBJECT,
            "message": end["error"]["message"],
            "raw": end["raw"],
            "message_id": message_id,
        }});
        (422, body)
    }

    /// `{messages, events, usage, cost_usd, finish_reason, error}` for `stream: false`;
    /// `events` are the chunks the stream carried, so both modes say the same thing.
    pub fn into_json(self, stream: &str, config: &Config) -> serde_json::Value {
        let events: Vec<serde_json::Value> = stream
            .split("\n\n")
            .filter_map(|frame| frame.strip_prefix("data: "))
            .filter_map(|data| crate::llm::json::from_str(data).ok())
            .collect();
        let finish_reason = events
            .iter()
            .rev()
            .find(|e| e["type"] == "finish")
            .map(|e| e["finishReason"].clone())
            .unwrap_or(serde_json::Value::Null);
        // The cost of every answer whose model has a known price.
        let costs: Vec<f64> = self
            .messages
            .iter()
            .filter_map(|m| match m {
                AgentMessage::Assistant(a) => config.models.answer_cost(a),
                _ => None,
            })
            .collect();
        // What the stream told the user, not the detail (which went to the log).
        let error = events
            .iter()
            .find(|e| e["type"] == "error")
            .map(|e| e["errorText"].clone())
            .unwrap_or(serde_json::Value::Null);
        serde_json::json!({
            "messages": self.messages,
            "events": events,
            "usage": self.usage,
            "cost_usd": (!costs.is_empty()).then(|| costs.iter().sum::<f64>()),
            "finish_reason": finish_reason,
            "error": error,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::TurnStats;
    use crate::edge::config::Config;
    use crate::llm::{AssistantMessage, ContentBlock, StopReason, Usage};

    fn answer(model: &str, input_tokens: u64, output_tokens: u64) -> AgentMessage {
        AgentMessage::Assistant(AssistantMessage {
            content: vec![ContentBlock::Text { text: "ok".into() }],
            stop_reason: StopReason::EndTurn,
            model: model.into(),
            provider: "anthropic".into(),
            usage: Usage {
                input_tokens,
                output_tokens,
                ..Usage::default()
            },
            output: None,
        })
    }

    #[test]
    fn a_turn_as_json_says_what_its_stream_said_and_what_it_cost() {
        let config = Config::from_lookup(|_| None).expect("the defaults");
        let summary = TurnResult {
            messages: vec![
                answer("claude-sonnet-4-5", 1_000_000, 0),
                AgentMessage::user_text("and then?"),
                answer("claude-haiku-4-5", 0, 1_000_000),
                answer("a-model-with-no-price", 10, 10),
            ],
            usage: Usage::default(),
            outcome: TurnOutcome::Completed,
            client_tools: vec![],
            stats: TurnStats::new(0),
            unstored: None,
            answer_id: None,
            output: None,
            typed: false,
            memory: None,
            extract: None,
            embed: None,
            trace: None,
        };
        let stream = "data: {\"type\":\"start\"}\n\ndata: {\"type\":\"error\",\"errorText\":\"it broke (request r1)\"}\n\ndata: {\"type\":\"finish\",\"finishReason\":\"error\"}\n\ndata: [DONE]\n\n";
        let json = summary.into_json(stream, &config);
        // Every chunk but `[DONE]`, the public error text, and the priced answers' cost:
        // $3 for a million Sonnet input tokens, $5 for a million Haiku output tokens.
        assert_eq!(json["events"].as_array().map(Vec::len), Some(3));
        assert_eq!(json["finish_reason"], "error");
        assert_eq!(json["error"], "it broke (request r1)");
        assert_eq!(json["cost_usd"], 8.0);
        assert_eq!(json["messages"].as_array().map(Vec::len), Some(4));
    }

    #[test]
    fn a_typed_turn_without_stream_answers_its_object_or_a_422() {
        let config = Config::from_lookup(|_| None).expect("the defaults");
        let typed = |output: Option<serde_json::Value>, outcome: TurnOutcome| {
            let mut message = answer("claude-sonnet-4-5", 10, 5);
            if let AgentMessage::Assistant(a) = &mut message {
                a.output = output;
            }
            TurnResult {
                messages: vec![message],
                usage: Usage::default(),
                outcome,
                client_tools: vec![],
                stats: TurnStats::new(0),
                unstored: None,
                answer_id: Some("m9".into()),
                output: None,
                typed: true,
                memory: None,
                extract: None,
                embed: None,
                trace: None,
            }
        };
        let stream = "data: {\"type\":\"finish\",\"finishReason\":\"stop\"}\n\ndata: [DONE]\n\n";
        let complete = serde_json::json!({"status": "complete", "object": {"city": "Oslo"}});
        let (status, body) =
            typed(Some(complete), TurnOutcome::Completed).into_answer(stream, &config);
        assert_eq!(status, 200);
        assert_eq!(body["output"], serde_json::json!({"city": "Oslo"}));
        assert_eq!(body["message_id"], "m9");
        let invalid = serde_json::json!({"status": "error", "error": {"type": "no_object_generated", "message": "at /city: expected string"}, "raw": "{}"});
        let (status, body) =
            typed(Some(invalid), TurnOutcome::Completed).into_answer(stream, &config);
        assert_eq!(status, 422);
        assert_eq!(body["error"]["code"], "no_object_generated");
        assert_eq!(body["error"]["raw"], "{}");
        // A turn that failed before its answer has no object either.
        let failed = TurnOutcome::Failed {
            message: "down".into(),
            is_retryable: true,
        };
        assert_eq!(typed(None, failed).into_answer(stream, &config).0, 422);
        // One that paused waits for its answer: the turn as it is.
        let (status, body) =
            typed(None, TurnOutcome::AwaitingApproval(vec![])).into_answer(stream, &config);
        assert_eq!(status, 200);
        assert!(body["messages"].is_array());
    }
}
