//! A finished turn as the JSON a `stream: false` request gets.

use super::*;

impl TurnSummary {
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
