//! How the oracle reads what went over the wire, in its own words: which confirmation a request answered,
//! where a state was issued and for what, what an answer reports, and which note URIs a response shows.
//! Nothing here comes from the servers' code: the field names and reasons are the protocol's and the ones
//! `GUARANTEES.md` documents, spelled once, here.

use super::history::{Attempt, History, Operation, OperationId};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The reasons the oracle reads in `error.data.reason`.
pub const STATE_CONSUMED: &str = "state_consumed";
pub const CLAIM_IN_PROGRESS: &str = "claim_in_progress";
pub const NOTE_GONE: &str = "note_gone";
pub const NOTE_OUTSIDE_WORKSPACE: &str = "note_outside_workspace";
pub const STATE_EXPIRED: &str = "state_expired";
pub const REPLAY_WINDOW_CLOSED: &str = "replay_window_closed";

/// A path into a JSON value.
pub fn at<'v>(value: &'v Value, path: &[&str]) -> Option<&'v Value> {
    path.iter().try_fold(value, |value, key| value.get(key))
}

pub fn text<'v>(value: &'v Value, path: &[&str]) -> Option<&'v str> {
    at(value, path).and_then(Value::as_str)
}

/// The `error.data.reason` of an answer.
pub fn reason(response: &Value) -> Option<&str> {
    text(response, &["error", "data", "reason"])
}

/// The nonce inside a state token of mcpsim's documented form `s1.<key>.<payload>.<tag>` (payload: base64url
/// JSON with a `nonce`), read without verifying anything: the oracle observes, it does not serve. Other
/// servers' states are opaque: `None`.
pub fn state_nonce(token: &str) -> Option<String> {
    let mut parts = token.split('.');
    let (Some("s1"), Some(_key), Some(payload), Some(_tag), None) = (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let claims: NonceClaim = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
    match claims.0? {
        Value::String(nonce) => Some(nonce),
        _ => None,
    }
}

/// The `nonce` of a state's claims object, the other claims skipped rather than built (the oracle reads a
/// nonce for every continuation it judges). Only an object has claims; a later duplicate key wins, as when
/// the whole payload is read as a JSON value.
struct NonceClaim(Option<Value>);

impl<'de> serde::Deserialize<'de> for NonceClaim {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = NonceClaim;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object of claims")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<NonceClaim, A::Error> {
                let mut nonce = None;
                while let Some(IsNonce(is_nonce)) = map.next_key::<IsNonce>()? {
                    if is_nonce {
                        nonce = Some(map.next_value::<Value>()?);
                    } else {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                Ok(NonceClaim(nonce))
            }
        }
        deserializer.deserialize_map(Visitor)
    }
}

/// Whether a claims object's key is `nonce`, read without making a string of it (a `Cow<str>` key would
/// be built as an owned `String` for every claim).
struct IsNonce(bool);

impl<'de> serde::Deserialize<'de> for IsNonce {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = IsNonce;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a claim's name")
            }
            fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<IsNonce, E> {
                Ok(IsNonce(key == "nonce"))
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

/// What a request presented to continue a flow, and what it answered.
pub struct Continuation<'h> {
    pub token: &'h str,
    /// Which confirmation this is: the nonce when the state is readable, the token itself when it is opaque.
    pub confirmation: String,
}

/// Where each state token was issued, and the form it came with (read in place from the history).
#[derive(Debug, Clone)]
pub struct Issue<'h> {
    pub principal: &'h str,
    /// `params.name` of the request that was answered with the state.
    pub tool: Option<&'h str>,
    /// `params.arguments` of that request.
    pub arguments: Option<&'h Value>,
    /// The keys of `inputRequests`: the questions the state's flow asked.
    pub asked: Vec<&'h str>,
    /// Note ids a form offered (`requestedSchema.properties.note_id.enum`).
    pub offered: Vec<&'h str>,
}

/// The history, read once for every property.
pub struct Reading<'h> {
    pub history: &'h History,
    /// Per operation: the continuation it sent, if it sent a `requestState`.
    continuations: Vec<Option<Continuation<'h>>>,
    /// Token → every answer that carried it as `result.requestState`, in operation order.
    issued: BTreeMap<&'h str, Vec<Issue<'h>>>,
    /// Per operation: its answer to the question its state asked (see [`Reading::answer`]), read once: every
    /// property asks for it.
    answers: Vec<Option<&'h Map<String, Value>>>,
}

impl<'h> Reading<'h> {
    pub fn new(history: &'h History) -> Reading<'h> {
        // Concurrent answers and retries carry the same token: each token's nonce is read once.
        let mut confirmations: BTreeMap<&str, String> = BTreeMap::new();
        let continuations = history
            .operations()
            .iter()
            .map(|op| {
                let token = op.params().and_then(|p| p.get("requestState")).and_then(Value::as_str)?;
                let confirmation =
                    confirmations.entry(token).or_insert_with(|| state_nonce(token).unwrap_or_else(|| format!("state {token}"))).clone();
                Some(Continuation { token, confirmation })
            })
            .collect();
        let mut issued: BTreeMap<&str, Vec<Issue<'h>>> = BTreeMap::new();
        for operation in history.operations() {
            let Some(response) = operation.response() else { continue };
            let Some(token) = text(response, &["result", "requestState"]) else { continue };
            let requests = at(response, &["result", "inputRequests"]).and_then(Value::as_object);
            let offered = requests
                .into_iter()
                .flat_map(|requests| requests.values())
                .filter_map(|request| {
                    at(request, &["params", "requestedSchema", "properties", "note_id", "enum"]).and_then(Value::as_array)
                })
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            issued.entry(token).or_default().push(Issue {
                principal: &operation.principal,
                tool: operation.params().and_then(|p| p.get("name")).and_then(Value::as_str),
                arguments: operation.params().and_then(|p| p.get("arguments")),
                asked: requests.map(|r| r.keys().map(String::as_str).collect()).unwrap_or_default(),
                offered,
            });
        }
        let mut reading = Reading { history, continuations, issued, answers: Vec::new() };
        reading.answers = history.operations().iter().map(|operation| reading.find_answer(operation)).collect();
        reading
    }

    pub fn operation(&self, id: OperationId) -> &'h Operation {
        &self.history.operations()[id.0]
    }

    pub fn continuation(&self, id: OperationId) -> Option<&Continuation<'h>> {
        self.continuations[id.0].as_ref()
    }

    /// The confirmation an operation answered, if it continued one.
    pub fn confirmation(&self, id: OperationId) -> Option<&str> {
        self.continuation(id).map(|c| c.confirmation.as_str())
    }

    /// Every answer that issued `token`.
    pub fn issues(&self, token: &str) -> &[Issue<'h>] {
        self.issued.get(token).map(Vec::as_slice).unwrap_or_default()
    }

    /// The answer a request gave to the question its state asked: the `inputResponses` entry under a key the
    /// issuing form asked (extra, unrequested keys are ignored, as servers ignore them). For a state nobody
    /// issued, the one entry if there is exactly one.
    pub fn answer(&self, id: OperationId) -> Option<&'h Map<String, Value>> {
        self.answers[id.0]
    }

    fn find_answer(&self, operation: &'h Operation) -> Option<&'h Map<String, Value>> {
        let responses = operation.params()?.get("inputResponses")?.as_object()?;
        let asked: Vec<&str> = match self.continuation(operation.id) {
            Some(c) => self.issues(c.token).iter().flat_map(|issue| issue.asked.iter().copied()).collect(),
            None => Vec::new(),
        };
        let entry = if asked.is_empty() {
            let mut values = responses.values();
            match (values.next(), values.next()) {
                (Some(only), None) => Some(only),
                _ => None,
            }
        } else {
            asked.iter().find_map(|&key| responses.get(key))
        };
        entry?.as_object()
    }

    /// The answer's action: `accept`, `decline`, `cancel`.
    pub fn action(&self, id: OperationId) -> Option<&'h str> {
        self.answer(id)?.get("action")?.as_str()
    }
}

/// `alice's request id 3 to i2 (retry 1)`.
pub(crate) fn label(history: &History, operation: Option<OperationId>) -> String {
    match operation {
        Some(id) => {
            let op = &history.operations()[id.0];
            let request_id = op.request_value.as_ref().and_then(|v| v.get("id")).map(Value::to_string).unwrap_or_else(|| "-".into());
            let attempt = match history.attempts().get(&id) {
                Some(Attempt::Retry { number, .. }) => format!(" (retry {number})"),
                Some(Attempt::Duplicate { .. }) => " (a network copy)".to_string(),
                None => String::new(),
            };
            format!("{}'s request id {request_id} to {}{attempt}", op.client, op.instance)
        }
        None => "the admin".into(),
    }
}

/// Every string inside a JSON value that `keep` keeps, into `found` (emptied first), with `pending` as the
/// walk's stack: a caller reading many values keeps both and allocates them once.
pub fn strings_into<'v>(value: &'v Value, keep: impl Fn(&str) -> bool, found: &mut Vec<&'v str>, pending: &mut Vec<&'v Value>) {
    found.clear();
    pending.clear();
    pending.push(value);
    while let Some(value) = pending.pop() {
        match value {
            Value::String(text) if keep(text) => found.push(text.as_str()),
            Value::Array(items) => pending.extend(items.iter()),
            Value::Object(map) => pending.extend(map.values()),
            _ => {}
        }
    }
}

/// Whether `text` shows `uri` as a whole URI (not as the start of a longer one).
pub fn shows_uri(text: &str, uri: &str) -> bool {
    let continues = |c: u8| c.is_ascii_alphanumeric() || b"-._~%/".contains(&c);
    // Non-overlapping occurrences, left to right (as `str::match_indices` finds them), by a plain scan: the
    // checker asks this for every string of every answer and every known URI, and most strings are short, so
    // building a two-way searcher for each pair cost more than the search. `continues` tests one byte:
    // a multi-byte character never continues a URI (all of its bytes are non-ASCII).
    let (text, uri) = (text.as_bytes(), uri.as_bytes());
    // An empty URI occurs at the end of every text, where nothing continues it.
    let Some((&first, _)) = uri.split_first() else { return true };
    let mut from = 0;
    while from + uri.len() <= text.len() {
        let Some(offset) = text[from..=text.len() - uri.len()].iter().position(|&b| b == first) else { return false };
        let start = from + offset;
        if &text[start..start + uri.len()] == uri {
            match text.get(start + uri.len()) {
                Some(&next) if continues(next) => from = start + uri.len(),
                _ => return true,
            }
        } else {
            from = start + 1;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uri_is_shown_whole_or_not_at_all() {
        assert!(shows_uri("note-7: TPS (file:///w/a.md)", "file:///w/a.md"));
        assert!(shows_uri("file:///w/a.md", "file:///w/a.md"));
        assert!(!shows_uri("file:///w/a.md.bak", "file:///w/a.md"));
        assert!(!shows_uri("file:///w/a.mdx", "file:///w/a.md"));
        assert!(shows_uri("file:///w/a.md.bak, then (file:///w/a.md)", "file:///w/a.md"), "a later whole occurrence counts");
        assert!(!shows_uri("file:///w/a.m", "file:///w/a.md"));
        assert!(shows_uri("x file:///w/a.md\u{e9}", "file:///w/a.md"), "a non-ASCII character ends a URI");
        assert!(!shows_uri("", "file:///w/a.md"));
    }

    #[test]
    fn nonces_are_read_from_documented_tokens_only() {
        let payload = URL_SAFE_NO_PAD.encode(br#"{"nonce":"n-1","principal":"alice"}"#);
        assert_eq!(state_nonce(&format!("s1.k1.{payload}.tag")).as_deref(), Some("n-1"));
        assert_eq!(state_nonce("opaque-state-of-another-server"), None);
        assert_eq!(state_nonce(&format!("s1.k1.{payload}")), None);
        let token = |claims: &str| format!("s1.k1.{}.tag", URL_SAFE_NO_PAD.encode(claims));
        assert_eq!(state_nonce(&token(r#"["n-1"]"#)), None, "claims are an object");
        assert_eq!(state_nonce(&token(r#"{"nonce":7}"#)), None, "a nonce is a string");
        assert_eq!(state_nonce(&token(r#"{"principal":"alice"}"#)), None);
        assert_eq!(
            state_nonce(&token(r#"{"nonce":"n-1","nonce":"n-2"}"#)).as_deref(),
            Some("n-2"),
            "the last one, as a JSON value reads it"
        );
        assert_eq!(state_nonce(&token(r#"{"nonce":"n-1","x":{"deep":[1,2,{"a":null}]}}"#)).as_deref(), Some("n-1"));
        assert_eq!(state_nonce(&token(r#"{"nonce":"n-1""#)), None, "not JSON");
        assert_eq!(state_nonce(&token(r#"{"non\u0063e":"n-3"}"#)).as_deref(), Some("n-3"), "an escaped name is still `nonce`");
        assert_eq!(state_nonce(&token(r#"{"Nonce":"n-4","nonces":"n-5"}"#)), None, "only that exact name");
    }
}
