//! Stores behind the gateway's ports: the audit sink (in memory, or append-only JSON Lines on disk), the
//! shared rate-limit counters, the notes backend's export ledger, and the current pins.
//!
//! Every one is bounded; a full store refuses (fails closed) rather than forgetting something that still matters.

use crate::framework::ports::{NoteStore, ReplayStore, StoreError};
use crate::policy::pinning::PinFile;
use crate::servers::gateway::audit::AuditRecord;
use crate::servers::gateway::backends::{ExportLedger, ExportOutcome, ExportRecord, ExportRequest};
use crate::servers::gateway::ports::{rate_window, AuditSink, PinSource, RateDecision, RateLimit, RateLimiter};
use async_trait::async_trait;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means another thread panicked while holding it; every update here is one insert.
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Audit records in memory, in append order (for tests and the simulator's transcript).
#[derive(Debug)]
pub struct MemoryAuditSink {
    records: Mutex<Vec<AuditRecord>>,
    capacity: usize,
}

pub(crate) const MEMORY_AUDIT_RECORDS_MAX: usize = 1_000_000;

impl Default for MemoryAuditSink {
    fn default() -> Self {
        MemoryAuditSink::with_capacity(MEMORY_AUDIT_RECORDS_MAX)
    }
}

impl MemoryAuditSink {
    pub fn with_capacity(capacity: usize) -> Self {
        MemoryAuditSink { records: Mutex::new(Vec::new()), capacity }
    }

    /// The records as JSON objects, in append order.
    pub fn records(&self) -> Vec<Value> {
        lock(&self.records).iter().map(AuditRecord::to_json).collect()
    }

    pub fn len(&self) -> usize {
        lock(&self.records).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[async_trait]
impl AuditSink for MemoryAuditSink {
    async fn append(&self, record: &AuditRecord) -> Result<(), StoreError> {
        let mut records = lock(&self.records);
        if records.len() >= self.capacity {
            return Err(StoreError::Unavailable(format!("the in-memory audit log holds its maximum of {} records", self.capacity)));
        }
        records.push(record.clone());
        Ok(())
    }
}

// The audit log of `serve --gateway` (the `cli` feature).
/// Longest audit line written; records are small, so a longer one means something is wrong.
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub const AUDIT_LINE_BYTES_MAX: usize = 64 * 1024;

/// Append-only JSON Lines: one record per line, sorted keys, flushed per record.
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub struct JsonLinesAuditSink {
    /// Where the lines go, for error messages (`<stderr>` for standard error).
    label: PathBuf,
    file: Mutex<Box<dyn Write + Send>>,
}

#[cfg_attr(not(feature = "cli"), allow(dead_code))]
impl JsonLinesAuditSink {
    /// Opens (creating if needed) `path` for appending; existing lines are never touched.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        Ok(JsonLinesAuditSink { label: path.to_path_buf(), file: Mutex::new(Box::new(file)) })
    }

    /// Writes the lines to standard error (never standard output, which belongs to JSON-RPC on stdio).
    pub fn stderr() -> Self {
        JsonLinesAuditSink { label: PathBuf::from("<stderr>"), file: Mutex::new(Box::new(std::io::stderr())) }
    }
}

#[async_trait]
impl AuditSink for JsonLinesAuditSink {
    async fn append(&self, record: &AuditRecord) -> Result<(), StoreError> {
        let mut line = record.to_line();
        if line.len() > AUDIT_LINE_BYTES_MAX {
            return Err(StoreError::Unavailable(format!("audit record of {} bytes exceeds {AUDIT_LINE_BYTES_MAX}", line.len())));
        }
        line.push(b'\n');
        let mut file = lock(&self.file);
        // One write of the whole line: with O_APPEND, concurrent appenders never interleave within a line.
        file.write_all(&line).and_then(|()| file.flush()).map_err(|e| StoreError::Unavailable(format!("{}: {e}", self.label.display())))
    }
}

/// Most (principal, tool, window) counters held at once.
pub(crate) const RATE_COUNTERS_MAX: usize = 100_000;

/// Fixed-window counters keyed on (principal, tool, window index), shared by every gateway instance that
/// holds this object. Windows that have ended are pruned when room is needed.
#[derive(Debug)]
pub struct MemoryRateLimiter {
    counters: Mutex<BTreeMap<(String, String, u64, u64), u32>>,
    capacity: usize,
}

impl Default for MemoryRateLimiter {
    fn default() -> Self {
        MemoryRateLimiter::with_capacity(RATE_COUNTERS_MAX)
    }
}

impl MemoryRateLimiter {
    pub fn with_capacity(capacity: usize) -> Self {
        MemoryRateLimiter { counters: Mutex::new(BTreeMap::new()), capacity }
    }

    /// Calls counted for (principal, tool) in the window containing `now_ms`.
    pub fn count(&self, principal: &str, tool: &str, limit: RateLimit, now_ms: u64) -> u32 {
        let (index, _) = rate_window(now_ms, limit.window_ms);
        lock(&self.counters).get(&(principal.to_string(), tool.to_string(), limit.window_ms, index)).copied().unwrap_or(0)
    }

    /// Calls counted in every live window, all keys together.
    pub fn total(&self) -> u64 {
        lock(&self.counters).values().map(|&n| u64::from(n)).sum()
    }
}

#[async_trait]
impl RateLimiter for MemoryRateLimiter {
    async fn acquire(&self, principal: &str, tool: &str, limit: RateLimit, now_ms: u64) -> Result<RateDecision, StoreError> {
        let (index, retry_after_ms) = rate_window(now_ms, limit.window_ms);
        let key = (principal.to_string(), tool.to_string(), limit.window_ms, index);
        let mut counters = lock(&self.counters);
        let used = counters.get(&key).copied().unwrap_or(0);
        if used >= limit.calls {
            return Ok(RateDecision::Limited { retry_after_ms });
        }
        if used == 0 && counters.len() >= self.capacity {
            counters.retain(|(_, _, window_ms, window_index), _| (window_index + 1).saturating_mul(*window_ms) > now_ms);
            if counters.len() >= self.capacity {
                return Err(StoreError::Unavailable("the rate limiter holds its maximum number of live counters".into()));
            }
        }
        counters.insert(key, used + 1);
        Ok(RateDecision::Allowed { remaining: limit.calls - used - 1 })
    }
}

/// Most idempotency keys the export ledger holds.
pub(crate) const EXPORT_KEYS_MAX: usize = 100_000;

/// The notes backend's exports: key → record, and the archive contents in export order.
#[derive(Debug)]
pub struct MemoryExportLedger {
    records: Mutex<BTreeMap<String, ExportRecord>>,
    exports: Mutex<Vec<ExportRecord>>,
    capacity: usize,
}

impl Default for MemoryExportLedger {
    fn default() -> Self {
        MemoryExportLedger::with_capacity(EXPORT_KEYS_MAX)
    }
}

impl MemoryExportLedger {
    pub fn with_capacity(capacity: usize) -> Self {
        MemoryExportLedger { records: Mutex::new(BTreeMap::new()), exports: Mutex::new(Vec::new()), capacity }
    }

    /// Every export actually performed, in order.
    pub fn exports(&self) -> Vec<ExportRecord> {
        lock(&self.exports).clone()
    }
}

#[async_trait]
impl ExportLedger for MemoryExportLedger {
    async fn export_once(&self, request: ExportRequest) -> Result<ExportOutcome, StoreError> {
        // One lock around check, export and record: the key is claimed and the export done in one step.
        let mut records = lock(&self.records);
        if let Some(existing) = records.get(&request.key) {
            return Ok(if existing.request_digest == request.request_digest {
                ExportOutcome::AlreadyExported(existing.clone())
            } else {
                ExportOutcome::KeyConflict
            });
        }
        if records.len() >= self.capacity {
            return Ok(ExportOutcome::Full);
        }
        let mut exports = lock(&self.exports);
        let record = ExportRecord {
            export_id: format!("export-{}", exports.len() + 1),
            key: request.key.clone(),
            request_digest: request.request_digest,
            principal: request.principal,
            destination: request.destination,
            note_ids: request.note_ids,
        };
        exports.push(record.clone());
        records.insert(request.key, record.clone());
        Ok(ExportOutcome::Exported(record))
    }
}

// The stores `serve --gateway` opens (the `cli` feature).
/// The export ledger of a notes backend, by its id.
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub type LedgerOf = Arc<dyn Fn(&str) -> Arc<dyn ExportLedger> + Send + Sync>;

/// The state a gateway deployment shares among its processes: the notes its notes backends read, the replay
/// ledger of confirmations, the rate counters and each notes backend's export ledger. In memory for one
/// process; in SQLite or PostgreSQL for any number of them.
#[derive(Clone)]
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub struct GatewayStores {
    pub notes: Arc<dyn NoteStore>,
    pub replay: Arc<dyn ReplayStore>,
    pub rate_limiter: Arc<dyn RateLimiter>,
    /// The export ledger of the notes backend with this id.
    pub ledger: LedgerOf,
}

/// The pins in force, replaced whole when an operator approves something.
#[derive(Debug, Default)]
pub struct SharedPins {
    current: Mutex<Arc<PinFile>>,
}

impl SharedPins {
    pub fn new(pins: PinFile) -> Self {
        SharedPins { current: Mutex::new(Arc::new(pins)) }
    }

    pub fn replace(&self, pins: PinFile) {
        *lock(&self.current) = Arc::new(pins);
    }
}

impl PinSource for SharedPins {
    fn pins(&self) -> Arc<PinFile> {
        lock(&self.current).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(key: &str, digest: &str) -> ExportRequest {
        ExportRequest {
            key: key.into(),
            request_digest: digest.into(),
            principal: "alice".into(),
            destination: "archive".into(),
            note_ids: vec!["note-3".into()],
        }
    }

    #[tokio::test]
    async fn an_export_key_exports_once_and_returns_the_first_outcome() {
        let ledger = MemoryExportLedger::default();
        let ExportOutcome::Exported(first) = ledger.export_once(request("k", "d")).await.unwrap() else { panic!("first export") };
        let mut again = request("k", "d");
        again.note_ids = vec!["note-7".into()];
        assert_eq!(ledger.export_once(again).await.unwrap(), ExportOutcome::AlreadyExported(first));
        assert_eq!(ledger.export_once(request("k", "other")).await.unwrap(), ExportOutcome::KeyConflict);
        assert_eq!(ledger.exports().len(), 1);
        let small = MemoryExportLedger::with_capacity(1);
        small.export_once(request("a", "d")).await.unwrap();
        assert_eq!(small.export_once(request("b", "d")).await.unwrap(), ExportOutcome::Full);
        assert_eq!(small.exports().len(), 1);
    }

    #[tokio::test]
    async fn rate_limits_count_per_principal_tool_and_window() {
        let limiter = MemoryRateLimiter::default();
        let limit = RateLimit { calls: 2, window_ms: 1000 };
        assert_eq!(limiter.acquire("alice", "t.x", limit, 10).await.unwrap(), RateDecision::Allowed { remaining: 1 });
        assert_eq!(limiter.acquire("alice", "t.x", limit, 20).await.unwrap(), RateDecision::Allowed { remaining: 0 });
        assert_eq!(limiter.acquire("alice", "t.x", limit, 30).await.unwrap(), RateDecision::Limited { retry_after_ms: 970 });
        assert_eq!(limiter.count("alice", "t.x", limit, 30), 2, "a refusal counts nothing");
        assert!(matches!(limiter.acquire("bob", "t.x", limit, 30).await.unwrap(), RateDecision::Allowed { .. }));
        assert!(matches!(limiter.acquire("alice", "t.y", limit, 30).await.unwrap(), RateDecision::Allowed { .. }));
        assert!(matches!(limiter.acquire("alice", "t.x", limit, 1000).await.unwrap(), RateDecision::Allowed { .. }));
    }

    #[tokio::test]
    async fn a_full_rate_limiter_prunes_ended_windows_then_fails_closed() {
        let limiter = MemoryRateLimiter::with_capacity(2);
        let limit = RateLimit { calls: 5, window_ms: 100 };
        limiter.acquire("a", "t.x", limit, 0).await.unwrap();
        limiter.acquire("b", "t.x", limit, 0).await.unwrap();
        assert!(limiter.acquire("c", "t.x", limit, 50).await.is_err());
        assert!(limiter.acquire("c", "t.x", limit, 100).await.is_ok(), "the ended window was pruned");
    }

    fn record(principal: &str) -> AuditRecord {
        use crate::servers::gateway::audit::{Decision, Stage};
        AuditRecord {
            approved_by: None,
            arguments: None,
            arguments_digest: None,
            at_ms: 5,
            backend: None,
            backend_tool: None,
            decision: Decision::Refused,
            descriptor_digest: None,
            execution_began: false,
            instance: "g".into(),
            latency_ms: 0,
            outcome: json!({}),
            policy_version: "v".into(),
            principal: principal.into(),
            reason: None,
            redriven: false,
            request_id: json!(1),
            stage: Stage::Route,
            target: None,
            tool: None,
        }
    }

    #[tokio::test]
    async fn json_lines_are_appended_never_rewritten() {
        let dir = std::env::temp_dir().join(format!("mcpsim-audit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.jsonl");
        let _ = std::fs::remove_file(&path);
        JsonLinesAuditSink::open(&path).unwrap().append(&record("alice")).await.unwrap();
        JsonLinesAuditSink::open(&path).unwrap().append(&record("bob")).await.unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
        assert_eq!(lines, [record("alice").to_json(), record("bob").to_json()]);
        assert!(text.ends_with("}\n") && text.matches('\n').count() == 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn the_memory_audit_sink_is_bounded() {
        let sink = MemoryAuditSink::with_capacity(1);
        sink.append(&record("a")).await.unwrap();
        assert!(sink.append(&record("b")).await.is_err());
        assert_eq!(sink.len(), 1);
    }
}
