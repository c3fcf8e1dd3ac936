//! The OS sandbox (`serve --sandbox`, Landlock) and the directory store end to end.
//!
//! The sandbox proof runs in a child process (this test binary re-run as the ignored `sandbox_child`): it
//! restricts itself exactly as `serve` does for a `dir:` store and then tries opens the code would never
//! build: a file outside the folder by its plain path, /etc/passwd, a write into a note. Landlock is checked
//! at run time: on a kernel without it these tests fail saying so, rather than pass having proved nothing.
#![cfg(target_os = "linux")]

mod e2e_support;

use e2e_support::*;
use mcpsim::testing::dir::DirStore;
use mcpsim::testing::sandbox::{self, SandboxMode, SandboxOutcome, SandboxPlan};
use mcpsim::testing::FileUri;
use mcpsim::testing::ManualClock;
use mcpsim::testing::ReplayLimits;
use mcpsim::testing::SqliteStore;
use mcpsim::testing::StoreAdmin;
use mcpsim::testing::StoreSpec;
use mcpsim::testing::SystemClock;
use mcpsim::testing::{ClaimAndDelete, ClaimRecord, NonceClaim, NoteStore, ReplayStore};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const FOLDER_VARIABLE: &str = "MCPSIM_SANDBOX_FOLDER";
const DATABASE_VARIABLE: &str = "MCPSIM_SANDBOX_DATABASE";

/// A folder `notes/` (a workspace `w/` with a note) beside `outside/secret.md`, removed on drop.
struct Scene(PathBuf);

impl Scene {
    fn new() -> Scene {
        let root = std::env::temp_dir().join(format!("mcpsim-sandbox-{}-{:?}", std::process::id(), std::thread::current().id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("notes/w")).unwrap();
        std::fs::create_dir_all(root.join("outside")).unwrap();
        std::fs::write(root.join("notes/w/plan.md"), "# Q3 plan\n").unwrap();
        std::fs::write(root.join("notes/w/old.md"), "# Old TPS report\n").unwrap();
        std::fs::write(root.join("outside/secret.md"), "# Secret\n").unwrap();
        Scene(root)
    }

    fn notes(&self) -> PathBuf {
        self.0.join("notes")
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn require_landlock() -> i32 {
    sandbox::kernel_abi()
        .unwrap_or_else(|| panic!("this kernel has no Landlock (Linux 5.13+ with lsm=landlock): the sandbox cannot be shown to hold here"))
}

/// Runs the ignored test `child` of this binary as a child process with `variable` set to `value`, and returns
/// the JSON report it printed after `<sandbox> ` (the child must succeed).
fn child_report(child: &str, variable: &str, value: &Path) -> Value {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([child, "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(variable, value)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "the child failed: {stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let line = stdout.lines().find_map(|line| line.split_once("<sandbox> ").map(|(_, rest)| rest)).expect("the child reported");
    serde_json::from_str(line).unwrap()
}

fn attempt(result: std::io::Result<impl Sized>) -> String {
    match result {
        Ok(_) => "ok".into(),
        Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied => "denied".into(),
        Err(error) => format!("error {error}"),
    }
}

#[tokio::test]
#[ignore = "not a test: the child the sandbox test starts, with the folder in its environment"]
async fn sandbox_child() {
    let Ok(folder) = std::env::var(FOLDER_VARIABLE) else {
        panic!(
            "sandbox_child runs only as a child of an_unchecked_open_outside_the_folder_fails_in_the_sandbox ({FOLDER_VARIABLE} is unset)"
        );
    };
    let scene = PathBuf::from(folder);
    let spec: StoreSpec = format!("dir:{}", scene.join("notes").display()).parse().unwrap();
    let outcome = sandbox::apply(SandboxMode::Required, &SandboxPlan::for_store(&spec).unwrap()).expect("the sandbox applies");
    // Deliberately unchecked: plain paths, no containment, nothing the store would ever build.
    let report = json!({
        "outcome": outcome.to_string(),
        "read_note": attempt(std::fs::read_to_string(scene.join("notes/w/plan.md"))),
        "read_outside": attempt(std::fs::read_to_string(scene.join("outside/secret.md"))),
        "read_passwd": attempt(std::fs::read_to_string("/etc/passwd")),
        "list_outside": attempt(std::fs::read_dir(scene.join("outside"))),
        "write_note": attempt(std::fs::OpenOptions::new().append(true).open(scene.join("notes/w/plan.md"))),
        "write_outside": attempt(std::fs::write(scene.join("outside/planted.md"), "x")),
        "remove_outside": attempt(std::fs::remove_file(scene.join("outside/secret.md"))),
        // And the store still does its job inside the sandbox: a claimed delete through the ledger and trash.
        "store_delete": store_delete(&scene.join("notes")).await,
    });
    println!("<sandbox> {report}");
}

async fn store_delete(notes: &Path) -> String {
    let store = DirStore::open(notes, None, Arc::new(SystemClock), ReplayLimits::default()).unwrap();
    let note = store.list_notes().await.unwrap().into_iter().find(|n| n.id == "w/old").expect("w/old is listed");
    let claim = NonceClaim {
        nonce: "n".into(),
        principal: "alice".into(),
        expires_at_ms: u64::MAX / 2,
        record: ClaimRecord::Deleted { note_id: note.id.clone() },
    };
    let workspace = FileUri::parse(&note.uri).unwrap();
    match store.claim_and_delete(claim, &note.id, &note.revision, &workspace).await {
        Ok(ClaimAndDelete::Deleted(_)) => "deleted".into(),
        other => format!("{other:?}"),
    }
}

#[test]
fn an_unchecked_open_outside_the_folder_fails_in_the_sandbox() {
    let abi = require_landlock();
    let scene = Scene::new();
    let report = child_report("sandbox_child", FOLDER_VARIABLE, &scene.0);
    assert!(report["outcome"].as_str().unwrap().starts_with(&format!("sandbox: active (Landlock ABI {abi}")), "{report}");
    assert_eq!(report["read_note"], "ok", "{report}");
    for denied in ["read_outside", "read_passwd", "list_outside", "write_note", "write_outside", "remove_outside"] {
        assert_eq!(report[denied], "denied", "{denied}: {report}");
    }
    assert_eq!(report["store_delete"], "deleted", "{report}");
    assert!(scene.0.join("outside/secret.md").exists());
    assert!(!scene.0.join("outside/planted.md").exists());
    assert!(!scene.notes().join("w/old.md").exists(), "the child's delete happened");
}

#[test]
fn off_is_off_and_required_says_the_abi() {
    let abi = require_landlock();
    assert_eq!(
        sandbox::apply(SandboxMode::Off, &SandboxPlan::default()).unwrap(),
        SandboxOutcome::Inactive { why: "--sandbox off".into() }
    );
    let scene = Scene::new();
    let off = serve_line(&scene, "off");
    assert!(off.contains("sandbox: not active: --sandbox off"), "{off}");
    let required = serve_line(&scene, "required");
    assert!(required.contains(&format!("sandbox: active (Landlock ABI {abi})")), "{required}");
    assert!(required.contains(&format!("read/remove {}", scene.notes().canonicalize().unwrap().display())), "{required}");
}

/// The start-up line of `serve --stdio` over the scene's folder (alice's demo workspace mapped onto it).
fn serve_line(scene: &Scene, mode: &str) -> String {
    let store = format!("dir:{}=file:///Users/alice/Documents", scene.notes().display());
    let mut server = StdioServer::start(&["--store", &store, "--sandbox", mode]);
    assert!(server.call(&resources_list(1))["result"].is_object());
    let (status, _, logs) = server.finish_with_stderr();
    assert!(status.success(), "{logs:?}");
    logs.into_iter().find(|line| line.contains("serving stdio")).expect("a start-up line")
}

/// A host pointed at a real folder: the whole confirmation flow over stdio, sandboxed, on files.
#[test]
fn a_sandboxed_stdio_server_deletes_the_chosen_file_and_only_it() {
    require_landlock();
    let scene = Scene::new();
    std::fs::create_dir_all(scene.notes().join("Notes")).unwrap();
    std::fs::write(scene.notes().join("Notes/tps-2024.md"), "# TPS report 2024\n").unwrap();
    std::fs::write(scene.notes().join("Notes/tps-2025.md"), "# TPS report 2025\n").unwrap();
    let store = format!("dir:{}=file:///Users/alice/Documents", scene.notes().display());
    let mut server = StdioServer::start(&["--store", &store, "--sandbox", "required"]);
    let round_one = server.call(&round_one(1));
    let form = &round_one["result"]["inputRequests"]["delete_choice"]["params"];
    assert_eq!(form["requestedSchema"]["properties"]["note_id"]["enum"], json!(["Notes/tps-2024", "Notes/tps-2025"]), "{round_one}");
    let state = round_one["result"]["requestState"].as_str().unwrap().to_string();
    assert_deleted(&server.call(&round_two(2, &state, "Notes/tps-2024")), "Notes/tps-2024");
    assert_eq!(reason(&server.call(&round_two(3, &state, "Notes/tps-2025"))), "state_consumed");
    let (status, _, logs) = server.finish_with_stderr();
    let logs = logs.join("\n");
    assert!(status.success());
    assert!(logs.contains("sandbox: active"), "{logs}");
    assert!(!scene.notes().join("Notes/tps-2024.md").exists());
    assert!(scene.notes().join("Notes/tps-2025.md").exists());
}

/// Expired nonces the SQLite prune test leaves for one claim to prune: enough that `DELETE … RETURNING`
/// outgrows SQLite's in-memory temporary cache (a fleet's first large prune was about 10^5).
const EXPIRED_NONCES: u64 = 200_000;
/// The seeding clock; the nonces expire at `SEEDED_AT_MS + 1`. The child's clock is an hour later.
const SEEDED_AT_MS: u64 = 1_000_000;

/// The replay limits of both sides of the SQLite prune test: 1,000 nonces, so the child's claim is over capacity.
fn prune_limits() -> ReplayLimits {
    ReplayLimits::with_share(1_000, 100, 60_000)
}

/// A declined confirmation of alice's, holding `nonce` until `expires_at_ms`.
fn declined(nonce: &str, expires_at_ms: u64) -> NonceClaim {
    NonceClaim { nonce: nonce.into(), principal: "alice".into(), expires_at_ms, record: ClaimRecord::Declined { tool: None } }
}

/// The child of [`a_large_prune_of_a_sqlite_replay_store_works_in_the_sandbox`]: sandboxed as `serve` is for
/// this database (only its folder writable), one claim over the capacity prunes every expired nonce.
#[tokio::test]
#[ignore = "not a test: the child the SQLite sandbox test starts, with the database in its environment"]
async fn sqlite_sandbox_child() {
    let Ok(database) = std::env::var(DATABASE_VARIABLE) else {
        panic!("sqlite_sandbox_child runs only as a child of a_large_prune_of_a_sqlite_replay_store_works_in_the_sandbox");
    };
    let spec: StoreSpec = format!("sqlite:{database}").parse().unwrap();
    let outcome = sandbox::apply(SandboxMode::Required, &SandboxPlan::for_store(&spec).unwrap()).expect("the sandbox applies");
    let later = SEEDED_AT_MS + 3_600_000;
    let store = SqliteStore::open(Path::new(&database), Arc::new(ManualClock::new(later)), prune_limits()).await.unwrap();
    let held_before = store.nonce_count().await.unwrap();
    let report = json!({
        "outcome": outcome.to_string(),
        "held_before": held_before,
        "claim": format!("{:?}", store.claim(declined("fresh", later + 10_000)).await),
        "held_after": store.nonce_count().await.unwrap(),
        // Where SQLite would have spilled: the system's temp directory is outside the sandbox.
        "write_temp_dir": attempt(std::fs::write(std::env::temp_dir().join(format!("mcpsim-planted-{}", std::process::id())), "x")),
    });
    println!("<sandbox> {report}");
}

/// A fleet's replay store prunes what expired once it is full; under `serve`'s sandbox the first large prune
/// failed (`unable to open database file`) because SQLite spilled it to a file in the system's temp directory.
#[test]
fn a_large_prune_of_a_sqlite_replay_store_works_in_the_sandbox() {
    require_landlock();
    let scene = Scene::new();
    let database = scene.0.join("db/replay.db");
    std::fs::create_dir_all(database.parent().unwrap()).unwrap();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let store = SqliteStore::open(&database, Arc::new(ManualClock::new(SEEDED_AT_MS)), prune_limits()).await.unwrap();
        assert_eq!(format!("{:?}", store.claim(declined("seed-0", SEEDED_AT_MS + 1)).await), "Ok(Claimed)");
        store.close().await.unwrap();
    });
    // The rest in one statement, copying the first one's record, and the counters kept equal to the rows.
    let connection = rusqlite::Connection::open(&database).unwrap();
    connection
        .execute_batch(&format!(
            "BEGIN;
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {EXPIRED_NONCES} - 1)
             INSERT INTO nonces (nonce, expires_at_ms, record, principal)
               SELECT 'seed-' || i, expires_at_ms, record, principal FROM n, (SELECT * FROM nonces WHERE nonce = 'seed-0');
             UPDATE replay_counter SET nonce_count = (SELECT COUNT(*) FROM nonces);
             UPDATE replay_principals SET nonce_count = (SELECT COUNT(*) FROM nonces) WHERE principal = 'alice';
             COMMIT;"
        ))
        .unwrap();
    drop(connection);
    let report = child_report("sqlite_sandbox_child", DATABASE_VARIABLE, &database);
    assert!(report["outcome"].as_str().unwrap().starts_with("sandbox: active"), "{report}");
    assert_eq!(report["write_temp_dir"], "denied", "the system's temp directory is outside the sandbox: {report}");
    assert_eq!(report["held_before"], EXPIRED_NONCES, "{report}");
    assert_eq!(report["claim"], "Ok(Claimed)", "{report}");
    assert_eq!(report["held_after"], 1, "every expired nonce pruned, the new one held: {report}");
}
