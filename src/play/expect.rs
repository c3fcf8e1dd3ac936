//! Expectations: what a scenario says should have happened, judged against what the world recorded.
//!
//! Answer expectations read the history; store expectations read what the world can observe of its store
//! (the simulator its memory stores, live mode the fleet's database when it has it). An expectation that
//! depends on something the world did not do (an answer that was not sent, a store it cannot read, a store
//! that may differ after an unperformed change) is not evaluated, and says why: never held by default.

use super::world::{Unobservable, World};
use crate::framework::ports::Note;
use crate::oracle::history::{History, Operation, OperationId, Outcome};
use crate::oracle::reading::state_nonce;
use crate::scenario::model::{AnswerCheck, Expectation, Quantity, Targets};
use crate::scenario::template::{at, follow, preview, ResolveError, Template};
use serde_json::Value;
use std::collections::BTreeMap;

/// Why an expectation did not hold: what it expected and what was found, with the data to say so. Its text
/// is the report's `FAILED` line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    /// A value the expectation writes refers to something without a value.
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    #[error("no answer is named {name}")]
    NoAnswerNamed { name: String },
    /// The answer whose nonce is asked about carries no sealed state (`outcome`, what it was).
    #[error("{answer} carries no requestState (it was {outcome})")]
    NoRequestState { answer: String, outcome: String },
    #[error("{answer}'s requestState cannot be read")]
    UnreadableState { answer: String },
    #[error("expected note {id} present, it is gone")]
    NoteGone { id: String },
    #[error("expected note {id} absent, it is still there")]
    NoteStillThere { id: String },
    /// `found`: the ids of the notes the store holds.
    #[error("expected {expected} notes, found {}: {}", .found.len(), .found.join(" "))]
    NotesCount { expected: usize, found: Vec<String> },
    /// `listing`: what was counted, as the world describes it.
    #[error("expected {expected} consumed nonces, found {found}: {listing}")]
    ConsumedCount { expected: usize, found: usize, listing: String },
    /// `found`: each export as `ID (key KEY, N note(s))`.
    #[error("expected {expected} exports, found {}: {}", .found.len(), .found.join(" "))]
    ExportsCount { expected: usize, found: Vec<String> },
    #[error("expected the nonce of {answer} unused, it was consumed: {actual}")]
    NonceConsumed { answer: String, actual: Value },
    #[error("expected the nonce of {answer} consumed with {expected}, it is unused")]
    NonceUnused { answer: String, expected: Value },
    #[error("expected the nonce of {answer} consumed with {expected}, it was consumed with {actual}")]
    NonceRecord { answer: String, expected: Value, actual: Value },
    /// `one of` / `all of` / …: how many of the answers passed, and each answer's own result.
    #[error("expected {}, {passed} of {} did; {}", .quantity.describe(), .results.len(), each_result(.results))]
    Quantity { quantity: Quantity, passed: usize, results: Vec<(String, Result<(), Mismatch>)> },
    /// `A or B`: why each alternative missed.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; and "))]
    NoAlternative(Vec<Mismatch>),
    /// `got`: what the answer was (its outcome described).
    #[error("expected no response, got {got}")]
    Responded { got: String },
    #[error("expected a response, got {got}")]
    NoResponse { got: String },
    #[error("expected resultType {expected:?}, got {got}")]
    ResultType { expected: String, got: String },
    /// `complete` expected, and the result is a tool error (`isError: true`): its own outcome, never a completion.
    #[error("expected resultType \"complete\" (not a tool error), got {got}")]
    ToolErrorNotComplete { got: String },
    #[error("expected a tool error (resultType \"complete\" with isError: true), got {got}")]
    NotToolError { got: String },
    #[error("expected error {code}{}, got {got}", .reason.as_ref().map(|r| format!(" {r}")).unwrap_or_default())]
    Error { code: i64, reason: Option<String>, got: String },
    #[error("{}", not_equal(.path, .expected, .actual))]
    NotEqual { path: Vec<String>, expected: Value, actual: Value },
    #[error("expected {} = {}, but it is absent; got {got}", .path.join("."), preview(.expected))]
    EqualButAbsent { path: Vec<String>, expected: Value, got: String },
    #[error("expected {} absent, found {}", .path.join("."), preview(.actual))]
    NotAbsent { path: Vec<String>, actual: Value },
    #[error("expected {} present, it is absent; got {got}", .path.join("."))]
    NotPresent { path: Vec<String>, got: String },
    /// A miss whose reason was not worked out, because it is not shown (an alternative or a `one of`
    /// member another answer may satisfy).
    #[error("")]
    Unexplained,
}

/// `NAME passes` or `NAME: why` for each answer of a quantified expectation.
fn each_result(results: &[(String, Result<(), Mismatch>)]) -> String {
    let each: Vec<String> = results
        .iter()
        .map(|(name, result)| match result {
            Ok(()) => format!("{name} passes"),
            Err(why) => format!("{name}: {why}"),
        })
        .collect();
    each.join("; ")
}

/// How one expectation went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExpectationResult {
    Held,
    /// An `if` whose condition did not hold, so its consequence was not judged (why the condition failed).
    HeldVacuously(String),
    Failed(String),
    NotEvaluated(String),
}

impl ExpectationResult {
    // Read by live mode's report (`http`) and the command line.
    /// Held, vacuously or not.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub fn held(&self) -> bool {
        matches!(self, ExpectationResult::Held | ExpectationResult::HeldVacuously(_))
    }
}

/// What an expectation is judged against.
pub(crate) struct Context<'a> {
    pub history: &'a History,
    pub answers: &'a BTreeMap<String, OperationId>,
    /// Named answers that were not sent, and why.
    pub skipped: &'a BTreeMap<String, String>,
    /// Operations whose answers are not comparable, and why.
    pub caveats: &'a BTreeMap<OperationId, String>,
    /// Why the store may differ from what the scenario expects, if it may.
    pub store_divergence: Option<String>,
    pub world: &'a dyn World,
    pub lookup: &'a dyn Fn(&str) -> Result<&'a Value, ResolveError>,
}

/// Judges `expectation`: its result, the named answers it read, and whether it read the store.
pub(crate) fn judge(expectation: &Expectation, context: &Context<'_>) -> (ExpectationResult, Vec<(String, OperationId)>, bool) {
    let label = context.world.label();
    match expectation {
        Expectation::Always(inner) => judge(inner, context),
        Expectation::If { condition, consequence } => {
            let (first, mut reads, mut reads_store) = judge(condition, context);
            match first {
                ExpectationResult::Held | ExpectationResult::HeldVacuously(_) => {
                    let (then, more_reads, more_store) = judge(consequence, context);
                    reads.extend(more_reads);
                    reads_store |= more_store;
                    (then, reads, reads_store)
                }
                ExpectationResult::Failed(why) => {
                    (ExpectationResult::HeldVacuously(format!("the condition did not hold: {why}")), reads, reads_store)
                }
                not_evaluated => (not_evaluated, reads, reads_store),
            }
        }
        Expectation::Answer { targets, check } => {
            let mut names: Vec<&String> = match targets {
                Targets::One(name) => vec![name],
                Targets::Some { names, .. } => names.iter().collect(),
            };
            for template in check.templates() {
                names.extend(template.references().into_iter().map(|r| &r.name));
            }
            let reads: Vec<(String, OperationId)> =
                names.iter().filter_map(|name| context.answers.get(*name).map(|id| ((*name).clone(), *id))).collect();
            for name in &names {
                if let Some(why) = context.skipped.get(*name) {
                    return (ExpectationResult::NotEvaluated(format!("{name} was not sent {label} ({why})")), reads, false);
                }
                if let Some(why) = context.answers.get(*name).and_then(|id| context.caveats.get(id)) {
                    return (ExpectationResult::NotEvaluated(format!("{name} is not comparable ({why})")), reads, false);
                }
            }
            (into_result(answer(targets, check, context.history, context.answers, context.lookup)), reads, false)
        }
        Expectation::ExportsCount(expected) => match context.world.exports() {
            Err(why) => (ExpectationResult::NotEvaluated(why.to_string()), Vec::new(), true),
            Ok(exports) => {
                let result = if exports.len() == *expected {
                    Ok(())
                } else {
                    let found = exports.iter().map(|e| format!("{} (key {}, {} note(s))", e.export_id, e.key, e.note_ids.len())).collect();
                    Err(Mismatch::ExportsCount { expected: *expected, found })
                };
                (into_result(result), Vec::new(), true)
            }
        },
        store => {
            let reads: Vec<(String, OperationId)> = match store {
                Expectation::Nonce { answer, .. } => context.answers.get(answer).map(|id| (answer.clone(), *id)).into_iter().collect(),
                _ => Vec::new(),
            };
            if let Some(why) = &context.store_divergence {
                return (ExpectationResult::NotEvaluated(format!("the store may differ from the scenario's: {why}")), reads, true);
            }
            if let Expectation::Nonce { answer, .. } = store {
                if let Some(why) = context.skipped.get(answer) {
                    return (ExpectationResult::NotEvaluated(format!("{answer} was not sent {label} ({why})")), reads, true);
                }
            }
            (on_store(store, context), reads, true)
        }
    }
}

fn into_result(result: Result<(), Mismatch>) -> ExpectationResult {
    match result {
        Ok(()) => ExpectationResult::Held,
        Err(why) => ExpectationResult::Failed(why.to_string()),
    }
}

/// A store expectation, read from what the world observes (`NotEvaluated` when it cannot).
fn on_store(expectation: &Expectation, context: &Context<'_>) -> ExpectationResult {
    let world = context.world;
    // Outside: why the world cannot observe it; inside: whether it held.
    let checked = (|| -> Result<Result<(), Mismatch>, Unobservable> {
        Ok(match expectation {
            Expectation::NotePresent { id, present } => note_present(&world.notes()?, id, *present),
            Expectation::NotesCount(expected) => notes_count(&world.notes()?, *expected),
            Expectation::ConsumedCount(expected) => {
                let consumed = world.consumed()?;
                consumed_count(consumed.count, *expected, consumed.listing)
            }
            Expectation::Nonce { answer, record } => {
                let nonce = match nonce_of(answer, context.answers, context.history) {
                    Ok(nonce) => nonce,
                    Err(why) => return Ok(Err(why)),
                };
                let expected = match record.as_ref().map(|t: &Template| t.resolve(context.lookup)).transpose() {
                    Ok(expected) => expected,
                    Err(why) => return Ok(Err(why.into())),
                };
                let actual = world.nonce_record(&nonce)?;
                nonce_record(answer, expected.as_ref(), actual.as_ref())
            }
            Expectation::Answer { .. } | Expectation::ExportsCount(_) | Expectation::If { .. } | Expectation::Always(_) => {
                unreachable!("judged by `judge`")
            }
        })
    })();
    match checked {
        Err(why) => ExpectationResult::NotEvaluated(why.to_string()),
        Ok(result) => into_result(result),
    }
}

/// An answer expectation: `Ok` if it holds; otherwise what was expected and what was found.
pub fn answer<'v>(
    targets: &Targets,
    check: &AnswerCheck,
    history: &History,
    answers: &BTreeMap<String, OperationId>,
    lookup: &dyn Fn(&str) -> Result<&'v Value, ResolveError>,
) -> Result<(), Mismatch> {
    let operation = |name: &String| -> Result<&Operation, Mismatch> {
        let id = answers.get(name).ok_or_else(|| Mismatch::NoAnswerNamed { name: name.clone() })?;
        Ok(history.settled(*id))
    };
    match targets {
        Targets::One(name) => {
            let operation = operation(name)?;
            check_answer(operation, check, lookup, false).or_else(|_| check_answer(operation, check, lookup, true))
        }
        Targets::Some { names, quantity } => {
            let mut passed = 0;
            for name in names {
                passed += usize::from(check_answer(operation(name)?, check, lookup, false).is_ok());
            }
            if quantity.holds(passed, names.len()) {
                return Ok(());
            }
            let mut results = Vec::new();
            for name in names {
                results.push((name.clone(), check_answer(operation(name)?, check, lookup, true)));
            }
            Err(Mismatch::Quantity { quantity: *quantity, passed, results })
        }
    }
}

/// `expect note ID present|absent`.
pub(crate) fn note_present(notes: &[Note], id: &str, present: bool) -> Result<(), Mismatch> {
    let found = notes.iter().any(|note| note.id == id);
    match (found, present) {
        (true, true) | (false, false) => Ok(()),
        (false, true) => Err(Mismatch::NoteGone { id: id.to_string() }),
        (true, false) => Err(Mismatch::NoteStillThere { id: id.to_string() }),
    }
}

/// `expect notes count N`.
pub(crate) fn notes_count(notes: &[Note], expected: usize) -> Result<(), Mismatch> {
    if notes.len() == expected {
        Ok(())
    } else {
        Err(Mismatch::NotesCount { expected, found: notes.iter().map(|n| n.id.clone()).collect() })
    }
}

/// `expect consumed N`: `found` consumed nonces, described by `listing`.
pub(crate) fn consumed_count(found: usize, expected: usize, listing: impl FnOnce() -> String) -> Result<(), Mismatch> {
    if found == expected {
        Ok(())
    } else {
        Err(Mismatch::ConsumedCount { expected, found, listing: listing() })
    }
}

/// `expect P = V` that did not hold. Two short scalars are shown whole; otherwise the message lists the JSON
/// paths where the value found differs from the one written, both values at each (the structured diff of a
/// drifted answer, as a trace differ shows it), never two prefixes cut off before the difference.
fn not_equal(path: &[String], expected: &Value, actual: &Value) -> String {
    let at = path.join(".");
    let (shown_expected, shown_actual) = (preview(expected), preview(actual));
    let structured = expected.is_object() || expected.is_array() || actual.is_object() || actual.is_array();
    if !structured && !shown_expected.ends_with('…') && !shown_actual.ends_with('…') {
        return format!("expected {at} = {shown_expected}, found {shown_actual}");
    }
    let mut out = format!("expected {at} = {shown_expected}, found a value that differs at these JSON paths (expected, then found):");
    for line in crate::oracle::outcome::json_differences(expected, actual) {
        let line = match line.strip_prefix("(the whole value)") {
            Some(rest) => format!("{at}{rest}"),
            None if line.starts_with('…') => line,
            None if line.starts_with('[') => format!("{at}{line}"),
            None => format!("{at}.{line}"),
        };
        out.push_str("\n    ");
        out.push_str(&line.replace('\n', "\n    "));
    }
    out
}

/// The nonce sealed in the `requestState` of the answer named `answer`.
pub(crate) fn nonce_of(answer: &str, answers: &BTreeMap<String, OperationId>, history: &History) -> Result<String, Mismatch> {
    let id = answers.get(answer).ok_or_else(|| Mismatch::NoAnswerNamed { name: answer.to_string() })?;
    // A request the client retried (a fault) is judged by its answered attempt.
    let operation = history.settled(*id);
    let state = operation
        .response()
        .and_then(|r| at(r, &["result", "requestState"]))
        .and_then(Value::as_str)
        .ok_or_else(|| Mismatch::NoRequestState { answer: answer.to_string(), outcome: operation.describe() })?;
    state_nonce(state).ok_or_else(|| Mismatch::UnreadableState { answer: answer.to_string() })
}

/// `expect nonce of ANSWER unused|consumed RECORD`: `expected` None for unused; `actual` the stored record.
pub fn nonce_record(answer: &str, expected: Option<&Value>, actual: Option<&Value>) -> Result<(), Mismatch> {
    let answer = answer.to_string();
    match (expected, actual) {
        (None, None) => Ok(()),
        (Some(expected), Some(actual)) if expected == actual => Ok(()),
        (None, Some(actual)) => Err(Mismatch::NonceConsumed { answer, actual: actual.clone() }),
        (Some(expected), None) => Err(Mismatch::NonceUnused { answer, expected: expected.clone() }),
        (Some(expected), Some(actual)) => Err(Mismatch::NonceRecord { answer, expected: expected.clone(), actual: actual.clone() }),
    }
}

fn check_answer<'v>(
    operation: &Operation,
    check: &AnswerCheck,
    lookup: &dyn Fn(&str) -> Result<&'v Value, ResolveError>,
    explain: bool,
) -> Result<(), Mismatch> {
    // Why a check failed is worth building only when it will be shown: most misses are alternatives or
    // `one of` members that another answer satisfies.
    macro_rules! miss {
        ($why:expr) => {
            Err(if explain { $why } else { Mismatch::Unexplained })
        };
    }
    let got = || operation.describe();
    if let AnswerCheck::Any(alternatives) = check {
        let mut misses = Vec::new();
        for alternative in alternatives {
            match check_answer(operation, alternative, lookup, explain) {
                Ok(()) => return Ok(()),
                Err(why) => misses.push(why),
            }
        }
        return Err(Mismatch::NoAlternative(misses));
    }
    if let AnswerCheck::NoResponse = check {
        return match operation.outcome {
            Outcome::NoResponse(_) => Ok(()),
            _ => miss!(Mismatch::Responded { got: got() }),
        };
    }
    let Some(response) = operation.response() else {
        return miss!(Mismatch::NoResponse { got: got() });
    };
    match check {
        AnswerCheck::ResultType(expected) => match at(response, &["result", "resultType"]).and_then(Value::as_str) {
            // A tool error is its own outcome (`tool_error`), never a completion.
            Some("complete") if expected == "complete" && is_tool_error(response) => {
                miss!(Mismatch::ToolErrorNotComplete { got: got() })
            }
            Some(actual) if actual == expected => Ok(()),
            _ => miss!(Mismatch::ResultType { expected: expected.clone(), got: got() }),
        },
        AnswerCheck::ToolError => match at(response, &["result", "resultType"]).and_then(Value::as_str) {
            Some("complete") if is_tool_error(response) => Ok(()),
            _ => miss!(Mismatch::NotToolError { got: got() }),
        },
        AnswerCheck::Error { code, reason } => {
            let actual_code = at(response, &["error", "code"]).and_then(Value::as_i64);
            let actual_reason = at(response, &["error", "data", "reason"]).and_then(Value::as_str);
            let code_matches = actual_code == Some(*code);
            let reason_matches = reason.as_deref().is_none_or(|r| Some(r) == actual_reason);
            if code_matches && reason_matches {
                Ok(())
            } else {
                miss!(Mismatch::Error { code: *code, reason: reason.clone(), got: got() })
            }
        }
        AnswerCheck::Equals { path, value } => {
            let expected = value.resolve(lookup)?;
            match follow(response, path) {
                Some(actual) if *actual == expected => Ok(()),
                Some(actual) => miss!(Mismatch::NotEqual { path: path.clone(), expected, actual: actual.clone() }),
                None => miss!(Mismatch::EqualButAbsent { path: path.clone(), expected, got: got() }),
            }
        }
        AnswerCheck::Absent { path } => match follow(response, path) {
            None => Ok(()),
            Some(actual) => miss!(Mismatch::NotAbsent { path: path.clone(), actual: actual.clone() }),
        },
        AnswerCheck::Present { path } => match follow(response, path) {
            Some(_) => Ok(()),
            None => miss!(Mismatch::NotPresent { path: path.clone(), got: got() }),
        },
        AnswerCheck::NoResponse | AnswerCheck::Any(_) => unreachable!("handled above"),
    }
}

/// A result that reports a tool error: `isError: true` (SPEC: a tool's own failure, not a protocol error).
pub(crate) fn is_tool_error(response: &Value) -> bool {
    at(response, &["result", "isError"]) == Some(&Value::Bool(true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn mismatches_read_as_the_failures_reports_always_showed() {
        let path = |p: &str| p.split('.').map(str::to_string).collect::<Vec<_>>();
        let lost = || "no response (lost)".to_string();
        for (mismatch, text) in [
            (Mismatch::Error { code: -32602, reason: Some("consent".into()), got: lost() }, "expected error -32602 consent, got no response (lost)"),
            (Mismatch::Error { code: -32602, reason: None, got: lost() }, "expected error -32602, got no response (lost)"),
            (Mismatch::NotesCount { expected: 2, found: vec!["note-3".into()] }, "expected 2 notes, found 1: note-3"),
            (
                Mismatch::Quantity {
                    quantity: Quantity::Exactly(1),
                    passed: 0,
                    results: vec![("a".into(), Err(Mismatch::NoResponse { got: lost() })), ("b".into(), Ok(()))],
                },
                "expected exactly one to pass, 0 of 2 did; a: expected a response, got no response (lost); b passes",
            ),
            (
                Mismatch::NoAlternative(vec![
                    Mismatch::ResultType { expected: "complete".into(), got: lost() },
                    Mismatch::NotPresent { path: path("result.a"), got: lost() },
                ]),
                "expected resultType \"complete\", got no response (lost); and expected result.a present, it is absent; got no response (lost)",
            ),
            (Mismatch::NotEqual { path: path("result.n"), expected: json!(1), actual: json!("x") }, "expected result.n = 1, found \"x\""),
            (
                Mismatch::NotEqual {
                    path: path("result.structuredContent"),
                    expected: json!({"deleted": true, "noteId": "note-7", "outcome": "deleted"}),
                    actual: json!({"deleted": false, "outcome": "declined"}),
                },
                "expected result.structuredContent = {\"deleted\":true,\"noteId\":\"note-7\",\"outcome\":\"deleted\"}, \
                 found a value that differs at these JSON paths (expected, then found):\n    \
                 result.structuredContent.deleted: true, then false\n    \
                 result.structuredContent.noteId: \"note-7\", then (absent)\n    \
                 result.structuredContent.outcome: \"deleted\", then \"declined\"",
            ),
            (
                Mismatch::NonceRecord { answer: "r1".into(), expected: json!({"outcome": "declined"}), actual: json!({"outcome": "cancelled"}) },
                "expected the nonce of r1 consumed with {\"outcome\":\"declined\"}, it was consumed with {\"outcome\":\"cancelled\"}",
            ),
        ] {
            assert_eq!(mismatch.to_string(), text);
        }
    }

    #[test]
    fn store_expectations_say_what_they_found() {
        let note = |id: &str| Note { id: id.into(), ..Note::default() };
        assert_eq!(note_present(&[note("n1")], "n2", true), Err(Mismatch::NoteGone { id: "n2".into() }));
        assert_eq!(note_present(&[note("n1")], "n1", false), Err(Mismatch::NoteStillThere { id: "n1".into() }));
        assert_eq!(notes_count(&[note("n1"), note("n2")], 2), Ok(()));
        assert_eq!(notes_count(&[note("n1")], 0), Err(Mismatch::NotesCount { expected: 0, found: vec!["n1".into()] }));
        assert_eq!(nonce_record("r", None, Some(&json!(1))), Err(Mismatch::NonceConsumed { answer: "r".into(), actual: json!(1) }));
        assert_eq!(nonce_record("r", Some(&json!(1)), Some(&json!(1))), Ok(()));
    }
}
