//! The contract against PostgreSQL, plus what is PostgreSQL's own: migrations under concurrent start-up and
//! separate processes racing on one database. Each test gets its own database on the server named by
//! `MCPSIM_TEST_POSTGRES_URL`, dropped afterwards.

use crate::contract::{self, contract_tests, out_of_band_contract_tests, persistent_contract_tests, StoreKind};
use crate::race::{processes_race, DATABASE_VARIABLE, SPEC_VARIABLE};
use crate::support::{create_database, drop_database, postgres_server, with_a_later_step, TestClock};
use async_trait::async_trait;
use mcpsim::testing::FileUri;
use mcpsim::testing::NoteStore;
use mcpsim::testing::PostgresTarget;
use mcpsim::testing::ReplayLimits;
use mcpsim::testing::{open, StoreAdmin, StoreSpec};
use mcpsim::testing::{ClaimOutcome, StoreError};
use mcpsim::testing::{Durability, MigrationReport};
use mcpsim::testing::{PostgresStore, POSTGRES_FIND_BY_TRIGRAMS, POSTGRES_MIGRATIONS};
use std::sync::{Arc, Mutex};

/// Fresh databases on the test server; they are dropped when the kind is.
struct PostgresKind {
    url: String,
    server: PostgresTarget,
    created: Mutex<Vec<String>>,
    durability: Durability,
}

impl PostgresKind {
    /// On the server named by `MCPSIM_TEST_POSTGRES_URL` (the test fails without one).
    fn from_environment() -> PostgresKind {
        PostgresKind::on_the_test_server(Durability::Durable)
    }

    fn relaxed_from_environment() -> PostgresKind {
        PostgresKind::on_the_test_server(Durability::Relaxed)
    }

    fn on_the_test_server(durability: Durability) -> PostgresKind {
        let (url, server) = postgres_server();
        PostgresKind { url, server, created: Mutex::new(Vec::new()), durability }
    }

    async fn fresh_database(&self) -> (String, PostgresTarget) {
        let (name, target) = create_database(&self.server).await;
        self.created.lock().unwrap().push(name.clone());
        (name, target)
    }
}

#[async_trait]
impl StoreKind for PostgresKind {
    async fn fresh(&self) -> StoreSpec {
        StoreSpec::Postgres(self.fresh_database().await.1)
    }

    fn durability(&self) -> Durability {
        self.durability
    }
}

impl Drop for PostgresKind {
    fn drop(&mut self) {
        let names = std::mem::take(&mut *self.created.lock().unwrap_or_else(|p| p.into_inner()));
        if names.is_empty() {
            return;
        }
        // Drop runs inside the test's runtime (or while unwinding); use a runtime of our own on another thread.
        let server = self.server.clone();
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                for name in names {
                    drop_database(&server, &name).await;
                }
            });
        });
        let _ = cleanup.join();
    }
}

contract_tests!(ignore = "needs MCPSIM_TEST_POSTGRES_URL (CI starts one with .ci/postgres.sh)", PostgresKind::from_environment());
out_of_band_contract_tests!(
    ignore = "needs MCPSIM_TEST_POSTGRES_URL (CI starts one with .ci/postgres.sh)",
    PostgresKind::from_environment()
);
persistent_contract_tests!(
    ignore = "needs MCPSIM_TEST_POSTGRES_URL (CI starts one with .ci/postgres.sh)",
    PostgresKind::from_environment()
);

/// `--durability relaxed` (synchronous_commit=off) changes only when a commit reaches the WAL on disk.
mod relaxed {
    use super::*;

    contract_tests!(
        ignore = "needs MCPSIM_TEST_POSTGRES_URL (CI starts one with .ci/postgres.sh)",
        PostgresKind::relaxed_from_environment()
    );
    persistent_contract_tests!(
        ignore = "needs MCPSIM_TEST_POSTGRES_URL (CI starts one with .ci/postgres.sh)",
        PostgresKind::relaxed_from_environment()
    );
}

fn clock() -> Arc<TestClock> {
    Arc::new(TestClock::at(contract::START_MS))
}

/// `--durability` reaches the server: the store's pooled sessions report the synchronous_commit it set.
#[tokio::test]
#[ignore = "needs MCPSIM_TEST_POSTGRES_URL (CI starts one with .ci/postgres.sh)"]
async fn durability_is_what_the_server_reports() {
    let kind = PostgresKind::from_environment();
    for (durability, expected) in [(Durability::Durable, "synchronous_commit=on"), (Durability::Relaxed, "synchronous_commit=off")] {
        let (_, target) = kind.fresh_database().await;
        let store =
            PostgresStore::open_with_durability(target.config().clone(), clock(), ReplayLimits::default(), durability).await.unwrap();
        assert_eq!(store.commit_setting().await.unwrap(), expected, "{durability:?}");
    }
}

#[tokio::test]
#[ignore = "needs MCPSIM_TEST_POSTGRES_URL (CI starts one with .ci/postgres.sh)"]
async fn migrations_run_once_and_newer_schemas_are_refused() {
    let kind = PostgresKind::from_environment();
    let (_, target) = kind.fresh_database().await;
    let config = target.config().clone();
    let limits = ReplayLimits::default();
    let (_, first) = PostgresStore::open_with_migrations(config.clone(), clock(), limits, &POSTGRES_MIGRATIONS[..1]).await.unwrap();
    assert_eq!(first, MigrationReport { version_before: 0, version_after: 1 });
    let (upgraded, current) = PostgresStore::open_with_migrations(config.clone(), clock(), limits, POSTGRES_MIGRATIONS).await.unwrap();
    assert_eq!(current, MigrationReport { version_before: 1, version_after: 6 }, "only the new steps run");
    assert_eq!(upgraded.nonce_count().await, Ok(0), "the data of step 1 is untouched");
    let (_, again) = PostgresStore::open_with_migrations(config.clone(), clock(), limits, POSTGRES_MIGRATIONS).await.unwrap();
    assert_eq!(again, MigrationReport { version_before: 6, version_after: 6 }, "a restart applies nothing");
    let with_next = with_a_later_step(POSTGRES_MIGRATIONS, "CREATE TABLE later_step (x BIGINT);");
    let (_, later) = PostgresStore::open_with_migrations(config.clone(), clock(), limits, with_next).await.unwrap();
    assert_eq!(later, MigrationReport { version_before: 6, version_after: 7 });
    let Err(StoreError::Unavailable(refusal)) = PostgresStore::open(config, clock(), limits).await else {
        panic!("an older mcpsim must refuse a newer schema");
    };
    assert!(refusal.contains("version 7") && refusal.contains("upgrade mcpsim"), "{refusal}");
}

/// With 10^4 notes in the workspace, round 1's search for a query of 3 characters or more reads the trigram
/// index of the folded titles (`notes_by_title`, pg_trgm's GIN), not the workspace's range, and finds the
/// one note matching (a `%`, `_` or `\` in the query is its text, not a pattern).
#[tokio::test]
#[ignore = "needs MCPSIM_TEST_POSTGRES_URL (CI starts one with .ci/postgres.sh)"]
async fn round_one_reads_the_trigram_index() {
    let kind = PostgresKind::from_environment();
    let (_, target) = kind.fresh_database().await;
    let store = PostgresStore::open(target.config().clone(), clock(), ReplayLimits::default()).await.unwrap();
    let (client, connection) = target.config().connect(tokio_postgres::NoTls).await.unwrap();
    let driver = tokio::spawn(connection);
    client
        .batch_execute(
            "INSERT INTO notes (id, position, title, uri, body, uri_key, title_fold)
             SELECT 'n' || i, nextval('note_positions'), 'Weekly notes ' || i, 'file:///w/n' || i || '.md', '',
                    'file:///w/n' || i || '.md/', 'weekly notes ' || i FROM generate_series(1, 10000) AS i;
             INSERT INTO notes (id, position, title, uri, body, uri_key, title_fold)
             VALUES ('tps', nextval('note_positions'), 'TPS 100%_\\ report', 'file:///w/tps.md', '', 'file:///w/tps.md/', 'tps 100%_\\ report');
             ANALYZE notes;",
        )
        .await
        .unwrap();
    let (start, end) = FileUri::parse("file:///w").unwrap().index_range();
    let plan: Vec<String> = client
        .query(&format!("EXPLAIN {POSTGRES_FIND_BY_TRIGRAMS}"), &[&start, &end, &"tps report"])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(plan.iter().any(|line| line.contains("notes_by_title")), "{plan:#?}");
    // The plan PostgreSQL may keep for a statement prepared once (after five runs), not knowing the query.
    client.batch_execute("SET plan_cache_mode = force_generic_plan").await.unwrap();
    let statement = client.prepare(&format!("EXPLAIN {POSTGRES_FIND_BY_TRIGRAMS}")).await.unwrap();
    let generic: Vec<String> =
        client.query(&statement, &[&start, &end, &"tps report"]).await.unwrap().iter().map(|row| row.get(0)).collect();
    assert!(generic.iter().any(|line| line.contains("notes_by_title")), "{generic:#?}");
    assert!(!generic.iter().any(|line| line.contains("notes_by_place")), "{generic:#?}");
    drop(client);
    let _ = driver.await;
    let workspace = FileUri::parse("file:///w").unwrap();
    let ids = |found: Vec<mcpsim::testing::Note>| found.into_iter().map(|n| n.id).collect::<Vec<_>>();
    assert_eq!(ids(store.find_candidates(&workspace, "100%_\\ REPORT").await.unwrap()), ["tps"]);
    assert_eq!(ids(store.find_candidates(&workspace, "0%_").await.unwrap()), ["tps"]);
    assert!(ids(store.find_candidates(&workspace, "1_0").await.unwrap()).is_empty(), "_ is no wildcard");
    assert_eq!(store.find_candidates(&workspace, "notes 99").await.unwrap().len(), 111, "notes 99, 990–999, 9900–9999");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs MCPSIM_TEST_POSTGRES_URL (CI starts one with .ci/postgres.sh)"]
async fn processes_starting_together_migrate_once() {
    let kind = PostgresKind::from_environment();
    let spec = kind.fresh().await;
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
async fn an_unreachable_server_is_reported_with_a_hint_and_no_password() {
    let spec: StoreSpec = "postgres://mcpsim:hunter2@127.0.0.1:1/nowhere?connect_timeout=2".parse().unwrap();
    let Err(StoreError::Unavailable(message)) = open(&spec, clock(), ReplayLimits::default()).await else {
        panic!("nothing listens on port 1");
    };
    assert!(message.contains("127.0.0.1:1/nowhere") && message.contains("is PostgreSQL running"), "{message}");
    assert!(!message.contains("hunter2"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MCPSIM_TEST_POSTGRES_URL (CI starts one with .ci/postgres.sh)"]
async fn separate_processes_racing_on_one_database_delete_once() {
    const PROCESSES: usize = 4;
    const ROUNDS: usize = 200;
    let kind = PostgresKind::from_environment();
    let (name, target) = kind.fresh_database().await;
    let parent = contract::open_fresh(&OneDatabase(target), 10_000).await;
    let environment = [(SPEC_VARIABLE, format!("postgres:{}", kind.url)), (DATABASE_VARIABLE, name)];
    processes_race(&parent, &environment, PROCESSES, ROUNDS).await;
}

/// A kind whose only "fresh" location is one database created beforehand.
struct OneDatabase(PostgresTarget);

#[async_trait]
impl StoreKind for OneDatabase {
    async fn fresh(&self) -> StoreSpec {
        StoreSpec::Postgres(self.0.clone())
    }
}
