//! Legacy (2025-11-25) sessions: what `initialize` negotiated, per instance, bounded in number, size and lifetime.
//!
//! A session is created only by a legacy `initialize` and is honoured only for legacy requests: a modern request
//! never reads one (the adapter is not on its path at all). Time comes from the [`Clock`] port, so the simulator
//! ages sessions in virtual time exactly as a real process does in wall time. Sessions live in the memory of
//! the instance that minted them: another instance does not know the id and answers it as unknown (HTTP 404),
//! which tells a legacy client to initialize again there.

use crate::framework::ports::{Clock, NonceSource};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Legacy sessions one instance holds at once; one more `initialize` (after pruning expired ones) is refused.
pub const LEGACY_SESSIONS_MAX: usize = 256;
/// Of those, the most one principal may hold.
pub const LEGACY_SESSIONS_PER_PRINCIPAL_MAX: usize = 32;
/// A session unused for this long is forgotten.
pub const LEGACY_SESSION_IDLE_MS: u64 = 30 * 60 * 1000;
/// A session older than this is forgotten however busy it is: its client initializes again.
pub const LEGACY_SESSION_LIFETIME_MS: u64 = 24 * 60 * 60 * 1000;
/// Server→client requests one session may have waiting for an answer at once.
pub const LEGACY_PENDING_PER_SESSION_MAX: usize = 16;
/// Bytes one session may keep of what its `initialize` declared (capabilities, clientInfo, version, as JSON).
pub const LEGACY_SESSION_BYTES_MAX: usize = 16 * 1024;
/// Bytes all of one principal's sessions may keep together.
pub const LEGACY_PRINCIPAL_SESSION_BYTES_MAX: usize = 128 * 1024;
/// Bytes all the sessions of one instance may keep together.
pub const LEGACY_SESSIONS_BYTES_MAX: usize = 1024 * 1024;

/// The bounds of one table; [`SessionLimits::default`] is the named constants above.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    pub sessions_max: usize,
    pub per_principal_max: usize,
    pub idle_ms: u64,
    pub lifetime_ms: u64,
    /// What one session keeps ([`Negotiated::bytes`]), one principal's together, and the table's together.
    pub session_bytes_max: usize,
    pub principal_bytes_max: usize,
    pub bytes_max: usize,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            sessions_max: LEGACY_SESSIONS_MAX,
            per_principal_max: LEGACY_SESSIONS_PER_PRINCIPAL_MAX,
            idle_ms: LEGACY_SESSION_IDLE_MS,
            lifetime_ms: LEGACY_SESSION_LIFETIME_MS,
            session_bytes_max: LEGACY_SESSION_BYTES_MAX,
            principal_bytes_max: LEGACY_PRINCIPAL_SESSION_BYTES_MAX,
            bytes_max: LEGACY_SESSIONS_BYTES_MAX,
        }
    }
}

/// What `initialize` negotiated for one session. Never shown to a modern request.
#[derive(Debug, Clone, PartialEq)]
pub struct Negotiated {
    pub principal: String,
    pub protocol_version: String,
    pub capabilities: Map<String, Value>,
    pub client_info: Option<Value>,
    /// Set by `logging/setLevel`; carried into the modern requests as `_meta` logLevel.
    pub log_level: Option<String>,
}

/// The log level a session keeps is one of the eight names (at most this long).
const LOG_LEVEL_BYTES_MAX: usize = 16;

impl Negotiated {
    /// What this session keeps, in bytes, as the table counts it: its capabilities, clientInfo, protocol
    /// version and principal as compact JSON, and room for a log level. The in-memory form is a small
    /// multiple of this, so bounding it bounds the memory.
    pub fn bytes(&self) -> usize {
        let json = |value: &Value| serde_json::to_vec(value).map_or(usize::MAX, |bytes| bytes.len());
        let capabilities = serde_json::to_vec(&self.capabilities).map_or(usize::MAX, |bytes| bytes.len());
        capabilities
            .saturating_add(self.client_info.as_ref().map_or(0, json))
            .saturating_add(self.protocol_version.len())
            .saturating_add(self.principal.len())
            .saturating_add(LOG_LEVEL_BYTES_MAX)
    }
}

struct Session {
    negotiated: Negotiated,
    /// [`Negotiated::bytes`] when it was opened.
    bytes: usize,
    created_ms: u64,
    last_used_ms: u64,
    /// Server→client requests waiting for the client's answer, by the id the server gave them.
    pending: BTreeMap<String, oneshot::Sender<Value>>,
    requests_sent: u64,
}

/// Why a session could not be found or made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionRefusal {
    /// Unknown here, expired, or another principal's: the client must initialize again (HTTP 404).
    Unknown,
    /// The table (or the principal's share of it) is full of live sessions, or of their bytes.
    Full,
    /// What this one session would keep is over [`SessionLimits::session_bytes_max`].
    TooLarge,
    /// Too many server→client requests are waiting already.
    TooManyPending,
}

/// The sessions of one instance.
pub struct SessionTable {
    limits: SessionLimits,
    clock: Arc<dyn Clock>,
    nonces: Arc<dyn NonceSource>,
    sessions: Mutex<BTreeMap<String, Session>>,
}

impl std::fmt::Debug for SessionTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionTable").field("limits", &self.limits).field("open", &self.lock().len()).finish()
    }
}

impl SessionTable {
    pub fn new(limits: SessionLimits, clock: Arc<dyn Clock>, nonces: Arc<dyn NonceSource>) -> SessionTable {
        SessionTable { limits, clock, nonces, sessions: Mutex::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Session>> {
        self.sessions.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn is_live(&self, session: &Session, now_ms: u64) -> bool {
        now_ms.saturating_sub(session.last_used_ms) < self.limits.idle_ms
            && now_ms.saturating_sub(session.created_ms) < self.limits.lifetime_ms
    }

    /// The bounds of this table.
    pub fn limits(&self) -> &SessionLimits {
        &self.limits
    }

    /// Opens a session for `negotiated` under `id`, or under a fresh unguessable id when `id` is `None`.
    pub fn open(&self, id: Option<&str>, negotiated: Negotiated) -> Result<String, SessionRefusal> {
        let bytes = negotiated.bytes();
        if bytes > self.limits.session_bytes_max {
            return Err(SessionRefusal::TooLarge);
        }
        let now_ms = self.clock.now_ms();
        let mut sessions = self.lock();
        sessions.retain(|_, session| self.is_live(session, now_ms));
        let id = match id {
            Some(id) => {
                sessions.remove(id);
                id.to_string()
            }
            None => self.nonces.nonce().iter().map(|byte| format!("{byte:02x}")).collect(),
        };
        let held = sessions.values().filter(|s| s.negotiated.principal == negotiated.principal).count();
        let held_bytes: usize = sessions.values().filter(|s| s.negotiated.principal == negotiated.principal).map(|s| s.bytes).sum();
        let total_bytes: usize = sessions.values().map(|s| s.bytes).sum();
        if sessions.len() >= self.limits.sessions_max
            || held >= self.limits.per_principal_max
            || held_bytes.saturating_add(bytes) > self.limits.principal_bytes_max
            || total_bytes.saturating_add(bytes) > self.limits.bytes_max
        {
            return Err(SessionRefusal::Full);
        }
        let session = Session { negotiated, bytes, created_ms: now_ms, last_used_ms: now_ms, pending: BTreeMap::new(), requests_sent: 0 };
        sessions.insert(id.clone(), session);
        Ok(id)
    }

    /// The session `id` of `principal`, touched; unknown, expired and other principals' sessions are alike.
    pub fn use_session(&self, id: &str, principal: &str) -> Result<Negotiated, SessionRefusal> {
        let now_ms = self.clock.now_ms();
        let mut sessions = self.lock();
        let live = sessions.get(id).is_some_and(|session| self.is_live(session, now_ms));
        if !live {
            sessions.remove(id);
            return Err(SessionRefusal::Unknown);
        }
        let session = sessions.get_mut(id).ok_or(SessionRefusal::Unknown)?;
        if session.negotiated.principal != principal {
            return Err(SessionRefusal::Unknown);
        }
        session.last_used_ms = now_ms;
        Ok(session.negotiated.clone())
    }

    /// Records the level `logging/setLevel` asked for.
    pub fn set_log_level(&self, id: &str, level: &str) {
        if let Some(session) = self.lock().get_mut(id).filter(|_| level.len() <= LOG_LEVEL_BYTES_MAX) {
            session.negotiated.log_level = Some(level.to_string());
        }
    }

    /// Ends session `id` of `principal` (HTTP DELETE); false when there was none.
    #[cfg_attr(not(feature = "cli"), allow(dead_code))]
    pub fn close(&self, id: &str, principal: &str) -> bool {
        let mut sessions = self.lock();
        if sessions.get(id).is_some_and(|s| s.negotiated.principal == principal) {
            sessions.remove(id);
            true
        } else {
            false
        }
    }

    /// Registers a server→client request of session `id`: its JSON-RPC id and where the answer will arrive.
    pub fn expect_answer(&self, id: &str) -> Result<(String, oneshot::Receiver<Value>), SessionRefusal> {
        let mut sessions = self.lock();
        let session = sessions.get_mut(id).ok_or(SessionRefusal::Unknown)?;
        session.pending.retain(|_, sender| !sender.is_closed());
        if session.pending.len() >= LEGACY_PENDING_PER_SESSION_MAX {
            return Err(SessionRefusal::TooManyPending);
        }
        session.requests_sent += 1;
        let request_id = format!("mcpsim-{}", session.requests_sent);
        let (sender, receiver) = oneshot::channel();
        session.pending.insert(request_id.clone(), sender);
        Ok((request_id, receiver))
    }

    /// Delivers the client's answer to server→client request `request_id` of session `id` (of `principal`).
    /// False when nothing of that session waits for it.
    pub fn deliver(&self, id: &str, principal: &str, request_id: &str, answer: Value) -> bool {
        let mut sessions = self.lock();
        let Some(session) = sessions.get_mut(id).filter(|s| s.negotiated.principal == principal) else { return false };
        match session.pending.remove(request_id) {
            Some(sender) => sender.send(answer).is_ok(),
            None => false,
        }
    }

    /// Sessions held now (expired ones included until the next `open` prunes them).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    struct HandClock(AtomicU64);
    impl Clock for HandClock {
        fn now_ms(&self) -> u64 {
            self.0.load(Ordering::SeqCst)
        }
    }
    struct Counter(AtomicU64);
    impl NonceSource for Counter {
        fn nonce(&self) -> [u8; 16] {
            let n = self.0.fetch_add(1, Ordering::SeqCst);
            let mut bytes = [0u8; 16];
            bytes[..8].copy_from_slice(&n.to_be_bytes());
            bytes
        }
    }

    fn negotiated(principal: &str) -> Negotiated {
        Negotiated {
            principal: principal.into(),
            protocol_version: "2025-11-25".into(),
            capabilities: Map::new(),
            client_info: None,
            log_level: None,
        }
    }

    fn table(limits: SessionLimits) -> (Arc<HandClock>, SessionTable) {
        let clock = Arc::new(HandClock(AtomicU64::new(1_000)));
        let table = SessionTable::new(limits, clock.clone(), Arc::new(Counter(AtomicU64::new(7))));
        (clock, table)
    }

    #[test]
    fn sessions_are_per_principal_and_expire_idle_and_old() {
        let (clock, table) = table(SessionLimits { idle_ms: 100, lifetime_ms: 250, ..SessionLimits::default() });
        let id = table.open(None, negotiated("alice")).unwrap();
        assert_eq!(id.len(), 32, "sixteen random bytes in hex");
        assert_eq!(table.use_session(&id, "bob"), Err(SessionRefusal::Unknown), "another principal's id is unknown to bob");
        for _ in 0..3 {
            clock.0.fetch_add(80, Ordering::SeqCst);
            assert!(table.use_session(&id, "alice").is_ok(), "used within the idle time");
        }
        clock.0.fetch_add(80, Ordering::SeqCst);
        assert_eq!(table.use_session(&id, "alice"), Err(SessionRefusal::Unknown), "past its lifetime however busy");
        let idle = table.open(None, negotiated("alice")).unwrap();
        clock.0.fetch_add(100, Ordering::SeqCst);
        assert_eq!(table.use_session(&idle, "alice"), Err(SessionRefusal::Unknown), "idle too long");
    }

    #[test]
    fn the_table_and_each_principal_share_are_bounded() {
        let (clock, table) =
            table(SessionLimits { sessions_max: 3, per_principal_max: 2, idle_ms: 100, lifetime_ms: 1_000, ..SessionLimits::default() });
        table.open(None, negotiated("alice")).unwrap();
        table.open(None, negotiated("alice")).unwrap();
        assert_eq!(table.open(None, negotiated("alice")), Err(SessionRefusal::Full), "alice's share");
        table.open(None, negotiated("bob")).unwrap();
        assert_eq!(table.open(None, negotiated("carol")), Err(SessionRefusal::Full), "the whole table");
        clock.0.fetch_add(100, Ordering::SeqCst);
        assert!(table.open(None, negotiated("carol")).is_ok(), "expired sessions make room");
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn sessions_are_bounded_by_size_each_per_principal_and_in_all() {
        let limits = SessionLimits { session_bytes_max: 200, principal_bytes_max: 500, bytes_max: 600, ..SessionLimits::default() };
        let (_, table) = table(limits);
        let sized = |principal: &str, filler: usize| {
            let mut negotiated = negotiated(principal);
            negotiated.capabilities.insert("x".into(), Value::String("y".repeat(filler)));
            negotiated
        };
        let each = sized("alice", 100).bytes();
        assert!((130..=150).contains(&each), "{each}");
        assert_eq!(table.open(None, sized("alice", 190)), Err(SessionRefusal::TooLarge), "one session's bound");
        for _ in 0..3 {
            table.open(None, sized("alice", 100)).unwrap();
        }
        assert_eq!(table.open(None, sized("alice", 100)), Err(SessionRefusal::Full), "alice's bytes are spent");
        table.open(None, sized("bob", 100)).unwrap();
        assert_eq!(table.open(None, sized("carol", 100)), Err(SessionRefusal::Full), "the table's bytes are spent");
        assert_eq!(table.len(), 4, "a refusal keeps nothing");
    }

    #[test]
    fn answers_reach_only_the_request_that_waits_for_them() {
        let (_, table) = table(SessionLimits::default());
        let id = table.open(None, negotiated("alice")).unwrap();
        let (request_id, mut receiver) = table.expect_answer(&id).unwrap();
        assert!(!table.deliver(&id, "bob", &request_id, Value::Null), "bob cannot answer alice's question");
        assert!(!table.deliver(&id, "alice", "mcpsim-99", Value::Null), "nothing waits for that id");
        assert!(table.deliver(&id, "alice", &request_id, Value::Bool(true)));
        assert_eq!(receiver.try_recv().unwrap(), Value::Bool(true));
        assert!(!table.deliver(&id, "alice", &request_id, Value::Bool(true)), "answered once");
    }
}
