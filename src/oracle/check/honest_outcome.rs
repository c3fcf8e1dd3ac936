//! **Honest outcome** (GUARANTEES.md §4.8): what an answer says its confirmation did is what happened.
//!
//! * An answer that reports a deletion (directly, or as the `previousOutcome` of a used confirmation) matches a
//!   deletion made under that confirmation; one that reports an export names an export the backend made, for
//!   that principal, to that destination, of those notes.
//! * A used confirmation's refusal (`state_consumed`) reports what it did — the recovery rule: a client that
//!   lost its answer learns it by retrying — and never calls a claim still in flight "already used" (that is
//!   `claim_in_progress`: the claim may yet be released, or may yet delete).
//! * No answer denies a use that happened: once a confirmation has mutated something, an answer about it that
//!   says it was not used (`note_gone`, `note_outside_workspace`) or that it was declined is false.

use super::*;

pub(super) fn honest_outcome(reading: &Reading<'_>, violations: &mut Vec<Violation>) {
    let history = reading.history;
    let by_confirmation = mutations_by_confirmation(reading);
    let exports: Vec<&Export> = mutations(history)
        .into_iter()
        .filter_map(|(_, mutation)| if let Mutation::Exported(export) = mutation { Some(export) } else { None })
        .collect();
    for operation in history.operations() {
        // A copy the network made is answered to nobody; what the client hears is what counts.
        if history.is_duplicate(operation.id) {
            continue;
        }
        let Outcome::Answered { value: response, delivery, .. } = &operation.outcome else { continue };
        let mut fail = |why: String| {
            violations
                .push(Violation { property: Property::HonestOutcome, message: format!("{} {why}", label(history, Some(operation.id))) })
        };
        let report = reported(response);
        if let Some(Reported::Export(Some(id))) = report {
            let content = reading::at(response, &["result", "structuredContent"]);
            let recorded = exports.iter().find(|export| export.export_id == id);
            let matches = recorded.is_some_and(|export| {
                export.principal == operation.principal
                    && content.and_then(|c| c.get("destination")).and_then(Value::as_str) == Some(export.destination.as_str())
                    && content
                        .and_then(|c| c.get("noteIds"))
                        .and_then(Value::as_array)
                        .is_some_and(|ids| ids.iter().map(Value::as_str).eq(export.note_ids.iter().map(|n| Some(n.as_str()))))
            });
            if !matches {
                let actual = match recorded {
                    None => "the backend made no such export".to_string(),
                    Some(export) => {
                        format!("the backend made it for {} to {} of {}", export.principal, export.destination, export.note_ids.join(", "))
                    }
                };
                fail(format!("was told {id} happened ({}), but {actual}", content.map(show).unwrap_or_default()));
            }
            continue;
        }
        let Some(confirmation) = reading.confirmation(operation.id) else { continue };
        let made = by_confirmation.get(confirmation).map(Vec::as_slice).unwrap_or_default();
        let shown = confirmation.trim_start_matches("state ");
        let deleted_ids = |until: usize| -> Vec<&str> {
            made.iter()
                .filter(|m| m.delivery <= until)
                .filter_map(|m| if let Mutation::Deleted { note_id, .. } = m.mutation { Some(note_id) } else { None })
                .collect()
        };
        match report {
            Some(Reported::Deletion(note)) => {
                let deleted = deleted_ids(usize::MAX);
                let matches = match note {
                    Some(note) => deleted.contains(&note),
                    None => !deleted.is_empty(),
                };
                if !matches {
                    let actual = if deleted.is_empty() {
                        "nothing was deleted under it".to_string()
                    } else {
                        format!("it deleted {}", deleted.join(", "))
                    };
                    fail(format!("was told {} was deleted under confirmation {shown}, but {actual}", note.unwrap_or("a note")));
                }
            }
            Some(Reported::Consumed(previous)) => {
                let outcome = previous.and_then(|p| p.get("outcome")).and_then(Value::as_str);
                if outcome == Some("in_progress") {
                    fail(format!(
                        "was told confirmation {shown} was already used while its claim was still in progress (that is claim_in_progress: it may yet be released)"
                    ));
                } else if let Some(first) = made.iter().find(|m| m.delivery < *delivery) {
                    let said = previous.map(show).unwrap_or_else(|| "no previous outcome".into());
                    let fits = matches!(
                        (&first.mutation, outcome),
                        (Mutation::Deleted { .. }, Some("deleted")) | (Mutation::Exported(_), Some("confirmed" | "exported"))
                    );
                    if !fits {
                        fail(format!("was refused a used confirmation ({shown}) with {said}, but it had {}", first.mutation.describe()));
                    }
                }
            }
            Some(Reported::Unused(what)) => {
                if let Some(first) = made.iter().find(|m| m.delivery < *delivery) {
                    fail(format!("was told {what} about confirmation {shown}, which had already {}", first.mutation.describe()));
                }
            }
            Some(Reported::InProgress) | Some(Reported::Export(_)) | None => {}
        }
    }
}
