//! The checker: the properties of `GUARANTEES.md` §4 every run must keep, one file each.
//!
//! Properties are judged from the [`History`] alone, by an independent reading of what clients sent and
//! what the stores did; the checker never asks the servers whether they behaved. Statelessness (§4.5) is
//! judged by the simulator's runner, which plays the scenario a second time with rounds rerouted; the
//! determinism of §4.6 by the tests that replay a run and compare its bytes.

use crate::oracle::history::{Attempt, Effect, EffectKind, History, Operation, Outcome};
use crate::policy::authorization::Authorizations;
use crate::policy::containment::FileUri;
use crate::policy::state::StateClaims;
use crate::scenario::template::{at, preview};
use crate::servers::notes::TOOL_NOTES_DELETE;
use crate::sim::engine::message::OperationId;
use crate::wire::canonical::digest_hex;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::Value;
use std::borrow::Cow;
use std::collections::BTreeMap;

mod at_most_once;
mod capabilities;
mod consent;
mod containment;
mod honest_outcome;
mod liveness;
mod refusal;

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
    pub(crate) fn is_safety(self) -> bool {
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

/// Reads a sealed state's claims without verifying it (the checker is an omniscient observer, not a server).
pub(crate) fn peek_claims(state: &str) -> Option<StateClaims> {
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
    at_most_once::at_most_once(history, &sent, &mut violations);
    consent::consent(history, &sent, &mut violations);
    containment::containment(history, &mut violations);
    refusal::refusal(history, &sent, &mut violations);
    capabilities::capabilities(history, &mut violations);
    honest_outcome::honest_outcome(history, &sent, &mut violations);
    if history.clients_retry {
        liveness::liveness(history, &mut violations);
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
