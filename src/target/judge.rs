//! The judge of a target's plays, from observation only: the answers (read as [`Observed`] outcomes, and as
//! what they [`Said`] of their confirmation), the effect probe, and the reference play on one instance.
//!
//! A request whose answer never came (lost to a fault, a crash or a timeout) or is still pending is
//! *indeterminate*: it may have happened. The rules accept either, but never more than one execution per
//! confirmation (one `requestState`), counting a client's retry and a network copy with the request they
//! repeat (docs/targets.md, "What \"may have happened\" means"):
//!
//! * **at most once**: no more effects than accepted confirmations, whatever the indeterminate requests did;
//!   no two successes of one confirmation, unless they are one request's attempts answered the same result.
//! * **honest outcome**: no more confirmations answered a success than the probe saw effects (a success that
//!   did nothing); once a confirmation executed, no answer says its item is not there (not found, gone), nor
//!   gives a fresh form or a declined outcome unless a later attempt may be the one that executed; when it
//!   did not execute, no answer says it was used with an effect. The scenario's own `admin` changes to the
//!   store are discounted from the probe.
//! * **liveness** (only when clients retried, under faults): every request's last attempt got an answer, and
//!   a definite one (not "in progress", not a store or backend that was unavailable).

use super::PlayedOnce;
use crate::oracle::check::statelessness::{self, Pairing};
use crate::oracle::check::Property;
use crate::oracle::history::{Attempt, History, NoResponse, Operation, OperationId, Outcome};
use crate::oracle::outcome::{Extent, Kind, Masks, Observed};
use crate::oracle::reading;
use crate::scenario::model::{Action, Scenario};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// A property that did not hold, as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub property: Property,
    pub message: String,
}

/// Judges the spread play (and its reference play on one instance) from observation only.
/// `masks`: what statelessness and the comparison of one request's answers do not compare (what differs by
/// design: [`Target::masks`](super::file::Target)).
pub fn judge(scenario: &Scenario, spread: &PlayedOnce, one: Option<&PlayedOnce>, masks: &Masks) -> Vec<Finding> {
    let effects = spread.effects.as_ref().ok().copied();
    // The probe's starting count is already lowered by what the scenario's `admin delete` steps removed
    // (`play_once`), so no effect is left for them to explain.
    let mut findings = judge_history(&spread.history, effects, 0, masks);
    if let Some(one) = one {
        // The outcomes (kind, code, reason, structured content) of each step, sealed states and the paths the
        // target file says differ by design masked: a target's words and ids are its own. A race is compared by how many won (which loser hears what is the race's).
        let mut raced: BTreeSet<usize> =
            scenario.steps.iter().enumerate().filter(|(_, s)| matches!(s.action, Action::Parallel(_))).map(|(i, _)| i).collect();
        // A request the network copied races its copy: compared, like a parallel block, by how many won.
        for played in [&one.history, &spread.history] {
            raced.extend(
                played
                    .attempts()
                    .iter()
                    .filter(|(_, a)| matches!(a, Attempt::Duplicate { .. }))
                    .map(|(id, _)| played.operations()[id.0].step),
            );
        }
        let compared = statelessness::compare(&one.history, &spread.history, &Pairing::Steps { raced }, masks, Extent::Outcome);
        // A retry of a request whose connection was closed right after it was written races that request inside
        // the server (it may still be running): which of the two executes is the server's timing, so such a step
        // is judged by at most once and the effect probe, not compared between the plays.
        let timed: BTreeSet<usize> = [&one.history, &spread.history]
            .into_iter()
            .flat_map(|played| {
                played.attempts().iter().filter_map(move |(id, attempt)| match attempt {
                    Attempt::Retry { of, .. } => {
                        let closed = played.attempts_of(*of).iter().any(|a| played.lost_to(*a).is_some_and(closed_before_reading));
                        closed.then(|| played.operations()[id.0].step)
                    }
                    Attempt::Duplicate { .. } => None,
                })
            })
            .collect();
        for difference in compared.differences.into_iter().filter(|d| !timed.contains(&d.step)) {
            let line = scenario.steps[difference.step].line;
            findings.push(Finding {
                property: Property::Statelessness,
                message: if difference.is_short() {
                    format!(
                        "line {line}: with every round on one instance: {}; spread over the fleet: {}",
                        difference.first, difference.second
                    )
                } else {
                    format!(
                        "line {line}: with every round on one instance (first play), then spread over the fleet (second): {}",
                        difference.described("")
                    )
                },
            });
        }
    }
    findings
}

/// Whether a fault's decision line says the client closed the connection right after writing the request.
fn closed_before_reading(fault: &str) -> bool {
    fault.contains(super::faults::CLOSED_BEFORE_READING)
}

/// Every property but statelessness, from one history and the probe's reading before and after (`None`: not
/// observed); `admin` changes the scenario made in the store itself may account for as many effects.
pub(crate) fn judge_history(history: &History, effects: Option<(i64, i64)>, admin: usize, masks: &Masks) -> Vec<Finding> {
    let mut findings = Vec::new();
    let ops = history.operations();
    // Answers to forms, grouped by the requestState they echo (a retry and a copy carry their request's).
    let mut accepts: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (index, op) in ops.iter().enumerate() {
        let Some(params) = op.params() else { continue };
        let Some(responses) = params.get("inputResponses").and_then(Value::as_object) else { continue };
        let actions: Vec<&str> = responses.values().filter_map(|r| r.get("action").and_then(Value::as_str)).collect();
        let state = params.get("requestState").map(|s| s.to_string()).unwrap_or_else(|| "(no requestState)".into());
        if actions.contains(&"accept") {
            accepts.entry(state).or_default().push(index);
        } else if !actions.is_empty() && Observed::of(op).kind == Kind::InputRequired {
            findings.push(Finding {
                property: Property::Refusal,
                message: format!("{} answered the {} of {} with another form", op.instance, actions.join("/"), label(op)),
            });
        }
    }
    // Who each state was issued to, and the states a decline ended (by the operation that did). A cancel only
    // dismisses the form: the confirmation may still be answered.
    let mut issued: BTreeMap<String, String> = BTreeMap::new();
    let mut declined: BTreeMap<String, usize> = BTreeMap::new();
    for (index, op) in ops.iter().enumerate() {
        if let Some(state) = op.response().and_then(|r| reading::at(r, &["result", "requestState"])) {
            issued.entry(state.to_string()).or_insert_with(|| op.principal.clone());
        }
        let Some(params) = op.params() else { continue };
        let refused = params
            .get("inputResponses")
            .and_then(Value::as_object)
            .is_some_and(|r| r.values().any(|r| r.get("action").and_then(Value::as_str) == Some("decline")));
        if let (true, Some(state)) = (refused, params.get("requestState")) {
            declined.entry(state.to_string()).or_insert(index);
        }
    }
    for (state, indexes) in &accepts {
        for &index in indexes {
            let op = &ops[index];
            if !succeeded(op.response()) {
                continue;
            }
            if let Some(owner) = issued.get(state).filter(|owner| **owner != op.principal) {
                findings.push(Finding {
                    property: Property::Consent,
                    message: format!("principal {} completed a confirmation issued to {owner}: {}", op.principal, label(op)),
                });
            }
            if let Some(&refusal) = declined.get(state).filter(|&&at| at < index) {
                findings.push(Finding {
                    property: Property::Refusal,
                    message: format!("{} succeeded after {} declined the confirmation", label(op), label(&ops[refusal])),
                });
            }
        }
    }
    // At most once, per confirmation: two successes are two executions, unless they are one request's
    // attempts (a retry, a copy) answered the same completed result.
    for indexes in accepts.values() {
        let successes: Vec<&Operation> = indexes.iter().map(|&i| &ops[i]).filter(|op| succeeded(op.response())).collect();
        let Some(first) = successes.first() else { continue };
        let requests: BTreeSet<OperationId> = successes.iter().map(|op| history.first_attempt(op.id)).collect();
        let differ = successes.iter().any(|op| !op.observed().same(&first.observed(), masks, Extent::Outcome));
        if requests.len() > 1 || differ {
            let shown: Vec<String> = successes.iter().map(|op| labelled(history, op)).collect();
            let how = if requests.len() > 1 { "" } else { " with different results (one request's attempts)" };
            findings.push(Finding {
                property: Property::AtMostOnce,
                message: format!("one confirmation succeeded {} times{how}: {}", successes.len(), shown.join(", ")),
            });
        }
    }
    let accepted = accepts.len();
    let definite: Vec<&Vec<usize>> = accepts.values().filter(|ix| ix.iter().any(|&i| succeeded(ops[i].response()))).collect();
    let effects_seen = effects.map(|(before, after)| ((before - after).unsigned_abs() as usize, before, after));
    if let Some((count, before, after)) = effects_seen {
        let maybe = indeterminate_accepts(history, &accepts);
        let whatever = if maybe == 0 { String::new() } else { format!(", whatever the {maybe} that may have happened did") };
        let admin_said = if admin == 0 { String::new() } else { format!(" and the scenario made {admin} change(s) in the store") };
        if count > accepted + admin {
            let message = format!(
                "the effect probe saw {count} effect(s) ({before} before, {after} after) but only {accepted} confirmation(s) were accepted{admin_said}{whatever}"
            );
            let property = if accepts.is_empty() { Property::Consent } else { Property::AtMostOnce };
            findings.push(Finding { property, message });
        }
        if definite.len() > count {
            let shown: Vec<String> =
                definite.iter().filter_map(|ix| ix.iter().map(|&i| &ops[i]).find(|op| succeeded(op.response()))).map(label).collect();
            findings.push(Finding {
                property: Property::HonestOutcome,
                message: format!(
                    "{} confirmation(s) were answered a success but the effect probe saw {count} effect(s) ({before} before, {after} after): a success that did nothing: {}",
                    definite.len(),
                    shown.join(", ")
                ),
            });
        }
    }
    // Which confirmations executed: those answered a success; from the probe, the rest all did when the
    // effects left unexplained by the successes (and by the scenario's own changes) are as many as they are,
    // and none did when there are none.
    let unexplained = effects_seen.map(|(count, _, _)| count.saturating_sub(definite.len()));
    let undecided = accepted - definite.len();
    for indexes in accepts.values() {
        let has_success = indexes.iter().any(|&i| succeeded(ops[i].response()));
        let executed = match (has_success, unexplained) {
            (true, _) => Some(true),
            (false, Some(0)) => Some(false),
            (false, Some(u)) if u.saturating_sub(admin) >= undecided => Some(true),
            _ => None,
        };
        match executed {
            Some(true) => denials_of_an_execution(history, indexes, effects_seen, &mut findings),
            Some(false) => claims_of_a_use(history, indexes, effects_seen, &mut findings),
            None => {}
        }
    }
    if history.clients_retry() {
        liveness(history, &mut findings);
    }
    findings
}

/// How many accepted confirmations have an attempt that may have happened.
fn indeterminate_accepts(history: &History, accepts: &BTreeMap<String, Vec<usize>>) -> usize {
    accepts.values().filter(|ix| ix.iter().any(|&i| may_have_happened(&history.operations()[i]))).count()
}

/// A request whose answer was lost or never came: it may or may not have happened.
pub fn may_have_happened(op: &Operation) -> bool {
    !op.notification && matches!(op.outcome, Outcome::Pending | Outcome::NoResponse(NoResponse::Lost))
}

/// Honest outcome, for a confirmation that executed: no answer to it (a copy's aside: nobody hears it) says
/// nothing was done, unless another attempt, later or written at once with it, may be the one that executed.
fn denials_of_an_execution(history: &History, indexes: &[usize], effects: Option<(usize, i64, i64)>, findings: &mut Vec<Finding>) {
    let ops = history.operations();
    let evidence = evidence(history, indexes, effects);
    for &index in indexes {
        let op = &ops[index];
        if history.is_duplicate(op.id) {
            continue;
        }
        let Some(response) = op.response() else { continue };
        let what = said(response);
        let Some(denial) = what.denial(true) else { continue };
        // The item was there until the execution removed it: saying it is not there is never true of a
        // confirmation that executed. A fresh form or a decline may have come before the execution: by another
        // attempt written later, or another request written at once with it (a `parallel` step; a retry or
        // copy carries its request's step).
        let later = !matches!(what, Said::Denied(_))
            && indexes.iter().map(|&i| &ops[i]).any(|other| {
                let at_once = other.step == op.step && history.first_attempt(other.id) != history.first_attempt(op.id);
                other.id != op.id
                    && (other.id > op.id || at_once)
                    && (succeeded(other.response()) || may_have_happened(other) || matches!(other.response().map(said), Some(Said::Other)))
            });
        if later {
            continue;
        }
        findings.push(Finding {
            property: Property::HonestOutcome,
            message: format!("{} says {denial}, but its confirmation executed ({evidence})", labelled(history, op)),
        });
    }
}

/// Honest outcome, for a confirmation that did not execute: no answer says it was used with an effect.
fn claims_of_a_use(history: &History, indexes: &[usize], effects: Option<(usize, i64, i64)>, findings: &mut Vec<Finding>) {
    let ops = history.operations();
    for &index in indexes {
        let op = &ops[index];
        let Some(response) = op.response().filter(|_| !history.is_duplicate(op.id)) else { continue };
        if let Said::Used { outcome: Some(outcome) } = said(response) {
            if claims_an_effect(&outcome) {
                let seen = effects.map(|(count, b, a)| format!("{count} effect(s) ({b} before, {a} after)")).unwrap_or_default();
                findings.push(Finding {
                    property: Property::HonestOutcome,
                    message: format!(
                        "{} says its confirmation was already used ({outcome}), but it did not execute: the effect probe saw {seen}, all explained by the successes",
                        labelled(history, op)
                    ),
                });
            }
        }
    }
}

/// Why a confirmation is known to have executed: its success, or the probe.
fn evidence(history: &History, indexes: &[usize], effects: Option<(usize, i64, i64)>) -> String {
    let ops = history.operations();
    match indexes.iter().map(|&i| &ops[i]).find(|op| succeeded(op.response())) {
        Some(success) => format!("{} succeeded", success.name.clone().unwrap_or_else(|| format!("request #{}", success.id.0 + 1))),
        None => {
            let maybe: Vec<String> =
                indexes.iter().map(|&i| &ops[i]).filter(|op| may_have_happened(op)).map(|op| named(history, op)).collect();
            let seen = effects
                .map(|(count, b, a)| format!("the effect probe saw {count} effect(s), {b} before and {a} after"))
                .unwrap_or_default();
            if maybe.is_empty() {
                seen
            } else {
                format!("{seen}; may have happened: {}", maybe.join(", "))
            }
        }
    }
}

/// Liveness: every request's last attempt was answered, definitely, unless its client was stranded.
fn liveness(history: &History, findings: &mut Vec<Finding>) {
    for op in history.operations() {
        let first = op.id;
        if history.attempts().contains_key(&first) || op.notification || history.stranded().contains(&first) {
            continue;
        }
        let attempts = history.attempts_of(first).len();
        let settled = history.settled(first);
        match settled.response() {
            None => findings.push(Finding {
                property: Property::Liveness,
                message: format!("{} got no answer in {attempts} attempt(s), though faults had healed", label(op)),
            }),
            Some(response) => {
                if let Said::Transient(what) = said(response) {
                    findings.push(Finding {
                        property: Property::Liveness,
                        message: format!(
                            "{}: its last of {attempts} attempt(s) was answered {what}: its client never learned the outcome",
                            labelled(history, settled)
                        ),
                    });
                }
            }
        }
    }
}

/// What an answer to an accept says of its confirmation, read from the answer alone: the protocol's reason
/// codes first, then the result's kind, then (for a tool error or an error with no known reason) the plain
/// words other servers use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Said {
    /// `complete`, not a tool error: carried out.
    Done,
    /// Already used (`state_consumed`, or "already used" / "consumed"), with the outcome it reports
    /// (`previousOutcome.outcome`, or the content's `outcome`), when it says one.
    Used { outcome: Option<String> },
    /// Not a definite answer: being carried out right now, or the store or backend was unavailable.
    Transient(String),
    /// Nothing was done as if the confirmation had not been used: the item not there ("not found", "already
    /// gone", `note_gone`, `note_outside_workspace`), or a declined outcome.
    Denied(String),
    /// A fresh form (`input_required`).
    Form,
    /// Anything else: a refusal that says nothing of a use (an invalid answer, a state that fails to verify).
    Other,
}

impl Said {
    /// What it says that cannot be true of a confirmation that executed: nothing was done (the item not
    /// found or gone), it was declined, or (`form_too`) a fresh form to fill. `None`: consistent with one
    /// execution.
    pub(crate) fn denial(&self, form_too: bool) -> Option<String> {
        match self {
            Said::Denied(what) => Some(what.clone()),
            Said::Form if form_too => Some("a fresh form (input_required)".into()),
            Said::Used { outcome: Some(outcome) } if matches!(outcome.as_str(), "declined" | "decline" | "cancelled" | "cancel") => {
                Some(format!("it was used by a {outcome}"))
            }
            _ => None,
        }
    }
}

const TRANSIENT: [&str; 4] = ["claim_in_progress", "store_unavailable", "backend_unavailable", "rate_limited"];
const DENIED: [&str; 3] = [reading::NOTE_GONE, reading::NOTE_OUTSIDE_WORKSPACE, "resource_not_found"];
const USED_WORDS: [&str; 6] =
    ["already used", "already been used", "consumed", "already confirmed", "already processed", "already completed"];
const DENIED_WORDS: [&str; 7] =
    ["not found", "no such", "does not exist", "doesn't exist", "already gone", "is gone", "nothing was deleted"];

pub(crate) fn said(response: &Value) -> Said {
    let outcome_at = |path: &[&str]| reading::text(response, path).map(str::to_string);
    if let Some(reason) = reading::reason(response) {
        if reason == reading::STATE_CONSUMED {
            return Said::Used { outcome: outcome_at(&["error", "data", "previousOutcome", "outcome"]) };
        }
        if TRANSIENT.contains(&reason) {
            return Said::Transient(reason.to_string());
        }
        if DENIED.contains(&reason) {
            return Said::Denied(format!("nothing was done ({reason})"));
        }
    }
    let observed = Observed::read(response);
    match observed.kind {
        Kind::Complete => return Said::Done,
        Kind::InputRequired => return Said::Form,
        Kind::ToolError | Kind::Error { .. } => {}
        Kind::Pending | Kind::NoAnswer(_) | Kind::OtherResult(_) => return Said::Other,
    }
    let content_outcome = outcome_at(&["result", "structuredContent", "outcome"]);
    let mut words = String::new();
    for path in [&["error", "message"][..], &["error", "data", "reason"], &["result", "structuredContent", "outcome"]] {
        if let Some(text) = reading::text(response, path) {
            words.push_str(text);
            words.push(' ');
        }
    }
    for item in reading::at(response, &["result", "content"]).and_then(Value::as_array).into_iter().flatten() {
        if let Some(text) = item.get("text").and_then(Value::as_str) {
            words.push_str(text);
            words.push(' ');
        }
    }
    let words = words.to_lowercase();
    let outcome = content_outcome.as_deref().map(str::to_lowercase);
    if matches!(outcome.as_deref(), Some("used" | "consumed")) || USED_WORDS.iter().any(|w| words.contains(w)) {
        return Said::Used { outcome: None };
    }
    if let Some(outcome @ ("gone" | "not_found" | "missing" | "declined")) = outcome.as_deref() {
        return Said::Denied(format!("nothing was done (outcome {outcome:?})"));
    }
    if let Some(word) = DENIED_WORDS.iter().find(|w| words.contains(*w)) {
        return Said::Denied(format!("nothing was done ({word:?})"));
    }
    Said::Other
}

/// A used confirmation's reported outcome that says it had an effect.
fn claims_an_effect(outcome: &str) -> bool {
    matches!(outcome, "deleted" | "published" | "confirmed" | "exported" | "completed" | "done")
}

pub(crate) fn label(op: &Operation) -> String {
    format!("{} ({})", short(op), op.describe())
}

/// `NAME on i1@t2`, or `request #N on …`.
fn short(op: &Operation) -> String {
    format!("{} on {}", op.name.clone().unwrap_or_else(|| format!("request #{}", op.id.0 + 1)), op.instance)
}

/// [`short`], a retry or a copy named after the request it repeats: `retry 1 of round2 on i2@t3`.
fn named(history: &History, op: &Operation) -> String {
    let ops = history.operations();
    match history.attempts().get(&op.id) {
        Some(Attempt::Retry { of, number }) if op.name.is_none() => {
            format!("retry {number} of {} on {}", ops[of.0].name.clone().unwrap_or_else(|| format!("request #{}", of.0 + 1)), op.instance)
        }
        Some(Attempt::Duplicate { of }) if op.name.is_none() => {
            format!("a copy of {} on {}", ops[of.0].name.clone().unwrap_or_else(|| format!("request #{}", of.0 + 1)), op.instance)
        }
        _ => short(op),
    }
}

/// [`named`], with what it got.
fn labelled(history: &History, op: &Operation) -> String {
    format!("{} ({})", named(history, op), op.describe())
}

/// The requests of a play that may have happened (their answers lost, or never come), one line each:
/// `round2 on i1@t3 (answer lost: why)`.
pub fn indeterminate(history: &History) -> Vec<String> {
    history
        .operations()
        .iter()
        .filter(|op| may_have_happened(op))
        .map(|op| {
            let why = match (&op.outcome, history.lost_why(op.id)) {
                (Outcome::Pending, _) => "no answer yet when the play ended".to_string(),
                (_, Some(why)) => format!("answer lost: {why}"),
                (_, None) => "answer lost".to_string(),
            };
            format!("{} ({why})", named(history, op))
        })
        .collect()
}

/// The stage an operation's instance ran in, from its label (`i1@t2[k1]`, as the target world writes it).
fn stage_of(op: &Operation) -> Option<&str> {
    op.instance.strip_suffix(']').and_then(|label| label.rsplit_once('[')).map(|(_, stage)| stage)
}

/// Every answer to a form taken in another stage than the round that minted its `requestState` (a rotation,
/// a deploy between the rounds), one line each: `round2 on i2@t3[k2] answered the form of round1 on
/// i1@t1[k1]: completed` — or `dropped (what the server said)`, or lost. A rotation that drops in-flight
/// confirmations is reported with the ones it dropped.
pub fn crossings(history: &History) -> Vec<String> {
    let ops = history.operations();
    let mut minted: BTreeMap<String, usize> = BTreeMap::new();
    let mut lines = Vec::new();
    for (index, op) in ops.iter().enumerate() {
        if let Some(state) = op.params().and_then(|p| p.get("requestState")).and_then(Value::as_str) {
            if let Some(&by) = minted.get(state) {
                let (from, to) = (stage_of(&ops[by]), stage_of(op));
                if from.is_some() && to.is_some() && from != to {
                    let outcome = match op.response() {
                        None => "lost (no answer: it may have happened)".to_string(),
                        Some(response) if succeeded(Some(response)) => "completed".to_string(),
                        Some(response) => {
                            let kind = match Observed::read(response).kind {
                                Kind::Error { code: Some(crate::oracle::outcome::Code::Number(code)), .. } => format!("error {code}"),
                                Kind::Error { .. } => "an error".to_string(),
                                Kind::ToolError => "a tool error".to_string(),
                                Kind::InputRequired => "a new form".to_string(),
                                other => format!("{other:?}"),
                            };
                            let first_text = reading::at(response, &["result", "content"])
                                .and_then(Value::as_array)
                                .and_then(|items| items.first())
                                .and_then(|item| item.get("text"))
                                .and_then(Value::as_str);
                            let what = reading::text(response, &["error", "message"]).or(first_text).unwrap_or("");
                            let what: String = what.chars().take(120).collect();
                            format!("dropped ({kind}{})", if what.is_empty() { String::new() } else { format!(": {what:?}") })
                        }
                    };
                    lines.push(format!("{} answered the form of {}: {outcome}", named(history, op), short(&ops[by])));
                }
            }
        }
        if let Some(state) = op.response().and_then(|r| reading::at(r, &["result", "requestState"])).and_then(Value::as_str) {
            minted.entry(state.to_string()).or_insert(index);
        }
    }
    lines
}

/// A `complete` result that is not a tool error.
pub(crate) fn succeeded(response: Option<&Value>) -> bool {
    response.is_some_and(|response| Observed::read(response).succeeded())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oracle::history::Sent;
    use serde_json::json;
    use std::sync::Arc;

    const STATE: &str = "sealed-state";

    /// A play recorded through the recorder, as a target world records it.
    struct Play {
        history: History,
        step: usize,
    }

    impl Play {
        /// Round 1 answered with the form of [`STATE`].
        fn new() -> Play {
            let mut play = Play { history: History::default(), step: 0 };
            let form = json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "input_required", "requestState": STATE,
                "inputRequests": {"delete_choice": {"method": "elicitation/create", "params": {"mode": "form"}}}}});
            let round1 = play.send("round1", "i1@t1", json!({"name": "notes_delete", "arguments": {"title": "TPS"}}));
            play.history.answer(round1, Arc::new(form), 0, 1);
            play
        }

        fn send(&mut self, name: &str, instance: &str, params: Value) -> OperationId {
            self.step += 1;
            let request = json!({"jsonrpc": "2.0", "id": self.step, "method": "tools/call", "params": params});
            self.history.request(Sent {
                client: "user".into(),
                principal: "alice".into(),
                instance: instance.into(),
                step: self.step,
                name: Some(name.into()),
                request_value: Some(Arc::new(request)),
                request_exact: None,
                notification: false,
                sent_at_ms: 0,
            })
        }

        fn accept(&mut self, name: &str, instance: &str) -> OperationId {
            self.send(
                name,
                instance,
                json!({"name": "notes_delete", "arguments": {"title": "TPS"}, "requestState": STATE,
                    "inputResponses": {"delete_choice": {"action": "accept", "content": {"note_id": "note-7", "confirm": true}}}}),
            )
        }

        fn answer(&mut self, id: OperationId, answer: Value) {
            self.history.answer(id, Arc::new(answer), 0, id.0 + 1);
        }

        fn lose(&mut self, id: OperationId) {
            self.history.lost(id, "the answer was dropped (a fault)".into());
        }

        fn retry(&mut self, of: OperationId, number: u32, instance: &str) -> OperationId {
            self.history.attempt(Attempt::Retry { of, number }, instance.into(), 0)
        }

        fn judged(&self, before: i64, after: i64) -> Vec<Finding> {
            judge_history(&self.history, Some((before, after)), 0, &Masks::by_design())
        }
    }

    #[test]
    fn answers_taken_in_another_stage_than_round_1_are_listed_completed_dropped_or_lost() {
        let mut play = Play { history: History::default(), step: 0 };
        let form = json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "input_required", "requestState": STATE}});
        let round1 = play.send("round1", "i1@t1[k1]", json!({"name": "notes_delete", "arguments": {"title": "TPS"}}));
        play.history.answer(round1, Arc::new(form), 0, 1);
        let same = play.accept("same", "i3@t3[k1]");
        play.answer(same, deleted());
        let refused = play.accept("refused", "i2@t2[k2]");
        play.answer(refused, json!({"jsonrpc": "2.0", "id": 3, "error": {"code": -32602, "message": "bad signature"}}));
        let lost = play.accept("lost", "i2@t2[k2]");
        play.lose(lost);
        let done = play.accept("done", "i2@t2[k2-k1]");
        play.answer(done, deleted());
        assert_eq!(
            crossings(&play.history),
            [
                "refused on i2@t2[k2] answered the form of round1 on i1@t1[k1]: dropped (error -32602: \"bad signature\")",
                "lost on i2@t2[k2] answered the form of round1 on i1@t1[k1]: lost (no answer: it may have happened)",
                "done on i2@t2[k2-k1] answered the form of round1 on i1@t1[k1]: completed",
            ]
        );
        // Without stages (every label plain), nothing crosses.
        let mut plain = Play::new();
        let accept = plain.accept("round2", "i2@t2");
        plain.answer(accept, deleted());
        assert!(crossings(&plain.history).is_empty());
    }

    fn deleted() -> Value {
        json!({"jsonrpc": "2.0", "id": 9, "result": {"resultType": "complete", "structuredContent": {"deleted": true, "noteId": "note-7"}}})
    }

    fn error(reason: &str, data: Value) -> Value {
        let mut data = data;
        data["reason"] = json!(reason);
        json!({"jsonrpc": "2.0", "id": 9, "error": {"code": -32602, "message": "refused", "data": data}})
    }

    fn properties(findings: &[Finding]) -> Vec<Property> {
        findings.iter().map(|f| f.property).collect()
    }

    /// The accept's answer lost, then its retry elsewhere.
    fn lost_then_retried(retry_answer: Value) -> Play {
        let mut play = Play::new();
        let round2 = play.accept("round2", "i1@t2");
        play.lose(round2);
        let retry = play.retry(round2, 1, "i2@t3");
        play.answer(retry, retry_answer);
        play
    }

    #[test]
    fn a_lost_accept_whose_retry_hears_it_was_used_passes() {
        let play = lost_then_retried(error("state_consumed", json!({"previousOutcome": {"outcome": "deleted", "noteId": "note-7"}})));
        assert_eq!(play.judged(3, 2), vec![]);
        // A server of its own words: a tool error that says the confirmation was already used.
        let used = json!({"result": {"resultType": "complete", "isError": true, "content": [{"type": "text", "text": "this confirmation was already used"}],
            "structuredContent": {"deleted": false, "outcome": "used"}}});
        assert_eq!(lost_then_retried(used).judged(3, 2), vec![]);
        // The same completed result again (an idempotent replay of the first execution).
        assert_eq!(lost_then_retried(deleted()).judged(3, 2), vec![]);
        assert_eq!(indeterminate(&play.history), vec!["round2 on i1@t2 (answer lost: the answer was dropped (a fault))".to_string()]);
    }

    #[test]
    fn a_retry_told_the_note_is_gone_after_its_confirmation_executed_breaks_honest_outcome() {
        let play = lost_then_retried(error("note_gone", json!({})));
        let findings = play.judged(3, 2);
        assert_eq!(properties(&findings), vec![Property::HonestOutcome], "{findings:?}");
        assert!(
            findings[0].message.contains("retry 1 of round2 on i2@t3")
                && findings[0].message.contains("may have happened: round2 on i1@t2"),
            "{findings:?}"
        );
        // In a server's own words, and as a fresh form: the same.
        let gone =
            json!({"result": {"resultType": "complete", "isError": true, "content": [{"type": "text", "text": "note-7 not found"}]}});
        assert_eq!(properties(&lost_then_retried(gone).judged(3, 2)), vec![Property::HonestOutcome]);
        let form = json!({"result": {"resultType": "input_required", "requestState": "another"}});
        assert_eq!(properties(&lost_then_retried(form).judged(3, 2)), vec![Property::HonestOutcome]);
        // Nothing executed (the probe saw no effect): the note may well be gone for another reason.
        assert_eq!(play.judged(3, 3), vec![]);
    }

    #[test]
    fn an_answer_that_denies_its_own_execution_breaks_honest_outcome() {
        // error-on-retry: the only accept deleted, then answered that the note was not found.
        let mut play = Play::new();
        let round2 = play.accept("round2", "i2@t2");
        play.answer(
            round2,
            json!({"result": {"resultType": "complete", "isError": true, "content": [{"type": "text", "text": "note-7 not found"}],
                "structuredContent": {"deleted": false, "outcome": "error"}}}),
        );
        let findings = play.judged(3, 2);
        assert_eq!(properties(&findings), vec![Property::HonestOutcome], "{findings:?}");
        assert!(findings[0].message.contains("\"not found\""), "{findings:?}");
    }

    #[test]
    fn more_effects_than_accepted_confirmations_break_at_most_once_whatever_was_lost() {
        let mut play = Play::new();
        let round2 = play.accept("round2", "i1@t2");
        play.lose(round2);
        let findings = play.judged(3, 1);
        assert_eq!(properties(&findings), vec![Property::AtMostOnce], "{findings:?}");
        assert!(findings[0].message.contains("whatever the 1 that may have happened did"), "{findings:?}");
        assert_eq!(play.judged(3, 2), vec![]);
        assert_eq!(play.judged(3, 3), vec![]);
    }

    #[test]
    fn a_copy_answered_the_same_result_passes_with_one_effect_and_breaks_at_most_once_with_two() {
        let mut play = Play::new();
        let round2 = play.accept("round2", "i1@t2");
        let copy = play.history.attempt(Attempt::Duplicate { of: round2 }, "i2@t3".into(), 0);
        play.answer(round2, deleted());
        play.answer(copy, deleted());
        assert_eq!(play.judged(3, 2), vec![]);
        let findings = play.judged(3, 1);
        assert_eq!(properties(&findings), vec![Property::AtMostOnce], "{findings:?}");
        // A copy answered another result: two executions, whatever the probe says.
        play.answer(copy, json!({"result": {"resultType": "complete", "structuredContent": {"deleted": true, "noteId": "note-3"}}}));
        let findings = play.judged(3, 2);
        assert_eq!(properties(&findings), vec![Property::AtMostOnce], "{findings:?}");
        assert!(findings[0].message.contains("with different results"), "{findings:?}");
    }

    #[test]
    fn two_requests_of_one_confirmation_that_both_succeed_break_at_most_once_as_before() {
        let mut play = Play::new();
        let (first, second) = (play.accept("first", "i1@t1"), play.accept("second", "i2@t2"));
        play.answer(first, deleted());
        play.answer(second, deleted());
        let findings = play.judged(3, 2);
        assert_eq!(properties(&findings), vec![Property::AtMostOnce], "{findings:?}");
        assert!(findings[0].message.starts_with("one confirmation succeeded 2 times: first on i1@t1"), "{findings:?}");
    }

    #[test]
    fn retries_never_answered_break_liveness_once_clients_retry() {
        let mut play = Play::new();
        let round2 = play.accept("round2", "i1@t2");
        play.lose(round2);
        let retry = play.retry(round2, 1, "i2@t3");
        play.lose(retry);
        // Without faults, a lost answer is no liveness finding (nothing promised a retry).
        assert_eq!(play.judged(3, 2), vec![]);
        play.history.clients_now_retry();
        let findings = play.judged(3, 2);
        assert_eq!(properties(&findings), vec![Property::Liveness], "{findings:?}");
        assert!(findings[0].message.contains("no answer in 2 attempt(s)"), "{findings:?}");
        // "In progress" is no outcome either; a stranded client is promised nothing.
        let retry = play.retry(round2, 2, "i2@t3");
        play.answer(retry, error("claim_in_progress", json!({})));
        let findings = play.judged(3, 2);
        assert_eq!(properties(&findings), vec![Property::Liveness], "{findings:?}");
        assert!(findings[0].message.contains("claim_in_progress"), "{findings:?}");
        play.history.strand(round2);
        assert_eq!(play.judged(3, 2), vec![]);
    }

    #[test]
    fn a_success_that_did_nothing_breaks_honest_outcome() {
        let mut play = Play::new();
        let round2 = play.accept("round2", "i1@t2");
        play.answer(round2, deleted());
        let findings = play.judged(3, 3);
        assert_eq!(properties(&findings), vec![Property::HonestOutcome], "{findings:?}");
        assert!(findings[0].message.contains("a success that did nothing: round2 on i1@t2"), "{findings:?}");
        // A used confirmation that claims an effect the probe did not see: the same lie, told to a retry.
        let play = lost_then_retried(error("state_consumed", json!({"previousOutcome": {"outcome": "deleted"}})));
        let findings = play.judged(3, 3);
        assert_eq!(properties(&findings), vec![Property::HonestOutcome], "{findings:?}");
        assert!(findings[0].message.contains("did not execute"), "{findings:?}");
    }

    #[test]
    fn the_loser_of_a_race_may_be_asked_again_but_never_told_the_item_is_gone() {
        let race = |loser: Value| {
            let mut play = Play::new();
            let first = play.accept("first", "i1@t1");
            let second = play.history.request(Sent { name: Some("second".into()), ..play.history.operations()[first.0].sent.clone() });
            play.answer(first, deleted());
            play.answer(second, loser);
            play.judged(3, 2)
        };
        assert_eq!(race(error("state_consumed", json!({}))), vec![]);
        // Asked again before the winner ran: possible, and not judged.
        assert_eq!(race(json!({"result": {"resultType": "input_required", "requestState": "again"}})), vec![]);
        // The note was there until the winner deleted it: "gone" is never true of it.
        assert_eq!(properties(&race(error("note_gone", json!({})))), vec![Property::HonestOutcome]);
    }

    #[test]
    fn a_change_the_scenario_made_in_the_store_is_no_execution() {
        // The item deleted by `admin delete` after the form: the accept is told so, and the probe's one effect
        // is the admin's.
        let mut play = Play::new();
        let round2 = play.accept("round2", "i2@t2");
        play.answer(round2, error("note_gone", json!({})));
        assert_eq!(judge_history(&play.history, Some((3, 2)), 1, &Masks::by_design()), vec![]);
        assert_eq!(properties(&play.judged(3, 2)), vec![Property::HonestOutcome]);
        // More effects than accepts and admin changes together is still at-most-once (and then the accept
        // surely executed, so "gone" was not true either).
        let findings = judge_history(&play.history, Some((3, 0)), 1, &Masks::by_design());
        assert_eq!(properties(&findings), vec![Property::AtMostOnce, Property::HonestOutcome], "{findings:?}");
    }

    #[test]
    fn answers_are_read_by_reason_then_kind_then_words() {
        assert_eq!(
            said(&error("state_consumed", json!({"previousOutcome": {"outcome": "declined"}}))),
            Said::Used { outcome: Some("declined".into()) }
        );
        assert_eq!(said(&error("claim_in_progress", json!({}))), Said::Transient("claim_in_progress".into()));
        assert!(matches!(said(&error("note_outside_workspace", json!({}))), Said::Denied(_)));
        assert_eq!(said(&error("state_signature", json!({}))), Said::Other);
        assert_eq!(said(&deleted()), Said::Done);
        let gone = json!({"result": {"resultType": "complete", "isError": true, "content": [{"type": "text", "text": "note-7 is already gone"}],
            "structuredContent": {"deleted": false, "outcome": "gone"}}});
        assert!(matches!(said(&gone), Said::Denied(_)));
        let invalid =
            json!({"result": {"resultType": "complete", "isError": true, "content": [{"type": "text", "text": "invalid answer"}]}});
        assert_eq!(said(&invalid), Said::Other);
        assert_eq!(said(&json!({"error": {"code": -32602, "message": "Invalid or expired requestState"}})), Said::Other);
        assert_eq!(
            said(&json!({"error": {"code": -32602, "message": "This confirmation was already used"}})),
            Said::Used { outcome: None }
        );
    }
}
