//! Transports: thin adapters that carry bytes between the outside world and [`handle_message`].
//!
//! Only this module knows about stdio and HTTP. A transport authenticates the caller (a fixed principal on
//! stdio, a bearer token over HTTP), hands the raw message to the handler pipeline, and writes the reply back;
//! it holds no per-client state between messages and never interprets the protocol beyond what HTTP itself
//! requires. The request log is the one thing both transports add, and it is written here once.
//!
//! [`handle_message`]: crate::framework::handle_message

#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "http")]
pub mod page;
#[cfg(feature = "http")]
pub mod remote_backend;
#[cfg(feature = "http")]
mod slots;
pub mod stdio;

use crate::framework::Reply;
use serde::Deserialize;
use serde_json::Value;

/// Longest method or tool name a log line repeats; longer ones are cut (they come from the client).
pub(crate) const LOG_FIELD_CHARS_MAX: usize = 64;

/// What the request log may say about a message: its method and, for `tools/call`, the tool name.
/// Never tokens, never `requestState`, never argument values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MessageSummary {
    pub method: Option<String>,
    pub tool: Option<String>,
}

impl MessageSummary {
    /// Reads method and tool name from raw bytes; anything unreadable is simply absent.
    pub fn of(raw: &[u8]) -> MessageSummary {
        #[derive(Deserialize)]
        struct Peek {
            method: Option<Value>,
            params: Option<Value>,
        }
        let Ok(peek) = serde_json::from_slice::<Peek>(raw) else { return MessageSummary::default() };
        let method = peek.method.as_ref().and_then(Value::as_str).map(bounded);
        let tool = match (method.as_deref(), &peek.params) {
            (Some("tools/call"), Some(params)) => params.get("name").and_then(Value::as_str).map(bounded),
            _ => None,
        };
        MessageSummary { method, tool }
    }
}

fn bounded(text: &str) -> String {
    match text.char_indices().nth(LOG_FIELD_CHARS_MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// The outcome a log line records: the result type (and tool outcome), or the error code and reason.
pub fn outcome_of(reply: &Reply) -> String {
    let Some(response) = &reply.response else { return "notification_not_executed".into() };
    if let Some(result) = response.get("result") {
        let result_type = result.get("resultType").and_then(Value::as_str).unwrap_or("result");
        let tool_outcome = result.get("structuredContent").and_then(|s| s.get("outcome")).and_then(Value::as_str);
        return match (tool_outcome, result.get("isError").and_then(Value::as_bool)) {
            (Some(outcome), _) => format!("{result_type}:{}", bounded(outcome)),
            (None, Some(true)) => format!("{result_type}:is_error"),
            _ => result_type.to_string(),
        };
    }
    let error = response.get("error");
    let code = error.and_then(|e| e.get("code")).and_then(Value::as_i64).unwrap_or(0);
    match error.and_then(|e| e.get("data")).and_then(|d| d.get("reason")).and_then(Value::as_str) {
        Some(reason) => format!("error {code} {reason}"),
        None => format!("error {code}"),
    }
}

/// Writes the one log line of a request (on stderr, through `tracing`).
pub fn log_request(transport: &'static str, principal: &str, summary: &MessageSummary, status: u16, outcome: &str, latency: &Stopwatch) {
    tracing::info!(
        target: "mcpsim::request",
        transport,
        principal,
        method = ?summary.method.as_deref().unwrap_or("-"),
        tool = ?summary.tool.as_deref().unwrap_or("-"),
        status,
        outcome,
        latency_us = latency.elapsed_us(),
    );
}

/// Wall-clock latency for the real transports' request log. Simulation code never uses it.
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch(std::time::Instant);

impl Stopwatch {
    #[allow(clippy::disallowed_methods)] // Real transports only: latency of a real request, logged, never in a transcript.
    pub fn start() -> Stopwatch {
        Stopwatch(std::time::Instant::now())
    }

    pub fn elapsed_us(&self) -> u64 {
        u64::try_from(self.0.elapsed().as_micros()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn summaries_name_method_and_tool_only() {
        let raw = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"notes_delete","arguments":{"title":"secret"},"requestState":"s1.x"}}"#;
        assert_eq!(MessageSummary::of(raw), MessageSummary { method: Some("tools/call".into()), tool: Some("notes_delete".into()) });
        let raw = br#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"name":"x","uri":"file:///a"}}"#;
        assert_eq!(MessageSummary::of(raw), MessageSummary { method: Some("resources/read".into()), tool: None });
        assert_eq!(MessageSummary::of(b"not json"), MessageSummary::default());
        assert_eq!(MessageSummary::of(br#"{"method":7}"#), MessageSummary::default());
        let long = format!(r#"{{"method":"{}"}}"#, "m".repeat(1000));
        assert_eq!(MessageSummary::of(long.as_bytes()).method.unwrap().chars().count(), LOG_FIELD_CHARS_MAX + 1);
    }

    #[test]
    fn outcomes_name_result_types_and_reasons() {
        let reply = |response: Option<Value>| Reply { response, http_status: 200 };
        assert_eq!(outcome_of(&reply(None)), "notification_not_executed");
        assert_eq!(outcome_of(&reply(Some(json!({"result": {"resultType": "input_required"}})))), "input_required");
        assert_eq!(
            outcome_of(&reply(Some(json!({"result": {"resultType": "complete", "structuredContent": {"outcome": "deleted"}}})))),
            "complete:deleted"
        );
        assert_eq!(outcome_of(&reply(Some(json!({"result": {"resultType": "complete", "isError": true}})))), "complete:is_error");
        assert_eq!(
            outcome_of(&reply(Some(json!({"error": {"code": -32602, "data": {"reason": "state_signature"}}})))),
            "error -32602 state_signature"
        );
        assert_eq!(outcome_of(&reply(Some(json!({"error": {"code": -32601}})))), "error -32601");
    }
}
