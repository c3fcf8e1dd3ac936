//! A gateway fleet: two `mcpsim serve --gateway` processes sharing one store (one SQLite file, or one
//! PostgreSQL database) and one signing key, attacked over real sockets.
//!
//! What it shows, on both stores:
//! - one accepted export confirmation fired at both processes at once exports exactly once: every answer
//!   names the same export, and the shared ledger holds one record;
//! - a decline on one process is terminal on the other: the accept sent there is `state_consumed` and
//!   nothing is exported;
//! - an export quota holds across the processes: flows spread over both export exactly the quota, the rest
//!   are `rate_limited`;
//! - on a memory store, shared keys draw a warning that names the risk.
//!
//! The PostgreSQL tests are `#[ignore]`d: run them with `eval "$(bash .ci/postgres.sh start)"` and
//! `cargo test --test gateway_fleet -- --ignored postgres` (CI does). Each gets a fresh database.

mod e2e_support;
#[allow(dead_code)] // The store tests' plumbing; this file uses its temp directories and PostgreSQL helpers.
#[path = "stores/support.rs"]
mod store_support;

use e2e_support::*;
use mcpsim::testing::ExportRecord;
use mcpsim::testing::ReplayLimits;
use mcpsim::testing::StoreSpec;
use mcpsim::testing::SystemClock;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use store_support::{ScratchDatabase, TempDir};

const ALICE: &str = "demo-alice";
/// Exports alice may run per window in the gateway file below (one window spans the whole test).
const EXPORT_QUOTA: usize = 3;

/// The demo gateway with a small export quota, so a quota spread over two processes shows in a few flows.
fn gateway_file() -> String {
    format!(
        r#"
[backends.notes]
kind = "notes"
destinations = ["archive"]

[policy]
version = "fleet-test-1"

[policy.tools."notes.export"]
confirm = true
destination_argument = "destination"
rate_limit = {{ calls = {EXPORT_QUOTA}, window_ms = 3600000 }}

[policy.principals.alice.tools]
"notes.export" = {{ destinations = ["archive"] }}
"#
    )
}

/// Where the fleet's state lives. A PostgreSQL database is dropped with it.
struct SharedStore {
    argument: String,
    spec: StoreSpec,
    _directory: Option<TempDir>,
    _database: Option<ScratchDatabase>,
}

impl SharedStore {
    fn sqlite() -> SharedStore {
        let directory = TempDir::new();
        let argument = format!("sqlite:{}", directory.path().join("gateway.db").display());
        SharedStore { spec: argument.parse().unwrap(), argument, _directory: Some(directory), _database: None }
    }

    async fn postgres() -> SharedStore {
        let database = ScratchDatabase::create().await;
        let argument = database.argument.clone();
        SharedStore { spec: argument.parse().unwrap(), argument, _directory: None, _database: Some(database) }
    }

    /// The notes backend's export ledger as the database holds it (the operator's view, not a process's).
    async fn exports(&self) -> Vec<ExportRecord> {
        match &self.spec {
            StoreSpec::Sqlite(path) => {
                let store = mcpsim::testing::SqliteStore::open(path, Arc::new(SystemClock), ReplayLimits::default()).await.unwrap();
                store.export_ledger("notes").exports().await.unwrap()
            }
            StoreSpec::Postgres(target) => {
                let store = mcpsim::testing::PostgresStore::open(target.config().clone(), Arc::new(SystemClock), ReplayLimits::default())
                    .await
                    .unwrap();
                store.export_ledger("notes").exports().await.unwrap()
            }
            StoreSpec::Memory | StoreSpec::Dir { .. } => unreachable!("a gateway fleet shares a database"),
        }
    }
}

/// Two gateway processes on one store and one key. Fields drop in order: processes first, the store last.
struct Fleet {
    processes: [HttpServer; 2],
    client: reqwest::Client,
    serial: AtomicI64,
    _config: TempConfig,
    _gateway: TempConfig,
    store: SharedStore,
}

impl Fleet {
    fn start(store: SharedStore) -> Fleet {
        let (code, stdout, stderr) = run_with_env(&["seed"], &[("MCPSIM_STORE", &store.argument)]);
        assert_eq!(code, Some(0), "mcpsim seed failed: {stderr}");
        assert!(stdout.contains("7 inserted"), "{stdout}");
        let config = TempConfig::demo_with_shared_key();
        let gateway = TempConfig::new(&gateway_file());
        let start =
            || HttpServer::start(&["--gateway", "--gateway-config", gateway.arg(), "--config", config.arg(), "--store", &store.argument]);
        let processes = [start(), start()];
        for process in &processes {
            let log = process.stderr().join("\n");
            assert!(log.contains("shared with every gateway process"), "the start-up line says the ledgers are shared: {log}");
        }
        Fleet {
            processes,
            client: reqwest::Client::builder().timeout(WAIT).build().unwrap(),
            serial: AtomicI64::new(0),
            _config: config,
            _gateway: gateway,
            store,
        }
    }

    fn export_call(&self, query: &str) -> Value {
        let id = self.serial.fetch_add(1, Ordering::SeqCst) + 1;
        json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "_meta": { "io.modelcontextprotocol/protocolVersion": VERSION,
                       "io.modelcontextprotocol/clientCapabilities": { "elicitation": { "form": {} } } },
            "name": "notes.export", "arguments": { "query": query, "destination": "archive" } } })
    }

    async fn post(&self, process: usize, message: &Value) -> Value {
        let (status, response) =
            post_message(&self.client, &self.processes[process].url, ALICE, message).await.expect("the gateway answers");
        assert!(status == 200 || status == 429, "{status}: {response}");
        response
    }

    /// Round 1 on `process`: the sealed state, or the refusal.
    async fn ask(&self, process: usize, query: &str) -> Result<String, Value> {
        let response = self.post(process, &self.export_call(query)).await;
        match response["result"]["requestState"].as_str() {
            Some(state) => Ok(state.to_string()),
            None => Err(response),
        }
    }

    fn answer(&self, query: &str, state: &str, action: &str) -> Value {
        let mut message = self.export_call(query);
        message["params"]["requestState"] = json!(state);
        message["params"]["inputResponses"] = match action {
            "accept" => json!({ "confirm": { "action": "accept", "content": { "confirm": true } } }),
            other => json!({ "confirm": { "action": other } }),
        };
        message
    }

    /// The same answer sent to both processes at once; the responses in process order.
    async fn answer_at_once(&self, query: &str, state: &str, action: &str) -> Vec<Value> {
        let sending: Vec<_> = (0..2)
            .map(|process| {
                let (client, url, message) = (self.client.clone(), self.processes[process].url.clone(), self.answer(query, state, action));
                tokio::spawn(async move { post_message(&client, &url, ALICE, &message).await })
            })
            .collect();
        let mut answers = Vec::new();
        for sent in sending {
            let (status, response) = sent.await.unwrap().expect("both processes answer");
            assert_eq!(status, 200, "{response}");
            answers.push(response);
        }
        answers
    }
}

fn outcome(response: &Value) -> &str {
    response["result"]["structuredContent"]["outcome"].as_str().unwrap_or("")
}

async fn one_confirmation_exports_once_and_a_decline_is_terminal_everywhere(store: SharedStore) {
    let fleet = Fleet::start(store);

    // Round 1 on process 0; the accept raced on both: one export, and both answers name it.
    let state = fleet.ask(0, "TPS").await.expect("round 1 asks");
    let answers = fleet.answer_at_once("TPS", &state, "accept").await;
    for answer in &answers {
        assert_eq!(outcome(answer), "exported", "{answer}");
    }
    let export_ids: Vec<&Value> = answers.iter().map(|answer| &answer["result"]["structuredContent"]["exportId"]).collect();
    assert_eq!(export_ids[0], export_ids[1], "both processes report the one export: {answers:?}");
    let exports = fleet.store.exports().await;
    assert_eq!(exports.len(), 1, "one confirmation, one export across the fleet: {exports:?}");

    // Declined on process 1, then accepted on process 0: the decline is terminal across processes.
    let state = fleet.ask(1, "roadmap").await.expect("round 1 asks");
    let declined = fleet.post(1, &fleet.answer("roadmap", &state, "decline")).await;
    assert_eq!(outcome(&declined), "declined", "{declined}");
    let accepted = fleet.post(0, &fleet.answer("roadmap", &state, "accept")).await;
    assert_eq!(reason(&accepted), "state_consumed", "an accept after a decline elsewhere is refused: {accepted}");
    assert_eq!(accepted["error"]["data"]["previousOutcome"]["outcome"], "declined", "{accepted}");
    assert_eq!(fleet.store.exports().await.len(), 1, "the declined flow exported nothing");
}

async fn an_export_quota_holds_across_processes(store: SharedStore) {
    let fleet = Fleet::start(store);
    let mut exported = 0;
    let mut limited = 0;
    // Twice the quota, round 1 and round 2 on alternating processes.
    for flow in 0..(2 * EXPORT_QUOTA) {
        let (first, second) = (flow % 2, (flow + 1) % 2);
        let query = format!("TPS {flow}");
        let response = match fleet.ask(first, &query).await {
            Ok(state) => fleet.post(second, &fleet.answer(&query, &state, "accept")).await,
            Err(refused) => refused,
        };
        match (outcome(&response), response["error"]["data"]["reason"].as_str()) {
            ("exported", _) => exported += 1,
            (_, Some("rate_limited")) => limited += 1,
            _ => panic!("flow {flow}: neither exported nor rate limited: {response}"),
        }
    }
    assert_eq!((exported, limited), (EXPORT_QUOTA, EXPORT_QUOTA), "the quota is the fleet's, not each process's");
    assert_eq!(fleet.store.exports().await.len(), EXPORT_QUOTA);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_gateway_fleet_exports_once_and_declines_everywhere() {
    one_confirmation_exports_once_and_a_decline_is_terminal_everywhere(SharedStore::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MCPSIM_TEST_POSTGRES_URL (CI starts one with .ci/postgres.sh)"]
async fn postgres_gateway_fleet_exports_once_and_declines_everywhere() {
    one_confirmation_exports_once_and_a_decline_is_terminal_everywhere(SharedStore::postgres().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_gateway_fleet_shares_one_quota() {
    an_export_quota_holds_across_processes(SharedStore::sqlite()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MCPSIM_TEST_POSTGRES_URL (CI starts one with .ci/postgres.sh)"]
async fn postgres_gateway_fleet_shares_one_quota() {
    an_export_quota_holds_across_processes(SharedStore::postgres().await).await;
}

#[test]
fn a_gateway_with_shared_keys_on_a_memory_store_is_warned() {
    let config = TempConfig::demo_with_shared_key();
    let server = HttpServer::start(&["--gateway", "--config", config.arg()]);
    let log = server.stderr().join("\n");
    assert!(log.contains("keeps its replay ledger, rate counters and exports in memory") && log.contains("--store sqlite:PATH"), "{log}");
}
