//! The out-of-band store in memory: one process's flows (and, inside the simulator's replay-store actor, the
//! whole cluster's). Bounded in all and per principal; expired flows are pruned when a new one needs room,
//! never an unexpired one.

use crate::framework::out_of_band::{decide_completion, Completion, FlowRecord, FlowStart, FlowStatus, OutOfBandFlow, OutOfBandStore};
use crate::framework::ports::StoreError;
use async_trait::async_trait;
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

/// Most flows kept at once (unexpired ones are never evicted: a full store refuses to start another).
pub const OUT_OF_BAND_CAPACITY: usize = 100_000;
/// The share of an out-of-band store's capacity one principal may hold, in percent (`serve
/// --out-of-band-share`): the replay store's default share, so one principal starting flows as fast as it can
/// is refused while every other principal keeps starting theirs.
pub const OUT_OF_BAND_PRINCIPAL_SHARE_PERCENT: usize = 25;
/// How long an expired flow is kept, so a late page or retry is told "expired" rather than "unknown".
pub const OUT_OF_BAND_GRACE_MS: u64 = 60_000;

/// Bounds of an out-of-band store (every kind: memory, SQLite, PostgreSQL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfBandLimits {
    /// Most unexpired flows held at once, all principals together.
    pub capacity: usize,
    /// Most one principal's flows hold at once (at most `capacity`).
    pub principal_capacity: usize,
}

impl OutOfBandLimits {
    /// `capacity` flows, each principal allowed `share_percent` of them (at least one).
    pub fn with_share(capacity: usize, share_percent: usize) -> OutOfBandLimits {
        OutOfBandLimits { capacity, principal_capacity: crate::stores::memory::share_of(capacity, share_percent) }
    }

    /// Whether a store holding `held` flows in all, `mine` of them the starting principal's, is full for it.
    pub(crate) fn full(&self, held: usize, mine: usize) -> bool {
        held >= self.capacity || mine >= self.principal_capacity
    }
}

impl Default for OutOfBandLimits {
    fn default() -> Self {
        OutOfBandLimits::with_share(OUT_OF_BAND_CAPACITY, OUT_OF_BAND_PRINCIPAL_SHARE_PERCENT)
    }
}

/// Flows by reference.
#[derive(Debug)]
pub struct MemoryOutOfBandStore {
    flows: Mutex<Flows>,
    limits: OutOfBandLimits,
}

/// The flows, and how many each principal holds.
#[derive(Debug, Default)]
struct Flows {
    by_reference: BTreeMap<String, FlowRecord>,
    held: BTreeMap<String, usize>,
}

impl Flows {
    fn held_by(&self, principal: &str) -> usize {
        self.held.get(principal).copied().unwrap_or(0)
    }

    fn prune(&mut self, now_ms: u64) {
        let mut gone = Vec::new();
        self.by_reference.retain(|_, record| {
            let keep = record.flow.expires_at_ms.saturating_add(OUT_OF_BAND_GRACE_MS) > now_ms;
            if !keep {
                gone.push(record.flow.principal.clone());
            }
            keep
        });
        for principal in gone {
            self.release(&principal);
        }
    }

    /// One flow of `principal` is no longer held.
    fn release(&mut self, principal: &str) {
        if let Some(count) = self.held.get_mut(principal) {
            *count -= 1;
            if *count == 0 {
                self.held.remove(principal);
            }
        }
    }
}

impl Default for MemoryOutOfBandStore {
    fn default() -> Self {
        MemoryOutOfBandStore::with_limits(OutOfBandLimits::default())
    }
}

impl MemoryOutOfBandStore {
    /// `capacity` flows, any principal may hold all of them.
    #[cfg(test)]
    pub fn with_capacity(capacity: usize) -> Self {
        MemoryOutOfBandStore::with_limits(OutOfBandLimits::with_share(capacity, 100))
    }

    pub fn with_limits(limits: OutOfBandLimits) -> Self {
        MemoryOutOfBandStore { flows: Mutex::new(Flows::default()), limits }
    }

    #[cfg(test)]
    pub fn limits(&self) -> OutOfBandLimits {
        self.limits
    }

    fn lock(&self) -> MutexGuard<'_, Flows> {
        self.flows.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[async_trait]
impl OutOfBandStore for MemoryOutOfBandStore {
    async fn start(&self, flow: OutOfBandFlow, now_ms: u64) -> Result<FlowStart, StoreError> {
        let mut flows = self.lock();
        // The principal's share, then the whole: pruned only when needed, never evicting an unexpired flow.
        let full = |flows: &Flows| self.limits.full(flows.by_reference.len(), flows.held_by(&flow.principal));
        if full(&flows) {
            flows.prune(now_ms);
            if full(&flows) {
                return Ok(FlowStart::Full);
            }
        }
        let principal = flow.principal.clone();
        // A reference started again (never by a server: references are random) replaces the flow; its
        // count moves with it, so no principal keeps a place it no longer holds.
        if let Some(replaced) = flows.by_reference.insert(flow.reference.clone(), FlowRecord { flow, status: FlowStatus::Started }) {
            flows.release(&replaced.flow.principal);
        }
        *flows.held.entry(principal).or_insert(0) += 1;
        Ok(FlowStart::Started)
    }

    async fn flow(&self, reference: &str) -> Result<Option<FlowRecord>, StoreError> {
        Ok(self.lock().by_reference.get(reference).cloned())
    }

    async fn complete(&self, reference: &str, user: &str, now_ms: u64) -> Result<Completion, StoreError> {
        let mut flows = self.lock();
        let decision = decide_completion(flows.by_reference.get(reference), user, now_ms);
        if decision == Completion::Completed {
            if let Some(record) = flows.by_reference.get_mut(reference) {
                record.status = FlowStatus::Completed { by: user.to_string() };
            }
        }
        Ok(decision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(reference: &str, principal: &str, expires_at_ms: u64) -> OutOfBandFlow {
        OutOfBandFlow {
            reference: reference.into(),
            principal: principal.into(),
            tool: "notes_publish".into(),
            subject: "note-1".into(),
            expires_at_ms,
        }
    }

    #[tokio::test]
    async fn only_the_principal_completes_once_before_expiry() {
        let store = MemoryOutOfBandStore::default();
        store.start(flow("r1", "alice", 1_000), 0).await.unwrap();
        assert_eq!(store.complete("r1", "bob", 10).await.unwrap(), Completion::NotYours);
        assert_eq!(store.complete("r2", "alice", 10).await.unwrap(), Completion::Unknown);
        assert_eq!(store.flow("r1").await.unwrap().unwrap().status, FlowStatus::Started, "a refused attempt changes nothing");
        assert_eq!(store.complete("r1", "alice", 10).await.unwrap(), Completion::Completed);
        assert_eq!(store.complete("r1", "alice", 11).await.unwrap(), Completion::AlreadyCompleted);
        assert_eq!(store.flow("r1").await.unwrap().unwrap().status, FlowStatus::Completed { by: "alice".into() });
        store.start(flow("r3", "alice", 1_000), 0).await.unwrap();
        assert_eq!(store.complete("r3", "alice", 1_000).await.unwrap(), Completion::Expired);
    }

    #[tokio::test]
    async fn full_of_unexpired_flows_refuses_and_prunes_only_expired_ones() {
        let store = MemoryOutOfBandStore::with_capacity(1);
        store.start(flow("r1", "alice", 1_000), 0).await.unwrap();
        assert_eq!(store.start(flow("r2", "alice", 1_000), 0).await, Ok(FlowStart::Full), "never evicts an unexpired flow");
        assert_eq!(store.start(flow("r2", "alice", 100_000), 1_000 + OUT_OF_BAND_GRACE_MS).await, Ok(FlowStart::Started));
        assert!(store.flow("r1").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_reference_started_again_moves_its_place_to_the_new_principal() {
        let store = MemoryOutOfBandStore::with_limits(OutOfBandLimits::with_share(4, 25));
        assert_eq!(store.start(flow("r1", "bob", 1_000), 0).await, Ok(FlowStart::Started));
        assert_eq!(store.start(flow("r1", "alice", 1_000), 0).await, Ok(FlowStart::Started), "the same reference, another principal");
        // bob holds nothing now: his one place is free again; alice holds her one.
        assert_eq!(store.start(flow("b2", "bob", 1_000), 0).await, Ok(FlowStart::Started));
        assert_eq!(store.start(flow("a2", "alice", 1_000), 0).await, Ok(FlowStart::Full));
    }

    #[tokio::test]
    async fn a_principal_holding_its_share_leaves_the_others_starting() {
        let store = MemoryOutOfBandStore::with_limits(OutOfBandLimits::with_share(4, 50));
        assert_eq!(store.limits().principal_capacity, 2);
        assert_eq!(store.start(flow("b1", "bob", 1_000), 0).await, Ok(FlowStart::Started));
        assert_eq!(store.start(flow("b2", "bob", 1_000), 0).await, Ok(FlowStart::Started));
        assert_eq!(store.start(flow("b3", "bob", 9_000), 0).await, Ok(FlowStart::Full), "bob's share is full");
        assert_eq!(store.start(flow("a1", "alice", 9_000), 0).await, Ok(FlowStart::Started), "alice is not bob");
        assert_eq!(store.start(flow("c1", "carol", 9_000), 0).await, Ok(FlowStart::Started));
        assert_eq!(store.start(flow("a2", "alice", 9_000), 0).await, Ok(FlowStart::Full), "the whole bound is kept");
        // bob's expire (plus the grace): his places come back.
        assert_eq!(store.start(flow("b3", "bob", 90_000), 1_000 + OUT_OF_BAND_GRACE_MS).await, Ok(FlowStart::Started));
        assert_eq!(store.lock().held, BTreeMap::from([("alice".into(), 1), ("bob".into(), 1), ("carol".into(), 1)]));
    }
}
