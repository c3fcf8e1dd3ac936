//! Expectations: what a scenario says should have happened, judged against what the world recorded.
//!
//! Answer expectations read the history; store expectations read what the world can observe of its store
//! (the simulator its memory stores, live mode the fleet's database when it has it). An expectation that
//! depends on something the world did not do (an answer that was not sent, a store it cannot read, a store
//! that may differ after an unperformed change) is not evaluated, and says why: never held by default.

use super::world::World;
use crate::framework::ports::Note;
use crate::oracle::history::{History, Operation, OperationId, Outcome};
use crate::oracle::reading::state_nonce;
use crate::scenario::model::{AnswerCheck, Expectation, Targets};
use crate::scenario::template::{at, follow, preview, Template};
use serde_json::Value;
use std::collections::BTreeMap;

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
    /// Held, vacuously or not.
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
    pub lookup: &'a dyn Fn(&str) -> Result<&'a Value, String>,
}

/// Judges `expectation`: its result, the named answers it read, and whether it read the store.
pub(crate) fn judge(expectation: &Expectation, context: &Context<'_>) -> (ExpectationResult, Vec<(String, OperationId)>, bool) {
    let label = context.world.label();
    match expectation {
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
            Err(why) => (ExpectationResult::NotEvaluated(why), Vec::new(), true),
            Ok(exports) => {
                let result = if exports.len() == *expected {
                    Ok(())
                } else {
                    let each: Vec<String> =
                        exports.iter().map(|e| format!("{} (key {}, {} note(s))", e.export_id, e.key, e.note_ids.len())).collect();
                    Err(format!("expected {expected} exports, found {}: {}", exports.len(), each.join(" ")))
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

fn into_result(result: Result<(), String>) -> ExpectationResult {
    match result {
        Ok(()) => ExpectationResult::Held,
        Err(why) => ExpectationResult::Failed(why),
    }
}

/// A store expectation, read from what the world observes (`NotEvaluated` when it cannot).
fn on_store(expectation: &Expectation, context: &Context<'_>) -> ExpectationResult {
    let world = context.world;
    let checked = (|| -> Result<Result<(), String>, String> {
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
                    Err(why) => return Ok(Err(why)),
                };
                let actual = world.nonce_record(&nonce)?;
                nonce_record(answer, expected.as_ref(), actual.as_ref())
            }
            Expectation::Answer { .. } | Expectation::ExportsCount(_) | Expectation::If { .. } => unreachable!("judged by `judge`"),
        })
    })();
    match checked {
        Err(why) => ExpectationResult::NotEvaluated(why),
        Ok(result) => into_result(result),
    }
}

/// An answer expectation: `Ok` if it holds; otherwise what was expected and what was found.
pub fn answer<'v>(
    targets: &Targets,
    check: &AnswerCheck,
    history: &History,
    answers: &BTreeMap<String, OperationId>,
    lookup: &dyn Fn(&str) -> Result<&'v Value, String>,
) -> Result<(), String> {
    let operation = |name: &String| -> Result<&Operation, String> {
        let id = answers.get(name).ok_or_else(|| format!("no answer is named {name}"))?;
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
                results.push((name, check_answer(operation(name)?, check, lookup, true)));
            }
            let each: Vec<String> = results
                .iter()
                .map(|(name, result)| match result {
                    Ok(()) => format!("{name} passes"),
                    Err(why) => format!("{name}: {why}"),
                })
                .collect();
            Err(format!("expected {}, {passed} of {} did; {}", quantity.describe(), names.len(), each.join("; ")))
        }
    }
}

/// `expect note ID present|absent`.
pub(crate) fn note_present(notes: &[Note], id: &str, present: bool) -> Result<(), String> {
    let found = notes.iter().any(|note| note.id == id);
    match (found, present) {
        (true, true) | (false, false) => Ok(()),
        (false, true) => Err(format!("expected note {id} present, it is gone")),
        (true, false) => Err(format!("expected note {id} absent, it is still there")),
    }
}

/// `expect notes count N`.
pub(crate) fn notes_count(notes: &[Note], expected: usize) -> Result<(), String> {
    if notes.len() == expected {
        Ok(())
    } else {
        let ids: Vec<&str> = notes.iter().map(|n| n.id.as_str()).collect();
        Err(format!("expected {expected} notes, found {}: {}", notes.len(), ids.join(" ")))
    }
}

/// `expect consumed N`: `found` consumed nonces, described by `listing`.
pub(crate) fn consumed_count(found: usize, expected: usize, listing: impl FnOnce() -> String) -> Result<(), String> {
    if found == expected {
        Ok(())
    } else {
        Err(format!("expected {expected} consumed nonces, found {found}: {}", listing()))
    }
}

/// The nonce sealed in the `requestState` of the answer named `answer`.
pub(crate) fn nonce_of(answer: &str, answers: &BTreeMap<String, OperationId>, history: &History) -> Result<String, String> {
    let id = answers.get(answer).ok_or_else(|| format!("no answer is named {answer}"))?;
    // A request the client retried (a fault) is judged by its answered attempt.
    let operation = history.settled(*id);
    let state = operation
        .response()
        .and_then(|r| at(r, &["result", "requestState"]))
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{answer} carries no requestState (it was {})", operation.describe()))?;
    state_nonce(state).ok_or_else(|| format!("{answer}'s requestState cannot be read"))
}

/// `expect nonce of ANSWER unused|consumed RECORD`: `expected` None for unused; `actual` the stored record.
pub fn nonce_record(answer: &str, expected: Option<&Value>, actual: Option<&Value>) -> Result<(), String> {
    match (expected, actual) {
        (None, None) => Ok(()),
        (Some(expected), Some(actual)) if expected == actual => Ok(()),
        (None, Some(actual)) => Err(format!("expected the nonce of {answer} unused, it was consumed: {actual}")),
        (Some(expected), None) => Err(format!("expected the nonce of {answer} consumed with {expected}, it is unused")),
        (Some(expected), Some(actual)) => {
            Err(format!("expected the nonce of {answer} consumed with {expected}, it was consumed with {actual}"))
        }
    }
}

fn check_answer<'v>(
    operation: &Operation,
    check: &AnswerCheck,
    lookup: &dyn Fn(&str) -> Result<&'v Value, String>,
    explain: bool,
) -> Result<(), String> {
    // Why a check failed is worth building only when it will be shown: most misses are alternatives or
    // `one of` members that another answer satisfies.
    macro_rules! miss {
        ($($why:tt)*) => {
            if explain { format!($($why)*) } else { String::new() }
        };
    }
    let got = || format!("got {}", operation.describe());
    if let AnswerCheck::Any(alternatives) = check {
        let mut misses = Vec::new();
        for alternative in alternatives {
            match check_answer(operation, alternative, lookup, explain) {
                Ok(()) => return Ok(()),
                Err(why) => misses.push(why),
            }
        }
        return Err(misses.join("; and "));
    }
    if let AnswerCheck::NoResponse = check {
        return match operation.outcome {
            Outcome::NoResponse(_) => Ok(()),
            _ => Err(miss!("expected no response, {}", got())),
        };
    }
    let Some(response) = operation.response() else {
        return Err(miss!("expected a response, {}", got()));
    };
    match check {
        AnswerCheck::ResultType(expected) => match at(response, &["result", "resultType"]).and_then(Value::as_str) {
            // A tool error is its own outcome (`tool_error`), never a completion.
            Some("complete") if expected == "complete" && is_tool_error(response) => {
                Err(miss!("expected resultType \"complete\" (not a tool error), {}", got()))
            }
            Some(actual) if actual == expected => Ok(()),
            _ => Err(miss!("expected resultType {expected:?}, {}", got())),
        },
        AnswerCheck::ToolError => match at(response, &["result", "resultType"]).and_then(Value::as_str) {
            Some("complete") if is_tool_error(response) => Ok(()),
            _ => Err(miss!("expected a tool error (resultType \"complete\" with isError: true), {}", got())),
        },
        AnswerCheck::Error { code, reason } => {
            let actual_code = at(response, &["error", "code"]).and_then(Value::as_i64);
            let actual_reason = at(response, &["error", "data", "reason"]).and_then(Value::as_str);
            let code_matches = actual_code == Some(*code);
            let reason_matches = reason.as_deref().is_none_or(|r| Some(r) == actual_reason);
            if code_matches && reason_matches {
                Ok(())
            } else {
                let wanted = || match reason {
                    Some(reason) => format!("error {code} {reason}"),
                    None => format!("error {code}"),
                };
                Err(miss!("expected {}, {}", wanted(), got()))
            }
        }
        AnswerCheck::Equals { path, value } => {
            let expected = value.resolve(lookup)?;
            match follow(response, path) {
                Some(actual) if *actual == expected => Ok(()),
                Some(actual) => Err(miss!("expected {} = {}, found {}", path.join("."), preview(&expected), preview(actual))),
                None => Err(miss!("expected {} = {}, but it is absent; {}", path.join("."), preview(&expected), got())),
            }
        }
        AnswerCheck::Absent { path } => match follow(response, path) {
            None => Ok(()),
            Some(actual) => Err(miss!("expected {} absent, found {}", path.join("."), preview(actual))),
        },
        AnswerCheck::Present { path } => match follow(response, path) {
            Some(_) => Ok(()),
            None => Err(miss!("expected {} present, it is absent; {}", path.join("."), got())),
        },
        AnswerCheck::NoResponse | AnswerCheck::Any(_) => unreachable!("handled above"),
    }
}

/// A result that reports a tool error: `isError: true` (SPEC: a tool's own failure, not a protocol error).
pub(crate) fn is_tool_error(response: &Value) -> bool {
    at(response, &["result", "isError"]) == Some(&Value::Bool(true))
}
