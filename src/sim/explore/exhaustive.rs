//! Exhaustive exploration: every distinct delivery order of a scenario's concurrent parts, by stateless
//! re-execution with sleep sets.
//!
//! A run is driven by a `PrefixScheduler`: it follows a prefix of choices at the *branching points*
//! (deliveries where more than one envelope is in flight), then always picks the first envelope, and
//! records the envelopes in flight at every branching point. The depth-first search extends prefixes one
//! choice at a time and re-executes the scenario for each.
//!
//! **Reduction (sleep sets).** Two deliveries to different receivers commute: a delivery changes only its
//! receiver's state (an instance, a client, or one store — store effects happen *at* the store actor) and
//! adds envelopes. So after exploring delivery `t` first at a node, the siblings explored later put `t` to
//! sleep, and it stays asleep in their subtrees until a delivery to the same receiver happens. Orders that
//! differ only by swapping independent deliveries are visited once. (Delivery times are lower bounds in
//! this simulator and the clock only moves forwards, so swapping can change the virtual time a delivery
//! observes by a few milliseconds; no scenario here depends on that, and the seed's latencies are fixed.)

use crate::oracle::check::Property;
use crate::oracle::history::EffectKind;
use crate::scenario::Scenario;
use crate::sim::engine::faults::Fault;
use crate::sim::engine::message::ActorId;
use crate::sim::engine::network::Ready;
use crate::sim::engine::scheduler::{Divergence, Scheduler};
use crate::sim::runner::{self, CustomScheduler, Failure, FailureKind, Prepared, RunOptions, RunReport, SchedulerChoice, ServerUnderTest};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

/// Most executions one exhaustive exploration runs before reporting that it stopped short.
pub(crate) const EXHAUSTIVE_EXECUTIONS_MAX: u64 = 1_000_000;

/// One envelope in flight at a branching point: its id and its receiver.
type Transition = (u64, ActorId);

/// Follows `prefix` at branching points, then picks the first envelope; records what was in flight.
struct PrefixScheduler {
    prefix: Vec<u32>,
    position: usize,
    seen: Arc<Mutex<Vec<Vec<Transition>>>>,
}

impl Scheduler for PrefixScheduler {
    fn name(&self) -> &'static str {
        "exhaustive"
    }

    fn choose(&mut self, ready: &[Ready]) -> Result<usize, Divergence> {
        if ready.len() <= 1 {
            return Ok(0);
        }
        self.seen.lock().expect("one run at a time").push(ready.iter().map(|r| (r.envelope, r.to)).collect());
        let choice = self.prefix.get(self.position).copied().unwrap_or(0) as usize;
        self.position += 1;
        Ok(choice.min(ready.len() - 1))
    }
}

/// What an exhaustive exploration found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exhaustive {
    /// Complete schedules visited (leaves of the reduced search tree).
    pub schedules: u64,
    /// Scenario executions it took (a node whose first child is its own run costs nothing extra).
    pub executions: u64,
    /// Distinct end states: what every client was answered and which notes were deleted.
    pub end_states: usize,
    /// Schedules that broke a property.
    pub unsafe_runs: u64,
    /// Schedules in which an expectation failed (or a step could not run), those that broke a property too.
    pub expectation_runs: u64,
    /// The first schedule (its choices at branching points) that broke a property, and its failures.
    pub first_unsafe: Option<(Vec<u32>, Vec<Failure>)>,
    pub first_expectation: Option<(Vec<u32>, Vec<Failure>)>,
    /// The execution bound was reached before the search finished.
    pub truncated: bool,
}

struct Search<'a> {
    /// The scenario's cluster, worked out once for every schedule.
    prepared: Prepared<'a>,
    server: ServerUnderTest,
    result: Exhaustive,
    end_states: BTreeSet<String>,
    /// Sleep sets on (the default) or off (every order, for checking the reduction loses nothing).
    reduce: bool,
}

type Execution = (Vec<Vec<Transition>>, RunReport);

/// Runs `scenario` under `seed` (latencies, nonces) following `choices` at its branching points and the
/// first envelope after them; returns what was in flight at each branching point, and the report.
/// The statelessness re-run is not part of it (one execution, one schedule).
fn run_choices(
    prepared: &Prepared<'_>,
    server: &ServerUnderTest,
    seed: u64,
    faults: Option<&[Fault]>,
    choices: &[u32],
    record_transcript: bool,
) -> Execution {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (recorder, prefix) = (seen.clone(), choices.to_vec());
    let build = CustomScheduler(Arc::new(move || -> Box<dyn Scheduler> {
        Box::new(PrefixScheduler { prefix: prefix.clone(), position: 0, seen: recorder.clone() })
    }));
    let options = RunOptions {
        record_transcript,
        check_statelessness: false,
        scheduler: SchedulerChoice::Custom(build),
        faults: faults.map(<[Fault]>::to_vec),
        ..RunOptions::seeded(seed).with_server(server)
    };
    let report = runner::run_prepared(prepared, &options);
    let trace = std::mem::take(&mut *seen.lock().expect("the run is over"));
    (trace, report)
}

// Shrinking a failing order is `mcpsim explore --exhaustive`'s (the `cli` feature).
/// Runs a schedule given by its choices at branching points (see `run_choices`), with a transcript.
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub fn run_schedule(
    scenario: &Scenario,
    server: impl Into<ServerUnderTest>,
    seed: u64,
    faults: Option<&[Fault]>,
    choices: &[u32],
) -> RunReport {
    run_choices(&Prepared::new(scenario), &server.into(), seed, faults, choices, true).1
}

/// The choices at branching points a recorded run made.
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub fn choices_of(report: &RunReport) -> Vec<u32> {
    report.decisions.decisions.iter().filter(|d| d.options > 1).map(|d| d.chosen).collect()
}

/// Most executions one shrink runs.
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub const SHRINK_EXECUTIONS_MAX: usize = 2_000;

/// Delta debugging on a failing schedule: makes as many choices as possible the default (the first envelope
/// in flight), in halving chunks then one at a time, and drops the trailing defaults, keeping every step
/// that still breaks `property`. Returns the smallest schedule found.
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub fn shrink(
    scenario: &Scenario,
    server: impl Into<ServerUnderTest>,
    seed: u64,
    faults: Option<&[Fault]>,
    choices: &[u32],
    target: Breaks,
) -> Vec<u32> {
    let server = server.into();
    let prepared = Prepared::new(scenario);
    let breaks = |candidate: &[u32]| {
        let (_, report) = run_choices(&prepared, &server, seed, faults, candidate, false);
        target.in_failures(&report.failures)
    };
    let mut current = choices.to_vec();
    let mut executions = 0;
    let mut chunk = current.len().div_ceil(2).max(1);
    loop {
        let mut changed = false;
        let mut start = 0;
        while start < current.len() && executions < SHRINK_EXECUTIONS_MAX {
            let end = (start + chunk).min(current.len());
            if current[start..end].iter().any(|c| *c != 0) {
                let mut candidate = current.clone();
                candidate[start..end].iter_mut().for_each(|c| *c = 0);
                executions += 1;
                if breaks(&candidate) {
                    current = candidate;
                    changed = true;
                }
            }
            start = end;
        }
        if (chunk == 1 && !changed) || executions >= SHRINK_EXECUTIONS_MAX {
            break;
        }
        chunk = (chunk / 2).max(1);
    }
    while current.last() == Some(&0) {
        current.pop();
    }
    current
}

impl Search<'_> {
    fn execute(&mut self, prefix: &[u32]) -> Execution {
        self.result.executions += 1;
        run_choices(&self.prepared, &self.server, 1, None, prefix, false)
    }

    fn visit(&mut self, prefix: Vec<u32>, sleep: Vec<Transition>, known: Option<Execution>) {
        if known.is_none() && self.result.executions >= EXHAUSTIVE_EXECUTIONS_MAX {
            self.result.truncated = true;
            return;
        }
        let (trace, report) = known.unwrap_or_else(|| self.execute(&prefix));
        let Some(ready) = trace.get(prefix.len()).cloned() else {
            self.leaf(prefix, &report);
            return;
        };
        let mut sleep = sleep;
        let mut first_run = Some((trace, report));
        for (index, transition) in ready.iter().enumerate() {
            let reusable = first_run.take();
            if self.reduce && sleep.iter().any(|asleep| asleep.0 == transition.0) {
                continue;
            }
            let child_sleep: Vec<Transition> =
                sleep.iter().filter(|_| self.reduce).filter(|asleep| asleep.1 != transition.1).copied().collect();
            let mut child = prefix.clone();
            child.push(index as u32);
            // The node's own run chose the first envelope from here on: it is the first child's run.
            self.visit(child, child_sleep, if index == 0 { reusable } else { None });
            sleep.push(*transition);
        }
    }

    fn leaf(&mut self, choices: Vec<u32>, report: &RunReport) {
        self.result.schedules += 1;
        let mut state: Vec<String> = report.history.operations().iter().map(|op| format!("{}: {}", op.client, op.describe())).collect();
        state.extend(report.history.effects().iter().filter_map(|effect| match &effect.kind {
            EffectKind::NoteDeleted { note, .. } => Some(format!("deleted {}", note.id)),
            _ => None,
        }));
        self.end_states.insert(state.join("\n"));
        let broke_property = report.failures.iter().any(|f| matches!(f.kind, FailureKind::Property(_)));
        // Counted wherever one failed, also beside a broken property: the count agrees with the failures listed.
        if report.failures.iter().any(|f| !matches!(f.kind, FailureKind::Property(_))) {
            self.result.expectation_runs += 1;
        }
        if broke_property {
            self.result.unsafe_runs += 1;
            self.result.first_unsafe.get_or_insert((choices, report.failures.clone()));
        } else if !report.failures.is_empty() {
            self.result.first_expectation.get_or_insert((choices, report.failures.clone()));
        }
    }
}

/// Visits every delivery order of `scenario`'s concurrent parts, up to commuting independent deliveries.
pub fn explore_exhaustively(scenario: &Scenario, server: impl Into<ServerUnderTest>) -> Exhaustive {
    search(scenario, server.into(), true)
}

/// Every delivery order, without the reduction: to show the reduction keeps every end state.
pub fn explore_every_order(scenario: &Scenario, server: impl Into<ServerUnderTest>) -> Exhaustive {
    search(scenario, server.into(), false)
}

fn search(scenario: &Scenario, server: ServerUnderTest, reduce: bool) -> Exhaustive {
    let mut search =
        Search { prepared: Prepared::new(scenario), server, result: Exhaustive::default(), end_states: BTreeSet::new(), reduce };
    search.visit(Vec::new(), Vec::new(), None);
    search.result.end_states = search.end_states.len();
    search.result
}

/// What a counterexample breaks, and is shrunk to keep breaking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub enum Breaks {
    Property(Property),
    /// The expectation on this line of the scenario (a run that broke no property).
    Expectation(usize),
}

#[cfg_attr(not(feature = "cli"), allow(dead_code))]
impl Breaks {
    /// What to shrink toward in a failed run: the first property it broke, else its first failed expectation.
    pub fn of(failures: &[Failure]) -> Option<Breaks> {
        let property = failures.iter().find_map(|f| match f.kind {
            FailureKind::Property(property) => Some(Breaks::Property(property)),
            _ => None,
        });
        property.or_else(|| failures.iter().find(|f| f.kind == FailureKind::Expectation).map(|f| Breaks::Expectation(f.line)))
    }

    pub fn in_failures(&self, failures: &[Failure]) -> bool {
        failures.iter().any(|f| match *self {
            Breaks::Property(property) => f.kind == FailureKind::Property(property),
            Breaks::Expectation(line) => f.kind == FailureKind::Expectation && f.line == line,
        })
    }

    pub fn describe(&self) -> String {
        match self {
            Breaks::Property(property) => format!("property {} broken", property.as_str()),
            Breaks::Expectation(line) => format!("expectation at line {line} failed"),
        }
    }

    pub(crate) fn label(&self) -> String {
        match self {
            Breaks::Property(property) => property.as_str().to_string(),
            Breaks::Expectation(line) => format!("expectation at line {line}"),
        }
    }
}
