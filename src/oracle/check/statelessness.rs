//! Statelessness (§4.5): the same scenario played twice, its rounds taken by different instances the second
//! time, must get the same answers. Judged from the two histories alone: the world that played them (the
//! simulator re-running the same interleaving with requests rerouted, a target's fleet spread over its
//! processes or on one) decides how they are paired and how much of an answer counts.

use crate::oracle::history::{History, Operation};
use crate::oracle::outcome::{json_differences, Extent, Masks, Observed};
use std::collections::BTreeSet;

/// How the operations of the two plays are paired.
#[derive(Debug, Clone)]
pub enum Pairing {
    /// Operation by operation: the second play made the same requests in the same order (the simulator
    /// replays the first one's decisions).
    Operations,
    /// Step by step, each step's outcomes in send order; a step in `raced` (a `parallel` block) is compared
    /// by how many of its requests succeeded (which loser hears what is the race's to decide). Used by the
    /// target judge (with `cli`).
    #[cfg_attr(not(feature = "cli"), allow(dead_code))]
    Steps { raced: BTreeSet<usize> },
}

/// How two plays compare.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Compared {
    /// Operation pairs that went to different instances (with [`Pairing::Operations`]).
    pub rerouted: usize,
    /// Operation pairs of which at least one was answered (with [`Pairing::Operations`]).
    pub compared: usize,
    pub differences: Vec<Difference>,
}

/// One place where the second play got something else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The scenario step that sent it.
    pub step: usize,
    /// The instances that took it in each play, when they differ (with [`Pairing::Operations`]).
    pub moved: Option<(String, String)>,
    /// What the first play got, as the comparison saw it (masked).
    pub first: String,
    /// What the second play got.
    pub second: String,
    /// Where the two (masked) answers differ, one line per JSON path with both values
    /// ([`json_differences`]); empty when there is no pair of answers to compare path by path.
    pub paths: Vec<String>,
}

impl Difference {
    /// The difference as messages print it: `first`, then `second` (`joined` between them) when both are short
    /// and no path needs naming, else the differing JSON paths, each on a line of its own.
    pub fn described(&self, joined: &str) -> String {
        if self.is_short() {
            return format!("{}{joined}{}", self.first, self.second);
        }
        let count = self.paths.iter().filter(|line| !line.starts_with('…')).count();
        let mut out = format!("the answers differ at {count} JSON path(s) (first play, then second):");
        for line in &self.paths {
            out.push_str("\n  ");
            out.push_str(&line.replace('\n', "\n  "));
        }
        out
    }
}

impl Difference {
    /// Whether `first` and `second` alone show the difference: short, and at most one path differs.
    pub fn is_short(&self) -> bool {
        self.paths.is_empty() || (self.first.chars().count() + self.second.chars().count() <= 120 && self.paths.len() == 1)
    }
}

/// The differing paths of two outcomes at `extent`: their whole masked answers, or their structured contents.
fn paths_of(x: &Observed, y: &Observed, masks: &Masks, extent: Extent) -> Vec<String> {
    match extent {
        Extent::Answer => match (x.answer(), y.answer()) {
            (Some(a), Some(b)) => json_differences(&masks.apply(a), &masks.apply(b)),
            _ => Vec::new(),
        },
        Extent::Outcome => match (x.structured(), y.structured()) {
            (Some(a), Some(b)) if x.kind == y.kind => json_differences(&masks.apply(a), &masks.apply(b)),
            _ => Vec::new(),
        },
    }
}

/// Compares `first` with `second`, paired as `pairing` says, each answer with `masks` applied, at `extent`.
pub fn compare(first: &History, second: &History, pairing: &Pairing, masks: &Masks, extent: Extent) -> Compared {
    match pairing {
        Pairing::Operations => by_operation(first, second, masks, extent),
        Pairing::Steps { raced } => by_step(first, second, raced, masks, extent),
    }
}

fn by_operation(first: &History, second: &History, masks: &Masks, extent: Extent) -> Compared {
    let mut compared = Compared::default();
    for (a, b) in first.operations().iter().zip(second.operations()) {
        if a.instance != b.instance {
            compared.rerouted += 1;
        }
        if a.response().is_some() || b.response().is_some() {
            compared.compared += 1;
        }
        let (x, y) = (Observed::of(a), Observed::of(b));
        if !x.same(&y, masks, extent) {
            compared.differences.push(Difference {
                step: a.step,
                moved: (a.instance != b.instance).then(|| (a.instance.clone(), b.instance.clone())),
                first: x.shown(masks, extent),
                second: y.shown(masks, extent),
                paths: paths_of(&x, &y, masks, extent),
            });
        }
    }
    compared
}

fn by_step(first: &History, second: &History, raced: &BTreeSet<usize>, masks: &Masks, extent: Extent) -> Compared {
    let of_step = |history: &History, step: usize| -> Vec<Observed> {
        history.operations().iter().filter(|op| op.step == step).map(Observed::of).collect()
    };
    let steps: BTreeSet<usize> = first.operations().iter().chain(second.operations()).map(|op: &Operation| op.step).collect();
    let mut compared = Compared::default();
    for step in steps {
        let (a, b) = (of_step(first, step), of_step(second, step));
        let differ = if raced.contains(&step) {
            let wins = |outcomes: &[Observed]| outcomes.iter().filter(|o| o.succeeded()).count();
            (wins(&a), a.len()) != (wins(&b), b.len())
        } else {
            a.len() != b.len() || a.iter().zip(&b).any(|(x, y)| !x.same(y, masks, extent))
        };
        if differ {
            let shown = |outcomes: &[Observed]| {
                if raced.contains(&step) {
                    format!("{} of {} succeeded", outcomes.iter().filter(|o| o.succeeded()).count(), outcomes.len())
                } else {
                    outcomes.iter().map(|o| o.shown(masks, extent)).collect::<Vec<_>>().join("; ")
                }
            };
            let paths = match (raced.contains(&step), a.as_slice(), b.as_slice()) {
                (false, [x], [y]) => paths_of(x, y, masks, extent),
                _ => Vec::new(),
            };
            compared.differences.push(Difference { step, moved: None, first: shown(&a), second: shown(&b), paths });
        }
    }
    compared
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oracle::history::Sent;
    use serde_json::{json, Value};
    use std::sync::Arc;

    /// A history of answered requests: `(step, instance, answer)` each.
    fn history(answers: &[(usize, &str, Value)]) -> History {
        let mut history = History::default();
        for (step, instance, answer) in answers {
            let sent = Sent {
                client: "alice".into(),
                principal: "alice".into(),
                instance: instance.to_string(),
                step: *step,
                name: None,
                request_value: Some(Arc::new(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call"}))),
                request_exact: None,
                notification: false,
                sent_at_ms: 0,
            };
            let id = history.request(sent);
            history.answer(id, Arc::new(answer.clone()), 0, id.0 + 1);
        }
        history
    }

    fn form(state: &str) -> Value {
        json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "input_required", "requestState": state, "inputRequests": {}}})
    }

    fn done(deleted: bool) -> Value {
        json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "complete", "structuredContent": {"deleted": deleted}}})
    }

    #[test]
    fn a_masked_state_is_not_a_difference_and_a_differing_answer_is() {
        let original = history(&[(0, "i1", form("s1.aaa")), (1, "i1", done(true))]);
        let same = history(&[(0, "i2", form("s1.bbb")), (1, "i1", done(true))]);
        let compared = compare(&original, &same, &Pairing::Operations, &Masks::by_design(), Extent::Answer);
        assert_eq!(compared, Compared { rerouted: 1, compared: 2, differences: Vec::new() });
        // Unmasked, the sealed states are told apart.
        assert_eq!(compare(&original, &same, &Pairing::Operations, &Masks::none(), Extent::Answer).differences.len(), 1);

        let broken = history(&[(0, "i2", form("s1.bbb")), (1, "i2", done(false))]);
        let compared = compare(&original, &broken, &Pairing::Operations, &Masks::by_design(), Extent::Answer);
        assert_eq!(compared.differences.len(), 1, "{compared:?}");
        let difference = &compared.differences[0];
        assert_eq!((difference.step, difference.moved.clone()), (1, Some(("i1".into(), "i2".into()))));
        assert!(difference.first.contains(r#""deleted":true"#) && difference.second.contains(r#""deleted":false"#), "{difference:?}");
    }

    #[test]
    fn steps_compare_outcomes_and_races_compare_how_many_won() {
        let lost = json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "data": {"reason": "state_consumed"}}});
        let spread = history(&[(0, "a@t1", form("x")), (1, "a@t2", done(true)), (2, "a@t1", done(true)), (2, "b@t2", lost.clone())]);
        // The race's winner differs (which loser hears what is the race's): no difference.
        let one = history(&[(0, "a@t1", form("y")), (1, "a@t1", done(true)), (2, "b@t1", lost.clone()), (2, "a@t1", done(true))]);
        let raced = Pairing::Steps { raced: BTreeSet::from([2]) };
        assert_eq!(compare(&spread, &one, &raced, &Masks::by_design(), Extent::Outcome).differences, Vec::new());
        // Two winners, and a tool error where one instance completed: both caught.
        let tool_error = json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "complete", "isError": true}});
        let twice = history(&[(0, "a@t1", form("y")), (1, "a@t1", tool_error), (2, "a@t1", done(true)), (2, "b@t1", done(true))]);
        let differences = compare(&spread, &twice, &raced, &Masks::by_design(), Extent::Outcome).differences;
        let shown: Vec<(usize, &str, &str)> = differences.iter().map(|d| (d.step, d.first.as_str(), d.second.as_str())).collect();
        assert_eq!(shown, vec![(1, r#"complete {"deleted":true}"#, "tool_error"), (2, "1 of 2 succeeded", "2 of 2 succeeded")]);
    }
}
