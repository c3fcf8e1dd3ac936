//! What the SQLite and PostgreSQL stores share: the migration list shape, value conversions, and the
//! delete-time containment decision (the same one the memory store makes).

// The shared helpers serve the database stores; a build with neither has only the types below.
#![cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]

use crate::framework::ports::{ClaimRecord, StoreError};
use crate::policy::containment::FileUri;
use serde_json::Value;

/// One step of a store's schema. Versions start at 1 and increase by one; a step is applied at most once,
/// in the same transaction that records it in `schema_version`.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: i64,
    pub description: &'static str,
    pub sql: &'static str,
}

/// What opening a database did to its schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    pub version_before: i64,
    pub version_after: i64,
}

/// When a database store acknowledges a commit: after it reached stable storage, or as soon as it is
/// consistent. Either way a claim and its delete commit or vanish together, so a confirmation is used at most
/// once; what differs is whether an acknowledged deletion can be lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Every commit is on stable storage before the client is answered (SQLite `synchronous=FULL`,
    /// PostgreSQL `synchronous_commit=on`): an answered "deleted" survives power loss.
    #[default]
    Durable,
    /// Commits are answered before they are flushed (SQLite `synchronous=NORMAL` in WAL mode, PostgreSQL
    /// `synchronous_commit=off`). The database stays consistent after any crash, but the last commits
    /// before a power loss (SQLite) or a database server crash (PostgreSQL) may be lost: the note is back
    /// and its confirmation is unused again, as if that round 2 never ran. A crash of mcpsim itself loses
    /// nothing.
    Relaxed,
}

pub(crate) const DURABILITY_HELP: &str = "durable | relaxed";

/// A durability that is neither `durable` nor `relaxed` (as written, trimmed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown durability {0:?}: write {DURABILITY_HELP}")]
pub struct UnknownDurability(pub String);

impl std::str::FromStr for Durability {
    type Err = UnknownDurability;

    fn from_str(text: &str) -> Result<Durability, UnknownDurability> {
        match text.trim() {
            "durable" => Ok(Durability::Durable),
            "relaxed" => Ok(Durability::Relaxed),
            other => Err(UnknownDurability(other.to_string())),
        }
    }
}

impl std::fmt::Display for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Durability::Durable => "durable",
            Durability::Relaxed => "relaxed",
        })
    }
}

/// The refusal to touch a database written by a newer mcpsim.
pub(crate) fn newer_schema(found: i64, known: i64) -> StoreError {
    StoreError::Unavailable(format!(
        "the database schema is at version {found}, newer than the {known} this mcpsim knows; upgrade mcpsim rather than point an old one at it"
    ))
}

/// The latest version of a migration list (0 for none), checking that versions run 1, 2, 3…
pub(crate) fn latest_version(migrations: &[Migration]) -> i64 {
    for (index, migration) in migrations.iter().enumerate() {
        debug_assert_eq!(migration.version, index as i64 + 1, "migration versions must run 1, 2, 3…");
    }
    migrations.last().map_or(0, |migration| migration.version)
}

/// Milliseconds as a database integer. Values past `i64::MAX` (hundreds of millions of years) saturate.
pub(crate) fn sql_ms(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// The latest `expires_at_ms` that may be pruned at `now_ms`: entries are kept until expiry plus grace.
/// `None` while nothing can have outlived its grace yet.
pub(crate) fn prune_horizon_ms(now_ms: u64, grace_ms: u64) -> Option<i64> {
    now_ms.checked_sub(grace_ms).map(sql_ms)
}

/// A claim record as the databases keep it: its JSON, keys sorted (the text every version has written).
pub(crate) fn encode_record(record: &ClaimRecord) -> String {
    record.to_json().to_string()
}

pub(crate) fn decode_record(text: &str) -> Result<ClaimRecord, StoreError> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| StoreError::Unavailable(format!("a stored nonce record is not JSON ({e}): {text:?}")))?;
    ClaimRecord::from_json(&value)
        .ok_or_else(|| StoreError::Unavailable(format!("a stored nonce record is not one mcpsim writes: {text:?}")))
}

/// An export's note ids as the databases keep them: a JSON array of strings.
pub(crate) fn encode_note_ids(ids: &[String]) -> String {
    Value::from(ids.to_vec()).to_string()
}

pub(crate) fn decode_note_ids(text: &str) -> Result<Vec<String>, StoreError> {
    serde_json::from_str(text)
        .map_err(|e| StoreError::Unavailable(format!("a stored export's note ids are not a JSON list ({e}): {text:?}")))
}

/// Whether a delete expecting `revision` may take a note of a database store, which keeps no revisions (its
/// notes list with an empty one): only a form that showed no revision names such a note.
pub(crate) fn matches_revisionless(revision: &str) -> bool {
    revision.is_empty()
}

/// Whether the live note at `uri` may be deleted under `workspace`: an unparsable URI is outside.
pub(crate) fn still_inside(workspace: &FileUri, uri: &str) -> bool {
    FileUri::parse(uri).is_ok_and(|uri| workspace.contains(&uri))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durability_parses_and_defaults_to_durable() {
        assert_eq!(Durability::default(), Durability::Durable);
        for durability in [Durability::Durable, Durability::Relaxed] {
            assert_eq!(durability.to_string().parse::<Durability>(), Ok(durability));
        }
        let error = "fast".parse::<Durability>().unwrap_err();
        assert_eq!(error, UnknownDurability("fast".into()));
        assert!(error.to_string().contains("durable | relaxed"));
    }

    #[test]
    fn prune_horizon_keeps_the_grace() {
        assert_eq!(prune_horizon_ms(2_100, 100), Some(2_000));
        assert_eq!(prune_horizon_ms(99, 100), None);
        assert_eq!(sql_ms(u64::MAX), i64::MAX);
    }

    #[test]
    fn records_round_trip_and_corruption_is_reported() {
        let record = ClaimRecord::Deleted { note_id: "n1".into() };
        assert_eq!(encode_record(&record), r#"{"noteId":"n1","outcome":"deleted"}"#);
        assert_eq!(decode_record(&encode_record(&record)), Ok(record));
        assert!(decode_record("{not json").is_err());
        assert!(decode_record(r#"{"outcome":"vanished"}"#).is_err());
    }

    #[test]
    fn containment_at_delete_time_is_segment_based() {
        let workspace = FileUri::parse("file:///w").unwrap();
        assert!(still_inside(&workspace, "file:///w/a.md"));
        assert!(!still_inside(&workspace, "file:///w-evil/a.md"));
        assert!(!still_inside(&workspace, "not a uri"));
    }
}
