//! Parity: one scenario played in a world (a live fleet) compared, step by step, with the simulator's plays
//! of the same scenario.
//!
//! A request step matches when both worlds gave the same outcome ([`Observed`], compared by kind and content). A `parallel` block is
//! compared as a set of outcomes against every interleaving the simulator produced under the seeds it was
//! given; later steps are compared with a run that raced the way the world did. What a world could not do
//! was already reported by the interpreter; here it becomes a row that says SKIPPED. An answer that may
//! legitimately differ (the world is configured otherwise, or something before it was not comparable) is
//! shown but not judged, and once such an answer went differently, nothing after it is judged either.

use super::expect::ExpectationResult;
use super::{Play, StepOutcome};
use crate::oracle::history::{History, OperationId};
use crate::oracle::outcome::{same_set, Extent, Masks, Observed};
use crate::scenario::model::{Action, Scenario};
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

/// The simulator's outcomes for the requests step `index` sent, in send order (`None`: the step could not run
/// in the simulator either; its failure is listed as a note).
fn simulated_outcomes(history: &History, index: usize) -> Option<Vec<Observed>> {
    let outcomes: Vec<Observed> = history.operations().iter().filter(|op| op.step == index).map(Observed::of).collect();
    (!outcomes.is_empty()).then_some(outcomes)
}

/// Outcomes as a row shows them.
fn shown(outcomes: &Option<Vec<Observed>>) -> String {
    match outcomes {
        Some(outcomes) => outcomes.iter().map(Observed::to_string).collect::<Vec<_>>().join("; "),
        None => "(not sent)".into(),
    }
}

/// A race's outcomes in a stable order (as shown: by their lines).
fn sorted(mut outcomes: Vec<Observed>) -> Vec<Observed> {
    outcomes.sort_by_cached_key(Observed::to_string);
    outcomes
}

/// Parity compares outcomes as they are: both worlds run the same servers' rules, so nothing is masked.
fn same(simulator: &Option<Vec<Observed>>, live: &[Observed]) -> bool {
    let masks = Masks::none();
    simulator.as_ref().is_some_and(|simulator| {
        simulator.len() == live.len() && simulator.iter().zip(live).all(|(a, b)| a.same(b, &masks, Extent::Outcome))
    })
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
            .operations()
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
        let simulated = || shown(&simulated_outcomes(&runs[candidates[0]].1, step.index));
        match (&step.outcome, action) {
            (StepOutcome::Performed { operations, excuse }, Action::Send(_) | Action::Parallel(_)) => {
                if let Some(why) = &self.diverged_since {
                    for operation in operations {
                        if !self.played.caveats.contains_key(operation) {
                            self.caveats.insert(*operation, format!("after {why}"));
                        }
                    }
                }
                let live: Vec<Observed> = operations.iter().map(|op| Observed::of(&self.history.operations()[op.0])).collect();
                let reason = excuse.clone().or_else(|| operations.iter().find_map(|op| self.caveat(*op)));
                let simulator = if matches!(action, Action::Parallel(_)) {
                    // A race may be won by either side: compared as a set of outcomes, with any interleaving the
                    // simulator produced; later steps are compared with a run that raced alike.
                    let raced = |run: usize| simulated_outcomes(&runs[run].1, step.index).map(sorted);
                    let alike: Vec<usize> = candidates
                        .iter()
                        .copied()
                        .filter(|&run| raced(run).is_some_and(|outcomes| same_set(&outcomes, &live, &Masks::none(), Extent::Outcome)))
                        .collect();
                    if let Some(&first) = alike.first() {
                        if first != candidates[0] {
                            self.parity.interleaving_notes.push(format!(
                                "line {line}: the live race went as the simulator's under seed {} (later steps are compared with that run)",
                                runs[first].0
                            ));
                        }
                        *candidates = alike;
                    }
                    raced(candidates[0])
                } else {
                    simulated_outcomes(&runs[candidates[0]].1, step.index)
                };
                // An answer that may legitimately differ is never judged: if it differs, the difference does not
                // count, and if it is the same, that is a coincidence, not a comparison (a gateway scenario
                // against a notes fleet would otherwise "match" wherever both refuse alike).
                let live = if matches!(action, Action::Parallel(_)) { sorted(live) } else { live };
                let alike = match (&simulator, action) {
                    (Some(simulator), Action::Parallel(_)) => same_set(simulator, &live, &Masks::none(), Extent::Outcome),
                    _ => same(&simulator, &live),
                };
                let verdict = match reason {
                    None if alike => Verdict::Match,
                    Some(why) => {
                        // An answer that went differently may have changed the store differently (a misconfigured
                        // instance that deleted what the simulator's refused): nothing after it can be judged.
                        if !alike && self.diverged_since.is_none() {
                            self.diverged_since = Some(format!("line {line} ({text}), which went differently live"));
                        }
                        Verdict::NotCompared(why)
                    }
                    None => Verdict::Mismatch,
                };
                let live = live.iter().map(Observed::to_string).collect::<Vec<_>>().join("; ");
                self.row(line, text, shown(&simulator), live, verdict);
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
