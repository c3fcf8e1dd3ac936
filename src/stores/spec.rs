//! Choosing a store: `memory`, `sqlite:PATH` or `postgres:URL`, parsed with errors that say what to write,
//! and opened as the two handler ports plus the operator's admin handle.

use crate::framework::out_of_band::OutOfBandStore;
use crate::framework::ports::{Clock, Note, NoteStore, ReplayStore, StoreError};
use crate::policy::containment::FileUri;
use crate::stores::admin::{MemoryAdmin, SeedReport, StoreAdmin};
use crate::stores::database::Durability;
#[cfg(unix)]
use crate::stores::dir::DirStore;
use crate::stores::gateway::GatewayStores;
use crate::stores::memory::{MemoryNoteStore, MemoryReplayStore, ReplayLimits};
use crate::stores::out_of_band::{MemoryOutOfBandStore, OutOfBandLimits};
#[cfg(feature = "postgres")]
use crate::stores::postgres::{describe_config, parse_config, PostgresStore};
#[cfg(feature = "sqlite")]
use crate::stores::sqlite::SqliteStore;
use crate::stores::system::SystemClock;
#[cfg(any(feature = "sqlite", unix))]
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

/// Where the notes and the replay store live.
#[derive(Clone)]
pub enum StoreSpec {
    /// Inside this process: every instance of one `mcpsim serve` shares it, other processes cannot.
    Memory,
    /// One SQLite file, shared by every process on this machine.
    #[cfg(feature = "sqlite")]
    Sqlite(PathBuf),
    /// A PostgreSQL database, shared by processes on any machine that reaches it.
    #[cfg(feature = "postgres")]
    Postgres(PostgresTarget),
    /// A folder of Markdown files (`stores::dir`), its replay ledger in `.mcpsim/` inside it: shared by every
    /// process on this machine pointed at it. `uri`: the `file://` URI the folder's notes are below (by
    /// default the folder's own).
    #[cfg(unix)]
    Dir { path: PathBuf, uri: Option<FileUri> },
}

/// A parsed PostgreSQL connection string. Its `Debug` and `Display` never show the password.
#[cfg(feature = "postgres")]
#[derive(Clone)]
pub struct PostgresTarget {
    // Boxed: a connection config is large and a spec is passed around by value.
    config: Box<tokio_postgres::Config>,
}

#[cfg(feature = "postgres")]
impl PostgresTarget {
    pub fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    /// The same server and credentials, another database (e.g. one per test run or per experiment).
    pub fn with_database(&self, database: &str) -> PostgresTarget {
        let mut config = self.config.clone();
        config.dbname(database);
        PostgresTarget { config }
    }
}

#[cfg(feature = "postgres")]
impl std::fmt::Display for PostgresTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&describe_config(&self.config))
    }
}

#[cfg(feature = "postgres")]
impl std::fmt::Debug for PostgresTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PostgresTarget({self})")
    }
}

pub(crate) const STORE_SPEC_HELP: &str =
    "memory | sqlite:PATH | postgres:URL | dir:FOLDER[=file:///URI] (e.g. sqlite:/var/lib/mcpsim/fleet.db, \
     postgres://mcpsim:secret@db.internal:5432/mcpsim, dir:/home/me/Notes)";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StoreSpecError(String);

impl FromStr for StoreSpec {
    type Err = StoreSpecError;

    fn from_str(text: &str) -> Result<StoreSpec, StoreSpecError> {
        let text = text.trim();
        if text.eq_ignore_ascii_case("memory") {
            return Ok(StoreSpec::Memory);
        }
        if let Some(path) = text.strip_prefix("sqlite:") {
            if path.is_empty() {
                return Err(StoreSpecError("sqlite: needs a file path, e.g. sqlite:./fleet.db".into()));
            }
            if path == ":memory:" {
                return Err(StoreSpecError(
                    "sqlite::memory: would give every connection its own empty database; use `memory` for an in-process store".into(),
                ));
            }
            #[cfg(feature = "sqlite")]
            return Ok(StoreSpec::Sqlite(PathBuf::from(path)));
            #[cfg(not(feature = "sqlite"))]
            return Err(StoreSpecError("this mcpsim was built without the `sqlite` feature; rebuild with it to use a SQLite store".into()));
        }
        if let Some(rest) = text.strip_prefix("dir:") {
            return parse_dir(rest);
        }
        for scheme in ["postgres:", "postgresql:"] {
            if let Some(rest) = text.strip_prefix(scheme) {
                // `postgres://…` is itself the URL; `postgres:URL` and `postgres:key=value …` wrap one.
                let connection = if rest.starts_with("//") { text } else { rest };
                if connection.is_empty() {
                    return Err(StoreSpecError("postgres: needs a connection URL, e.g. postgres://mcpsim@127.0.0.1:5432/mcpsim".into()));
                }
                #[cfg(feature = "postgres")]
                {
                    let config = parse_config(connection).map_err(|reason| StoreSpecError(format!("postgres store: {reason}")))?;
                    return Ok(StoreSpec::Postgres(PostgresTarget { config: Box::new(config) }));
                }
                #[cfg(not(feature = "postgres"))]
                return Err(StoreSpecError(
                    "this mcpsim was built without the `postgres` feature; rebuild with it to use a PostgreSQL store".into(),
                ));
            }
        }
        Err(StoreSpecError(format!("unknown store {:?}: write {STORE_SPEC_HELP}", redact_store_text(text))))
    }
}

/// What a user wrote as a store, fit to repeat in an error even when it does not parse: the password of a
/// URL's user info (`postgres://user:PASSWORD@host`) and any `password=` setting (`key=value` strings, URL
/// query parameters) become `***`. Everything else is kept, so the user can see what was wrong.
pub fn redact_store_text(text: &str) -> String {
    let mut shown = text.to_string();
    if let Some(scheme_end) = shown.find("://") {
        let authority_start = scheme_end + 3;
        let authority_end = shown[authority_start..].find(['/', '?']).map_or(shown.len(), |at| authority_start + at);
        if let Some(at) = shown[authority_start..authority_end].rfind('@') {
            let user_info = &shown[authority_start..authority_start + at];
            if let Some(colon) = user_info.find(':') {
                shown.replace_range(authority_start + colon + 1..authority_start + at, "***");
            }
        }
    }
    let mut redacted = String::with_capacity(shown.len());
    let mut rest = shown.as_str();
    while let Some(found) = rest.to_ascii_lowercase().find("password") {
        let after_name = &rest[found + "password".len()..];
        let trimmed = after_name.trim_start();
        let Some(value) = trimmed.strip_prefix('=') else {
            redacted.push_str(&rest[..found + "password".len()]);
            rest = after_name;
            continue;
        };
        let value = value.trim_start();
        let end = if let Some(quoted) = value.strip_prefix('\'') {
            quoted.find('\'').map_or(value.len(), |close| close + 2)
        } else {
            value.find([' ', '&', '\t']).unwrap_or(value.len())
        };
        redacted.push_str(&rest[..found]);
        redacted.push_str("password=***");
        rest = &value[end..];
    }
    redacted.push_str(rest);
    redacted
}

/// `dir:FOLDER` or `dir:FOLDER=file:///URI` (the notes' URIs below that one instead of the folder's own).
fn parse_dir(rest: &str) -> Result<StoreSpec, StoreSpecError> {
    let (path, uri) = match rest.rfind("=file:") {
        Some(at) => (&rest[..at], Some(&rest[at + 1..])),
        None => (rest, None),
    };
    if path.is_empty() {
        return Err(StoreSpecError("dir: needs a folder, e.g. dir:/home/me/Notes".into()));
    }
    #[cfg(unix)]
    {
        let uri = match uri {
            Some(text) => Some(
                FileUri::parse(text)
                    .map_err(|e| StoreSpecError(format!("dir:{path}={text}: the URI is not acceptable ({e}); write e.g. =file:///w")))?,
            ),
            None => None,
        };
        Ok(StoreSpec::Dir { path: PathBuf::from(path), uri })
    }
    #[cfg(not(unix))]
    {
        let _ = uri;
        Err(StoreSpecError("the directory store needs a Unix system (openat, renameat2); use sqlite: here".into()))
    }
}

impl StoreSpec {
    /// Whether other processes can share this store (every kind but memory).
    pub fn is_shared(&self) -> bool {
        !matches!(self, StoreSpec::Memory)
    }

    /// Where this store's replay ledger keeps its nonces (what its default capacity is sized by).
    pub fn replay_medium(&self) -> crate::stores::memory::ReplayMedium {
        use crate::stores::memory::ReplayMedium;
        match self {
            StoreSpec::Memory => ReplayMedium::Memory,
            StoreSpec::Dir { .. } => ReplayMedium::Files,
            #[allow(unreachable_patterns)]
            _ => ReplayMedium::Database,
        }
    }
}

impl std::fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreSpec::Memory => f.write_str("memory"),
            #[cfg(feature = "sqlite")]
            StoreSpec::Sqlite(path) => write!(f, "sqlite:{}", path.display()),
            #[cfg(feature = "postgres")]
            StoreSpec::Postgres(target) => write!(f, "postgres:{target}"),
            #[cfg(unix)]
            StoreSpec::Dir { path, uri: None } => write!(f, "dir:{}", path.display()),
            #[cfg(unix)]
            StoreSpec::Dir { path, uri: Some(uri) } => write!(f, "dir:{}={uri}", path.display()),
        }
    }
}

impl std::fmt::Debug for StoreSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoreSpec({self})")
    }
}

/// The opened store: what handlers use, and what operators and tests use.
#[derive(Clone)]
pub struct Stores {
    pub notes: Arc<dyn NoteStore>,
    pub replay: Arc<dyn ReplayStore>,
    pub admin: Arc<dyn StoreAdmin>,
    /// The out-of-band flows of URL-mode elicitation: in the database for `sqlite:` and `postgres:` (shared by
    /// every process pointed at it), in this process for `memory` and `dir:`.
    pub out_of_band: Arc<dyn OutOfBandStore>,
}

impl Stores {
    /// In-process stores over `notes` (the replay store joins claim and delete through it).
    pub(crate) fn from_memory(notes: Arc<MemoryNoteStore>, replay: Arc<MemoryReplayStore>) -> Stores {
        let admin = Arc::new(MemoryAdmin { notes: notes.clone(), replay: replay.clone() });
        Stores { notes, replay, admin, out_of_band: Arc::new(MemoryOutOfBandStore::default()) }
    }

    /// These stores with this process's own out-of-band flows bounded by `flows` (for `memory` and `dir:`,
    /// whose flows live in the process).
    pub(crate) fn with_out_of_band_limits(self, flows: OutOfBandLimits) -> Stores {
        Stores { out_of_band: Arc::new(MemoryOutOfBandStore::with_limits(flows)), ..self }
    }

    /// Fresh in-process stores holding `notes`.
    pub(crate) fn in_memory(notes: Vec<Note>, clock: Arc<dyn Clock>, limits: ReplayLimits) -> Stores {
        let notes = Arc::new(MemoryNoteStore::new(notes));
        let replay = Arc::new(MemoryReplayStore::new(notes.clone(), clock, limits));
        Stores::from_memory(notes, replay)
    }
}

/// Opens (creating and migrating as needed) the store named by `spec`. A memory store starts empty: seed it
/// through `admin`.
pub async fn open(spec: &StoreSpec, clock: Arc<dyn Clock>, limits: ReplayLimits) -> Result<Stores, StoreError> {
    open_with_durability(spec, clock, limits, Durability::Durable).await
}

/// [`open`], choosing when a database store acknowledges commits (see [`Durability`]; a memory store has
/// nothing to flush and ignores it).
pub async fn open_with_durability(
    spec: &StoreSpec,
    clock: Arc<dyn Clock>,
    limits: ReplayLimits,
    durability: Durability,
) -> Result<Stores, StoreError> {
    open_with_limits(spec, clock, limits, OutOfBandLimits::default(), durability).await
}

/// [`open_with_durability`], bounding the out-of-band flows by `flows` (in all and per principal) in every
/// kind of store: the database's table for `sqlite:` and `postgres:`, this process's memory otherwise.
pub async fn open_with_limits(
    spec: &StoreSpec,
    clock: Arc<dyn Clock>,
    limits: ReplayLimits,
    flows: OutOfBandLimits,
    durability: Durability,
) -> Result<Stores, StoreError> {
    // Only the database stores have commits to acknowledge.
    #[cfg(not(any(feature = "sqlite", feature = "postgres")))]
    let _ = durability;
    match spec {
        StoreSpec::Memory => Ok(Stores::in_memory(Vec::new(), clock, limits).with_out_of_band_limits(flows)),
        #[cfg(feature = "sqlite")]
        StoreSpec::Sqlite(path) => {
            let store = Arc::new(SqliteStore::open_with_durability(path, clock, limits, durability).await?.with_out_of_band_limits(flows));
            Ok(Stores { notes: store.clone(), replay: store.clone(), out_of_band: store.clone(), admin: store })
        }
        #[cfg(feature = "postgres")]
        StoreSpec::Postgres(target) => {
            let store = Arc::new(
                PostgresStore::open_with_durability((*target.config).clone(), clock, limits, durability)
                    .await?
                    .with_out_of_band_limits(flows),
            );
            Ok(Stores { notes: store.clone(), replay: store.clone(), out_of_band: store.clone(), admin: store })
        }
        #[cfg(unix)]
        StoreSpec::Dir { path, uri } => {
            let store = Arc::new(DirStore::open(path, uri.clone(), clock, limits)?);
            let recovered = store.recovered();
            // Swept temporary claim files are logged by the sweep itself: no delete was half done for them.
            let half_done = crate::stores::dir::RecoveryReport { swept: 0, ..recovered };
            if half_done != Default::default() {
                tracing::warn!("{}: finished deletes an earlier process left half done: {recovered:?}", store.describe());
            }
            // A folder of notes keeps no out-of-band flows: this process's own, in memory.
            Ok(Stores {
                notes: store.clone(),
                replay: store.clone(),
                admin: store,
                out_of_band: Arc::new(MemoryOutOfBandStore::with_limits(flows)),
            })
        }
    }
}

// `serve --gateway` and `mcpsim seed` alone (the `cli` feature).
/// Opens a shared store (`sqlite:` or `postgres:`) for a gateway: the handler ports and admin handle as
/// [`open_with_durability`] gives them, and the gateway's own shared state in the same database. `None` for
/// `memory`, which a gateway keeps in its process (see `assembly::gateway_world`).
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub async fn open_for_gateway(
    spec: &StoreSpec,
    clock: Arc<dyn Clock>,
    limits: ReplayLimits,
    durability: Durability,
) -> Result<Option<(Stores, GatewayStores)>, StoreError> {
    #[cfg(not(any(feature = "sqlite", feature = "postgres")))]
    let _ = (clock, limits, durability);
    match spec {
        StoreSpec::Memory => Ok(None),
        #[cfg(feature = "sqlite")]
        StoreSpec::Sqlite(path) => {
            let store = SqliteStore::open_with_durability(path, clock, limits, durability).await?;
            Ok(Some(shared_with_gateway(store, |store, id| Arc::new(store.export_ledger(id)))))
        }
        #[cfg(feature = "postgres")]
        StoreSpec::Postgres(target) => {
            let store = PostgresStore::open_with_durability((*target.config).clone(), clock, limits, durability).await?;
            Ok(Some(shared_with_gateway(store, |store, id| Arc::new(store.export_ledger(id)))))
        }
        // A folder holds notes; the gateway's rate counters and export ledgers need a database.
        #[cfg(unix)]
        StoreSpec::Dir { .. } => Err(StoreError::Unavailable(
            "a gateway keeps its confirmations, rate counters and export ledgers in sqlite: or postgres:, not in a dir: folder".into(),
        )),
    }
}

/// One database store as every port a gateway process uses: the notes server's ports and admin handle, and
/// the gateway's rate counters and per-backend export ledgers in the same database.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn shared_with_gateway<S>(
    store: S,
    export_ledger: fn(&S, &str) -> Arc<dyn crate::servers::gateway::backends::ExportLedger>,
) -> (Stores, GatewayStores)
where
    S: NoteStore + ReplayStore + OutOfBandStore + StoreAdmin + crate::servers::gateway::ports::RateLimiter + Clone + 'static,
{
    let ledgers = store.clone();
    let shared = Arc::new(store);
    let gateway = GatewayStores {
        notes: shared.clone(),
        replay: shared.clone(),
        rate_limiter: shared.clone(),
        ledger: Arc::new(move |id| export_ledger(&ledgers, id)),
    };
    (Stores { notes: shared.clone(), replay: shared.clone(), out_of_band: shared.clone(), admin: shared }, gateway)
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub enum SeedError {
    #[error(
        "a memory store lives inside one `mcpsim serve` process and is loaded from its --config at start; seed a sqlite: or postgres: store instead"
    )]
    MemoryIsPerProcess,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Loads `notes` (a deployment's notes) into a shared store, creating its schema if needed. Idempotent:
/// running it again restores the notes exactly (content and listing order), keeping any other notes after them.
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub async fn seed(spec: &StoreSpec, notes: &[Note]) -> Result<SeedReport, SeedError> {
    if matches!(spec, StoreSpec::Memory) {
        return Err(SeedError::MemoryIsPerProcess);
    }
    let stores = open(spec, Arc::new(SystemClock), ReplayLimits::default()).await?;
    let seeded = stores.admin.seed(notes).await;
    stores.admin.close().await?;
    Ok(seeded?)
}

#[cfg(all(test, feature = "sqlite", feature = "postgres"))]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<StoreSpec, String> {
        text.parse::<StoreSpec>().map_err(|e| e.to_string())
    }

    #[test]
    fn the_three_kinds_parse() {
        assert!(matches!(parse("memory"), Ok(StoreSpec::Memory)));
        assert!(matches!(parse("sqlite:./fleet.db"), Ok(StoreSpec::Sqlite(path)) if path.as_path() == std::path::Path::new("./fleet.db")));
        let spec = parse("postgres://mcpsim:hunter2@127.0.0.1:5433/fleet").unwrap();
        assert_eq!(spec.to_string(), "postgres:mcpsim@127.0.0.1:5433/fleet");
        assert!(!format!("{spec:?}").contains("hunter2"), "the password never reaches logs");
        let wrapped = parse("postgres:postgresql://mcpsim@db.internal/fleet").unwrap();
        assert_eq!(wrapped.to_string(), "postgres:mcpsim@db.internal:5432/fleet");
        let key_value = parse("postgres:host=127.0.0.1 port=5434 user=u dbname=d password=secret").unwrap();
        assert_eq!(key_value.to_string(), "postgres:u@127.0.0.1:5434/d");
    }

    #[test]
    fn mistakes_say_what_to_write() {
        let unknown = parse("mysql://x").unwrap_err();
        assert!(unknown.contains("sqlite:PATH") && unknown.contains("postgres:URL"), "{unknown}");
        assert!(parse("sqlite:").unwrap_err().contains("file path"));
        assert!(parse("sqlite::memory:").unwrap_err().contains("use `memory`"));
        assert!(parse("postgres:").unwrap_err().contains("connection URL"));
        assert!(parse("postgres://u@h/d?sslmode=require").unwrap_err().contains("TLS"));
        assert!(parse("postgres://u@h/d?bogus=1").unwrap_err().contains("not a PostgreSQL connection string"));
    }

    #[test]
    fn store_text_is_repeated_without_its_password() {
        let cases = [
            ("postgres://u:hunter2@h:5432/d?bogus=1", "postgres://u:***@h:5432/d?bogus=1"),
            ("postgresql://u:p@ss:w0rd@h/d", "postgresql://u:***@h/d"),
            ("postgres://u@h/d?password=hunter2&sslmode=require", "postgres://u@h/d?password=***&sslmode=require"),
            ("postgres:host=h user=u password=hunter2 dbname=d", "postgres:host=h user=u password=*** dbname=d"),
            ("postgres:host=h PASSWORD = 'hunter 2' dbname=d", "postgres:host=h password=*** dbname=d"),
            ("mysql://root:hunter2@db/x", "mysql://root:***@db/x"),
            ("sqlite:./fleet.db", "sqlite:./fleet.db"),
            ("postgres://u@h/d", "postgres://u@h/d"),
        ];
        for (written, shown) in cases {
            assert_eq!(redact_store_text(written), shown, "{written}");
        }
        let unknown = parse("mysql://root:hunter2@db/x").unwrap_err();
        assert!(!unknown.contains("hunter2") && unknown.contains("root:***@db"), "{unknown}");
    }

    #[tokio::test]
    async fn seeding_memory_is_refused_with_a_reason() {
        assert_eq!(seed(&StoreSpec::Memory, &[]).await, Err(SeedError::MemoryIsPerProcess));
    }
}
