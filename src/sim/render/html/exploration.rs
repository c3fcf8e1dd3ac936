//! The page of an exploration: what every seed came to (outcome classes, each with an example run), the
//! shrunk counterexample when one exists, and the coverage (what the faults and schedules reached).

use super::Shell;
use crate::sim::engine::faults::FaultKind;
use crate::sim::explore::coverage::Coverage;
use crate::sim::explore::Exploration;
use askama::Template;
use std::collections::BTreeMap;

/// The page of an example run, by seed.
pub struct ExampleRun {
    pub seed: u64,
    /// Its address, relative to the exploration's page.
    pub href: String,
}

/// The shrunk counterexample's page.
pub struct CounterexampleLink {
    pub href: String,
    /// The property broken and how small the schedule got, in a sentence.
    pub summary: String,
    /// The command that replays it byte for byte.
    pub replay: String,
}

pub struct ExplorationInput<'a> {
    pub scenario: &'a str,
    /// What ran: `the real server`, `mutant NAME`.
    pub server: &'a str,
    pub faults_on: &'a [FaultKind],
    pub first_seed: u64,
    pub last_seed: u64,
    pub exploration: &'a Exploration,
    pub coverage: &'a Coverage,
    /// Example runs written beside the page.
    pub examples: &'a [ExampleRun],
    pub counterexample: Option<CounterexampleLink>,
    /// The command that runs this exploration again.
    pub reproduce: &'a str,
}

struct ClassRow {
    verdict: String,
    held: bool,
    answers: Vec<String>,
    runs: u64,
    percent: String,
    example_seed: u64,
    href: Option<String>,
}

struct FaultRow {
    kind: &'static str,
    meaning: &'static str,
    fired: u64,
    runs: u64,
}

struct CountRow {
    name: String,
    times: u64,
    runs: u64,
}

struct StepRow {
    number: usize,
    line: usize,
    text: String,
    raced_runs: u64,
    parallel: bool,
}

#[derive(Template)]
#[template(path = "exploration.html")]
struct ExplorationTemplate<'a> {
    shell: Shell,
    scenario: &'a str,
    server: &'a str,
    faults_on: String,
    first_seed: u64,
    last_seed: u64,
    reproduce: &'a str,
    schedules: u64,
    deliveries: u64,
    unsafe_runs: u64,
    not_live_runs: u64,
    crashed_runs: u64,
    faulty: bool,
    held: bool,
    classes: Vec<ClassRow>,
    classes_total: usize,
    counterexample: Option<CounterexampleLink>,
    faults: Vec<FaultRow>,
    never_fired: Vec<&'static str>,
    reasons: Vec<CountRow>,
    outcomes: Vec<CountRow>,
    delivery_orders: usize,
    end_states: usize,
    steps: Vec<StepRow>,
    never_raced: Vec<usize>,
}

/// The page of an exploration.
pub fn exploration_page(input: &ExplorationInput<'_>) -> String {
    let coverage = input.coverage;
    let exploration = input.exploration;
    let examples: BTreeMap<u64, &str> = input.examples.iter().map(|e| (e.seed, e.href.as_str())).collect();
    let runs = coverage.runs.max(1);
    let classes = coverage
        .classes_by_frequency()
        .into_iter()
        .map(|(key, class)| ClassRow {
            verdict: key.verdict.clone(),
            held: key.verdict == "held",
            answers: key.answers.clone(),
            runs: class.runs,
            percent: format!("{:.1}%", class.runs as f64 * 100.0 / runs as f64),
            example_seed: class.example_seed,
            href: examples.get(&class.example_seed).map(|href| href.to_string()),
        })
        .collect::<Vec<_>>();
    let counts = |map: &BTreeMap<String, crate::sim::explore::coverage::Reached>| -> Vec<CountRow> {
        map.iter().map(|(name, r)| CountRow { name: name.clone(), times: r.times, runs: r.runs }).collect()
    };
    let steps: Vec<StepRow> = coverage
        .steps
        .iter()
        .map(|(number, step)| StepRow {
            number: *number,
            line: step.line,
            text: step.text.clone(),
            raced_runs: step.raced_runs,
            parallel: step.text.starts_with("parallel"),
        })
        .collect();
    let never_raced = steps.iter().filter(|s| s.parallel && s.raced_runs == 0).map(|s| s.number).collect();
    let faults_on = if input.faults_on.is_empty() {
        "none".to_string()
    } else {
        input.faults_on.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ")
    };
    let page = ExplorationTemplate {
        shell: Shell::new(format!("mcpsim: exploring {}", input.scenario), None),
        scenario: input.scenario,
        server: input.server,
        faults_on,
        first_seed: input.first_seed,
        last_seed: input.last_seed,
        reproduce: input.reproduce,
        schedules: exploration.schedules,
        deliveries: exploration.deliveries,
        unsafe_runs: exploration.unsafe_runs,
        not_live_runs: exploration.not_live_runs,
        crashed_runs: exploration.crashed_runs,
        faulty: !input.faults_on.is_empty(),
        held: exploration.unsafe_runs == 0 && exploration.not_live_runs == 0 && exploration.crashed_runs == 0,
        classes_total: classes.len(),
        classes,
        counterexample: input.counterexample.as_ref().map(|c| CounterexampleLink {
            href: c.href.clone(),
            summary: c.summary.clone(),
            replay: c.replay.clone(),
        }),
        faults: coverage
            .faults
            .iter()
            .map(|(kind, r)| FaultRow { kind: kind.as_str(), meaning: kind.meaning(), fired: r.times, runs: r.runs })
            .collect(),
        never_fired: coverage.faults_never_fired().into_iter().map(FaultKind::as_str).collect(),
        reasons: counts(&coverage.reasons),
        outcomes: counts(&coverage.outcomes),
        delivery_orders: coverage.delivery_orders.len(),
        end_states: coverage.end_states.len(),
        steps,
        never_raced,
    };
    page.render().expect("the exploration page renders")
}
