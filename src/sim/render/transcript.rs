//! Transcripts: every delivered envelope, dropped envelope, fault and check of a run, in order, rendered as
//! column-aligned text, JSON Lines, or a Mermaid sequence diagram.
//!
//! # Text format
//!
//! ```text
//! # mcpsim transcript: <scenario>  seed <seed>  scheduler <name>
//! == step <n> (line <l>): <the scenario statement>
//!  <seq>  <+time>ms  <from> -> <to>  <kind>  <label> <message as compact JSON, sorted keys>
//!         <+time>ms  <actor>  ** <event>            (crash, restart, clock, keys, no response)
//!         <+time>ms  <from> -x <to>  dropped (<why>) <kind> <label> <message>
//!   ok    expect <…>            /   FAIL  expect <…>: <expected vs actual>
//! ```
//!
//! `seq` numbers deliveries from 1; time is virtual milliseconds since the run began. Kinds: `request`,
//! `notify` (a notification), `response`, `call` (to a store), `return` (from a store). The text form
//! abbreviates two kinds of long strings so lines stay readable: `requestState` tokens show their first 12
//! characters and their length (`"s1.k1.eyJhcm…(404 chars)"`), and note bodies longer than 24 characters
//! likewise. JSON Lines keep everything exact, including the original bytes of any message that was not
//! canonical JSON.

use crate::sim::engine::faults::Fault;
use crate::sim::engine::message::{ActorId, OperationId, Payload, StoreCall, StoreReturn};
use serde_json::{json, Map, Value};
use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::Arc;

/// `requestState` values longer than this are abbreviated in text.
pub(crate) const STATE_PREFIX_CHARS: usize = 12;
/// Note bodies longer than this are abbreviated in text.
pub(crate) const BODY_CHARS_SHOWN: usize = 24;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Request,
    Notify,
    Response,
    Call,
    Return,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Request => "request",
            Kind::Notify => "notify",
            Kind::Response => "response",
            Kind::Call => "call",
            Kind::Return => "return",
        }
    }
}

/// A message as transcripts show it. Recording only keeps a handle on it; JSON is built when rendering.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub kind: Kind,
    pub body: Body,
    /// The exact bytes, when they are not the canonical serialization of the value (or not JSON at all).
    pub exact: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// A JSON-RPC message, shared with the run's history.
    Json(Arc<Value>),
    Call(StoreCall),
    Return {
        call: &'static str,
        value: StoreReturn,
    },
}

impl Message {
    pub(crate) fn from_payload(payload: &Payload) -> Message {
        match payload {
            Payload::Request { body, .. } => {
                let (value, exact) = parse_exact(&body.bytes());
                // A browser's page request (`{"page":…}`) has no id, and is answered: not a notification.
                let notification = value.is_object() && value.get("id").is_none() && value.get("page").is_none();
                Message { kind: if notification { Kind::Notify } else { Kind::Request }, body: Body::Json(Arc::new(value)), exact }
            }
            // The bytes are the compact serialization of `value`: canonical by construction.
            Payload::Response { value, .. } => Message { kind: Kind::Response, body: Body::Json(value.clone()), exact: None },
            Payload::Call(call) => Message { kind: Kind::Call, body: Body::Call(call.clone()), exact: None },
            Payload::Return { call, value } => {
                Message { kind: Kind::Return, body: Body::Return { call, value: value.clone() }, exact: None }
            }
        }
    }

    /// The method for requests, the store operation for calls and returns, empty for responses.
    pub fn label(&self) -> &str {
        match &self.body {
            Body::Json(value) if self.kind != Kind::Response => {
                value.get("method").and_then(Value::as_str).unwrap_or(if value.get("page").is_some() { "page" } else { "" })
            }
            Body::Json(_) => "",
            Body::Call(call) => call.label(),
            Body::Return { call, .. } => call,
        }
    }

    pub fn value(&self) -> Cow<'_, Value> {
        match &self.body {
            Body::Json(value) => Cow::Borrowed(value),
            Body::Call(call) => Cow::Owned(call.to_json()),
            Body::Return { value, .. } => Cow::Owned(value.to_json()),
        }
    }

    /// A few words for diagrams.
    pub fn summary(&self) -> String {
        let value = self.value();
        match self.kind {
            Kind::Request | Kind::Notify => {
                let mut text = self.label().to_string();
                if let Some(name) = value.pointer("/params/name").and_then(Value::as_str) {
                    let _ = write!(text, " {name}");
                }
                if let Some(action) = value.pointer("/params/inputResponses").and_then(Value::as_object).and_then(|r| r.values().next()) {
                    let _ = write!(text, " [{}]", action.get("action").and_then(Value::as_str).unwrap_or("?"));
                }
                match value.get("id") {
                    Some(id) => format!("{text} (id {id})"),
                    None => format!("{text} (notification)"),
                }
            }
            Kind::Response => {
                let id = value.get("id").map(Value::to_string).unwrap_or_default();
                if let Some(result) = value.get("result") {
                    let result_type = result.get("resultType").and_then(Value::as_str).unwrap_or("?");
                    match result.pointer("/structuredContent/outcome").and_then(Value::as_str) {
                        Some(outcome) => format!("{result_type}: {outcome} (id {id})"),
                        None => format!("{result_type} (id {id})"),
                    }
                } else if let Some(error) = value.get("error") {
                    let code = error.get("code").map(Value::to_string).unwrap_or_default();
                    match error.pointer("/data/reason").and_then(Value::as_str) {
                        Some(reason) => format!("error {code} {reason} (id {id})"),
                        None => format!("error {code} (id {id})"),
                    }
                } else {
                    "response".into()
                }
            }
            Kind::Call => match value.get("noteId").or_else(|| value.get("tool")).and_then(Value::as_str) {
                Some(note) => format!("{} {note}", self.label()),
                None => self.label().to_string(),
            },
            Kind::Return => return_summary(&value),
        }
    }
}

fn return_summary(value: &Value) -> String {
    if let Some(tools) = value.get("tools").and_then(Value::as_array) {
        return format!("{} tools", tools.len());
    }
    let Some((key, inner)) = value.as_object().and_then(|m| m.iter().next()) else { return "ok".into() };
    match key.as_str() {
        "notes" => format!("{} notes", inner.as_array().map_or(0, Vec::len)),
        "deleted" => format!("deleted {}", inner.get("id").and_then(Value::as_str).unwrap_or("?")),
        "alreadyClaimed" => format!("already claimed: {}", inner.get("outcome").and_then(Value::as_str).unwrap_or("?")),
        "result" => match inner.get("outcome").and_then(Value::as_str) {
            Some(outcome) => format!("result: {outcome}"),
            None => "result".into(),
        },
        other => other.to_string(),
    }
}

/// Parses message bytes; keeps the exact text when it differs from the canonical serialization.
fn parse_exact(bytes: &[u8]) -> (Value, Option<String>) {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(value) => {
            let canonical = serde_json::to_vec(&value).expect("a JSON value serializes");
            let exact = (canonical != bytes).then(|| String::from_utf8_lossy(bytes).into_owned());
            (value, exact)
        }
        Err(_) => (Value::String(String::from_utf8_lossy(bytes).into_owned()), Some(String::from_utf8_lossy(bytes).into_owned())),
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    Step {
        number: usize,
        line: usize,
        text: String,
    },
    /// One message of a `parallel` block, listed under its step.
    Substep {
        line: usize,
        text: String,
    },
    Delivery {
        seq: usize,
        time_ms: u64,
        from: ActorId,
        to: ActorId,
        message: Message,
        /// The client operation it belongs to (its own request or response, or the request whose handling
        /// made this store call); not printed in text, JSON Lines or Mermaid.
        cause: Option<OperationId>,
        /// How many envelopes were in flight when the scheduler chose this one (more than 1: a race).
        in_flight: usize,
    },
    Dropped {
        time_ms: u64,
        from: ActorId,
        to: ActorId,
        message: Message,
        reason: String,
        cause: Option<OperationId>,
    },
    Event {
        time_ms: u64,
        actor: Option<ActorId>,
        text: String,
    },
    /// A fault of the run's plan firing: printed as an event (`** fault: …`), kept typed for reports.
    Fault {
        time_ms: u64,
        fault: Fault,
        text: String,
    },
    Check {
        line: usize,
        text: String,
        failure: Option<String>,
    },
    /// A remark that is neither a pass nor a failure (a check that does not apply).
    Note {
        text: String,
    },
}

/// One run's transcript. When not recording (benchmarks, explorations), entries are not kept, nor the
/// summary and the faults' descriptions, which only a rendering reads.
#[derive(Debug, Clone, Default)]
pub struct Transcript {
    pub scenario: String,
    pub seed: u64,
    pub scheduler: String,
    /// Actor names by id.
    pub actors: Vec<String>,
    /// Left-to-right order of actors in diagrams (clients first, stores last); all actors when empty.
    pub diagram_order: Vec<ActorId>,
    pub recording: bool,
    pub entries: Vec<Entry>,
    /// The zoo mutant that ran instead of the real servers, if one did.
    pub mutant: Option<String>,
    /// With faults on, the faults of the run's plan (empty: faults on, none drawn); `None` without faults (and
    /// when not recording).
    pub faults: Option<Vec<String>>,
    /// The scenario's opening comment (what it teaches), shown at the top of the compact form.
    pub summary: Vec<String>,
}

impl Transcript {
    pub fn push(&mut self, entry: Entry) {
        if self.recording {
            self.entries.push(entry);
        }
    }

    /// The first line of the text forms: scenario, seed, scheduler, and what ran if it was not the real servers
    /// without faults (a mutant, the faults in force).
    pub(crate) fn header(&self) -> String {
        let mut header = format!("# mcpsim transcript: {}  seed {}  scheduler {}", self.scenario, self.seed, self.scheduler);
        if let Some(mutant) = &self.mutant {
            let _ = write!(header, "  MUTANT {mutant} (a deliberately unsafe server, not the real one)");
        }
        match self.faults.as_deref() {
            None => {}
            Some([]) => header.push_str("  faults on (none drawn for this seed; clients retry)"),
            Some(faults) => {
                let _ = write!(header, "  faults on: {}", faults.join("; "));
            }
        }
        header
    }

    fn name(&self, actor: ActorId) -> &str {
        self.actors.get(actor).map(String::as_str).unwrap_or("?")
    }

    pub fn to_text(&self) -> String {
        let name_width = self.actors.iter().map(String::len).max().unwrap_or(1);
        let last_seq = self.entries.iter().rev().find_map(|e| if let Entry::Delivery { seq, .. } = e { Some(*seq) } else { None });
        let seq_width = last_seq.unwrap_or(1).to_string().len().max(3);
        let last_time = self.entries.iter().filter_map(entry_time).max().unwrap_or(0);
        let time_width = format!("+{last_time}ms").len();
        let time = |ms: u64| format!("{:>time_width$}", format!("+{ms}ms"));
        let mut out = String::new();
        let _ = writeln!(out, "{}", self.header());
        for entry in &self.entries {
            match entry {
                Entry::Step { number, line, text } => {
                    let _ = writeln!(out, "== step {number} (line {line}): {text}");
                }
                Entry::Substep { line, text } => {
                    let _ = writeln!(out, "==   (line {line}) {text}");
                }
                Entry::Note { text } => {
                    let _ = writeln!(out, "   --    {text}");
                }
                Entry::Delivery { seq, time_ms, from, to, message, .. } => {
                    let _ = writeln!(
                        out,
                        " {seq:>seq_width$}  {}  {:<name_width$} -> {:<name_width$}  {:<8} {}",
                        time(*time_ms),
                        self.name(*from),
                        self.name(*to),
                        message.kind.as_str(),
                        text_message(message)
                    );
                }
                Entry::Dropped { time_ms, from, to, message, reason, .. } => {
                    let _ = writeln!(
                        out,
                        " {:>seq_width$}  {}  {:<name_width$} -x {:<name_width$}  dropped ({reason}) {} {}",
                        "",
                        time(*time_ms),
                        self.name(*from),
                        self.name(*to),
                        message.kind.as_str(),
                        text_message(message)
                    );
                }
                Entry::Event { time_ms, actor, text } => {
                    let actor = actor.map(|a| self.name(a)).unwrap_or("");
                    let _ = writeln!(out, " {:>seq_width$}  {}  {actor:<name_width$}    ** {text}", "", time(*time_ms));
                }
                Entry::Fault { time_ms, text, .. } => {
                    let _ = writeln!(out, " {:>seq_width$}  {}  {:<name_width$}    ** {text}", "", time(*time_ms), "");
                }
                Entry::Check { text, failure, .. } => match failure {
                    None => {
                        let _ = writeln!(out, "   ok    {text}");
                    }
                    Some(failure) => {
                        let _ = writeln!(out, "   FAIL  {text}: {failure}");
                    }
                },
            }
        }
        out
    }

    pub fn to_jsonl(&self) -> String {
        let mut out = String::new();
        let mut header = json!({ "type": "run", "scenario": self.scenario, "seed": self.seed, "scheduler": self.scheduler });
        if let Some(mutant) = &self.mutant {
            header["mutant"] = json!(mutant);
        }
        if let Some(faults) = &self.faults {
            header["faults"] = json!(faults);
        }
        let _ = writeln!(out, "{header}");
        for entry in &self.entries {
            let value = match entry {
                Entry::Step { number, line, text } => json!({ "type": "step", "step": number, "line": line, "text": text }),
                Entry::Substep { line, text } => json!({ "type": "substep", "line": line, "text": text }),
                Entry::Note { text } => json!({ "type": "note", "text": text }),
                Entry::Delivery { seq, time_ms, from, to, message, .. } => {
                    let mut value = message_json(message);
                    value.insert("type".into(), json!("delivery"));
                    value.insert("seq".into(), json!(seq));
                    value.insert("timeMs".into(), json!(time_ms));
                    value.insert("from".into(), json!(self.name(*from)));
                    value.insert("to".into(), json!(self.name(*to)));
                    Value::Object(value)
                }
                Entry::Dropped { time_ms, from, to, message, reason, .. } => {
                    let mut value = message_json(message);
                    value.insert("type".into(), json!("dropped"));
                    value.insert("timeMs".into(), json!(time_ms));
                    value.insert("from".into(), json!(self.name(*from)));
                    value.insert("to".into(), json!(self.name(*to)));
                    value.insert("reason".into(), json!(reason));
                    Value::Object(value)
                }
                Entry::Event { time_ms, actor, text } => {
                    json!({ "type": "event", "timeMs": time_ms, "actor": actor.map(|a| self.name(a)), "text": text })
                }
                Entry::Fault { time_ms, text, .. } => json!({ "type": "event", "timeMs": time_ms, "actor": null, "text": text }),
                Entry::Check { line, text, failure } => {
                    json!({ "type": "check", "line": line, "text": text, "ok": failure.is_none(), "failure": failure })
                }
            };
            let _ = writeln!(out, "{value}");
        }
        out
    }

    /// For each actor, whether any delivery, drop or event of the transcript involves it (the lanes a
    /// diagram draws).
    pub(crate) fn actors_used(&self) -> Vec<bool> {
        let mut used = vec![false; self.actors.len()];
        for entry in &self.entries {
            match entry {
                Entry::Delivery { from, to, .. } | Entry::Dropped { from, to, .. } => {
                    used[*from] = true;
                    used[*to] = true;
                }
                Entry::Event { actor: Some(actor), .. } => used[*actor] = true,
                _ => {}
            }
        }
        used
    }

    pub(crate) fn to_mermaid(&self) -> String {
        let mut out = String::from("sequenceDiagram\n");
        let used = self.actors_used();
        let order: Vec<ActorId> = if self.diagram_order.is_empty() { (0..self.actors.len()).collect() } else { self.diagram_order.clone() };
        let shown: Vec<ActorId> = order.into_iter().filter(|actor| used.get(*actor).copied().unwrap_or(false)).collect();
        for actor in &shown {
            let _ = writeln!(out, "    participant {}", self.name(*actor));
        }
        let first = shown.first().map(|a| self.name(*a).to_string());
        let last = shown.last().map(|a| self.name(*a).to_string());
        if let (Some(first), Some(last), true) = (&first, &last, self.mutant.is_some() || self.faults.is_some()) {
            let header = self.header();
            let _ = writeln!(out, "    Note over {first},{last}: {}", mermaid_text(header.trim_start_matches("# mcpsim transcript: ")));
        }
        for entry in &self.entries {
            match entry {
                Entry::Step { number, text, .. } => {
                    if let (Some(first), Some(last)) = (&first, &last) {
                        let _ = writeln!(out, "    Note over {first},{last}: step {number}: {}", mermaid_text(text));
                    }
                }
                Entry::Delivery { from, to, message, .. } => {
                    let arrow = if matches!(message.kind, Kind::Response | Kind::Return) { "-->>" } else { "->>" };
                    let _ = writeln!(out, "    {}{arrow}{}: {}", self.name(*from), self.name(*to), mermaid_text(&message.summary()));
                }
                Entry::Dropped { from, to, message, reason, .. } => {
                    let _ = writeln!(
                        out,
                        "    {}-x{}: dropped ({}): {}",
                        self.name(*from),
                        self.name(*to),
                        mermaid_text(reason),
                        mermaid_text(&message.summary())
                    );
                }
                Entry::Event { actor: Some(actor), text, .. } => {
                    let _ = writeln!(out, "    Note over {}: {}", self.name(*actor), mermaid_text(text));
                }
                Entry::Event { actor: None, text, .. } | Entry::Fault { text, .. } => {
                    if let (Some(first), Some(last)) = (&first, &last) {
                        let _ = writeln!(out, "    Note over {first},{last}: {}", mermaid_text(text));
                    }
                }
                Entry::Substep { text, .. } => {
                    if let (Some(first), Some(last)) = (&first, &last) {
                        let _ = writeln!(out, "    Note over {first},{last}: {}", mermaid_text(text));
                    }
                }
                Entry::Check { .. } | Entry::Note { .. } => {}
            }
        }
        out
    }
}

fn entry_time(entry: &Entry) -> Option<u64> {
    match entry {
        Entry::Delivery { time_ms, .. } | Entry::Dropped { time_ms, .. } | Entry::Event { time_ms, .. } | Entry::Fault { time_ms, .. } => {
            Some(*time_ms)
        }
        _ => None,
    }
}

fn message_json(message: &Message) -> Map<String, Value> {
    let mut value = Map::new();
    value.insert("kind".into(), json!(message.kind.as_str()));
    if !message.label().is_empty() {
        value.insert("label".into(), json!(message.label()));
    }
    value.insert("message".into(), message.value().into_owned());
    if let Some(exact) = &message.exact {
        value.insert("bytes".into(), json!(exact));
    }
    value
}

fn text_message(message: &Message) -> String {
    let body = match &message.exact {
        // Not canonical JSON: show exactly what was sent.
        Some(exact) => format!("{exact:?}"),
        None => abbreviate(&message.value()).to_string(),
    };
    match message.kind {
        Kind::Call | Kind::Return => format!("{} {body}", message.label()),
        _ => body,
    }
}

/// The value with `requestState` tokens and long note bodies shortened (text form only).
pub(crate) fn abbreviate(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, inner)| {
                    let shortened = match (key.as_str(), inner) {
                        ("requestState", Value::String(state)) if state.chars().count() > STATE_PREFIX_CHARS => {
                            Value::String(shorten(state, STATE_PREFIX_CHARS))
                        }
                        ("body", Value::String(body)) if body.chars().count() > BODY_CHARS_SHOWN => {
                            Value::String(shorten(body, BODY_CHARS_SHOWN))
                        }
                        _ => abbreviate(inner),
                    };
                    (key.clone(), shortened)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(abbreviate).collect()),
        other => other.clone(),
    }
}

fn shorten(text: &str, keep: usize) -> String {
    let prefix: String = text.chars().take(keep).collect();
    format!("{prefix}…({} chars)", text.chars().count())
}

/// Mermaid message text: no line breaks, no characters Mermaid treats as syntax there.
fn mermaid_text(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\n' | '\r' => ' ',
            ';' => ',',
            '#' => '№',
            other => other,
        })
        .collect()
}

/// How a transcript is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Every message whole (compact JSON, `requestState` tokens and note bodies abbreviated): the snapshot format.
    Text,
    /// For reading in a terminal: `_meta` once per sender, long values shortened, lines wrapped (see
    /// `sim::render::compact`).
    Compact,
    Jsonl,
    Mermaid,
    /// The independent validator's trace format (see `sim::render::mcp_trace`).
    McpTrace,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_abbreviates_states_and_bodies_but_jsonl_keeps_them() {
        let state = format!("s1.k1.{}", "x".repeat(300));
        let value = json!({"result": {"requestState": state, "notes": [{"body": "b".repeat(40)}]}, "id": 1});
        let short = abbreviate(&value);
        assert_eq!(short["result"]["requestState"], json!("s1.k1.xxxxxx…(306 chars)"));
        assert_eq!(short["result"]["notes"][0]["body"], json!(format!("{}…(40 chars)", "b".repeat(24))));
        let transcript = Transcript {
            scenario: "t".into(),
            seed: 1,
            scheduler: "random".into(),
            actors: vec!["alice".into(), "i1".into()],
            diagram_order: Vec::new(),
            recording: true,
            mutant: None,
            faults: None,
            summary: Vec::new(),
            entries: vec![Entry::Delivery {
                seq: 1,
                time_ms: 5,
                from: 1,
                to: 0,
                message: Message { kind: Kind::Response, body: Body::Json(Arc::new(value.clone())), exact: None },
                cause: None,
                in_flight: 1,
            }],
        };
        assert!(transcript.to_jsonl().contains(&state));
        assert!(!transcript.to_text().contains(&state));
        assert!(transcript.to_text().contains("   1  +5ms  i1    -> alice  response {"), "{}", transcript.to_text());
    }

    #[test]
    fn non_canonical_bytes_are_kept_exactly() {
        let (value, exact) = parse_exact(br#"{ "b":1, "a":2 }"#);
        assert_eq!(value, json!({"a": 2, "b": 1}));
        assert_eq!(exact.as_deref(), Some(r#"{ "b":1, "a":2 }"#));
        assert_eq!(parse_exact(br#"{"a":2,"b":1}"#).1, None);
        assert_eq!(parse_exact(b"not json").0, json!("not json"));
    }
}
