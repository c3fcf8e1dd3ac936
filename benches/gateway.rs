//! Throughput of the gateway's full pipeline against the same backend called directly.
//!
//! `direct`: a `tools/call notes.search`-equivalent sent to the notes backend through the shared pipeline.
//! `gateway`: the same call through the gateway: envelope, `_meta`, (routing headers), version, route,
//! capability, grant, approved pin and closed-schema check, audit digests, a fresh descriptor read with
//! SHA-256 and the pin/publisher/scanner decision, the shared rate limiter, the backend call, the audit
//! record. Also: the listing (catalog refresh with scanning), the confirmed export round trip (HMAC seal and
//! open, nonce claim, idempotent export), and the scanner alone.
//!
//! Overhead ratio = gateway time / direct time; the target is under 2x.
//!
//! On a busy machine wall-clock ratios drift with the neighbours' load. For a load-independent ratio, run a
//! fixed number of calls of one path and count instructions, e.g.
//! `MCPSIM_BENCH_PATH=gateway MCPSIM_BENCH_CALLS=20000 perf stat -e instructions:u target/release/deps/gateway-…`
//! (and `…=direct`, and both with `MCPSIM_BENCH_CALLS=0` to subtract the setup).

use criterion::{criterion_group, BatchSize, Criterion, Throughput};
use mcpsim::testing::handle_message;
use mcpsim::testing::scan_descriptor;
use mcpsim::testing::AuditRecord;
use mcpsim::testing::Deployment;
use mcpsim::testing::KeyRing;
use mcpsim::testing::MemoryExportLedger;
use mcpsim::testing::NotesBackend;
use mcpsim::testing::RoutingHeaders;
use mcpsim::testing::{default_pins, GatewayFile};
use mcpsim::testing::{gateway_world, GatewayWorld, WorldOptions};
use mcpsim::testing::{AuditSink, LocalBackend, RateLimit};
use mcpsim::testing::{BackendHandle, Gateway};
use mcpsim::testing::{Clock, NonceSource, StoreError};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

struct BenchClock(AtomicU64);

impl Clock for BenchClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

struct CountingNonces(AtomicU64);

impl NonceSource for CountingNonces {
    fn nonce(&self) -> [u8; 16] {
        let mut bytes = [0u8; 16];
        bytes[8..].copy_from_slice(&self.0.fetch_add(1, Ordering::Relaxed).to_be_bytes());
        bytes
    }
}

/// Formats each record as a JSON line (the cost a real sink pays) and drops it, so memory stays flat.
struct FormattingAuditSink;

#[async_trait::async_trait]
impl AuditSink for FormattingAuditSink {
    async fn append(&self, record: &AuditRecord) -> Result<(), StoreError> {
        std::hint::black_box(record.to_line());
        Ok(())
    }
}

fn world(clock: Arc<BenchClock>) -> GatewayWorld {
    let mut file = GatewayFile::demo();
    // The bench measures the pipeline, not the quota: give it room.
    let unlimited = RateLimit { calls: u32::MAX, window_ms: 60_000 };
    for rule in file.policy.tools.values_mut() {
        rule.rate_limit = Some(unlimited);
    }
    let options = WorldOptions {
        instance: "bench".into(),
        clock,
        nonces: Arc::new(CountingNonces(AtomicU64::new(1))),
        key_ring: KeyRing::new("k1", vec![42; 32]).unwrap(),
        audit_key: vec![7; 32],
        audit: Arc::new(FormattingAuditSink),
        pins: default_pins(),
        replay_limits: mcpsim::testing::ReplayLimits::default(),
    };
    gateway_world(&file, &Deployment::demo(), options).unwrap()
}

fn meta() -> Value {
    json!({ "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": { "elicitation": { "form": {} } } })
}

fn call_bytes(name: &str, arguments: Value) -> Vec<u8> {
    json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": { "_meta": meta(), "name": name, "arguments": arguments } })
        .to_string()
        .into_bytes()
}

fn pipeline(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let clock = Arc::new(BenchClock(AtomicU64::new(1_785_200_000_000)));
    let world = world(clock.clone());
    let gateway: Gateway = world.gateway.clone();
    let notes = world.notes_backends["notes"].0.clone();
    let arguments = json!({ "query": "TPS" });
    let direct_request = call_bytes("search", arguments.clone());
    let gateway_request = call_bytes("notes.search", arguments);
    let headers = RoutingHeaders {
        protocol_version: Some("2026-07-28".into()),
        method: Some("tools/call".into()),
        name: Some("notes.search".into()),
    };
    // Both paths must succeed, or the comparison is meaningless.
    let direct = runtime.block_on(handle_message(notes.as_ref(), "alice", &direct_request, None));
    let through = runtime.block_on(gateway.handle("alice", &gateway_request, Some(&headers)));
    assert_eq!(
        direct.response.as_ref().unwrap()["result"]["structuredContent"],
        through.response.as_ref().unwrap()["result"]["structuredContent"]
    );

    let mut group = c.benchmark_group("tools_call_search");
    group.throughput(Throughput::Elements(1));
    group.bench_function("direct", |b| b.iter(|| runtime.block_on(handle_message(notes.as_ref(), "alice", &direct_request, None))));
    group.bench_function("gateway", |b| b.iter(|| runtime.block_on(gateway.handle("alice", &gateway_request, None))));
    group.bench_function("gateway_with_routing_headers", |b| {
        b.iter(|| runtime.block_on(gateway.handle("alice", &gateway_request, Some(&headers))))
    });
    group.finish();

    let list = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": { "_meta": meta() } }).to_string().into_bytes();
    let mut group = c.benchmark_group("tools_list");
    group.bench_function("direct", |b| b.iter(|| runtime.block_on(handle_message(notes.as_ref(), "alice", &list, None))));
    group.bench_function("gateway", |b| b.iter(|| runtime.block_on(gateway.handle("alice", &list, None))));
    group.finish();

    // The confirmed export: round 1 (seal) and round 2 (open, claim, export). Each iteration moves the clock
    // past the state's lifetime so the replay store prunes instead of filling, and both paths export into
    // their own unbounded ledger so the bench never measures the "ledger full" refusal.
    let unbounded_notes = |notes: &NotesBackend| {
        Arc::new(NotesBackend::new(
            notes.config.as_ref().clone(),
            notes.notes.clone(),
            Arc::new(MemoryExportLedger::with_capacity(usize::MAX)),
        ))
    };
    let gateway_notes = unbounded_notes(&notes);
    let handles: Vec<BackendHandle> = world
        .gateway
        .backends()
        .iter()
        .map(|handle| match handle.id.as_str() {
            "notes" => BackendHandle {
                port: Arc::new(LocalBackend::with_live_listing(gateway_notes.clone(), gateway_notes.clone())),
                ..handle.clone()
            },
            _ => handle.clone(),
        })
        .collect();
    let gateway = Gateway::new(world.gateway.config.as_ref().clone(), handles, world.gateway.ports.clone()).unwrap();
    let notes = unbounded_notes(&notes);
    let export_arguments = json!({ "query": "TPS", "destination": "archive" });
    let round_one = call_bytes("notes.export", export_arguments.clone());
    let mut group = c.benchmark_group("export_confirmed");
    group.sample_size(30).measurement_time(Duration::from_secs(3));
    group.bench_function("gateway_two_rounds", |b| {
        b.iter_batched(
            || clock.0.fetch_add(400_000, Ordering::Relaxed),
            |_| {
                let reply = runtime.block_on(gateway.handle("alice", &round_one, None));
                let state = reply.response.unwrap()["result"]["requestState"].as_str().unwrap().to_string();
                let mut body: Value = serde_json::from_slice(&round_one).unwrap();
                body["params"]["requestState"] = json!(state);
                body["params"]["inputResponses"] = json!({ "confirm": { "action": "accept", "content": { "confirm": true } } });
                let reply = runtime.block_on(gateway.handle("alice", body.to_string().as_bytes(), None));
                assert!(reply.response.unwrap()["result"]["structuredContent"]["exported"] == json!(true));
            },
            BatchSize::SmallInput,
        )
    });
    let key = AtomicU64::new(0);
    group.bench_function("direct_keyed_export", |b| {
        b.iter(|| {
            let mut body: Value = serde_json::from_slice(&call_bytes("export", export_arguments.clone())).unwrap();
            body["params"]["_meta"]["io.mcpsim/idempotencyKey"] = json!(format!("k{}", key.fetch_add(1, Ordering::Relaxed)));
            runtime.block_on(handle_message(notes.as_ref(), "alice", body.to_string().as_bytes(), None))
        })
    });
    group.finish();

    let descriptor = notes.descriptors.current()[0].clone();
    assert_eq!(descriptor["name"], "export");
    c.bench_function("scanner/export_descriptor", |b| b.iter(|| scan_descriptor(std::hint::black_box(&descriptor))));
}

/// The counted mode: `MCPSIM_BENCH_CALLS` calls of `MCPSIM_BENCH_PATH` (`direct` or `gateway`), nothing else.
fn counted(path: &str, calls: u64) {
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let world = world(Arc::new(BenchClock(AtomicU64::new(1_785_200_000_000))));
    let notes = world.notes_backends["notes"].0.clone();
    let direct_request = call_bytes("search", json!({ "query": "TPS" }));
    let gateway_request = call_bytes("notes.search", json!({ "query": "TPS" }));
    for _ in 0..calls {
        let reply = match path {
            "direct" => runtime.block_on(handle_message(notes.as_ref(), "alice", &direct_request, None)),
            "gateway" => runtime.block_on(world.gateway.handle("alice", &gateway_request, None)),
            other => panic!("MCPSIM_BENCH_PATH must be direct or gateway, not {other:?}"),
        };
        assert!(reply.response.as_ref().is_some_and(|r| r.get("result").is_some()));
    }
}

criterion_group!(benches, pipeline);

fn main() {
    if let (Ok(path), Ok(calls)) = (std::env::var("MCPSIM_BENCH_PATH"), std::env::var("MCPSIM_BENCH_CALLS")) {
        counted(&path, calls.parse().expect("MCPSIM_BENCH_CALLS is a number"));
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
