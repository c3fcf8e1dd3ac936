//! The library's face for embedding mcpsim in your own tests: load a scenario, run it or explore it, and
//! assert on what came back. Everything here is re-exported at the crate root; see the crate docs.

use crate::oracle::check::Property;
use crate::play::{Failure, FailureKind};
use crate::scenario::{self, ParseError, Scenario};
use crate::sim::engine::faults::FaultKind;
use crate::sim::explore::mutants::{self, Mutant};
use crate::sim::explore::{self, Exploration};
use crate::sim::library;
use crate::sim::render::transcript::Format;
use crate::sim::runner::{self, RunOptions, RunReport, SchedulerChoice, ServerUnderTest};
use std::ops::RangeInclusive;
use std::path::Path;

/// Why a scenario could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error(transparent)]
    Parse(#[from] ParseError),
    #[error("no library scenario is named {0:?}; the library: {1}")]
    NotInLibrary(String, String),
}

/// Parses a scenario from text. `origin` names it in errors and in reproduce commands: give the path you
/// would save it under (`tests/retry.sim`).
pub fn parse(origin: &str, text: &str) -> Result<Scenario, ParseError> {
    let stem = Path::new(origin).file_stem().and_then(|s| s.to_str()).unwrap_or(origin);
    scenario::parse(origin, stem, text)
}

/// Reads and parses a scenario file.
pub fn load(path: impl AsRef<Path>) -> Result<Scenario, LoadError> {
    let path = path.as_ref();
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read { path: shown.clone(), source })?;
    Ok(parse(&shown, &text)?)
}

/// A scenario of the embedded library (`04-accepts-race-for-one-note`, with or without `.sim`), or of the
/// mutant zoo (`zoo-move-races-the-accept`).
pub fn library(name: &str) -> Result<Scenario, LoadError> {
    mutants::scenario_named(name).ok_or_else(|| {
        let names: Vec<&str> = library::SCENARIOS.iter().map(|(f, _)| f.trim_end_matches(".sim")).collect();
        LoadError::NotInLibrary(name.to_string(), names.join(", "))
    })
}

/// Which scheduler picks the next delivery.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Scheduler {
    /// A seeded uniform choice among the envelopes in flight (the default: each seed is an interleaving).
    #[default]
    Random,
    /// Earliest arrival first: the network's own order, the same for every seed.
    Scripted,
}

/// How to run: the seed, the faults, the scheduler, and what the instances run.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub seed: u64,
    /// Fault kinds drawn from the seed (crashes, drops, duplicates, delays, slow stores, skew, rotations);
    /// with faults on, clients retry what gets lost and liveness is judged, expectations are not.
    pub faults: Vec<FaultKind>,
    pub scheduler: Scheduler,
    /// A mutant of the zoo instead of the real servers (`mcpsim mutants` lists them).
    pub mutant: Option<&'static str>,
}

impl Options {
    /// The real servers under `seed`, no faults, the random scheduler.
    pub fn seed(seed: u64) -> Options {
        Options { seed, ..Options::default() }
    }

    pub fn faults(mut self, faults: &[FaultKind]) -> Options {
        self.faults = faults.to_vec();
        self
    }

    pub fn scheduler(mut self, scheduler: Scheduler) -> Options {
        self.scheduler = scheduler;
        self
    }

    /// Runs the zoo's `name` instead of the real servers. Panics on a name that is not in the zoo, as a
    /// test author wants it to.
    #[track_caller]
    pub fn mutant(mut self, name: &str) -> Options {
        let mutant = mutants::find(name).unwrap_or_else(|| {
            let names: Vec<&str> = mutants::MUTANTS.iter().map(|m| m.name).collect();
            panic!("no mutant is named {name:?}; the zoo: {}", names.join(", "))
        });
        self.mutant = Some(mutant.name);
        self
    }

    fn server(&self) -> ServerUnderTest {
        self.mutant
            .and_then(mutants::find)
            .map(Mutant::server)
            .unwrap_or_else(|| ServerUnderTest::from(&crate::sim::actors::instance::notes_server_factory()))
    }

    /// The flags `mcpsim run` needs to repeat a run under these options, after the file and the seed.
    fn flags(&self) -> String {
        runner::reproduce_flags(self.scheduler == Scheduler::Scripted, &self.faults, self.mutant)
    }

    fn run_options(&self, scenario: &Scenario, seed: u64) -> RunOptions {
        let server = self.server();
        let mut options = RunOptions { check_determinism: true, ..RunOptions::seeded(seed).with_server(&server) };
        options.scheduler = match self.scheduler {
            Scheduler::Random => SchedulerChoice::Random,
            Scheduler::Scripted => SchedulerChoice::Scripted,
        };
        if !self.faults.is_empty() {
            options.faults = Some(explore::fault_plan(scenario, seed, &self.faults));
            options.check_statelessness = false;
        }
        options
    }
}

/// The one-line command that repeats `origin`'s run under `seed` and `flags`.
fn reproduce(origin: &str, seed: u64, flags: &str) -> String {
    format!("mcpsim run {origin} --seed {seed}{flags}")
}

/// Runs `scenario` once: every expectation and every property of `GUARANTEES.md` §4 judged.
pub fn run(scenario: &Scenario, options: &Options) -> Report {
    let report = runner::run(scenario, &options.run_options(scenario, options.seed));
    Report { report, origin: scenario.origin.clone(), flags: options.flags() }
}

/// What one run showed.
pub struct Report {
    report: RunReport,
    origin: String,
    flags: String,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.report.passed()
    }

    /// Every expectation that failed, step that could not run and property broken, in order.
    pub fn failures(&self) -> &[Failure] {
        &self.report.failures
    }

    /// The properties this run broke.
    pub fn properties_broken(&self) -> Vec<Property> {
        self.report.failures.iter().filter_map(|f| if let FailureKind::Property(p) = f.kind { Some(p) } else { None }).collect()
    }

    /// The transcript as text (`Format::Jsonl`, `Format::Mermaid` and `Format::McpTrace` through [`Report::render`]).
    pub fn transcript(&self) -> String {
        self.report.transcript.render(Format::Text)
    }

    pub fn render(&self, format: Format) -> String {
        self.report.transcript.render(format)
    }

    /// The command that repeats this run byte for byte.
    pub fn reproduce(&self) -> String {
        reproduce(&self.origin, self.report.seed, &self.flags)
    }

    /// The full report behind this view (history, decisions, transcript).
    pub fn details(&self) -> &RunReport {
        &self.report
    }

    /// Panics unless the run passed, naming each failing step and printing the command that reproduces it.
    #[track_caller]
    pub fn assert_passed(&self) {
        if self.passed() {
            return;
        }
        let failures: Vec<String> = self.report.failures.iter().map(|f| format!("  {}", f.to_string().replace('\n', "\n  "))).collect();
        panic!(
            "scenario {} failed under seed {}:\n{}\nreproduce: {}",
            self.report.scenario,
            self.report.seed,
            failures.join("\n"),
            self.reproduce()
        );
    }
}

/// Runs `scenario` under every seed of `seeds` (each an interleaving, and with faults a fault plan) on
/// `jobs` threads; the answer is the same for any number of jobs.
pub fn explore(scenario: &Scenario, options: &Options, seeds: RangeInclusive<u64>, jobs: usize) -> Explored {
    let exploration = explore::explore(scenario, options.server(), seeds, jobs, &options.faults, &|_, _| {});
    Explored { exploration, origin: scenario.origin.clone(), flags: options.flags() }
}

/// What an exploration found.
pub struct Explored {
    pub exploration: Exploration,
    origin: String,
    flags: String,
}

impl Explored {
    /// Whether every seed held (no property broken, no expectation failed without faults, nothing crashed).
    pub fn clean(&self) -> bool {
        let e = &self.exploration;
        e.unsafe_runs == 0 && e.not_live_runs == 0 && e.crashed_runs == 0
    }

    /// The lowest failing seed and the command that reproduces it, if any seed failed.
    pub fn first_failure(&self) -> Option<(u64, String)> {
        let e = &self.exploration;
        let seed = [e.first_unsafe.as_ref().map(|f| f.0), e.first_not_live.as_ref().map(|f| f.0), e.first_crash.as_ref().map(|f| f.0)]
            .into_iter()
            .flatten()
            .min()?;
        Some((seed, reproduce(&self.origin, seed, &self.flags)))
    }

    /// Panics unless every seed held, naming what failed first and how to reproduce it.
    #[track_caller]
    pub fn assert_clean(&self) {
        let Some((seed, command)) = self.first_failure() else { return };
        let e = &self.exploration;
        let what = match (&e.first_unsafe, &e.first_not_live, &e.first_crash) {
            (Some((s, failures)), _, _) if *s == seed => failures.iter().map(|f| f.to_string()).collect::<Vec<_>>().join("\n  "),
            (_, Some((s, failures)), _) if *s == seed => failures.iter().map(|f| f.to_string()).collect::<Vec<_>>().join("\n  "),
            (_, _, Some((_, message))) => format!("the simulator crashed: {message}"),
            _ => String::new(),
        };
        panic!(
            "{} of {} schedules failed ({} unsafe, {} not live, {} crashed); first under seed {seed}:\n  {what}\nreproduce: {command}",
            e.unsafe_runs + e.not_live_runs + e.crashed_runs,
            e.schedules,
            e.unsafe_runs,
            e.not_live_runs,
            e.crashed_runs
        );
    }
}
