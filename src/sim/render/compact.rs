//! The compact text form of a transcript, for reading a run in a terminal (`--format compact`, the default
//! when stdout is one). The full text form ([`Transcript::to_text`]: every message whole, the snapshot format)
//! and JSON Lines (every byte) are unchanged; this one leaves out what a reader need not see twice:
//!
//! ```text
//! # mcpsim transcript: <scenario>  seed <seed>  scheduler <name>
//! #   <the scenario's opening comment: the guarantee it teaches>
//! == step <n> (line <l>): <the scenario statement>
//!  <seq>  <+time>ms  <from> -> <to>  request   <method> [<tool>] id <id> <params>
//!  <seq>  <+time>ms  <from> -> <to>  response  id <id> <resultType> <result>   |   id <id> error <code> [<reason>] …
//!  <seq>  <+time>ms  <from> -> <to>  call      <operation> <arguments>
//! ```
//!
//! * `_meta` is shown the first time each actor sends one and again only when it changes (clients repeat the
//!   same protocol version, capabilities and client info on every request, servers the same server info);
//! * `"jsonrpc":"2.0"` is left out, and the method, tool name, id and result type come first, as words;
//! * strings longer than [`STRING_CHARS_MAX`] show their first [`STRING_CHARS_SHOWN`] characters and their
//!   length, arrays longer than [`ARRAY_ITEMS_SHOWN`] their first items and how many more there are (as the
//!   full form already does for `requestState` tokens and note bodies);
//! * lines are wrapped at [`WIDTH`] columns after a `,` or a space, continuation lines indented under the
//!   message.
//!
//! The width is fixed, not the terminal's: the same run gives the same bytes everywhere.

use super::transcript::{abbreviate, Entry, Kind, Message, Transcript};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Lines are wrapped to this many columns.
pub const WIDTH: usize = 120;
/// Strings longer than this are shortened.
pub const STRING_CHARS_MAX: usize = 60;
/// How much of a shortened string is shown.
pub const STRING_CHARS_SHOWN: usize = 48;
/// Arrays longer than this show only their first items.
pub const ARRAY_ITEMS_SHOWN: usize = 3;

/// The compact text form of `transcript`.
pub(crate) fn render(transcript: &Transcript) -> String {
    let name_width = transcript.actors.iter().map(String::len).max().unwrap_or(1);
    let last_seq = transcript.entries.iter().rev().find_map(|e| if let Entry::Delivery { seq, .. } = e { Some(*seq) } else { None });
    let seq_width = last_seq.unwrap_or(1).to_string().len().max(3);
    let last_time = transcript.entries.iter().filter_map(entry_time).max().unwrap_or(0);
    let time_width = format!("+{last_time}ms").len();
    let time = |ms: u64| format!("{:>time_width$}", format!("+{ms}ms"));
    let name = |actor: usize| transcript.actors.get(actor).map(String::as_str).unwrap_or("?");
    // The `_meta` each actor sent last: shown again only when it changes.
    let mut meta_sent: BTreeMap<usize, Value> = BTreeMap::new();
    let mut out = String::new();
    let _ = writeln!(out, "{}", transcript.header());
    for line in &transcript.summary {
        let _ = writeln!(out, "{}", format!("#   {line}").trim_end());
    }
    let _ = writeln!(out, "# (compact: _meta shown once per sender, long values shortened; --format text shows every message whole)");
    for entry in &transcript.entries {
        match entry {
            Entry::Step { number, line, text } => push_wrapped(&mut out, &format!("== step {number} (line {line}): "), text),
            Entry::Substep { line, text } => push_wrapped(&mut out, &format!("==   (line {line}) "), text),
            Entry::Note { text } => push_wrapped(&mut out, "   --    ", text),
            Entry::Delivery { seq, time_ms, from, to, message, .. } => {
                let prefix = format!(
                    " {seq:>seq_width$}  {}  {:<name_width$} -> {:<name_width$}  {:<8} ",
                    time(*time_ms),
                    name(*from),
                    name(*to),
                    message.kind.as_str()
                );
                push_wrapped(&mut out, &prefix, &compact_message(message, *from, &mut meta_sent));
            }
            Entry::Dropped { time_ms, from, to, message, reason, .. } => {
                let prefix =
                    format!(" {:>seq_width$}  {}  {:<name_width$} -x {:<name_width$}  ", "", time(*time_ms), name(*from), name(*to));
                let body = format!("dropped ({reason}) {} {}", message.kind.as_str(), compact_message(message, *from, &mut meta_sent));
                push_wrapped(&mut out, &prefix, &body);
            }
            Entry::Event { time_ms, actor, text } => {
                let actor = actor.map(name).unwrap_or("");
                push_wrapped(&mut out, &format!(" {:>seq_width$}  {}  {actor:<name_width$}    ** ", "", time(*time_ms)), text);
            }
            Entry::Fault { time_ms, text, .. } => {
                push_wrapped(&mut out, &format!(" {:>seq_width$}  {}  {:<name_width$}    ** ", "", time(*time_ms), ""), text);
            }
            Entry::Check { text, failure, .. } => match failure {
                None => push_wrapped(&mut out, "   ok    ", text),
                Some(failure) => push_wrapped(&mut out, "   FAIL  ", &format!("{text}: {failure}")),
            },
        }
    }
    out
}

fn entry_time(entry: &Entry) -> Option<u64> {
    match entry {
        Entry::Delivery { time_ms, .. } | Entry::Dropped { time_ms, .. } | Entry::Event { time_ms, .. } | Entry::Fault { time_ms, .. } => {
            Some(*time_ms)
        }
        _ => None,
    }
}

/// One message in a few words and its shortened JSON, `_meta` left out when `sender` sent the same before.
fn compact_message(message: &Message, sender: usize, meta_sent: &mut BTreeMap<usize, Value>) -> String {
    if let Some(exact) = &message.exact {
        // Not canonical JSON (a `raw` send): exactly what was sent, shortened if long.
        return format!("{:?}", shorten(exact, WIDTH * 2, WIDTH * 2 - 12));
    }
    let value = abbreviate(&message.value());
    match (message.kind, value) {
        (Kind::Request | Kind::Notify, Value::Object(mut request)) => {
            request.remove("jsonrpc");
            let mut words = Vec::new();
            if let Some(Value::String(method)) = request.remove("method") {
                words.push(method);
            }
            let id = request.remove("id");
            if let Some(Value::Object(params)) = request.get_mut("params") {
                elide_meta(params, sender, meta_sent);
                if let Some(Value::String(tool)) = params.remove("name") {
                    words.push(tool);
                }
            }
            if let Some(id) = id {
                words.push(format!("id {id}"));
            }
            let params = request.remove("params").filter(|p| p.as_object().is_none_or(|p| !p.is_empty()));
            words.extend(params.map(|p| shortened(&p).to_string()));
            // Anything else a request carried (a malformed one): shown as is.
            if !request.is_empty() {
                words.push(shortened(&Value::Object(request)).to_string());
            }
            words.join(" ")
        }
        (Kind::Response, Value::Object(mut response)) => {
            response.remove("jsonrpc");
            let mut words = Vec::new();
            if let Some(id) = response.remove("id") {
                words.push(format!("id {id}"));
            }
            if let Some(Value::Object(mut result)) = response.remove("result") {
                elide_meta(&mut result, sender, meta_sent);
                if let Some(Value::String(result_type)) = result.remove("resultType") {
                    words.push(result_type);
                }
                if !result.is_empty() {
                    words.push(shortened(&Value::Object(result)).to_string());
                }
            }
            if let Some(Value::Object(mut error)) = response.remove("error") {
                words.push("error".into());
                if let Some(code) = error.remove("code") {
                    words.push(code.to_string());
                }
                if let Some(Value::Object(data)) = error.get_mut("data") {
                    if let Some(Value::String(reason)) = data.remove("reason") {
                        words.push(reason);
                    }
                }
                let message = error.remove("message");
                if error.get("data").and_then(Value::as_object).is_some_and(Map::is_empty) {
                    error.remove("data");
                }
                if let Some(data) = error.remove("data") {
                    words.push(shortened(&data).to_string());
                }
                words.extend(message.map(|m| shortened(&m).to_string()));
                if !error.is_empty() {
                    words.push(shortened(&Value::Object(error)).to_string());
                }
            }
            if !response.is_empty() {
                words.push(shortened(&Value::Object(response)).to_string());
            }
            words.join(" ")
        }
        (Kind::Call | Kind::Return, value) => format!("{} {}", message.label(), shortened(&value)),
        (_, value) => shortened(&value).to_string(),
    }
}

/// Leaves `_meta` out of `object` when `sender`'s previous one was the same; remembers it otherwise.
fn elide_meta(object: &mut Map<String, Value>, sender: usize, meta_sent: &mut BTreeMap<usize, Value>) {
    let Some(meta) = object.get("_meta") else { return };
    if meta_sent.get(&sender) == Some(meta) {
        object.remove("_meta");
    } else {
        meta_sent.insert(sender, meta.clone());
    }
}

/// `value` with long strings and long arrays shortened.
fn shortened(value: &Value) -> Value {
    match value {
        Value::String(text) => Value::String(shorten(text, STRING_CHARS_MAX, STRING_CHARS_SHOWN)),
        Value::Array(items) if items.len() > ARRAY_ITEMS_SHOWN => {
            let mut shown: Vec<Value> = items.iter().take(ARRAY_ITEMS_SHOWN).map(shortened).collect();
            shown.push(Value::String(format!("…(+{} more)", items.len() - ARRAY_ITEMS_SHOWN)));
            Value::Array(shown)
        }
        Value::Array(items) => Value::Array(items.iter().map(shortened).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(key, inner)| (key.clone(), shortened(inner))).collect()),
        other => other.clone(),
    }
}

/// `text` if at most `max` characters (or already shortened), else its first `keep` and its length.
fn shorten(text: &str, max: usize, keep: usize) -> String {
    let count = text.chars().count();
    if count <= max || text.ends_with(" chars)") {
        return text.to_string();
    }
    let prefix: String = text.chars().take(keep).collect();
    format!("{prefix}…({count} chars)")
}

/// Appends `prefix` + `text` as lines of at most [`WIDTH`] columns: `text` is broken after a `,` or a space
/// outside JSON strings (after a `:` too where a piece would not fit otherwise), and continuation lines are
/// indented to where `text` started. A piece with no break in it is kept whole.
fn push_wrapped(out: &mut String, prefix: &str, text: &str) {
    let indent = prefix.chars().count();
    let room = WIDTH.saturating_sub(indent).max(40);
    let mut line = String::new();
    let mut first = true;
    for piece in pieces(text, room) {
        if !line.is_empty() && line.chars().count() + piece.chars().count() > room {
            let lead = if first { prefix.to_string() } else { " ".repeat(indent) };
            let _ = writeln!(out, "{lead}{}", line.trim_end());
            line.clear();
            first = false;
        }
        line.push_str(piece);
    }
    let lead = if first { prefix.to_string() } else { " ".repeat(indent) };
    let _ = writeln!(out, "{lead}{}", line.trim_end());
}

/// `text` cut after every `,` and space outside a JSON string, and pieces still longer than `room` after
/// their `:`s too; rejoining the pieces gives `text` back.
fn pieces(text: &str, room: usize) -> Vec<&str> {
    fn cut<'a>(text: &'a str, at: &dyn Fn(char) -> bool) -> Vec<&'a str> {
        let mut pieces = Vec::new();
        let (mut start, mut in_string, mut escaped) = (0, false, false);
        for (index, c) in text.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' if in_string => escaped = true,
                '"' => in_string = !in_string,
                c if !in_string && at(c) => {
                    let end = index + c.len_utf8();
                    pieces.push(&text[start..end]);
                    start = end;
                }
                _ => {}
            }
        }
        if start < text.len() {
            pieces.push(&text[start..]);
        }
        pieces
    }
    cut(text, &|c| c == ',' || c == ' ')
        .into_iter()
        .flat_map(|piece| if piece.chars().count() > room { cut(piece, &|c| c == ':') } else { vec![piece] })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario;
    use crate::sim::library;
    use crate::sim::runner::{self, RunOptions};

    fn transcript_of(file: &str) -> Transcript {
        let (_, text) = library::SCENARIOS.iter().find(|(name, _)| *name == file).expect("a library scenario");
        let parsed = scenario::parse(file, file.trim_end_matches(".sim"), text).expect("library scenarios parse");
        runner::run(&parsed, &RunOptions::seeded(1)).transcript
    }

    #[test]
    fn lines_fit_and_the_lesson_comes_first() {
        let transcript = transcript_of("02-retry-lands-on-another-instance.sim");
        let compact = render(&transcript);
        let full = transcript.to_text();
        assert!(full.lines().any(|line| line.chars().count() > 500), "the full form has the long lines this one avoids");
        for line in compact.lines() {
            // A piece with no break in it may overrun: none does in this scenario.
            assert!(line.chars().count() <= WIDTH, "{} columns: {line}", line.chars().count());
        }
        let mut lines = compact.lines();
        assert_eq!(lines.next(), full.lines().next(), "the same header");
        let lesson: Vec<&str> = lines.by_ref().take_while(|line| line.starts_with("#   ") || *line == "#").collect();
        assert!(lesson.iter().any(|line| line.contains("Guarantee taught: statelessness")), "{compact}");
        // The same steps, checks and deliveries, in the same order.
        let steps =
            |text: &str| text.lines().filter(|l| l.starts_with("== ") || l.starts_with("   ok") || l.starts_with("   FAIL")).count();
        assert_eq!(steps(&compact), steps(&full));
    }

    #[test]
    fn meta_is_shown_once_per_sender_and_again_when_it_changes() {
        let compact = render(&transcript_of("02-retry-lands-on-another-instance.sim"));
        assert_eq!(compact.matches("io.modelcontextprotocol/clientCapabilities").count(), 1, "alice's _meta, once:\n{compact}");
        assert_eq!(compact.matches("io.modelcontextprotocol/serverInfo").count(), 2, "i1's and i2's, once each:\n{compact}");
        assert!(!compact.contains("\"jsonrpc\""), "{compact}");
        assert!(compact.contains("request  tools/call notes_delete id 1 {"), "{compact}");
        assert!(compact.contains("response id 2 complete"), "{compact}");
        assert!(compact.contains("response id 3 error -32602 state_consumed {\"previousOutcome\""), "{compact}");
        // A client whose capabilities change shows its _meta again.
        let url_only = render(&transcript_of("18-url-only-client.sim"));
        let shown = url_only.matches("io.modelcontextprotocol/clientCapabilities").count();
        let requests = url_only.lines().filter(|l| l.contains(" request ")).count();
        assert!(shown >= 2 && shown < requests, "{shown} of {requests}:\n{url_only}");
    }

    #[test]
    fn long_strings_and_arrays_are_shortened_and_lines_wrapped() {
        let value = serde_json::json!({"items": [1, 2, 3, 4, 5], "text": "x".repeat(100)});
        assert_eq!(
            shortened(&value).to_string(),
            format!("{{\"items\":[1,2,3,\"…(+2 more)\"],\"text\":\"{}…(100 chars)\"}}", "x".repeat(48))
        );
        let mut out = String::new();
        let text = (0..60).map(|n| format!("\"k{n}\":{n}")).collect::<Vec<_>>().join(",");
        push_wrapped(&mut out, "prefix  ", &text);
        assert!(out.lines().count() > 3 && out.lines().all(|l| l.chars().count() <= WIDTH), "{out}");
        assert!(out.lines().skip(1).all(|l| l.starts_with("        \"")), "{out}");
        assert_eq!(out.lines().map(|l| l.trim_start_matches("prefix  ").trim_start()).collect::<String>(), text);
    }
}
