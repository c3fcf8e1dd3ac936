//! Reproducer files: a shrunk counterexample, written to disk by `mcpsim explore` and run again, byte for
//! byte, by `mcpsim replay FILE`.
//!
//! A reproducer carries everything a run depends on: the scenario's text (not a path that may change),
//! the mutant (if any), the seed (latencies and nonces), whether faults were on, and the full decision log
//! (every choice, and every fault where it fired), replayed strictly.

use crate::scenario::{self, Scenario};
use crate::sim::actors::instance::notes_server_factory;
use crate::sim::engine::faults::Fault;
use crate::sim::engine::scheduler::DecisionLog;
pub use crate::sim::explore::exhaustive::Breaks;
use crate::sim::explore::exhaustive::{choices_of, run_schedule, shrink};
use crate::sim::explore::mutants;
use crate::sim::runner::{self, Prepared, RunOptions, RunReport, SchedulerChoice, ServerUnderTest};
use serde::{Deserialize, Serialize};

pub const REPRODUCER_FORMAT: &str = "mcpsim-reproducer/3";
/// Largest reproducer file read.
pub const REPRODUCER_BYTES_MAX: usize = 4 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Reproducer {
    pub format: String,
    pub scenario_name: String,
    pub scenario_text: String,
    pub mutant: Option<String>,
    pub seed: u64,
    /// What the run breaks: a property's name, or `expectation at line N`.
    pub breaks: String,
    /// Choices at branching points (0 = the first envelope in flight), after shrinking.
    pub choices: Vec<u32>,
    /// Whether faults were on (clients retry, liveness is judged); the faults themselves, after shrinking,
    /// are in `decisions.faults`.
    pub faults_on: bool,
    pub decisions: DecisionLog,
}

/// Why a reproducer file cannot be read or run.
#[derive(Debug, thiserror::Error)]
pub enum ReproducerError {
    #[error("a reproducer is at most {REPRODUCER_BYTES_MAX} bytes")]
    TooLarge,
    /// Written by another mcpsim version (`format`, the one it names).
    #[error(
        "format {format:?} is not {REPRODUCER_FORMAT:?}: it was written by another mcpsim version; run the exploration again to get a new one"
    )]
    OtherFormat { format: String },
    #[error("not a reproducer file: {0}")]
    NotAReproducer(serde_json::Error),
    /// The scenario text it carries does not parse.
    #[error(transparent)]
    Scenario(#[from] scenario::ParseError),
    #[error("no mutant is named {0:?}")]
    NoMutant(String),
}

fn server_for(mutant: Option<&str>) -> Result<ServerUnderTest, ReproducerError> {
    match mutant {
        None => Ok(ServerUnderTest::from(&notes_server_factory())),
        Some(name) => mutants::find(name).map(|m| m.server()).ok_or_else(|| ReproducerError::NoMutant(name.to_string())),
    }
}

impl Reproducer {
    /// Shrinks the run of `seed` that broke `property` (with `faults` on and that plan, if given), and
    /// records the smallest failing schedule. `None` if the seed's run, without the statelessness re-run,
    /// does not break it.
    pub fn shrunk(
        scenario: &Scenario,
        text: &str,
        mutant: Option<&str>,
        seed: u64,
        faults: Option<&[Fault]>,
        breaks: Breaks,
    ) -> Option<Reproducer> {
        let server = server_for(mutant).ok()?;
        let prepared = Prepared::new(scenario);
        let fails = |faults: Option<&[Fault]>| {
            let options = RunOptions {
                record_transcript: false,
                check_statelessness: false,
                faults: faults.map(<[Fault]>::to_vec),
                ..RunOptions::seeded(seed).with_server(&server)
            };
            let report = runner::run_prepared(&prepared, &options);
            breaks.in_failures(&report.failures).then_some(report)
        };
        fails(faults)?;
        // The fault plan shrinks first, one fault at a time: a fault the violation does not need is not
        // shown (the faults that fired stay in plan order, so the rest keep their delivery points).
        let mut plan: Option<Vec<Fault>> = faults.map(<[Fault]>::to_vec);
        if let Some(faults) = &mut plan {
            let mut index = 0;
            while index < faults.len() {
                let mut fewer = faults.clone();
                fewer.remove(index);
                if fails(Some(&fewer)).is_some() {
                    *faults = fewer;
                } else {
                    index += 1;
                }
            }
        }
        let original = fails(plan.as_deref())?;
        let choices = shrink(scenario, &server, seed, plan.as_deref(), &choices_of(&original), breaks);
        let decisions = run_schedule(scenario, &server, seed, plan.as_deref(), &choices).decisions;
        Some(Reproducer {
            format: REPRODUCER_FORMAT.into(),
            scenario_name: scenario.name.clone(),
            scenario_text: text.to_string(),
            mutant: mutant.map(str::to_string),
            seed,
            breaks: breaks.label(),
            choices,
            faults_on: plan.is_some(),
            decisions,
        })
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a reproducer serializes") + "\n"
    }

    pub fn from_json(text: &str) -> Result<Reproducer, ReproducerError> {
        if text.len() > REPRODUCER_BYTES_MAX {
            return Err(ReproducerError::TooLarge);
        }
        let format = serde_json::from_str::<serde_json::Value>(text)
            .ok()
            .and_then(|v| v.get("format").and_then(serde_json::Value::as_str).map(str::to_string));
        if let Some(format) = format.filter(|f| f != REPRODUCER_FORMAT) {
            return Err(ReproducerError::OtherFormat { format });
        }
        let reproducer: Reproducer = serde_json::from_str(text).map_err(ReproducerError::NotAReproducer)?;
        Ok(reproducer)
    }

    /// Runs the recorded schedule again, strictly (a divergence is a failure of its own), with a transcript.
    pub fn replay(&self) -> Result<RunReport, ReproducerError> {
        let scenario = scenario::parse("reproducer", &self.scenario_name, &self.scenario_text)?;
        let server = server_for(self.mutant.as_deref())?;
        let options = RunOptions {
            record_transcript: true,
            check_statelessness: false,
            scheduler: SchedulerChoice::Replay(self.decisions.clone()),
            faults: self.faults_on.then(|| self.decisions.faults.clone()),
            ..RunOptions::seeded(self.seed).with_server(&server)
        };
        Ok(runner::run(&scenario, &options))
    }
}
