//! Simulated two-round delete flows per second, through the full actor path: client → instance →
//! note store (list) → client (form) → instance → replay store → note store (re-check and delete) →
//! replay store → instance → client, every hop an envelope chosen by the scheduler, the unchanged handlers
//! on every instance, the expectations and the safety-property checker at the end.
//!
//! Two shapes: a scenario holding one flow (the cluster is built for every flow) and one holding
//! `FLOWS_PER_RUN` flows (each round 1 lists every note still in the store). Each with and without
//! transcript recording, and each measured twice: in wall-clock time (`two_round_delete/…`) and in the
//! CPU time of the benchmark thread (`two_round_delete_cpu/…`, Linux only), which is what "flows per
//! second on one core" means and which other processes competing for the CPU do not inflate.
//! Run with `cargo bench --bench sim_flows`.
//!
//! The allocator is the `mcpsim` binary's (mimalloc, with the default `cli` feature), so the figures are
//! the simulator's as users run it; `cargo bench --bench sim_flows --no-default-features` measures the
//! library on the system allocator.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use mcpsim::scenario::{self, Scenario};
use mcpsim::sim::runner::{self, RunOptions};
use std::fmt::Write as _;
use std::hint::black_box;
use std::time::Duration;

#[cfg(feature = "cli")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Flows in the longer scenario.
const FLOWS_PER_RUN: usize = 20;

/// A cluster of two instances; `flows` notes, each deleted by its own two-round flow (round 1 on i1,
/// the accepted answer on i2).
fn scenario_with(flows: usize) -> Scenario {
    let mut text = String::from(
        "key k1\ninstance i1 keys k1\ninstance i2 keys k1\nprincipal alice workspaces \"file:///w\"\nclient alice principal alice\n",
    );
    for flow in 0..flows {
        let _ = writeln!(text, "note n{flow} title \"report {flow:03}\" uri \"file:///w/n{flow}.md\"");
    }
    for flow in 0..flows {
        let _ = writeln!(
            text,
            "send alice -> i1 tools/call {{\"name\": \"notes_delete\", \"arguments\": {{\"workspaceUri\": \"file:///w\", \"title\": \"report {flow:03}\"}}}}\n\
             answer alice -> i2 accept {{\"note_id\": \"n{flow}\", \"confirm\": true}} as done{flow}\n\
             expect done{flow} complete"
        );
    }
    let _ = writeln!(text, "expect notes count 0\nexpect consumed count {flows}");
    scenario::parse("bench.sim", "bench", &text).expect("the benchmark scenario parses")
}

fn options(record_transcript: bool) -> RunOptions {
    RunOptions { record_transcript, check_statelessness: false, ..RunOptions::seeded(1) }
}

/// CPU time this thread has run, in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`; `None` where unavailable).
fn thread_cpu_ns() -> Option<u64> {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime only writes the timespec we pass, which lives on this stack frame.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    (status == 0).then(|| now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64)
}

fn flows(c: &mut Criterion) {
    for (name, flows) in [("one_flow_per_run", 1), ("twenty_flows_per_run", FLOWS_PER_RUN)] {
        let scenario = scenario_with(flows);
        for record in [false, true] {
            let options = options(record);
            let report = runner::run(&scenario, &options);
            assert!(report.passed(), "the benchmark scenario must pass: {:?}", report.failures);
            assert_eq!(report.deliveries, flows * 10, "ten deliveries per two-round flow");
            let label = if record { "with_transcript" } else { "without_transcript" };
            let mut group = c.benchmark_group(format!("two_round_delete/{name}"));
            group.throughput(Throughput::Elements(flows as u64));
            group.bench_function(label, |b| b.iter(|| black_box(runner::run(black_box(&scenario), &options))));
            group.finish();
            if thread_cpu_ns().is_some() {
                let mut group = c.benchmark_group(format!("two_round_delete_cpu/{name}"));
                group.throughput(Throughput::Elements(flows as u64));
                group.bench_function(label, |b| {
                    b.iter_custom(|iterations| {
                        let start = thread_cpu_ns().unwrap_or(0);
                        for _ in 0..iterations {
                            black_box(runner::run(black_box(&scenario), &options));
                        }
                        Duration::from_nanos(thread_cpu_ns().unwrap_or(0).saturating_sub(start))
                    })
                });
                group.finish();
            }
        }
    }
}

criterion_group!(benches, flows);
criterion_main!(benches);
