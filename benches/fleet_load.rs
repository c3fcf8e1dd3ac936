//! Load on a live fleet: 3 separate `mcpsim serve` processes (release build) sharing one store and one key
//! file, driven over loopback HTTP.
//!
//! ```sh
//! cargo bench --bench fleet_load                                  # SQLite; PostgreSQL too if configured
//! eval "$(bash .ci/postgres.sh start)" && cargo bench --bench fleet_load   # ... with a local PostgreSQL
//! cargo bench --bench fleet_load -- --store sqlite --seconds 5 --concurrency 1,16
//! # A deployment's load: 1 KiB bodies, states living 10 s (nonces are kept 10 + 60 s, so a 5-minute row
//! # goes past the replay store's retention; 500,000 nonces sustain 7,142/s: 2× headroom over 3,571/s).
//! cargo bench --bench fleet_load -- --store sqlite-relaxed --concurrency 16 --seconds 300 \
//!     --body-bytes 1024 --state-ttl 10 --replay-capacity 500000   # then --store sqlite
//! ```
//!
//! The disk's floor: `--sync-floor N` measures, beside the fleet's databases (`target/tmp`), N syncs of a
//! small write (`fdatasync` of 512 bytes appended to a file, and overwriting one in place) and N one-row commits of SQLite in WAL mode with
//! `synchronous=FULL` and with `NORMAL`, prints p50 and mean of each and exits: a durable fleet confirms at
//! most 1 / (sync time) × (writes per commit) deletions per second.
//!
//! ```sh
//! cargo bench --bench fleet_load -- --sync-floor 3000
//! ```
//!
//! `MCPSIM_FLEET_BIN=PATH` runs the fleet with another `mcpsim` binary (a baseline built beside this one)
//! instead of the one built with this bench.
//!
//! For each store and each concurrency it measures, for the same duration:
//! - `server/discover` alone (authentication, pipeline, one JSON reply): the floor of the stack;
//! - complete `notes_delete` flows: round 1 (list, sign the state) on one instance, then round 2 (verify,
//!   claim the nonce and delete the note in one transaction) on the next instance, as a client whose retry
//!   lands elsewhere would.
//!
//! Stores (`--store`, comma-separated; default all five, the PostgreSQL ones only when configured):
//! - `sqlite`: a file in the temp directory, every commit synced to disk (`synchronous=FULL`), as deployed
//!   by default (`--durability durable`);
//! - `sqlite-relaxed`: the same with `serve --durability relaxed` (`synchronous=NORMAL`: no sync per commit);
//! - `sqlite-tmpfs`: the durable file on `/dev/shm`, where a sync costs nothing: the software cost of the stack;
//! - `postgres`: a fresh database on `MCPSIM_TEST_POSTGRES_URL`'s server, commits flushed to its WAL;
//! - `postgres-relaxed`: the same with `serve --durability relaxed` (`synchronous_commit=off` for the fleet's
//!   sessions: a commit is acknowledged before its WAL flush).
//!
//! Each flow needs a note of its own. They are added between measured phases (phases of
//! [`FLOWS_PER_WORKER_PER_PHASE`] flows per worker, one seed transaction each), so the clock only runs while
//! HTTP requests are in flight; the store never holds more than concurrency × that many notes.
//! Requests go to 127.0.0.1 only; every run is bounded in time and in count. Output is a Markdown table (p50
//! and p99 of the whole flow and of each round), then for each flow row: refusals (`replay_store_full`,
//! counted, not fatal), the rate over wall-clock time (note seeding between phases included), the measured
//! rate of each minute, the load average before and after, and the CPU seconds of the servers and the driver.
//!
//! The request log is on (`MCPSIM_LOG=info`): each server's stderr goes to a file in a temp directory (its
//! line count is printed at the end), not into the driver's memory.
//!
//! Keep-alive: a server closes a connection idle for its header-read deadline (`HEADER_READ_TIMEOUT_MS`,
//! 10 s); a request sent on a pooled connection just as the server closes it fails mid-message (hyper's
//! `IncompleteMessage`). The driver's pool drops connections idle for half that, and a request failing that
//! way is sent once more on a fresh connection and counted. A retried round 2 is judged by the server's answer
//! to the retry: the deletion, or `state_consumed` whose `previousOutcome` is the deletion of the flow's own
//! note (the first was carried out, only its answer was lost: a replay, counted as one).

// Shared with the end-to-end tests: the process handle and request builders.
#[path = "../tests/e2e_support/mod.rs"]
mod e2e_support;
#[allow(dead_code)] // Shared with the store tests: temp directories and throwaway PostgreSQL databases.
#[path = "../tests/stores/support.rs"]
mod store_support;

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioTimer};

/// The driver's allocator is the binary's (mimalloc): with the system one, a quarter of the driver's CPU
/// went to malloc and free (perf, 2026-12-01), on cores the servers share.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use e2e_support::{conforming_headers, delete_round_one, delete_round_two, request, TempConfig, ALICE_WORKSPACE, BIN, WAIT};
use mcpsim::testing::Note;
use mcpsim::testing::ReplayLimits;
use mcpsim::testing::Stopwatch;
use mcpsim::testing::SystemClock;
use mcpsim::testing::HEADER_READ_TIMEOUT_MS;
use mcpsim::testing::{open, StoreSpec, Stores};
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use store_support::{create_database, drop_database, postgres_server, TempDir, POSTGRES_URL_VARIABLE};

/// Instances in the fleet (separate processes).
const INSTANCES: usize = 3;
const TOKEN: &str = "demo-alice";
/// Flows each worker runs in one measured phase; notes for a phase are added before its clock starts.
const FLOWS_PER_WORKER_PER_PHASE: usize = 20;
/// Bounds: no run is longer or larger than these, whatever the arguments say.
const SECONDS_MAX: u64 = 900;
const CONCURRENCY_MAX: usize = 256;
const OPERATIONS_MAX: usize = 2_000_000;
const NOTES_MAX: usize = 1_000_000;
const BODY_BYTES_MAX: usize = 1 << 20;
/// Most syncs `--sync-floor` measures of each kind.
const SYNCS_MAX: usize = 100_000;
/// Unmeasured warm-up before each measurement (connections, caches, page cache).
const WARMUP_MS: u64 = 500;

struct Options {
    stores: Vec<String>,
    seconds: u64,
    concurrencies: Vec<usize>,
    /// Notes in the store besides the flows' own (in other folders of alice's workspace), with bodies.
    notes: usize,
    /// Bytes of each note's body (the flows' notes and the background ones).
    body_bytes: usize,
    /// `serve --state-ttl`: with a short one the run outlives the nonces' retention (TTL + 60 s grace).
    state_ttl: Option<u64>,
    /// `[replay] capacity` of the fleet's deployment (absent: the store's default).
    replay_capacity: Option<u64>,
    /// `--sync-floor N`: measure the disk's sync floor with N syncs and stop.
    sync_floor: Option<usize>,
}

fn parse_options() -> Options {
    let stores = ["sqlite", "sqlite-relaxed", "sqlite-tmpfs", "postgres", "postgres-relaxed"].map(String::from).to_vec();
    let mut options = Options {
        stores,
        seconds: 5,
        concurrencies: vec![1, 16],
        notes: 0,
        body_bytes: 0,
        state_ttl: None,
        replay_capacity: None,
        sync_floor: None,
    };
    let mut arguments = std::env::args().skip(1);
    while let Some(argument) = arguments.next() {
        let mut value = || arguments.next().unwrap_or_else(|| panic!("{argument} needs a value"));
        match argument.as_str() {
            // Passed by `cargo bench`.
            "--bench" => {}
            "--store" => options.stores = value().split(',').map(str::to_string).collect(),
            "--seconds" => options.seconds = value().parse::<u64>().expect("--seconds N").clamp(1, SECONDS_MAX),
            "--concurrency" => {
                options.concurrencies =
                    value().split(',').map(|n| n.parse::<usize>().expect("--concurrency N[,N…]").clamp(1, CONCURRENCY_MAX)).collect()
            }
            "--notes" => options.notes = value().parse::<usize>().expect("--notes N").min(NOTES_MAX),
            "--body-bytes" => options.body_bytes = value().parse::<usize>().expect("--body-bytes N").min(BODY_BYTES_MAX),
            "--state-ttl" => options.state_ttl = Some(value().parse::<u64>().expect("--state-ttl SECONDS").max(1)),
            "--replay-capacity" => options.replay_capacity = Some(value().parse::<u64>().expect("--replay-capacity N").max(1)),
            "--sync-floor" => options.sync_floor = Some(value().parse::<usize>().expect("--sync-floor N").clamp(10, SYNCS_MAX)),
            other => panic!(
                "unknown argument {other}; use --store sqlite,sqlite-relaxed,sqlite-tmpfs,postgres,postgres-relaxed --seconds N --concurrency N[,N…] --notes N --body-bytes N --state-ttl SECONDS --replay-capacity N --sync-floor N"
            ),
        }
    }
    options
}

/// Cargo's temp directory for this package's benches (under `target/`): a 5-minute run's database and ~150 MB
/// of request logs stay out of the shared `/tmp`.
fn private_temp() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
}

/// A store shared by the fleet and the driver (which adds the notes).
struct Store {
    argument: String,
    durability: &'static str,
    label: &'static str,
    stores: Stores,
    _directory: Option<TempDir>,
    database: Option<(mcpsim::testing::PostgresTarget, String)>,
}

async fn open_store(kind: &str) -> Option<Store> {
    let sqlite = |label: &'static str, directory: TempDir| {
        (format!("sqlite:{}", directory.path().join("fleet.db").display()), label, Some(directory), None)
    };
    let durability = if kind.ends_with("-relaxed") { "relaxed" } else { "durable" };
    let (argument, label, directory, database) = match kind {
        "sqlite" => sqlite("SQLite", TempDir::new_in(private_temp())),
        "sqlite-relaxed" => sqlite("SQLite, relaxed", TempDir::new_in(private_temp())),
        "sqlite-tmpfs" => sqlite("SQLite on tmpfs", TempDir::new_in(std::path::Path::new("/dev/shm"))),
        "postgres" | "postgres-relaxed" => {
            // The PostgreSQL rows are optional: without a server they are left out, and the driver says so.
            std::env::var_os(POSTGRES_URL_VARIABLE)?;
            let (url, server) = postgres_server();
            let (name, _) = create_database(&server).await;
            let label = if kind == "postgres" { "PostgreSQL" } else { "PostgreSQL, relaxed" };
            let mut url = reqwest::Url::parse(&url).expect("the server URL parses");
            url.set_path(&format!("/{name}"));
            (format!("postgres:{url}"), label, None, Some((server, name)))
        }
        other => panic!("unknown store {other}: sqlite, sqlite-relaxed, sqlite-tmpfs, postgres or postgres-relaxed"),
    };
    let spec: StoreSpec = argument.parse().expect("a valid store");
    let stores = open(&spec, Arc::new(SystemClock), ReplayLimits::default()).await.expect("the driver opens the store");
    Some(Store { argument, durability, label, stores, _directory: directory, database })
}

/// Latencies in microseconds, and how long the measured part took.
struct Measurement {
    latencies_us: Vec<u64>,
    /// Of each flow in `latencies_us`: round 1's and round 2's request (retries included).
    round_one_us: Vec<u64>,
    round_two_us: Vec<u64>,
    elapsed_us: u64,
    /// Round 2s refused with `replay_store_full`.
    refusals: usize,
    /// Completed flows and measured microseconds per wall-clock minute of the run.
    minutes: Vec<(usize, u64)>,
    /// Wall-clock microseconds of the whole run, note seeding between phases included.
    wall_us: u64,
}

impl Measurement {
    fn per_second(&self) -> f64 {
        self.latencies_us.len() as f64 * 1_000_000.0 / self.elapsed_us.max(1) as f64
    }

    fn empty() -> Measurement {
        Measurement {
            latencies_us: Vec::new(),
            round_one_us: Vec::new(),
            round_two_us: Vec::new(),
            elapsed_us: 0,
            refusals: 0,
            minutes: Vec::new(),
            wall_us: 0,
        }
    }

    fn percentile_us(&mut self, percent: usize) -> u64 {
        percentile(&mut self.latencies_us, percent)
    }
}

/// The `percent`-th percentile (nearest rank below) of `values`, sorting them.
fn percentile(values: &mut [u64], percent: usize) -> u64 {
    values.sort_unstable();
    let index = (values.len() * percent / 100).min(values.len().saturating_sub(1));
    values.get(index).copied().unwrap_or(0)
}

/// hyper's own pooled HTTP/1.1 client (what `mcpsim run --live` uses), not reqwest: reqwest's layers over
/// the same client (URL re-parsing, redirect and decompression handling, header copies) made the driver cost
/// about 320 µs of CPU per two-request flow, on the cores the servers share (fleet_load, 2026-12-01).
type HttpClient = hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;
type PostError = Box<dyn std::error::Error + Send + Sync>;
/// How long one request may take before the run is stopped as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

struct Fleet {
    /// Parsed once: parsing a URL per request showed in the driver's profile.
    urls: Vec<hyper::Uri>,
    /// Pooled keep-alive connections, dropped after half the servers' header-read deadline of idleness (the
    /// servers close a connection idle that long, and a request sent on it as it closes fails mid-message).
    client: HttpClient,
    /// No pool: a retry goes out on a connection of its own.
    fresh: HttpClient,
    serial: AtomicU64,
    retries: Retries,
}

/// Requests that failed at the transport on a reused connection and were sent once more on a fresh one.
#[derive(Default)]
struct Retries {
    discover: AtomicU64,
    round_one: AtomicU64,
    /// Round 2s retried whose retry deleted the note: the first never reached the store.
    round_two: AtomicU64,
    /// Round 2s retried whose retry was answered `state_consumed` with `previousOutcome` the deletion of the
    /// flow's own note: the first was carried out and only its answer was lost. A replay, not a failure.
    round_two_replays: AtomicU64,
    /// Retries answered `claim_in_progress` (the first still running), asked again.
    in_progress: AtomicU64,
}

impl Retries {
    fn total(&self) -> u64 {
        [&self.discover, &self.round_one, &self.round_two, &self.round_two_replays].iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }
}

/// A conforming POST of `message` as alice: the JSON-RPC response, or the transport error.
async fn post_message(client: &HttpClient, url: &hyper::Uri, message: &serde_json::Value) -> Result<serde_json::Value, PostError> {
    let mut request = hyper::Request::post(url.clone());
    for (name, value) in conforming_headers(message, TOKEN) {
        request = request.header(name, value);
    }
    let request = request.body(Full::new(Bytes::from(serde_json::to_vec(message).expect("a JSON value serializes"))))?;
    let exchange = async {
        let response = client.request(request).await?;
        Ok::<Bytes, PostError>(response.into_body().collect().await?.to_bytes())
    };
    let body = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .unwrap_or_else(|_| panic!("{url}: no complete answer within {} s", REQUEST_TIMEOUT.as_secs()))?;
    Ok(serde_json::from_slice(&body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&body))))
}

/// Whether `error` is the client's keep-alive race: the request went out on a pooled connection that the
/// server had already closed (hyper's `IncompleteMessage`, or a reset / broken pipe on write).
fn is_reused_connection_error(error: &PostError) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error.as_ref());
    while let Some(cause) = source {
        if cause.downcast_ref::<hyper::Error>().is_some_and(|e| e.is_incomplete_message() || e.is_closed()) {
            return true;
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
            if matches!(io.kind(), BrokenPipe | ConnectionAborted | ConnectionReset | UnexpectedEof) {
                return true;
            }
        }
        source = cause.source();
    }
    false
}

/// Which request of a flow is posted, for the retry's accounting.
#[derive(Clone, Copy)]
enum Step {
    Discover,
    RoundOne,
    RoundTwo,
}

impl Fleet {
    /// Posts `message`; on a reused-connection failure, once more on a fresh connection (counted by the caller
    /// through the returned flag). Any other failure, or a second one, ends the run: it is the server's.
    async fn post(&self, url: &hyper::Uri, message: &serde_json::Value, step: Step) -> (serde_json::Value, bool) {
        match post_message(&self.client, url, message).await {
            Ok(response) => (response, false),
            Err(error) if is_reused_connection_error(&error) => {
                let counter = match step {
                    Step::Discover => &self.retries.discover,
                    Step::RoundOne => &self.retries.round_one,
                    // Counted once the retry's answer says which it was.
                    Step::RoundTwo => return (self.retry_round_two(url, message).await, true),
                };
                counter.fetch_add(1, Ordering::Relaxed);
                let response = post_message(&self.fresh, url, message)
                    .await
                    .unwrap_or_else(|e| panic!("a retry on a fresh connection failed too: {e} (first: {error})"));
                (response, true)
            }
            Err(error) => panic!("{url}: {error} (not a reused-connection failure: the server's)"),
        }
    }

    /// Round 2 again, on fresh connections, while the first is still being carried out (bounded).
    async fn retry_round_two(&self, url: &hyper::Uri, message: &serde_json::Value) -> serde_json::Value {
        for _ in 0..50 {
            let response = post_message(&self.fresh, url, message)
                .await
                .unwrap_or_else(|e| panic!("a round 2 retry on a fresh connection failed too: {e}"));
            if response["error"]["data"]["reason"] == "claim_in_progress" {
                self.retries.in_progress.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            return response;
        }
        panic!("a round 2 retry was answered claim_in_progress for a second");
    }
}

fn discover(id: u64) -> serde_json::Value {
    request(id as i64, "server/discover", json!({}))
}

/// Discover requests from `concurrency` workers, round robin over the instances, for `seconds`.
async fn measure_discover(fleet: &Arc<Fleet>, concurrency: usize, seconds: u64) -> Measurement {
    run_discover(fleet, concurrency, WARMUP_MS).await;
    run_discover(fleet, concurrency, seconds * 1000).await
}

async fn run_discover(fleet: &Arc<Fleet>, concurrency: usize, duration_ms: u64) -> Measurement {
    let clock = Stopwatch::start();
    let budget = OPERATIONS_MAX / concurrency;
    let workers: Vec<_> = (0..concurrency)
        .map(|worker| {
            let fleet = fleet.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut turn = worker;
                while clock.elapsed_us() < duration_ms * 1000 && latencies.len() < budget {
                    let id = fleet.serial.fetch_add(1, Ordering::Relaxed);
                    let started = Stopwatch::start();
                    let (response, _) = fleet.post(&fleet.urls[turn % INSTANCES], &discover(id), Step::Discover).await;
                    assert!(response["result"]["resultType"] == "complete", "{response}");
                    latencies.push(started.elapsed_us());
                    turn += 1;
                }
                latencies
            })
        })
        .collect();
    let mut latencies_us = Vec::new();
    for worker in workers {
        latencies_us.extend(worker.await.unwrap());
    }
    Measurement { latencies_us, elapsed_us: clock.elapsed_us(), ..Measurement::empty() }
}

/// A note body of about `bytes` bytes of Markdown.
fn body_of(bytes: usize, title: &str) -> String {
    let mut body = format!("# {title}\n\n");
    while body.len() < bytes {
        body.push_str("Met with the team; reviewed the plan, the budget and the open questions for next week.\n");
    }
    body.truncate(bytes.max(title.len() + 3));
    body
}

/// Adds `count` notes of `body_bytes` each in folders of alice's workspace no flow searches, in seeds of 1,000.
async fn add_background_notes(store: &Store, count: usize, body_bytes: usize) {
    let mut added = 0;
    while added < count {
        let batch: Vec<Note> = (added..count.min(added + 1_000))
            .map(|i| {
                let title = format!("Weekly notes {i:07}");
                Note {
                    id: format!("background-{i:07}"),
                    body: body_of(body_bytes, &title),
                    title,
                    uri: format!("{ALICE_WORKSPACE}/archive/{}/weekly-{i:07}.md", i % 100),
                    revision: String::new(),
                }
            })
            .collect();
        added += batch.len();
        store.stores.admin.seed(&batch).await.expect("the driver adds the background notes");
    }
}

/// Complete two-round flows from `concurrency` workers, in phases, until `seconds` of measured time.
async fn measure_flows(fleet: &Arc<Fleet>, store: &Store, concurrency: usize, seconds: u64, body_bytes: usize) -> Measurement {
    run_phase(fleet, store, concurrency, body_bytes).await;
    let wall = Stopwatch::start();
    let mut total = Measurement::empty();
    while total.elapsed_us < seconds * 1_000_000 && total.latencies_us.len() < OPERATIONS_MAX {
        let phase = run_phase(fleet, store, concurrency, body_bytes).await;
        let minute = (wall.elapsed_us() / 60_000_000) as usize;
        if total.minutes.len() <= minute {
            total.minutes.resize(minute + 1, (0, 0));
        }
        total.minutes[minute].0 += phase.latencies_us.len();
        total.minutes[minute].1 += phase.elapsed_us;
        total.latencies_us.extend(phase.latencies_us);
        total.round_one_us.extend(phase.round_one_us);
        total.round_two_us.extend(phase.round_two_us);
        total.elapsed_us += phase.elapsed_us;
        total.refusals += phase.refusals;
    }
    total.wall_us = wall.elapsed_us();
    total
}

/// Adds one note per flow (unmeasured), then runs the flows with the clock running.
async fn run_phase(fleet: &Arc<Fleet>, store: &Store, concurrency: usize, body_bytes: usize) -> Measurement {
    let mut batches: Vec<Vec<Note>> = Vec::new();
    for _ in 0..concurrency {
        let notes = (0..FLOWS_PER_WORKER_PER_PHASE)
            .map(|_| {
                let serial = fleet.serial.fetch_add(1, Ordering::Relaxed);
                // Fixed width: round 1 offers exactly this note.
                let title = format!("Load note {serial:09}");
                Note {
                    id: format!("load-{serial:09}"),
                    body: if body_bytes == 0 { String::new() } else { body_of(body_bytes, &title) },
                    title,
                    uri: format!("{ALICE_WORKSPACE}/load/{serial:09}.md"),
                    revision: String::new(),
                }
            })
            .collect();
        batches.push(notes);
    }
    let all: Vec<Note> = batches.iter().flatten().cloned().collect();
    store.stores.admin.seed(&all).await.expect("the driver adds the phase's notes");
    let clock = Stopwatch::start();
    let workers: Vec<_> = batches
        .into_iter()
        .enumerate()
        .map(|(worker, notes)| {
            let fleet = fleet.clone();
            tokio::spawn(async move {
                let mut timings = Vec::with_capacity(notes.len());
                let mut refusals = 0;
                for (index, note) in notes.into_iter().enumerate() {
                    let first = (worker + index) % INSTANCES;
                    let id = fleet.serial.fetch_add(2, Ordering::Relaxed) as i64;
                    let started = Stopwatch::start();
                    let (response, _) = fleet.post(&fleet.urls[first], &delete_round_one(id, &note.title), Step::RoundOne).await;
                    let round_one_us = started.elapsed_us();
                    let state = response["result"]["requestState"].as_str().unwrap_or_else(|| panic!("round 1: {response}")).to_string();
                    let confirmation = delete_round_two(id + 1, &note.title, &state, &note.id);
                    let (response, retried) = fleet.post(&fleet.urls[(first + 1) % INSTANCES], &confirmation, Step::RoundTwo).await;
                    if response["error"]["data"]["reason"] == "replay_store_full" {
                        refusals += 1;
                        continue;
                    }
                    if retried {
                        // Judged by what the server answered the retry: deleted now, or deleted by the first.
                        let previous = &response["error"]["data"]["previousOutcome"];
                        if response["error"]["data"]["reason"] == "state_consumed" {
                            assert!(
                                previous["outcome"] == "deleted" && previous["noteId"] == note.id.as_str(),
                                "round 2 replayed: {response}"
                            );
                            fleet.retries.round_two_replays.fetch_add(1, Ordering::Relaxed);
                        } else {
                            assert_eq!(response["result"]["structuredContent"]["deleted"], true, "round 2 retried: {response}");
                            fleet.retries.round_two.fetch_add(1, Ordering::Relaxed);
                        }
                    } else {
                        assert_eq!(response["result"]["structuredContent"]["deleted"], true, "round 2: {response}");
                    }
                    let total_us = started.elapsed_us();
                    timings.push((total_us, round_one_us, total_us - round_one_us));
                }
                (timings, refusals)
            })
        })
        .collect();
    let (mut latencies_us, mut round_one_us, mut round_two_us, mut refusals) = (Vec::new(), Vec::new(), Vec::new(), 0);
    for worker in workers {
        let (timings, refused) = worker.await.unwrap();
        for (total, one, two) in timings {
            latencies_us.push(total);
            round_one_us.push(one);
            round_two_us.push(two);
        }
        refusals += refused;
    }
    // The clock stops when the last worker is done (the spawned workers run while this task waits).
    let elapsed_us = clock.elapsed_us();
    Measurement { latencies_us, round_one_us, round_two_us, elapsed_us, refusals, ..Measurement::empty() }
}

/// One `mcpsim serve --http` process whose stderr (startup lines and the request log, `MCPSIM_LOG=info`) goes
/// to a file, not to a pipe the driver would have to hold in memory: a 5-minute row writes about a million lines.
struct Server {
    child: std::process::Child,
    url: String,
    log: std::path::PathBuf,
}

impl Server {
    fn start(arguments: &[&str], log: std::path::PathBuf) -> Server {
        let file = std::fs::File::create(&log).expect("the request log file can be created");
        let binary = std::env::var_os("MCPSIM_FLEET_BIN").unwrap_or_else(|| BIN.into());
        let child = std::process::Command::new(binary)
            .args(["serve", "--http", "127.0.0.1:0"])
            .args(arguments)
            .env("MCPSIM_LOG", "info")
            .env_remove("MCPSIM_STORE")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(file)
            .spawn()
            .expect("the mcpsim binary starts");
        // Owned by the handle at once: if the server never announces itself, dropping the handle kills it.
        let mut server = Server { child, url: String::new(), log };
        let waited = Stopwatch::start();
        loop {
            let text = std::fs::read_to_string(&server.log).unwrap_or_default();
            if let Some(line) = text.lines().find_map(|line| line.strip_prefix("listening on ")) {
                server.url = line.to_string();
                return server;
            }
            assert!(waited.elapsed_us() < WAIT.as_micros() as u64, "no 'listening on' line in {}: {text}", server.log.display());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// User + system CPU seconds the process has used so far.
    fn cpu_seconds(&self) -> f64 {
        cpu_seconds_of(&format!("/proc/{}/stat", self.child.id()))
    }

    /// SIGTERM, then a bounded wait; whether it exited cleanly.
    fn terminate(mut self) -> bool {
        let sent = std::process::Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().expect("kill runs");
        assert!(sent.success());
        let waited = Stopwatch::start();
        while waited.elapsed_us() < WAIT.as_micros() as u64 {
            if let Some(status) = self.child.try_wait().expect("the child can be waited for") {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        false
    }
}

impl Drop for Server {
    /// A run that panics leaves no server running (after `terminate`, the process is already gone).
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// User + system CPU seconds from a `/proc/…/stat` file (0 where there is none: not Linux).
fn cpu_seconds_of(stat: &str) -> f64 {
    let Ok(text) = std::fs::read_to_string(stat) else { return 0.0 };
    // Fields after the command name (which may contain spaces, so split after its closing parenthesis):
    // state is field 3, utime 14 and stime 15.
    let fields: Vec<&str> = text.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    let ticks: u64 = [11, 12].iter().filter_map(|&i| fields.get(i)?.parse::<u64>().ok()).sum();
    // SAFETY: sysconf has no preconditions; it reads a constant of the system.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1);
    ticks as f64 / per_second as f64
}

/// CPU seconds so far of the fleet's processes together, and of this driver.
fn fleet_cpu_seconds(processes: &[Server]) -> (f64, f64) {
    (processes.iter().map(Server::cpu_seconds).sum(), cpu_seconds_of("/proc/self/stat"))
}

/// The 1-minute load average (`/proc/loadavg`), or "?" where there is none.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg").ok().and_then(|text| text.split_whitespace().next().map(str::to_string)).unwrap_or("?".into())
}

fn milliseconds(us: u64) -> String {
    format!("{:.2}", us as f64 / 1000.0)
}

/// p50 and mean of `samples` (microseconds), as "p50 X ms, mean Y ms (Z/s)".
fn describe_syncs(samples: &mut [u64]) -> String {
    let mean = samples.iter().sum::<u64>() as f64 / samples.len().max(1) as f64;
    let p50 = percentile(samples, 50);
    format!(
        "p50 {} ms, p99 {} ms, mean {:.3} ms: {:.0} per second",
        milliseconds(p50),
        milliseconds(percentile(samples, 99)),
        mean / 1000.0,
        1e6 / mean.max(1.0)
    )
}

/// The disk's sync floor beside the fleet's databases: `syncs` fdatasyncs of a 512-byte write appended to a
/// file (the file grows: the sync also writes its size) and overwriting a file in place (what a WAL reused
/// after a checkpoint sees), then `syncs` one-row SQLite commits in WAL mode with synchronous=FULL and with
/// NORMAL, on a WAL already grown (as the fleet's is after its first checkpoint).
fn measure_sync_floor(syncs: usize) {
    use std::io::{Seek, Write};
    let directory = TempDir::new_in(private_temp());
    println!("sync floor: {syncs} of each, in {} (load average {})", directory.path().display(), load_average());
    for (label, in_place) in [("appended to a file", false), ("overwriting a file in place", true)] {
        let mut file = std::fs::File::create(directory.path().join("sync-floor.bin")).expect("a file beside the databases");
        if in_place {
            file.write_all(&vec![0_u8; 512 * syncs]).expect("the file is filled");
            file.sync_all().expect("and synced");
            file.rewind().expect("and rewound");
        }
        let mut samples = Vec::with_capacity(syncs);
        for _ in 0..syncs {
            let clock = Stopwatch::start();
            file.write_all(&[0x5a; 512]).expect("the write succeeds");
            file.sync_data().expect("fdatasync succeeds");
            samples.push(clock.elapsed_us());
        }
        println!("- fdatasync of 512 bytes {label}: {}", describe_syncs(&mut samples));
    }
    for synchronous in ["FULL", "NORMAL"] {
        let connection = rusqlite::Connection::open(directory.path().join(format!("sync-{synchronous}.db"))).expect("SQLite opens");
        let mode: String = connection.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0)).expect("WAL");
        assert_eq!(mode, "wal");
        connection.pragma_update(None, "synchronous", synchronous).expect("synchronous is set");
        // As the store sets it (src/stores/sqlite.rs, SQLITE_WAL_CHECKPOINT_PAGES).
        connection.pragma_update(None, "wal_autocheckpoint", 10_000).expect("a checkpoint every 10,000 pages");
        connection.execute_batch("CREATE TABLE floor (id INTEGER PRIMARY KEY, value TEXT NOT NULL)").expect("the table");
        let commit = |index: usize| {
            let clock = Stopwatch::start();
            connection.execute("INSERT INTO floor (id, value) VALUES (?1, 'a small row')", [index as i64]).expect("one commit");
            clock.elapsed_us()
        };
        // Grow the WAL, then start it over: the measured commits overwrite it in place.
        (0..syncs).for_each(|index| {
            commit(index);
        });
        connection.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(())).expect("the WAL restarts");
        let mut samples: Vec<u64> = (syncs..2 * syncs).map(commit).collect();
        println!("- SQLite, WAL, synchronous={synchronous}, one-row commit: {}", describe_syncs(&mut samples));
    }
    println!("(load average after: {})", load_average());
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let options = parse_options();
    if let Some(syncs) = options.sync_floor {
        measure_sync_floor(syncs);
        return;
    }
    let secret = base64::engine::general_purpose::STANDARD.encode([0x5a_u8; 32]);
    let key_file = TempConfig::new(&format!("[[keys]]\nid = \"bench\"\nsecret_base64 = \"{secret}\"\n"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key_file.path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let deployment = TempConfig::new(&match options.replay_capacity {
        Some(capacity) => format!("{}\n[replay]\ncapacity = {capacity}\n", mcpsim::testing::DEMO_TOML),
        None => mcpsim::testing::DEMO_TOML.to_string(),
    });
    let state_ttl = options.state_ttl.map(|ttl| ttl.to_string());
    println!(
        "fleet_load: {INSTANCES} `mcpsim serve` processes per store, {} s measured per row, request log on (info); {} background notes, {}-byte bodies, state TTL {} s, replay capacity {}",
        options.seconds,
        options.notes,
        options.body_bytes,
        options.state_ttl.unwrap_or(300),
        options.replay_capacity.map_or("the store's default".to_string(), |c| c.to_string())
    );
    println!();
    println!("| store | concurrency | operation | per second | p50 ms | p99 ms | flow p50 / discover p50 |");
    println!("|---|---|---|---|---|---|---|");
    let mut sustained = Vec::new();
    for kind in &options.stores {
        let Some(store) = open_store(kind).await else {
            eprintln!("fleet_load: skipping {kind}: MCPSIM_TEST_POSTGRES_URL is not set (eval \"$(bash .ci/postgres.sh start)\")");
            continue;
        };
        add_background_notes(&store, options.notes, options.body_bytes).await;
        let logs = TempDir::new_in(private_temp());
        let processes: Vec<Server> = (0..INSTANCES)
            .map(|instance| {
                let mut arguments = vec![
                    "--store",
                    &store.argument,
                    "--durability",
                    store.durability,
                    "--key-file",
                    key_file.arg(),
                    "--config",
                    deployment.arg(),
                ];
                arguments.extend(["--replay-share", "100"]);
                if let Some(ttl) = &state_ttl {
                    arguments.extend(["--state-ttl", ttl]);
                }
                Server::start(&arguments, logs.path().join(format!("serve-{instance}.log")))
            })
            .collect();
        let pids: Vec<String> = processes.iter().map(|process| process.child.id().to_string()).collect();
        eprintln!("fleet_load: {}: serve processes {} (e.g. perf record -g -p PID)", store.label, pids.join(", "));
        let idle = Duration::from_millis(HEADER_READ_TIMEOUT_MS / 2);
        let fleet = Arc::new(Fleet {
            urls: processes.iter().map(|process| process.url.parse().expect("a server's URL parses")).collect(),
            client: hyper_util::client::legacy::Client::builder(TokioExecutor::new())
                .pool_timer(TokioTimer::new())
                .pool_idle_timeout(idle)
                .build_http(),
            fresh: hyper_util::client::legacy::Client::builder(TokioExecutor::new()).pool_max_idle_per_host(0).build_http(),
            serial: AtomicU64::new(1),
            retries: Retries::default(),
        });
        let mut refused = 0;
        for &concurrency in &options.concurrencies {
            // The floor needs no long run: at most 5 s however long the flows run.
            let mut floor = measure_discover(&fleet, concurrency, options.seconds.min(5)).await;
            let (load_before, cpu_before) = (load_average(), fleet_cpu_seconds(&processes));
            let mut flows = measure_flows(&fleet, &store, concurrency, options.seconds, options.body_bytes).await;
            let (load_after, cpu_after) = (load_average(), fleet_cpu_seconds(&processes));
            let (floor_p50, flow_p50) = (floor.percentile_us(50), flows.percentile_us(50));
            println!(
                "| {} | {concurrency} | server/discover | {:.0} | {} | {} | |",
                store.label,
                floor.per_second(),
                milliseconds(floor_p50),
                milliseconds(floor.percentile_us(99))
            );
            println!(
                "| {} | {concurrency} | notes_delete, 2 rounds | {:.0} | {} | {} | {:.1}× |",
                store.label,
                flows.per_second(),
                milliseconds(flow_p50),
                milliseconds(flows.percentile_us(99)),
                flow_p50 as f64 / floor_p50.max(1) as f64
            );
            for (round, latencies) in [("round 1", &mut flows.round_one_us), ("round 2", &mut flows.round_two_us)] {
                let (p50, p99) = (percentile(latencies, 50), percentile(latencies, 99));
                println!("| {} | {concurrency} | notes_delete, {round} | | {} | {} | |", store.label, milliseconds(p50), milliseconds(p99));
            }
            refused += flows.refusals;
            let minutes: Vec<String> =
                flows.minutes.iter().map(|(count, us)| format!("{:.0}", *count as f64 * 1_000_000.0 / (*us).max(1) as f64)).collect();
            let confirmed = flows.latencies_us.len();
            let (servers_cpu, driver_cpu) = (cpu_after.0 - cpu_before.0, cpu_after.1 - cpu_before.1);
            sustained.push(format!(
                "{} × {concurrency}: {confirmed} confirmed deletions in {:.0} s measured ({:.0} s wall clock: {:.0}/s with note seeding), {} capacity refusals; per minute (measured): {}; \
                 load average {load_before} → {load_after}; CPU during the flows (note seeding included) {servers_cpu:.1} s in the {INSTANCES} servers, {driver_cpu:.1} s in the driver ({:.0} µs of server CPU and {:.0} µs of the driver's per confirmed deletion)",
                store.label,
                flows.elapsed_us as f64 / 1e6,
                flows.wall_us as f64 / 1e6,
                confirmed as f64 * 1e6 / flows.wall_us.max(1) as f64,
                flows.refusals,
                minutes.join(", "),
                servers_cpu * 1e6 / confirmed.max(1) as f64,
                driver_cpu * 1e6 / confirmed.max(1) as f64,
            ));
        }
        let retries = &fleet.retries;
        sustained.push(format!(
            "{}: {} requests retried on a fresh connection after a reused one failed (discover {}, round 1 {}, round 2 {} deleted on the retry, {} replays answered state_consumed with the deletion; {} retries answered claim_in_progress and asked again); {} nonces held at the end, replay capacity {}",
            store.label,
            retries.total(),
            retries.discover.load(Ordering::Relaxed),
            retries.round_one.load(Ordering::Relaxed),
            retries.round_two.load(Ordering::Relaxed),
            retries.round_two_replays.load(Ordering::Relaxed),
            retries.in_progress.load(Ordering::Relaxed),
            store.stores.admin.nonce_count().await.unwrap(),
            options.replay_capacity.map_or("the store's default".to_string(), |c| c.to_string()),
        ));
        let (mut logged, mut commits) = (Vec::new(), Vec::new());
        for process in processes {
            let log = process.log.clone();
            assert!(process.terminate(), "a fleet process failed to stop cleanly; its log: {}", log.display());
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            logged.push(format!("{} lines ({:.1} MB)", text.lines().count(), text.len() as f64 / 1e6));
            // What the store's group commit did in this process (logged when it closes the store).
            if let Some(line) = text.lines().find_map(|line| line.split_once("group commit: ").map(|(_, rest)| rest)) {
                commits.push(line.to_string());
            }
        }
        sustained.push(format!(
            "{}: request logs (each serve's stderr, MCPSIM_LOG=info, to {}/serve-N.log, removed after the run): {}",
            store.label,
            logs.path().display(),
            logged.join(", ")
        ));
        for (instance, line) in commits.iter().enumerate() {
            sustained.push(format!("{}: process {instance}'s group commit: {line}", store.label));
        }
        let remaining = store.stores.admin.list().await.unwrap().len();
        assert_eq!(remaining, options.notes + refused, "every flow deleted its note, unless refused; the background notes stay");
        if let Some((server, name)) = &store.database {
            store.stores.admin.close().await.unwrap();
            drop_database(server, name).await;
        }
    }
    println!();
    for line in sustained {
        println!("- {line}");
    }
}
