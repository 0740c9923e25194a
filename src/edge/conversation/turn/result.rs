//! A finished turn as the JSON a `stream: false` request gets.

use super::TurnResult;
use crate::agent::AgentMessage;
use crate::edge::config::Config;

impl TurnResult {
    /// The status and body a `stream: false` request gets: a typed answer's `{message_id,
    /// output, usage, cost_usd, finish_reason}` (422 when no valid object was made), else
    /// [`TurnResult::into_json`].
    pub fn into_answer(self, stream: &str, config: &Config) -> (u16, serde_json::Value) {
        let typed = match self.messages.last() {
            Some(AgentMessage::Assistant(a)) => a.output.clone(),
            _ => None,
        };
        let Some(end) = typed else {
            return (200, self.into_json(stream, config));
        };
        let message_id = self.answer_id.clone();
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
    use crate::agent::{TurnOutcome, TurnStats};
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
}
