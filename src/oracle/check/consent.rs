//! **Consent** (GUARANTEES.md §4.2): nothing is deleted or exported without a validated `accept` bound to that
//! principal, tool and exact arguments, and (for a deletion) to a candidate a server showed that principal.
//!
//! Judged from what was observed, not from inside the state: the request that mutated must have answered
//! `accept` with `confirm: true` (and the deleted note's id) to the question its state asked, and that very
//! state must have been issued by a server to the same principal, in answer to a call of the same tool with
//! the same arguments, with a form that offered the note. A state nobody issued — tampered, forged, re-sealed —
//! consents to nothing.

use super::*;

pub(super) fn consent(reading: &Reading<'_>, violations: &mut Vec<Violation>) {
    let history = reading.history;
    for (effect, mutation) in mutations(history) {
        let what = match &mutation {
            Mutation::Deleted { note_id, .. } => format!("{note_id} was deleted"),
            Mutation::Exported(export) => format!("{} was exported", export.note_ids.join(", ")),
        };
        let mut fail = |why: String| {
            violations.push(Violation {
                property: Property::Consent,
                message: format!("{what} for {} without consent: {why}", label(history, effect.operation)),
            })
        };
        let Some(id) = effect.operation else {
            fail("no client request caused it".into());
            continue;
        };
        let operation = reading.operation(id);
        let Some(params) = operation.params() else {
            fail("the request had no params".into());
            continue;
        };
        // A legacy (2025-11-25) call is confirmed inside itself: the server asked the client `elicitation/create`
        // and the client answered. The question was asked in this very call (this principal, tool and
        // arguments), so what must hold is that it offered the note and the answer accepted it.
        let legacy: Vec<(&Value, &Value)> = history
            .effects()
            .iter()
            .filter(|e| e.operation == Some(id))
            .filter_map(|e| match &e.kind {
                EffectKind::ClientAsked { request, answer }
                    if request.get("method").and_then(Value::as_str) == Some("elicitation/create") =>
                {
                    Some((request, answer))
                }
                _ => None,
            })
            .collect();
        if !legacy.is_empty() {
            let consented = legacy.iter().any(|(request, answer)| {
                let result = answer.get("result").cloned().unwrap_or(Value::Null);
                let offered = |note_id: &str| {
                    reading::at(request, &["params", "requestedSchema", "properties", "note_id", "enum"])
                        .and_then(Value::as_array)
                        .is_some_and(|offered| offered.iter().any(|o| o.as_str() == Some(note_id)))
                };
                result.get("action").and_then(Value::as_str) == Some("accept")
                    && reading::at(&result, &["content", "confirm"]) == Some(&Value::Bool(true))
                    && match &mutation {
                        Mutation::Deleted { note_id, .. } => {
                            reading::text(&result, &["content", "note_id"]) == Some(*note_id) && offered(note_id)
                        }
                        Mutation::Exported(_) => true,
                    }
            });
            if !consented {
                fail("no elicitation/create asked inside the legacy call offered it and was answered accept with confirm: true".into());
            }
            continue;
        }
        let accepted = reading.answer(id).is_some_and(|answer| {
            let content = answer.get("content");
            answer.get("action").and_then(Value::as_str) == Some("accept")
                && content.and_then(|c| c.get("confirm")) == Some(&Value::Bool(true))
                && match &mutation {
                    Mutation::Deleted { note_id, .. } => content.and_then(|c| c.get("note_id")).and_then(Value::as_str) == Some(*note_id),
                    Mutation::Exported(_) => true,
                }
        });
        if !accepted {
            let which = match &mutation {
                Mutation::Deleted { .. } => "this note",
                Mutation::Exported(_) => "this export",
            };
            fail(format!("the request did not accept {which} with confirm: true"));
            continue;
        }
        let Some(continuation) = reading.continuation(id) else {
            fail("the request carried no requestState".into());
            continue;
        };
        let issues = reading.issues(continuation.token);
        if issues.is_empty() {
            fail("no server ever issued the requestState it carried".into());
            continue;
        }
        let tool = params.get("name").and_then(Value::as_str);
        let arguments = params.get("arguments");
        let bound = issues.iter().any(|issue| {
            issue.principal == operation.principal
                && issue.tool == tool
                && issue.arguments == arguments
                && match &mutation {
                    Mutation::Deleted { note_id, .. } => issue.offered.contains(note_id),
                    Mutation::Exported(_) => true,
                }
        });
        if !bound {
            fail(format!(
                "its state was never issued to {} for this tool with these exact arguments{}",
                operation.principal,
                if matches!(mutation, Mutation::Deleted { .. }) { " and a form offering the note" } else { "" }
            ));
        }
    }
}
