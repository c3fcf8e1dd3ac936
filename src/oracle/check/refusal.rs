//! **Refusal** (GUARANTEES.md §4.4): a decline or a cancel deletes nothing and is never answered with another
//! form; a cancel consumes nothing; once a decline is acknowledged, nothing is ever deleted under that
//! confirmation.

use super::*;

pub(super) fn refusal(history: &History, sent: &[Option<StateClaims>], violations: &mut Vec<Violation>) {
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
