//! **Capabilities** (GUARANTEES.md §4.7): a form is only ever sent in answer to a request that declared form
//! elicitation itself (an empty `elicitation` object means form, for older clients); nothing declared earlier
//! counts.

use super::*;

pub(super) fn capabilities(reading: &Reading<'_>, violations: &mut Vec<Violation>) {
    let history = reading.history;
    for operation in &history.operations {
        let Some(value) = operation.response() else { continue };
        let Some(requests) = reading::at(value, &["result", "inputRequests"]).and_then(Value::as_object) else { continue };
        let asks_form = requests.values().any(|request| reading::text(request, &["params", "mode"]) == Some("form"));
        if !asks_form {
            continue;
        }
        let declared = operation
            .params()
            .and_then(|params| reading::at(params, &["_meta", "io.modelcontextprotocol/clientCapabilities", "elicitation"]))
            .and_then(Value::as_object)
            .is_some_and(|elicitation| elicitation.is_empty() || elicitation.get("form").is_some_and(Value::is_object));
        if !declared {
            violations.push(Violation {
                property: Property::Capabilities,
                message: format!(
                    "{} was sent a form without declaring form elicitation in that request",
                    label(history, Some(operation.id))
                ),
            });
        }
    }
}
