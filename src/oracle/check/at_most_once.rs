//! **At most once** (GUARANTEES.md §4.1): a nonce is consumed at most once, and one confirmation (the nonce
//! inside the state the client sent) deletes at most once, however the server handles nonces.

use super::*;

pub(super) fn at_most_once(history: &History, sent: &[Option<StateClaims>], violations: &mut Vec<Violation>) {
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
