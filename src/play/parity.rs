//! Parity: one scenario played in a world (a live fleet) compared, step by step, with the simulator's plays
//! of the same scenario.
//!
//! A request step matches when both worlds gave the same outcome ([`outcome_of`]). A `parallel` block is
//! compared as a set of outcomes against every interleaving the simulator produced under the seeds it was
//! given; later steps are compared with a run that raced the way the world did. What a world could not do
//! was already reported by the interpreter; here it becomes a row that says SKIPPED. An answer that may
//! legitimately differ (the world is configured otherwise, or something before it was not comparable) is
//! shown but not judged, and once such an answer went differently, nothing after it is judged either.

use super::expect::ExpectationResult;
use super::{Play, StepOutcome};
use crate::oracle::history::{History, Operation, OperationId, Outcome};
use crate::scenario::model::{Action, Scenario};
use crate::scenario::template::at;
use serde_json::Value;
use std::collections::BTreeMap;

/// How one step went in the world, next to the simulator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Both sides gave the same outcome.
    Match,
    /// They differ, and the difference counts.
    Mismatch,
    /// Shown, not judged, for this reason.
    NotCompared(String),
    /// Not performed in the world, for this reason.
    Skipped(String),
}

#[derive(Debug, Clone)]
pub struct ParityRow {
    pub line: usize,
    pub statement: String,
    pub simulator: String,
    pub live: String,
    pub verdict: Verdict,
}

/// The comparison of one play with the simulator's.
#[derive(Debug, Clone, Default)]
pub struct Parity {
    pub rows: Vec<ParityRow>,
    /// Every expectation: as the interpreter judged it, unless parity found it reads something not comparable.
    pub expectations: Vec<(usize, String, ExpectationResult)>,
    /// Races that went in the world as the simulator's did under another seed.
    pub interleaving_notes: Vec<String>,
}

/// What parity compares: `resultType` (and `structuredContent`), or the error code and reason, or no response.
pub fn outcome_of(operation: &Operation) -> String {
    match &operation.outcome {
        Outcome::Pending => "pending".into(),
        Outcome::NoResponse(_) => "no response".into(),
        Outcome::Answered { value, .. } => outcome_of_response(value),
    }
}

pub(crate) fn outcome_of_response(value: &Value) -> String {
    if let Some(result) = value.get("result") {
        let mut result_type = result.get("resultType").and_then(Value::as_str).unwrap_or("(no resultType)");
        // A tool error is its own outcome (`tool_error`), never shown as a completion.
        if result_type == "complete" && result.get("isError") == Some(&Value::Bool(true)) {
            result_type = "tool_error";
        }
        return match result.get("structuredContent") {
            Some(content) => format!("{result_type} {content}"),
            None => result_type.to_string(),
        };
    }
    let code = at(value, &["error", "code"]).map(Value::to_string).unwrap_or_else(|| "?".into());
    match at(value, &["error", "data", "reason"]).and_then(Value::as_str) {
        Some(reason) => format!("error {code} {reason}"),
        None => format!("error {code}"),
    }
}

/// The simulator's outcomes for the requests step `index` sent, in send order.
fn simulated_outcomes(history: &History, index: usize) -> Vec<String> {
    let outcomes: Vec<String> = history.operations.iter().filter(|op| op.step == index).map(outcome_of).collect();
    if outcomes.is_empty() {
        // The step could not run in the simulator either (its failure is listed as a note).
        return vec!["(not sent)".into()];
    }
    outcomes
}

/// Compares `played` (whose world recorded `history`) with the simulator's `runs` (seed, history) of
/// `scenario`. `global_caveat` is the world's own reason why nothing it answers may match, if it has one.
pub fn compare(scenario: &Scenario, played: &Play, history: &History, runs: &[(u64, History)], global_caveat: Option<&str>) -> Parity {
    let mut comparison =
        Comparison { played, history, global_caveat, diverged_since: None, caveats: BTreeMap::new(), parity: Parity::default() };
    // The simulator runs still consistent with every race seen so far; the first one is compared.
    let mut candidates: Vec<usize> = (0..runs.len()).collect();
    let mut expectations = played.expectations.iter().peekable();
    for step in &played.steps {
        while let Some(record) = expectations.next_if(|e| e.index < step.index) {
            comparison.expectation(record);
        }
        comparison.step(scenario, step, runs, &mut candidates);
    }
    for record in expectations {
        comparison.expectation(record);
    }
    comparison.parity
}

struct Comparison<'a> {
    played: &'a Play,
    history: &'a History,
    global_caveat: Option<&'a str>,
    /// The first answer that went differently while it was not comparable: nothing after it is judged.
    diverged_since: Option<String>,
    /// Operations made not comparable by that.
    caveats: BTreeMap<OperationId, String>,
    parity: Parity,
}

impl Comparison<'_> {
    fn caveat(&self, operation: OperationId) -> Option<String> {
        self.played.caveats.get(&operation).or_else(|| self.caveats.get(&operation)).cloned()
    }

    /// Why the world's store may hold something else than the simulator's before statement `index`.
    fn store_divergence(&self, index: usize) -> Option<String> {
        if let Some(why) = &self.diverged_since {
            return Some(format!("after {why}"));
        }
        if let Some((at, why)) = &self.played.diverged {
            if *at < index {
                return Some(format!("after {why}"));
            }
        }
        if let Some(why) = self.global_caveat {
            return Some(format!("configuration: {why}"));
        }
        self.history
            .operations
            .iter()
            .filter(|op| op.step < index)
            .find_map(|op| self.caveat(op.id))
            .map(|why| format!("a request before it was not compared ({why})"))
    }

    fn row(&mut self, line: usize, statement: &str, simulator: String, live: String, verdict: Verdict) {
        self.parity.rows.push(ParityRow { line, statement: statement.to_string(), simulator, live, verdict });
    }

    fn step(&mut self, scenario: &Scenario, step: &super::StepRecord, runs: &[(u64, History)], candidates: &mut Vec<usize>) {
        let action = &scenario.steps[step.index].action;
        let (line, text) = (step.line, step.text.as_str());
        let simulated = || simulated_outcomes(&runs[candidates[0]].1, step.index).join("; ");
        match (&step.outcome, action) {
            (StepOutcome::Performed { operations, excuse }, Action::Send(_) | Action::Parallel(_)) => {
                if let Some(why) = &self.diverged_since {
                    for operation in operations {
                        if !self.played.caveats.contains_key(operation) {
                            self.caveats.insert(*operation, format!("after {why}"));
                        }
                    }
                }
                let mut live: Vec<String> = operations.iter().map(|op| outcome_of(&self.history.operations[op.0])).collect();
                let reason = excuse.clone().or_else(|| operations.iter().find_map(|op| self.caveat(*op)));
                let simulator = if matches!(action, Action::Parallel(_)) {
                    // A race may be won by either side: compared as a set of outcomes, with any interleaving the
                    // simulator produced; later steps are compared with a run that raced alike.
                    live.sort();
                    let sorted = |run: usize| {
                        let mut outcomes = simulated_outcomes(&runs[run].1, step.index);
                        outcomes.sort();
                        outcomes
                    };
                    let alike: Vec<usize> = candidates.iter().copied().filter(|&run| sorted(run) == live).collect();
                    if let Some(&first) = alike.first() {
                        if first != candidates[0] {
                            self.parity.interleaving_notes.push(format!(
                                "line {line}: the live race went as the simulator's under seed {} (later steps are compared with that run)",
                                runs[first].0
                            ));
                        }
                        *candidates = alike;
                    }
                    sorted(candidates[0])
                } else {
                    simulated_outcomes(&runs[candidates[0]].1, step.index)
                };
                // An answer that may legitimately differ is never judged: if it differs, the difference does not
                // count, and if it is the same, that is a coincidence, not a comparison (a gateway scenario
                // against a notes fleet would otherwise "match" wherever both refuse alike).
                let verdict = match reason {
                    None if simulator == live => Verdict::Match,
                    Some(why) => {
                        // An answer that went differently may have changed the store differently (a misconfigured
                        // instance that deleted what the simulator's refused): nothing after it can be judged.
                        if simulator != live && self.diverged_since.is_none() {
                            self.diverged_since = Some(format!("line {line} ({text}), which went differently live"));
                        }
                        Verdict::NotCompared(why)
                    }
                    None => Verdict::Mismatch,
                };
                self.row(line, text, simulator.join("; "), live.join("; "), verdict);
            }
            (StepOutcome::Performed { .. }, _) => {
                let verdict = match self.store_divergence(step.index) {
                    Some(why) => Verdict::NotCompared(why),
                    None => Verdict::Match,
                };
                self.row(line, text, "(performed)".into(), "done".into(), verdict);
            }
            (StepOutcome::Skipped(why), Action::Send(_)) => {
                self.row(line, text, simulated(), "SKIPPED".into(), Verdict::Skipped(why.clone()));
            }
            (StepOutcome::Skipped(why), _) => self.row(line, text, "(performed)".into(), "SKIPPED".into(), Verdict::Skipped(why.clone())),
            (StepOutcome::Differs(why), _) => self.row(line, text, "(performed)".into(), why.clone(), Verdict::NotCompared(why.clone())),
            (StepOutcome::NotSent { why, excuse }, _) => {
                let simulator = simulated();
                self.row(line, text, simulator, format!("(not sent: {why})"), Verdict::NotCompared(excuse.clone()));
            }
            // Listed among the failures: nothing to compare.
            (StepOutcome::Failed(_), _) => {}
        }
    }

    fn expectation(&mut self, record: &super::ExpectationRecord) {
        let mut result = record.result.clone();
        if matches!(result, ExpectationResult::Held | ExpectationResult::HeldVacuously(_) | ExpectationResult::Failed(_)) {
            if let Some((name, why)) = record.reads.iter().find_map(|(name, op)| self.caveats.get(op).map(|why| (name, why))) {
                result = ExpectationResult::NotEvaluated(format!("{name} is not comparable ({why})"));
            } else if let (true, Some(why)) = (record.reads_store, &self.diverged_since) {
                result = ExpectationResult::NotEvaluated(format!("the store may differ from the simulator's: after {why}"));
            }
        }
        self.parity.expectations.push((record.line, record.text.clone(), result));
    }
}
