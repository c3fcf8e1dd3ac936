//! What a handler needs from the world, as traits. Implementations live in `stores` (memory, databases) and in
//! the simulator (channel-backed clients of store actors, virtual clock, seeded nonces).
//!
//! Every store method is `async` so that, in the simulator, every store call is a message and an interleaving point.

use crate::policy::containment::FileUri;
use async_trait::async_trait;
use serde_json::Value;

/// One note: an id, a title, where it lives, and its (untrusted) body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub id: String,
    pub title: String,
    pub uri: String,
    pub body: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("the store is unavailable: {0}")]
    Unavailable(String),
}

/// Result of the note store's compare-and-delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GuardedDelete {
    Deleted(Note),
    /// No note with that id exists any more.
    Gone,
    /// The live note's URI is no longer inside the workspace (it was moved); nothing deleted.
    OutsideWorkspace,
}

#[async_trait]
pub trait NoteStore: Send + Sync {
    /// Every note, in the store's stable listing order.
    async fn list_notes(&self) -> Result<Vec<Note>, StoreError>;

    /// Re-reads the live note and deletes it only if it still exists and still lies inside `workspace`.
    async fn delete_if_inside(&self, id: &str, workspace: &FileUri) -> Result<GuardedDelete, StoreError>;
}

/// A one-time nonce to consume, with what the consumption meant (returned to later claimants).
#[derive(Debug, Clone, PartialEq)]
pub struct NonceClaim {
    pub nonce: String,
    /// When the state carrying this nonce expires; the entry is kept at least until then.
    pub expires_at_ms: u64,
    /// What consuming it did, e.g. `{"outcome":"deleted","noteId":"note-7"}`.
    pub record: Value,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ClaimOutcome {
    Claimed,
    /// Already consumed (or being consumed right now); `record` says by what.
    AlreadyClaimed {
        record: Value,
    },
    /// Full of unexpired nonces: refused, never evicting (fail closed).
    Full,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ClaimAndDelete {
    Deleted(Note),
    NoteGone,
    NoteOutsideWorkspace,
    AlreadyClaimed { record: Value },
    Full,
}

/// The replay store shared by every instance. Bounded, TTL-pruned, never evicts an unexpired nonce.
#[async_trait]
pub trait ReplayStore: Send + Sync {
    /// Consumes a nonce with no other effect (a terminal decline).
    async fn claim(&self, claim: NonceClaim) -> Result<ClaimOutcome, StoreError>;

    /// One atomic operation: claim the nonce, re-read the live note, re-check its containment, delete it.
    /// If the note is gone or outside the workspace, the nonce is released: nothing is consumed.
    async fn claim_and_delete(&self, claim: NonceClaim, note_id: &str, workspace: &FileUri) -> Result<ClaimAndDelete, StoreError>;
}

/// Milliseconds since the Unix epoch; virtual in the simulator.
pub trait Clock: Send + Sync {
    fn now_ms(&self) -> u64;
}

/// Unpredictable nonces; seeded in the simulator.
pub trait NonceSource: Send + Sync {
    fn nonce(&self) -> [u8; 16];
}

/// A list a server announces as changed to open `subscriptions/listen` streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ListChanged {
    Tools,
    Prompts,
    Resources,
}

impl ListChanged {
    pub const ALL: [ListChanged; 3] = [ListChanged::Tools, ListChanged::Prompts, ListChanged::Resources];
}

/// Fan-out of list changes to every open subscription: a broadcast channel in one process, a shared bus in
/// a fleet, a scheduled actor in the simulator.
pub trait ChangeFeed: Send + Sync {
    fn publish(&self, change: ListChanged);

    /// Starts receiving. Only changes published after this call are seen, so a subscriber registers
    /// before it acknowledges.
    fn subscribe(&self) -> Box<dyn ChangeSubscription>;
}

#[async_trait]
pub trait ChangeSubscription: Send {
    /// Waits for the next change. `None` when the feed has shut down.
    async fn next_change(&mut self) -> Option<ListChanged>;
}
