//! The checker: the properties of `GUARANTEES.md` §4 every run must keep, one file each.
//!
//! Properties are judged from the [`History`] alone, by an independent reading of what clients sent and
//! what the stores did; the checker never asks the servers whether they behaved. Statelessness (§4.5) is
//! judged by [`statelessness`] from two histories: the simulator's runner plays the scenario a second time
//! with rounds rerouted and compares them with it; the determinism of §4.6 by the tests that replay a run
//! and compare its bytes.

use super::history::{Effect, EffectKind, Export, History, OperationId, Outcome};
pub(crate) use super::reading::label;
use super::reading::{self, Reading};
use crate::scenario::template::preview;
use serde_json::Value;
use std::collections::BTreeMap;

mod at_most_once;
mod binding;
mod capabilities;
mod consent;
mod containment;
mod honest_outcome;
mod liveness;
mod mediation;
mod refusal;
pub mod statelessness;

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
    Mediation,
    Determinism,
    Binding,
}

impl Property {
    /// Every property, in the order they are declared (the order a list of broken ones is kept in).
    pub const ALL: [Property; 11] = [
        Property::AtMostOnce,
        Property::Consent,
        Property::Containment,
        Property::Refusal,
        Property::Statelessness,
        Property::Capabilities,
        Property::HonestOutcome,
        Property::Liveness,
        Property::Mediation,
        Property::Determinism,
        Property::Binding,
    ];

    /// The property [`Property::as_str`] names `name` (as a results file writes it).
    pub fn named(name: &str) -> Option<Property> {
        Property::ALL.iter().copied().find(|p| p.as_str() == name)
    }

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
            Property::Mediation => "mediation",
            Property::Determinism => "determinism",
            Property::Binding => "binding",
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
    if history.clients_retry() {
        properties.push(Property::Liveness);
    }
    if !history.initial_pins().is_empty() {
        properties.push(Property::Mediation);
    }
    if binding::has_out_of_band(history) {
        properties.push(Property::Binding);
    }
    properties
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub property: Property,
    pub message: String,
}

/// Every safety property violated by this history (empty when all hold).
pub fn check_properties(history: &History) -> Vec<Violation> {
    let reading = Reading::new(history);
    let mut violations = Vec::new();
    at_most_once::at_most_once(&reading, &mut violations);
    consent::consent(&reading, &mut violations);
    containment::containment(&reading, &mut violations);
    refusal::refusal(&reading, &mut violations);
    capabilities::capabilities(&reading, &mut violations);
    honest_outcome::honest_outcome(&reading, &mut violations);
    if history.clients_retry() {
        liveness::liveness(&reading, &mut violations);
    }
    mediation::mediation(&reading, &mut violations);
    binding::binding(&reading, &mut violations);
    violations
}

/// What the world changed that anyone outside could see: a deleted note or an export.
pub(crate) enum Mutation<'h> {
    Deleted { note_id: &'h str, uri: &'h str },
    Exported(&'h Export),
}

impl Mutation<'_> {
    fn describe(&self) -> String {
        match self {
            Mutation::Deleted { note_id, .. } => format!("deleted {note_id}"),
            Mutation::Exported(export) => format!("exported {} ({})", export.note_ids.join(", "), export.export_id),
        }
    }
}

/// Every mutation, with the effect that records it.
pub(crate) fn mutations(history: &History) -> Vec<(&Effect, Mutation<'_>)> {
    history
        .effects()
        .iter()
        .filter_map(|effect| match &effect.kind {
            EffectKind::NoteDeleted { note, .. } => Some((effect, Mutation::Deleted { note_id: &note.id, uri: &note.uri })),
            EffectKind::Exported(export) => Some((effect, Mutation::Exported(export))),
            _ => None,
        })
        .collect()
}

/// One mutation as attributed to a confirmation.
pub(crate) struct Made<'h> {
    pub delivery: usize,
    pub operation: Option<OperationId>,
    pub mutation: Mutation<'h>,
}

/// The mutations made under each confirmation (by the requests that continued it), in order.
pub(crate) fn mutations_by_confirmation<'r>(reading: &'r Reading<'_>) -> BTreeMap<&'r str, Vec<Made<'r>>> {
    let mut made: BTreeMap<&str, Vec<Made<'_>>> = BTreeMap::new();
    for (effect, mutation) in mutations(reading.history) {
        if let Some(confirmation) = effect.operation.and_then(|id| reading.confirmation(id)) {
            made.entry(confirmation).or_default().push(Made { delivery: effect.delivery, operation: effect.operation, mutation });
        }
    }
    made
}

/// What an answer says its confirmation did, read from the answer alone.
pub(crate) enum Reported<'v> {
    /// "deleted" (the note id, when the answer names one).
    Deletion(Option<&'v str>),
    /// "exported" (the export id, when named).
    Export(Option<&'v str>),
    /// `state_consumed`, with the outcome it reports (absent when the server did not say).
    Consumed(Option<&'v Value>),
    /// `claim_in_progress`: someone else's claim of it is being carried out.
    InProgress,
    /// The confirmation was not used by this answer and may still be (`note_gone`, `note_outside_workspace`),
    /// or was used by it without effect (`declined`).
    Unused(&'v str),
}

pub(crate) fn reported(response: &Value) -> Option<Reported<'_>> {
    if let Some(content) = reading::at(response, &["result", "structuredContent"]) {
        if content.get("deleted") == Some(&Value::Bool(true)) {
            return Some(Reported::Deletion(content.get("noteId").and_then(Value::as_str)));
        }
        if content.get("exported") == Some(&Value::Bool(true)) {
            return Some(Reported::Export(content.get("exportId").and_then(Value::as_str)));
        }
        if content.get("outcome").and_then(Value::as_str) == Some("declined") {
            return Some(Reported::Unused("declined"));
        }
        return None;
    }
    match reading::reason(response)? {
        reading::STATE_CONSUMED => {
            let previous = reading::at(response, &["error", "data", "previousOutcome"]);
            match previous.and_then(|p| p.get("outcome")).and_then(Value::as_str) {
                Some("deleted") => Some(Reported::Deletion(previous.and_then(|p| p.get("noteId")).and_then(Value::as_str))),
                _ => Some(Reported::Consumed(previous)),
            }
        }
        reading::CLAIM_IN_PROGRESS => Some(Reported::InProgress),
        reason @ (reading::NOTE_GONE | reading::NOTE_OUTSIDE_WORKSPACE) => Some(Reported::Unused(reason)),
        _ => None,
    }
}

/// The grants as they were when `delivery` happened (revocations made after an earlier delivery apply): the
/// initial grants themselves until a revocation narrows them.
pub(crate) fn grants_at(history: &History, delivery: usize) -> std::borrow::Cow<'_, super::grants::Grants> {
    let mut grants = std::borrow::Cow::Borrowed(&**history.initial_grants());
    for effect in history.effects() {
        if let EffectKind::Revoked { principal, workspace } = &effect.kind {
            if effect.delivery < delivery {
                grants.to_mut().revoke(principal, workspace);
            }
        }
    }
    grants
}

pub(crate) fn show(value: &Value) -> String {
    preview(value)
}
