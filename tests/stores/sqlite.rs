//! The contract against SQLite, plus what is SQLite's own: WAL, migrations, concurrent opens, and separate
//! processes racing on one file.

use crate::contract::{self, contract_tests, out_of_band_contract_tests, persistent_contract_tests, StoreKind};
use crate::race::{processes_race, SPEC_VARIABLE};
use crate::support::{unique_name, with_a_later_step, TempDir, TestClock};
use async_trait::async_trait;
use mcpsim::testing::FileUri;
use mcpsim::testing::ReplayLimits;
use mcpsim::testing::{open, StoreAdmin, StoreSpec};
use mcpsim::testing::{ClaimOutcome, NoteStore, ReplayStore, StoreError};
use mcpsim::testing::{Durability, MigrationReport};
use mcpsim::testing::{SqliteStore, SQLITE_MIGRATIONS};
use std::sync::Arc;

struct SqliteKind {
    directory: TempDir,
    durability: Durability,
}

impl SqliteKind {
    fn new() -> SqliteKind {
        SqliteKind { directory: TempDir::new(), durability: Durability::Durable }
    }

    fn relaxed() -> SqliteKind {
        SqliteKind { directory: TempDir::new(), durability: Durability::Relaxed }
    }
}

#[async_trait]
impl StoreKind for SqliteKind {
    async fn fresh(&self) -> StoreSpec {
        StoreSpec::Sqlite(self.directory.path().join(format!("{}.db", unique_name("store"))))
    }

    fn durability(&self) -> Durability {
        self.durability
    }
}

contract_tests!(SqliteKind::new());
persistent_contract_tests!(SqliteKind::new());
out_of_band_contract_tests!(SqliteKind::new());

/// `--durability relaxed` (synchronous=NORMAL) changes only when a commit reaches the disk: the same contract.
mod relaxed {
    use super::*;

    contract_tests!(SqliteKind::relaxed());
    persistent_contract_tests!(SqliteKind::relaxed());
}

/// `--durability` reaches the database: each pooled session reports the synchronous level it was opened with.
#[tokio::test]
async fn durability_is_what_the_database_reports() {
    let directory = TempDir::new();
    for (durability, expected) in [(Durability::Durable, "synchronous=FULL"), (Durability::Relaxed, "synchronous=NORMAL")] {
        let path = directory.path().join(format!("{}.db", unique_name("durability")));
        let store = SqliteStore::open_with_durability(&path, clock(), ReplayLimits::default(), durability).await.unwrap();
        assert_eq!(store.commit_setting().await.unwrap(), expected, "{durability:?}");
    }
}

fn clock() -> Arc<TestClock> {
    Arc::new(TestClock::at(contract::START_MS))
}

#[tokio::test]
async fn migrations_run_once_and_newer_schemas_are_refused() {
    let directory = TempDir::new();
    let path = directory.path().join("fleet.db");
    let limits = ReplayLimits::default();
    // A database written by the first release, with a consumed nonce in it.
    let (old, first) = SqliteStore::open_with_migrations(&path, clock(), limits, &SQLITE_MIGRATIONS[..1]).await.unwrap();
    assert_eq!(first, MigrationReport { version_before: 0, version_after: 1 });
    drop(old);
    {
        let connection = rusqlite::Connection::open(&path).unwrap();
        connection
            .execute("INSERT INTO nonces (nonce, expires_at_ms, record) VALUES ('old', 1, '{\"outcome\":\"declined\"}')", [])
            .unwrap();
        connection.execute("UPDATE replay_counter SET nonce_count = 1", []).unwrap();
        connection
            .execute("INSERT INTO notes (id, position, title, uri, body) VALUES ('old-note', 1, 'Old PLAN', 'file:///w/%6Fld.md', 'b')", [])
            .unwrap();
    }
    let (upgraded, current) = SqliteStore::open_with_migrations(&path, clock(), limits, SQLITE_MIGRATIONS).await.unwrap();
    assert_eq!(current, MigrationReport { version_before: 1, version_after: 7 }, "only the new steps run");
    assert_eq!(upgraded.nonce_count().await, Ok(1), "the data of step 1 is untouched");
    let found = upgraded.find_candidates(&FileUri::parse("file:///w").unwrap(), "plan").await.unwrap();
    assert_eq!(found.iter().map(|n| n.id.as_str()).collect::<Vec<_>>(), ["old-note"], "opening filled the search columns");
    assert_eq!(upgraded.claim(claim_at("new", u64::MAX >> 12)).await, Ok(ClaimOutcome::Claimed), "the upgraded schema takes claims");
    let (_, again) = SqliteStore::open_with_migrations(&path, clock(), limits, SQLITE_MIGRATIONS).await.unwrap();
    assert_eq!(again, MigrationReport { version_before: 7, version_after: 7 }, "a restart applies nothing");
    let with_next = with_a_later_step(SQLITE_MIGRATIONS, "CREATE TABLE later_step (x INTEGER) STRICT;");
    let (_, later) = SqliteStore::open_with_migrations(&path, clock(), limits, with_next).await.unwrap();
    assert_eq!(later, MigrationReport { version_before: 7, version_after: 8 });
    let versions: Vec<(i64, String)> = {
        let connection = rusqlite::Connection::open(&path).unwrap();
        let mut statement = connection.prepare("SELECT version, description FROM schema_version ORDER BY version").unwrap();
        statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?))).unwrap().collect::<Result<_, _>>().unwrap()
    };
    assert_eq!(versions.iter().map(|(v, _)| *v).collect::<Vec<_>>(), [1, 2, 3, 4, 5, 6, 7, 8]);
    let Err(StoreError::Unavailable(refusal)) = SqliteStore::open(&path, clock(), limits).await else {
        panic!("an older mcpsim must refuse a newer schema");
    };
    assert!(refusal.contains("version 8") && refusal.contains("upgrade mcpsim"), "{refusal}");
}

/// A database from before the trigram index, holding notes, gets the index built when it is opened:
/// its notes are found by a query of 3 characters or more (which only the index answers) and by a shorter one,
/// and a rename after the upgrade is followed.
#[tokio::test]
async fn an_upgraded_database_searches_its_notes_by_trigrams() {
    let directory = TempDir::new();
    let path = directory.path().join("notes.db");
    let limits = ReplayLimits::default();
    let (old, _) = SqliteStore::open_with_migrations(&path, clock(), limits, &SQLITE_MIGRATIONS[..6]).await.unwrap();
    old.seed(&[contract::note("a", "file:///w/a.md"), contract::note("b", "file:///x/b.md")]).await.unwrap();
    old.rename("a", "Quarterly PLAN").await.unwrap();
    drop(old);
    let (upgraded, report) = SqliteStore::open_with_migrations(&path, clock(), limits, SQLITE_MIGRATIONS).await.unwrap();
    assert_eq!(report, MigrationReport { version_before: 6, version_after: 7 });
    let ids = |found: Vec<mcpsim::testing::Note>| found.into_iter().map(|n| n.id).collect::<Vec<_>>();
    let root = FileUri::parse("file:///").unwrap();
    assert_eq!(ids(upgraded.find_candidates(&root, "plan").await.unwrap()), ["a"]);
    assert_eq!(ids(upgraded.find_candidates(&root, "TITLE B").await.unwrap()), ["b"]);
    assert_eq!(ids(upgraded.find_candidates(&root, "pl").await.unwrap()), ["a"]);
    upgraded.rename("b", "plans").await.unwrap();
    assert_eq!(ids(upgraded.find_candidates(&root, "plan").await.unwrap()), ["a", "b"]);
    assert_eq!(ids(upgraded.find_candidates(&FileUri::parse("file:///w").unwrap(), "plan").await.unwrap()), ["a"]);
}

fn claim_at(nonce: &str, expires_at_ms: u64) -> mcpsim::testing::NonceClaim {
    mcpsim::testing::NonceClaim {
        nonce: nonce.into(),
        principal: "alice".into(),
        expires_at_ms,
        record: mcpsim::testing::ClaimRecord::Declined { tool: None },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn processes_starting_together_migrate_once() {
    let directory = TempDir::new();
    let spec = StoreSpec::Sqlite(directory.path().join("fleet.db"));
    let mut opening = Vec::new();
    for _ in 0..8 {
        let spec = spec.clone();
        opening.push(tokio::spawn(async move { open(&spec, clock(), ReplayLimits::default()).await.map(|_| ()) }));
    }
    for task in opening {
        task.await.unwrap().expect("every concurrent open succeeds");
    }
    let stores = open(&spec, clock(), ReplayLimits::default()).await.unwrap();
    assert_eq!(stores.replay.claim(contract::claim("x", 2_000, contract::declined())).await, Ok(ClaimOutcome::Claimed));
}

#[tokio::test]
async fn the_file_is_in_wal_mode_and_errors_name_the_file() {
    let directory = TempDir::new();
    let path = directory.path().join("fleet.db");
    SqliteStore::open(&path, clock(), ReplayLimits::default()).await.unwrap();
    let mode: String = rusqlite::Connection::open(&path).unwrap().query_row("PRAGMA journal_mode", [], |row| row.get(0)).unwrap();
    assert_eq!(mode, "wal");
    let missing = directory.path().join("no-such-directory").join("fleet.db");
    let Err(StoreError::Unavailable(message)) = SqliteStore::open(&missing, clock(), ReplayLimits::default()).await else {
        panic!("a file in a missing directory cannot be opened");
    };
    assert!(message.contains("no-such-directory") && message.contains("does the directory exist"), "{message}");
}

#[tokio::test]
async fn a_corrupted_record_is_reported_not_guessed() {
    let directory = TempDir::new();
    let path = directory.path().join("fleet.db");
    let store = SqliteStore::open(&path, clock(), ReplayLimits::default()).await.unwrap();
    store.claim(contract::claim("x", 2_000, contract::declined())).await.unwrap();
    rusqlite::Connection::open(&path).unwrap().execute("UPDATE nonces SET record = 'not json' WHERE nonce = 'x'", []).unwrap();
    let Err(StoreError::Unavailable(message)) = store.claim(contract::claim("x", 2_000, contract::declined())).await else {
        panic!("a corrupt record must not read as a fresh claim");
    };
    assert!(message.contains("not JSON"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn separate_processes_racing_on_one_file_delete_once() {
    const PROCESSES: usize = 4;
    const ROUNDS: usize = 200;
    let kind = SqliteKind::new();
    let parent = contract::open_fresh(&kind, 10_000).await;
    let spec_text = parent.spec.to_string();
    processes_race(&parent, &[(SPEC_VARIABLE, spec_text)], PROCESSES, ROUNDS).await;
}
