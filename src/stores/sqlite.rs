//! The note store and replay store in one SQLite file, shared safely by every process on one machine.
//!
//! WAL journal (readers never block the writer), a busy timeout (writers queue instead of failing), and
//! `BEGIN IMMEDIATE` for every read-modify-write, so the write lock is taken before anything is read: two
//! processes cannot both see "nonce unclaimed" and both commit. `claim_and_delete` is one transaction:
//! insert the nonce (a conflict means already claimed), count it against the capacity, re-read the live note,
//! re-check its containment, delete it, commit; any refusal rolls the whole transaction back, so a refused
//! delete consumes nothing.
//!
//! rusqlite blocks, so every operation runs where blocking is allowed (in place via `block_in_place` on the
//! multi-threaded runtime, on the blocking pool otherwise) with a pooled connection; at most
//! [`SQLITE_CONNECTIONS_MAX`] operations of one process run at once, the rest wait their turn. Writers of one
//! process go one at a time (they would serialize on the file's lock anyway), so only one per process polls
//! for the lock while another process holds it, in short steps ([`SQLITE_BUSY_SLEEP_STEP_US`]).
//!
//! Group commit: the claims and guarded deletes of one process queue; whichever of their callers gets the
//! writer's turn runs every queued one (up to [`SQLITE_BATCH_MAX`], never waiting for more) in one
//! transaction, each inside its own SAVEPOINT (a refusal or failure rolls back that item's work alone), commits
//! once (one sync under `durable`), and only then answers each of them. A failed commit answers every item of
//! the batch with the error: no answer says deleted unless the commit that recorded it returned.
//! This store serves the real fleet only; the simulator keeps its in-memory stores.

use crate::framework::out_of_band::decide_completion;
use crate::framework::out_of_band::{Completion, FlowRecord, FlowStart, FlowStatus, OutOfBandFlow, OutOfBandStore};
use crate::framework::ports::{
    fold_title, note_index_key, ClaimAndDelete, ClaimOutcome, ClaimRecord, Clock, GuardedDelete, NonceClaim, Note, NoteStore, ReplayStore,
    StoreError,
};
use crate::policy::containment::FileUri;
use crate::servers::gateway::backends::{ExportLedger, ExportOutcome, ExportRecord, ExportRequest};
use crate::servers::gateway::ports::{rate_window, RateDecision, RateLimit, RateLimiter};
use crate::stores::admin::{seed_report, seeded_listing, SeedReport, StoreAdmin};
use crate::stores::database::{decode_note_ids, encode_note_ids};
use crate::stores::database::{
    decode_record, encode_record, latest_version, matches_revisionless, newer_schema, prune_horizon_ms, sql_ms, still_inside, Durability,
    Migration, MigrationReport,
};
use crate::stores::gateway::{EXPORT_KEYS_MAX, RATE_COUNTERS_MAX};
use crate::stores::memory::{past_retention, ReplayLimits};
use crate::stores::out_of_band::{OutOfBandLimits, OUT_OF_BAND_GRACE_MS};
use async_trait::async_trait;
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior};
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, Semaphore};

/// How long a writer waits for another process's transaction before reporting the store unavailable.
pub(crate) const SQLITE_BUSY_TIMEOUT_MS: u64 = 5_000;
/// While waiting for the write lock, the n-th retry sleeps n × this, up to [`SQLITE_BUSY_SLEEP_MAX_US`].
/// A claim holds the lock for about a millisecond, so waits start far below that. (SQLite's own busy
/// timeout sleeps 1, 2, 5, 10 … 100 ms: with several processes writing, that alone put p99 near 100 ms.)
pub const SQLITE_BUSY_SLEEP_STEP_US: u64 = 50;
pub const SQLITE_BUSY_SLEEP_MAX_US: u64 = 1_000;
/// Connections (and blocking threads) one process uses at most. Writers serialize on the file's lock anyway;
/// this bounds readers and the threads blocked in SQLite under load.
pub const SQLITE_CONNECTIONS_MAX: usize = 8;

/// The most queued writes one transaction (one commit, one sync) carries. A batch is what was queued when the
/// writer's turn came: nothing waits for more.
pub const SQLITE_BATCH_MAX: usize = 64;

/// WAL pages after which a commit checkpoints (SQLite's default is 1,000). With 1 KiB note bodies a flow
/// writes about 8 pages, so at 1,000 flows/s a checkpoint runs about once a second (not eight times); the WAL
/// file grows to about 40 MB (4 KiB pages) and is reused, not shrunk. Under `--durability relaxed` the WAL is
/// synced only at checkpoints, so a power loss may undo up to this many pages of commits (or what the OS
/// has not yet written back, whichever is less): about a second of commits at that rate. fleet_load
/// (2026-12-01, 16 clients, relaxed): 882 and 995 µs of server CPU per confirmed deletion with 1,000; 769 and
/// 762 with 10,000; `mmap_size = 256 MiB` made no difference (969, 905) and is not set.
pub const SQLITE_WAL_CHECKPOINT_PAGES: i64 = 10_000;

/// The schema, oldest first. Never edit a released step: add a new one.
pub const SQLITE_MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "notes in listing order, consumed nonces, and the nonce count the capacity bound reads",
        sql: "
        CREATE TABLE notes (
            id TEXT PRIMARY KEY NOT NULL,
            position INTEGER NOT NULL UNIQUE,
            title TEXT NOT NULL,
            uri TEXT NOT NULL,
            body TEXT NOT NULL
        ) STRICT;
        CREATE TABLE nonces (
            nonce TEXT PRIMARY KEY NOT NULL,
            expires_at_ms INTEGER NOT NULL,
            record TEXT NOT NULL
        ) STRICT, WITHOUT ROWID;
        CREATE INDEX nonces_by_expiry ON nonces (expires_at_ms);
        -- COUNT(*) would scan the table on every claim; this row is kept equal to it in the same transactions.
        CREATE TABLE replay_counter (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            nonce_count INTEGER NOT NULL CHECK (nonce_count >= 0)
        ) STRICT;
        INSERT INTO replay_counter (id, nonce_count) VALUES (1, 0);
    ",
    },
    Migration {
        version: 2,
        description: "the expiry the nonces have been pruned through: claims of states that old are refused on any clock",
        sql: "ALTER TABLE replay_counter ADD COLUMN pruned_through_ms INTEGER NOT NULL DEFAULT 0;",
    },
    Migration {
        version: 3,
        description: "each principal's share of the nonces; the gateway's rate-limit counters and its notes backends' export ledgers",
        sql: "
        -- Nonces claimed before this step belong to no principal ('') and count against that share alone.
        ALTER TABLE nonces ADD COLUMN principal TEXT NOT NULL DEFAULT '';
        CREATE TABLE replay_principals (
            principal TEXT PRIMARY KEY NOT NULL,
            nonce_count INTEGER NOT NULL CHECK (nonce_count > 0)
        ) STRICT, WITHOUT ROWID;
        INSERT INTO replay_principals (principal, nonce_count) SELECT '', COUNT(*) FROM nonces HAVING COUNT(*) > 0;
        CREATE TABLE rate_counters (
            principal TEXT NOT NULL,
            tool TEXT NOT NULL,
            window_ms INTEGER NOT NULL,
            window_index INTEGER NOT NULL,
            ends_at_ms INTEGER NOT NULL,
            calls INTEGER NOT NULL CHECK (calls > 0),
            PRIMARY KEY (principal, tool, window_ms, window_index)
        ) STRICT, WITHOUT ROWID;
        CREATE INDEX rate_counters_by_end ON rate_counters (ends_at_ms);
        -- One ledger per notes backend; position is the export's number in its ledger (export-1, export-2, …).
        CREATE TABLE exports (
            ledger TEXT NOT NULL,
            key TEXT NOT NULL,
            position INTEGER NOT NULL,
            request_digest TEXT NOT NULL,
            principal TEXT NOT NULL,
            destination TEXT NOT NULL,
            note_ids TEXT NOT NULL,
            PRIMARY KEY (ledger, key),
            UNIQUE (ledger, position)
        ) STRICT;
    ",
    },
    Migration {
        version: 4,
        description: "the out-of-band flows of URL-mode elicitation: who started each, and who completed it",
        sql: "
        CREATE TABLE out_of_band_flows (
            reference TEXT PRIMARY KEY NOT NULL,
            principal TEXT NOT NULL,
            tool TEXT NOT NULL,
            subject TEXT NOT NULL,
            expires_at_ms INTEGER NOT NULL,
            completed_by TEXT
        ) STRICT, WITHOUT ROWID;
        CREATE INDEX out_of_band_flows_by_expiry ON out_of_band_flows (expires_at_ms);
    ",
    },
    Migration {
        version: NOTE_INDEX_VERSION,
        description: "notes by place and title: round 1 reads the asked workspace's titles, never every note's body",
        sql: "
        -- The normalized URI's index key (FileUri::index_key; NULL where the URI does not parse: inside nothing)
        -- and the lowercased title. Rust computes both (SQLite's lower() knows ASCII only); opening the store
        -- fills them for notes written before this step.
        ALTER TABLE notes ADD COLUMN uri_key TEXT;
        ALTER TABLE notes ADD COLUMN title_fold TEXT;
        CREATE INDEX notes_by_place ON notes (uri_key, position);
    ",
    },
    Migration {
        version: 6,
        description: "round 1's search answered from the index alone: notes_by_place also holds the titles, ids and URIs",
        sql: "
        -- Round 1 compares the title of every note in the asked workspace. With (uri_key, position) alone each
        -- candidate cost a seek into the notes table, whose leaves hold the bodies (a few notes per page), and
        -- every page read after another process's commit is a pread: most of a flow's store CPU
        -- (fleet_load, perf, 2026-12-01). The wider index answers the search without reading a table row.
        DROP INDEX notes_by_place;
        CREATE INDEX notes_by_place ON notes (uri_key, position, title_fold, id, title, uri);
    ",
    },
    Migration {
        version: 7,
        description: "the out-of-band flows by principal: each principal's share of them is counted from this index",
        sql: "CREATE INDEX out_of_band_flows_by_principal ON out_of_band_flows (principal);",
    },
];

/// The trigram index of titles: not a numbered migration but an addition, built by opening the store when it
/// is missing. It only narrows round 1's search, and its triggers keep it in step with every writer, an older
/// mcpsim's included, so it must not raise the schema version: a rolling deploy runs the release before it
/// (schema 7, which refuses a newer version) beside this one on the same file (lesson 18, found by
/// `tests/target_rotation.rs` when this was migration 8).
const TITLE_INDEX: &str = "
        -- FTS5's trigram tokenizer over title_fold (Rust's to_lowercase: case_sensitive 1 keeps SQLite from
        -- folding again, ASCII-only), rowid = the note's position. The triggers keep it in step in the
        -- transaction of every write to notes (insert, upsert, rename, move, delete, the seed's renumbering, the
        -- fill of title_fold at open), including another program's: the table keeps its own copy of the folded
        -- titles, not contentless_delete, which a SQLite before 3.43 (Debian 12's, Python's) cannot write.
        CREATE VIRTUAL TABLE notes_by_title USING fts5 (title_fold, tokenize = 'trigram case_sensitive 1');
        INSERT INTO notes_by_title (rowid, title_fold) SELECT position, title_fold FROM notes WHERE title_fold IS NOT NULL;
        CREATE TRIGGER notes_by_title_insert AFTER INSERT ON notes WHEN new.title_fold IS NOT NULL BEGIN
            INSERT INTO notes_by_title (rowid, title_fold) VALUES (new.position, new.title_fold);
        END;
        CREATE TRIGGER notes_by_title_delete AFTER DELETE ON notes BEGIN
            DELETE FROM notes_by_title WHERE rowid = old.position;
        END;
        CREATE TRIGGER notes_by_title_update AFTER UPDATE OF position, title_fold ON notes BEGIN
            DELETE FROM notes_by_title WHERE rowid = old.position;
            INSERT INTO notes_by_title (rowid, title_fold) SELECT new.position, new.title_fold WHERE new.title_fold IS NOT NULL;
        END;
    ";

/// How `notes_by_title` merges its segments (FTS5 settings, kept in its `_config` table, so every writer of
/// the file follows them, an older mcpsim's included). Each write transaction adds a segment, and a search
/// reads every segment's postings of each of its trigrams: with FTS5's defaults (`automerge` 4, `crisismerge`
/// 16) a store written one note at a time kept 11–20 segments and a search cost 100–155 µs, against 19 µs
/// with one segment. Merging two segments of a level at a time, and all of a level at once when it holds 4,
/// keeps 4–5 (a search 44–54 µs) for no measurable cost per write (SQLite 3.40, 10^5 titles, 4,000 single
/// writes and deletes; docs/benchmarks.md, "Store scale", 2026-12-04).
const TITLE_INDEX_MERGING: [(&str, i64); 2] = [("automerge", 2), ("crisismerge", 4)];

/// Builds [`TITLE_INDEX`] in one write transaction if the database does not have it yet, merged into one
/// segment (a bulk fill leaves many), and sets [`TITLE_INDEX_MERGING`] where it differs (a file whose index an
/// earlier mcpsim built).
fn ensure_title_index(connection: &mut Connection) -> Outcome<()> {
    // Nothing to write (the index there, merged as set): no write lock taken, as for `migrate`.
    if title_index_is_current(connection)? {
        return Ok(());
    }
    let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let present: bool = transaction.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'notes_by_title')",
        [],
        |row| row.get(0),
    )?;
    if !present {
        transaction.execute_batch(TITLE_INDEX)?;
    }
    for (setting, value) in TITLE_INDEX_MERGING {
        let set: Option<i64> =
            transaction.query_row("SELECT v FROM notes_by_title_config WHERE k = ?1", [setting], |row| row.get(0)).optional()?;
        if set != Some(value) {
            transaction.execute("INSERT INTO notes_by_title (notes_by_title, rank) VALUES (?1, ?2)", params![setting, value])?;
        }
    }
    if !present {
        transaction.execute_batch("INSERT INTO notes_by_title (notes_by_title) VALUES ('optimize')")?;
    }
    transaction.commit()?;
    Ok(())
}

/// Whether the title index exists with [`TITLE_INDEX_MERGING`]'s settings, read without the write lock.
fn title_index_is_current(connection: &Connection) -> Outcome<bool> {
    let present: bool = connection.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'notes_by_title')",
        [],
        |row| row.get(0),
    )?;
    if !present {
        return Ok(false);
    }
    for (setting, value) in TITLE_INDEX_MERGING {
        let set: Option<i64> =
            connection.query_row("SELECT v FROM notes_by_title_config WHERE k = ?1", [setting], |row| row.get(0)).optional()?;
        if set != Some(value) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The schema step that added the search columns, after which opening fills them for older rows.
const NOTE_INDEX_VERSION: i64 = 5;

/// The schema version whose stores get [`TITLE_INDEX`] (the last numbered one when it was added).
const TITLE_INDEX_AFTER: i64 = 7;

/// Fills the search columns of notes written before [`NOTE_INDEX_VERSION`] (or by hand): one pass at open.
fn backfill_search_columns(connection: &mut Connection) -> Outcome<()> {
    let stale: bool = connection.query_row("SELECT EXISTS (SELECT 1 FROM notes WHERE title_fold IS NULL)", [], |row| row.get(0))?;
    if !stale {
        return Ok(());
    }
    let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let stale: Vec<(String, String, String)> = {
        let mut statement = transaction.prepare("SELECT id, uri, title FROM notes WHERE title_fold IS NULL")?;
        let rows = statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    for (id, uri, title) in stale {
        transaction.execute(
            "UPDATE notes SET uri_key = ?1, title_fold = ?2 WHERE id = ?3",
            params![note_index_key(&uri), fold_title(&title), id],
        )?;
    }
    transaction.commit()?;
    Ok(())
}

/// Both ports and the admin handle over one SQLite file. Cheap to clone; clones share the connection pool.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
    /// Bounds of the out-of-band flows (in all and per principal); [`SqliteStore::with_out_of_band_limits`].
    flows: OutOfBandLimits,
}

struct Inner {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
    /// Set by `close`: no new operation starts, and connections are closed instead of pooled.
    closed: AtomicBool,
    /// One permit per connection in use.
    permits: Arc<Semaphore>,
    /// One permit: the write transaction of this process that may take the file's write lock.
    writer: Arc<Semaphore>,
    /// Writes waiting for a batch (group commit), oldest first; run by whichever caller holds `writer`.
    queue: Mutex<VecDeque<Box<dyn QueuedWrite>>>,
    /// How many writes each batch carried.
    batches: Mutex<BatchSizes>,
    clock: Arc<dyn Clock>,
    limits: ReplayLimits,
    durability: Durability,
}

/// An operation's failure: SQLite's own, or ours (a corrupt record, a newer schema).
enum Failure {
    Sql(rusqlite::Error),
    Store(StoreError),
}

impl From<rusqlite::Error> for Failure {
    fn from(error: rusqlite::Error) -> Self {
        Failure::Sql(error)
    }
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Self {
        Failure::Store(error)
    }
}

type Outcome<T> = Result<T, Failure>;

/// Whether an operation writes (and so queues behind this process's other writers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

/// What the replay reservation inside a transaction found.
enum Reservation {
    Inserted,
    AlreadyClaimed(ClaimRecord),
    Full,
    /// Past the replay window (see [`past_retention`]); the insert is to be rolled back.
    Expired,
}

impl SqliteStore {
    /// The same store, bounding its out-of-band flows by `limits` (in all and per principal).
    pub fn with_out_of_band_limits(self, limits: OutOfBandLimits) -> SqliteStore {
        SqliteStore { flows: limits, ..self }
    }

    /// Opens (creating if needed) the database at `path` and migrates its schema. Several processes may open
    /// the same file at once; migration is serialized by the write lock.
    pub async fn open(path: &Path, clock: Arc<dyn Clock>, limits: ReplayLimits) -> Result<SqliteStore, StoreError> {
        Self::open_with_durability(path, clock, limits, Durability::Durable).await
    }

    /// [`SqliteStore::open`] with a choice of when commits are acknowledged (see [`Durability`]).
    pub async fn open_with_durability(
        path: &Path,
        clock: Arc<dyn Clock>,
        limits: ReplayLimits,
        durability: Durability,
    ) -> Result<SqliteStore, StoreError> {
        Self::open_inner(path, clock, limits, durability, SQLITE_MIGRATIONS).await.map(|(store, _)| store)
    }

    /// [`SqliteStore::open`] with an explicit migration list, reporting what it applied (for tests of the
    /// migration machinery).
    pub async fn open_with_migrations(
        path: &Path,
        clock: Arc<dyn Clock>,
        limits: ReplayLimits,
        migrations: &'static [Migration],
    ) -> Result<(SqliteStore, MigrationReport), StoreError> {
        Self::open_inner(path, clock, limits, Durability::Durable, migrations).await
    }

    async fn open_inner(
        path: &Path,
        clock: Arc<dyn Clock>,
        limits: ReplayLimits,
        durability: Durability,
        migrations: &'static [Migration],
    ) -> Result<(SqliteStore, MigrationReport), StoreError> {
        let inner = Arc::new(Inner {
            path: path.to_path_buf(),
            idle: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
            permits: Arc::new(Semaphore::new(SQLITE_CONNECTIONS_MAX)),
            writer: Arc::new(Semaphore::new(1)),
            queue: Mutex::new(VecDeque::new()),
            batches: Mutex::new(BatchSizes::default()),
            clock,
            limits,
            durability,
        });
        let store = SqliteStore { inner, flows: OutOfBandLimits::default() };
        let report = store
            .run(Access::Write, move |connection, inner| {
                let report = migrate(connection, migrations, inner.clock.now_ms())?;
                if migrations.iter().any(|migration| migration.version == NOTE_INDEX_VERSION) {
                    backfill_search_columns(connection)?;
                }
                if migrations.iter().any(|migration| migration.version == TITLE_INDEX_AFTER) {
                    ensure_title_index(connection)?;
                }
                Ok(report)
            })
            .await?;
        Ok((store, report))
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The sizes of the group commits this store (this process) has run so far.
    pub fn batch_sizes(&self) -> BatchSizes {
        self.inner.batch_sizes()
    }

    /// Runs `operation` as one item of a group commit (see the module's documentation): queued, run by
    /// whichever caller of this process gets the writer's turn, inside a SAVEPOINT of that batch's transaction.
    /// `operation` says whether its work is kept (`true`) or rolled back to its savepoint (a refusal); its
    /// answer is given only after the batch's commit returned, and is the commit's error if that failed.
    async fn write<T, F>(&self, operation: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &Inner) -> Outcome<(T, bool)> + Send + 'static,
    {
        let inner = self.inner.clone();
        let path = inner.path.display().to_string();
        if inner.closed.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable(format!("sqlite {path}: the store was closed (the server is shutting down)")));
        }
        let (answer, mut answered) = oneshot::channel();
        inner.lock_queue().push_back(Box::new(Pending { operation: Some(operation), outcome: None, answer }));
        loop {
            // Either another caller's batch carries this write (its answer comes, and this caller leaves the
            // writer's queue without taking a turn), or this caller's turn comes first and it runs a batch.
            let writing = tokio::select! {
                biased;
                result = &mut answered => {
                    return result.unwrap_or_else(|_| {
                        Err(StoreError::Unavailable(format!("sqlite {path}: the store worker failed while running this write")))
                    });
                }
                permit = inner.writer.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            };
            // The writer before this one may have answered as the turn passed: then the answer is here.
            match answered.try_recv() {
                Ok(result) => return result,
                Err(oneshot::error::TryRecvError::Closed) => {
                    return Err(StoreError::Unavailable(format!("sqlite {path}: the store worker failed while running this write")));
                }
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            let permit = inner.permits.clone().acquire_owned().await.expect("the semaphore is never closed");
            // No await from here until the batch has run: a caller dropped now (its client gone) cannot drop
            // the other callers' writes with it.
            let batch: Vec<Box<dyn QueuedWrite>> = {
                let mut queue = inner.lock_queue();
                let take = queue.len().min(SQLITE_BATCH_MAX);
                queue.drain(..take).collect()
            };
            let batch_inner = inner.clone();
            let work = move || {
                let _permits = (permit, writing);
                batch_inner.run_batch(batch);
            };
            if let Err(failure) = blocking(work).await {
                // The batch's answers were dropped unsent; this write's receiver reports it below.
                tracing::warn!("sqlite {path}: a batch of writes failed: {failure}");
            }
        }
    }

    /// Runs `operation` with a pooled connection, where blocking is allowed.
    async fn run<T, F>(&self, access: Access, operation: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection, &Inner) -> Outcome<T> + Send + 'static,
    {
        let inner = self.inner.clone();
        let path = inner.path.display().to_string();
        if inner.closed.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable(format!("sqlite {path}: the store was closed (the server is shutting down)")));
        }
        // Writers of this process queue here (in order, without polling the file lock); one at a time goes on
        // to contend with other processes' writers. Readers never wait for writers (WAL).
        let writing = match access {
            Access::Write => Some(inner.writer.clone().acquire_owned().await.expect("the semaphore is never closed")),
            Access::Read => None,
        };
        let permit = inner.permits.clone().acquire_owned().await.expect("the semaphore is never closed");
        let work = move || {
            let _permits = (permit, writing);
            let mut connection = inner.take_connection()?;
            let result = operation(&mut connection, &inner);
            // A connection whose operation failed may hold an aborted transaction: do not reuse it.
            if result.is_ok() && connection.is_autocommit() {
                inner.give_back(connection);
            }
            result
        };
        match blocking(work).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(Failure::Store(error))) => Err(error),
            Ok(Err(Failure::Sql(error))) => Err(describe_sql_error(&path, &error)),
            Err(failure) => Err(StoreError::Unavailable(format!("sqlite {path}: the store worker failed: {failure}"))),
        }
    }
}

/// Runs `work` where blocking is allowed. On a worker of the multi-threaded runtime (every HTTP server) it runs
/// right here: tokio hands this worker's other tasks to another thread, off this request's path. Crossing to
/// the blocking pool and back instead cost two thread wake-ups per operation (about 45 µs each on a loaded
/// 2-core machine), more than the operation itself. A panic is caught as the blocking pool would catch it:
/// reported, never unwound into the server.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, String> {
    match tokio::runtime::Handle::current().runtime_flavor() {
        tokio::runtime::RuntimeFlavor::MultiThread => {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tokio::task::block_in_place(work)))
                .map_err(|_| "the operation panicked".to_string())
        }
        // A single-threaded runtime (stdio, tests) has no other worker to hand its tasks to.
        _ => tokio::task::spawn_blocking(work).await.map_err(|join_error| join_error.to_string()),
    }
}

/// One write waiting in a group commit's queue.
trait QueuedWrite: Send {
    /// Runs the write on the batch's connection, inside its savepoint; whether its work is to be kept.
    fn stage(&mut self, connection: &Connection, inner: &Inner) -> bool;
    /// Answers the caller once the batch's fate is known: `Ok` once its commit returned, else the error.
    fn answer(self: Box<Self>, committed: Result<(), StoreError>);
}

struct Pending<T, F> {
    operation: Option<F>,
    outcome: Option<Result<T, StoreError>>,
    answer: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> QueuedWrite for Pending<T, F>
where
    T: Send + 'static,
    F: FnOnce(&Connection, &Inner) -> Outcome<(T, bool)> + Send + 'static,
{
    fn stage(&mut self, connection: &Connection, inner: &Inner) -> bool {
        let Some(operation) = self.operation.take() else { return false };
        // Its caller gave up (a dropped request) before its turn: nothing is done in its name.
        if self.answer.is_closed() {
            return false;
        }
        let (outcome, keep) = match operation(connection, inner) {
            Ok((value, keep)) => (Ok(value), keep),
            Err(failure) => (Err(failure.into_store_error(&inner.path)), false),
        };
        self.outcome = Some(outcome);
        keep
    }

    fn answer(self: Box<Self>, committed: Result<(), StoreError>) {
        let result = match (committed, self.outcome) {
            (Ok(()), Some(outcome)) => outcome,
            (Err(error), _) => Err(error),
            (Ok(()), None) => return,
        };
        // A caller that stopped waiting is not told.
        let _ = self.answer.send(result);
    }
}

/// The sizes of the batches a store's group commit ran (each commit's count of writes).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BatchSizes {
    pub batches: u64,
    pub writes: u64,
    pub largest: usize,
    /// Batches of 1, 2–3, 4–7, 8–15, 16–31 and 32 or more writes.
    pub by_size: [u64; 6],
}

impl BatchSizes {
    fn record(&mut self, size: usize) {
        self.batches += 1;
        self.writes += size as u64;
        self.largest = self.largest.max(size);
        let bucket = (usize::BITS - size.max(1).leading_zeros()) as usize - 1;
        self.by_size[bucket.min(self.by_size.len() - 1)] += 1;
    }

    /// One line: the batches, the writes, the mean and the histogram.
    pub fn describe(&self) -> String {
        let mean = self.writes as f64 / self.batches.max(1) as f64;
        let [one, two, four, eight, sixteen, more] = self.by_size;
        format!(
            "group commit: {} writes in {} commits (mean {mean:.2} per commit, largest {}; commits of 1: {one}, 2-3: {two}, 4-7: {four}, 8-15: {eight}, 16-31: {sixteen}, 32+: {more})",
            self.writes, self.batches, self.largest
        )
    }
}

impl Failure {
    fn into_store_error(self, path: &Path) -> StoreError {
        match self {
            Failure::Store(error) => error,
            Failure::Sql(error) => describe_sql_error(&path.display().to_string(), &error),
        }
    }
}

impl Inner {
    fn batch_sizes(&self) -> BatchSizes {
        self.batches.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    fn lock_queue(&self) -> std::sync::MutexGuard<'_, VecDeque<Box<dyn QueuedWrite>>> {
        self.queue.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `batch` in one transaction, each write in its own savepoint, commits once, then answers each.
    fn run_batch(&self, mut batch: Vec<Box<dyn QueuedWrite>>) {
        if batch.is_empty() {
            return;
        }
        let committed = self.take_connection().and_then(|mut connection| {
            let result = stage_and_commit(&mut connection, self, &mut batch);
            if result.is_err() && !connection.is_autocommit() {
                let _ = connection.execute_batch("ROLLBACK");
            }
            // A connection whose batch failed may hold an aborted transaction: do not reuse it.
            if result.is_ok() && connection.is_autocommit() {
                self.give_back(connection);
            }
            result
        });
        self.batches.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).record(batch.len());
        // Off by default (`MCPSIM_LOG=…,mcpsim::store=debug` shows it): tests/fleet.rs reads it from a process it kills.
        tracing::debug!(target: "mcpsim::store", "sqlite batch: {} writes, committed: {}", batch.len(), committed.is_ok());
        match committed {
            Ok(()) => batch.into_iter().for_each(|write| write.answer(Ok(()))),
            Err(failure) => {
                let error = failure.into_store_error(&self.path);
                batch.into_iter().for_each(|write| write.answer(Err(error.clone())));
            }
        }
    }

    fn take_connection(&self) -> Outcome<Connection> {
        let reused = self.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).pop();
        match reused {
            Some(connection) => Ok(connection),
            None => open_connection(&self.path, self.durability),
        }
    }

    fn give_back(&self, connection: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // Checked under the lock `close` drains with, so no connection is pooled after the drain.
        if idle.len() < SQLITE_CONNECTIONS_MAX && !self.closed.load(Ordering::SeqCst) {
            idle.push(connection);
        }
    }

    /// Marks the store closed and closes every pooled connection (the last one to close checkpoints the WAL
    /// into the database file).
    fn close(&self) -> Outcome<()> {
        let drained: Vec<Connection> = {
            let mut idle = self.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            self.closed.store(true, Ordering::SeqCst);
            std::mem::take(&mut *idle)
        };
        for connection in drained {
            connection.close().map_err(|(_, error)| error)?;
        }
        let sizes = self.batch_sizes();
        if sizes.batches > 0 {
            tracing::info!("sqlite {}: {}", self.path.display(), sizes.describe());
        }
        Ok(())
    }
}

/// Inside `BEGIN IMMEDIATE … COMMIT`: each write of `batch` in a savepoint, kept (released) or rolled back to it.
/// An error that ends the transaction itself (a failed savepoint statement, SQLite rolling everything back on
/// an I/O error) fails the whole batch: none of its writes is answered as done.
fn stage_and_commit(connection: &mut Connection, inner: &Inner, batch: &mut [Box<dyn QueuedWrite>]) -> Outcome<()> {
    connection.execute_batch("BEGIN IMMEDIATE")?;
    for write in batch.iter_mut() {
        connection.execute_batch("SAVEPOINT item")?;
        let keep = write.stage(connection, inner);
        if connection.is_autocommit() {
            return Err(StoreError::Unavailable(format!(
                "sqlite {}: the batch's transaction was rolled back by an error inside one write",
                inner.path.display()
            ))
            .into());
        }
        connection.execute_batch(if keep { "RELEASE item" } else { "ROLLBACK TO item; RELEASE item" })?;
    }
    connection.execute_batch("COMMIT")?;
    Ok(())
}

fn open_connection(path: &Path, durability: Durability) -> Outcome<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let connection = Connection::open_with_flags(path, flags)?;
    connection.busy_handler(Some(wait_for_write_lock))?;
    // WAL is a property of the file (set once, kept); readers then never block the single writer.
    let mode: String = connection.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        let reason = format!("sqlite {}: could not switch to WAL journaling (got {mode}); is it on a network file system?", path.display());
        return Err(StoreError::Unavailable(reason).into());
    }
    // FULL: the WAL is synced at every commit, so a commit the client was told about survives power loss
    // (a deleted note stays deleted, its nonce consumed). NORMAL syncs only at checkpoints: still
    // consistent after any crash, but the last commits may be lost with the machine's power.
    let synchronous = match durability {
        Durability::Durable => "FULL",
        Durability::Relaxed => "NORMAL",
    };
    connection.pragma_update(None, "synchronous", synchronous)?;
    // Temporary tables and indexes in memory, never in a file of the system's temp directory: under
    // `serve`'s sandbox (Landlock, on by default) only the database's folder is writable, and a statement
    // that spills (pruning 10^5 nonces with `DELETE … RETURNING`) failed with "unable to open database file"
    // (fleet_load, 2026-12-01). The bundled SQLite defaults to files (SQLITE_TEMP_STORE=1).
    connection.pragma_update(None, "temp_store", "MEMORY")?;
    // A checkpoint every SQLITE_WAL_CHECKPOINT_PAGES pages of WAL instead of SQLite's 1,000: each copies a page
    // once however often it was rewritten since (the replay counter's page, the index roots: every commit),
    // so fewer, larger checkpoints copy and sync less per commit.
    let pages: i64 = connection.pragma_update_and_check(None, "wal_autocheckpoint", SQLITE_WAL_CHECKPOINT_PAGES, |row| row.get(0))?;
    debug_assert_eq!(pages, SQLITE_WAL_CHECKPOINT_PAGES);
    Ok(connection)
}

/// SQLite's busy handler: called with the number of earlier calls for the same lock; `false` gives up
/// (SQLITE_BUSY) once [`SQLITE_BUSY_TIMEOUT_MS`] of sleeps have been spent.
fn wait_for_write_lock(earlier_calls: i32) -> bool {
    let attempt = u64::try_from(earlier_calls).unwrap_or(0);
    if busy_slept_us(attempt) >= SQLITE_BUSY_TIMEOUT_MS * 1000 {
        return false;
    }
    std::thread::sleep(Duration::from_micros(busy_sleep_us(attempt)));
    true
}

fn busy_sleep_us(attempt: u64) -> u64 {
    attempt.saturating_add(1).saturating_mul(SQLITE_BUSY_SLEEP_STEP_US).min(SQLITE_BUSY_SLEEP_MAX_US)
}

/// The sleeps of the first `attempts` calls, in total (at least; a sleep can last longer than asked).
fn busy_slept_us(attempts: u64) -> u64 {
    let ramp = SQLITE_BUSY_SLEEP_MAX_US / SQLITE_BUSY_SLEEP_STEP_US;
    let rising = attempts.min(ramp);
    SQLITE_BUSY_SLEEP_STEP_US * rising * (rising + 1) / 2 + attempts.saturating_sub(ramp).saturating_mul(SQLITE_BUSY_SLEEP_MAX_US)
}

fn describe_sql_error(path: &str, error: &rusqlite::Error) -> StoreError {
    let hint = match error.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
            format!(" (another process held the write lock for more than {SQLITE_BUSY_TIMEOUT_MS} ms)")
        }
        Some(rusqlite::ErrorCode::CannotOpen) => " (does the directory exist, and may this user write there?)".to_string(),
        Some(rusqlite::ErrorCode::ReadOnly | rusqlite::ErrorCode::PermissionDenied) => {
            " (the file or its directory is not writable by this user)".to_string()
        }
        _ => String::new(),
    };
    StoreError::Unavailable(format!("sqlite {path}: {error}{hint}"))
}

/// Applies the steps of `migrations` newer than the database's version, in one write transaction.
fn migrate(connection: &mut Connection, migrations: &[Migration], now_ms: u64) -> Outcome<MigrationReport> {
    let known = latest_version(migrations);
    // A store already at this version is opened without the write lock: a process starting (or paused while
    // starting) must not hold up the fleet's writers when it has nothing to write.
    let current: Option<i64> = connection
        .query_row("SELECT MAX(version) FROM schema_version", [], |row| row.get::<_, Option<i64>>(0))
        .optional()
        .ok()
        .flatten()
        .flatten();
    if current == Some(known) {
        return Ok(MigrationReport { version_before: known, version_after: known });
    }
    let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    transaction.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_version (
            version INTEGER PRIMARY KEY NOT NULL,
            description TEXT NOT NULL,
            applied_at_ms INTEGER NOT NULL
        ) STRICT;",
    )?;
    let found: i64 = transaction.query_row("SELECT COALESCE(MAX(version), 0) FROM schema_version", [], |row| row.get(0))?;
    if found > known {
        return Err(newer_schema(found, known).into());
    }
    for migration in migrations.iter().filter(|migration| migration.version > found) {
        transaction.execute_batch(migration.sql)?;
        transaction.execute(
            "INSERT INTO schema_version (version, description, applied_at_ms) VALUES (?1, ?2, ?3)",
            params![migration.version, migration.description, sql_ms(now_ms)],
        )?;
    }
    transaction.commit()?;
    Ok(MigrationReport { version_before: found, version_after: found.max(known) })
}

/// Inside a write transaction (or a batch's savepoint): records the nonce unless it is already held, and enforces the capacity the
/// way the memory store does (prune only when full, never an unexpired-plus-grace entry, never evict).
fn reserve(transaction: &Connection, claim: &NonceClaim, now_ms: u64, limits: ReplayLimits) -> Outcome<Reservation> {
    // Cached statements: the hot path parses no SQL after a connection's first claim.
    let inserted = transaction
        .prepare_cached(
            "INSERT INTO nonces (nonce, expires_at_ms, record, principal) VALUES (?1, ?2, ?3, ?4) ON CONFLICT (nonce) DO NOTHING",
        )?
        .execute(params![claim.nonce, sql_ms(claim.expires_at_ms), encode_record(&claim.record), claim.principal])?;
    if inserted == 0 {
        let record: String =
            transaction.prepare_cached("SELECT record FROM nonces WHERE nonce = ?1")?.query_row([&claim.nonce], |row| row.get(0))?;
        return Ok(Reservation::AlreadyClaimed(decode_record(&record)?));
    }
    let (mut count, pruned_through): (i64, i64) = transaction
        .prepare_cached("UPDATE replay_counter SET nonce_count = nonce_count + 1 WHERE id = 1 RETURNING nonce_count, pruned_through_ms")?
        .query_row([], |row| Ok((row.get(0)?, row.get(1)?)))?;
    // Every process judges by its own clock, and the watermark is shared: one whose clock lags can never get a
    // nonce another process pruned accepted again. (The caller rolls the insert back.)
    if past_retention(claim.expires_at_ms, now_ms, limits.retention_grace_ms, u64::try_from(pruned_through).unwrap_or(0)) {
        return Ok(Reservation::Expired);
    }
    let mut held: i64 = transaction
        .prepare_cached(
            "INSERT INTO replay_principals (principal, nonce_count) VALUES (?1, 1)
             ON CONFLICT (principal) DO UPDATE SET nonce_count = nonce_count + 1 RETURNING nonce_count",
        )?
        .query_row([&claim.principal], |row| row.get(0))?;
    let capacity = i64::try_from(limits.capacity).unwrap_or(i64::MAX);
    let principal_capacity = i64::try_from(limits.principal_capacity).unwrap_or(i64::MAX);
    // The principal's share, then the whole; pruned only when one is exceeded, and never an unexpired entry.
    if count > capacity || held > principal_capacity {
        if let Some(horizon) = prune_horizon_ms(now_ms, limits.retention_grace_ms) {
            let mut pruned_by: BTreeMap<String, i64> = BTreeMap::new();
            {
                let mut prune =
                    transaction.prepare_cached("DELETE FROM nonces WHERE expires_at_ms <= ?1 AND nonce <> ?2 RETURNING principal")?;
                let mut rows = prune.query(params![horizon, claim.nonce])?;
                while let Some(row) = rows.next()? {
                    *pruned_by.entry(row.get(0)?).or_insert(0) += 1;
                }
            }
            let pruned: i64 = pruned_by.values().sum();
            transaction.execute(
                "UPDATE replay_counter SET nonce_count = nonce_count - ?1, pruned_through_ms = MAX(pruned_through_ms, ?2) WHERE id = 1",
                params![pruned, horizon],
            )?;
            for (principal, gone) in &pruned_by {
                // A principal left with none loses its row (the count is never 0); any other is decremented.
                transaction
                    .execute("DELETE FROM replay_principals WHERE principal = ?1 AND nonce_count <= ?2", params![principal, gone])?;
                transaction.execute(
                    "UPDATE replay_principals SET nonce_count = nonce_count - ?1 WHERE principal = ?2",
                    params![gone, principal],
                )?;
            }
            count -= pruned;
            held -= pruned_by.get(&claim.principal).copied().unwrap_or(0);
        }
        if count > capacity || held > principal_capacity {
            return Ok(Reservation::Full);
        }
    }
    Ok(Reservation::Inserted)
}

fn read_note(transaction: &Connection, id: &str) -> rusqlite::Result<Option<Note>> {
    transaction
        .prepare_cached("SELECT id, title, uri, body FROM notes WHERE id = ?1")?
        .query_row([id], |row| {
            Ok(Note { id: row.get(0)?, title: row.get(1)?, uri: row.get(2)?, body: row.get(3)?, revision: String::new() })
        })
        .optional()
}

fn list_notes(connection: &Connection) -> rusqlite::Result<Vec<Note>> {
    let mut statement = connection.prepare_cached("SELECT id, title, uri, body FROM notes ORDER BY position")?;
    let rows = statement.query_map([], |row| {
        Ok(Note { id: row.get(0)?, title: row.get(1)?, uri: row.get(2)?, body: row.get(3)?, revision: String::new() })
    })?;
    rows.collect()
}

fn upsert_note(transaction: &Transaction<'_>, note: &Note) -> rusqlite::Result<()> {
    // A new note goes to the end of the listing; an existing one keeps its place (as in memory).
    transaction
        .prepare_cached(
            "INSERT INTO notes (id, position, title, uri, body, uri_key, title_fold)
         VALUES (?1, (SELECT COALESCE(MAX(position), 0) + 1 FROM notes), ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (id) DO UPDATE SET title = excluded.title, uri = excluded.uri, body = excluded.body,
             uri_key = excluded.uri_key, title_fold = excluded.title_fold",
        )?
        .execute(params![note.id, note.title, note.uri, note.body, note_index_key(&note.uri), fold_title(&note.title)])?;
    Ok(())
}

/// A note without its body, from `SELECT id, title, uri`.
fn bodiless_note(row: &rusqlite::Row<'_>) -> rusqlite::Result<Note> {
    Ok(Note { id: row.get(0)?, title: row.get(1)?, uri: row.get(2)?, body: String::new(), revision: String::new() })
}

/// Round 1's search for a query of 3 characters or more, in [`find_candidates`], first step: the positions of
/// the notes, in any workspace, whose folded title holds every trigram of [`fts_cover`] of the query (`?1`),
/// from `notes_by_title` (their postings), in listing order, at most `?2` of them.
const TITLE_INDEX_MATCHES: &str = "SELECT rowid FROM notes_by_title WHERE notes_by_title MATCH ?1 ORDER BY rowid LIMIT ?2";

/// Second step: the note at position `?1` if it is in the workspace (`?2`, `?3`: its range of index keys) and
/// its folded title holds the folded query `?4` (compared again: the index narrows).
const INDEX_MATCH_IN_WORKSPACE: &str =
    "SELECT id, title, uri FROM notes WHERE position = ?1 AND uri_key >= ?2 AND uri_key < ?3 AND instr(title_fold, ?4) > 0";

/// The most titles of the whole store the index may match before round 1 compares the workspace's titles one
/// by one instead. Each match costs a lookup of its row (1.4 µs of CPU), reading the index's matches far less
/// (1,025 of 10^5 titles: 80–95 µs), a title scanned 0.1 µs (2026-12-04, docs/benchmarks.md). So a query
/// common in other workspaces costs a small workspace at most 256 lookups (about 0.4 ms), and a large
/// workspace whose query the store matches more than 256 times is scanned, as before the index.
const INDEX_MATCHES_MAX: i64 = 256;

/// Round 1's search for a shorter query (which the trigram index cannot answer: FTS5 finds no row for a phrase
/// of fewer than 3 characters) or one the index matches too often, in [`find_candidates`]: one range of
/// `notes_by_place`, every title of the workspace compared, from the index alone (no table row read, so no
/// body). Such a query matches most titles of a workspace anyway.
const FIND_CANDIDATES: &str =
    "SELECT id, title, uri FROM notes WHERE uri_key >= ?1 AND uri_key < ?2 AND instr(title_fold, ?3) > 0 ORDER BY position";

/// `folded` as one FTS5 phrase: in double quotes, a `"` inside doubled; everything else (`*`, `^`, `-`, `:`,
/// `AND`, …) is the phrase's text there.
fn fts_phrase(folded: &str) -> String {
    format!("\"{}\"", folded.replace('"', "\"\""))
}

/// An FTS5 query for the titles holding `folded` (3 characters or more): its trigrams at characters 0, 3, 6, …
/// and its last three, each a one-trigram phrase, ANDed. Every title holding `folded` holds them, so nothing
/// is missed, and the caller compares the whole query again. A phrase of all its trigrams reads twice or three
/// times as many postings (in every segment) to check positions that comparison checks anyway: for "tps
/// report" in 10^5 titles, 28 µs of CPU against 15 µs (2026-12-04, docs/benchmarks.md).
fn fts_cover(folded: &str) -> String {
    let characters: Vec<char> = folded.chars().collect();
    let last = characters.len().saturating_sub(3);
    let mut starts: Vec<usize> = (0..=last).step_by(3).collect();
    if starts.last() != Some(&last) {
        starts.push(last);
    }
    let terms: Vec<String> = starts.iter().map(|&start| fts_phrase(&characters[start..start + 3].iter().collect::<String>())).collect();
    terms.join(" AND ")
}

/// Round 1's search: the notes of `workspace` whose folded title contains the folded `query`, in listing order.
/// A query of 3 characters or more asks the trigram index first, so its cost follows the matching titles, not
/// the workspace; when the index matches more than [`INDEX_MATCHES_MAX`] titles in the store (a common query,
/// or one shorter than 3 characters, which the index cannot answer) the workspace's titles are compared one by
/// one: what a search costs is then bounded by the asked workspace's size.
fn find_candidates(connection: &Connection, workspace: &FileUri, query: &str) -> rusqlite::Result<Vec<Note>> {
    let (start, end) = workspace.index_range();
    let query = fold_title(query);
    if query.chars().count() >= 3 {
        // One read transaction for the index's matches and their rows: one snapshot, and the WAL's read lock
        // taken once (a few fcntl calls) rather than by each statement. On an error the connection is left in
        // it, and `run` does not pool a connection inside a transaction.
        connection.prepare_cached("BEGIN")?.execute([])?;
        let mut matches = connection.prepare_cached(TITLE_INDEX_MATCHES)?;
        let positions: Vec<i64> =
            matches.query_map(params![fts_cover(&query), INDEX_MATCHES_MAX + 1], |row| row.get(0))?.collect::<Result<_, _>>()?;
        let found = if positions.len() as i64 <= INDEX_MATCHES_MAX {
            let mut note = connection.prepare_cached(INDEX_MATCH_IN_WORKSPACE)?;
            let mut found = Vec::new();
            for position in positions {
                if let Some(candidate) = note.query_row(params![position, start, end, query], bodiless_note).optional()? {
                    found.push(candidate);
                }
            }
            found
        } else {
            connection.prepare_cached(FIND_CANDIDATES)?.query_map(params![start, end, query], bodiless_note)?.collect::<Result<_, _>>()?
        };
        connection.prepare_cached("COMMIT")?.execute([])?;
        return Ok(found);
    }
    let mut statement = connection.prepare_cached(FIND_CANDIDATES)?;
    let rows = statement.query_map(params![start, end, query], bodiless_note)?;
    rows.collect()
}

/// The live notes among `ids`, in listing order, without bodies.
fn notes_by_ids(connection: &Connection, ids: &[String]) -> rusqlite::Result<Vec<Note>> {
    let mut statement = connection.prepare_cached("SELECT position, id, title, uri FROM notes WHERE id = ?1")?;
    let mut found: Vec<(i64, Note)> = Vec::new();
    for id in ids {
        if let Some(row) = statement
            .query_row([id], |row| {
                Ok((
                    row.get(0)?,
                    Note { id: row.get(1)?, title: row.get(2)?, uri: row.get(3)?, body: String::new(), revision: String::new() },
                ))
            })
            .optional()?
        {
            found.push(row);
        }
    }
    found.sort_by_key(|(position, _)| *position);
    found.dedup_by_key(|(position, _)| *position);
    Ok(found.into_iter().map(|(_, note)| note).collect())
}

#[async_trait]
impl NoteStore for SqliteStore {
    async fn list_notes(&self) -> Result<Vec<Note>, StoreError> {
        self.run(Access::Read, |connection, _| Ok(list_notes(connection)?)).await
    }

    async fn find_candidates(&self, workspace: &FileUri, query: &str) -> Result<Vec<Note>, StoreError> {
        let (workspace, query) = (workspace.clone(), query.to_string());
        self.run(Access::Read, move |connection, _| Ok(find_candidates(connection, &workspace, &query)?)).await
    }

    async fn notes_by_ids(&self, ids: &[String]) -> Result<Vec<Note>, StoreError> {
        let ids = ids.to_vec();
        self.run(Access::Read, move |connection, _| Ok(notes_by_ids(connection, &ids)?)).await
    }

    async fn delete_if_inside(&self, id: &str, revision: &str, workspace: &FileUri) -> Result<GuardedDelete, StoreError> {
        let id = id.to_string();
        let workspace = workspace.clone();
        let revision_matches = matches_revisionless(revision);
        self.write(move |connection, _| {
            let Some(note) = read_note(connection, &id)?.filter(|_| revision_matches) else {
                return Ok((GuardedDelete::Gone, false));
            };
            if !still_inside(&workspace, &note.uri) {
                return Ok((GuardedDelete::OutsideWorkspace, false));
            }
            connection.prepare_cached("DELETE FROM notes WHERE id = ?1")?.execute([&id])?;
            Ok((GuardedDelete::Deleted(note), true))
        })
        .await
    }
}

#[async_trait]
impl ReplayStore for SqliteStore {
    async fn claim(&self, claim: NonceClaim) -> Result<ClaimOutcome, StoreError> {
        self.write(move |connection, inner| {
            let now_ms = inner.clock.now_ms();
            // A refused claim is rolled back to its savepoint: it leaves no trace.
            Ok(match reserve(connection, &claim, now_ms, inner.limits)? {
                Reservation::Inserted => (ClaimOutcome::Claimed, true),
                Reservation::AlreadyClaimed(record) => (ClaimOutcome::AlreadyClaimed { record }, false),
                Reservation::Full => (ClaimOutcome::Full, false),
                Reservation::Expired => (ClaimOutcome::Expired, false),
            })
        })
        .await
    }

    async fn claim_and_delete(
        &self,
        claim: NonceClaim,
        note_id: &str,
        revision: &str,
        workspace: &FileUri,
    ) -> Result<ClaimAndDelete, StoreError> {
        let note_id = note_id.to_string();
        let workspace = workspace.clone();
        let revision_matches = matches_revisionless(revision);
        self.write(move |connection, inner| {
            let now_ms = inner.clock.now_ms();
            match reserve(connection, &claim, now_ms, inner.limits)? {
                Reservation::Inserted => {}
                Reservation::AlreadyClaimed(record) => return Ok((ClaimAndDelete::AlreadyClaimed { record }, false)),
                Reservation::Full => return Ok((ClaimAndDelete::Full, false)),
                Reservation::Expired => return Ok((ClaimAndDelete::Expired, false)),
            }
            // Each refusal below is rolled back to this write's savepoint: the nonce is released, the batch's
            // other writes are kept.
            let Some(note) = read_note(connection, &note_id)?.filter(|_| revision_matches) else {
                return Ok((ClaimAndDelete::NoteGone, false));
            };
            if !still_inside(&workspace, &note.uri) {
                return Ok((ClaimAndDelete::NoteOutsideWorkspace, false));
            }
            connection.prepare_cached("DELETE FROM notes WHERE id = ?1")?.execute([&note_id])?;
            Ok((ClaimAndDelete::Deleted(note), true))
        })
        .await
    }
}

/// Inside a write transaction: counts one call on (principal, tool, window) if the quota allows, as the memory
/// limiter does (ended windows pruned only when room is needed; full of live counters → fail closed).
fn acquire_rate(transaction: &Transaction<'_>, principal: &str, tool: &str, limit: RateLimit, now_ms: u64) -> Outcome<RateDecision> {
    let (index, retry_after_ms) = rate_window(now_ms, limit.window_ms);
    let key = params![principal, tool, sql_ms(limit.window_ms), sql_ms(index)];
    let used: Option<i64> = transaction
        .prepare_cached("SELECT calls FROM rate_counters WHERE principal = ?1 AND tool = ?2 AND window_ms = ?3 AND window_index = ?4")?
        .query_row(key, |row| row.get(0))
        .optional()?;
    let used = used.map_or(0, |calls| u32::try_from(calls).unwrap_or(u32::MAX));
    if used >= limit.calls {
        return Ok(RateDecision::Limited { retry_after_ms });
    }
    if used == 0 {
        let live: i64 = transaction.prepare_cached("SELECT COUNT(*) FROM rate_counters")?.query_row([], |row| row.get(0))?;
        if usize::try_from(live).unwrap_or(usize::MAX) >= RATE_COUNTERS_MAX {
            transaction.prepare_cached("DELETE FROM rate_counters WHERE ends_at_ms <= ?1")?.execute([sql_ms(now_ms)])?;
            let live: i64 = transaction.prepare_cached("SELECT COUNT(*) FROM rate_counters")?.query_row([], |row| row.get(0))?;
            if usize::try_from(live).unwrap_or(usize::MAX) >= RATE_COUNTERS_MAX {
                return Err(StoreError::Unavailable("the rate limiter holds its maximum number of live counters".into()).into());
            }
        }
    }
    let ends_at_ms = (index + 1).saturating_mul(limit.window_ms.max(1));
    transaction
        .prepare_cached(
            "INSERT INTO rate_counters (principal, tool, window_ms, window_index, ends_at_ms, calls) VALUES (?1, ?2, ?3, ?4, ?5, 1)
             ON CONFLICT (principal, tool, window_ms, window_index) DO UPDATE SET calls = calls + 1",
        )?
        .execute(params![principal, tool, sql_ms(limit.window_ms), sql_ms(index), sql_ms(ends_at_ms)])?;
    Ok(RateDecision::Allowed { remaining: limit.calls - used - 1 })
}

/// The gateway's rate counters in the file: every gateway process pointed at it counts against one quota.
#[async_trait]
impl RateLimiter for SqliteStore {
    async fn acquire(&self, principal: &str, tool: &str, limit: RateLimit, now_ms: u64) -> Result<RateDecision, StoreError> {
        let (principal, tool) = (principal.to_string(), tool.to_string());
        self.run(Access::Write, move |connection, _| {
            let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let decision = acquire_rate(&transaction, &principal, &tool, limit, now_ms)?;
            if matches!(decision, RateDecision::Allowed { .. }) {
                transaction.commit()?;
            }
            Ok(decision)
        })
        .await
    }
}

impl SqliteStore {
    /// The export ledger of the notes backend `ledger` (its id), in this file.
    pub fn export_ledger(&self, ledger: &str) -> SqliteExportLedger {
        SqliteExportLedger { store: self.clone(), ledger: ledger.to_string() }
    }
}

/// One notes backend's export ledger in the file: key → record, written in the transaction that decides
/// the export, so every process sharing the file exports a key at most once.
#[derive(Clone)]
pub struct SqliteExportLedger {
    store: SqliteStore,
    ledger: String,
}

fn read_export(transaction: &Transaction<'_>, ledger: &str, key: &str) -> Outcome<Option<ExportRecord>> {
    let row: Option<(i64, String, String, String, String)> = transaction
        .prepare_cached("SELECT position, request_digest, principal, destination, note_ids FROM exports WHERE ledger = ?1 AND key = ?2")?
        .query_row([ledger, key], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?)))
        .optional()?;
    let Some((position, request_digest, principal, destination, note_ids)) = row else { return Ok(None) };
    Ok(Some(ExportRecord {
        export_id: format!("export-{position}"),
        key: key.to_string(),
        request_digest,
        principal,
        destination,
        note_ids: decode_note_ids(&note_ids)?,
    }))
}

#[async_trait]
impl ExportLedger for SqliteExportLedger {
    async fn export_once(&self, request: ExportRequest) -> Result<ExportOutcome, StoreError> {
        let ledger = self.ledger.clone();
        self.store
            .run(Access::Write, move |connection, _| {
                let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
                if let Some(existing) = read_export(&transaction, &ledger, &request.key)? {
                    return Ok(if existing.request_digest == request.request_digest {
                        ExportOutcome::AlreadyExported(existing)
                    } else {
                        ExportOutcome::KeyConflict
                    });
                }
                let count: i64 = transaction
                    .prepare_cached("SELECT COALESCE(MAX(position), 0) FROM exports WHERE ledger = ?1")?
                    .query_row([&ledger], |row| row.get(0))?;
                if usize::try_from(count).unwrap_or(usize::MAX) >= EXPORT_KEYS_MAX {
                    return Ok(ExportOutcome::Full);
                }
                let position = count + 1;
                transaction
                    .prepare_cached(
                        "INSERT INTO exports (ledger, key, position, request_digest, principal, destination, note_ids)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    )?
                    .execute(params![
                        ledger,
                        request.key,
                        position,
                        request.request_digest,
                        request.principal,
                        request.destination,
                        encode_note_ids(&request.note_ids)
                    ])?;
                transaction.commit()?;
                Ok(ExportOutcome::Exported(ExportRecord {
                    export_id: format!("export-{position}"),
                    key: request.key,
                    request_digest: request.request_digest,
                    principal: request.principal,
                    destination: request.destination,
                    note_ids: request.note_ids,
                }))
            })
            .await
    }
}

impl SqliteExportLedger {
    /// Every export of this ledger, in order (for tests and operators).
    pub async fn exports(&self) -> Result<Vec<ExportRecord>, StoreError> {
        let ledger = self.ledger.clone();
        self.store
            .run(Access::Read, move |connection, _| {
                let transaction = connection.transaction()?;
                let keys: Vec<String> = transaction
                    .prepare("SELECT key FROM exports WHERE ledger = ?1 ORDER BY position")?
                    .query_map([&ledger], |row| row.get(0))?
                    .collect::<rusqlite::Result<_>>()?;
                let mut records = Vec::with_capacity(keys.len());
                for key in keys {
                    records.extend(read_export(&transaction, &ledger, &key)?);
                }
                Ok(records)
            })
            .await
    }
}

#[async_trait]
impl StoreAdmin for SqliteStore {
    async fn seed(&self, notes: &[Note]) -> Result<SeedReport, StoreError> {
        let seed = notes.to_vec();
        self.run(Access::Write, move |connection, _| {
            let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let current = list_notes(&transaction)?;
            let target = seeded_listing(&current, &seed);
            let report = seed_report(&current, &target, &seed);
            for note in &seed {
                upsert_note(&transaction, note)?;
            }
            if report.reordered {
                // Fresh positions above every current one, in target order: no UNIQUE collision on the way.
                let top: i64 = transaction.query_row("SELECT COALESCE(MAX(position), 0) FROM notes", [], |row| row.get(0))?;
                for (offset, note) in target.iter().enumerate() {
                    let position = top + 1 + i64::try_from(offset).unwrap_or(i64::MAX - top - 1);
                    transaction.execute("UPDATE notes SET position = ?1 WHERE id = ?2", params![position, note.id])?;
                }
            }
            transaction.commit()?;
            Ok(report)
        })
        .await
    }

    async fn list(&self) -> Result<Vec<Note>, StoreError> {
        self.list_notes().await
    }

    async fn upsert(&self, note: Note) -> Result<(), StoreError> {
        self.run(Access::Write, move |connection, _| {
            let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
            upsert_note(&transaction, &note)?;
            transaction.commit()?;
            Ok(())
        })
        .await
    }

    async fn remove(&self, id: &str) -> Result<bool, StoreError> {
        let id = id.to_string();
        self.run(Access::Write, move |connection, _| Ok(connection.execute("DELETE FROM notes WHERE id = ?1", [&id])? == 1)).await
    }

    async fn move_to(&self, id: &str, uri: &str) -> Result<bool, StoreError> {
        let (id, uri) = (id.to_string(), uri.to_string());
        self.run(Access::Write, move |connection, _| {
            Ok(connection.execute("UPDATE notes SET uri = ?1, uri_key = ?3 WHERE id = ?2", params![uri, id, note_index_key(&uri)])? == 1)
        })
        .await
    }

    async fn rename(&self, id: &str, title: &str) -> Result<bool, StoreError> {
        let (id, title) = (id.to_string(), title.to_string());
        self.run(Access::Write, move |connection, _| {
            Ok(connection.execute("UPDATE notes SET title = ?1, title_fold = ?3 WHERE id = ?2", params![title, id, fold_title(&title)])?
                == 1)
        })
        .await
    }

    async fn commit_setting(&self) -> Result<String, StoreError> {
        self.run(Access::Read, |connection, _| {
            let level: i64 = connection.query_row("PRAGMA synchronous", [], |row| row.get(0))?;
            let name = match level {
                0 => "OFF",
                1 => "NORMAL",
                2 => "FULL",
                3 => "EXTRA",
                _ => "unknown",
            };
            Ok(format!("synchronous={name}"))
        })
        .await
    }

    async fn nonce_count(&self) -> Result<u64, StoreError> {
        self.run(Access::Read, |connection, _| {
            let transaction = connection.transaction()?;
            let counted: i64 = transaction.query_row("SELECT COUNT(*) FROM nonces", [], |row| row.get(0))?;
            let recorded: i64 = transaction.query_row("SELECT nonce_count FROM replay_counter WHERE id = 1", [], |row| row.get(0))?;
            if counted != recorded {
                return Err(StoreError::Unavailable(format!(
                    "the nonce counter says {recorded} but the table holds {counted}: the database was changed outside mcpsim"
                ))
                .into());
            }
            Ok(u64::try_from(counted).unwrap_or(0))
        })
        .await
    }

    async fn nonce_record(&self, nonce: &str) -> Result<Option<ClaimRecord>, StoreError> {
        let nonce = nonce.to_string();
        self.run(Access::Read, move |connection, _| {
            let record: Option<String> =
                connection.query_row("SELECT record FROM nonces WHERE nonce = ?1", [&nonce], |row| row.get(0)).optional()?;
            Ok(record.map(|text| decode_record(&text)).transpose()?)
        })
        .await
    }

    fn describe(&self) -> String {
        format!("sqlite {}", self.inner.path.display())
    }

    async fn close(&self) -> Result<(), StoreError> {
        let inner = self.inner.clone();
        let path = inner.path.display().to_string();
        match tokio::task::spawn_blocking(move || inner.close()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(Failure::Sql(error))) => Err(describe_sql_error(&path, &error)),
            Ok(Err(Failure::Store(error))) => Err(error),
            Err(join_error) => Err(StoreError::Unavailable(format!("sqlite {path}: closing failed: {join_error}"))),
        }
    }
}

fn read_flow(transaction: &Transaction<'_>, reference: &str) -> Outcome<Option<FlowRecord>> {
    let row: Option<(String, String, String, i64, Option<String>)> = transaction
        .prepare_cached("SELECT principal, tool, subject, expires_at_ms, completed_by FROM out_of_band_flows WHERE reference = ?1")?
        .query_row([reference], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?)))
        .optional()?;
    Ok(row.map(|(principal, tool, subject, expires_at_ms, completed_by)| FlowRecord {
        flow: OutOfBandFlow {
            reference: reference.to_string(),
            principal,
            tool,
            subject,
            expires_at_ms: u64::try_from(expires_at_ms).unwrap_or(0),
        },
        status: match completed_by {
            Some(by) => FlowStatus::Completed { by },
            None => FlowStatus::Started,
        },
    }))
}

/// The out-of-band flows in the file: every process pointed at it sees a flow started or completed by any.
#[async_trait]
impl OutOfBandStore for SqliteStore {
    async fn start(&self, flow: OutOfBandFlow, now_ms: u64) -> Result<FlowStart, StoreError> {
        let limits = self.flows;
        self.run(Access::Write, move |connection, _| {
            let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
            // The whole, then the principal's share (from its index); pruned only when needed, never evicting.
            let full = |transaction: &Transaction<'_>| -> Outcome<bool> {
                let count = |sql: &str, principal: Option<&str>| -> Outcome<usize> {
                    let mut statement = transaction.prepare_cached(sql)?;
                    let counted: i64 = match principal {
                        Some(principal) => statement.query_row([principal], |row| row.get(0))?,
                        None => statement.query_row([], |row| row.get(0))?,
                    };
                    Ok(usize::try_from(counted).unwrap_or(usize::MAX))
                };
                let held = count("SELECT COUNT(*) FROM out_of_band_flows", None)?;
                let mine = count("SELECT COUNT(*) FROM out_of_band_flows WHERE principal = ?1", Some(&flow.principal))?;
                Ok(limits.full(held, mine))
            };
            if full(&transaction)? {
                let before = sql_ms(now_ms.saturating_sub(OUT_OF_BAND_GRACE_MS));
                transaction.prepare_cached("DELETE FROM out_of_band_flows WHERE expires_at_ms <= ?1")?.execute([before])?;
                if full(&transaction)? {
                    transaction.commit()?;
                    return Ok(FlowStart::Full);
                }
            }
            transaction
                .prepare_cached(
                    "INSERT INTO out_of_band_flows (reference, principal, tool, subject, expires_at_ms, completed_by)
                     VALUES (?1, ?2, ?3, ?4, ?5, NULL)",
                )?
                .execute(params![flow.reference, flow.principal, flow.tool, flow.subject, sql_ms(flow.expires_at_ms)])?;
            transaction.commit()?;
            Ok(FlowStart::Started)
        })
        .await
    }

    async fn flow(&self, reference: &str) -> Result<Option<FlowRecord>, StoreError> {
        let reference = reference.to_string();
        self.run(Access::Read, move |connection, _| {
            let transaction = connection.transaction()?;
            read_flow(&transaction, &reference)
        })
        .await
    }

    async fn complete(&self, reference: &str, user: &str, now_ms: u64) -> Result<Completion, StoreError> {
        let (reference, user) = (reference.to_string(), user.to_string());
        self.run(Access::Write, move |connection, _| {
            let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let decision = decide_completion(read_flow(&transaction, &reference)?.as_ref(), &user, now_ms);
            if decision == Completion::Completed {
                transaction
                    .prepare_cached("UPDATE out_of_band_flows SET completed_by = ?2 WHERE reference = ?1 AND completed_by IS NULL")?
                    .execute([&reference, &user])?;
                transaction.commit()?;
            }
            Ok(decision)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_waits_start_short_and_give_up_after_the_timeout() {
        assert_eq!(busy_sleep_us(0), 50);
        assert_eq!(busy_sleep_us(3), 200);
        assert_eq!(busy_sleep_us(1_000), SQLITE_BUSY_SLEEP_MAX_US);
        assert_eq!(busy_slept_us(0), 0);
        assert_eq!(busy_slept_us(2), 150);
        assert_eq!(busy_slept_us(21), (0..21).map(busy_sleep_us).sum::<u64>());
        let last = (0..).find(|&attempt| busy_slept_us(attempt) >= SQLITE_BUSY_TIMEOUT_MS * 1000).unwrap();
        assert!((5_000..5_100).contains(&last), "about one call per millisecond once ramped up: {last}");
        assert!(!wait_for_write_lock(i32::try_from(last).unwrap()), "gives up without sleeping");
    }

    /// A durable connection to a new database in a folder of its own (the caller removes the folder).
    fn scratch_connection(name: &str) -> (PathBuf, Connection) {
        let directory = std::env::temp_dir().join(format!("mcpsim-sqlite-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        let Ok(connection) = open_connection(&directory.join("notes.db"), Durability::Durable) else { panic!("the store opens") };
        (directory, connection)
    }

    /// Opening a store that is already up to date takes no write lock: it opens while another connection
    /// holds that lock (a process of the fleet paused mid-write), where taking it would wait out the busy
    /// timeout and fail.
    #[tokio::test]
    async fn an_up_to_date_store_opens_while_another_process_holds_the_write_lock() {
        let (directory, store) = scratch_store("open-unlocked", 100).await;
        drop(store);
        let Ok(mut holder) = open_connection(&directory.join("notes.db"), Durability::Durable) else { panic!("opens") };
        let transaction = holder.transaction_with_behavior(TransactionBehavior::Immediate).unwrap();
        let clock = Arc::new(crate::stores::deterministic::ManualClock::new(1_000));
        let limits = ReplayLimits { capacity: 100, principal_capacity: 100, retention_grace_ms: 60_000 };
        let opened = SqliteStore::open(&directory.join("notes.db"), clock, limits).await;
        drop(transaction);
        let _ = std::fs::remove_dir_all(&directory);
        assert!(opened.is_ok(), "{:?}", opened.err());
    }

    /// A store on a new database whose claims are held in one batch by `batched_writes` below.
    async fn scratch_store(name: &str, capacity: usize) -> (PathBuf, SqliteStore) {
        let directory = std::env::temp_dir().join(format!("mcpsim-sqlite-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&directory);
        std::fs::create_dir_all(&directory).unwrap();
        let clock = Arc::new(crate::stores::deterministic::ManualClock::new(1_000));
        let limits = ReplayLimits { capacity, principal_capacity: capacity, retention_grace_ms: 60_000 };
        let Ok(store) = SqliteStore::open(&directory.join("notes.db"), clock, limits).await else { panic!("the store opens") };
        (directory, store)
    }

    fn note(id: &str) -> Note {
        Note {
            id: id.into(),
            title: format!("title of {id}"),
            uri: format!("file:///w/{id}.md"),
            body: "body".into(),
            revision: String::new(),
        }
    }

    fn claim(nonce: &str, note_id: &str) -> NonceClaim {
        NonceClaim {
            nonce: nonce.into(),
            principal: "alice".into(),
            expires_at_ms: 100_000,
            record: ClaimRecord::Deleted { note_id: note_id.into() },
        }
    }

    /// Starts each `(nonce, note)` claim-and-delete while this test holds the writer's turn, waits until all
    /// are queued, then lets them go: the next turn carries every one of them in one transaction.
    async fn batched_writes(store: &SqliteStore, writes: &[(&str, &str)]) -> Vec<ClaimAndDelete> {
        let turn = store.inner.writer.clone().acquire_owned().await.unwrap();
        let workspace = FileUri::parse("file:///w").unwrap();
        let tasks: Vec<_> = writes
            .iter()
            .map(|(nonce, note_id)| {
                let (store, claim, note_id, workspace) = (store.clone(), claim(nonce, note_id), note_id.to_string(), workspace.clone());
                tokio::spawn(async move { store.claim_and_delete(claim, &note_id, "", &workspace).await })
            })
            .collect();
        for _ in 0..5_000 {
            if store.inner.lock_queue().len() == writes.len() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(store.inner.lock_queue().len(), writes.len(), "every write is queued behind the held turn");
        let before = store.batch_sizes();
        drop(turn);
        let mut answers = Vec::new();
        for task in tasks {
            let Ok(Ok(answer)) = task.await else { panic!("every write is answered") };
            answers.push(answer);
        }
        let after = store.batch_sizes();
        assert_eq!((after.batches - before.batches, after.writes - before.writes), (1, writes.len() as u64), "one commit: {after:?}");
        answers
    }

    /// One batch (one transaction, one commit) holding a good delete, one refused as already consumed, one
    /// whose note is gone, another good one: each refusal is rolled back to its own savepoint, the other
    /// writes are committed and answered as deleted, and the store agrees after it is reopened.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refusal_inside_a_batch_leaves_the_other_writes_committed() {
        let (directory, store) = scratch_store("batch-refusal", 100).await;
        let notes: Vec<Note> = ["n1", "n2", "n3"].map(note).to_vec();
        store.seed(&notes).await.unwrap();
        let workspace = FileUri::parse("file:///w").unwrap();
        assert!(matches!(store.claim_and_delete(claim("used", "n3"), "n3", "", &workspace).await, Ok(ClaimAndDelete::Deleted(_))));
        store.seed(&[note("n3")]).await.unwrap();

        let answers = batched_writes(&store, &[("a", "n1"), ("used", "n3"), ("b", "missing"), ("c", "n2")]).await;
        assert!(matches!(&answers[0], ClaimAndDelete::Deleted(note) if note.id == "n1"), "{:?}", answers[0]);
        assert_eq!(answers[1], ClaimAndDelete::AlreadyClaimed { record: ClaimRecord::Deleted { note_id: "n3".into() } });
        assert_eq!(answers[2], ClaimAndDelete::NoteGone);
        assert!(matches!(&answers[3], ClaimAndDelete::Deleted(note) if note.id == "n2"), "{:?}", answers[3]);
        store.close().await.unwrap();

        let (_, reopened) = scratch_store_at(&directory, 100).await;
        let left: Vec<String> = reopened.list().await.unwrap().into_iter().map(|note| note.id).collect();
        assert_eq!(left, ["n3"], "n1 and n2 deleted; n3 kept (its claim was refused)");
        for (nonce, expected) in [("a", Some("n1")), ("c", Some("n2")), ("used", Some("n3")), ("b", None)] {
            let record = reopened.nonce_record(nonce).await.unwrap();
            assert_eq!(record, expected.map(|id| ClaimRecord::Deleted { note_id: id.into() }), "nonce {nonce}");
        }
        assert_eq!(reopened.nonce_count().await.unwrap(), 3, "the refused claims hold no nonce");
        reopened.close().await.unwrap();
        let _ = std::fs::remove_dir_all(&directory);
    }

    /// The capacity is counted inside the batch's transaction, write after write: with room for 3 more nonces,
    /// 3 of 6 batched claims delete and the other 3 are refused `Full`, leaving exactly the capacity held.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_capacity_holds_exactly_inside_a_batch() {
        let (directory, store) = scratch_store("batch-capacity", 5).await;
        let ids = ["n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8"];
        store.seed(&ids.map(note)).await.unwrap();
        let workspace = FileUri::parse("file:///w").unwrap();
        for (nonce, id) in [("x1", "n7"), ("x2", "n8")] {
            assert!(matches!(store.claim_and_delete(claim(nonce, id), id, "", &workspace).await, Ok(ClaimAndDelete::Deleted(_))));
        }
        let writes: Vec<(String, &str)> = ids[..6].iter().map(|id| (format!("nonce-{id}"), *id)).collect();
        let writes: Vec<(&str, &str)> = writes.iter().map(|(nonce, id)| (nonce.as_str(), *id)).collect();
        let answers = batched_writes(&store, &writes).await;
        let deleted = answers.iter().filter(|answer| matches!(answer, ClaimAndDelete::Deleted(_))).count();
        // The queue's order is the order the tasks reached it (any): whichever 3 came first delete.
        assert_eq!(deleted, 3, "{answers:?}");
        let refused: Vec<String> =
            ids[..6].iter().zip(&answers).filter(|(_, answer)| **answer == ClaimAndDelete::Full).map(|(id, _)| id.to_string()).collect();
        assert_eq!(refused.len(), 3, "{answers:?}");
        assert_eq!(store.nonce_count().await.unwrap(), 5);
        let kept: Vec<String> = store.list().await.unwrap().into_iter().map(|note| note.id).collect();
        assert_eq!(kept, refused, "the notes whose claims were refused are kept, no other");
        store.close().await.unwrap();
        let _ = std::fs::remove_dir_all(&directory);
    }

    async fn scratch_store_at(directory: &Path, capacity: usize) -> (PathBuf, SqliteStore) {
        let clock = Arc::new(crate::stores::deterministic::ManualClock::new(1_000));
        let limits = ReplayLimits { capacity, principal_capacity: capacity, retention_grace_ms: 60_000 };
        let Ok(store) = SqliteStore::open(&directory.join("notes.db"), clock, limits).await else { panic!("the store reopens") };
        (directory.to_path_buf(), store)
    }

    /// Under `serve`'s sandbox only the database's folder is writable: a statement that spills to a temporary
    /// file in the system's temp directory (a large prune) would fail with "unable to open database file".
    #[test]
    fn temporary_tables_are_kept_in_memory_not_in_the_temp_directory() {
        let (directory, connection) = scratch_connection("temp-store");
        let temp_store: i64 = connection.query_row("PRAGMA temp_store", [], |row| row.get(0)).unwrap();
        let checkpoint_pages: i64 = connection.query_row("PRAGMA wal_autocheckpoint", [], |row| row.get(0)).unwrap();
        drop(connection);
        let _ = std::fs::remove_dir_all(&directory);
        assert_eq!(temp_store, 2, "PRAGMA temp_store: 2 is MEMORY (0 default, 1 FILE)");
        assert_eq!(checkpoint_pages, SQLITE_WAL_CHECKPOINT_PAGES, "checkpoints every SQLITE_WAL_CHECKPOINT_PAGES pages, not 1,000");
    }

    /// The query plan of `sql` (bound to `parameters`) after every migration, one step a line.
    fn plan_of(name: &str, sql: &str, parameters: impl rusqlite::Params) -> Vec<String> {
        let (directory, mut connection) = scratch_connection(name);
        let Ok(_) = migrate(&mut connection, SQLITE_MIGRATIONS, 0) else { panic!("the schema migrates") };
        let Ok(()) = ensure_title_index(&mut connection) else { panic!("the title index builds") };
        let plan: Vec<String> = {
            let mut statement = connection.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            let rows = statement.query_map(parameters, |row| row.get::<_, String>(3)).unwrap();
            rows.collect::<rusqlite::Result<_>>().unwrap()
        };
        drop(connection);
        let _ = std::fs::remove_dir_all(&directory);
        plan
    }

    /// How many segments `notes_by_title` has: its structure record (rowid 10 of its `_data`) holds a 4-byte
    /// cookie (then, in the second version of the record, a 4-byte marker `ff 00 00 00`), then varints: the number of
    /// levels, then of segments.
    fn title_index_segments(connection: &Connection) -> u64 {
        let structure: Vec<u8> = connection.query_row("SELECT block FROM notes_by_title_data WHERE id = 10", [], |row| row.get(0)).unwrap();
        let mut bytes = if structure.get(4..8) == Some(&[0xff, 0, 0, 0][..]) { &structure[8..] } else { &structure[4..] }.iter();
        let mut varint = || {
            let mut value = 0_u64;
            for byte in bytes.by_ref() {
                value = (value << 7) | u64::from(byte & 0x7f);
                if byte & 0x80 == 0 {
                    break;
                }
            }
            value
        };
        let _levels = varint();
        varint()
    }

    /// The title index merges its segments by [`TITLE_INDEX_MERGING`] (a search reads every segment), set
    /// when it is built and on a file whose index an earlier mcpsim built without them; the index filled at
    /// its build is one segment.
    #[test]
    fn the_title_index_keeps_few_segments() {
        let settings = |connection: &Connection| -> Vec<(String, i64)> {
            let mut statement =
                connection.prepare("SELECT k, v FROM notes_by_title_config WHERE k IN ('automerge', 'crisismerge') ORDER BY k").unwrap();
            let rows = statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?))).unwrap();
            rows.collect::<rusqlite::Result<_>>().unwrap()
        };
        let expected: Vec<(String, i64)> = TITLE_INDEX_MERGING.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let (directory, mut connection) = scratch_connection("title-merging");
        let Ok(_) = migrate(&mut connection, SQLITE_MIGRATIONS, 0) else { panic!("the schema migrates") };
        let insert = |connection: &Connection, i: i64| {
            connection
                .execute(
                    "INSERT INTO notes (id, position, title, uri, body, uri_key, title_fold) VALUES (?1, ?2, ?3, ?4, '', ?5, ?6)",
                    params![
                        format!("n{i}"),
                        i + 1,
                        format!("Note {i}"),
                        format!("file:///w/{i}.md"),
                        format!("w/{i}"),
                        format!("note {i}")
                    ],
                )
                .unwrap();
        };
        for i in 0..300 {
            insert(&connection, i);
        }
        let Ok(()) = ensure_title_index(&mut connection) else { panic!("the title index builds") };
        assert_eq!(settings(&connection), expected);
        assert_eq!(title_index_segments(&connection), 1, "the build's fill is merged into one segment");
        // Each write transaction adds a segment; merged as set, they stay at 5 or fewer, the build's one
        // included (FTS5's defaults let a level hold 15: 17 within 200 writes, SQLite 3.40).
        let most = (300..500)
            .map(|i| {
                insert(&connection, i);
                title_index_segments(&connection)
            })
            .max();
        assert!(most.is_some_and(|most| most <= 5), "{most:?} segments");
        // An index built before the settings (FTS5's defaults) gets them at the next open.
        connection.execute_batch("DELETE FROM notes_by_title_config WHERE k IN ('automerge', 'crisismerge')").unwrap();
        assert!(settings(&connection).is_empty());
        let Ok(()) = ensure_title_index(&mut connection) else { panic!("the title index opens") };
        assert_eq!(settings(&connection), expected);
        drop(connection);
        let _ = std::fs::remove_dir_all(&directory);
    }

    /// The index is asked for trigrams that cover the query, by characters (not bytes), quotes doubled.
    #[test]
    fn a_query_is_covered_by_its_trigrams() {
        assert_eq!(fts_cover("abc"), r#""abc""#);
        assert_eq!(fts_cover("abcd"), r#""abc" AND "bcd""#);
        assert_eq!(fts_cover("abcdef"), r#""abc" AND "def""#);
        assert_eq!(fts_cover("tps report"), r#""tps" AND " re" AND "por" AND "ort""#);
        assert_eq!(fts_cover("日本語の"), r#""日本語" AND "本語の""#);
        assert_eq!(fts_cover(r#"a"b AND"#), r#""a""b" AND " AN" AND "AND""#);
    }

    /// A query of fewer than 3 characters reads the titles of every note in the workspace: from the index,
    /// never from the table's rows (whose pages hold the bodies).
    #[test]
    fn round_one_searches_the_index_alone() {
        let (start, end) = FileUri::parse("file:///w").unwrap().index_range();
        let plan = plan_of("covering", FIND_CANDIDATES, params![start, end, "pl"]);
        assert!(plan.iter().any(|step| step.contains("USING COVERING INDEX notes_by_place")), "{plan:?}");
    }

    /// A longer query reads the trigram index (the bundled SQLite has FTS5 and its trigram tokenizer) in
    /// listing order, then each match's row by its position: no scan of the workspace.
    #[test]
    fn round_one_reads_the_trigram_index() {
        let (start, end) = FileUri::parse("file:///w").unwrap().index_range();
        let plan = plan_of("trigrams", TITLE_INDEX_MATCHES, params![fts_cover("plan"), INDEX_MATCHES_MAX + 1]);
        assert!(plan.iter().any(|step| step.starts_with("SCAN notes_by_title VIRTUAL TABLE INDEX")), "{plan:?}");
        assert!(!plan.iter().any(|step| step.contains("TEMP B-TREE")), "sorted by the index, not afterwards: {plan:?}");
        let plan = plan_of("match", INDEX_MATCH_IN_WORKSPACE, params![1, start, end, "plan"]);
        assert!(plan.iter().any(|step| step.contains("SEARCH notes USING INDEX sqlite_autoindex_notes_2 (position=?)")), "{plan:?}");
    }

    /// The index's matches come in listing order, and a query it matches in more than [`INDEX_MATCHES_MAX`]
    /// notes of the store is answered by the workspace's scan: the same notes either way.
    #[test]
    fn round_one_falls_back_to_the_workspace_when_the_index_matches_too_often() {
        let (directory, mut connection) = scratch_connection("fallback");
        let Ok(_) = migrate(&mut connection, SQLITE_MIGRATIONS, 0) else { panic!("the schema migrates") };
        let Ok(()) = ensure_title_index(&mut connection) else { panic!("the title index builds") };
        let elsewhere = FileUri::parse("file:///x").unwrap();
        let workspace = FileUri::parse("file:///w").unwrap();
        let transaction = connection.transaction().unwrap();
        for i in 0..(INDEX_MATCHES_MAX + 3) {
            // Positions in reverse of the ids, so listing order is not insertion order.
            let (uri, position) = if i < 3 { (format!("file:///w/{i}.md"), 5_000 - i) } else { (format!("file:///x/{i}.md"), i) };
            let note = Note { id: format!("n{i}"), title: format!("Common {i}"), uri, body: String::new(), revision: String::new() };
            transaction
                .execute(
                    "INSERT INTO notes (id, position, title, uri, body, uri_key, title_fold) VALUES (?1, ?2, ?3, ?4, '', ?5, ?6)",
                    params![note.id, position, note.title, note.uri, note_index_key(&note.uri), fold_title(&note.title)],
                )
                .unwrap();
        }
        transaction.commit().unwrap();
        let ids = |query: &str, workspace: &FileUri| -> Vec<String> {
            find_candidates(&connection, workspace, query).unwrap().into_iter().map(|note| note.id).collect()
        };
        // Too common: every note matches, so the workspace's three are found by the scan, in listing order.
        assert_eq!(ids("COMMON", &workspace), ["n2", "n1", "n0"]);
        assert_eq!(ids("common", &elsewhere).len() as i64, INDEX_MATCHES_MAX);
        // Rare: the index answers.
        assert_eq!(ids("mmon 1", &workspace), ["n1"]);
        let elsewhere_matches = (3..INDEX_MATCHES_MAX + 3).filter(|i| i.to_string().starts_with('1')).count();
        assert_eq!(ids("mmon 1", &elsewhere).len(), elsewhere_matches);
        drop(connection);
        let _ = std::fs::remove_dir_all(&directory);
    }
}
