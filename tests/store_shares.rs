//! The per-principal shares of the shared stores, attacked from outside through real `mcpsim serve` processes.
//!
//! What it shows (GUARANTEES.md §2.5, §2.7):
//! - on a `dir:` folder shared by two processes, bob declining as fast as he can fills his share of the
//!   replay ledger and is refused `replay_store_full`, while alice, on the other process, keeps confirming;
//! - `serve` processes SIGKILLed while they claim on a `dir:` folder leave temporary claim files, and the next
//!   start sweeps every one a dead writer left, keeping a live writer's and every claim (each answered
//!   confirmation still answers `state_consumed`);
//! - bob's `notes_publish` flows fill his share of the out-of-band store and are refused
//!   `out_of_band_store_full`, while alice still starts a flow (memory and SQLite; PostgreSQL where CI runs one).

mod e2e_support;
#[allow(dead_code)] // The store tests' plumbing; this file uses its temp directories and PostgreSQL helpers.
#[path = "stores/support.rs"]
mod store_support;

use e2e_support::{conforming_headers, request, run_to_exit, HttpServer, TempConfig, BIN, VERSION};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// A folder removed on drop.
struct Folder(PathBuf);

impl Folder {
    fn new(name: &str) -> Folder {
        let path = std::env::temp_dir().join(format!("mcpsim-shares-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Folder(path)
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A notes folder holding the demo principals' workspaces below `file:///Users`: alice's shopping list and
/// bob's TPS report.
fn demo_folder(name: &str) -> (Folder, String) {
    let folder = Folder::new(name);
    let alice = folder.0.join("alice/Documents/Notes");
    let bob = folder.0.join("bob/Notes");
    std::fs::create_dir_all(&alice).unwrap();
    std::fs::create_dir_all(&bob).unwrap();
    std::fs::write(alice.join("shopping.md"), "# shopping list\n\n- milk\n").unwrap();
    std::fs::write(bob.join("tps.md"), "# TPS report bob\n").unwrap();
    let spec = format!("dir:{}=file:///Users", folder.0.display());
    (folder, spec)
}

fn workspace(principal: &str) -> &'static str {
    if principal == "bob" {
        "file:///Users/bob/Notes"
    } else {
        "file:///Users/alice/Documents/Notes"
    }
}

fn title(principal: &str) -> &'static str {
    if principal == "bob" {
        "TPS report bob"
    } else {
        "shopping list"
    }
}

/// A `serve --stdio` process driven line by line; its end (a kill) is an answer of `None`, never a panic.
struct Served {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    principal: String,
    serial: i64,
}

impl Served {
    fn start(principal: &str, args: &[&str]) -> Served {
        let mut child = Command::new(BIN)
            .args(["serve", "--stdio", "--principal", principal])
            .args(args)
            .env_remove("MCPSIM_STORE")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the mcpsim binary starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Served { child, stdin, stdout, principal: principal.into(), serial: 0 }
    }

    fn call(&mut self, message: &Value) -> Option<Value> {
        self.stdin.write_all(format!("{message}\n").as_bytes()).ok()?;
        self.stdin.flush().ok()?;
        let mut line = String::new();
        match self.stdout.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))),
        }
    }

    fn round_one(&mut self) -> Option<(Value, String)> {
        self.serial += 1;
        let message = request(
            self.serial,
            "tools/call",
            json!({ "name": "notes_delete", "arguments": { "workspaceUri": workspace(&self.principal), "title": title(&self.principal) } }),
        );
        let answer = self.call(&message)?;
        let state = answer["result"]["requestState"].as_str().unwrap_or_else(|| panic!("round 1 asks: {answer}")).to_string();
        Some((message, state))
    }

    /// Round 2 of `asked` with `state`, answering `responses`.
    fn round_two(&mut self, asked: &Value, state: &str, responses: Value) -> Option<Value> {
        self.serial += 1;
        let mut message = asked.clone();
        message["id"] = json!(self.serial);
        message["params"]["requestState"] = json!(state);
        message["params"]["inputResponses"] = responses;
        self.call(&message)
    }

    /// A whole declined confirmation: the answer to round 2, and its state (to retry it later).
    fn decline(&mut self) -> Option<(Value, Value, String)> {
        let (asked, state) = self.round_one()?;
        let answer = self.round_two(&asked, &state, json!({ "delete_choice": { "action": "decline" } }))?;
        Some((answer, asked, state))
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn outcome(answer: &Value) -> Option<&str> {
    answer["result"]["structuredContent"]["outcome"].as_str()
}

fn reason(answer: &Value) -> Option<&str> {
    answer["error"]["data"]["reason"].as_str()
}

/// Issue 35 item 5: bob, on one process, declines 400 confirmations on a folder whose ledger holds 400
/// (100 per principal); alice, on another process over the same folder, still confirms.
#[test]
fn on_a_shared_folder_bob_fills_his_replay_share_and_alice_keeps_confirming() {
    let (folder, store) = demo_folder("dir-replay");
    let args = ["--store", &store, "--replay-capacity", "400"];
    let mut bob = Served::start("bob", &args);
    let mut alice = Served::start("alice", &args);
    let (mut accepted, mut refused) = (0, 0);
    for attempt in 0..400 {
        let (answer, _, _) = bob.decline().expect("bob's process answers");
        match (outcome(&answer), reason(&answer)) {
            (Some("declined"), _) => accepted += 1,
            (_, Some("replay_store_full")) => refused += 1,
            _ => panic!("bob's decline {attempt}: {answer}"),
        }
        assert!(accepted <= 100, "bob holds more than his share: {accepted}");
    }
    assert_eq!((accepted, refused), (100, 300), "bob: his share, then refused");
    let full = bob.decline().expect("bob's process answers").0;
    assert!(
        full["error"]["message"].as_str().is_some_and(|m| m.contains("replay store is full")),
        "the memory and SQLite stores' wording: {full}"
    );
    for attempt in 0..50 {
        let (answer, _, _) = alice.decline().expect("alice's process answers");
        assert_eq!(outcome(&answer), Some("declined"), "alice's decline {attempt}: {answer}");
    }
    // And a real deletion of hers goes through, on the folder both share.
    let (asked, state) = alice.round_one().unwrap();
    let deleted = alice
        .round_two(
            &asked,
            &state,
            json!({ "delete_choice": { "action": "accept", "content": { "note_id": "alice/Documents/Notes/shopping", "confirm": true } } }),
        )
        .unwrap();
    assert_eq!(outcome(&deleted), Some("deleted"), "{deleted}");
    assert!(!folder.0.join("alice/Documents/Notes/shopping.md").exists());
    eprintln!("bob: {accepted} declines accepted, {refused} refused with replay_store_full; alice: 50 of 50 declined, 1 deletion");
}

/// The temporary files in the claims folder (none while no process has opened the store yet).
fn temps_in(claims: &Path) -> Vec<String> {
    let Ok(listing) = std::fs::read_dir(claims) else { return Vec::new() };
    listing.filter_map(|entry| entry.ok()?.file_name().into_string().ok()).filter(|name| name.starts_with("tmp-")).collect()
}

/// Issue 35 item 17: `serve` processes SIGKILLed mid-claims leave `tmp-PID-N` files in `.mcpsim/claims`; the
/// next start removes every one whose writer is dead (and any older than the bound), never a live writer's,
/// and every claim a killed process answered for is still held.
#[test]
fn temporary_claim_files_of_killed_writers_are_swept_and_no_claim_is_lost() {
    let (folder, store) = demo_folder("dir-sweep");
    let config = TempConfig::demo_with_shared_key();
    let args = ["--config", config.arg(), "--store", &store];
    let claims = folder.0.join(".mcpsim/claims");
    let mut answered: Vec<(Value, String)> = Vec::new();
    let mut kills = 0;
    // Every temporary file seen after a kill (a start after a kill sweeps them; one killed before it opened
    // the store leaves them for the next, so they are counted by name, once).
    let mut left_by_kills = std::collections::BTreeSet::new();
    let mut swept_at_start = 0;
    for round in 0..40u64 {
        let mut before = temps_in(&claims);
        let mut server = Served::start("bob", &args);
        let pid = server.child.id() as i32;
        let delay = std::time::Duration::from_millis(20 + (round * 7) % 40);
        let killer = std::thread::spawn(move || {
            std::thread::sleep(delay);
            // SAFETY: kill(2) of our own child's pid; no memory effects.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        });
        while let Some((answer, asked, state)) = server.decline() {
            assert_eq!(outcome(&answer), Some("declined"), "{answer}");
            // It answered, so it opened the store: what the killed ones left is gone.
            for temp in before.drain(..) {
                assert!(!claims.join(&temp).exists(), "the start swept {temp}");
                swept_at_start += 1;
            }
            answered.push((asked, state));
        }
        killer.join().unwrap();
        let _ = server.child.wait();
        kills += 1;
        left_by_kills.extend(temps_in(&claims));
        if round % 10 == 9 {
            eprintln!("after {kills} kills: {} temporary files left by them", left_by_kills.len());
        }
    }
    let left = temps_in(&claims);
    // A crashed writer's file, one of a live writer (this test's own pid, just written) and a stale one of a
    // live pid (older than the bound).
    let own = std::process::id();
    std::fs::create_dir_all(&claims).unwrap();
    std::fs::write(claims.join("tmp-999999999-1"), "{").unwrap();
    std::fs::write(claims.join(format!("tmp-{own}-1")), "{").unwrap();
    let stale = claims.join(format!("tmp-{own}-2"));
    std::fs::write(&stale, "{").unwrap();
    let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
    std::fs::File::options().write(true).open(&stale).unwrap().set_modified(old).unwrap();

    let mut after = Served::start("bob", &args);
    // A request first: the store is open (and swept) once the process answers.
    let _ = after.round_one().expect("the restarted process answers");
    let remaining = temps_in(&claims);
    assert_eq!(remaining, vec![format!("tmp-{own}-1")], "only the live writer's temporary file is kept");
    for (asked, state) in &answered {
        let retry = after.round_two(asked, state, json!({ "delete_choice": { "action": "decline" } })).unwrap();
        assert_eq!(reason(&retry), Some("state_consumed"), "an answered confirmation's claim survived the sweep: {retry}");
    }
    assert!(!answered.is_empty(), "the killed processes answered some confirmations");
    eprintln!(
        "{kills} kills left {} temporary files ({swept_at_start} seen swept by the next start, {} left before the last one); none after it; {} answered claims all held",
        left_by_kills.len(),
        left.len(),
        answered.len()
    );
}

/// A `notes_publish` round 1 as `token` for its principal's own note (bob's TPS report, alice's shopping list),
/// from a client declaring URL-mode elicitation.
fn publish(id: i64, token: &str) -> Value {
    let (workspace, note) =
        if token == "demo-bob" { ("file:///Users/bob/Notes", "note-300") } else { (e2e_support::ALICE_WORKSPACE, "note-99") };
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "notes_publish",
        "arguments": { "workspaceUri": workspace, "noteId": note },
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientCapabilities": { "elicitation": { "url": {} } },
        },
    } })
}

async fn mcp(client: &reqwest::Client, url: &str, token: &str, message: &Value) -> Value {
    let mut request = client.post(url).body(serde_json::to_vec(message).unwrap());
    for (name, value) in conforming_headers(message, token) {
        request = request.header(name, value);
    }
    request.send().await.expect("the server answers").json().await.expect("a JSON-RPC response")
}

/// Bob, on `bobs`, starts 400 flows on a store that holds 400 (100 per principal): 100 start, 300 are refused
/// `out_of_band_store_full`; alice, on `alices` (the same process, or another over the same database), still
/// starts 50 of 50. Returns bob's (started, refused).
async fn bob_fills_his_flow_share_and_alice_still_starts(bobs: &HttpServer, alices: &HttpServer) -> (usize, usize) {
    let client = reqwest::Client::builder().timeout(e2e_support::WAIT).build().unwrap();
    let (mut started, mut refused) = (0, 0);
    for id in 0..400 {
        let answer = mcp(&client, &bobs.url, "demo-bob", &publish(id, "demo-bob")).await;
        if answer["result"]["resultType"] == "input_required" {
            started += 1;
        } else {
            assert_eq!(reason(&answer), Some("out_of_band_store_full"), "bob's flow {id}: {answer}");
            assert_eq!(answer["error"]["code"], -32603, "{answer}");
            refused += 1;
        }
        assert!(started <= 100, "bob holds more than his share: {started}");
    }
    assert_eq!((started, refused), (100, 300), "bob: his share, then refused");
    for id in 0..50 {
        let answer = mcp(&client, &alices.url, "demo-alice", &publish(1_000 + id, "demo-alice")).await;
        assert_eq!(answer["result"]["resultType"], "input_required", "alice's flow {id}: {answer}");
        let url = answer["result"]["inputRequests"]["publish_authorization"]["params"]["url"].as_str().unwrap_or_default();
        assert!(url.contains("/connect/"), "alice is sent to the page: {answer}");
    }
    (started, refused)
}

const FLOW_ARGS: [&str; 3] = ["--out-of-band", "--out-of-band-capacity", "400"];

/// Issue 35 item 6, memory: one process's own flows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_bob_fills_his_out_of_band_share_and_alice_still_starts_a_flow() {
    let server = HttpServer::start(&FLOW_ARGS);
    let summary = server.stderr().join("\n");
    assert!(summary.contains("room for 400 unexpired flows, 100 per principal"), "{summary}");
    let (started, refused) = bob_fills_his_flow_share_and_alice_still_starts(&server, &server).await;
    eprintln!("memory: bob {started} flows started, {refused} refused out_of_band_store_full; alice 50 of 50 started");
}

/// Two processes over one store: bob on one, alice on the other.
async fn shared(argument: &str) -> (usize, usize) {
    let (code, stderr) = run_to_exit(&["seed", "--store", argument]);
    assert_eq!(code, Some(0), "{stderr}");
    let config = TempConfig::demo_with_shared_key();
    let args = [&FLOW_ARGS[..], &["--store", argument, "--config", config.arg()]].concat();
    let bobs = HttpServer::start(&args);
    let alices = HttpServer::start(&args);
    bob_fills_his_flow_share_and_alice_still_starts(&bobs, &alices).await
}

/// Issue 35 item 6, SQLite: the flows in the database two processes share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_bob_fills_his_out_of_band_share_and_alice_still_starts_a_flow() {
    let directory = store_support::TempDir::new();
    let argument = format!("sqlite:{}", directory.path().join("fleet.db").display());
    let (started, refused) = shared(&argument).await;
    eprintln!("sqlite: bob {started} flows started, {refused} refused out_of_band_store_full; alice 50 of 50 started");
}

/// Issue 35 item 6, PostgreSQL: the flows in the database two processes share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: MCPSIM_TEST_POSTGRES_URL (CI starts one with .ci/postgres.sh)"]
async fn postgres_bob_fills_his_out_of_band_share_and_alice_still_starts_a_flow() {
    let database = store_support::ScratchDatabase::create().await;
    let (started, refused) = shared(&database.argument).await;
    eprintln!("postgres: bob {started} flows started, {refused} refused out_of_band_store_full; alice 50 of 50 started");
}
