//! **Refusal** (GUARANTEES.md §4.4): a decline or a cancel mutates nothing and is never answered with another
//! form, nor as a deletion or an export; a cancel consumes nothing; an answer refused as invalid consumes
//! nothing either (MISSION.md §3: validate before claiming the nonce), so the valid accept that follows still
//! succeeds; once a decline is acknowledged, nothing is ever mutated under that confirmation.

use super::*;

/// The reasons a server gives an answer it refused as invalid: none of them may consume the confirmation.
const INVALID_ANSWER: [&str; 4] = ["response_invalid", "not_confirmed", "not_a_candidate", "continuation_unpaired"];

pub(super) fn refusal(reading: &Reading<'_>, violations: &mut Vec<Violation>) {
    let history = reading.history;
    let by_confirmation = mutations_by_confirmation(reading);
    for operation in history.operations() {
        let Some(action) = reading.action(operation.id) else { continue };
        if action == "accept" {
            let reason = operation.response().and_then(|r| reading::text(r, &["error", "data", "reason"]));
            let Some(reason) = reason.filter(|r| INVALID_ANSWER.contains(r)) else { continue };
            for effect in history.effects().iter().filter(|e| e.operation == Some(operation.id)) {
                if let EffectKind::NonceConsumed { nonce, .. } = &effect.kind {
                    violations.push(Violation {
                        property: Property::Refusal,
                        message: format!(
                            "an answer refused as invalid ({reason}) consumed nonce {nonce} ({}): an invalid response consumes nothing",
                            label(history, Some(operation.id))
                        ),
                    });
                }
            }
            continue;
        }
        if action != "decline" && action != "cancel" {
            continue;
        }
        let who = label(history, Some(operation.id));
        for effect in history.effects().iter().filter(|e| e.operation == Some(operation.id)) {
            let broken = match &effect.kind {
                EffectKind::NoteDeleted { note, .. } => Some(format!("a {action} deleted {}", note.id)),
                EffectKind::Exported(export) => Some(format!("a {action} exported {} ({})", export.note_ids.join(", "), export.export_id)),
                EffectKind::NonceConsumed { nonce, .. } if action == "cancel" => Some(format!("a cancel consumed nonce {nonce}")),
                _ => None,
            };
            if let Some(broken) = broken {
                violations.push(Violation { property: Property::Refusal, message: format!("{broken} ({who})") });
            }
        }
        let Some(response) = operation.response() else { continue };
        if reading::text(response, &["result", "resultType"]) == Some("input_required") {
            violations
                .push(Violation { property: Property::Refusal, message: format!("a {action} was answered with another form ({who})") });
        }
        for (field, said) in [("deleted", "deleted: true"), ("exported", "exported: true")] {
            if reading::at(response, &["result", "structuredContent", field]) == Some(&Value::Bool(true)) {
                violations.push(Violation { property: Property::Refusal, message: format!("a {action} was answered {said} ({who})") });
            }
        }
        // A decline the server acknowledged ends the flow: nothing may be mutated under that confirmation later.
        let acknowledged = reading::text(response, &["result", "structuredContent", "outcome"]) == Some("declined");
        let (true, Some(declined), Outcome::Answered { delivery, .. }) =
            (acknowledged, reading.confirmation(operation.id), &operation.outcome)
        else {
            continue;
        };
        for made in by_confirmation.get(declined).into_iter().flatten().filter(|m| m.delivery > *delivery) {
            violations.push(Violation {
                property: Property::Refusal,
                message: format!(
                    "{} for {} under a confirmation declined by {who}",
                    made.mutation.describe(),
                    label(history, made.operation)
                ),
            });
        }
    }
}
