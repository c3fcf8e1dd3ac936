//! Schedules explored per second on the double-accept scenario (`04-accepts-race-for-one-note`): each
//! schedule is one seed run exactly as `mcpsim explore` runs it — the scenario's steps with its parallel
//! block interleaved by that seed, the expectations, the safety-property checker and the statelessness
//! re-run — with no transcript; and the same seeds with every fault on (`--faults all`: the seed's fault
//! plan, clients retrying, liveness judged). Measured on one thread. Run with `cargo bench --bench explore`.
//! On the binary's allocator (mimalloc, with the default `cli` feature), as `mcpsim explore` runs.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use mcpsim::testing::explore::{self, SeedOutcome};
use mcpsim::testing::notes_server_factory;
use mcpsim::testing::runner::{self, RunOptions};
use mcpsim::FaultKind;
use std::hint::black_box;
use std::time::Duration;

#[cfg(feature = "cli")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Seeds per measured iteration.
const SCHEDULES_PER_ITERATION: u64 = 100;

fn schedules(c: &mut Criterion) {
    let scenario = mcpsim::library("04-accepts-race-for-one-note.sim").expect("a library scenario");
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
    // The same schedules without the statelessness re-run (one execution each), as `--faults` and the
    // exhaustive search run them.
    group.bench_function("double_accept_schedules_single_execution", |b| {
        b.iter(|| {
            for seed in 1..=SCHEDULES_PER_ITERATION {
                let options = RunOptions { record_transcript: false, check_statelessness: false, ..RunOptions::seeded(seed) };
                let report = runner::run(&scenario, &options);
                assert!(report.passed());
                black_box(report.deliveries);
            }
        })
    });
    group.finish();

    // CPU time of this thread: what "schedules per second on one core" means on a shared, loaded machine.
    let mut cpu = c.benchmark_group("explore_cpu");
    cpu.throughput(Throughput::Elements(SCHEDULES_PER_ITERATION));
    cpu.measurement_time(Duration::from_secs(10));
    cpu.bench_function("double_accept_schedules", |b| {
        b.iter_custom(|iterations| {
            let start = thread_cpu_ns();
            for _ in 0..iterations {
                for seed in 1..=SCHEDULES_PER_ITERATION {
                    black_box(explore::run_seed(&scenario, &factory, seed));
                }
            }
            Duration::from_nanos(thread_cpu_ns().saturating_sub(start))
        })
    });
    cpu.bench_function("double_accept_schedules_all_faults", |b| {
        b.iter_custom(|iterations| {
            let start = thread_cpu_ns();
            for _ in 0..iterations {
                for seed in 1..=SCHEDULES_PER_ITERATION {
                    let (deliveries, outcome) = explore::run_seed_with(&scenario, &factory, seed, &FaultKind::ALL);
                    assert_eq!(outcome, SeedOutcome::Held);
                    black_box(deliveries);
                }
            }
            Duration::from_nanos(thread_cpu_ns().saturating_sub(start))
        })
    });
    cpu.finish();
}

/// CPU time this thread has run, in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu_ns() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime only writes the timespec we pass, which lives on this stack frame.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(status, 0, "the thread CPU clock is available on Linux");
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

criterion_group!(benches, schedules);
criterion_main!(benches);
