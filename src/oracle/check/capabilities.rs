//! **Capabilities** (GUARANTEES.md §4.7): a form is only ever sent in answer to a request that declared form
//! elicitation itself (an empty `elicitation` object means form, for older clients); nothing declared earlier
//! counts. Likewise a URL-mode elicitation is only sent to a request that declared `elicitation.url` itself
//! (the empty object means form only).

use super::*;

pub(super) fn capabilities(reading: &Reading<'_>, violations: &mut Vec<Violation>) {
    let history = reading.history;
    for operation in history.operations() {
        let Some(value) = operation.response() else { continue };
        let Some(requests) = reading::at(value, &["result", "inputRequests"]).and_then(Value::as_object) else { continue };
        let asks = |mode: &str| requests.values().any(|request| reading::text(request, &["params", "mode"]) == Some(mode));
        let elicitation = operation
            .params()
            .and_then(|params| reading::at(params, &["_meta", "io.modelcontextprotocol/clientCapabilities", "elicitation"]))
            .and_then(Value::as_object);
        if asks("url") && !elicitation.is_some_and(|elicitation| elicitation.get("url").is_some_and(Value::is_object)) {
            violations.push(Violation {
                property: Property::Capabilities,
                message: format!(
                    "{} was sent a URL-mode elicitation without declaring URL elicitation in that request",
                    label(history, Some(operation.id))
                ),
            });
        }
        if !asks("form") {
            continue;
        }
        let declared =
            elicitation.is_some_and(|elicitation| elicitation.is_empty() || elicitation.get("form").is_some_and(Value::is_object));
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
