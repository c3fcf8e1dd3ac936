//! **Consent** (GUARANTEES.md §4.2): every deleted note was deleted on behalf of a request that accepted (with
//! `confirm: true`) exactly that note, carrying a state sealed for that principal, tool and exact arguments,
//! whose candidates include the note and which a server had shown to that principal.

use super::*;

pub(super) fn consent(history: &History, sent: &[Option<StateClaims>], violations: &mut Vec<Violation>) {
    // Which answers carried which state: where each state was shown, and to whom.
    let mut issued: BTreeMap<&str, Vec<&Operation>> = BTreeMap::new();
    for operation in &history.operations {
        if let Some(state) = operation.response().and_then(|r| at(r, &["result", "requestState"])).and_then(Value::as_str) {
            issued.entry(state).or_default().push(operation);
        }
    }
    for effect in &history.effects {
        let EffectKind::NoteDeleted { note, .. } = &effect.kind else { continue };
        let mut fail = |why: String| {
            violations.push(Violation {
                property: Property::Consent,
                message: format!("{} was deleted for {} without consent: {why}", note.id, label(history, effect.operation)),
            })
        };
        let Some(operation) = effect.operation.map(|id| &history.operations[id.0]) else {
            fail("no client request caused it".into());
            continue;
        };
        let Some(params) = operation.params() else {
            fail("the request had no params".into());
            continue;
        };
        if params.get("name").and_then(Value::as_str) != Some(TOOL_NOTES_DELETE) {
            fail("the request was not a notes_delete call".into());
            continue;
        }
        let answer = params.get("inputResponses").and_then(Value::as_object).filter(|r| r.len() == 1).and_then(|r| r.values().next());
        let accepted = answer.is_some_and(|a| {
            a.get("action").and_then(Value::as_str) == Some("accept")
                && at(a, &["content", "confirm"]) == Some(&Value::Bool(true))
                && at(a, &["content", "note_id"]).and_then(Value::as_str) == Some(note.id.as_str())
        });
        if !accepted {
            fail("the request did not accept this note with confirm: true".into());
            continue;
        }
        let Some(state) = params.get("requestState").and_then(Value::as_str) else {
            fail("the request carried no requestState".into());
            continue;
        };
        let Some(claims) = &sent[operation.id.0] else {
            fail("its requestState is unreadable".into());
            continue;
        };
        let arguments_digest = params.get("arguments").map(digest_hex).unwrap_or_default();
        let bound = claims.principal == operation.principal
            && claims.tool == TOOL_NOTES_DELETE
            && claims.arguments_digest == arguments_digest
            && claims.candidates.contains(&note.id);
        if !bound {
            fail(format!(
                "its state is not bound to this principal ({}), tool, exact arguments and a candidate set holding the note",
                operation.principal
            ));
            continue;
        }
        let shown = issued.get(state).is_some_and(|answers| {
            answers.iter().any(|earlier| earlier.principal == operation.principal && offered_ids(earlier).iter().any(|id| id == &note.id))
        });
        if !shown {
            fail("no server ever showed this principal a form offering it with this state".into());
        }
    }
}
