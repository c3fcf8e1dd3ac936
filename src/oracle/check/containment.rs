//! **Containment** (GUARANTEES.md §4.3): every deleted note, every note offered in a form and every resource
//! listed or read lies inside a workspace the principal was authorized for at that moment.

use super::*;

pub(super) fn containment(history: &History, violations: &mut Vec<Violation>) {
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
