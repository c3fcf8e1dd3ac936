//! What one answer was, in one vocabulary every judge shares: the [`Observed`] outcome of an operation (its
//! result kind, structured content, error code and [`Reason`]), read from the JSON-RPC answer alone, and how
//! two of them are compared ([`Observed::same`]) once the values that differ by design are masked
//! ([`Masks`]). Live parity, the simulator's and the target's statelessness comparisons and the target's
//! reports all read answers through it.

use super::history::{NoResponse, Operation, Outcome};
use crate::scenario::template::{at, preview};
use crate::wire::errors::Reason;
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

/// What kind of answer an operation got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// Still in flight.
    Pending,
    /// Nothing came back: a notification, or a request lost (its outcome unknown to its client).
    NoAnswer(NoResponse),
    /// A `complete` result that is not a tool error.
    Complete,
    /// A `complete` result with `isError: true`: the tool failed.
    ToolError,
    /// An `input_required` result: a form to answer.
    InputRequired,
    /// A result of another `resultType`, or with none (`None`).
    OtherResult(Option<String>),
    /// A JSON-RPC error (or an answer that is neither a result nor an error: no code, no reason).
    Error { code: Option<Code>, reason: Option<ErrorReason> },
}

/// An error's `code`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Code {
    Number(i64),
    /// A code that is not an integer, as the JSON it was.
    Other(String),
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Code::Number(code) => write!(f, "{code}"),
            Code::Other(text) => f.write_str(text),
        }
    }
}

/// An error's `data.reason`: one of the closed set, or a string a server made up (a target's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorReason {
    Known(Reason),
    Unknown(String),
}

impl fmt::Display for ErrorReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorReason::Known(reason) => f.write_str(reason.as_str()),
            ErrorReason::Unknown(text) => f.write_str(text),
        }
    }
}

/// The observed outcome of one operation: its [`Kind`], read from the answer, which it keeps (its structured
/// content and message are read from it when asked).
#[derive(Debug, Clone, PartialEq)]
pub struct Observed {
    pub kind: Kind,
    answer: Option<Arc<Value>>,
}

impl Observed {
    /// What `operation` got.
    pub fn of(operation: &Operation) -> Observed {
        match &operation.outcome {
            Outcome::Pending => Observed { kind: Kind::Pending, answer: None },
            Outcome::NoResponse(why) => Observed { kind: Kind::NoAnswer(*why), answer: None },
            Outcome::Answered { value, .. } => Observed::answered(value.clone()),
        }
    }

    /// What one JSON-RPC answer says (a copy of it kept).
    pub fn read(answer: &Value) -> Observed {
        Observed::answered(Arc::new(answer.clone()))
    }

    /// What one JSON-RPC answer says.
    pub fn answered(answer: Arc<Value>) -> Observed {
        let kind = match answer.get("result") {
            Some(result) => match result.get("resultType").and_then(Value::as_str) {
                Some("complete") if result.get("isError") == Some(&Value::Bool(true)) => Kind::ToolError,
                Some("complete") => Kind::Complete,
                Some("input_required") => Kind::InputRequired,
                other => Kind::OtherResult(other.map(str::to_string)),
            },
            None => {
                let code = at(&answer, &["error", "code"]).map(|code| match code.as_i64() {
                    Some(number) => Code::Number(number),
                    None => Code::Other(code.to_string()),
                });
                let reason = at(&answer, &["error", "data", "reason"])
                    .and_then(Value::as_str)
                    .map(|text| Reason::parse(text).map_or_else(|| ErrorReason::Unknown(text.to_string()), ErrorReason::Known));
                Kind::Error { code, reason }
            }
        };
        Observed { kind, answer: Some(answer) }
    }

    /// The answer, when one came.
    pub fn answer(&self) -> Option<&Value> {
        self.answer.as_deref()
    }

    /// A result's `structuredContent`.
    pub fn structured(&self) -> Option<&Value> {
        at(self.answer.as_deref()?, &["result", "structuredContent"])
    }

    /// A `complete` result that is not a tool error.
    pub fn succeeded(&self) -> bool {
        self.kind == Kind::Complete
    }

    /// The error's code and reason, when it is one.
    pub fn error(&self) -> Option<(Option<&Code>, Option<&ErrorReason>)> {
        match &self.kind {
            Kind::Error { code, reason } => Some((code.as_ref(), reason.as_ref())),
            _ => None,
        }
    }

    /// Whether two outcomes are the same once `masks` are applied: their kind and (masked) structured content
    /// for [`Extent::Outcome`], the whole (masked) answers for [`Extent::Answer`].
    pub fn same(&self, other: &Observed, masks: &Masks, extent: Extent) -> bool {
        match extent {
            Extent::Outcome => {
                self.kind == other.kind
                    && match (self.structured(), other.structured()) {
                        (Some(a), Some(b)) => masks.same(a, b, &["result", "structuredContent"]),
                        (None, None) => true,
                        _ => false,
                    }
            }
            Extent::Answer => match (self.answer(), other.answer()) {
                (Some(a), Some(b)) => masks.same(a, b, &[]),
                (None, None) => true,
                _ => false,
            },
        }
    }

    /// The outcome as a comparison at `extent` shows it: its line ([`Display`](fmt::Display)), or the whole
    /// answer with `masks` applied.
    pub fn shown(&self, masks: &Masks, extent: Extent) -> String {
        match (extent, self.answer()) {
            (Extent::Outcome, _) => self.to_string(),
            (Extent::Answer, Some(answer)) => preview(&masks.apply(answer)),
            (Extent::Answer, None) => "no response".into(),
        }
    }

    /// One line on what an operation got, with an error's message: `complete {...}`, `error -32602
    /// state_consumed: …`, `no response (lost)`.
    pub fn detailed(&self) -> String {
        match (&self.kind, self.answer()) {
            (Kind::Pending, _) => "nothing yet (still in flight)".into(),
            (Kind::NoAnswer(NoResponse::Notification), _) => "no response (a notification)".into(),
            (Kind::NoAnswer(NoResponse::Lost), _) => "no response (lost)".into(),
            (Kind::Error { .. }, Some(answer)) => match answer.get("error") {
                Some(error) => {
                    let code = error.get("code").map(Value::to_string).unwrap_or_default();
                    let reason = at(error, &["data", "reason"]).and_then(Value::as_str).map(|r| format!(" {r}")).unwrap_or_default();
                    let message = error.get("message").and_then(Value::as_str).unwrap_or("");
                    format!("error {code}{reason}: {message}")
                }
                None => preview(answer),
            },
            _ => self.to_string(),
        }
    }
}

impl Operation {
    /// What it got ([`Observed::of`]).
    pub fn observed(&self) -> Observed {
        Observed::of(self)
    }

    /// One line on what it got, with an error's message ([`Observed::detailed`]).
    pub(crate) fn describe(&self) -> String {
        Observed::of(self).detailed()
    }
}

/// Whether `a` and `b` hold the same outcomes in any order (a race's answers, whichever request won).
pub fn same_set(a: &[Observed], b: &[Observed], masks: &Masks, extent: Extent) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut unmatched: Vec<&Observed> = b.iter().collect();
    a.iter().all(|x| match unmatched.iter().position(|y| x.same(y, masks, extent)) {
        Some(found) => {
            unmatched.swap_remove(found);
            true
        }
        None => false,
    })
}

/// Where two JSON values differ, as `(JSON path from `path`, expected, got)` with `None` for an absent
/// member, in key order, at most `limit` of them: the structured diff of a drifted answer (`mcpsim import`'s
/// regression mode). Values of different types, and arrays of different lengths, differ as a whole.
pub fn differences(expected: &Value, got: &Value, path: &str, limit: usize) -> Vec<Difference> {
    let mut found = Vec::new();
    differences_at(expected, got, path, limit, &mut found);
    found
}

/// One difference: its path, the value expected there and the one found (`None`: absent).
type Difference = (String, Option<Value>, Option<Value>);

fn differences_at(expected: &Value, got: &Value, path: &str, limit: usize, found: &mut Vec<Difference>) {
    if found.len() >= limit || expected == got {
        return;
    }
    let joined = |path: &str, key: &str| {
        let plain = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        let key = if plain { key.to_string() } else { Value::String(key.to_string()).to_string() };
        if path.is_empty() {
            key
        } else {
            format!("{path}.{key}")
        }
    };
    match (expected, got) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let inner = joined(path, key);
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => differences_at(x, y, &inner, limit, found),
                    (x, y) if found.len() < limit => found.push((inner, x.cloned(), y.cloned())),
                    _ => return,
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (index, (x, y)) in a.iter().zip(b).enumerate() {
                differences_at(x, y, &joined(path, &index.to_string()), limit, found);
            }
        }
        _ => found.push((path.to_string(), Some(expected.clone()), Some(got.clone()))),
    }
}

/// What parity, statelessness and reports print: `resultType` (and `structuredContent`), or the error code
/// and reason, or no response. A tool error (`isError: true`) is its own outcome and prints as `tool_error`,
/// never as a completion.
impl fmt::Display for Observed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let result_type = match &self.kind {
            Kind::Pending => return f.write_str("pending"),
            Kind::NoAnswer(_) => return f.write_str("no response"),
            Kind::Error { code, reason } => {
                match code {
                    Some(code) => write!(f, "error {code}")?,
                    None => f.write_str("error ?")?,
                }
                return match reason {
                    Some(reason) => write!(f, " {reason}"),
                    None => Ok(()),
                };
            }
            Kind::Complete => "complete",
            Kind::ToolError => "tool_error",
            Kind::InputRequired => "input_required",
            Kind::OtherResult(Some(other)) => other.as_str(),
            Kind::OtherResult(None) => "(no resultType)",
        };
        match self.structured() {
            Some(content) => write!(f, "{result_type} {content}"),
            None => f.write_str(result_type),
        }
    }
}

/// How much of two answers a comparison looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extent {
    /// The outcome: kind, code, reason and structured content (someone else's server: its words and ids are
    /// its own).
    Outcome,
    /// Every byte of the answers (the simulator's own servers, which must answer alike wherever they run).
    Answer,
}

/// Values that differ by design between two plays of the same scenario, left out of a comparison.
#[derive(Debug, Clone, Default)]
pub struct Masks {
    masks: Vec<Mask>,
}

/// One value left out of comparisons, shown as `shown` instead.
#[derive(Debug, Clone)]
pub enum Mask {
    /// Every string member named `key`, at any depth, that contains `containing` (any string when empty).
    Key { key: String, containing: String, shown: String },
    /// The member at `path` from the answer's root (`result`, `structuredContent`, …; `*` stands for any
    /// member or array item), whatever its value.
    Path { path: Vec<String>, shown: String },
}

impl Masks {
    /// No value masked: answers compared as they are.
    pub fn none() -> Masks {
        Masks::default()
    }

    /// What differs by design in the MRTR flows themselves: a sealed `requestState` (it carries an instance's
    /// own nonce) and an out-of-band page's URL (a reference drawn from the instance's nonces, as a state is).
    pub fn by_design() -> Masks {
        Masks::none().with(Mask::Key { key: "requestState".into(), containing: String::new(), shown: "<state>".into() }).with(Mask::Key {
            key: "url".into(),
            containing: crate::servers::notes::publish::PAGE_PATH.into(),
            shown: "<out-of-band page>".into(),
        })
    }

    pub fn with(mut self, mask: Mask) -> Masks {
        self.masks.push(mask);
        self
    }

    /// Whether the member at `path` (from the answer's root, ending in its key; `*` for an array item) is
    /// masked: what `mcpsim import` expects `present` rather than equal.
    pub fn masked(&self, path: &[&str], value: &Value) -> bool {
        path.last().is_some_and(|key| self.mask_of(path, key, value).is_some())
    }

    /// What the member `key` at `path` (from the answer's root, ending in `key`) is masked as, if it is.
    fn mask_of(&self, path: &[&str], key: &str, value: &Value) -> Option<&str> {
        self.masks.iter().find_map(|mask| match mask {
            Mask::Key { key: masked, containing, shown } => {
                let text = value.as_str()?;
                (masked == key && text.contains(containing.as_str())).then_some(shown.as_str())
            }
            Mask::Path { path: masked, shown } => {
                let matches = masked.len() == path.len() && masked.iter().zip(path).all(|(m, p)| m == "*" || m == p);
                matches.then_some(shown.as_str())
            }
        })
    }

    /// Whether `a` and `b` (found at `path` from their answers' roots) are the same once masked, compared in
    /// place (only a difference is worth building the masked copies for).
    pub fn same(&self, a: &Value, b: &Value, path: &[&str]) -> bool {
        let mut path: Vec<&str> = path.to_vec();
        self.same_at(a, b, &mut path)
    }

    fn same_at<'v>(&self, a: &'v Value, b: &'v Value, path: &mut Vec<&'v str>) -> bool {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                x.len() == y.len()
                    && x.iter().zip(y).all(|((kx, vx), (ky, vy))| {
                        if kx != ky {
                            return false;
                        }
                        path.push(kx);
                        let same = match (self.mask_of(path, kx, vx), self.mask_of(path, ky, vy)) {
                            (None, None) => self.same_at(vx, vy, path),
                            (masked_x, masked_y) => masked_x == masked_y,
                        };
                        path.pop();
                        same
                    })
            }
            (Value::Array(x), Value::Array(y)) => {
                x.len() == y.len()
                    && x.iter().zip(y).all(|(vx, vy)| {
                        path.push("*");
                        let same = self.same_at(vx, vy, path);
                        path.pop();
                        same
                    })
            }
            _ => a == b,
        }
    }

    /// `value` (a whole answer) with every masked member replaced by what it is shown as.
    pub fn apply(&self, value: &Value) -> Value {
        self.apply_at(value, &mut Vec::new())
    }

    fn apply_at<'v>(&self, value: &'v Value, path: &mut Vec<&'v str>) -> Value {
        match value {
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| {
                        path.push(k);
                        let masked = match self.mask_of(path, k, v) {
                            Some(shown) => Value::String(shown.into()),
                            None => self.apply_at(v, path),
                        };
                        path.pop();
                        (k.clone(), masked)
                    })
                    .collect(),
            ),
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|item| {
                        path.push("*");
                        let masked = self.apply_at(item, path);
                        path.pop();
                        masked
                    })
                    .collect(),
            ),
            other => other.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn observed(value: Value) -> Observed {
        Observed::answered(Arc::new(value))
    }

    #[test]
    fn each_kind_is_read_from_a_real_answer_and_printed_as_reports_show_it() {
        let cases = [
            (
                json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "complete", "structuredContent": {"deleted": true}}}),
                Kind::Complete,
                r#"complete {"deleted":true}"#,
            ),
            (
                json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "complete", "isError": true, "content": []}}),
                Kind::ToolError,
                "tool_error",
            ),
            (
                json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "input_required", "requestState": "s"}}),
                Kind::InputRequired,
                "input_required",
            ),
            (json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}), Kind::OtherResult(None), "(no resultType)"),
            (
                json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "used", "data": {"reason": "state_consumed"}}}),
                Kind::Error { code: Some(Code::Number(-32602)), reason: Some(ErrorReason::Known(Reason::StateConsumed)) },
                "error -32602 state_consumed",
            ),
            (
                json!({"jsonrpc": "2.0", "id": 1, "error": {"code": "x", "message": "odd", "data": {"reason": "made_up"}}}),
                Kind::Error { code: Some(Code::Other("\"x\"".into())), reason: Some(ErrorReason::Unknown("made_up".into())) },
                "error \"x\" made_up",
            ),
            (json!({"error": {"code": -32601}}), Kind::Error { code: Some(Code::Number(-32601)), reason: None }, "error -32601"),
            (json!({"jsonrpc": "2.0", "id": 1}), Kind::Error { code: None, reason: None }, "error ?"),
        ];
        for (answer, kind, shown) in cases {
            let outcome = observed(answer.clone());
            assert_eq!(outcome.kind, kind, "{answer}");
            assert_eq!(outcome.to_string(), shown, "{answer}");
        }
        assert!(observed(json!({"result": {"resultType": "complete"}})).succeeded());
        assert!(!observed(json!({"result": {"resultType": "complete", "isError": true}})).succeeded());
    }

    #[test]
    fn outcomes_compare_by_kind_and_masked_content_or_whole_masked_answers() {
        let masks = Masks::by_design();
        let form = |state: &str, id: u64| observed(json!({"id": id, "result": {"resultType": "input_required", "requestState": state}}));
        // A state differs by design; an id does not, at the extent of a whole answer.
        assert!(form("s1.a", 1).same(&form("s1.b", 1), &masks, Extent::Answer));
        assert!(!form("s1.a", 1).same(&form("s1.a", 2), &masks, Extent::Answer));
        assert!(form("s1.a", 1).same(&form("s1.b", 2), &masks, Extent::Outcome));
        assert!(!form("s1.a", 1).same(&form("s1.b", 1), &Masks::none(), Extent::Answer));
        // A tool error is not a completion, and does not print as one.
        let done = observed(json!({"result": {"resultType": "complete"}}));
        let failed = observed(json!({"result": {"resultType": "complete", "isError": true}}));
        assert_eq!((done.to_string().as_str(), failed.to_string().as_str()), ("complete", "tool_error"));
        assert!(!done.same(&failed, &masks, Extent::Outcome));
        // Content differs, unless a path mask says that member differs by design.
        let audit = |id: &str| observed(json!({"result": {"resultType": "complete", "structuredContent": {"auditId": id, "ok": true}}}));
        assert!(!audit("a").same(&audit("b"), &masks, Extent::Outcome));
        let by_path = Masks::by_design()
            .with(Mask::Path { path: vec!["result".into(), "structuredContent".into(), "auditId".into()], shown: "<audit>".into() });
        assert!(audit("a").same(&audit("b"), &by_path, Extent::Outcome));
        assert!(audit("a").same(&audit("b"), &by_path, Extent::Answer));
        assert_eq!(
            audit("a").shown(&by_path, Extent::Answer),
            r#"{"result":{"resultType":"complete","structuredContent":{"auditId":"<audit>","ok":true}}}"#
        );
        // Sets: any order, same multiplicity.
        assert!(same_set(&[done.clone(), failed.clone()], &[failed.clone(), done.clone()], &masks, Extent::Outcome));
        assert!(!same_set(&[done.clone(), done.clone()], &[failed, done], &masks, Extent::Outcome));
    }

    #[test]
    fn answers_compare_equal_exactly_when_their_masked_copies_do() {
        let masks = Masks::by_design();
        let page = format!("https://notes.example{}abc", crate::servers::notes::publish::PAGE_PATH);
        let other_page = format!("https://notes.example{}xyz", crate::servers::notes::publish::PAGE_PATH);
        let pairs = [
            (json!({"result": {"requestState": "s1.a"}}), json!({"result": {"requestState": "s1.b"}})),
            (json!({"result": {"requestState": "s1.a"}}), json!({"result": {"requestState": 7}})),
            (json!({"result": {"url": page}}), json!({"result": {"url": other_page}})),
            (json!({"result": {"url": page}}), json!({"result": {"url": "https://elsewhere.example/"}})),
            (json!({"a": [1, {"requestState": "x"}]}), json!({"a": [1, {"requestState": "y"}]})),
            (json!({"a": [1, 2]}), json!({"a": [1, 2, 3]})),
            (json!({"a": 1}), json!({"b": 1})),
            (json!({"a": 1, "b": 2}), json!({"a": 1})),
            (json!("text"), json!("text")),
        ];
        for (a, b) in &pairs {
            assert_eq!(masks.same(a, b, &[]), masks.apply(a) == masks.apply(b), "{a} / {b}");
        }
        let nothing = Observed { kind: Kind::NoAnswer(NoResponse::Lost), answer: None };
        assert!(nothing.same(&nothing, &masks, Extent::Answer));
        assert!(!observed(json!({})).same(&nothing, &masks, Extent::Answer));
    }
}
