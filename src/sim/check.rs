//! The checker: a scenario's expectations, and the safety properties every run must keep (MISSION §6).
//!
//! Properties are judged from the [`History`] alone, by an independent reading of what clients sent and
//! what the stores did; the checker never asks the handlers whether they behaved.
//!
//! * **At most once**: a nonce is consumed at most once, and one confirmation (the nonce inside the state
//!   the client sent) deletes at most once, however the server handles nonces.
//! * **Consent**: every deleted note was deleted on behalf of a request that accepted (with
//!   `confirm: true`) exactly that note, carrying a state sealed for that principal, tool and exact
//!   arguments, whose candidates include the note and which a server had shown to that principal.
//! * **Containment**: every deleted note, every note offered in a form and every resource listed or read
//!   lies inside a workspace the principal was authorized for at that moment.
//! * **Refusal**: a decline or a cancel deletes nothing and is never answered with another form; a cancel
//!   consumes nothing; once a decline is acknowledged, nothing is ever deleted under that confirmation.
//! * **Honest outcome**: an answer that reports a deletion (directly, or as the `previousOutcome` of a used
//!   confirmation) matches a deletion made under that confirmation; a used confirmation's refusal reports
//!   the deletion it made (the recovery rule: a client that lost its answer learns it by retrying); and an
//!   answer that reports an export names one the backend recorded, for that principal, of those notes.
//! * **Liveness** (judged when clients retry, i.e. under faults): once faults stop, every request gets an
//!   answer, and no confirmation stays "in progress": a confirmed delete completes, exactly once (at most once
//!   is the property above), and its client learns that it did.
//! * **Statelessness** is checked by the runner (a second run routes each request to another instance
//!   of the same configuration and must see the same answers).

use super::history::{Attempt, Effect, EffectKind, History, NoResponse, Operation, Outcome};
use super::message::OperationId;
use super::scenario::model::{AnswerCheck, Expectation, Targets};
use super::scenario::template::{at, follow, preview};
use crate::handlers::notes::TOOL_NOTES_DELETE;
use crate::handlers::ports::Note;
use crate::policy::authorization::Authorizations;
use crate::policy::containment::FileUri;
use crate::policy::state::StateClaims;
use crate::stores::memory::{MemoryNoteStore, MemoryReplayStore};
use crate::wire::canonical::digest_hex;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::Value;
use std::borrow::Cow;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Property {
    AtMostOnce,
    Consent,
    Containment,
    Refusal,
    Statelessness,
    Capabilities,
    HonestOutcome,
    Liveness,
}

impl Property {
    pub fn as_str(self) -> &'static str {
        match self {
            Property::AtMostOnce => "at-most-once",
            Property::Consent => "consent",
            Property::Containment => "containment",
            Property::Refusal => "refusal",
            Property::Statelessness => "statelessness",
            Property::Capabilities => "capabilities",
            Property::HonestOutcome => "honest-outcome",
            Property::Liveness => "liveness",
        }
    }

    /// Whether breaking it is a safety failure (something bad happened) rather than a liveness one
    /// (something good never did).
    pub fn is_safety(self) -> bool {
        self != Property::Liveness
    }
}

/// The properties [`check_properties`] judges on this history, in the order transcripts name them.
pub fn judged(history: &History) -> Vec<Property> {
    let mut properties = vec![
        Property::AtMostOnce,
        Property::Consent,
        Property::Containment,
        Property::Refusal,
        Property::Capabilities,
        Property::HonestOutcome,
    ];
    if history.clients_retry {
        properties.push(Property::Liveness);
    }
    properties
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub property: Property,
    pub message: String,
}

/// What expectations can look at.
pub struct Observed<'a> {
    pub history: &'a History,
    pub answers: &'a BTreeMap<String, OperationId>,
    pub notes: &'a MemoryNoteStore,
    pub replay: &'a MemoryReplayStore,
    /// Exports recorded by the gateway's backends (empty without a gateway).
    pub exports: &'a [crate::handlers::backends::ExportRecord],
    pub lookup: &'a dyn Fn(&str) -> Result<&'a Value, String>,
}

/// `Ok` if the expectation holds; otherwise what was expected and what was found.
pub fn evaluate(expectation: &Expectation, observed: &Observed<'_>) -> Result<(), String> {
    match expectation {
        Expectation::Answer { targets, check } => {
            let operation = |name: &String| -> Result<&Operation, String> {
                let id = observed.answers.get(name).ok_or_else(|| format!("no answer is named {name}"))?;
                Ok(observed.history.settled(*id))
            };
            match targets {
                Targets::One(name) => check_answer(operation(name)?, check, observed.lookup),
                Targets::ExactlyOne(names) | Targets::Each(names) => {
                    let mut results = Vec::new();
                    for name in names {
                        results.push((name, check_answer(operation(name)?, check, observed.lookup)));
                    }
                    let passed = results.iter().filter(|(_, r)| r.is_ok()).count();
                    let required_all = matches!(targets, Targets::Each(_));
                    if (required_all && passed == names.len()) || (!required_all && passed == 1) {
                        return Ok(());
                    }
                    let each: Vec<String> = results
                        .iter()
                        .map(|(name, result)| match result {
                            Ok(()) => format!("{name} passes"),
                            Err(why) => format!("{name}: {why}"),
                        })
                        .collect();
                    let wanted = if required_all { "every one to pass".to_string() } else { "exactly one to pass".to_string() };
                    Err(format!("expected {wanted}, {passed} of {} did; {}", names.len(), each.join("; ")))
                }
            }
        }
        Expectation::NotePresent { id, present } => note_present(&observed.notes.snapshot(), id, *present),
        Expectation::NotesCount(expected) => notes_count(&observed.notes.snapshot(), *expected),
        Expectation::ConsumedCount(expected) => {
            let records: Vec<String> = observed.replay.consumed().iter().map(|(_, record)| record.to_string()).collect();
            consumed_count(records.len(), *expected, &records.join(" "))
        }
        Expectation::ExportsCount(expected) => {
            if observed.exports.len() == *expected {
                Ok(())
            } else {
                let each: Vec<String> =
                    observed.exports.iter().map(|e| format!("{} (key {}, {} note(s))", e.export_id, e.key, e.note_ids.len())).collect();
                Err(format!("expected {expected} exports, found {}: {}", observed.exports.len(), each.join(" ")))
            }
        }
        Expectation::Nonce { answer, record } => {
            let nonce = nonce_of(answer, observed.answers, observed.history)?;
            let expected = record.as_ref().map(|t| t.resolve(observed.lookup)).transpose()?;
            nonce_record(answer, expected.as_ref(), observed.replay.record(&nonce).as_ref())
        }
    }
}

// The store expectations, on what a store holds: the simulator reads its memory stores, live mode a real one.

/// `expect note ID present|absent`.
pub fn note_present(notes: &[Note], id: &str, present: bool) -> Result<(), String> {
    let found = notes.iter().any(|note| note.id == id);
    match (found, present) {
        (true, true) | (false, false) => Ok(()),
        (false, true) => Err(format!("expected note {id} present, it is gone")),
        (true, false) => Err(format!("expected note {id} absent, it is still there")),
    }
}

/// `expect notes count N`.
pub fn notes_count(notes: &[Note], expected: usize) -> Result<(), String> {
    if notes.len() == expected {
        Ok(())
    } else {
        let ids: Vec<&str> = notes.iter().map(|n| n.id.as_str()).collect();
        Err(format!("expected {expected} notes, found {}: {}", notes.len(), ids.join(" ")))
    }
}

/// `expect consumed N`: `found` consumed nonces, described by `listing`.
pub fn consumed_count(found: usize, expected: usize, listing: &str) -> Result<(), String> {
    if found == expected {
        Ok(())
    } else {
        Err(format!("expected {expected} consumed nonces, found {found}: {listing}"))
    }
}

/// The nonce sealed in the `requestState` of the answer named `answer`.
pub fn nonce_of(answer: &str, answers: &BTreeMap<String, OperationId>, history: &History) -> Result<String, String> {
    let id = answers.get(answer).ok_or_else(|| format!("no answer is named {answer}"))?;
    // A request the client retried (a fault) is judged by its answered attempt.
    let operation = history.settled(*id);
    let state = operation
        .response()
        .and_then(|r| at(r, &["result", "requestState"]))
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{answer} carries no requestState (it was {})", describe(operation)))?;
    let claims = peek_claims(state).ok_or_else(|| format!("{answer}'s requestState cannot be read"))?;
    Ok(claims.nonce)
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

fn check_answer<'v>(operation: &Operation, check: &AnswerCheck, lookup: &dyn Fn(&str) -> Result<&'v Value, String>) -> Result<(), String> {
    let got = || format!("got {}", describe(operation));
    if let AnswerCheck::NoResponse = check {
        return match operation.outcome {
            Outcome::NoResponse(_) => Ok(()),
            _ => Err(format!("expected no response, {}", got())),
        };
    }
    let Some(response) = operation.response() else {
        return Err(format!("expected a response, {}", got()));
    };
    match check {
        AnswerCheck::ResultType(expected) => match at(response, &["result", "resultType"]).and_then(Value::as_str) {
            Some(actual) if actual == expected => Ok(()),
            _ => Err(format!("expected resultType {expected:?}, {}", got())),
        },
        AnswerCheck::Error { code, reason } => {
            let actual_code = at(response, &["error", "code"]).and_then(Value::as_i64);
            let actual_reason = at(response, &["error", "data", "reason"]).and_then(Value::as_str);
            let code_matches = actual_code == Some(*code);
            let reason_matches = reason.as_deref().is_none_or(|r| Some(r) == actual_reason);
            if code_matches && reason_matches {
                Ok(())
            } else {
                let wanted = match reason {
                    Some(reason) => format!("error {code} {reason}"),
                    None => format!("error {code}"),
                };
                Err(format!("expected {wanted}, {}", got()))
            }
        }
        AnswerCheck::Equals { path, value } => {
            let expected = value.resolve(lookup)?;
            match follow(response, path) {
                Some(actual) if *actual == expected => Ok(()),
                Some(actual) => Err(format!("expected {} = {}, found {}", path.join("."), preview(&expected), preview(actual))),
                None => Err(format!("expected {} = {}, but it is absent; {}", path.join("."), preview(&expected), got())),
            }
        }
        AnswerCheck::Absent { path } => match follow(response, path) {
            None => Ok(()),
            Some(actual) => Err(format!("expected {} absent, found {}", path.join("."), preview(actual))),
        },
        AnswerCheck::Present { path } => match follow(response, path) {
            Some(_) => Ok(()),
            None => Err(format!("expected {} present, it is absent; {}", path.join("."), got())),
        },
        AnswerCheck::NoResponse => unreachable!("handled above"),
    }
}

/// One line on what an operation got: `complete {...}`, `error -32602 state_consumed: …`, `no response (lost)`.
pub fn describe(operation: &Operation) -> String {
    match &operation.outcome {
        Outcome::Pending => "nothing yet (still in flight)".into(),
        Outcome::NoResponse(NoResponse::Notification) => "no response (a notification)".into(),
        Outcome::NoResponse(NoResponse::Lost) => "no response (lost)".into(),
        Outcome::Answered { value, .. } => {
            if let Some(result) = value.get("result") {
                let result_type = result.get("resultType").and_then(Value::as_str).unwrap_or("(no resultType)");
                match result.get("structuredContent") {
                    Some(content) => format!("{result_type} {content}"),
                    None => result_type.to_string(),
                }
            } else if let Some(error) = value.get("error") {
                let code = error.get("code").map(Value::to_string).unwrap_or_default();
                let reason = at(error, &["data", "reason"]).and_then(Value::as_str).map(|r| format!(" {r}")).unwrap_or_default();
                let message = error.get("message").and_then(Value::as_str).unwrap_or("");
                format!("error {code}{reason}: {message}")
            } else {
                preview(value)
            }
        }
    }
}

/// Reads a sealed state's claims without verifying it (the checker is an omniscient observer, not a server).
pub fn peek_claims(state: &str) -> Option<StateClaims> {
    let payload = state.split('.').nth(2)?;
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()
}

/// Every safety property violated by this history (empty when all hold).
pub fn check_properties(history: &History) -> Vec<Violation> {
    // The claims of the state each operation sent back, read once.
    let sent: Vec<Option<StateClaims>> = history
        .operations
        .iter()
        .map(|op| op.params().and_then(|p| p.get("requestState")).and_then(Value::as_str).and_then(peek_claims))
        .collect();
    let mut violations = Vec::new();
    at_most_once(history, &sent, &mut violations);
    consent(history, &sent, &mut violations);
    containment(history, &mut violations);
    refusal(history, &sent, &mut violations);
    capabilities(history, &mut violations);
    honest_outcome(history, &sent, &mut violations);
    if history.clients_retry {
        liveness(history, &mut violations);
    }
    violations
}

/// The notes deleted under each confirmation (by the nonce inside the state the deleting request sent).
fn deleted_by_confirmation<'h>(history: &'h History, sent: &'h [Option<StateClaims>]) -> BTreeMap<&'h str, Vec<&'h str>> {
    let mut deleted: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for effect in &history.effects {
        if let EffectKind::NoteDeleted { note, .. } = &effect.kind {
            if let Some(nonce) = effect.operation.and_then(|id| confirmation_nonce(sent, id)) {
                deleted.entry(nonce).or_default().push(note.id.as_str());
            }
        }
    }
    deleted
}

/// What an answer to a notes_delete says its confirmation did: `Some(note)` if it reports a deletion,
/// `None` if it reports none. Only answers that report an outcome at all are returned.
enum Reported<'v> {
    /// "deleted" (the note id, when the answer names one).
    Deletion(Option<&'v str>),
    /// A used confirmation, with the outcome it recorded (absent when the server did not say).
    Consumed(Option<&'v Value>),
}

fn reported(response: &Value) -> Option<Reported<'_>> {
    if let Some(content) = at(response, &["result", "structuredContent"]) {
        if content.get("deleted") == Some(&Value::Bool(true)) {
            return Some(Reported::Deletion(content.get("noteId").and_then(Value::as_str)));
        }
        return None;
    }
    let data = at(response, &["error", "data"])?;
    if data.get("reason").and_then(Value::as_str) != Some("state_consumed") {
        return None;
    }
    match data.get("previousOutcome") {
        Some(previous) if previous.get("outcome").and_then(Value::as_str) == Some("deleted") => {
            Some(Reported::Deletion(previous.get("noteId").and_then(Value::as_str)))
        }
        previous => Some(Reported::Consumed(previous)),
    }
}

/// An answer saying an export happened must name one the backend recorded: the same id, principal,
/// destination and notes (a retry of the same confirmation is told the first export, never a second).
fn honest_exports(history: &History, violations: &mut Vec<Violation>) {
    for operation in &history.operations {
        if history.is_duplicate(operation.id) {
            continue;
        }
        let Some(content) = operation.response().and_then(|r| at(r, &["result", "structuredContent"])) else { continue };
        if content.get("exported") != Some(&Value::Bool(true)) {
            continue;
        }
        let id = content.get("exportId").and_then(Value::as_str).unwrap_or("");
        let recorded = history.exports.iter().find(|record| record.export_id == id);
        let matches = recorded.is_some_and(|record| {
            record.principal == operation.principal
                && content.get("destination").and_then(Value::as_str) == Some(record.destination.as_str())
                && content
                    .get("noteIds")
                    .and_then(Value::as_array)
                    .is_some_and(|ids| ids.iter().map(Value::as_str).eq(record.note_ids.iter().map(|n| Some(n.as_str()))))
        });
        if !matches {
            let actual = match recorded {
                None => "the backend recorded no such export".to_string(),
                Some(record) => {
                    format!("the backend recorded it for {} to {} of {}", record.principal, record.destination, record.note_ids.join(", "))
                }
            };
            violations.push(Violation {
                property: Property::HonestOutcome,
                message: format!("{} was told {} happened ({}), but {actual}", label(history, Some(operation.id)), id, preview(content)),
            });
        }
    }
}

fn honest_outcome(history: &History, sent: &[Option<StateClaims>], violations: &mut Vec<Violation>) {
    honest_exports(history, violations);
    let deleted = deleted_by_confirmation(history, sent);
    for operation in &history.operations {
        // A copy the network made is answered to nobody; what the client hears is what counts.
        if history.is_duplicate(operation.id)
            || operation.params().and_then(|p| p.get("name")).and_then(Value::as_str) != Some(TOOL_NOTES_DELETE)
        {
            continue;
        }
        let (Some(response), Some(nonce)) = (operation.response(), confirmation_nonce(sent, operation.id)) else { continue };
        let made = deleted.get(nonce).map(Vec::as_slice).unwrap_or_default();
        let mut fail = |why: String| {
            violations
                .push(Violation { property: Property::HonestOutcome, message: format!("{} {why}", label(history, Some(operation.id))) })
        };
        match reported(response) {
            Some(Reported::Deletion(note)) => {
                let matches = match note {
                    Some(note) => made.contains(&note),
                    None => !made.is_empty(),
                };
                if !matches {
                    let note = note.unwrap_or("a note");
                    let actual = if made.is_empty() {
                        "nothing was deleted under it".to_string()
                    } else {
                        format!("it deleted {}", made.join(", "))
                    };
                    fail(format!("was told {note} was deleted under confirmation {nonce}, but {actual}"));
                }
            }
            Some(Reported::Consumed(previous)) if !made.is_empty() => {
                let still_pending = previous.and_then(|p| p.get("outcome")).and_then(Value::as_str) == Some("in_progress");
                // Pending is a true answer while the claim is in flight; only a retrying client must get past it.
                if !still_pending {
                    let said = previous.map(preview).unwrap_or_else(|| "no previous outcome".into());
                    fail(format!("was refused a used confirmation ({nonce}) with {said}, but it had deleted {}", made.join(", ")));
                }
            }
            _ => {}
        }
    }
}

fn liveness(history: &History, violations: &mut Vec<Violation>) {
    for operation in &history.operations {
        let first = operation.id;
        if history.attempts.contains_key(&first) || operation.notification || history.stranded.contains(&first) {
            continue;
        }
        let attempt_count = history.attempts_of(first).len();
        let settled = history.settled(first);
        let Some(response) = settled.response() else {
            violations.push(Violation {
                property: Property::Liveness,
                message: format!("{} got no answer in {attempt_count} attempt(s), though faults had stopped", label(history, Some(first))),
            });
            continue;
        };
        // A deletion this request's own attempts made must reach its client: the last answer reports it,
        // directly or as the outcome of the used confirmation (an expired state is the one excuse: the design
        // promises the recovery only while the state lives).
        let attempts = history.attempts_of(first);
        let deleted: Vec<&str> = history
            .effects
            .iter()
            .filter(|e| e.operation.is_some_and(|id| attempts.contains(&id)))
            .filter_map(|e| if let EffectKind::NoteDeleted { note, .. } = &e.kind { Some(note.id.as_str()) } else { None })
            .collect();
        let expired = at(response, &["error", "data", "reason"]).and_then(Value::as_str) == Some("state_expired");
        if !deleted.is_empty() && !expired && !matches!(reported(response), Some(Reported::Deletion(_))) {
            violations.push(Violation {
                property: Property::Liveness,
                message: format!(
                    "{} deleted {} but its client never learned it: the last of its {} attempt(s) was answered {}",
                    label(history, Some(first)),
                    deleted.join(", "),
                    attempts.len(),
                    preview(response)
                ),
            });
            continue;
        }
        if matches!(reported(response), Some(Reported::Consumed(Some(previous))) if previous.get("outcome").and_then(Value::as_str) == Some("in_progress"))
        {
            violations.push(Violation {
                property: Property::Liveness,
                message: format!(
                    "{}: its confirmation was still \"in progress\" after {attempt_count} attempt(s); its outcome never settled",
                    label(history, Some(first))
                ),
            });
        }
    }
}

/// **Capabilities**: a form is only ever sent in answer to a request that declared form elicitation
/// itself (an empty `elicitation` object means form, for older clients); nothing declared earlier counts.
fn capabilities(history: &History, violations: &mut Vec<Violation>) {
    for operation in &history.operations {
        let Some(value) = operation.response() else { continue };
        let Some(requests) = at(value, &["result", "inputRequests"]).and_then(Value::as_object) else { continue };
        let asks_form = requests.values().any(|request| at(request, &["params", "mode"]).and_then(Value::as_str) == Some("form"));
        if !asks_form {
            continue;
        }
        let declared = operation
            .params()
            .and_then(|params| params.get("_meta"))
            .and_then(|meta| meta.get("io.modelcontextprotocol/clientCapabilities"))
            .and_then(|capabilities| capabilities.get("elicitation"))
            .and_then(Value::as_object)
            .is_some_and(|elicitation| elicitation.is_empty() || elicitation.get("form").is_some_and(Value::is_object));
        if !declared {
            violations.push(Violation {
                property: Property::Capabilities,
                message: format!(
                    "{} was sent a form without declaring form elicitation in that request",
                    label(history, Some(operation.id))
                ),
            });
        }
    }
}

fn label(history: &History, operation: Option<OperationId>) -> String {
    match operation {
        Some(id) => {
            let op = &history.operations[id.0];
            let request_id = op.request_value.as_ref().and_then(|v| v.get("id")).map(Value::to_string).unwrap_or_else(|| "-".into());
            let attempt = match history.attempts.get(&id) {
                Some(Attempt::Retry { number, .. }) => format!(" (retry {number})"),
                Some(Attempt::Duplicate { .. }) => " (a network copy)".to_string(),
                None => String::new(),
            };
            format!("{}'s request id {request_id} to {}{attempt}", op.client, op.instance)
        }
        None => "the admin".into(),
    }
}

/// The nonce of the confirmation an operation answered: read from the state it sent, as an observer would.
fn confirmation_nonce(sent: &[Option<StateClaims>], operation: OperationId) -> Option<&str> {
    sent[operation.0].as_ref().map(|claims| claims.nonce.as_str())
}

fn at_most_once(history: &History, sent: &[Option<StateClaims>], violations: &mut Vec<Violation>) {
    let mut consumed: BTreeMap<&str, Vec<&Effect>> = BTreeMap::new();
    let mut deleted: BTreeMap<&str, Vec<&Effect>> = BTreeMap::new();
    for effect in &history.effects {
        match &effect.kind {
            EffectKind::NonceConsumed { nonce, .. } => consumed.entry(nonce).or_default().push(effect),
            EffectKind::NoteDeleted { .. } => {
                // Attributed to the confirmation the client sent, whatever the server did with its nonce.
                let confirmation = effect.operation.and_then(|id| confirmation_nonce(sent, id));
                if let Some(nonce) = confirmation {
                    deleted.entry(nonce).or_default().push(effect);
                }
            }
            _ => {}
        }
    }
    for (nonce, effects) in consumed.iter().filter(|(_, e)| e.len() > 1) {
        let by: Vec<String> = effects.iter().map(|e| label(history, e.operation)).collect();
        violations.push(Violation {
            property: Property::AtMostOnce,
            message: format!("nonce {nonce} was consumed {} times (by {})", effects.len(), by.join(", ")),
        });
    }
    for (nonce, effects) in deleted.iter().filter(|(_, e)| e.len() > 1) {
        let notes: Vec<String> = effects
            .iter()
            .filter_map(|e| if let EffectKind::NoteDeleted { note, .. } = &e.kind { Some(note.id.clone()) } else { None })
            .collect();
        let by: Vec<String> = effects.iter().map(|e| label(history, e.operation)).collect();
        violations.push(Violation {
            property: Property::AtMostOnce,
            message: format!(
                "one confirmation (nonce {nonce}) deleted {} times: {} (by {})",
                effects.len(),
                notes.join(", "),
                by.join(", ")
            ),
        });
    }
}

fn consent(history: &History, sent: &[Option<StateClaims>], violations: &mut Vec<Violation>) {
    // Which answers carried which state: where each state was shown, and to whom.
    let mut issued: BTreeMap<&str, Vec<&Operation>> = BTreeMap::new();
    for operation in &history.operations {
        if let Some(state) = operation.response().and_then(|r| at(r, &["result", "requestState"])).and_then(Value::as_str) {
            issued.entry(state).or_default().push(operation);
        }
    }
    for effect in &history.effects {
        let EffectKind::NoteDeleted { note, .. } = &effect.kind else { continue };
        let mut fail = |why: String| {
            violations.push(Violation {
                property: Property::Consent,
                message: format!("{} was deleted for {} without consent: {why}", note.id, label(history, effect.operation)),
            })
        };
        let Some(operation) = effect.operation.map(|id| &history.operations[id.0]) else {
            fail("no client request caused it".into());
            continue;
        };
        let Some(params) = operation.params() else {
            fail("the request had no params".into());
            continue;
        };
        if params.get("name").and_then(Value::as_str) != Some(TOOL_NOTES_DELETE) {
            fail("the request was not a notes_delete call".into());
            continue;
        }
        let answer = params.get("inputResponses").and_then(Value::as_object).filter(|r| r.len() == 1).and_then(|r| r.values().next());
        let accepted = answer.is_some_and(|a| {
            a.get("action").and_then(Value::as_str) == Some("accept")
                && at(a, &["content", "confirm"]) == Some(&Value::Bool(true))
                && at(a, &["content", "note_id"]).and_then(Value::as_str) == Some(note.id.as_str())
        });
        if !accepted {
            fail("the request did not accept this note with confirm: true".into());
            continue;
        }
        let Some(state) = params.get("requestState").and_then(Value::as_str) else {
            fail("the request carried no requestState".into());
            continue;
        };
        let Some(claims) = &sent[operation.id.0] else {
            fail("its requestState is unreadable".into());
            continue;
        };
        let arguments_digest = params.get("arguments").map(digest_hex).unwrap_or_default();
        let bound = claims.principal == operation.principal
            && claims.tool == TOOL_NOTES_DELETE
            && claims.arguments_digest == arguments_digest
            && claims.candidates.contains(&note.id);
        if !bound {
            fail(format!(
                "its state is not bound to this principal ({}), tool, exact arguments and a candidate set holding the note",
                operation.principal
            ));
            continue;
        }
        let shown = issued.get(state).is_some_and(|answers| {
            answers.iter().any(|earlier| earlier.principal == operation.principal && offered_ids(earlier).iter().any(|id| id == &note.id))
        });
        if !shown {
            fail("no server ever showed this principal a form offering it with this state".into());
        }
    }
}

/// The note ids a form in this operation's response offered.
fn offered_ids(operation: &Operation) -> Vec<String> {
    let Some(requests) = operation.response().and_then(|r| at(r, &["result", "inputRequests"])).and_then(Value::as_object) else {
        return Vec::new();
    };
    requests
        .values()
        .filter_map(|request| at(request, &["params", "requestedSchema", "properties", "note_id", "enum"]).and_then(Value::as_array))
        .flatten()
        .filter_map(|id| id.as_str().map(str::to_string))
        .collect()
}

/// Authorizations as they were when `delivery` happened (revocations made after an earlier delivery apply).
fn authorizations_at(history: &History, delivery: usize) -> Cow<'_, Authorizations> {
    let revoked = |e: &Effect| matches!(e.kind, EffectKind::Revoked { .. }) && e.delivery < delivery;
    if !history.effects.iter().any(revoked) {
        return Cow::Borrowed(&history.initial_authorizations);
    }
    let mut authorizations = history.initial_authorizations.clone();
    for effect in &history.effects {
        if let EffectKind::Revoked { principal, workspace } = &effect.kind {
            if effect.delivery < delivery {
                if let Ok(root) = FileUri::parse(workspace) {
                    authorizations.revoke(principal, &root);
                }
            }
        }
    }
    Cow::Owned(authorizations)
}

fn inside(authorizations: &Authorizations, principal: &str, uri: &str) -> bool {
    FileUri::parse(uri).is_ok_and(|uri| authorizations.may_access(principal, &uri))
}

fn containment(history: &History, violations: &mut Vec<Violation>) {
    for effect in &history.effects {
        let EffectKind::NoteDeleted { note, .. } = &effect.kind else { continue };
        let Some(operation) = effect.operation.map(|id| &history.operations[id.0]) else { continue };
        if !inside(&authorizations_at(history, effect.delivery), &operation.principal, &note.uri) {
            violations.push(Violation {
                property: Property::Containment,
                message: format!(
                    "{} ({}) was deleted for {}, outside every workspace {} may use",
                    note.id,
                    note.uri,
                    label(history, effect.operation),
                    operation.principal
                ),
            });
        }
    }
    for operation in &history.operations {
        let Outcome::Answered { value, delivery, .. } = &operation.outcome else { continue };
        let authorizations = authorizations_at(history, *delivery);
        let mut exposed: Vec<String> = Vec::new();
        for key in ["resources", "contents"] {
            if let Some(items) = at(value, &["result", key]).and_then(Value::as_array) {
                exposed.extend(items.iter().filter_map(|item| item.get("uri").and_then(Value::as_str)).map(str::to_string));
            }
        }
        let offered = offered_ids(operation);
        if !offered.is_empty() {
            let listed = history.effects.iter().rev().find_map(|e| match &e.kind {
                EffectKind::NotesListed { notes } if e.operation == Some(operation.id) => Some(notes),
                _ => None,
            });
            if let Some(notes) = listed {
                exposed.extend(offered.iter().filter_map(|id| notes.iter().find(|n| &n.id == id)).map(|n| n.uri.clone()));
            }
        }
        for uri in exposed {
            if !inside(&authorizations, &operation.principal, &uri) {
                violations.push(Violation {
                    property: Property::Containment,
                    message: format!(
                        "{} was shown {uri}, outside every workspace {} may use",
                        label(history, Some(operation.id)),
                        operation.principal
                    ),
                });
            }
        }
    }
}

fn refusal(history: &History, sent: &[Option<StateClaims>], violations: &mut Vec<Violation>) {
    for operation in &history.operations {
        let Some(action) = operation.answer_action() else { continue };
        if action != "decline" && action != "cancel" {
            continue;
        }
        let who = label(history, Some(operation.id));
        for effect in history.effects.iter().filter(|e| e.operation == Some(operation.id)) {
            let broken = match &effect.kind {
                EffectKind::NoteDeleted { note, .. } => Some(format!("a {action} deleted {}", note.id)),
                EffectKind::NonceConsumed { nonce, .. } if action == "cancel" => Some(format!("a cancel consumed nonce {nonce}")),
                _ => None,
            };
            if let Some(broken) = broken {
                violations.push(Violation { property: Property::Refusal, message: format!("{broken} ({who})") });
            }
        }
        let Some(response) = operation.response() else { continue };
        if at(response, &["result", "resultType"]).and_then(Value::as_str) == Some("input_required") {
            violations
                .push(Violation { property: Property::Refusal, message: format!("a {action} was answered with another form ({who})") });
        }
        if at(response, &["result", "structuredContent", "deleted"]) == Some(&Value::Bool(true)) {
            violations.push(Violation { property: Property::Refusal, message: format!("a {action} was answered deleted: true ({who})") });
        }
        // A decline the server acknowledged ends the flow: nothing may be deleted under that confirmation later.
        let acknowledged = at(response, &["result", "structuredContent", "outcome"]).and_then(Value::as_str) == Some("declined");
        if let (true, Some(declined)) = (acknowledged, confirmation_nonce(sent, operation.id)) {
            for effect in &history.effects {
                let EffectKind::NoteDeleted { note, .. } = &effect.kind else { continue };
                let later = effect.operation.and_then(|id| confirmation_nonce(sent, id));
                if later == Some(declined) {
                    violations.push(Violation {
                        property: Property::Refusal,
                        message: format!(
                            "{} was deleted for {} under a confirmation declined by {who}",
                            note.id,
                            label(history, effect.operation)
                        ),
                    });
                }
            }
        }
    }
}
