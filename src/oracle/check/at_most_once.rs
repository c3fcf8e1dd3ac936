//! **At most once** (GUARANTEES.md §4.1): one confirmation executes at most one mutation — one deletion or one
//! export — whatever the interleaving, instance count, crash or duplicate delivery; and a store consumes a nonce
//! at most once.

use super::*;

pub(super) fn at_most_once(reading: &Reading<'_>, violations: &mut Vec<Violation>) {
    let history = reading.history;
    let mut consumed: BTreeMap<&str, Vec<&Effect>> = BTreeMap::new();
    for effect in history.effects() {
        if let EffectKind::NonceConsumed { nonce, .. } = &effect.kind {
            consumed.entry(nonce).or_default().push(effect);
        }
    }
    for (nonce, effects) in consumed.iter().filter(|(_, e)| e.len() > 1) {
        let by: Vec<String> = effects.iter().map(|e| label(history, e.operation)).collect();
        violations.push(Violation {
            property: Property::AtMostOnce,
            message: format!("nonce {nonce} was consumed {} times (by {})", effects.len(), by.join(", ")),
        });
    }
    for (confirmation, made) in mutations_by_confirmation(reading).iter().filter(|(_, made)| made.len() > 1) {
        let by: Vec<String> = made.iter().map(|m| label(history, m.operation)).collect();
        let kind = if made.iter().all(|m| matches!(m.mutation, Mutation::Deleted { .. })) { "deleted" } else { "mutated" };
        let shown: Vec<String> = made
            .iter()
            .map(|m| match &m.mutation {
                Mutation::Deleted { note_id, .. } => note_id.to_string(),
                Mutation::Exported(export) => export.export_id.clone(),
            })
            .collect();
        violations.push(Violation {
            property: Property::AtMostOnce,
            message: format!(
                "one confirmation (nonce {}) {kind} {} times: {} (by {})",
                confirmation.trim_start_matches("state "),
                made.len(),
                shown.join(", "),
                by.join(", ")
            ),
        });
    }
}
