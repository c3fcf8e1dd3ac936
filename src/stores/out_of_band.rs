//! The out-of-band store in memory: one process's flows (and, inside the simulator's replay-store actor, the
//! whole cluster's). Bounded; expired flows are pruned when a new one starts, never an unexpired one.

use crate::framework::out_of_band::{Completion, FlowRecord, FlowStatus, OutOfBandFlow, OutOfBandStore};
use crate::framework::ports::StoreError;
use async_trait::async_trait;
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

/// Most flows kept at once (unexpired ones are never evicted: a full store refuses to start another).
pub const OUT_OF_BAND_CAPACITY: usize = 100_000;
/// How long an expired flow is kept, so a late page or retry is told "expired" rather than "unknown".
pub const OUT_OF_BAND_GRACE_MS: u64 = 60_000;

/// Flows by reference.
#[derive(Debug)]
pub struct MemoryOutOfBandStore {
    flows: Mutex<BTreeMap<String, FlowRecord>>,
    capacity: usize,
}

impl Default for MemoryOutOfBandStore {
    fn default() -> Self {
        MemoryOutOfBandStore::with_capacity(OUT_OF_BAND_CAPACITY)
    }
}

impl MemoryOutOfBandStore {
    pub fn with_capacity(capacity: usize) -> Self {
        MemoryOutOfBandStore { flows: Mutex::new(BTreeMap::new()), capacity }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, FlowRecord>> {
        self.flows.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Every flow, in reference order (for tests and the simulator's observations).
    pub fn snapshot(&self) -> Vec<FlowRecord> {
        self.lock().values().cloned().collect()
    }
}

/// The decision every implementation makes, on the record as read (the databases make it inside one
/// transaction).
pub(crate) fn decide_completion(record: Option<&FlowRecord>, user: &str, now_ms: u64) -> Completion {
    match record {
        None => Completion::Unknown,
        Some(record) if record.flow.principal != user => Completion::NotYours,
        Some(FlowRecord { status: FlowStatus::Completed { .. }, .. }) => Completion::AlreadyCompleted,
        Some(record) if record.flow.expires_at_ms <= now_ms => Completion::Expired,
        Some(_) => Completion::Completed,
    }
}

#[async_trait]
impl OutOfBandStore for MemoryOutOfBandStore {
    async fn start(&self, flow: OutOfBandFlow, now_ms: u64) -> Result<(), StoreError> {
        let mut flows = self.lock();
        flows.retain(|_, record| record.flow.expires_at_ms.saturating_add(OUT_OF_BAND_GRACE_MS) > now_ms);
        if flows.len() >= self.capacity {
            return Err(StoreError::Unavailable("the out-of-band store is full of unexpired flows".into()));
        }
        flows.insert(flow.reference.clone(), FlowRecord { flow, status: FlowStatus::Started });
        Ok(())
    }

    async fn flow(&self, reference: &str) -> Result<Option<FlowRecord>, StoreError> {
        Ok(self.lock().get(reference).cloned())
    }

    async fn complete(&self, reference: &str, user: &str, now_ms: u64) -> Result<Completion, StoreError> {
        let mut flows = self.lock();
        let decision = decide_completion(flows.get(reference), user, now_ms);
        if decision == Completion::Completed {
            if let Some(record) = flows.get_mut(reference) {
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
        assert!(store.start(flow("r2", "alice", 1_000), 0).await.is_err(), "never evicts an unexpired flow");
        store.start(flow("r2", "alice", 100_000), 1_000 + OUT_OF_BAND_GRACE_MS).await.unwrap();
        assert!(store.flow("r1").await.unwrap().is_none());
    }
}
