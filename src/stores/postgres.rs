//! The note store and replay store in PostgreSQL, for a fleet that spans machines.
//!
//! `claim_and_delete` is one READ COMMITTED transaction:
//! 1. `INSERT … ON CONFLICT (nonce) DO NOTHING`, and in the same statement (a data-modifying CTE) the nonce
//!    counter row is incremented only if the insert added a row. A concurrent inserter of the same nonce
//!    waits on ours and then sees the conflict, so two transactions can never both claim it; a conflict
//!    reads the stored record (AlreadyClaimed). The counter row serializes claims, which is what makes the
//!    capacity bound exact; over capacity, entries past expiry plus grace are pruned, and if none can go the
//!    claim is refused (Full, fail closed, nothing evicted).
//! 2. The live note is deleted with `DELETE … RETURNING` (its row lock makes a concurrent move or delete
//!    wait, or be waited on), and the returned note's containment is re-checked; outside the workspace, the
//!    transaction rolls back and the note is as it was.
//! 3. Commit. Every refusal (gone, outside, full, conflict) rolls back instead, so nothing is consumed.
//!
//! Steps 1 and 2 are one statement (data-modifying CTEs), sent in one pipeline with `BEGIN`; the decision is
//! then `COMMIT` or `ROLLBACK`: two round trips and three statements where one statement per step took four
//! and four. (A conflict, the rare case, costs one more statement to read the holder's record.)

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
use deadpool_postgres::{GenericClient, Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime, Transaction};
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::types::ToSql;
use tokio_postgres::NoTls;

/// Connections one process keeps to the database at most.
pub(crate) const POSTGRES_CONNECTIONS_MAX: usize = 16;
/// How long an operation waits for a free connection, or for a new one to be established.
pub(crate) const POSTGRES_CONNECT_TIMEOUT_MS: u64 = 5_000;
/// How often a claim retries when the conflicting nonce vanished between its insert and its read (pruned
/// by another instance with a faster clock). Bounded: after that the store reports itself unavailable.
pub(crate) const POSTGRES_RESERVE_ATTEMPTS_MAX: usize = 3;
/// Claims the nonce and counts it, in one statement: one row (the new count) if the nonce was inserted, none on
/// a conflict. A concurrent inserter of the same nonce waits for ours to commit or roll back.
const INSERT_AND_COUNT_SQL: &str = "WITH inserted AS (
        INSERT INTO nonces (nonce, expires_at_ms, record, principal) VALUES ($1, $2, $3, $4)
        ON CONFLICT (nonce) DO NOTHING RETURNING nonce
    ),
    counted AS (
        UPDATE replay_counter SET nonce_count = nonce_count + 1
        WHERE id = 1 AND EXISTS (SELECT 1 FROM inserted) RETURNING nonce_count, pruned_through_ms
    ),
    held AS (
        INSERT INTO replay_principals (principal, nonce_count) SELECT $4, 1 WHERE EXISTS (SELECT 1 FROM inserted)
        ON CONFLICT (principal) DO UPDATE SET nonce_count = replay_principals.nonce_count + 1 RETURNING nonce_count
    )
    SELECT counted.nonce_count, counted.pruned_through_ms, held.nonce_count FROM counted, held";
/// Claims the nonce, counts it and deletes the note, in one statement (one row back): the count and the deleted
/// note, both NULL on a conflict; the note NULL if it is gone. Locks are taken in the order nonce, counter,
/// note (the delete needs the count first), as the step-by-step path takes them.
const CLAIM_AND_DELETE_SQL: &str = "WITH inserted AS (
        INSERT INTO nonces (nonce, expires_at_ms, record, principal) VALUES ($1, $2, $3, $5)
        ON CONFLICT (nonce) DO NOTHING RETURNING nonce
    ),
    counted AS (
        UPDATE replay_counter SET nonce_count = nonce_count + 1
        WHERE id = 1 AND EXISTS (SELECT 1 FROM inserted) RETURNING nonce_count, pruned_through_ms
    ),
    held AS (
        INSERT INTO replay_principals (principal, nonce_count) SELECT $5, 1 WHERE EXISTS (SELECT 1 FROM inserted)
        ON CONFLICT (principal) DO UPDATE SET nonce_count = replay_principals.nonce_count + 1 RETURNING nonce_count
    ),
    deleted AS (
        DELETE FROM notes WHERE id = $4 AND EXISTS (SELECT 1 FROM counted) RETURNING id, title, uri, body
    )
    SELECT counted.nonce_count, deleted.id, deleted.title, deleted.uri, deleted.body, counted.pruned_through_ms, held.nonce_count
    FROM (SELECT 1) AS one LEFT JOIN counted ON true LEFT JOIN deleted ON true LEFT JOIN held ON true";
const SELECT_RECORD_SQL: &str = "SELECT record FROM nonces WHERE nonce = $1";
const DELETE_NOTE_SQL: &str = "DELETE FROM notes WHERE id = $1 RETURNING id, title, uri, body";
/// Serializes schema migration across processes starting at once (an arbitrary constant: "mcpsim" + 1).
const MIGRATION_LOCK_KEY: i64 = 0x6d63_7073_696d_0001;

/// The schema, oldest first. Never edit a released step: add a new one.
pub const POSTGRES_MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "notes in listing order, consumed nonces, and the nonce count the capacity bound reads",
        sql: "
        CREATE TABLE notes (
            id TEXT PRIMARY KEY,
            position BIGINT NOT NULL UNIQUE,
            title TEXT NOT NULL,
            uri TEXT NOT NULL,
            body TEXT NOT NULL
        );
        CREATE SEQUENCE note_positions AS BIGINT OWNED BY notes.position;
        CREATE TABLE nonces (
            nonce TEXT PRIMARY KEY,
            expires_at_ms BIGINT NOT NULL,
            record TEXT NOT NULL
        );
        CREATE INDEX nonces_by_expiry ON nonces (expires_at_ms);
        -- COUNT(*) would scan the table on every claim; this row is kept equal to it in the same transactions.
        CREATE TABLE replay_counter (
            id SMALLINT PRIMARY KEY CHECK (id = 1),
            nonce_count BIGINT NOT NULL CHECK (nonce_count >= 0)
        );
        INSERT INTO replay_counter (id, nonce_count) VALUES (1, 0);
    ",
    },
    Migration {
        version: 2,
        description: "the expiry the nonces have been pruned through: claims of states that old are refused on any clock",
        sql: "ALTER TABLE replay_counter ADD COLUMN pruned_through_ms BIGINT NOT NULL DEFAULT 0;",
    },
    Migration {
        version: 3,
        description: "each principal's share of the nonces; the gateway's rate-limit counters and its notes backends' export ledgers",
        sql: "
        -- Nonces claimed before this step belong to no principal ('') and count against that share alone.
        ALTER TABLE nonces ADD COLUMN principal TEXT NOT NULL DEFAULT '';
        CREATE TABLE replay_principals (
            principal TEXT PRIMARY KEY,
            nonce_count BIGINT NOT NULL CHECK (nonce_count > 0)
        );
        INSERT INTO replay_principals (principal, nonce_count) SELECT '', COUNT(*) FROM nonces HAVING COUNT(*) > 0;
        CREATE TABLE rate_counters (
            principal TEXT NOT NULL,
            tool TEXT NOT NULL,
            window_ms BIGINT NOT NULL,
            window_index BIGINT NOT NULL,
            ends_at_ms BIGINT NOT NULL,
            calls BIGINT NOT NULL CHECK (calls > 0),
            PRIMARY KEY (principal, tool, window_ms, window_index)
        );
        CREATE INDEX rate_counters_by_end ON rate_counters (ends_at_ms);
        -- One ledger per notes backend; position is the export's number in its ledger (export-1, export-2, …).
        CREATE TABLE exports (
            ledger TEXT NOT NULL,
            key TEXT NOT NULL,
            position BIGINT NOT NULL,
            request_digest TEXT NOT NULL,
            principal TEXT NOT NULL,
            destination TEXT NOT NULL,
            note_ids TEXT NOT NULL,
            PRIMARY KEY (ledger, key),
            UNIQUE (ledger, position)
        );
    ",
    },
    Migration {
        version: 4,
        description: "the out-of-band flows of URL-mode elicitation: who started each, and who completed it",
        sql: "
        CREATE TABLE out_of_band_flows (
            reference TEXT PRIMARY KEY,
            principal TEXT NOT NULL,
            tool TEXT NOT NULL,
            subject TEXT NOT NULL,
            expires_at_ms BIGINT NOT NULL,
            completed_by TEXT
        );
        CREATE INDEX out_of_band_flows_by_expiry ON out_of_band_flows (expires_at_ms);
    ",
    },
    Migration {
        version: NOTE_INDEX_VERSION,
        description: "notes by place and title: round 1 reads the asked workspace's titles, never every note's body",
        sql: r#"
        -- The normalized URI's index key (FileUri::index_key; NULL where the URI does not parse: inside nothing)
        -- and the lowercased title, both computed by mcpsim; opening the store fills them for older notes.
        -- COLLATE "C": the workspace's notes are one byte-ordered range whatever the database's locale.
        ALTER TABLE notes ADD COLUMN uri_key TEXT COLLATE "C";
        ALTER TABLE notes ADD COLUMN title_fold TEXT;
        CREATE INDEX notes_by_place ON notes (uri_key, position);
    "#,
    },
    Migration {
        version: 6,
        description: "the out-of-band flows by principal: each principal's share of them is counted from this index",
        sql: "CREATE INDEX out_of_band_flows_by_principal ON out_of_band_flows (principal);",
    },
];

/// Round 1's search for a query of 3 characters or more: `$3` is the folded query, `like_escaped`. The
/// statement is prepared once per connection, and after five runs PostgreSQL may plan it once for any
/// parameters (a generic plan), which priced a pattern it cannot see at 0.5% of the table and chose the
/// workspace's range of `notes_by_place` (31.8 ms at 10^5 notes, `benches/store_scale.rs`). `uri_key || ''`
/// keeps that index out of this statement: every plan reads `notes_by_title`, then filters the workspace.
pub const FIND_CANDIDATES_BY_TRIGRAMS: &str = "SELECT id, title, uri FROM notes
    WHERE title_fold LIKE '%' || $3 || '%' AND uri_key || '' >= $1 AND uri_key || '' < $2 ORDER BY position";

/// `text` as a LIKE pattern matching itself: `\`, `%` and `_` escaped with `\` (LIKE's default escape).
fn like_escaped(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '\\' | '%' | '_') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// The trigram index of the folded titles (and the `pg_trgm` extension it needs): not a numbered migration but
/// an addition, built by opening the store when it is missing, after [`TITLE_TRIGRAMS_AFTER`]. It only narrows
/// round 1's search and PostgreSQL keeps it in step with every writer, an older mcpsim's included, so it must not
/// raise the schema version: a rolling deploy runs the release before it (schema 6, which refuses a newer
/// version) beside this one on the same database.
const TITLE_TRIGRAMS: &str = "
        -- pg_trgm is a trusted extension (PostgreSQL 13 and later): the database's owner may create it. Where
        -- that is refused, opening fails saying what a superuser must run (postgres.rs, ensure_title_trigrams).
        CREATE EXTENSION IF NOT EXISTS pg_trgm;
        -- fastupdate off: a new title goes into the index at once, not into a pending list every search would
        -- scan (and which made the planner price the index above reading the workspace until a vacuum).
        CREATE INDEX IF NOT EXISTS notes_by_title ON notes USING gin (title_fold gin_trgm_ops) WITH (fastupdate = off);
    ";

/// The schema version whose stores get [`TITLE_TRIGRAMS`] (the last numbered one when it was added).
const TITLE_TRIGRAMS_AFTER: i64 = 6;

/// The schema step that added the search columns, after which opening fills them for older rows.
const NOTE_INDEX_VERSION: i64 = 5;
/// Counts one call if the window's counter is below the quota ($5), in one statement: a row (the new count)
/// if counted, none if the quota is spent. A concurrent counter of the same key waits on ours.
const RATE_ACQUIRE_SQL: &str = "INSERT INTO rate_counters (principal, tool, window_ms, window_index, ends_at_ms, calls)
    VALUES ($1, $2, $3, $4, $6, 1)
    ON CONFLICT (principal, tool, window_ms, window_index) DO UPDATE SET calls = rate_counters.calls + 1
    WHERE rate_counters.calls < $5
    RETURNING calls";
/// The first key of the advisory lock that serializes the exports of one ledger (the second is its hash).
const EXPORT_LOCK_CLASS: i32 = 0x6d63_0003;

/// Why a connection string is refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectionStringError {
    #[error("not a PostgreSQL connection string: {0}")]
    Unparsable(tokio_postgres::Error),
    #[error(
        "sslmode=require needs TLS, which this build of mcpsim does not include; connect over a trusted network or a tunnel (sslmode=disable or prefer)"
    )]
    TlsRequired,
    #[error("the connection string names no host (e.g. postgres://mcpsim@127.0.0.1:5432/mcpsim)")]
    NoHost,
}

/// Parses a connection URL or `key=value` string, refusing what this build cannot honour.
pub(crate) fn parse_config(text: &str) -> Result<tokio_postgres::Config, ConnectionStringError> {
    let config: tokio_postgres::Config = text.parse().map_err(ConnectionStringError::Unparsable)?;
    if config.get_ssl_mode() == SslMode::Require {
        return Err(ConnectionStringError::TlsRequired);
    }
    if config.get_hosts().is_empty() {
        return Err(ConnectionStringError::NoHost);
    }
    Ok(config)
}

/// `user@host:port/db`, for logs; never the password.
pub(crate) fn describe_config(config: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(index, host)| {
            let name = match host {
                Host::Tcp(name) => name.clone(),
                Host::Unix(path) => path.display().to_string(),
            };
            let port = config.get_ports().get(index).or(config.get_ports().first()).copied().unwrap_or(5432);
            format!("{name}:{port}")
        })
        .collect();
    let user = config.get_user().map(|user| format!("{user}@")).unwrap_or_default();
    let database = config.get_dbname().or(config.get_user()).unwrap_or("postgres");
    format!("{user}{}/{database}", hosts.join(","))
}

/// Both ports and the admin handle over one PostgreSQL database. Cheap to clone; clones share the pool.
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    clock: Arc<dyn Clock>,
    limits: ReplayLimits,
    /// Bounds of the out-of-band flows (in all and per principal); [`PostgresStore::with_out_of_band_limits`].
    flows: OutOfBandLimits,
    description: String,
}

enum Reservation {
    Inserted,
    AlreadyClaimed(ClaimRecord),
    Full,
    /// Past the replay window (see [`past_retention`]); the insert is to be rolled back.
    Expired,
}

impl PostgresStore {
    /// The same store, bounding its out-of-band flows by `limits` (in all and per principal).
    pub fn with_out_of_band_limits(self, limits: OutOfBandLimits) -> PostgresStore {
        PostgresStore { flows: limits, ..self }
    }

    /// Connects and migrates the schema. Several processes may open the same database at once; migration is
    /// serialized by an advisory lock.
    pub async fn open(config: tokio_postgres::Config, clock: Arc<dyn Clock>, limits: ReplayLimits) -> Result<PostgresStore, StoreError> {
        Self::open_with_durability(config, clock, limits, Durability::Durable).await
    }

    /// [`PostgresStore::open`] with a choice of when commits are acknowledged (see [`Durability`]).
    pub async fn open_with_durability(
        mut config: tokio_postgres::Config,
        clock: Arc<dyn Clock>,
        limits: ReplayLimits,
        durability: Durability,
    ) -> Result<PostgresStore, StoreError> {
        if durability == Durability::Relaxed {
            // A session setting sent at connection start-up: no extra round trip, and only this store's
            // sessions answer commits before their WAL flush (other clients of the database are unaffected).
            let options = match config.get_options() {
                Some(existing) => format!("{existing} -c synchronous_commit=off"),
                None => "-c synchronous_commit=off".to_string(),
            };
            config.options(&options);
        }
        Self::open_with_migrations(config, clock, limits, POSTGRES_MIGRATIONS).await.map(|(store, _)| store)
    }

    /// [`PostgresStore::open`] with an explicit migration list, reporting what it applied.
    pub async fn open_with_migrations(
        mut config: tokio_postgres::Config,
        clock: Arc<dyn Clock>,
        limits: ReplayLimits,
        migrations: &[Migration],
    ) -> Result<(PostgresStore, MigrationReport), StoreError> {
        let description = format!("postgres {}", describe_config(&config));
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_millis(POSTGRES_CONNECT_TIMEOUT_MS));
        }
        if config.get_application_name().is_none() {
            config.application_name("mcpsim");
        }
        let manager = Manager::from_config(config, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
        let timeout = Some(Duration::from_millis(POSTGRES_CONNECT_TIMEOUT_MS));
        let pool = Pool::builder(manager)
            .max_size(POSTGRES_CONNECTIONS_MAX)
            .runtime(Runtime::Tokio1)
            .wait_timeout(timeout)
            .create_timeout(timeout)
            .recycle_timeout(timeout)
            .build()
            .map_err(|e| StoreError::Unavailable(format!("{description}: cannot build the connection pool: {e}")))?;
        let store = PostgresStore { pool, clock, limits, flows: OutOfBandLimits::default(), description };
        let report = store.migrate(migrations).await?;
        if migrations.iter().any(|migration| migration.version == NOTE_INDEX_VERSION) {
            store.backfill_search_columns().await?;
        }
        if migrations.iter().any(|migration| migration.version == TITLE_TRIGRAMS_AFTER) {
            store.ensure_title_trigrams().await?;
        }
        Ok((store, report))
    }

    fn error(&self, error: &tokio_postgres::Error) -> StoreError {
        StoreError::Unavailable(format!("{}: {}", self.description, explain(error)))
    }

    async fn client(&self) -> Result<deadpool_postgres::Client, StoreError> {
        self.pool.get().await.map_err(|error| {
            if matches!(error, PoolError::Closed) {
                return StoreError::Unavailable(format!("{}: the store was closed (the server is shutting down)", self.description));
            }
            let reason = match &error {
                PoolError::Backend(error) => explain(error),
                PoolError::Timeout(_) => format!("no connection within {POSTGRES_CONNECT_TIMEOUT_MS} ms"),
                other => other.to_string(),
            };
            StoreError::Unavailable(format!("{}: {reason}; is PostgreSQL running and reachable?", self.description))
        })
    }

    async fn migrate(&self, migrations: &[Migration]) -> Result<MigrationReport, StoreError> {
        let known = latest_version(migrations);
        let now_ms = sql_ms(self.clock.now_ms());
        let mut client = self.client().await?;
        let transaction = client.transaction().await.map_err(|e| self.error(&e))?;
        let result: Result<MigrationReport, StoreError> = async {
            let step = |e: tokio_postgres::Error| self.error(&e);
            transaction.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK_KEY]).await.map_err(step)?;
            transaction
                .batch_execute(
                    "CREATE TABLE IF NOT EXISTS schema_version (
                        version BIGINT PRIMARY KEY,
                        description TEXT NOT NULL,
                        applied_at_ms BIGINT NOT NULL
                    )",
                )
                .await
                .map_err(step)?;
            let found: i64 = transaction.query_one("SELECT COALESCE(MAX(version), 0) FROM schema_version", &[]).await.map_err(step)?.get(0);
            if found > known {
                return Err(newer_schema(found, known));
            }
            for migration in migrations.iter().filter(|migration| migration.version > found) {
                transaction.batch_execute(migration.sql).await.map_err(step)?;
                transaction
                    .execute(
                        "INSERT INTO schema_version (version, description, applied_at_ms) VALUES ($1, $2, $3)",
                        &[&migration.version, &migration.description, &now_ms],
                    )
                    .await
                    .map_err(step)?;
            }
            Ok(MigrationReport { version_before: found, version_after: found.max(known) })
        }
        .await;
        self.finish(transaction, result.is_ok()).await?;
        result
    }

    /// The title index's step failed: most likely the role may not create the `pg_trgm` extension (it is not
    /// the database's owner, or the server lacks the contrib modules). Says what a superuser must run; never a
    /// silent fall back to scanning titles.
    fn without_trigrams(&self, error: &tokio_postgres::Error) -> StoreError {
        let StoreError::Unavailable(reason) = self.error(error);
        StoreError::Unavailable(format!(
            "{reason}; the title search's index needs the pg_trgm extension: have a superuser run \
             `CREATE EXTENSION IF NOT EXISTS pg_trgm;` in this database (PostgreSQL's contrib modules must be installed), \
             then start mcpsim again"
        ))
    }

    /// Commits or rolls back. A failed rollback is reported too: the pool then discards the connection.
    /// Builds [`TITLE_TRIGRAMS`] in one transaction (under the migration lock) if the database lacks it.
    async fn ensure_title_trigrams(&self) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let transaction = client.transaction().await.map_err(|e| self.error(&e))?;
        let result: Result<(), StoreError> = async {
            let step = |e: tokio_postgres::Error| self.error(&e);
            transaction.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK_KEY]).await.map_err(step)?;
            let present: bool = transaction.query_one("SELECT to_regclass('notes_by_title') IS NOT NULL", &[]).await.map_err(step)?.get(0);
            if !present {
                transaction.batch_execute(TITLE_TRIGRAMS).await.map_err(|e| self.without_trigrams(&e))?;
            }
            Ok(())
        }
        .await;
        self.finish(transaction, result.is_ok()).await?;
        result
    }

    async fn finish(&self, transaction: Transaction<'_>, commit: bool) -> Result<(), StoreError> {
        let ended = if commit { transaction.commit().await } else { transaction.rollback().await };
        ended.map_err(|e| self.error(&e))
    }

    /// Inside a transaction: records the nonce unless it is already held, and enforces the capacity the way the
    /// memory store does (prune only when full, never an unexpired-plus-grace entry, never evict).
    async fn reserve(&self, transaction: &impl GenericClient, claim: &NonceClaim) -> Result<Reservation, StoreError> {
        let step = |e: tokio_postgres::Error| self.error(&e);
        let insert_and_count = transaction.prepare_cached(INSERT_AND_COUNT_SQL).await.map_err(step)?;
        let select = transaction.prepare_cached(SELECT_RECORD_SQL).await.map_err(step)?;
        let expires_at_ms = sql_ms(claim.expires_at_ms);
        let record = encode_record(&claim.record);
        for _ in 0..POSTGRES_RESERVE_ATTEMPTS_MAX {
            let parameters: [&(dyn ToSql + Sync); 4] = [&claim.nonce, &expires_at_ms, &record, &claim.principal];
            if let Some(row) = transaction.query_opt(&insert_and_count, &parameters).await.map_err(step)? {
                return self.within_capacity(transaction, claim, row.get(0), row.get(1), row.get(2)).await;
            }
            if let Some(row) = transaction.query_opt(&select, &[&claim.nonce]).await.map_err(step)? {
                return Ok(Reservation::AlreadyClaimed(decode_record(row.get(0))?));
            }
        }
        Err(self.kept_vanishing(claim))
    }

    fn kept_vanishing(&self, claim: &NonceClaim) -> StoreError {
        StoreError::Unavailable(format!(
            "{}: nonce {} kept conflicting and vanishing ({POSTGRES_RESERVE_ATTEMPTS_MAX} attempts); are the instances' clocks far apart?",
            self.description, claim.nonce
        ))
    }

    /// After the nonce was inserted and counted (`count` now held): over capacity, prunes what is past expiry
    /// plus grace, and refuses (Full, fail closed) if that is not enough.
    async fn within_capacity(
        &self,
        transaction: &impl GenericClient,
        claim: &NonceClaim,
        mut count: i64,
        pruned_through: i64,
        mut held: i64,
    ) -> Result<Reservation, StoreError> {
        let step = |e: tokio_postgres::Error| self.error(&e);
        let now_ms = self.clock.now_ms();
        // Every process judges by its own clock, and the watermark is shared: one whose clock lags can never get
        // a nonce another process pruned accepted again. (The caller rolls the insert back.)
        if past_retention(claim.expires_at_ms, now_ms, self.limits.retention_grace_ms, u64::try_from(pruned_through).unwrap_or(0)) {
            return Ok(Reservation::Expired);
        }
        let capacity = i64::try_from(self.limits.capacity).unwrap_or(i64::MAX);
        let principal_capacity = i64::try_from(self.limits.principal_capacity).unwrap_or(i64::MAX);
        // The principal's share, then the whole; pruned only when one is exceeded, and never an unexpired entry.
        if count > capacity || held > principal_capacity {
            if let Some(horizon) = prune_horizon_ms(now_ms, self.limits.retention_grace_ms) {
                let pruned_by = transaction
                    .query(
                        "WITH gone AS (DELETE FROM nonces WHERE expires_at_ms <= $1 AND nonce <> $2 RETURNING principal)
                         SELECT principal, COUNT(*) FROM gone GROUP BY principal",
                        &[&horizon, &claim.nonce],
                    )
                    .await
                    .map_err(step)?;
                let mut pruned = 0;
                for row in &pruned_by {
                    let (principal, gone): (String, i64) = (row.get(0), row.get(1));
                    pruned += gone;
                    if principal == claim.principal {
                        held -= gone;
                    }
                    // A principal left with none loses its row (the count is never 0); any other is decremented.
                    transaction
                        .execute("DELETE FROM replay_principals WHERE principal = $1 AND nonce_count <= $2", &[&principal, &gone])
                        .await
                        .map_err(step)?;
                    transaction
                        .execute("UPDATE replay_principals SET nonce_count = nonce_count - $1 WHERE principal = $2", &[&gone, &principal])
                        .await
                        .map_err(step)?;
                }
                transaction
                    .execute(
                        "UPDATE replay_counter SET nonce_count = nonce_count - $1, pruned_through_ms = GREATEST(pruned_through_ms, $2) WHERE id = 1",
                        &[&pruned, &horizon],
                    )
                    .await
                    .map_err(step)?;
                count -= pruned;
            }
            if count > capacity || held > principal_capacity {
                return Ok(Reservation::Full);
            }
        }
        Ok(Reservation::Inserted)
    }

    /// The body of `claim_and_delete`: `BEGIN` and one statement that claims the nonce, counts it and deletes
    /// the note go out as one pipeline; then the outcome is decided from its one row. Returns the outcome and
    /// whether to commit. On a refusal the delete (if it found the note) is rolled back with the rest.
    async fn claim_and_delete_in(
        &self,
        transaction: &PipelinedTransaction,
        claim: &NonceClaim,
        note_id: &str,
        workspace: &FileUri,
    ) -> Result<(ClaimAndDelete, bool), StoreError> {
        let step = |e: tokio_postgres::Error| self.error(&e);
        let client = transaction.client()?;
        // Cached per connection: preparing costs a round trip only on a connection's first claim.
        let claim_and_delete = client.prepare_cached(CLAIM_AND_DELETE_SQL).await.map_err(step)?;
        let expires_at_ms = sql_ms(claim.expires_at_ms);
        let record = encode_record(&claim.record);
        let parameters: [&(dyn ToSql + Sync); 5] = [&claim.nonce, &expires_at_ms, &record, &note_id, &claim.principal];
        // `biased`: polled first in this order, so sent in this order.
        let (begun, claimed) = tokio::join!(biased; client.batch_execute("BEGIN"), client.query_one(&claim_and_delete, &parameters));
        // A failed BEGIN is the cause; the statement then only reports it.
        begun.map_err(step)?;
        let row = claimed.map_err(step)?;
        let (counted, deleted, pruned_through, held): (Option<i64>, Option<String>, Option<i64>, Option<i64>) =
            (row.get(0), row.get(1), row.get(5), row.get(6));
        let reservation = match counted {
            Some(count) => self.within_capacity(client, claim, count, pruned_through.unwrap_or(0), held.unwrap_or(1)).await?,
            None => {
                // A conflict: the nonce is held (this statement waited for its holder to commit), and nothing was
                // deleted. A new statement sees the committed record.
                let select = client.prepare_cached(SELECT_RECORD_SQL).await.map_err(step)?;
                match client.query_opt(&select, &[&claim.nonce]).await.map_err(step)? {
                    Some(held) => Reservation::AlreadyClaimed(decode_record(held.get(0))?),
                    // Pruned in between (another instance's clock runs ahead): claim again, then delete, one
                    // statement at a time.
                    None => return self.claim_then_delete(client, claim, note_id, workspace).await,
                }
            }
        };
        match reservation {
            Reservation::Inserted => {}
            Reservation::AlreadyClaimed(record) => return Ok((ClaimAndDelete::AlreadyClaimed { record }, false)),
            Reservation::Full => return Ok((ClaimAndDelete::Full, false)),
            Reservation::Expired => return Ok((ClaimAndDelete::Expired, false)),
        }
        let Some(id) = deleted else {
            return Ok((ClaimAndDelete::NoteGone, false));
        };
        decide_deleted(Note { id, title: row.get(2), uri: row.get(3), body: row.get(4), revision: String::new() }, workspace)
    }

    /// `claim_and_delete`'s slow path, one statement at a time inside the open transaction.
    async fn claim_then_delete(
        &self,
        client: &deadpool_postgres::Client,
        claim: &NonceClaim,
        note_id: &str,
        workspace: &FileUri,
    ) -> Result<(ClaimAndDelete, bool), StoreError> {
        match self.reserve(client, claim).await? {
            Reservation::Inserted => {}
            Reservation::AlreadyClaimed(record) => return Ok((ClaimAndDelete::AlreadyClaimed { record }, false)),
            Reservation::Full => return Ok((ClaimAndDelete::Full, false)),
            Reservation::Expired => return Ok((ClaimAndDelete::Expired, false)),
        }
        let delete = client.prepare_cached(DELETE_NOTE_SQL).await.map_err(|e| self.error(&e))?;
        match client.query_opt(&delete, &[&note_id]).await.map_err(|e| self.error(&e))? {
            None => Ok((ClaimAndDelete::NoteGone, false)),
            Some(row) => decide_deleted(
                Note { id: row.get(0), title: row.get(1), uri: row.get(2), body: row.get(3), revision: String::new() },
                workspace,
            ),
        }
    }

    async fn list_in(&self, client: &impl GenericClient) -> Result<Vec<Note>, StoreError> {
        let step = |e: tokio_postgres::Error| self.error(&e);
        let list = client.prepare_cached("SELECT id, title, uri, body FROM notes ORDER BY position").await.map_err(step)?;
        let rows = client.query(&list, &[]).await.map_err(step)?;
        Ok(rows
            .iter()
            .map(|row| Note { id: row.get(0), title: row.get(1), uri: row.get(2), body: row.get(3), revision: String::new() })
            .collect())
    }

    async fn upsert_in(&self, client: &impl GenericClient, note: &Note) -> Result<(), StoreError> {
        // A new note goes to the end of the listing; an existing one keeps its place (as in memory).
        client
            .execute(
                "INSERT INTO notes (id, position, title, uri, body, uri_key, title_fold)
                 VALUES ($1, nextval('note_positions'), $2, $3, $4, $5, $6)
                 ON CONFLICT (id) DO UPDATE SET title = EXCLUDED.title, uri = EXCLUDED.uri, body = EXCLUDED.body,
                     uri_key = EXCLUDED.uri_key, title_fold = EXCLUDED.title_fold",
                &[&note.id, &note.title, &note.uri, &note.body, &note_index_key(&note.uri), &fold_title(&note.title)],
            )
            .await
            .map_err(|e| self.error(&e))?;
        Ok(())
    }

    /// Fills the search columns of notes written before [`NOTE_INDEX_VERSION`] (or by hand): one pass at open.
    async fn backfill_search_columns(&self) -> Result<(), StoreError> {
        let client = self.client().await?;
        let step = |e: tokio_postgres::Error| self.error(&e);
        let stale = client.query("SELECT id, uri, title FROM notes WHERE title_fold IS NULL", &[]).await.map_err(step)?;
        for row in stale {
            let (id, uri, title): (String, String, String) = (row.get(0), row.get(1), row.get(2));
            client
                .execute("UPDATE notes SET uri_key = $2, title_fold = $3 WHERE id = $1", &[&id, &note_index_key(&uri), &fold_title(&title)])
                .await
                .map_err(step)?;
        }
        Ok(())
    }
}

/// A transaction whose `BEGIN` is pipelined with its first statements (tokio-postgres's `Transaction` sends
/// `BEGIN` and waits for it). Until `finish` has ended it, dropping it (a cancelled request) discards the
/// connection instead of returning it to the pool inside an open transaction; the server then rolls back.
struct PipelinedTransaction {
    client: Option<deadpool_postgres::Client>,
}

impl PipelinedTransaction {
    fn client(&self) -> Result<&deadpool_postgres::Client, StoreError> {
        self.client.as_ref().ok_or_else(|| StoreError::Unavailable("the transaction has already ended".into()))
    }

    /// Commits or rolls back; the connection goes back to the pool only once that succeeded.
    async fn finish(mut self, store: &PostgresStore, commit: bool) -> Result<(), StoreError> {
        let ended = self.client()?.batch_execute(if commit { "COMMIT" } else { "ROLLBACK" }).await;
        ended.map_err(|e| store.error(&e))?;
        drop(self.client.take());
        Ok(())
    }
}

impl Drop for PipelinedTransaction {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            drop(deadpool_postgres::Object::take(client));
        }
    }
}

/// A claimed note, deleted inside the transaction: commit if its live URI is still inside the workspace;
/// otherwise roll back, and the note stays and the nonce is released.
fn decide_deleted(note: Note, workspace: &FileUri) -> Result<(ClaimAndDelete, bool), StoreError> {
    if still_inside(workspace, &note.uri) {
        Ok((ClaimAndDelete::Deleted(note), true))
    } else {
        Ok((ClaimAndDelete::NoteOutsideWorkspace, false))
    }
}

/// The server's own message and SQLSTATE when there is one; the driver's otherwise.
fn explain(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => {
            let mut text = error.to_string();
            let mut source = std::error::Error::source(error);
            while let Some(cause) = source {
                text.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            text
        }
    }
}

#[async_trait]
impl NoteStore for PostgresStore {
    async fn list_notes(&self) -> Result<Vec<Note>, StoreError> {
        let client = self.client().await?;
        self.list_in(&client).await
    }

    async fn find_candidates(&self, workspace: &FileUri, query: &str) -> Result<Vec<Note>, StoreError> {
        let client = self.client().await?;
        let step = |e: tokio_postgres::Error| self.error(&e);
        let (start, end) = workspace.index_range();
        let query = fold_title(query);
        let rows = if query.chars().count() >= 3 {
            // The notes whose folded title holds the query's trigrams (notes_by_title), each compared again
            // (LIKE rechecks the heap row), then those in the workspace.
            let find = client.prepare_cached(FIND_CANDIDATES_BY_TRIGRAMS).await.map_err(step)?;
            client.query(&find, &[&start, &end, &like_escaped(&query)]).await.map_err(step)?
        } else {
            // Fewer than 3 characters hold no trigram to look up: one range of notes_by_place, every title of
            // the workspace compared in the database; such a query matches most titles anyway. No body read.
            let find = client
                .prepare_cached(
                    "SELECT id, title, uri FROM notes WHERE uri_key >= $1 AND uri_key < $2 AND strpos(title_fold, $3) > 0 ORDER BY position",
                )
                .await
                .map_err(step)?;
            client.query(&find, &[&start, &end, &query]).await.map_err(step)?
        };
        Ok(rows
            .iter()
            .map(|row| Note { id: row.get(0), title: row.get(1), uri: row.get(2), body: String::new(), revision: String::new() })
            .collect())
    }

    async fn notes_by_ids(&self, ids: &[String]) -> Result<Vec<Note>, StoreError> {
        let client = self.client().await?;
        let step = |e: tokio_postgres::Error| self.error(&e);
        let find = client.prepare_cached("SELECT id, title, uri FROM notes WHERE id = ANY($1) ORDER BY position").await.map_err(step)?;
        let rows = client.query(&find, &[&ids]).await.map_err(step)?;
        Ok(rows
            .iter()
            .map(|row| Note { id: row.get(0), title: row.get(1), uri: row.get(2), body: String::new(), revision: String::new() })
            .collect())
    }

    async fn delete_if_inside(&self, id: &str, revision: &str, workspace: &FileUri) -> Result<GuardedDelete, StoreError> {
        if !matches_revisionless(revision) {
            // Nothing is read or locked: no note of this store is that copy.
            return Ok(GuardedDelete::Gone);
        }
        let mut client = self.client().await?;
        let transaction = client.transaction().await.map_err(|e| self.error(&e))?;
        let decided: Result<(GuardedDelete, bool), StoreError> = async {
            let step = |e: tokio_postgres::Error| self.error(&e);
            let Some(row) =
                transaction.query_opt("SELECT id, title, uri, body FROM notes WHERE id = $1 FOR UPDATE", &[&id]).await.map_err(step)?
            else {
                return Ok((GuardedDelete::Gone, false));
            };
            let note = Note { id: row.get(0), title: row.get(1), uri: row.get(2), body: row.get(3), revision: String::new() };
            if !still_inside(workspace, &note.uri) {
                return Ok((GuardedDelete::OutsideWorkspace, false));
            }
            transaction.execute("DELETE FROM notes WHERE id = $1", &[&id]).await.map_err(step)?;
            Ok((GuardedDelete::Deleted(note), true))
        }
        .await;
        let commit = matches!(decided, Ok((_, true)));
        self.finish(transaction, commit).await?;
        decided.map(|(outcome, _)| outcome)
    }
}

#[async_trait]
impl ReplayStore for PostgresStore {
    async fn claim(&self, claim: NonceClaim) -> Result<ClaimOutcome, StoreError> {
        let mut client = self.client().await?;
        let transaction = client.transaction().await.map_err(|e| self.error(&e))?;
        let decided = match self.reserve(&transaction, &claim).await {
            Ok(Reservation::Inserted) => Ok((ClaimOutcome::Claimed, true)),
            Ok(Reservation::AlreadyClaimed(record)) => Ok((ClaimOutcome::AlreadyClaimed { record }, false)),
            Ok(Reservation::Full) => Ok((ClaimOutcome::Full, false)),
            Ok(Reservation::Expired) => Ok((ClaimOutcome::Expired, false)),
            Err(error) => Err(error),
        };
        let commit = matches!(decided, Ok((_, true)));
        self.finish(transaction, commit).await?;
        decided.map(|(outcome, _)| outcome)
    }

    async fn claim_and_delete(
        &self,
        claim: NonceClaim,
        note_id: &str,
        revision: &str,
        workspace: &FileUri,
    ) -> Result<ClaimAndDelete, StoreError> {
        let transaction = PipelinedTransaction { client: Some(self.client().await?) };
        let decided = match self.claim_and_delete_in(&transaction, &claim, note_id, workspace).await {
            // Claimed and found, but not the copy the form showed: roll back both, as for a missing note.
            Ok((ClaimAndDelete::Deleted(_), true)) if !matches_revisionless(revision) => Ok((ClaimAndDelete::NoteGone, false)),
            decided => decided,
        };
        let commit = matches!(decided, Ok((_, true)));
        transaction.finish(self, commit).await?;
        decided.map(|(outcome, _)| outcome)
    }
}

/// The gateway's rate counters in the database: every gateway process pointed at it counts against one quota.
#[async_trait]
impl RateLimiter for PostgresStore {
    async fn acquire(&self, principal: &str, tool: &str, limit: RateLimit, now_ms: u64) -> Result<RateDecision, StoreError> {
        let (index, retry_after_ms) = rate_window(now_ms, limit.window_ms);
        if limit.calls == 0 {
            return Ok(RateDecision::Limited { retry_after_ms });
        }
        let ends_at_ms = sql_ms((index + 1).saturating_mul(limit.window_ms.max(1)));
        let mut client = self.client().await?;
        let transaction = client.transaction().await.map_err(|e| self.error(&e))?;
        let decided: Result<(RateDecision, bool), StoreError> = async {
            let step = |e: tokio_postgres::Error| self.error(&e);
            let (window_ms, window_index, calls) = (sql_ms(limit.window_ms), sql_ms(index), i64::from(limit.calls));
            let params: [&(dyn ToSql + Sync); 6] = [&principal, &tool, &window_ms, &window_index, &calls, &ends_at_ms];
            let Some(row) = transaction.query_opt(RATE_ACQUIRE_SQL, &params).await.map_err(step)? else {
                return Ok((RateDecision::Limited { retry_after_ms }, false));
            };
            let used: i64 = row.get(0);
            if used == 1 {
                // A new counter: the bound on live counters, as the memory limiter keeps it.
                let live: i64 = transaction.query_one("SELECT COUNT(*) FROM rate_counters", &[]).await.map_err(step)?.get(0);
                if usize::try_from(live).unwrap_or(usize::MAX) > RATE_COUNTERS_MAX {
                    transaction.execute("DELETE FROM rate_counters WHERE ends_at_ms <= $1", &[&sql_ms(now_ms)]).await.map_err(step)?;
                    let live: i64 = transaction.query_one("SELECT COUNT(*) FROM rate_counters", &[]).await.map_err(step)?.get(0);
                    if usize::try_from(live).unwrap_or(usize::MAX) > RATE_COUNTERS_MAX {
                        return Err(StoreError::Unavailable("the rate limiter holds its maximum number of live counters".into()));
                    }
                }
            }
            let remaining = u32::try_from(calls - used).unwrap_or(0);
            Ok((RateDecision::Allowed { remaining }, true))
        }
        .await;
        let commit = matches!(decided, Ok((_, true)));
        self.finish(transaction, commit).await?;
        decided.map(|(decision, _)| decision)
    }
}

impl PostgresStore {
    /// The export ledger of the notes backend `ledger` (its id), in this database.
    pub fn export_ledger(&self, ledger: &str) -> PostgresExportLedger {
        PostgresExportLedger { store: self.clone(), ledger: ledger.to_string() }
    }

    async fn read_export(&self, client: &impl GenericClient, ledger: &str, key: &str) -> Result<Option<ExportRecord>, StoreError> {
        let row = client
            .query_opt(
                "SELECT position, request_digest, principal, destination, note_ids FROM exports WHERE ledger = $1 AND key = $2",
                &[&ledger, &key],
            )
            .await
            .map_err(|e| self.error(&e))?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some(ExportRecord {
            export_id: format!("export-{}", row.get::<_, i64>(0)),
            key: key.to_string(),
            request_digest: row.get(1),
            principal: row.get(2),
            destination: row.get(3),
            note_ids: decode_note_ids(row.get(4))?,
        }))
    }
}

/// One notes backend's export ledger in the database: key → record, written in the transaction that decides
/// the export (the ledger's exports serialized by an advisory lock), so every process exports a key at most once.
#[derive(Clone)]
pub struct PostgresExportLedger {
    store: PostgresStore,
    ledger: String,
}

impl PostgresExportLedger {
    /// Every export of this ledger, in order (for tests and operators).
    pub async fn exports(&self) -> Result<Vec<ExportRecord>, StoreError> {
        let store = &self.store;
        let client = store.client().await?;
        let rows = client
            .query("SELECT key FROM exports WHERE ledger = $1 ORDER BY position", &[&self.ledger])
            .await
            .map_err(|e| store.error(&e))?;
        let mut records = Vec::with_capacity(rows.len());
        for row in rows {
            records.extend(store.read_export(&client, &self.ledger, row.get(0)).await?);
        }
        Ok(records)
    }
}

#[async_trait]
impl ExportLedger for PostgresExportLedger {
    async fn export_once(&self, request: ExportRequest) -> Result<ExportOutcome, StoreError> {
        let store = &self.store;
        let ledger = self.ledger.as_str();
        let mut client = store.client().await?;
        let transaction = client.transaction().await.map_err(|e| store.error(&e))?;
        let decided: Result<(ExportOutcome, bool), StoreError> = async {
            let step = |e: tokio_postgres::Error| store.error(&e);
            transaction.execute("SELECT pg_advisory_xact_lock($1, hashtext($2))", &[&EXPORT_LOCK_CLASS, &ledger]).await.map_err(step)?;
            if let Some(existing) = store.read_export(&transaction, ledger, &request.key).await? {
                let outcome = if existing.request_digest == request.request_digest {
                    ExportOutcome::AlreadyExported(existing)
                } else {
                    ExportOutcome::KeyConflict
                };
                return Ok((outcome, false));
            }
            let count: i64 = transaction
                .query_one("SELECT COALESCE(MAX(position), 0) FROM exports WHERE ledger = $1", &[&ledger])
                .await
                .map_err(step)?
                .get(0);
            if usize::try_from(count).unwrap_or(usize::MAX) >= EXPORT_KEYS_MAX {
                return Ok((ExportOutcome::Full, false));
            }
            let position = count + 1;
            let note_ids = encode_note_ids(&request.note_ids);
            transaction
                .execute(
                    "INSERT INTO exports (ledger, key, position, request_digest, principal, destination, note_ids)
                     VALUES ($1, $2, $3, $4, $5, $6, $7)",
                    &[&ledger, &request.key, &position, &request.request_digest, &request.principal, &request.destination, &note_ids],
                )
                .await
                .map_err(step)?;
            let record = ExportRecord {
                export_id: format!("export-{position}"),
                key: request.key.clone(),
                request_digest: request.request_digest.clone(),
                principal: request.principal.clone(),
                destination: request.destination.clone(),
                note_ids: request.note_ids.clone(),
            };
            Ok((ExportOutcome::Exported(record), true))
        }
        .await;
        let commit = matches!(decided, Ok((_, true)));
        store.finish(transaction, commit).await?;
        decided.map(|(outcome, _)| outcome)
    }
}

#[async_trait]
impl StoreAdmin for PostgresStore {
    async fn seed(&self, notes: &[Note]) -> Result<SeedReport, StoreError> {
        let mut client = self.client().await?;
        let transaction = client.transaction().await.map_err(|e| self.error(&e))?;
        let decided: Result<SeedReport, StoreError> = async {
            // Writers wait while the seed runs; readers do not.
            transaction.batch_execute("LOCK TABLE notes IN EXCLUSIVE MODE").await.map_err(|e| self.error(&e))?;
            let current = self.list_in(&transaction).await?;
            let target = seeded_listing(&current, notes);
            let report = seed_report(&current, &target, notes);
            for note in notes {
                self.upsert_in(&transaction, note).await?;
            }
            if report.reordered {
                // Fresh sequence values in target order are above every current position: no UNIQUE collision.
                for note in &target {
                    transaction
                        .execute("UPDATE notes SET position = nextval('note_positions') WHERE id = $1", &[&note.id])
                        .await
                        .map_err(|e| self.error(&e))?;
                }
            }
            Ok(report)
        }
        .await;
        self.finish(transaction, decided.is_ok()).await?;
        decided
    }

    async fn list(&self) -> Result<Vec<Note>, StoreError> {
        self.list_notes().await
    }

    async fn upsert(&self, note: Note) -> Result<(), StoreError> {
        let client = self.client().await?;
        self.upsert_in(&client, &note).await
    }

    async fn remove(&self, id: &str) -> Result<bool, StoreError> {
        let client = self.client().await?;
        Ok(client.execute("DELETE FROM notes WHERE id = $1", &[&id]).await.map_err(|e| self.error(&e))? == 1)
    }

    async fn move_to(&self, id: &str, uri: &str) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let sql = "UPDATE notes SET uri = $2, uri_key = $3 WHERE id = $1";
        Ok(client.execute(sql, &[&id, &uri, &note_index_key(uri)]).await.map_err(|e| self.error(&e))? == 1)
    }

    async fn rename(&self, id: &str, title: &str) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let sql = "UPDATE notes SET title = $2, title_fold = $3 WHERE id = $1";
        Ok(client.execute(sql, &[&id, &title, &fold_title(title)]).await.map_err(|e| self.error(&e))? == 1)
    }

    async fn commit_setting(&self) -> Result<String, StoreError> {
        let client = self.client().await?;
        let row = client.query_one("SHOW synchronous_commit", &[]).await.map_err(|e| self.error(&e))?;
        Ok(format!("synchronous_commit={}", row.get::<_, String>(0)))
    }

    async fn nonce_count(&self) -> Result<u64, StoreError> {
        let client = self.client().await?;
        // One statement, one snapshot: the table and the counter are compared as of the same moment.
        let row = client
            .query_one("SELECT (SELECT COUNT(*) FROM nonces), (SELECT nonce_count FROM replay_counter WHERE id = 1)", &[])
            .await
            .map_err(|e| self.error(&e))?;
        let (counted, recorded): (i64, i64) = (row.get(0), row.get(1));
        if counted != recorded {
            return Err(StoreError::Unavailable(format!(
                "{}: the nonce counter says {recorded} but the table holds {counted}: the database was changed outside mcpsim",
                self.description
            )));
        }
        Ok(u64::try_from(counted).unwrap_or(0))
    }

    async fn nonce_record(&self, nonce: &str) -> Result<Option<ClaimRecord>, StoreError> {
        let client = self.client().await?;
        let row = client.query_opt("SELECT record FROM nonces WHERE nonce = $1", &[&nonce]).await.map_err(|e| self.error(&e))?;
        row.map(|row| decode_record(row.get(0))).transpose()
    }

    fn describe(&self) -> String {
        self.description.clone()
    }

    async fn close(&self) -> Result<(), StoreError> {
        // Idle connections end now (the server sees a clean Terminate); ones in use end when returned.
        self.pool.close();
        Ok(())
    }
}
const FLOW_SELECT_SQL: &str = "SELECT principal, tool, subject, expires_at_ms, completed_by FROM out_of_band_flows WHERE reference = $1";

fn flow_of(reference: &str, row: &tokio_postgres::Row) -> FlowRecord {
    let completed_by: Option<String> = row.get(4);
    FlowRecord {
        flow: OutOfBandFlow {
            reference: reference.to_string(),
            principal: row.get(0),
            tool: row.get(1),
            subject: row.get(2),
            expires_at_ms: u64::try_from(row.get::<_, i64>(3)).unwrap_or(0),
        },
        status: match completed_by {
            Some(by) => FlowStatus::Completed { by },
            None => FlowStatus::Started,
        },
    }
}

/// The out-of-band flows in the database: every process pointed at it sees a flow started or completed by any.
#[async_trait]
impl OutOfBandStore for PostgresStore {
    async fn start(&self, flow: OutOfBandFlow, now_ms: u64) -> Result<FlowStart, StoreError> {
        let mut client = self.client().await?;
        let transaction = client.transaction().await.map_err(|e| self.error(&e))?;
        let started: Result<FlowStart, StoreError> = async {
            let step = |e: tokio_postgres::Error| self.error(&e);
            // Concurrent starts of one principal serialize on a transaction-scoped advisory lock named by the
            // principal, so its share is counted before any of them inserts (the whole bound may be passed by
            // one per principal starting at the same instant).
            transaction
                .execute("SELECT pg_advisory_xact_lock(hashtextextended('mcpsim-flows:' || $1, 0))", &[&flow.principal])
                .await
                .map_err(step)?;
            let (counted_in, principal, limits) = (&transaction, &flow.principal, self.flows);
            let full = move || async move {
                let held: i64 = counted_in.query_one("SELECT COUNT(*) FROM out_of_band_flows", &[]).await.map_err(step)?.get(0);
                let mine: i64 = counted_in
                    .query_one("SELECT COUNT(*) FROM out_of_band_flows WHERE principal = $1", &[principal])
                    .await
                    .map_err(step)?
                    .get(0);
                Ok::<bool, StoreError>(
                    limits.full(usize::try_from(held).unwrap_or(usize::MAX), usize::try_from(mine).unwrap_or(usize::MAX)),
                )
            };
            if full().await? {
                let before = sql_ms(now_ms.saturating_sub(OUT_OF_BAND_GRACE_MS));
                transaction.execute("DELETE FROM out_of_band_flows WHERE expires_at_ms <= $1", &[&before]).await.map_err(step)?;
                if full().await? {
                    return Ok(FlowStart::Full);
                }
            }
            let expires = sql_ms(flow.expires_at_ms);
            let params: [&(dyn ToSql + Sync); 5] = [&flow.reference, &flow.principal, &flow.tool, &flow.subject, &expires];
            transaction
                .execute(
                    "INSERT INTO out_of_band_flows (reference, principal, tool, subject, expires_at_ms, completed_by)
                     VALUES ($1, $2, $3, $4, $5, NULL)",
                    &params,
                )
                .await
                .map_err(step)?;
            Ok(FlowStart::Started)
        }
        .await;
        self.finish(transaction, started.is_ok()).await?;
        started
    }

    async fn flow(&self, reference: &str) -> Result<Option<FlowRecord>, StoreError> {
        let client = self.client().await?;
        let row = client.query_opt(FLOW_SELECT_SQL, &[&reference]).await.map_err(|e| self.error(&e))?;
        Ok(row.map(|row| flow_of(reference, &row)))
    }

    async fn complete(&self, reference: &str, user: &str, now_ms: u64) -> Result<Completion, StoreError> {
        let mut client = self.client().await?;
        let transaction = client.transaction().await.map_err(|e| self.error(&e))?;
        let decided: Result<Completion, StoreError> = async {
            let step = |e: tokio_postgres::Error| self.error(&e);
            // The row lock serializes two submissions of one page: the second reads the first's completion.
            let row = transaction.query_opt(&format!("{FLOW_SELECT_SQL} FOR UPDATE"), &[&reference]).await.map_err(step)?;
            let decision = decide_completion(row.map(|row| flow_of(reference, &row)).as_ref(), user, now_ms);
            if decision == Completion::Completed {
                transaction
                    .execute(
                        "UPDATE out_of_band_flows SET completed_by = $2 WHERE reference = $1 AND completed_by IS NULL",
                        &[&reference, &user],
                    )
                    .await
                    .map_err(step)?;
            }
            Ok(decision)
        }
        .await;
        self.finish(transaction, matches!(decided, Ok(Completion::Completed))).await?;
        decided
    }
}
