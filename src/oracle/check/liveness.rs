//! **Liveness** (GUARANTEES.md §4.9; judged when clients retry, i.e. under faults): once faults stop, every request gets an
//! answer, and no confirmation stays "in progress": a confirmed delete completes, exactly once (at most once
//! is its own property), and its client learns that it did.

use super::*;

pub(super) fn liveness(history: &History, violations: &mut Vec<Violation>) {
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
