//! Load on a live fleet: 3 separate `mcpsim serve` processes (release build) sharing one store and one key
//! file, driven over loopback HTTP.
//!
//! ```sh
//! cargo bench --bench fleet_load                                  # SQLite; PostgreSQL too if configured
//! eval "$(bash .ci/postgres.sh start)" && cargo bench --bench fleet_load   # ... with a local PostgreSQL
//! cargo bench --bench fleet_load -- --store sqlite --seconds 5 --concurrency 1,16
//! # A deployment's load: 1 KiB bodies, states living 10 s (nonces are kept 70 s, so a 90 s run goes past the
//! # replay store's retention and prunes as it claims), a capacity sized for it. `--notes N` adds N more notes
//! # first; the driver re-seeds between phases through `StoreAdmin::seed`, whose listing comparison is
//! # quadratic in the store's size, so with thousands of notes the wall clock goes to seeding, not to flows.
//! cargo bench --bench fleet_load -- --store sqlite-relaxed,sqlite --concurrency 16 --seconds 90 \
//!     --body-bytes 1024 --state-ttl 10 --replay-capacity 200000
//! ```
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
//! Requests go to 127.0.0.1 only; every run is bounded in time and in count. Output is a Markdown table,
//! then for each flow row: refusals (`replay_store_full`, counted, not fatal), the rate over wall-clock time
//! (note seeding between phases included) and the measured rate of each minute.

// Shared with the end-to-end tests: the process handle and request builders.
#[path = "../tests/e2e_support/mod.rs"]
mod e2e_support;
#[allow(dead_code)] // Shared with the store tests: temp directories and throwaway PostgreSQL databases.
#[path = "../tests/stores/support.rs"]
mod store_support;

use base64::Engine;
use e2e_support::{delete_round_one, delete_round_two, post_message, request, HttpServer, TempConfig, ALICE_WORKSPACE};
use mcpsim::framework::ports::Note;
use mcpsim::stores::memory::ReplayLimits;
use mcpsim::stores::system::SystemClock;
use mcpsim::stores::{open, StoreSpec, Stores};
use mcpsim::transport::Stopwatch;
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
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
}

fn parse_options() -> Options {
    let stores = ["sqlite", "sqlite-relaxed", "sqlite-tmpfs", "postgres", "postgres-relaxed"].map(String::from).to_vec();
    let mut options =
        Options { stores, seconds: 5, concurrencies: vec![1, 16], notes: 0, body_bytes: 0, state_ttl: None, replay_capacity: None };
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
            other => panic!(
                "unknown argument {other}; use --store sqlite,sqlite-relaxed,sqlite-tmpfs,postgres,postgres-relaxed --seconds N --concurrency N[,N…] --notes N --body-bytes N --state-ttl SECONDS --replay-capacity N"
            ),
        }
    }
    options
}

/// A store shared by the fleet and the driver (which adds the notes).
struct Store {
    argument: String,
    durability: &'static str,
    label: &'static str,
    stores: Stores,
    _directory: Option<TempDir>,
    database: Option<(mcpsim::stores::spec::PostgresTarget, String)>,
}

async fn open_store(kind: &str) -> Option<Store> {
    let sqlite = |label: &'static str, directory: TempDir| {
        (format!("sqlite:{}", directory.path().join("fleet.db").display()), label, Some(directory), None)
    };
    let durability = if kind.ends_with("-relaxed") { "relaxed" } else { "durable" };
    let (argument, label, directory, database) = match kind {
        "sqlite" => sqlite("SQLite", TempDir::new()),
        "sqlite-relaxed" => sqlite("SQLite, relaxed", TempDir::new()),
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

    fn percentile_us(&mut self, percent: usize) -> u64 {
        self.latencies_us.sort_unstable();
        let index = (self.latencies_us.len() * percent / 100).min(self.latencies_us.len().saturating_sub(1));
        self.latencies_us.get(index).copied().unwrap_or(0)
    }
}

struct Fleet {
    urls: Vec<String>,
    client: reqwest::Client,
    serial: AtomicU64,
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
                    let (status, response) =
                        post_message(&fleet.client, &fleet.urls[turn % INSTANCES], TOKEN, &discover(id)).await.unwrap();
                    assert!(status == 200 && response["result"]["resultType"] == "complete", "{response}");
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
    Measurement { latencies_us, elapsed_us: clock.elapsed_us(), refusals: 0, minutes: Vec::new(), wall_us: 0 }
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
    let mut total = Measurement { latencies_us: Vec::new(), elapsed_us: 0, refusals: 0, minutes: Vec::new(), wall_us: 0 };
    while total.elapsed_us < seconds * 1_000_000 && total.latencies_us.len() < OPERATIONS_MAX {
        let phase = run_phase(fleet, store, concurrency, body_bytes).await;
        let minute = (wall.elapsed_us() / 60_000_000) as usize;
        if total.minutes.len() <= minute {
            total.minutes.resize(minute + 1, (0, 0));
        }
        total.minutes[minute].0 += phase.latencies_us.len();
        total.minutes[minute].1 += phase.elapsed_us;
        total.latencies_us.extend(phase.latencies_us);
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
                let mut latencies = Vec::with_capacity(notes.len());
                let mut refusals = 0;
                for (index, note) in notes.into_iter().enumerate() {
                    let first = (worker + index) % INSTANCES;
                    let id = fleet.serial.fetch_add(2, Ordering::Relaxed) as i64;
                    let started = Stopwatch::start();
                    let (_, response) =
                        post_message(&fleet.client, &fleet.urls[first], TOKEN, &delete_round_one(id, &note.title)).await.unwrap();
                    let state = response["result"]["requestState"].as_str().unwrap_or_else(|| panic!("round 1: {response}")).to_string();
                    let confirmation = delete_round_two(id + 1, &note.title, &state, &note.id);
                    let (_, response) =
                        post_message(&fleet.client, &fleet.urls[(first + 1) % INSTANCES], TOKEN, &confirmation).await.unwrap();
                    if response["error"]["data"]["reason"] == "replay_store_full" {
                        refusals += 1;
                        continue;
                    }
                    assert_eq!(response["result"]["structuredContent"]["deleted"], true, "round 2: {response}");
                    latencies.push(started.elapsed_us());
                }
                (latencies, refusals)
            })
        })
        .collect();
    let elapsed_us = clock.elapsed_us();
    let (mut latencies_us, mut refusals) = (Vec::new(), 0);
    for worker in workers {
        let (latencies, refused) = worker.await.unwrap();
        latencies_us.extend(latencies);
        refusals += refused;
    }
    Measurement { latencies_us, elapsed_us, refusals, minutes: Vec::new(), wall_us: 0 }
}

fn milliseconds(us: u64) -> String {
    format!("{:.2}", us as f64 / 1000.0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let options = parse_options();
    let secret = base64::engine::general_purpose::STANDARD.encode([0x5a_u8; 32]);
    let key_file = TempConfig::new(&format!("[[keys]]\nid = \"bench\"\nsecret_base64 = \"{secret}\"\n"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key_file.path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let deployment = TempConfig::new(&match options.replay_capacity {
        Some(capacity) => format!("{}\n[replay]\ncapacity = {capacity}\n", mcpsim::config::DEMO_TOML),
        None => mcpsim::config::DEMO_TOML.to_string(),
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
        let processes: Vec<HttpServer> = (0..INSTANCES)
            .map(|_| {
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
                HttpServer::start(&arguments)
            })
            .collect();
        let fleet = Arc::new(Fleet {
            urls: processes.iter().map(|process| process.url.clone()).collect(),
            client: reqwest::Client::builder().timeout(std::time::Duration::from_secs(30)).build().unwrap(),
            serial: AtomicU64::new(1),
        });
        let mut refused = 0;
        for &concurrency in &options.concurrencies {
            // The floor needs no long run: at most 5 s however long the flows run.
            let mut floor = measure_discover(&fleet, concurrency, options.seconds.min(5)).await;
            let mut flows = measure_flows(&fleet, &store, concurrency, options.seconds, options.body_bytes).await;
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
            refused += flows.refusals;
            let minutes: Vec<String> =
                flows.minutes.iter().map(|(count, us)| format!("{:.0}", *count as f64 * 1_000_000.0 / (*us).max(1) as f64)).collect();
            sustained.push(format!(
                "{} × {concurrency}: {} confirmed deletions in {:.0} s measured ({:.0} s wall clock: {:.0}/s with note seeding), {} capacity refusals; per minute (measured): {}",
                store.label,
                flows.latencies_us.len(),
                flows.elapsed_us as f64 / 1e6,
                flows.wall_us as f64 / 1e6,
                flows.latencies_us.len() as f64 * 1e6 / flows.wall_us.max(1) as f64,
                flows.refusals,
                minutes.join(", ")
            ));
        }
        for process in processes {
            assert!(process.terminate().success(), "a fleet process failed to stop cleanly");
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
