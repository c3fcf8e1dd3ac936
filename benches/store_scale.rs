//! A confirmation's cost against the size of the store: round 1 (`notes_delete` without an answer: find the
//! candidates, seal the state) and round 2 (accept: claim the nonce and delete the note in one store call)
//! through the whole pipeline, on two axes:
//!
//! - `store` (groups `store_scale/STORE`): stores holding 10, 10^3, 10^5 and 10^6 notes, the asked workspace
//!   (alice's, as in the demo) holding the same notes at every size, the rest spread over 1,000 other
//!   workspaces. The cost should follow the workspace, not the store.
//! - `workspace` (groups `store_scale/STORE/in_workspace`): alice's workspace itself holding that many notes
//!   (the demo's and `Weekly notes N`), nothing elsewhere. Round 1 asks for "TPS report", which one note
//!   matches: with a title index its cost follows the matches, not the workspace.
//!
//! Bodies are about 300 bytes.
//!
//! ```sh
//! cargo bench --bench store_scale                       # memory and SQLite
//! MCPSIM_TEST_POSTGRES_URL=postgres://… cargo bench --bench store_scale   # and PostgreSQL
//! MCPSIM_BENCH_SIZES=10,1000 cargo bench --bench store_scale             # fewer sizes
//! MCPSIM_BENCH_STORES=postgres cargo bench --bench store_scale           # some stores only (memory,sqlite,postgres)
//! MCPSIM_BENCH_AXIS=workspace cargo bench --bench store_scale            # one axis only (store,workspace)
//! ```
//!
//! SQLite is durable (`synchronous=FULL`), so round 2 includes the disk's sync; filler notes are inserted in
//! one transaction outside the measurement. Reduced samples (10 per point, 2 s) keep the run to minutes.
//!
//! On the `workspace` axis, `round_1_cpu` measures round 1 in CPU time rather than wall-clock time (Linux only):
//! the bench process's every thread (`CLOCK_PROCESS_CPUTIME_ID`: the runtime's workers and SQLite's blocking
//! threads), plus, for PostgreSQL on this machine, the server's backends serving the bench's role and database
//! (each read through its own CPU clock; not the server's background processes, whose autovacuum and
//! checkpoints after the fill are no part of round 1). CPU time is what other processes
//! competing for the cores do not inflate, so its ratios hold on a shared machine where wall-clock medians
//! move by ±30%:
//!
//! ```sh
//! MCPSIM_BENCH_AXIS=workspace MCPSIM_BENCH_SIZES=10,1000,100000 cargo bench --bench store_scale -- round_1_cpu
//! ```

use criterion::{BatchSize, BenchmarkId, Criterion};
use mcpsim::testing::handle_message;
use mcpsim::testing::Deployment;
use mcpsim::testing::KeyRing;
use mcpsim::testing::NotesServer;
use mcpsim::testing::{fold_title, note_index_key, Note, NoteStore, ReplayStore};
use mcpsim::testing::{notes_server, NotesPorts};
use mcpsim::testing::{open, StoreAdmin, StoreSpec};
use mcpsim::testing::{MemoryNoteStore, MemoryReplayStore, ReplayLimits};
use mcpsim::testing::{OsNonces, SystemClock};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// CPU time, in nanoseconds, of the clock `clock` (`None` where it cannot be read).
fn cpu_clock_ns(clock: libc::clockid_t) -> Option<u64> {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime only writes the timespec we pass, which lives on this stack frame.
    let status = unsafe { libc::clock_gettime(clock, &mut now) };
    (status == 0).then(|| now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64)
}

/// CPU time every thread of this process has run.
fn process_cpu_ns() -> Option<u64> {
    cpu_clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// CPU time process `pid` (all its threads) has run; `None` once it has exited or where it cannot be read.
fn other_process_cpu_ns(pid: libc::pid_t) -> Option<u64> {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: clock_getcpuclockid only writes the clock id we pass, which lives on this stack frame.
    if unsafe { libc::clock_getcpuclockid(pid, &mut clock) } != 0 {
        return None;
    }
    cpu_clock_ns(clock)
}

/// The parent process id in `/proc/PID/stat` (its fourth field, after the command in parentheses).
fn parent_of(pid: libc::pid_t) -> Option<libc::pid_t> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].split_whitespace().nth(1)?.parse().ok()
}

/// A local PostgreSQL server's backends serving one role and database: the store's pool.
struct ServerProcesses {
    postmaster: libc::pid_t,
    /// How such a backend's command line starts: `postgres: ROLE DATABASE ` (then the client's address).
    title: String,
}

impl ServerProcesses {
    /// The server behind `url`, found from a backend's pid; `None` (with a note on stderr) when that backend is
    /// not a process on this machine (a remote server, another pid namespace).
    async fn find(url: &str) -> Option<ServerProcesses> {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.ok()?;
        tokio::spawn(connection);
        let row = client.query_one("SELECT pg_backend_pid(), current_user::text, current_database()::text", &[]).await.ok()?;
        let (backend, role, database): (i32, String, String) = (row.get(0), row.get(1), row.get(2));
        let title = format!("postgres: {role} {database} ");
        let local = std::fs::read(format!("/proc/{backend}/cmdline")).is_ok_and(|line| line.starts_with(title.as_bytes()));
        let found = local.then(|| parent_of(backend)).flatten().map(|postmaster| ServerProcesses { postmaster, title });
        if found.is_none() {
            eprintln!("store_scale: PostgreSQL's backend {backend} is not a process here: round_1_cpu counts this process only");
        }
        found
    }

    /// The backends now.
    fn pids(&self) -> Vec<libc::pid_t> {
        let mut pids = Vec::new();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            if let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<libc::pid_t>().ok()) {
                let serves = || std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|line| line.starts_with(self.title.as_bytes()));
                if parent_of(pid) == Some(self.postmaster) && serves() {
                    pids.push(pid);
                }
            }
        }
        pids
    }

    /// CPU time `pids` have run: the ones still alive at both readings are what a measurement compares.
    fn cpu_ns(pids: &[libc::pid_t]) -> Vec<Option<u64>> {
        pids.iter().map(|&pid| other_process_cpu_ns(pid)).collect()
    }
}

const ALICE: &str = "file:///Users/alice/Documents/Notes";

fn body(i: usize) -> String {
    format!("# Weekly notes {i}\n\n{}\n", "Met with the team; reviewed the plan, the budget and the open questions. ".repeat(4))
}

/// The `i`-th filler note: outside alice's workspace, in one of 1,000 others.
fn filler(i: usize) -> Note {
    Note {
        id: format!("filler-{i}"),
        title: format!("Weekly notes {i}"),
        uri: format!("file:///Users/user-{}/Notes/weekly-{i}.md", i % 1000),
        body: body(i),
        revision: String::new(),
    }
}

/// The `i`-th filler note of alice's own workspace.
fn filler_inside(i: usize) -> Note {
    Note { uri: format!("{ALICE}/weekly-{i}.md"), ..filler(i) }
}

/// Where the fillers go: the rest of the store, or the asked workspace.
#[derive(Clone, Copy, PartialEq)]
enum Axis {
    Store,
    Workspace,
}

/// The demo's notes and fillers up to `size` notes in all.
fn notes_of(size: usize, axis: Axis) -> Vec<Note> {
    let demo = Deployment::demo().notes();
    let fillers = size.saturating_sub(demo.len());
    let filler = if axis == Axis::Store { filler } else { filler_inside };
    demo.into_iter().chain((0..fillers).map(filler)).collect()
}

fn call(arguments: Value, extra: Value) -> Vec<u8> {
    let mut params = json!({
        "_meta": { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": { "elicitation": { "form": {} } } },
        "name": "notes_delete",
        "arguments": arguments,
    });
    if let Value::Object(extra) = extra {
        params.as_object_mut().unwrap().extend(extra);
    }
    json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params }).to_string().into_bytes()
}

/// A server over `notes` and `replay`, with a fixed key.
fn server(notes: Arc<dyn NoteStore>, replay: Arc<dyn ReplayStore>) -> NotesServer {
    let config = Deployment::demo().notes_config(KeyRing::new("bench", vec![7; 32]).unwrap(), None).unwrap();
    notes_server(
        Arc::new(config),
        NotesPorts { notes, replay, clock: Arc::new(SystemClock), nonces: Arc::new(OsNonces), out_of_band: None },
    )
}

/// A store under test: its server, how to add a note outside the measurement, and the database server's
/// processes whose CPU time round 1 costs too (PostgreSQL's).
struct Subject {
    server: NotesServer,
    add: Box<dyn Fn(Note) + Send + Sync>,
    database: Option<ServerProcesses>,
}

fn memory_subject(notes: Vec<Note>) -> Subject {
    let notes = Arc::new(MemoryNoteStore::new(notes));
    let replay = Arc::new(MemoryReplayStore::new(notes.clone(), Arc::new(SystemClock), ReplayLimits::with_share(10_000_000, 100, 60_000)));
    let adding = notes.clone();
    Subject { server: server(notes, replay), add: Box::new(move |note| adding.upsert(note)), database: None }
}

async fn database_subject(spec: StoreSpec, notes: Vec<Note>, bulk: impl AsyncFnOnce(&[Note])) -> (Subject, Arc<dyn StoreAdmin>) {
    let stores = open(&spec, Arc::new(SystemClock), ReplayLimits::with_share(10_000_000, 100, 60_000)).await.expect("open the store");
    bulk(&notes).await;
    let admin = stores.admin.clone();
    let adding = stores.admin.clone();
    let handle = tokio::runtime::Handle::current();
    let add = Box::new(move |note: Note| {
        let adding = adding.clone();
        // Called from the bench's own thread, outside the runtime.
        handle.block_on(async move { adding.upsert(note).await.unwrap() })
    });
    (Subject { server: server(stores.notes, stores.replay), add, database: None }, admin)
}

/// Inserts `notes` into a fresh SQLite file in one transaction (the store's own upsert takes one each).
fn sqlite_bulk(path: &std::path::Path, notes: &[Note]) {
    let mut connection = rusqlite::Connection::open(path).unwrap();
    let transaction = connection.transaction().unwrap();
    {
        let mut insert = transaction
            .prepare("INSERT INTO notes (id, position, title, uri, body, uri_key, title_fold) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)")
            .unwrap();
        for (position, note) in notes.iter().enumerate() {
            insert
                .execute(rusqlite::params![
                    note.id,
                    position as i64 + 1,
                    note.title,
                    note.uri,
                    note.body,
                    note_index_key(&note.uri),
                    fold_title(&note.title)
                ])
                .unwrap();
        }
    }
    transaction.commit().unwrap();
}

async fn postgres_bulk(url: &str, notes: &[Note]) {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client.batch_execute("BEGIN; DELETE FROM notes;").await.unwrap();
    for chunk in notes.chunks(5_000) {
        let mut columns: [Vec<String>; 5] = Default::default();
        for note in chunk {
            columns[0].push(note.id.clone());
            columns[1].push(note.title.clone());
            columns[2].push(note.uri.clone());
            columns[3].push(note.body.clone());
            columns[4].push(note_index_key(&note.uri).unwrap_or_default());
        }
        let folded: Vec<String> = chunk.iter().map(|note| fold_title(&note.title)).collect();
        client
            .execute(
                "INSERT INTO notes (id, position, title, uri, body, uri_key, title_fold)
                 SELECT i, nextval('note_positions'), t, u, b, k, f FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[]) AS x(i, t, u, b, k, f)",
                &[&columns[0], &columns[1], &columns[2], &columns[3], &columns[4], &folded],
            )
            .await
            .unwrap();
    }
    client.batch_execute("COMMIT; ANALYZE notes;").await.unwrap();
}

fn bench_subject(c: &mut Criterion, runtime: &tokio::runtime::Runtime, group: &str, size: usize, subject: &Subject, axis: Axis) {
    let round_one = call(json!({ "workspaceUri": ALICE, "title": "TPS report" }), json!({}));
    let first = runtime.block_on(handle_message(&subject.server, "alice", &round_one, None));
    let first = first.response.unwrap();
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    let mut group = c.benchmark_group(group);
    group.sample_size(10).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    group.bench_function(BenchmarkId::new("round_1", size), |b| {
        b.iter(|| runtime.block_on(handle_message(&subject.server, "alice", &round_one, None)))
    });
    if axis == Axis::Workspace && process_cpu_ns().is_some() {
        group.bench_function(BenchmarkId::new("round_1_cpu", size), |b| {
            b.iter_custom(|iterations| {
                // The server's backends are listed outside the measured span; one that ends within it (none
                // should: the pool keeps its connections) drops out of both readings.
                let pids = subject.database.as_ref().map(ServerProcesses::pids).unwrap_or_default();
                let server_before = ServerProcesses::cpu_ns(&pids);
                let before = process_cpu_ns().unwrap_or(0);
                for _ in 0..iterations {
                    std::hint::black_box(runtime.block_on(handle_message(&subject.server, "alice", &round_one, None)));
                }
                let spent = process_cpu_ns().unwrap_or(0).saturating_sub(before);
                let server_after = ServerProcesses::cpu_ns(&pids);
                let server: u64 = server_before
                    .iter()
                    .zip(&server_after)
                    .filter_map(|(before, after)| Some(after.as_ref()?.saturating_sub((*before)?)))
                    .sum();
                Duration::from_nanos(spent + server)
            })
        });
    }
    static NEXT: AtomicU64 = AtomicU64::new(0);
    group.bench_function(BenchmarkId::new("round_2", size), |b| {
        b.iter_batched(
            || {
                // A note of its own, its form asked for: outside the measurement.
                let k = NEXT.fetch_add(1, Ordering::Relaxed);
                let id = format!("bench-{k}");
                let title = format!("Bench note {k}");
                (subject.add)(Note {
                    id: id.clone(),
                    title: title.clone(),
                    uri: format!("{ALICE}/bench-{k}.md"),
                    body: body(0),
                    revision: String::new(),
                });
                let arguments = json!({ "workspaceUri": ALICE, "title": title });
                let asked = runtime.block_on(handle_message(&subject.server, "alice", &call(arguments.clone(), json!({})), None));
                let state = asked.response.unwrap()["result"]["requestState"].as_str().unwrap().to_string();
                let answer = json!({ "delete_choice": { "action": "accept", "content": { "note_id": id, "confirm": true } } });
                call(arguments, json!({ "requestState": state, "inputResponses": answer }))
            },
            |round_two| {
                let reply = runtime.block_on(handle_message(&subject.server, "alice", &round_two, None));
                debug_assert_eq!(reply.response.as_ref().unwrap()["result"]["structuredContent"]["outcome"], "deleted");
                reply
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let sizes: Vec<usize> = std::env::var("MCPSIM_BENCH_SIZES")
        .map(|sizes| sizes.split(',').map(|n| n.trim().parse().expect("MCPSIM_BENCH_SIZES: numbers")).collect())
        .unwrap_or_else(|_| vec![10, 1_000, 100_000, 1_000_000]);
    let stores: Vec<String> = std::env::var("MCPSIM_BENCH_STORES")
        .map(|stores| stores.split(',').map(|store| store.trim().to_string()).collect())
        .unwrap_or_else(|_| ["memory", "sqlite", "postgres"].map(String::from).to_vec());
    for store in &stores {
        assert!(
            ["memory", "sqlite", "postgres"].contains(&store.as_str()),
            "MCPSIM_BENCH_STORES: memory, sqlite or postgres, not {store:?}"
        );
    }
    let runs = |store: &str| stores.iter().any(|wanted| wanted == store);
    if runs("postgres") && std::env::var_os("MCPSIM_TEST_POSTGRES_URL").is_none() {
        eprintln!("store_scale: no PostgreSQL rows: MCPSIM_TEST_POSTGRES_URL is not set (eval \"$(bash .ci/postgres.sh start)\")");
    }
    let axes: Vec<Axis> = match std::env::var("MCPSIM_BENCH_AXIS").as_deref() {
        Err(_) => vec![Axis::Store, Axis::Workspace],
        Ok(axes) => axes
            .split(',')
            .map(|axis| match axis.trim() {
                "store" => Axis::Store,
                "workspace" => Axis::Workspace,
                other => panic!("MCPSIM_BENCH_AXIS: store or workspace, not {other:?}"),
            })
            .collect(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let directory = std::env::temp_dir().join(format!("mcpsim-store-scale-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    for &axis in &axes {
        let group = |store: &str| match axis {
            Axis::Store => format!("store_scale/{store}"),
            Axis::Workspace => format!("store_scale/{store}/in_workspace"),
        };
        for &size in &sizes {
            if runs("memory") {
                let subject = memory_subject(notes_of(size, axis));
                bench_subject(&mut c, &runtime, &group("memory"), size, &subject, axis);
                drop(subject);
            }

            if runs("sqlite") {
                let path = directory.join(format!("notes-{size}.db"));
                let spec: StoreSpec = format!("sqlite:{}", path.display()).parse().unwrap();
                let notes = notes_of(size, axis);
                let (subject, admin) = runtime.block_on(database_subject(spec, notes, async |notes: &[Note]| sqlite_bulk(&path, notes)));
                bench_subject(&mut c, &runtime, &group("sqlite"), size, &subject, axis);
                runtime.block_on(admin.close()).unwrap();
                drop(subject);
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
                }
            }

            if let Some(url) = std::env::var("MCPSIM_TEST_POSTGRES_URL").ok().filter(|_| runs("postgres")) {
                let spec: StoreSpec = format!("postgres:{url}").parse().unwrap();
                let notes = notes_of(size, axis);
                let (mut subject, admin) =
                    runtime.block_on(database_subject(spec, notes, async |notes: &[Note]| postgres_bulk(&url, notes).await));
                subject.database = runtime.block_on(ServerProcesses::find(&url));
                bench_subject(&mut c, &runtime, &group("postgres"), size, &subject, axis);
                runtime.block_on(admin.close()).unwrap();
            }
        }
    }
    let _ = std::fs::remove_dir_all(&directory);
    c.final_summary();
}
