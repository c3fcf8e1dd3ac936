//! **Binding** (GUARANTEES.md §4.11): a tool that waited for an out-of-band step (URL-mode elicitation) ran
//! only after the very principal it was issued to completed that step, signed in as themselves, on the page.
//! The oracle's own model, from the history alone: a flow is the reference at the end of a URL an
//! `input_required` answer showed a principal, keyed by the `requestState` it came with; a completion is a
//! browser's `complete` of that exact URL that the page answered `completed`, by the browser's signed-in
//! user; a run is a nonce consumed as `published` by a request continuing that state. Two mistakes break it:
//! a completion by another user counted for the principal (a URL bound to nothing), and a run with no
//! completion at all (the client's `accept`, which only means "I agreed to open the page", taken for one).

use super::*;

/// The out-of-band step behind one state: the page's URL and whom it was shown to.
struct Flow<'h> {
    url: &'h str,
    principal: &'h str,
}

/// Whether this history has any out-of-band step for the property to judge.
pub(super) fn has_out_of_band(history: &History) -> bool {
    history.operations().iter().any(|operation| !url_elicitations(operation.response()).is_empty())
}

fn url_elicitations(response: Option<&Value>) -> Vec<&str> {
    let Some(requests) = response.and_then(|value| reading::at(value, &["result", "inputRequests"])).and_then(Value::as_object) else {
        return Vec::new();
    };
    requests
        .values()
        .filter(|request| reading::text(request, &["params", "mode"]) == Some("url"))
        .filter_map(|request| reading::text(request, &["params", "url"]))
        .collect()
}

pub(super) fn binding(reading: &Reading<'_>, violations: &mut Vec<Violation>) {
    let history = reading.history;
    // Flows by the state they were issued with.
    let mut flows: BTreeMap<&str, Flow<'_>> = BTreeMap::new();
    for operation in history.operations() {
        let response = operation.response();
        let Some(state) = response.and_then(|value| reading::text(value, &["result", "requestState"])) else { continue };
        if let Some(url) = url_elicitations(response).first() {
            flows.entry(state).or_insert(Flow { url, principal: &operation.principal });
        }
    }
    // Completions by URL: who, and by which delivery the page had answered.
    let mut completions: BTreeMap<&str, Vec<(&str, usize)>> = BTreeMap::new();
    for operation in history.operations() {
        let Some(request) = operation.request_value.as_deref() else { continue };
        if reading::text(request, &["page"]) != Some("complete") {
            continue;
        }
        let (Some(url), Outcome::Answered { value, delivery, .. }) = (reading::text(request, &["url"]), &operation.outcome) else {
            continue;
        };
        if reading::text(value, &["page", "outcome"]) == Some("completed") {
            completions.entry(url).or_default().push((&operation.principal, *delivery));
        }
    }
    for effect in history.effects() {
        let EffectKind::NonceConsumed { record, .. } = &effect.kind else { continue };
        if reading::text(record, &["outcome"]) != Some("published") {
            continue;
        }
        let Some(operation) = effect.operation else { continue };
        let who = label(history, Some(operation));
        let state = reading.operation(operation).params().and_then(|params| reading::text(params, &["requestState"]));
        let Some(flow) = state.and_then(|state| flows.get(state)) else {
            violations.push(Violation {
                property: Property::Binding,
                message: format!(
                    "{who} published under a state no URL-mode elicitation was issued with: no out-of-band step was ever shown"
                ),
            });
            continue;
        };
        let done_before: Vec<&str> = completions
            .get(flow.url)
            .map(|list| list.iter().filter(|(_, delivery)| *delivery <= effect.delivery).map(|(user, _)| *user).collect())
            .unwrap_or_default();
        if done_before.contains(&flow.principal) {
            continue;
        }
        let message = match done_before.first() {
            Some(other) => format!(
                "{who} published for {} although the out-of-band page was completed only by {other}, not by the principal it was issued to",
                flow.principal
            ),
            None => format!(
                "{who} published for {} although nobody had completed the out-of-band page: accept only means the user agreed to open it",
                flow.principal
            ),
        };
        violations.push(Violation { property: Property::Binding, message });
    }
}
