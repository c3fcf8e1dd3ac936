//! Exploration: one scenario under many seeds, each seed a different interleaving of its parallel blocks
//! (and, with faults on, a different fault plan), every run judged by the properties and, without faults,
//! by the scenario's expectations.
//!
//! Runs are independent and deterministic, so they can be spread over threads: seeds are cut into blocks,
//! each thread takes the next block until none is left, and the results are merged in seed order. The
//! answer (counts, the first violating seed, the coverage) is therefore the same for any number of jobs.

pub mod coverage;
// `mcpsim explore --check-determinism` (the `cli` feature).
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub mod determinism;
pub mod exhaustive;
// `mcpsim merge --ledger` and `explore --ledger` (the `cli` feature).
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub mod ledger;
pub mod mutants;
// `mcpsim explore --save` and `run --replay` (the `cli` feature).
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub mod reproducer;
// `mcpsim explore --results` and `mcpsim merge` (the `cli` feature).
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub mod results;

use crate::oracle::check::Property;
use crate::scenario::Scenario;
use crate::sim::engine::faults::{self, Fault, FaultKind, PlanShape};
use crate::sim::runner::{self, Failure, FailureKind, Prepared, RunOptions, ServerUnderTest};
use crate::stores::memory::ReplayLimits;
use coverage::Coverage;
use results::Verdict;
use std::collections::BTreeMap;
use std::ops::{Range, RangeInclusive};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};

// `mcpsim explore`'s own bound and reports (the `cli` feature).
/// Most seeds one exploration runs.
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub const EXPLORE_SEEDS_MAX: u64 = 10_000_000;
/// Most threads one exploration uses.
pub(crate) const JOBS_MAX: usize = 64;
/// Seeds a thread takes at a time: few enough that threads finish together on a busy machine, enough that
/// taking a block costs nothing next to running it.
const SEEDS_PER_BLOCK: u64 = 32;

/// How one seed went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeedOutcome {
    Held,
    /// A safety property broke (other failures may come with it).
    Unsafe(Vec<Failure>),
    /// Nothing unsafe happened, but something promised did not come about: under faults, the liveness
    /// property; without faults, the scenario's own expectations.
    NotLive(Vec<Failure>),
    /// The simulator itself panicked.
    Crashed(String),
}

/// What an exploration found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Exploration {
    pub schedules: u64,
    pub deliveries: u64,
    pub unsafe_runs: u64,
    /// Runs where liveness (under faults) or the expectations (without) failed and no safety property did.
    pub not_live_runs: u64,
    /// Runs (without faults: with them expectations are not judged) in which an expectation failed or a step
    /// could not run, whether or not a property broke too; what the summary's "expectations failed" counts.
    pub expectation_runs: u64,
    pub crashed_runs: u64,
    /// The lowest seed that broke a safety property, and its failures.
    pub first_unsafe: Option<(u64, Vec<Failure>)>,
    /// The lowest seed that was not live (and broke no safety property).
    pub first_not_live: Option<(u64, Vec<Failure>)>,
    pub first_crash: Option<(u64, String)>,
    /// Every property broken in some run.
    pub properties_broken: Vec<Property>,
    /// Runs that broke each property (a run that broke two counts for both).
    pub failing_runs_by_property: BTreeMap<Property, u64>,
    /// The lowest failing seeds, up to `keep` per verdict and property broken (per verdict alone for the
    /// verdicts without one: expectations failed, crashed): a seed that broke two properties is kept under both,
    /// so the lowest failing seed of every property is among them. Each list is sorted by seed.
    pub failing: BTreeMap<(Verdict, Option<Property>), Vec<Failing>>,
    /// How many failing seeds `failing` keeps per key (0: none, the default; `explore --results` sets it).
    pub keep: usize,
}

/// A failing seed kept (`Exploration::failing`): its deliveries and its failures (a crash's message as one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failing {
    pub seed: u64,
    pub deliveries: u64,
    pub verdict: Verdict,
    pub failures: Vec<Failure>,
    /// The simulator's panic message, for a crash.
    pub crash: Option<String>,
}

impl Failing {
    /// The properties the run broke, sorted.
    pub fn properties(&self) -> Vec<Property> {
        let mut properties: Vec<Property> = self.failures.iter().filter_map(property_of).collect();
        properties.sort();
        properties.dedup();
        properties
    }
}

/// The verdict of a failing outcome (None: it held).
pub fn verdict_of(outcome: &SeedOutcome) -> Option<Verdict> {
    match outcome {
        SeedOutcome::Held => None,
        SeedOutcome::Unsafe(_) => Some(Verdict::Unsafe),
        SeedOutcome::NotLive(failures) if failures.iter().any(|f| property_of(f).is_some()) => Some(Verdict::NotLive),
        SeedOutcome::NotLive(_) => Some(Verdict::Expectations),
        SeedOutcome::Crashed(_) => Some(Verdict::Crashed),
    }
}

impl Exploration {
    /// An empty exploration that keeps up to `keep` failing seeds per verdict and property.
    pub fn keeping(keep: usize) -> Exploration {
        Exploration { keep, ..Exploration::default() }
    }

    /// Keeps a failing seed under each key it belongs to, if it is among the `keep` lowest there.
    fn keep_failing(&mut self, failing: Failing) {
        if self.keep == 0 {
            return;
        }
        let mut keys: Vec<Option<Property>> = failing.properties().into_iter().map(Some).collect();
        if keys.is_empty() {
            keys.push(None);
        }
        for key in keys {
            let kept = self.failing.entry((failing.verdict, key)).or_default();
            let place = kept.partition_point(|k| k.seed < failing.seed);
            if place < self.keep && kept.get(place).is_none_or(|k| k.seed != failing.seed) {
                kept.insert(place, failing.clone());
                kept.truncate(self.keep);
            }
        }
    }

    fn note_properties(&mut self, failures: &[Failure]) {
        failures.iter().filter_map(property_of).for_each(|property| self.note_property(property));
    }

    /// Adds `property` to the set broken, kept sorted.
    fn note_property(&mut self, property: Property) {
        if let Err(place) = self.properties_broken.binary_search(&property) {
            self.properties_broken.insert(place, property);
        }
    }

    pub(crate) fn add(&mut self, seed: u64, deliveries: usize, outcome: SeedOutcome) {
        self.schedules += 1;
        self.deliveries += deliveries as u64;
        if let Some(verdict) = verdict_of(&outcome) {
            let (failures, crash) = match &outcome {
                SeedOutcome::Unsafe(failures) | SeedOutcome::NotLive(failures) => (failures.clone(), None),
                SeedOutcome::Crashed(message) => (Vec::new(), Some(message.clone())),
                SeedOutcome::Held => (Vec::new(), None),
            };
            let failing = Failing { seed, deliveries: deliveries as u64, verdict, failures, crash };
            for property in failing.properties() {
                *self.failing_runs_by_property.entry(property).or_default() += 1;
            }
            self.keep_failing(failing);
        }
        if let SeedOutcome::Unsafe(failures) | SeedOutcome::NotLive(failures) = &outcome {
            if failures.iter().any(|f| property_of(f).is_none()) {
                self.expectation_runs += 1;
            }
        }
        match outcome {
            SeedOutcome::Held => {}
            SeedOutcome::Unsafe(failures) => {
                self.unsafe_runs += 1;
                self.note_properties(&failures);
                keep_lowest(&mut self.first_unsafe, (seed, failures));
            }
            SeedOutcome::NotLive(failures) => {
                self.note_properties(&failures);
                self.not_live_runs += 1;
                keep_lowest(&mut self.first_not_live, (seed, failures));
            }
            SeedOutcome::Crashed(message) => {
                self.crashed_runs += 1;
                keep_lowest(&mut self.first_crash, (seed, message));
            }
        }
    }

    /// Adds what another part of the exploration found (other seeds): sums, the union of the properties, and
    /// the lowest example seeds, so the whole is the same however the seeds were split between threads.
    fn merge(&mut self, other: Exploration) {
        self.schedules += other.schedules;
        self.deliveries += other.deliveries;
        self.unsafe_runs += other.unsafe_runs;
        self.not_live_runs += other.not_live_runs;
        self.expectation_runs += other.expectation_runs;
        self.crashed_runs += other.crashed_runs;
        if let Some(example) = other.first_unsafe {
            keep_lowest(&mut self.first_unsafe, example);
        }
        if let Some(example) = other.first_not_live {
            keep_lowest(&mut self.first_not_live, example);
        }
        if let Some(example) = other.first_crash {
            keep_lowest(&mut self.first_crash, example);
        }
        other.properties_broken.into_iter().for_each(|property| self.note_property(property));
        for (property, runs) in other.failing_runs_by_property {
            *self.failing_runs_by_property.entry(property).or_default() += runs;
        }
        self.keep = self.keep.max(other.keep);
        for failing in other.failing.into_values().flatten() {
            self.keep_failing(failing);
        }
    }

    /// Every failing seed kept, once each, by seed.
    pub fn failing_seeds(&self) -> Vec<&Failing> {
        let mut seeds: Vec<&Failing> = self.failing.values().flatten().collect();
        seeds.sort_by_key(|f| f.seed);
        seeds.dedup_by_key(|f| f.seed);
        seeds
    }
}

/// The `index`-th (1-based) of `count` contiguous, near-equal slices of `0..len`: the first `len % count`
/// slices have `len / count + 1` elements, the others `len / count` (a slice may be empty). Every element is in
/// exactly one slice. `1 <= index <= count` is the caller's to check (`explore --shard` refuses anything else).
// `mcpsim explore --shard` (the `cli` feature).
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub fn slice(len: u64, index: u64, count: u64) -> Range<u64> {
    let count = count.max(1);
    let i = index.clamp(1, count) - 1;
    let (size, longer) = (len / count, len % count);
    let start = i * size + i.min(longer);
    start..start + size + u64::from(i < longer)
}

/// The `index`-th of `count` shards of `seeds` ([`slice`] of its offsets): the seeds stay those of the whole
/// run (shard 2/3 of 1..=9 is 4..=6). None: this shard's slice is empty.
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub fn shard(seeds: &RangeInclusive<u64>, index: u64, count: u64) -> Option<RangeInclusive<u64>> {
    let (first, last) = (*seeds.start(), *seeds.end());
    if first > last {
        return None;
    }
    // At most EXPLORE_SEEDS_MAX seeds reach here; saturate rather than wrap for the whole u64 range.
    let len = (last - first).saturating_add(1);
    let part = slice(len, index, count);
    (!part.is_empty()).then(|| first + part.start..=first + part.end - 1)
}

/// Keeps the example with the lower seed.
fn keep_lowest<T>(kept: &mut Option<(u64, T)>, candidate: (u64, T)) {
    if kept.as_ref().is_none_or(|(seed, _)| candidate.0 < *seed) {
        *kept = Some(candidate);
    }
}

/// The fault plan of `seed` for this scenario: the kinds turned on, drawn for its instances, with clock
/// skews within its replay store's grace period (the clock tolerance the design promises).
pub fn fault_plan(scenario: &Scenario, seed: u64, kinds: &[FaultKind]) -> Vec<Fault> {
    let grace_ms = scenario.cluster.replay_grace_ms.unwrap_or(ReplayLimits::default().retention_grace_ms);
    faults::plan(seed, kinds, PlanShape { instances: scenario.cluster.instances.len(), skew_ms_max: grace_ms })
}

/// Runs one seed (with faults on when `faults` is not empty: its fault plan, clients retrying), catching a
/// simulator panic as an outcome of its own. Under faults a client's flow may go another way than the
/// scenario wrote (a retry lands elsewhere, a state expires), so the properties are judged, not expectations.
pub fn run_seed_with(scenario: &Scenario, server: impl Into<ServerUnderTest>, seed: u64, faults: &[FaultKind]) -> (usize, SeedOutcome) {
    let (deliveries, outcome, _) = run_seed_covered(&Prepared::new(scenario), &server.into(), seed, faults, false);
    (deliveries, outcome)
}

/// [`run_seed_with`], and with `cover` what the run reached (its transcript is recorded for that).
fn run_seed_covered(
    prepared: &Prepared<'_>,
    server: &ServerUnderTest,
    seed: u64,
    faults: &[FaultKind],
    cover: bool,
) -> (usize, SeedOutcome, Option<coverage::RunCoverage>) {
    run_options(prepared, &seed_options(prepared.scenario(), server, seed, faults, cover), !faults.is_empty(), cover)
}

/// An exploration judges determinism on seed 1 and on every seed divisible by this (a second run of the seed
/// must match byte for byte): a server that is nondeterministic at all is caught at little cost.
pub const DETERMINISM_EVERY: u64 = 64;

/// The options an exploration runs `seed` with (statelessness compared only without faults).
fn seed_options(scenario: &Scenario, server: &ServerUnderTest, seed: u64, faults: &[FaultKind], record_transcript: bool) -> RunOptions {
    let faulty = !faults.is_empty();
    RunOptions {
        record_transcript,
        check_statelessness: !faulty,
        faults: faulty.then(|| fault_plan(scenario, seed, faults)),
        // Hunting a mutant, every seed is also run twice: a nondeterministic one may differ on any of them.
        check_determinism: seed == 1 || seed % DETERMINISM_EVERY == 0 || server.mutant.is_some(),
        ..RunOptions::seeded(seed).with_server(server)
    }
}

/// One seed of an exploration again, exactly as the exploration ran it, with its transcript (for a report).
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub fn run_report(scenario: &Scenario, server: impl Into<ServerUnderTest>, seed: u64, faults: &[FaultKind]) -> runner::RunReport {
    runner::run(scenario, &seed_options(scenario, &server.into(), seed, faults, true))
}

/// Runs one seed without faults, catching a simulator panic as an outcome of its own.
pub fn run_seed(scenario: &Scenario, server: impl Into<ServerUnderTest>, seed: u64) -> (usize, SeedOutcome) {
    run_seed_with(scenario, server, seed, &[])
}

/// The property a failure broke, if it is one.
/// The names of the properties `failures` broke, sorted by name, each once (what a verdict line lists).
pub(crate) fn broken_property_names(failures: &[Failure]) -> Vec<&'static str> {
    let mut names: Vec<&'static str> = failures.iter().filter_map(property_of).map(Property::as_str).collect();
    names.sort_unstable();
    names.dedup();
    names
}

fn property_of(failure: &Failure) -> Option<Property> {
    match failure.kind {
        FailureKind::Property(property) => Some(property),
        _ => None,
    }
}

fn run_options(
    prepared: &Prepared<'_>,
    options: &RunOptions,
    faulty: bool,
    cover: bool,
) -> (usize, SeedOutcome, Option<coverage::RunCoverage>) {
    match panic::catch_unwind(AssertUnwindSafe(|| runner::run_prepared(prepared, options))) {
        Ok(report) => {
            let outcome = seed_outcome(&report.failures, faulty);
            let covered = cover.then(|| coverage::of_run(&report, &outcome));
            (report.deliveries, outcome, covered)
        }
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic without a message".into());
            (0, SeedOutcome::Crashed(message), None)
        }
    }
}

/// How a run with these failures is classed. A stopped simulation is the simulator's failure, never a held run,
/// with faults or without; under faults only the properties are judged.
pub(crate) fn seed_outcome(failures: &[Failure], faulty: bool) -> SeedOutcome {
    if let Some(stopped) = failures.iter().find(|f| f.kind == FailureKind::Simulation) {
        return SeedOutcome::Crashed(stopped.to_string());
    }
    let mut failures = failures.to_vec();
    if faulty {
        // Under faults only the expectations marked `always` are judged: their failures count, and the steps a
        // fault kept from running as written do not.
        failures.retain(|f| property_of(f).is_some() || f.kind == FailureKind::Expectation);
    }
    if failures.is_empty() {
        SeedOutcome::Held
    } else if failures.iter().any(|f| property_of(f).is_some_and(Property::is_safety)) {
        SeedOutcome::Unsafe(failures)
    } else {
        SeedOutcome::NotLive(failures)
    }
}

/// Progress as runs finish: (schedules done, runs so far that broke a property, safety or liveness, or without
/// faults an expectation). Called from any thread.
pub(crate) type Progress<'a> = &'a (dyn Fn(u64, u64) + Sync);

/// Explores `seeds` with `jobs` threads (faults on when `faults` is not empty). Each thread runs blocks of
/// seeds as it gets to them; the results are merged in seed order, so the answer is the same for any number
/// of jobs.
pub fn explore(
    scenario: &Scenario,
    server: impl Into<ServerUnderTest>,
    seeds: RangeInclusive<u64>,
    jobs: usize,
    faults: &[FaultKind],
    progress: Progress<'_>,
) -> Exploration {
    explore_keeping(scenario, &server.into(), seeds, jobs, faults, progress, false, 0).0
}

/// [`explore`], and what the runs reached (`Coverage`). Each run records its transcript, which coverage is
/// read from, so this is slower than [`explore`]; the answer is still the same for any number of jobs.
pub fn explore_with_coverage(
    scenario: &Scenario,
    server: impl Into<ServerUnderTest>,
    seeds: RangeInclusive<u64>,
    jobs: usize,
    faults: &[FaultKind],
    progress: Progress<'_>,
) -> (Exploration, Coverage) {
    let (exploration, coverage) = explore_keeping(scenario, &server.into(), seeds, jobs, faults, progress, true, 0);
    (exploration, coverage.unwrap_or_else(|| Coverage::new(faults)))
}

/// What one thread found over the seeds it ran, and what they reached.
type Chunk = (Exploration, Option<Coverage>);

/// [`explore`] (with coverage when `cover`) keeping the `keep` lowest failing seeds per verdict and property
/// ([`Exploration::failing`]), as `explore --results` writes them; the answer is the same for any number of jobs.
#[allow(clippy::too_many_arguments)]
pub fn explore_keeping(
    scenario: &Scenario,
    server: &ServerUnderTest,
    seeds: RangeInclusive<u64>,
    jobs: usize,
    faults: &[FaultKind],
    progress: Progress<'_>,
    cover: bool,
    keep: usize,
) -> (Exploration, Option<Coverage>) {
    let (first, last) = (*seeds.start(), *seeds.end());
    if first > last {
        return (Exploration::keeping(keep), cover.then(|| Coverage::new(faults)));
    }
    let count = last - first + 1;
    let blocks = count.div_ceil(SEEDS_PER_BLOCK);
    let jobs = (jobs.clamp(1, JOBS_MAX) as u64).min(blocks);
    let done = AtomicU64::new(0);
    let failing_so_far = AtomicU64::new(0);
    let next_block = AtomicU64::new(0);
    // Each thread takes the next block of seeds until none is left, so a thread the machine runs less often
    // simply takes fewer blocks (contiguous halves would leave the other core idle waiting for it).
    let prepared = Prepared::new(scenario);
    // Each thread folds its seeds' outcomes as it goes (nothing is kept per seed: an exploration of millions of
    // seeds holds no more than one of a few).
    let run_blocks = || -> Chunk {
        let mut found = Exploration::keeping(keep);
        let mut covered = cover.then(|| Coverage::new(faults));
        loop {
            let block = next_block.fetch_add(1, Ordering::Relaxed);
            if block >= blocks {
                break;
            }
            // block < blocks, so block * SEEDS_PER_BLOCK < count: the start is within the range.
            let start = first + block * SEEDS_PER_BLOCK;
            let end = start.saturating_add(SEEDS_PER_BLOCK - 1).min(last);
            for seed in start..=end {
                let (deliveries, outcome, run) = run_seed_covered(&prepared, server, seed, faults, cover);
                if matches!(outcome, SeedOutcome::Unsafe(_) | SeedOutcome::NotLive(_)) {
                    failing_so_far.fetch_add(1, Ordering::Relaxed);
                }
                let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
                progress(finished, failing_so_far.load(Ordering::Relaxed));
                if let (Some(covered), Some(run)) = (covered.as_mut(), run) {
                    covered.add(seed, run);
                }
                found.add(seed, deliveries, outcome);
            }
        }
        (found, covered)
    };
    let per_thread: Vec<Chunk> = if jobs == 1 {
        vec![run_blocks()]
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..jobs).map(|_| scope.spawn(run_blocks)).collect();
            handles.into_iter().map(|h| h.join().expect("each run catches its own panics")).collect()
        })
    };
    let mut exploration = Exploration::keeping(keep);
    let mut coverage = cover.then(|| Coverage::new(faults));
    for (found, covered) in per_thread {
        // Sums, sets and the smallest example seed: the same whichever thread reached what.
        exploration.merge(found);
        if let (Some(coverage), Some(covered)) = (coverage.as_mut(), covered) {
            coverage.merge(covered);
        }
    }
    (exploration, coverage)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(kind: FailureKind, message: &str) -> Failure {
        Failure { kind, line: 0, statement: String::new(), message: message.into() }
    }

    /// Seed `seed`'s outcome in a made-up exploration where every kind of outcome occurs, more than once.
    fn outcome(seed: u64) -> SeedOutcome {
        match seed % 7 {
            1 => SeedOutcome::Unsafe(vec![failure(FailureKind::Property(Property::Consent), &format!("seed {seed}"))]),
            3 => SeedOutcome::NotLive(vec![failure(FailureKind::Expectation, &format!("seed {seed}"))]),
            4 if seed % 2 == 0 => SeedOutcome::Unsafe(vec![failure(FailureKind::Property(Property::AtMostOnce), "twice")]),
            5 => SeedOutcome::Crashed(format!("seed {seed}")),
            _ => SeedOutcome::Held,
        }
    }

    #[test]
    fn an_exploration_split_between_threads_merges_to_the_one_read_in_seed_order() {
        let seeds = 10..=90u64;
        let mut in_order = Exploration::keeping(3);
        for seed in seeds.clone() {
            in_order.add(seed, seed as usize, outcome(seed));
        }
        assert_eq!(in_order.first_unsafe.as_ref().map(|(seed, _)| *seed), Some(15));
        assert_eq!(in_order.properties_broken, [Property::AtMostOnce, Property::Consent]);
        let kept = |e: &Exploration, verdict, property| -> Vec<u64> {
            e.failing.get(&(verdict, property)).map(|k| k.iter().map(|f| f.seed).collect()).unwrap_or_default()
        };
        assert_eq!(kept(&in_order, Verdict::Unsafe, Some(Property::Consent)), [15, 22, 29]);
        assert_eq!(kept(&in_order, Verdict::Unsafe, Some(Property::AtMostOnce)), [18, 32, 46]);
        assert_eq!(kept(&in_order, Verdict::Expectations, None), [10, 17, 24]);
        assert_eq!(kept(&in_order, Verdict::Crashed, None), [12, 19, 26]);
        let consent_runs = seeds.clone().filter(|s| s % 7 == 1).count() as u64;
        assert_eq!(in_order.failing_runs_by_property[&Property::Consent], consent_runs);
        // Blocks of 4 seeds dealt to three threads, each thread folding its own, merged in either order.
        let mut threads: [Exploration; 3] = std::array::from_fn(|_| Exploration::keeping(3));
        for seed in seeds.clone().rev() {
            threads[((seed / 4) % 3) as usize].add(seed, seed as usize, outcome(seed));
        }
        for order in [[0, 1, 2], [2, 1, 0], [1, 2, 0]] {
            let mut merged = Exploration::keeping(3);
            for thread in order {
                merged.merge(threads[thread].clone());
            }
            assert_eq!(merged, in_order, "threads merged in the order {order:?}");
        }
        // Cut into shards as `--shard I/N` cuts (contiguous slices), each explored alone, merged in any order.
        for count in [1, 2, 3, 7, 100] {
            let shards: Vec<Exploration> = (1..=count)
                .map(|index| {
                    let mut part = Exploration::keeping(3);
                    for seed in shard(&seeds, index, count).into_iter().flatten() {
                        part.add(seed, seed as usize, outcome(seed));
                    }
                    part
                })
                .collect();
            let mut merged = Exploration::keeping(3);
            for part in shards.into_iter().rev() {
                merged.merge(part);
            }
            assert_eq!(merged, in_order, "{count} shards merged");
        }
    }

    #[test]
    fn a_seed_that_breaks_two_properties_is_kept_under_both() {
        let both = SeedOutcome::Unsafe(vec![
            failure(FailureKind::Property(Property::Consent), "a"),
            failure(FailureKind::Property(Property::AtMostOnce), "b"),
        ]);
        let mut found = Exploration::keeping(1);
        found.add(7, 3, SeedOutcome::Unsafe(vec![failure(FailureKind::Property(Property::AtMostOnce), "c")]));
        found.add(5, 3, both);
        assert_eq!(found.failing[&(Verdict::Unsafe, Some(Property::Consent))][0].seed, 5);
        assert_eq!(found.failing[&(Verdict::Unsafe, Some(Property::AtMostOnce))][0].seed, 5);
        assert_eq!(found.failing_seeds().len(), 1, "one seed, kept under two keys, is one finding");
        assert_eq!(found.failing_runs_by_property[&Property::AtMostOnce], 2);
        assert!(Exploration::default().failing.is_empty());
    }

    #[test]
    fn shards_cover_the_range_exactly_once_in_near_equal_slices() {
        assert_eq!(shard(&(1..=9), 2, 3), Some(4..=6));
        assert_eq!(shard(&(1..=10), 1, 3), Some(1..=4));
        assert_eq!(shard(&(1..=10), 3, 3), Some(8..=10));
        assert_eq!(shard(&(1..=2), 3, 3), None, "more shards than seeds: the last is empty");
        assert_eq!(shard(&(5..=5), 1, 1), Some(5..=5));
        assert_eq!(slice(0, 1, 4), 0..0);
        for len in 0..40u64 {
            for count in 1..12u64 {
                let slices: Vec<Range<u64>> = (1..=count).map(|index| slice(len, index, count)).collect();
                // Contiguous from 0 to len: each element exactly once.
                assert_eq!(slices[0].start, 0);
                assert_eq!(slices.last().unwrap().end, len);
                for pair in slices.windows(2) {
                    assert_eq!(pair[0].end, pair[1].start, "{len} in {count}");
                }
                let sizes: Vec<u64> = slices.iter().map(|s| s.end - s.start).collect();
                let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                assert!(max - min <= 1, "{len} in {count}: {sizes:?}");
                // The longer slices come first.
                assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "{len} in {count}: {sizes:?}");
                let offset = 1000;
                let seeds = offset..=offset + len.max(1) - 1;
                let covered: Vec<u64> = (1..=count).flat_map(|i| shard(&seeds, i, count).into_iter().flatten()).collect();
                assert_eq!(covered, seeds.clone().collect::<Vec<_>>(), "{len} in {count}");
            }
        }
        assert_eq!(shard(&(0..=u64::MAX), 2, 2).map(|r| *r.end()), Some(u64::MAX - 1), "saturates, never wraps");
    }
}
