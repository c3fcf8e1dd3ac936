//! **Honest outcome** (GUARANTEES.md §4.8): an answer that reports a deletion (directly, or as the `previousOutcome` of a used
//! confirmation) matches a deletion made under that confirmation; a used confirmation's refusal reports the
//! deletion it made (the recovery rule: a client that lost its answer learns it by retrying); and an answer
//! that reports an export names one the backend recorded, for that principal, of those notes.

use super::*;

/// An answer saying an export happened must name one the backend recorded: the same id, principal,
/// destination and notes (a retry of the same confirmation is told the first export, never a second).
pub(super) fn honest_exports(history: &History, violations: &mut Vec<Violation>) {
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

pub(super) fn honest_outcome(history: &History, sent: &[Option<StateClaims>], violations: &mut Vec<Violation>) {
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
