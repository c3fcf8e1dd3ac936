//! The live fleet: separate `mcpsim serve` processes sharing one store (one SQLite file, or one PostgreSQL
//! database) and one key file, driven over real sockets.
//!
//! What it shows, on both stores:
//! - a retry sent to another process than round 1 completes (the state and the key ring are all it needs);
//! - one accepted confirmation fired at every process at once deletes exactly once, every other answer is
//!   `state_consumed` naming the deletion, and the database agrees (note gone, nonce recorded), round after
//!   round;
//! - a process killed with SIGKILL amid confirmations leaves every flow either untouched or complete (never a
//!   note deleted without its nonce, never a nonce held without its deletion), every lost answer is recovered
//!   by a retry on a survivor, and the survivors (and a replacement) keep serving.
//!
//! The PostgreSQL tests are `#[ignore]`d (reported as ignored by `cargo test`): run them with
//! `eval "$(bash .ci/postgres.sh start)"` and `cargo test --test fleet -- --ignored postgres` (CI does, in a
//! stage of its own). Each gets a fresh database, dropped afterwards.

mod e2e_support;
#[allow(dead_code)] // The store tests' plumbing; this file uses its temp directories and PostgreSQL helpers.
#[path = "stores/support.rs"]
mod store_support;

use base64::Engine;
use e2e_support::*;
use mcpsim::testing::KeyRing;
use mcpsim::testing::ReplayLimits;
use mcpsim::testing::SystemClock;
use mcpsim::testing::{open, StoreSpec, Stores};
use mcpsim::testing::{ClaimRecord, Note};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use store_support::{ScratchDatabase, TempDir};

/// Separate server processes in a fleet.
const PROCESSES: usize = 3;
/// Rounds of "one confirmation, every process at once".
const ROUNDS: usize = 200;
/// Confirmations in flight at the process that is killed.
const KILLED_FLOWS: usize = 40;
/// Flows confirmed at once per round of the group-commit attack, and its rounds.
const BATCHED_FLOWS: usize = 32;
const BATCHED_ROUNDS: usize = 3;
const ALICE: &str = "demo-alice";
const KEY_ID: &str = "fleet";
/// A test key, never a real one.
const KEY_BYTES: [u8; 32] = [0x2a; 32];

/// Where a fleet's store lives. A PostgreSQL database is dropped with it.
struct SharedStore {
    /// What `--store` (or `MCPSIM_STORE`) says.
    argument: String,
    /// The database password in `argument`, which no log line may repeat.
    password: Option<String>,
    spec: StoreSpec,
    _directory: Option<TempDir>,
    _database: Option<ScratchDatabase>,
}

impl SharedStore {
    fn sqlite() -> SharedStore {
        let directory = TempDir::new();
        let argument = format!("sqlite:{}", directory.path().join("fleet.db").display());
        SharedStore { spec: argument.parse().unwrap(), argument, password: None, _directory: Some(directory), _database: None }
    }

    /// A fresh database on the server named by `MCPSIM_TEST_POSTGRES_URL` (the test fails without one).
    async fn postgres() -> SharedStore {
        let database = ScratchDatabase::create().await;
        let (argument, password) = (database.argument.clone(), database.password.clone());
        SharedStore { spec: argument.parse().unwrap(), argument, password, _directory: None, _database: Some(database) }
    }
}

/// One `notes_delete` flow after round 1: the note it offered and the state to confirm it with.
struct Flow {
    note_id: String,
    title: String,
    state: String,
    nonce: String,
}

impl Flow {
    fn deleted_record(&self) -> ClaimRecord {
        ClaimRecord::Deleted { note_id: self.note_id.clone() }
    }
}

/// K processes on one store and one key file, plus the test's own handle on the store (the operator's view).
/// Fields drop in order: processes first, the database last.
struct Fleet {
    processes: Vec<Option<HttpServer>>,
    client: reqwest::Client,
    stores: Stores,
    key_ring: KeyRing,
    key_file: TempConfig,
    store: SharedStore,
    serial: AtomicI64,
}

impl Fleet {
    async fn start(store: SharedStore, processes: usize) -> Fleet {
        // Through `mcpsim seed`, with the store in the environment as an operator would keep a password.
        let (code, stdout, stderr) = run_with_env(&["seed"], &[("MCPSIM_STORE", &store.argument)]);
        assert_eq!(code, Some(0), "mcpsim seed failed: {stderr}");
        assert!(stdout.contains("7 inserted"), "{stdout}");
        let key_file = private_key_file(KEY_ID);
        let stores = open(&store.spec, Arc::new(SystemClock), ReplayLimits::default()).await.expect("the test opens the store");
        let mut fleet = Fleet {
            processes: Vec::new(),
            client: reqwest::Client::builder().timeout(WAIT).build().unwrap(),
            stores,
            key_ring: KeyRing::new(KEY_ID, KEY_BYTES.to_vec()).unwrap(),
            key_file,
            store,
            serial: AtomicI64::new(0),
        };
        for _ in 0..processes {
            let process = fleet.start_process();
            fleet.processes.push(Some(process));
        }
        fleet
    }

    fn start_process(&self) -> HttpServer {
        // All of alice's KILLED_FLOWS confirmations are in flight at one process at once: allow one principal
        // the listener's whole bound (the default share, 16 of 64, is for fairness, tested in http_limits).
        let share = "64";
        HttpServer::start(&["--store", &self.store.argument, "--key-file", self.key_file.arg(), "--http-principal-requests-max", share])
    }

    /// [`Fleet::start_process`] logging each SQLite group commit (`sqlite batch: N writes, committed: …`).
    fn start_process_logging_batches(&self) -> HttpServer {
        let arguments = ["--store", &self.store.argument, "--key-file", self.key_file.arg(), "--http-principal-requests-max", "64"];
        HttpServer::start_logging("127.0.0.1:0", &arguments, 1, "info,mcpsim::store=debug")
    }

    fn url(&self, process: usize) -> String {
        self.processes[process].as_ref().expect("the process is running").url.clone()
    }

    fn next_id(&self) -> i64 {
        self.serial.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Adds a fresh note of alice's (through the store, as an operator would) and runs round 1 for it on `process`.
    async fn open_flow(&self, process: usize) -> Flow {
        let serial = self.next_id();
        let note_id = format!("fleet-{serial:05}");
        // Fixed width: no title is a substring of another, so round 1 offers exactly this note.
        let title = format!("Fleet note {serial:05}");
        let uri = format!("{ALICE_WORKSPACE}/fleet/{serial:05}.md");
        self.stores
            .admin
            .upsert(Note { id: note_id.clone(), title: title.clone(), uri, body: String::new(), revision: String::new() })
            .await
            .unwrap();
        let (status, response) =
            post_message(&self.client, &self.url(process), ALICE, &delete_round_one(serial, &title)).await.expect("round 1 is answered");
        assert_eq!(status, 200, "{response}");
        let result = &response["result"];
        assert_eq!(result["resultType"], "input_required", "{response}");
        assert_eq!(
            result["inputRequests"]["delete_choice"]["params"]["requestedSchema"]["properties"]["note_id"]["enum"],
            json!([note_id])
        );
        let state = result["requestState"].as_str().expect("requestState is a string").to_string();
        let nonce = self.key_ring.verify(&state).expect("sealed with the fleet's key").nonce;
        Flow { note_id, title, state, nonce }
    }

    fn confirmation(&self, flow: &Flow) -> Value {
        delete_round_two(self.next_id(), &flow.title, &flow.state, &flow.note_id)
    }

    async fn confirm(&self, process: usize, flow: &Flow) -> Value {
        let (status, response) =
            post_message(&self.client, &self.url(process), ALICE, &self.confirmation(flow)).await.expect("round 2 is answered");
        assert_eq!(status, 200, "{response}");
        response
    }

    /// The same confirmation sent to every listed process at once; the answers in process order.
    async fn confirm_at_once(&self, processes: &[usize], flow: &Flow) -> Vec<Value> {
        let sending: Vec<_> = processes
            .iter()
            .map(|&process| {
                let (client, url, message) = (self.client.clone(), self.url(process), self.confirmation(flow));
                tokio::spawn(async move { post_message(&client, &url, ALICE, &message).await })
            })
            .collect();
        let mut answers = Vec::new();
        for sent in sending {
            let (status, response) = sent.await.unwrap().expect("every process answers");
            assert_eq!(status, 200, "{response}");
            answers.push(response);
        }
        answers
    }

    /// Every running process's log so far: one line per request, and never a secret.
    fn assert_logs_hold_no_secrets(&self, flow: &Flow) {
        for process in self.processes.iter().flatten() {
            let logs = process.stderr().join("\n");
            assert!(logs.contains("complete:deleted") || logs.contains("error -32602 state_consumed"), "requests are logged: {logs}");
            let mut secrets = vec![ALICE, flow.state.as_str(), flow.title.as_str(), ALICE_WORKSPACE];
            secrets.extend(self.store.password.as_deref());
            for secret in secrets {
                assert!(!logs.contains(secret), "the log must not contain {secret:?}");
            }
        }
    }

    async fn note_exists(&self, note_id: &str) -> bool {
        self.stores.admin.list().await.unwrap().iter().any(|note| note.id == note_id)
    }

    /// The database agrees that `flow` deleted its note: the note is gone and its nonce holds the deletion.
    async fn assert_completed_in_store(&self, flow: &Flow) {
        assert!(!self.note_exists(&flow.note_id).await, "{} is still in the store", flow.note_id);
        assert_eq!(self.stores.admin.nonce_record(&flow.nonce).await.unwrap(), Some(flow.deleted_record()), "nonce of {}", flow.note_id);
    }
}

/// A key file holding [`KEY_BYTES`] under `id`, readable by its owner only (as the startup check wants).
fn private_key_file(id: &str) -> TempConfig {
    let secret = base64::engine::general_purpose::STANDARD.encode(KEY_BYTES);
    let key_file = TempConfig::new(&format!("[[keys]]\nid = \"{id}\"\nsecret_base64 = \"{secret}\"\n"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key_file.path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    key_file
}

fn assert_consumed_by_deletion(response: &Value, flow: &Flow) {
    assert_eq!(reason(response), "state_consumed", "{response}");
    assert_eq!(response["error"]["code"], -32602, "{response}");
    assert_eq!(response["error"]["data"]["previousOutcome"], flow.deleted_record().to_json(), "{response}");
}

/// A retry on another process, then ROUNDS rounds of one confirmation fired at every process at once.
async fn confirmations_race_across_processes(store: SharedStore) {
    let fleet = Fleet::start(store, PROCESSES).await;

    // Round 1 on one process, round 2 on another alone: the state and the key ring are all a retry needs.
    for first in 0..PROCESSES {
        let flow = fleet.open_flow(first).await;
        let other = (first + 1) % PROCESSES;
        assert_deleted(&fleet.confirm(other, &flow).await, &flow.note_id);
        fleet.assert_completed_in_store(&flow).await;
    }

    let nonces_before = fleet.stores.admin.nonce_count().await.unwrap();
    let everyone: Vec<usize> = (0..PROCESSES).collect();
    let mut wins = [0usize; PROCESSES];
    let mut last = None;
    for round in 0..ROUNDS {
        let flow = fleet.open_flow(round % PROCESSES).await;
        let answers = fleet.confirm_at_once(&everyone, &flow).await;
        let deleted: Vec<usize> =
            (0..PROCESSES).filter(|&process| answers[process]["result"]["structuredContent"]["deleted"] == true).collect();
        assert_eq!(deleted.len(), 1, "round {round}: exactly one process deletes, answers: {answers:?}");
        assert_deleted(&answers[deleted[0]], &flow.note_id);
        for (process, answer) in answers.iter().enumerate().filter(|(process, _)| *process != deleted[0]) {
            assert!(answer.get("result").is_none(), "round {round}, process {process}: {answer}");
            assert_consumed_by_deletion(answer, &flow);
        }
        fleet.assert_completed_in_store(&flow).await;
        wins[deleted[0]] += 1;
        last = Some(flow);
    }
    assert_eq!(fleet.stores.admin.nonce_count().await.unwrap(), nonces_before + ROUNDS as u64, "one nonce per round, no more");
    fleet.assert_logs_hold_no_secrets(&last.expect("rounds ran"));
    // Which process wins is up to the scheduler; shown, not asserted.
    eprintln!("{}: deletions won per process over {ROUNDS} rounds: {wins:?}", fleet.store.spec);
}

/// What the store says about one flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// Note present, nonce unused: nothing happened.
    Untouched,
    /// Note gone, nonce recorded with the deletion.
    Completed,
}

async fn found_in_store(fleet: &Fleet, flow: &Flow) -> Found {
    let present = fleet.note_exists(&flow.note_id).await;
    let record = fleet.stores.admin.nonce_record(&flow.nonce).await.unwrap();
    match (present, record) {
        (true, None) => Found::Untouched,
        (false, Some(record)) if record == flow.deleted_record() => Found::Completed,
        (present, record) => panic!("{}: half a flow in the store: note present {present}, nonce record {record:?}", flow.note_id),
    }
}

/// Waits until the database has finished whatever the killed process had already sent it. A SQLite write
/// dies with its process; a PostgreSQL backend does not: a `COMMIT` that left the process before the kill is
/// still carried out (its WAL flush can outlast the kill), and a transaction left open is rolled back when its
/// backend notices the closed socket. Until then the store is not yet what the kill left behind.
async fn settle_after_kill(spec: &StoreSpec) {
    let StoreSpec::Postgres(target) = spec else { return };
    let (client, connection) = target.config().connect(tokio_postgres::NoTls).await.expect("the test database accepts a connection");
    let driver = tokio::spawn(connection);
    let busy_sql = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() \
                    AND state IN ('active', 'idle in transaction', 'idle in transaction (aborted)')";
    let mut settled = false;
    for _ in 0..SETTLE_POLLS_MAX {
        let busy: i64 = client.query_one(busy_sql, &[]).await.expect("pg_stat_activity is readable").get(0);
        if busy == 0 {
            settled = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(SETTLE_POLL_MS)).await;
    }
    drop(client);
    let _ = driver.await;
    assert!(settled, "the killed process's sessions were still busy after {} ms", SETTLE_POLLS_MAX * SETTLE_POLL_MS);
}

/// Polls of [`settle_after_kill`], and their spacing: 5 s at most.
const SETTLE_POLLS_MAX: u64 = 500;
const SETTLE_POLL_MS: u64 = 10;

/// SIGKILL one process while it holds confirmations in flight; check the store, recover, keep serving.
async fn a_killed_process_leaves_the_store_consistent(store: SharedStore) {
    let mut fleet = Fleet::start(store, PROCESSES).await;
    let victim = 0;
    let survivors: Vec<usize> = (1..PROCESSES).collect();
    let mut flows = Vec::new();
    for index in 0..KILLED_FLOWS {
        flows.push(fleet.open_flow(index % PROCESSES).await);
    }
    let nonces_before = fleet.stores.admin.nonce_count().await.unwrap();

    // Every confirmation goes to the victim at once; it is killed when a third of them have been answered.
    let (answered, mut answers) = tokio::sync::mpsc::unbounded_channel();
    for (index, flow) in flows.iter().enumerate() {
        let (client, url, message, answered) = (fleet.client.clone(), fleet.url(victim), fleet.confirmation(flow), answered.clone());
        tokio::spawn(async move {
            let _ = answered.send((index, post_message(&client, &url, ALICE, &message).await));
        });
    }
    drop(answered);
    let mut outcomes: Vec<Option<Value>> = vec![None; KILLED_FLOWS];
    let mut received = 0;
    while received < KILLED_FLOWS {
        let (index, outcome) = answers.recv().await.expect("every sender reports");
        received += 1;
        if let Ok((_, response)) = outcome {
            outcomes[index] = Some(response);
        }
        if outcomes.iter().flatten().count() == KILLED_FLOWS / 3 && fleet.processes[victim].is_some() {
            let status = fleet.processes[victim].take().unwrap().kill();
            assert!(!status.success(), "killed, not exited: {status:?}");
        }
    }
    assert!(fleet.processes[victim].is_none(), "the victim was killed");
    settle_after_kill(&fleet.store.spec).await;
    let lost = outcomes.iter().filter(|outcome| outcome.is_none()).count();
    assert!(lost > 0, "the kill must land while confirmations are in flight");

    // The store is consistent: every flow is untouched or complete, and every answer given was a deletion.
    let mut found = Vec::new();
    for (flow, outcome) in flows.iter().zip(&outcomes) {
        let state = found_in_store(&fleet, flow).await;
        if let Some(response) = outcome {
            assert_deleted(response, &flow.note_id);
            assert_eq!(state, Found::Completed, "{} was answered as deleted", flow.note_id);
        }
        found.push(state);
    }
    let completed = found.iter().filter(|state| **state == Found::Completed).count();
    assert_eq!(fleet.stores.admin.nonce_count().await.unwrap(), nonces_before + completed as u64, "no nonce without its deletion");

    // Every lost answer is recovered by retrying on a survivor: the deletion happens now, or the retry learns
    // that it already happened. No nonce is left blocking.
    let mut committed_but_unanswered = 0;
    for (index, flow) in flows.iter().enumerate().filter(|(index, _)| outcomes[*index].is_none()) {
        let response = fleet.confirm(survivors[index % survivors.len()], flow).await;
        match found[index] {
            Found::Untouched => assert_deleted(&response, &flow.note_id),
            Found::Completed => {
                assert_consumed_by_deletion(&response, flow);
                committed_but_unanswered += 1;
            }
        }
        fleet.assert_completed_in_store(flow).await;
    }
    assert_eq!(fleet.stores.admin.nonce_count().await.unwrap(), nonces_before + KILLED_FLOWS as u64);
    eprintln!(
        "{}: {KILLED_FLOWS} confirmations at the killed process: {} answered, {committed_but_unanswered} committed but unanswered, {} untouched; all recovered",
        fleet.store.spec,
        KILLED_FLOWS - lost,
        lost - committed_but_unanswered
    );

    // The survivors keep serving, and a replacement joins the same store and keys.
    fleet.processes[victim] = Some(fleet.start_process());
    for first in 0..PROCESSES {
        let flow = fleet.open_flow(first).await;
        assert_deleted(&fleet.confirm((first + 1) % PROCESSES, &flow).await, &flow.note_id);
        fleet.assert_completed_in_store(&flow).await;
    }
}

/// The largest `sqlite batch: N writes, committed: true` in `lines`.
fn largest_committed_batch(lines: &[String]) -> usize {
    lines
        .iter()
        .filter_map(|line| line.split_once("sqlite batch: ")?.1.strip_suffix(" writes, committed: true").map(str::to_string))
        .filter_map(|writes| writes.parse().ok())
        .max()
        .unwrap_or(0)
}

/// Group commit attacked from outside: two processes on one file are each sent their flows' confirmations all
/// at once (every fourth also to the other process; every eighth after its note was removed), and both are
/// killed with SIGKILL the moment the last answer has arrived. The store, reopened, holds every deletion a
/// client was told of; each confirmation deleted at most once (one `deleted` answer, any other `state_consumed`
/// naming that deletion); a refused one holds no nonce. The processes' own logs show commits that carried
/// several writes, so the batches were exercised, not bypassed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_answered_deletions_survive_a_kill_right_after_the_answers() {
    let mut fleet = Fleet::start(SharedStore::sqlite(), 0).await;
    let mut largest = 0;
    let mut held = fleet.stores.admin.nonce_count().await.unwrap();
    for round in 0..BATCHED_ROUNDS {
        fleet.processes = vec![Some(fleet.start_process_logging_batches()), Some(fleet.start_process_logging_batches())];
        let mut flows = Vec::new();
        for index in 0..BATCHED_FLOWS {
            flows.push(fleet.open_flow(index % 2).await);
        }
        let gone = |index: usize| index % 8 == 7;
        for (index, flow) in flows.iter().enumerate().filter(|(index, _)| gone(*index)) {
            assert!(fleet.stores.admin.remove(&flow.note_id).await.unwrap(), "{index}");
        }
        let mut sending = Vec::new();
        for (index, flow) in flows.iter().enumerate() {
            let targets = if index % 4 == 0 { vec![index % 2, (index + 1) % 2] } else { vec![index % 2] };
            for process in targets {
                let (client, url, message) = (fleet.client.clone(), fleet.url(process), fleet.confirmation(flow));
                sending.push((index, tokio::spawn(async move { post_message(&client, &url, ALICE, &message).await })));
            }
        }
        let mut answers: Vec<Vec<Value>> = vec![Vec::new(); BATCHED_FLOWS];
        for (index, sent) in sending {
            let (status, response) = sent.await.unwrap().expect("every confirmation is answered");
            assert_eq!(status, 200, "{response}");
            answers[index].push(response);
        }
        for process in 0..2 {
            let server = fleet.processes[process].take().expect("running");
            let lines = server.stderr();
            assert!(!server.kill().success(), "killed, not exited");
            largest = largest.max(largest_committed_batch(&lines));
        }

        // A store opened after the kill: what the disk holds.
        let reopened = open(&fleet.store.spec, Arc::new(SystemClock), ReplayLimits::default()).await.expect("the store reopens");
        let left: Vec<String> = reopened.admin.list().await.unwrap().into_iter().map(|note| note.id).collect();
        for (index, (flow, answered)) in flows.iter().zip(&answers).enumerate() {
            let record = reopened.admin.nonce_record(&flow.nonce).await.unwrap();
            assert!(!left.contains(&flow.note_id), "round {round}: {} is in the store", flow.note_id);
            if gone(index) {
                assert!(answered.iter().all(|answer| reason(answer) == "note_gone"), "round {round}: {answered:?}");
                assert_eq!(record, None, "round {round}: a refused confirmation holds no nonce");
                continue;
            }
            let deleted: Vec<&Value> = answered.iter().filter(|answer| answer["result"]["structuredContent"]["deleted"] == true).collect();
            assert_eq!(deleted.len(), 1, "round {round}: exactly one deletion per confirmation: {answered:?}");
            assert_deleted(deleted[0], &flow.note_id);
            for answer in answered.iter().filter(|answer| answer.get("result").is_none()) {
                assert_consumed_by_deletion(answer, flow);
            }
            assert_eq!(record, Some(flow.deleted_record()), "round {round}: the answered deletion's nonce survived the kill");
        }
        held += flows.iter().enumerate().filter(|(index, _)| !gone(*index)).count() as u64;
        assert_eq!(reopened.admin.nonce_count().await.unwrap(), held, "round {round}: one nonce per deletion, no more");
        reopened.admin.close().await.unwrap();
    }
    assert!(largest > 1, "no commit carried more than one write: the batches were never exercised");
    eprintln!("group commit: the largest committed batch held {largest} writes; every answered deletion survived SIGKILL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_fleet_confirmations_race_across_processes() {
    confirmations_race_across_processes(SharedStore::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MCPSIM_TEST_POSTGRES_URL (CI starts one with .ci/postgres.sh)"]
async fn postgres_fleet_confirmations_race_across_processes() {
    confirmations_race_across_processes(SharedStore::postgres().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_fleet_survives_a_killed_process() {
    a_killed_process_leaves_the_store_consistent(SharedStore::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MCPSIM_TEST_POSTGRES_URL (CI starts one with .ci/postgres.sh)"]
async fn postgres_fleet_survives_a_killed_process() {
    a_killed_process_leaves_the_store_consistent(SharedStore::postgres().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_process_runs_instances_sharing_its_store_and_key_ring() {
    // Memory store and a random key: only the instances of this one process can share them.
    let server = HttpServer::start_instances(&["--instances", "3"], 3);
    let client = reqwest::Client::builder().timeout(WAIT).build().unwrap();
    let urls = server.urls.clone();
    assert_eq!(urls.iter().collect::<std::collections::BTreeSet<_>>().len(), 3, "three listeners: {urls:?}");

    let (_, response) = post_message(&client, &urls[0], ALICE, &round_one(1)).await.unwrap();
    let state = state_of(&response);
    let (_, response) = post_message(&client, &urls[2], ALICE, &round_two(2, &state, "note-7")).await.unwrap();
    assert_deleted(&response, "note-7");
    let (_, response) = post_message(&client, &urls[1], ALICE, &round_two(3, &state, "note-7")).await.unwrap();
    assert_eq!(reason(&response), "state_consumed", "one replay store for every instance: {response}");
    for (id, url) in (4..).zip(&urls) {
        let (_, response) = post_message(&client, url, ALICE, &resources_list(id)).await.unwrap();
        assert_eq!(resource_names(&response), ["note-3", "note-14", "note-99"], "one note store for every instance");
    }

    let (status, logs) = server.terminate_with_stderr();
    assert!(status.success(), "{status:?}");
    let logs = logs.join("\n");
    for url in &urls {
        let address = url.trim_start_matches("http://").trim_end_matches("/mcp");
        assert!(logs.contains(&format!("listen={address}")), "each instance labels its request lines: {logs}");
    }
    assert!(logs.contains("3 instances; notes server; store: memory"), "{logs}");
    assert!(logs.contains("store closed: memory"), "{logs}");
    for secret in [ALICE, &state, ALICE_WORKSPACE] {
        assert!(!logs.contains(secret), "the log must not contain {secret:?}");
    }
}

#[test]
fn seed_and_fleet_options_say_what_they_did_and_what_to_do() {
    let directory = TempDir::new();
    let store = format!("sqlite:{}", directory.path().join("fleet.db").display());

    let (code, stdout, stderr) = run_with_env(&["seed", "--store", &store], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stdout.trim(),
        format!("seeded {store} with the 7 notes of the embedded demo: 7 inserted, 0 restored, 0 already as seeded, 0 other notes kept")
    );
    let (code, stdout, _) = run_with_env(&["seed", "--store", &store], &[]);
    assert_eq!(code, Some(0));
    assert!(stdout.contains("0 inserted, 0 restored, 7 already as seeded"), "idempotent: {stdout}");

    let (code, _, stderr) = run_with_env(&["seed", "--store", "memory"], &[]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("seed a sqlite: or postgres: store"), "{stderr}");
    let (code, _, stderr) = run_with_env(&["seed"], &[]);
    assert_eq!(code, Some(2), "--store is required: {stderr}");
    let unwritable = format!("sqlite:{}", directory.path().join("missing").join("fleet.db").display());
    let (code, _, stderr) = run_with_env(&["seed", "--store", &unwritable], &[]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("does the directory exist"), "{stderr}");

    let keys = private_key_file("k");
    let configured = TempConfig::demo_with_shared_key();
    let (code, stderr) = run_to_exit(&["serve", "--http", "127.0.0.1:0", "--config", configured.arg(), "--key-file", keys.arg()]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("keep them in one place"), "{stderr}");
    let (code, stderr) = run_to_exit(&["serve", "--http", "127.0.0.1:0", "--key-file", "/nonexistent/keys.toml"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("--key-file") && stderr.contains("/nonexistent/keys.toml"), "{stderr}");
    let (code, stderr) = run_to_exit(&["serve", "--stdio", "--instances", "2"]);
    assert_eq!(code, Some(2), "{stderr}");
    // --durability is a database store's; a mistyped mode lists the real ones.
    let (code, stderr) = run_to_exit(&["serve", "--http", "127.0.0.1:0", "--durability", "relaxed"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("--durability applies to a sqlite: or postgres: store"), "{stderr}");
    let (code, stderr) = run_to_exit(&["serve", "--http", "127.0.0.1:0", "--store", &store, "--durability", "fast"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("durable | relaxed"), "{stderr}");
    let (status, logs) = HttpServer::start(&["--store", &store, "--durability", "relaxed"]).terminate_with_stderr();
    assert!(status.success());
    assert!(
        logs.join("\n").contains("(relaxed commits: synchronous=NORMAL)"),
        "the start-up line says which, as SQLite reports it: {logs:?}"
    );
    let (code, stderr) = run_to_exit(&["serve", "--http", "127.0.0.1:65535", "--instances", "2"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("past port 65535"), "{stderr}");

    // A shared store with a key of this process alone, and shared keys with a store of this process alone:
    // both half-fleets are named at start-up.
    let (status, logs) = HttpServer::start(&["--store", &store]).terminate_with_stderr();
    assert!(status.success());
    assert!(logs.join("\n").contains("signs with a random key of its own"), "{logs:?}");
    let (_, logs) = HttpServer::start(&["--key-file", keys.arg()]).terminate_with_stderr();
    assert!(logs.join("\n").contains("keeps its own replay store and notes in memory"), "{logs:?}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let readable = private_key_file("k");
        std::fs::set_permissions(&readable.path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let (_, logs) = HttpServer::start(&["--store", &store, "--key-file", readable.arg()]).terminate_with_stderr();
        assert!(logs.join("\n").contains("readable by other users (mode 644); make it private: chmod 600"), "{logs:?}");
    }

    // Two instances of a shared store: SIGTERM stops both, then closes the store.
    let server = HttpServer::start_instances(&["--instances", "2", "--store", &store, "--key-file", keys.arg()], 2);
    let (status, logs) = server.terminate_with_stderr();
    assert!(status.success(), "{status:?}");
    let logs = logs.join("\n");
    assert!(logs.contains("store: sqlite") && logs.contains("7 notes") && logs.contains("key \"k\" from --key-file"), "{logs}");
    assert!(!logs.contains("WARN"), "a complete fleet gets no warning: {logs}");
    assert!(logs.contains("store closed: sqlite"), "{logs}");
}
