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
//! Beside them, the floor (`handlers_alone_cpu/…`): the same requests through the same pipeline entry against
//! memory stores called directly, with no simulator around them — what the unchanged handlers alone cost.
//! Run with `cargo bench --bench sim_flows`.
//!
//! The allocator is the `mcpsim` binary's (mimalloc, with the default `cli` feature), so the figures are
//! the simulator's as users run it; `cargo bench --bench sim_flows --no-default-features` measures the
//! library on the system allocator.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use mcpsim::testing::runner::{self, RunOptions};
use mcpsim::Scenario;
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
    mcpsim::parse("bench.sim", &text).expect("the benchmark scenario parses")
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
            if thread_cpu_ns().is_none() {
                eprintln!("two_round_delete_cpu/{name}/{label}: not measured: this platform has no per-thread CPU clock");
            } else {
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

/// The floor under a simulated flow: the requests the simulated client sends (taken from a run's history;
/// each round 2 given the state its round 1 just sealed) through the pipeline entry the instances call,
/// against fresh memory stores holding the scenario's notes, called directly: no cluster, network,
/// scheduler, history, expectations or checker. Only the pipeline calls are timed (thread CPU time); making
/// the stores and the server, and the client's copy of each round 2, are not. A simulated flow cannot cost
/// less than this; `two_round_delete_cpu/…` less this is what the simulator adds.
fn handlers_alone(c: &mut Criterion) {
    use mcpsim::testing::handle_decoded_exchange;
    use mcpsim::testing::Authorizations;
    use mcpsim::testing::KeyRing;
    use mcpsim::testing::Note;
    use mcpsim::testing::RoutingHeaders;
    use mcpsim::testing::{notes_server, NotesPorts};
    use mcpsim::testing::{ManualClock, SeededNonces};
    use mcpsim::testing::{MemoryNoteStore, MemoryReplayStore, ReplayLimits};
    use mcpsim::testing::{NotesConfig, NotesServer};
    use serde_json::Value;
    use std::future::Future;
    use std::sync::Arc;
    use std::task::{Context, Poll, Waker};

    /// One request as the pipeline receives it: the value, its headers and its length in bytes.
    struct Sent {
        principal: String,
        value: Value,
        headers: RoutingHeaders,
        length: usize,
    }
    // The memory stores answer at once: one poll finishes every call.
    fn now<F: Future>(future: F) -> F::Output {
        match std::pin::pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(output) => output,
            Poll::Pending => panic!("a memory store call waited"),
        }
    }
    if thread_cpu_ns().is_none() {
        eprintln!("handlers_alone_cpu: not measured: this platform has no per-thread CPU clock");
        return;
    }
    for (name, flows) in [("one_flow_per_run", 1), ("twenty_flows_per_run", FLOWS_PER_RUN)] {
        let scenario = scenario_with(flows);
        let report = runner::run(&scenario, &options(false));
        // The scenario's grants; any key will do (each round 2 carries the state this server sealed).
        let mut authorizations = Authorizations::new();
        for principal in &scenario.cluster.principals {
            for workspace in &principal.workspaces {
                authorizations.grant(&principal.name, workspace).expect("the parser checked the workspace");
            }
        }
        let config = Arc::new(NotesConfig {
            server_info: mcpsim::testing::server_info(),
            authorizations: Arc::new(authorizations),
            key_ring: KeyRing::new("k1", vec![7; 32]).expect("a valid key"),
            // The notes server's default, as the scenario leaves it: it only changes digits inside the state.
            state_ttl_ms: 300_000,
        });
        let sent: Vec<Sent> = report
            .history
            .operations()
            .iter()
            .filter_map(|operation| {
                let value = operation.request_value.as_deref()?;
                Some(Sent {
                    principal: operation.principal.clone(),
                    value: value.clone(),
                    headers: RoutingHeaders::for_message(value),
                    length: serde_json::to_vec(value).expect("serializes").len(),
                })
            })
            .collect();
        assert_eq!(sent.len(), 2 * flows, "each flow sends round 1, then round 2");
        let notes: Vec<Note> = report.history.initial_notes().to_vec();
        let server = |seed: u64| -> NotesServer {
            let clock = Arc::new(ManualClock::new(1_000));
            let notes = Arc::new(MemoryNoteStore::new(notes.clone()));
            let replay = Arc::new(MemoryReplayStore::new(notes.clone(), clock.clone(), ReplayLimits::default()));
            let nonces = Arc::new(SeededNonces::new(seed));
            notes_server(config.clone(), NotesPorts { notes, replay, clock, nonces, out_of_band: None })
        };
        let mut group = c.benchmark_group(format!("handlers_alone_cpu/{name}"));
        group.throughput(Throughput::Elements(flows as u64));
        group.bench_function("two_round_delete", |b| {
            b.iter_custom(|iterations| {
                let mut spent = 0;
                for iteration in 0..iterations {
                    let server = server(iteration);
                    for pair in sent.chunks(2) {
                        let (round_1, round_2) = (&pair[0], &pair[1]);
                        let mut accept = round_2.value.clone();
                        let start = thread_cpu_ns().unwrap_or(0);
                        let first = now(handle_decoded_exchange(
                            &server,
                            &round_1.principal,
                            black_box(&round_1.value),
                            round_1.length,
                            Some(&round_1.headers),
                        ));
                        spent += thread_cpu_ns().unwrap_or(0).saturating_sub(start);
                        let state = first.reply.response.as_ref().and_then(|r| r["result"]["requestState"].as_str());
                        accept["params"]["requestState"] = Value::from(state.expect("round 1 asks which note"));
                        let start = thread_cpu_ns().unwrap_or(0);
                        let second = now(handle_decoded_exchange(
                            &server,
                            &round_2.principal,
                            black_box(&accept),
                            round_2.length,
                            Some(&round_2.headers),
                        ));
                        spent += thread_cpu_ns().unwrap_or(0).saturating_sub(start);
                        let deleted = second.reply.response.as_ref().map(|r| &r["result"]["structuredContent"]["deleted"]);
                        assert_eq!(deleted, Some(&Value::Bool(true)), "round 2 deletes: {:?}", second.reply.response);
                        black_box((first, second));
                    }
                }
                Duration::from_nanos(spent)
            })
        });
        group.finish();
    }
}

criterion_group!(benches, flows, handlers_alone);
criterion_main!(benches);
