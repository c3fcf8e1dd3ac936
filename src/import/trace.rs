//! Reading a recorded trace: the JSON Lines of `mcp-trace-validator` 0.6.0, as `mcp-trace-capture` 0.6.0
//! writes it (stdio and streamable HTTP) and as mcpsim exports it (`mcpsim run --format mcp-trace`).
//!
//! One event per line: `{"seq","direction","transport","kind",…}` with `kind` one of `message` (`payload`,
//! a JSON-RPC message), `http` (`method` or `status`, `headers`) or `lifecycle` (`event`). Every refusal
//! names the line: a line that is not JSON (a truncated last line among them), a missing or mistyped field,
//! an unknown kind, direction or transport, a `seq` that does not increase. Nothing here panics on input.

use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

/// Most bytes of trace `import` reads (64 MiB, the capture's own message bound).
pub const TRACE_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Most events of one trace.
pub const EVENTS_MAX: usize = 100_000;

/// A trace refused, at `line` (1-based; 0 for the whole file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceError {
    pub file: String,
    pub line: usize,
    pub what: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file, self.what)
        } else {
            write!(f, "{}:{}: {}", self.file, self.line, self.what)
        }
    }
}

/// Which party emitted an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    ClientToServer,
    ServerToClient,
}

/// What one event holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// A JSON-RPC message.
    Message(Value),
    /// An HTTP request (client to server: `method`) or response (`status`), with the recorded headers
    /// (names lowercased).
    Http { method: Option<String>, status: Option<u16>, headers: BTreeMap<String, String> },
    /// A transport lifecycle moment (`transport-open`, `transport-close`, `transport-abort`).
    Lifecycle(String),
}

/// One event of a trace, with the line it was read from.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub line: usize,
    pub seq: u64,
    pub direction: Direction,
    /// `stdio` or `streamable-http`.
    pub transport: String,
    pub body: Body,
}

/// Reads `text` (the file `file`) into its events, or says which line is wrong and why.
pub fn read(file: &str, text: &str) -> Result<Vec<Event>, TraceError> {
    let refuse = |line: usize, what: String| TraceError { file: file.to_string(), line, what };
    if text.len() > TRACE_BYTES_MAX {
        return Err(refuse(0, format!("the trace is {} bytes; at most {TRACE_BYTES_MAX} are read", text.len())));
    }
    if text.trim().is_empty() {
        return Err(refuse(0, "the trace is empty: no event to import".into()));
    }
    let mut events = Vec::new();
    let mut last_seq: Option<u64> = None;
    let lines: Vec<&str> = text.split('\n').collect();
    for (index, raw) in lines.iter().enumerate() {
        let line = index + 1;
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        if raw.trim().is_empty() {
            // The one newline ending the file leaves an empty last piece; a blank line elsewhere is a defect.
            if index + 1 == lines.len() {
                continue;
            }
            return Err(refuse(line, "a blank line: a trace has one event on every line".into()));
        }
        if events.len() >= EVENTS_MAX {
            return Err(refuse(line, format!("more than {EVENTS_MAX} events: import a shorter trace")));
        }
        let value: Value = serde_json::from_str(raw).map_err(|error| {
            let truncated = error.is_eof() && index + 2 >= lines.len();
            refuse(
                line,
                if truncated {
                    format!("the last event is cut short ({error}): the trace was truncated; remove the line or record again")
                } else {
                    format!("not a JSON event ({error})")
                },
            )
        })?;
        let event = event_of(&value, line).map_err(|what| refuse(line, what))?;
        if let Some(previous) = last_seq {
            if event.seq <= previous {
                return Err(refuse(line, format!("seq {} after {previous}: seq must increase from line to line", event.seq)));
            }
        }
        last_seq = Some(event.seq);
        events.push(event);
    }
    Ok(events)
}

fn event_of(value: &Value, line: usize) -> Result<Event, String> {
    let Some(object) = value.as_object() else {
        return Err(format!("an event is a JSON object, found {}", kind_name(value)));
    };
    let seq = object.get("seq").ok_or("no `seq`")?.as_u64().ok_or("`seq` is not a non-negative integer")?;
    let direction = match object.get("direction").and_then(Value::as_str) {
        Some("client-to-server") => Direction::ClientToServer,
        Some("server-to-client") => Direction::ServerToClient,
        Some(other) => return Err(format!("unknown direction {other:?} (client-to-server or server-to-client)")),
        None => return Err("no `direction` string".into()),
    };
    let transport = match object.get("transport").and_then(Value::as_str) {
        Some(t @ ("stdio" | "streamable-http")) => t.to_string(),
        Some(other) => return Err(format!("unknown transport {other:?} (stdio or streamable-http)")),
        None => return Err("no `transport` string".into()),
    };
    let body = match object.get("kind").and_then(Value::as_str) {
        Some("message") => {
            let payload = object.get("payload").ok_or("a message event without `payload`")?;
            if !payload.is_object() {
                return Err(format!("a message payload is a JSON-RPC object, found {}", kind_name(payload)));
            }
            Body::Message(payload.clone())
        }
        Some("http") => {
            let method = match object.get("method") {
                None => None,
                Some(Value::String(method)) => Some(method.to_ascii_uppercase()),
                Some(_) => return Err("`method` of an http event is not a string".into()),
            };
            let status = match object.get("status") {
                None => None,
                Some(status) => Some(status.as_u64().and_then(|s| u16::try_from(s).ok()).ok_or("`status` is not an HTTP status")?),
            };
            let mut headers = BTreeMap::new();
            if let Some(map) = object.get("headers") {
                let map = map.as_object().ok_or("`headers` is not an object")?;
                for (name, value) in map {
                    let value = value.as_str().ok_or_else(|| format!("header {name:?} is not a string"))?;
                    headers.insert(name.to_ascii_lowercase(), value.to_string());
                }
            }
            Body::Http { method, status, headers }
        }
        Some("lifecycle") => match object.get("event").and_then(Value::as_str) {
            Some(event @ ("transport-open" | "transport-close" | "transport-abort")) => Body::Lifecycle(event.to_string()),
            Some(other) => return Err(format!("unknown lifecycle event {other:?}")),
            None => return Err("a lifecycle event without `event`".into()),
        },
        Some(other) => {
            return Err(format!("unknown event kind {other:?} (this reader knows message, http and lifecycle: mcp-trace 0.6.0)"))
        }
        None => return Err("no `kind` string".into()),
    };
    Ok(Event { line, seq, direction, transport, body })
}

fn kind_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(text: &str) -> String {
        read("t.jsonl", text).unwrap_err().to_string()
    }

    #[test]
    fn each_defect_is_refused_with_its_line() {
        let good = r#"{"seq":0,"direction":"client-to-server","transport":"stdio","kind":"message","payload":{"jsonrpc":"2.0","id":1,"method":"tools/list"}}"#;
        assert_eq!(read("t.jsonl", &format!("{good}\n")).unwrap().len(), 1);
        assert!(error(&format!("{good}\n{{\"seq\":1,\"direc")).starts_with("t.jsonl:2: the last event is cut short"));
        assert!(error(&format!("{good}\nnot json\n")).starts_with("t.jsonl:2: not a JSON event"));
        assert!(error(&format!("{good}\n{}\n", good.replace("\"seq\":0", "\"seq\":1").replace("message", "telepathy")))
            .starts_with("t.jsonl:2: unknown event kind \"telepathy\""));
        assert!(error(&format!("{good}\n{good}\n")).starts_with("t.jsonl:2: seq 0 after 0"));
        assert!(error(&format!("{good}\n\n{good}\n")).starts_with("t.jsonl:2: a blank line"));
        assert!(error("").contains("empty"));
        assert!(error("[1]\n").starts_with("t.jsonl:1: an event is a JSON object"));
    }
}
