//! Schedules explored per second on the double-accept scenario (`04-accepts-race-for-one-note`): each
//! schedule is one seed run exactly as `mcpsim explore` runs it — the scenario's steps with its parallel
//! block interleaved by that seed, the expectations, the safety-property checker and the statelessness
//! re-run — with no transcript. Measured on one thread. Run with `cargo bench --bench explore`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use mcpsim::sim::actors::instance::notes_server_factory;
use mcpsim::sim::explore::{self, SeedOutcome};
use mcpsim::sim::mutants;
use std::hint::black_box;
use std::time::Duration;

/// Seeds per measured iteration.
const SCHEDULES_PER_ITERATION: u64 = 100;

fn schedules(c: &mut Criterion) {
    let scenario = mutants::scenario_named("04-accepts-race-for-one-note.sim").expect("a library scenario");
    let factory = notes_server_factory();
    let mut group = c.benchmark_group("explore");
    group.throughput(Throughput::Elements(SCHEDULES_PER_ITERATION));
    group.measurement_time(Duration::from_secs(10));
    group.bench_function("double_accept_schedules", |b| {
        b.iter(|| {
            for seed in 1..=SCHEDULES_PER_ITERATION {
                let (deliveries, outcome) = explore::run_seed(&scenario, &factory, seed);
                assert_eq!(outcome, SeedOutcome::Held);
                black_box(deliveries);
            }
        })
    });
    group.finish();
}

criterion_group!(benches, schedules);
criterion_main!(benches);
