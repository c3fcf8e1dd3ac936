//! Test plumbing: a settable clock, temporary directories, and throwaway PostgreSQL databases.

use mcpsim::testing::Clock;
use mcpsim::testing::Migration;
use mcpsim::testing::{PostgresTarget, StoreSpec};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// A clock the test sets.
#[derive(Debug)]
pub struct TestClock(AtomicU64);

impl TestClock {
    pub fn at(now_ms: u64) -> TestClock {
        TestClock(AtomicU64::new(now_ms))
    }

    pub fn set(&self, now_ms: u64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for TestClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// `migrations` and one step after the last, standing for a newer mcpsim: `sql` creates a table. Leaked (a
/// few dozen bytes per test): the SQLite store takes its steps as `'static`, as its own are.
pub fn with_a_later_step(migrations: &[Migration], sql: &'static str) -> &'static [Migration] {
    let version = migrations.last().map_or(1, |last| last.version + 1);
    migrations.iter().copied().chain([Migration { version, description: "a later step", sql }]).collect::<Vec<_>>().leak()
}

static UNIQUE: AtomicUsize = AtomicUsize::new(0);

/// A name no other test of this run (or of a concurrent run) uses.
pub fn unique_name(prefix: &str) -> String {
    format!("{prefix}_{}_{}", std::process::id(), UNIQUE.fetch_add(1, Ordering::SeqCst))
}

/// A directory removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        TempDir::new_in(&std::env::temp_dir())
    }

    /// A fresh directory under `parent` (e.g. a tmpfs).
    pub fn new_in(parent: &Path) -> TempDir {
        let path = parent.join(unique_name("mcpsim-stores"));
        std::fs::create_dir_all(&path).expect("create a temporary directory");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub const POSTGRES_URL_VARIABLE: &str = "MCPSIM_TEST_POSTGRES_URL";

// Every test that needs a PostgreSQL server is `#[ignore = "needs MCPSIM_TEST_POSTGRES_URL (CI starts one with
// .ci/postgres.sh)"]`: `cargo test` reports it as ignored (not as passed) on a machine without one, and CI runs
// them in a stage of their own against its private server (`.ci/run`: `-- --ignored postgres`).

/// The test server named by `MCPSIM_TEST_POSTGRES_URL`. Only the ignored PostgreSQL tests call this, and a
/// test that was asked to run without a server fails: it must never pass by doing nothing.
pub fn postgres_server() -> (String, PostgresTarget) {
    let Ok(url) = std::env::var(POSTGRES_URL_VARIABLE) else {
        panic!(
            "{POSTGRES_URL_VARIABLE} is not set: start a server with `eval \"$(bash .ci/postgres.sh start)\"`, then run \
             `cargo test --test stores --test fleet -- --ignored postgres`"
        );
    };
    match format!("postgres:{url}").parse::<StoreSpec>() {
        Ok(StoreSpec::Postgres(target)) => (url, target),
        Ok(other) => panic!("{POSTGRES_URL_VARIABLE} must be a PostgreSQL URL, got {other}"),
        Err(error) => panic!("{POSTGRES_URL_VARIABLE} is not usable: {error}"),
    }
}

/// Runs one statement on the server's own database (CREATE/DROP DATABASE cannot run inside a store).
pub async fn postgres_execute(target: &PostgresTarget, sql: &str) {
    let (client, connection) = target.config().connect(tokio_postgres::NoTls).await.unwrap_or_else(|e| panic!("connect to {target}: {e}"));
    let driver = tokio::spawn(connection);
    client.batch_execute(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    drop(client);
    let _ = driver.await;
}

/// A fresh, empty database on the test server, named uniquely; [`drop_database`] removes it.
pub async fn create_database(server: &PostgresTarget) -> (String, PostgresTarget) {
    let name = unique_name("mcpsim_test");
    postgres_execute(server, &format!("CREATE DATABASE {name}")).await;
    (name.clone(), server.with_database(&name))
}

pub async fn drop_database(server: &PostgresTarget, name: &str) {
    postgres_execute(server, &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await;
}

/// A fresh database on the test server for a fleet of `mcpsim serve` processes, dropped with this value.
/// (The fleet tests use it; the store tests, which share this file, do not.)
#[allow(dead_code)]
pub struct ScratchDatabase {
    /// `postgres:URL`, what `--store` (or `MCPSIM_STORE`) says.
    pub argument: String,
    /// The password inside `argument`, which no log line may repeat.
    pub password: Option<String>,
    server: PostgresTarget,
    name: String,
}

#[allow(dead_code)]
impl ScratchDatabase {
    pub async fn create() -> ScratchDatabase {
        let (url, server) = postgres_server();
        let (name, _) = create_database(&server).await;
        let mut url = reqwest::Url::parse(&url).expect("the test server's URL parses");
        url.set_path(&format!("/{name}"));
        ScratchDatabase { argument: format!("postgres:{url}"), password: url.password().map(str::to_string), server, name }
    }
}

impl Drop for ScratchDatabase {
    fn drop(&mut self) {
        // Drop runs inside the test's runtime (or while unwinding): use a runtime of our own on another thread.
        let (server, name) = (self.server.clone(), self.name.clone());
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(drop_database(&server, &name));
        });
        let _ = cleanup.join();
    }
}
