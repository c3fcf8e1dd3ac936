//! Exploration: one scenario under many seeds, each seed a different interleaving of its parallel blocks,
//! every run judged by the expectations and the safety properties.
//!
//! Runs are independent and deterministic, so they can be spread over threads: seeds are cut into
//! contiguous chunks, each thread runs its chunk, and the results are merged in seed order. The answer
//! (counts, the first violating seed) is therefore the same for any number of jobs.

use super::check::Property;
use super::cluster::PlannedCrash;
use super::random::{self, Stream};
use super::runner::{self, Failure, FailureKind, RunOptions, ServerUnderTest};
use super::scenario::Scenario;
use std::ops::RangeInclusive;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};

/// Most seeds one exploration runs.
pub const EXPLORE_SEEDS_MAX: u64 = 10_000_000;
/// Most threads one exploration uses.
pub const JOBS_MAX: usize = 64;

/// How one seed went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeedOutcome {
    Held,
    /// A safety property broke (expectation failures may come with it).
    Unsafe(Vec<Failure>),
    /// Only expectations failed: the outcomes the scenario promises did not all come about.
    ExpectationFailed(Vec<Failure>),
    /// The simulator itself panicked.
    Crashed(String),
}

/// What an exploration found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Exploration {
    pub schedules: u64,
    pub deliveries: u64,
    pub unsafe_runs: u64,
    pub expectation_runs: u64,
    pub crashed_runs: u64,
    /// The lowest seed that broke a safety property, and its failures.
    pub first_unsafe: Option<(u64, Vec<Failure>)>,
    /// The lowest seed whose expectations failed without a property breaking.
    pub first_expectation: Option<(u64, Vec<Failure>)>,
    pub first_crash: Option<(u64, String)>,
    /// Every property broken in some run.
    pub properties_broken: Vec<Property>,
}

impl Exploration {
    fn add(&mut self, seed: u64, deliveries: usize, outcome: SeedOutcome) {
        self.schedules += 1;
        self.deliveries += deliveries as u64;
        match outcome {
            SeedOutcome::Held => {}
            SeedOutcome::Unsafe(failures) => {
                self.unsafe_runs += 1;
                for failure in &failures {
                    if let FailureKind::Property(property) = failure.kind {
                        if !self.properties_broken.contains(&property) {
                            self.properties_broken.push(property);
                            self.properties_broken.sort();
                        }
                    }
                }
                if self.first_unsafe.is_none() {
                    self.first_unsafe = Some((seed, failures));
                }
            }
            SeedOutcome::ExpectationFailed(failures) => {
                self.expectation_runs += 1;
                if self.first_expectation.is_none() {
                    self.first_expectation = Some((seed, failures));
                }
            }
            SeedOutcome::Crashed(message) => {
                self.crashed_runs += 1;
                if self.first_crash.is_none() {
                    self.first_crash = Some((seed, message));
                }
            }
        }
    }
}

/// Deliveries within which a planned crash falls (the scenarios' runs are a few dozen deliveries long).
pub const FAULT_DELIVERY_WINDOW: u64 = 40;

/// The fault plan of `seed`: with even odds, one instance crashes (and restarts at once) before a delivery
/// drawn from the first [`FAULT_DELIVERY_WINDOW`] — anywhere, including between a nonce claim and its answer.
pub fn fault_plan(seed: u64, instances: usize) -> Vec<PlannedCrash> {
    if instances == 0 {
        return Vec::new();
    }
    let mut rng = random::stream(seed, Stream::Faults);
    if random::below(&mut rng, 2) == 0 {
        return Vec::new();
    }
    let before_delivery = 1 + random::below(&mut rng, FAULT_DELIVERY_WINDOW) as usize;
    let instance = random::below(&mut rng, instances as u64) as usize;
    vec![PlannedCrash { before_delivery, instance }]
}

/// Runs one seed (with its fault plan when `faults`), catching a simulator panic as an outcome of its own.
/// Under faults a client may get no answer, so only safety is judged: expectations are not.
pub fn run_seed_with(scenario: &Scenario, server: impl Into<ServerUnderTest>, seed: u64, faults: bool) -> (usize, SeedOutcome) {
    let server = server.into();
    let crashes = if faults { fault_plan(seed, scenario.cluster.instances.len()) } else { Vec::new() };
    let options = RunOptions {
        record_transcript: false,
        factory: server.factory,
        gateway_variant: server.gateway_variant,
        check_statelessness: !faults,
        crashes,
        ..RunOptions::seeded(seed)
    };
    let (deliveries, outcome) = run_options(scenario, &options);
    match outcome {
        SeedOutcome::ExpectationFailed(_) if faults => (deliveries, SeedOutcome::Held),
        SeedOutcome::Unsafe(failures) if faults => {
            (deliveries, SeedOutcome::Unsafe(failures.into_iter().filter(|f| matches!(f.kind, FailureKind::Property(_))).collect()))
        }
        outcome => (deliveries, outcome),
    }
}

/// Runs one seed, catching a simulator panic as an outcome of its own.
pub fn run_seed(scenario: &Scenario, server: impl Into<ServerUnderTest>, seed: u64) -> (usize, SeedOutcome) {
    run_seed_with(scenario, server, seed, false)
}

fn run_options(scenario: &Scenario, options: &RunOptions) -> (usize, SeedOutcome) {
    match panic::catch_unwind(AssertUnwindSafe(|| runner::run(scenario, options))) {
        Ok(report) => {
            let outcome = if report.failures.is_empty() {
                SeedOutcome::Held
            } else if report.failures.iter().any(|f| matches!(f.kind, FailureKind::Property(_))) {
                SeedOutcome::Unsafe(report.failures)
            } else {
                SeedOutcome::ExpectationFailed(report.failures)
            };
            (report.deliveries, outcome)
        }
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic without a message".into());
            (0, SeedOutcome::Crashed(message))
        }
    }
}

/// Progress as runs finish: (schedules done, runs that broke a property so far). Called from any thread.
pub type Progress<'a> = &'a (dyn Fn(u64, u64) + Sync);

/// Explores `seeds` with `jobs` threads. `stop_at_first_unsafe` ends each thread's chunk at its first
/// violation (used to measure schedules to the first violation; the merged answer stays the lowest seed).
pub fn explore(
    scenario: &Scenario,
    server: impl Into<ServerUnderTest>,
    seeds: RangeInclusive<u64>,
    jobs: usize,
    faults: bool,
    progress: Progress<'_>,
) -> Exploration {
    let server = server.into();
    let (first, last) = (*seeds.start(), *seeds.end());
    if first > last {
        return Exploration::default();
    }
    let count = last - first + 1;
    let jobs = (jobs.clamp(1, JOBS_MAX) as u64).min(count);
    let done = AtomicU64::new(0);
    let unsafe_so_far = AtomicU64::new(0);
    let chunk = count.div_ceil(jobs);
    let run_chunk = |start: u64, end: u64| -> Vec<(u64, usize, SeedOutcome)> {
        let mut results = Vec::new();
        for seed in start..=end {
            let (deliveries, outcome) = run_seed_with(scenario, &server, seed, faults);
            if matches!(outcome, SeedOutcome::Unsafe(_)) {
                unsafe_so_far.fetch_add(1, Ordering::Relaxed);
            }
            let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
            progress(finished, unsafe_so_far.load(Ordering::Relaxed));
            results.push((seed, deliveries, outcome));
        }
        results
    };
    let chunks: Vec<(u64, u64)> =
        (0..jobs).map(|j| first + j * chunk).filter(|start| *start <= last).map(|start| (start, (start + chunk - 1).min(last))).collect();
    let per_chunk: Vec<Vec<(u64, usize, SeedOutcome)>> = if chunks.len() == 1 {
        vec![run_chunk(chunks[0].0, chunks[0].1)]
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = chunks.iter().map(|&(start, end)| scope.spawn(move || run_chunk(start, end))).collect();
            handles.into_iter().map(|h| h.join().expect("each run catches its own panics")).collect()
        })
    };
    let mut exploration = Exploration::default();
    for (seed, deliveries, outcome) in per_chunk.into_iter().flatten() {
        exploration.add(seed, deliveries, outcome);
    }
    exploration
}

/// The first seed in `seeds` that breaks a safety property, searched in order, with the property broken.
pub fn first_violation(scenario: &Scenario, server: impl Into<ServerUnderTest>, seeds: RangeInclusive<u64>) -> Option<(u64, Vec<Failure>)> {
    let server = server.into();
    for seed in seeds {
        if let (_, SeedOutcome::Unsafe(failures)) = run_seed(scenario, &server, seed) {
            return Some((seed, failures));
        }
    }
    None
}

/// The first seed in `seeds` whose run fails at all (a property or an expectation), searched in order.
/// The gateway mutants are caught this way: the scenario's expectations state the defence they lack.
pub fn first_failure(scenario: &Scenario, server: impl Into<ServerUnderTest>, seeds: RangeInclusive<u64>) -> Option<(u64, Vec<Failure>)> {
    let server = server.into();
    for seed in seeds {
        if let (_, SeedOutcome::Unsafe(failures) | SeedOutcome::ExpectationFailed(failures)) = run_seed(scenario, &server, seed) {
            return Some((seed, failures));
        }
    }
    None
}
