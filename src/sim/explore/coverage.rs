//! Coverage: what an exploration actually reached, so that a green exploration that explored little (a fault
//! turned on that never fired, a parallel block whose messages never raced) shows as such.
//!
//! Each run is read from its [`RunReport`] (its transcript, history and decision log: the same data every
//! transcript and report renders; nothing here models a run again). A run's [`RunCoverage`] is merged into
//! one [`Coverage`] per exploration; merging is a union of sets and a sum of counts, so the answer does not
//! depend on how seeds were spread over threads.

use crate::oracle::history::{NoResponse, Outcome};
use crate::scenario::template::at;
use crate::sim::engine::faults::FaultKind;
use crate::sim::explore::SeedOutcome;
use crate::sim::render::transcript::Entry;
use crate::sim::runner::{FailureKind, RunReport};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};

/// How often something was reached: in how many answers (or firings), and in how many runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reached {
    pub times: u64,
    pub runs: u64,
}

/// One scenario step as the exploration saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepCoverage {
    pub line: usize,
    pub text: String,
    /// Runs in which, during this step, the scheduler chose among two or more envelopes in flight.
    pub raced_runs: u64,
}

/// An outcome class: runs with the same verdict and the same settled answer to every client request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutcomeClass {
    pub runs: u64,
    /// The lowest seed in the class (its example run).
    pub example_seed: u64,
}

/// The verdict and answers that define an outcome class.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ClassKey {
    /// `held`, `unsafe: PROPERTY[, …]`, `not live`, `expectations failed`, `crashed`.
    pub verdict: String,
    /// One line per first-attempt client request, in send order: who asked, and what they finally learned.
    pub answers: Vec<String>,
}

/// What one run reached.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunCoverage {
    faults: BTreeMap<FaultKind, u64>,
    reasons: BTreeMap<String, u64>,
    outcomes: BTreeMap<String, u64>,
    delivery_order: [u8; 32],
    end_state: [u8; 32],
    /// Steps by number: line, text, raced in this run.
    steps: BTreeMap<usize, (usize, String, bool)>,
    class: Option<ClassKey>,
}

/// What an exploration reached, over all its runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage {
    pub runs: u64,
    /// The fault kinds turned on.
    pub faults_on: Vec<FaultKind>,
    /// Faults fired, by kind (every kind turned on is present, with zero if it never fired).
    pub faults: BTreeMap<FaultKind, Reached>,
    /// Refusal reasons (`error.data.reason`) in the answers clients received.
    pub reasons: BTreeMap<String, Reached>,
    /// Outcomes of the answers clients received (`complete: deleted`, `input_required`, `error -32602`, `no response`).
    pub outcomes: BTreeMap<String, Reached>,
    /// Digests of each distinct delivery order (sender, receiver, kind and label of every delivery, in order).
    pub delivery_orders: BTreeSet<[u8; 32]>,
    /// Digests of each distinct end state (notes deleted, confirmations consumed and their records, exports).
    pub end_states: BTreeSet<[u8; 32]>,
    /// Scenario steps by number.
    pub steps: BTreeMap<usize, StepCoverage>,
    pub classes: BTreeMap<ClassKey, OutcomeClass>,
}

impl Coverage {
    pub fn new(faults_on: &[FaultKind]) -> Coverage {
        Coverage {
            faults_on: faults_on.to_vec(),
            faults: faults_on.iter().map(|kind| (*kind, Reached::default())).collect(),
            ..Coverage::default()
        }
    }

    /// Fault kinds turned on that never fired in any run.
    pub fn faults_never_fired(&self) -> Vec<FaultKind> {
        self.faults.iter().filter(|(_, reached)| reached.times == 0).map(|(kind, _)| *kind).collect()
    }

    pub(crate) fn add(&mut self, seed: u64, run: RunCoverage) {
        self.runs += 1;
        for (kind, times) in run.faults {
            let reached = self.faults.entry(kind).or_default();
            reached.times += times;
            reached.runs += 1;
        }
        for (into, from) in [(&mut self.reasons, run.reasons), (&mut self.outcomes, run.outcomes)] {
            for (name, times) in from {
                let reached = into.entry(name).or_default();
                reached.times += times;
                reached.runs += 1;
            }
        }
        self.delivery_orders.insert(run.delivery_order);
        self.end_states.insert(run.end_state);
        for (number, (line, text, raced)) in run.steps {
            let step = self.steps.entry(number).or_insert(StepCoverage { line, text, raced_runs: 0 });
            step.raced_runs += u64::from(raced);
        }
        if let Some(key) = run.class {
            let class = self.classes.entry(key).or_insert(OutcomeClass { runs: 0, example_seed: seed });
            class.runs += 1;
            class.example_seed = class.example_seed.min(seed);
        }
    }

    /// Merges another exploration's coverage of the same scenario (another chunk of seeds).
    pub(crate) fn merge(&mut self, other: Coverage) {
        self.runs += other.runs;
        for (kind, reached) in other.faults {
            let into = self.faults.entry(kind).or_default();
            into.times += reached.times;
            into.runs += reached.runs;
        }
        for (into, from) in [(&mut self.reasons, other.reasons), (&mut self.outcomes, other.outcomes)] {
            for (name, reached) in from {
                let entry = into.entry(name).or_default();
                entry.times += reached.times;
                entry.runs += reached.runs;
            }
        }
        self.delivery_orders.extend(other.delivery_orders);
        self.end_states.extend(other.end_states);
        for (number, step) in other.steps {
            match self.steps.get_mut(&number) {
                Some(into) => into.raced_runs += step.raced_runs,
                None => {
                    self.steps.insert(number, step);
                }
            }
        }
        for (key, class) in other.classes {
            match self.classes.get_mut(&key) {
                Some(into) => {
                    into.runs += class.runs;
                    into.example_seed = into.example_seed.min(class.example_seed);
                }
                None => {
                    self.classes.insert(key, class);
                }
            }
        }
    }

    /// Outcome classes, the most frequent first (ties: the lowest example seed).
    pub fn classes_by_frequency(&self) -> Vec<(&ClassKey, &OutcomeClass)> {
        let mut classes: Vec<_> = self.classes.iter().collect();
        classes.sort_by_key(|(_, class)| (std::cmp::Reverse(class.runs), class.example_seed));
        classes
    }

    /// The coverage as JSON (`mcpsim explore --coverage-json`): sorted keys, so the same exploration gives
    /// the same bytes.
    pub fn to_json(&self) -> Value {
        let reached = |map: &BTreeMap<String, Reached>| -> Value {
            map.iter()
                .map(|(name, r)| (name.clone(), json!({ "times": r.times, "runs": r.runs })))
                .collect::<serde_json::Map<_, _>>()
                .into()
        };
        let faults: serde_json::Map<String, Value> =
            self.faults.iter().map(|(kind, r)| (kind.as_str().to_string(), json!({ "fired": r.times, "runs": r.runs }))).collect();
        let steps: Vec<Value> = self
            .steps
            .iter()
            .map(|(number, step)| json!({ "step": number, "line": step.line, "text": step.text, "racedRuns": step.raced_runs }))
            .collect();
        let classes: Vec<Value> = self
            .classes_by_frequency()
            .into_iter()
            .map(|(key, class)| json!({ "verdict": key.verdict, "answers": key.answers, "runs": class.runs, "exampleSeed": class.example_seed }))
            .collect();
        json!({
            "runs": self.runs,
            "faultsOn": self.faults_on.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
            "faults": faults,
            "faultsNeverFired": self.faults_never_fired().iter().map(|k| k.as_str()).collect::<Vec<_>>(),
            "refusalReasons": reached(&self.reasons),
            "outcomes": reached(&self.outcomes),
            "distinctDeliveryOrders": self.delivery_orders.len(),
            "distinctEndStates": self.end_states.len(),
            "steps": steps,
            "outcomeClasses": classes,
        })
    }
}

/// [`Coverage`] as data another process can merge (`explore --results`, read by `mcpsim merge`): every set
/// exact (the distinct delivery orders and end states as sorted hex digests, the outcome classes with their
/// answers), so merging shards read back gives the coverage one run of all their seeds would have.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Mergeable {
    runs: u64,
    faults_on: Vec<String>,
    faults: BTreeMap<String, Reached>,
    reasons: BTreeMap<String, Reached>,
    outcomes: BTreeMap<String, Reached>,
    delivery_orders: Vec<String>,
    end_states: Vec<String>,
    steps: Vec<MergeableStep>,
    classes: Vec<MergeableClass>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct MergeableStep {
    step: usize,
    line: usize,
    text: String,
    raced_runs: u64,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct MergeableClass {
    verdict: String,
    answers: Vec<String>,
    runs: u64,
    example_seed: u64,
}

fn hex(digest: &[u8; 32]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Result<[u8; 32], String> {
    let bad = || format!("{text:?} is not a digest (64 hex digits)");
    if text.len() != 64 || !text.is_ascii() {
        return Err(bad());
    }
    let mut digest = [0u8; 32];
    for (i, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(digest)
}

fn fault_kind(name: &str) -> Result<FaultKind, String> {
    FaultKind::ALL.iter().copied().find(|k| k.as_str() == name).ok_or_else(|| format!("unknown fault kind {name:?}"))
}

impl Coverage {
    /// The coverage as mergeable data ([`Coverage::from_mergeable_json`] reads it back exactly).
    pub fn to_mergeable_json(&self) -> Value {
        let mergeable = Mergeable {
            runs: self.runs,
            faults_on: self.faults_on.iter().map(|k| k.as_str().to_string()).collect(),
            faults: self.faults.iter().map(|(k, r)| (k.as_str().to_string(), *r)).collect(),
            reasons: self.reasons.clone(),
            outcomes: self.outcomes.clone(),
            delivery_orders: self.delivery_orders.iter().map(hex).collect(),
            end_states: self.end_states.iter().map(hex).collect(),
            steps: self
                .steps
                .iter()
                .map(|(n, s)| MergeableStep { step: *n, line: s.line, text: s.text.clone(), raced_runs: s.raced_runs })
                .collect(),
            classes: self
                .classes
                .iter()
                .map(|(k, c)| MergeableClass {
                    verdict: k.verdict.clone(),
                    answers: k.answers.clone(),
                    runs: c.runs,
                    example_seed: c.example_seed,
                })
                .collect(),
        };
        serde_json::to_value(mergeable).expect("coverage serializes")
    }

    /// Reads [`Coverage::to_mergeable_json`] back; what is wrong with it, when something is.
    pub fn from_mergeable_json(value: &Value) -> Result<Coverage, String> {
        let m: Mergeable = Mergeable::deserialize(value).map_err(|e| format!("coverage: {e}"))?;
        let mut faults_on = m.faults_on.iter().map(|n| fault_kind(n)).collect::<Result<Vec<_>, _>>()?;
        faults_on.sort();
        let mut coverage = Coverage::new(&faults_on);
        coverage.runs = m.runs;
        for (name, reached) in m.faults {
            coverage.faults.insert(fault_kind(&name)?, reached);
        }
        coverage.reasons = m.reasons;
        coverage.outcomes = m.outcomes;
        coverage.delivery_orders = m.delivery_orders.iter().map(|d| unhex(d)).collect::<Result<_, _>>()?;
        coverage.end_states = m.end_states.iter().map(|d| unhex(d)).collect::<Result<_, _>>()?;
        for step in m.steps {
            coverage.steps.insert(step.step, StepCoverage { line: step.line, text: step.text, raced_runs: step.raced_runs });
        }
        for class in m.classes {
            let key = ClassKey { verdict: class.verdict, answers: class.answers };
            coverage.classes.insert(key, OutcomeClass { runs: class.runs, example_seed: class.example_seed });
        }
        Ok(coverage)
    }
}

/// The verdict of a seed, as outcome classes name it.
pub(crate) fn verdict(outcome: &SeedOutcome) -> String {
    let properties = |failures: &[crate::sim::runner::Failure]| crate::sim::explore::broken_property_names(failures).join(", ");
    match outcome {
        SeedOutcome::Held => "held".into(),
        SeedOutcome::Unsafe(failures) => format!("unsafe: {}", properties(failures)),
        SeedOutcome::NotLive(failures) if failures.iter().any(|f| matches!(f.kind, FailureKind::Property(_))) => "not live".into(),
        SeedOutcome::NotLive(_) => "expectations failed".into(),
        SeedOutcome::Crashed(_) => "crashed".into(),
    }
}

/// What one run reached. The report must have been recorded with its transcript (steps and delivery order
/// are read from it).
pub(crate) fn of_run(report: &RunReport, outcome: &SeedOutcome) -> RunCoverage {
    let mut run = RunCoverage::default();
    for fault in &report.decisions.faults {
        *run.faults.entry(fault.kind()).or_default() += 1;
    }
    let history = &report.history;
    for operation in history.operations().iter().filter(|op| !op.notification) {
        let outcome = match &operation.outcome {
            Outcome::Answered { value, .. } => answer_outcome(value),
            Outcome::NoResponse(NoResponse::Lost) | Outcome::Pending => "no response".to_string(),
            Outcome::NoResponse(NoResponse::Notification) => continue,
        };
        *run.outcomes.entry(outcome).or_default() += 1;
        if let Some(reason) = operation.response().and_then(|r| at(r, &["error", "data", "reason"])).and_then(Value::as_str) {
            *run.reasons.entry(reason.to_string()).or_default() += 1;
        }
    }
    let mut order = Sha256::new();
    let mut current_step = None;
    for entry in &report.transcript.entries {
        match entry {
            Entry::Step { number, line, text } => {
                run.steps.insert(*number, (*line, text.clone(), false));
                current_step = Some(*number);
            }
            Entry::Delivery { from, to, message, in_flight, .. } => {
                order.update(format!("{from}>{to} {} {}\n", message.kind.as_str(), message.label()).as_bytes());
                if *in_flight > 1 {
                    if let Some(step) = current_step.and_then(|number| run.steps.get_mut(&number)) {
                        step.2 = true;
                    }
                }
            }
            _ => {}
        }
    }
    run.delivery_order = order.finalize().into();
    run.end_state = end_state(report);
    run.class = Some(ClassKey { verdict: verdict(outcome), answers: settled_answers(report) });
    run
}

/// What an answer was, in a few words: `complete: deleted`, `input_required`, `error -32602 state_consumed`.
pub(crate) fn answer_outcome(value: &Value) -> String {
    if let Some(result) = value.get("result") {
        let result_type = result.get("resultType").and_then(Value::as_str).unwrap_or("result");
        return match at(result, &["structuredContent", "outcome"]).and_then(Value::as_str) {
            Some(outcome) => format!("{result_type}: {outcome}"),
            None => result_type.to_string(),
        };
    }
    match value.get("error") {
        Some(error) => format!("error {}", error.get("code").map(Value::to_string).unwrap_or_default()),
        None => "not a response".into(),
    }
}

/// Each first-attempt request's settled answer, in send order.
fn settled_answers(report: &RunReport) -> Vec<String> {
    let history = &report.history;
    history
        .operations()
        .iter()
        .filter(|op| !op.notification && !history.attempts().contains_key(&op.id))
        .map(|op| {
            let settled = history.settled(op.id);
            let what = match settled.response() {
                Some(value) => {
                    let outcome = answer_outcome(value);
                    match at(value, &["error", "data", "reason"]).and_then(Value::as_str) {
                        Some(reason) => format!("{outcome} {reason}"),
                        None => outcome,
                    }
                }
                None => "no response".into(),
            };
            let who = op.name.clone().unwrap_or_else(|| format!("{} (step {})", op.client, op.step + 1));
            format!("{who}: {what}")
        })
        .collect()
}

/// A digest of how the run left the world: the notes deleted, the records of the consumed confirmations and
/// the exports made (not their nonces or keys, which differ from seed to seed).
fn end_state(report: &RunReport) -> [u8; 32] {
    use crate::oracle::history::EffectKind;
    let mut deleted = Vec::new();
    let mut consumed = Vec::new();
    let mut exports = Vec::new();
    for effect in report.history.effects() {
        match &effect.kind {
            EffectKind::NoteDeleted { note, .. } => deleted.push(note.id.clone()),
            EffectKind::NonceConsumed { record, .. } => consumed.push(record.to_string()),
            EffectKind::Exported(e) => exports.push(format!("{} {} {:?}", e.principal, e.destination, e.note_ids)),
            _ => {}
        }
    }
    deleted.sort();
    consumed.sort();
    exports.sort();
    let mut digest = Sha256::new();
    digest.update(format!("{deleted:?}\n{consumed:?}\n{exports:?}").as_bytes());
    digest.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A made-up run reaching things that depend on its seed.
    fn run(seed: u64) -> RunCoverage {
        let mut run = RunCoverage::default();
        if seed % 3 == 0 {
            run.faults.insert(FaultKind::Drop, seed % 5 + 1);
        }
        run.reasons.insert(format!("reason-{}", seed % 4), 1);
        run.outcomes.insert("complete: deleted".into(), 2);
        run.delivery_order = [(seed % 11) as u8; 32];
        run.end_state = [(seed % 2) as u8; 32];
        run.steps.insert(1, (3, "parallel".into(), seed % 2 == 0));
        run.steps.insert(2, (9, "expect".into(), false));
        run.class = Some(ClassKey { verdict: "held".into(), answers: vec![format!("alice: {}", seed % 3)] });
        run
    }

    #[test]
    fn coverage_round_trips_as_data_and_shards_merge_to_the_whole() {
        let faults = [FaultKind::Crash, FaultKind::Drop];
        let mut whole = Coverage::new(&faults);
        for seed in 1..=40 {
            whole.add(seed, run(seed));
        }
        let json = whole.to_mergeable_json();
        assert_eq!(Coverage::from_mergeable_json(&json).unwrap(), whole);
        // Three contiguous shards, each through JSON text, merged in reverse order.
        let mut merged: Option<Coverage> = None;
        for seeds in [27..=40u64, 14..=26, 1..=13] {
            let mut part = Coverage::new(&faults);
            seeds.for_each(|seed| part.add(seed, run(seed)));
            let text = part.to_mergeable_json().to_string();
            let back = Coverage::from_mergeable_json(&serde_json::from_str(&text).unwrap()).unwrap();
            match merged.as_mut() {
                None => merged = Some(back),
                Some(merged) => merged.merge(back),
            }
        }
        let merged = merged.unwrap();
        assert_eq!(merged, whole);
        assert_eq!(merged.to_json().to_string(), whole.to_json().to_string());
        assert_eq!(merged.faults_never_fired(), [FaultKind::Crash]);
    }

    #[test]
    fn malformed_coverage_is_refused_with_the_reason() {
        let mut whole = Coverage::new(&[FaultKind::Crash]);
        whole.add(1, run(1));
        let good = whole.to_mergeable_json();
        let mut bad_digest = good.clone();
        bad_digest["deliveryOrders"] = json!(["abc"]);
        let mut bad_kind = good.clone();
        bad_kind["faultsOn"] = json!(["meteor"]);
        let mut missing = good.clone();
        missing.as_object_mut().unwrap().remove("runs");
        for (bad, says) in [(bad_digest, "is not a digest"), (bad_kind, "unknown fault kind"), (missing, "missing field `runs`")] {
            let error = Coverage::from_mergeable_json(&bad).unwrap_err();
            assert!(error.contains(says), "{error}");
        }
    }
}
