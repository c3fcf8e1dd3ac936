//! The actors of a simulated cluster and the glue that lets unchanged handler code run inside them.
//!
//! * [`instance`]: a server instance: the unchanged `NotesServer` behind `handle_message`, with its own
//!   key ring, clock offset and nonce stream. Stateless, so a crash loses nothing but work in progress.
//! * [`note_store`] and [`replay_store`]: the shared stores, each an actor serving one call per task.
//! * [`admin`]: changes data behind everyone's back.
//! * [`legacy`]: the 2025-11-25 adapter on an `eras both` instance, and how it asks a legacy client.
//! * [`gateway`] and [`backend`]: gateway instances (the unchanged security gateway) in front of backend
//!   actors (the unchanged notes and issues backends), sharing the replay store with the notes instances.
//!
//! Instances reach the stores only through [`StoreClient`], an implementation of the store ports that turns
//! every call into an envelope and waits for the reply envelope: every store call is an interleaving point.
//! The replay store's own note-store port is a `StoreClient` too, so the live re-check inside
//! claim-and-delete is a message as well.

pub mod admin;
pub mod backend;
pub mod gateway;
pub mod gateway_mutants;
pub mod instance;
pub mod legacy;
pub mod legacy_mutants;
pub mod note_store;
pub mod replay_store;

use crate::framework::out_of_band::{Completion, FlowRecord, FlowStart, OutOfBandFlow, OutOfBandStore};
use crate::framework::ports::{
    fold_title, is_candidate, ClaimAndDelete, ClaimOutcome, GuardedDelete, NonceClaim, Note, NoteStore, ReplayStore, StoreError,
};
use crate::framework::Reply;
use crate::policy::containment::FileUri;
use crate::sim::engine::message::{ActorId, StoreCall, StoreReturn, TaskId};
use crate::sim::engine::sorted::SortedMap;
use async_trait::async_trait;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

/// What a finished task hands back to the cluster.
#[derive(Debug)]
pub enum TaskOutput {
    /// An instance finished handling a request.
    Reply(Reply),
    /// A store actor finished serving a call.
    Return(StoreReturn),
    /// An instance's legacy adapter finished handling a 2025-11-25 request.
    Legacy(crate::eras::LegacyReply),
}

/// A task's work: polled only by the cluster, one poll per delivery, never by an async runtime.
pub(crate) type TaskFuture = Pin<Box<dyn Future<Output = TaskOutput> + Send>>;

/// A store call a task made while it was being polled; the cluster turns it into an envelope.
#[derive(Debug)]
pub struct Outgoing {
    pub from_task: TaskId,
    pub to: ActorId,
    pub call: StoreCall,
}

/// The meeting point of running tasks and the cluster. The cluster polls exactly one task at a time and
/// names it in `current`; a store call made during that poll is queued in `outbox` and its return is
/// placed in `returns` before the waiting task is polled again.
#[derive(Debug, Default)]
pub struct Exchange {
    current: Option<TaskId>,
    outbox: Vec<Outgoing>,
    returns: SortedMap<TaskId, StoreReturn>,
}

/// Shared handle on the [`Exchange`]. A simulation runs on one thread; the mutex only satisfies the
/// `Send + Sync` bounds of the store ports and is never contended.
#[derive(Debug, Clone, Default)]
pub struct ExchangeHandle(Arc<Mutex<Exchange>>);

impl ExchangeHandle {
    fn lock(&self) -> MutexGuard<'_, Exchange> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Marks `task` as the one being polled (or none).
    pub(crate) fn set_current(&self, task: Option<TaskId>) {
        self.lock().current = task;
    }

    pub(crate) fn take_outbox(&self) -> Vec<Outgoing> {
        std::mem::take(&mut self.lock().outbox)
    }

    /// Hands a store's return to the task waiting for it.
    pub(crate) fn put_return(&self, task: TaskId, value: StoreReturn) {
        self.lock().returns.insert(task, value);
    }

    /// Forgets anything addressed to tasks that no longer exist (after a crash).
    pub fn forget(&self, tasks: &[TaskId]) {
        let mut exchange = self.lock();
        for task in tasks {
            exchange.returns.remove(task);
        }
    }
}

/// A store call in progress: on first poll it queues the call for the current task; later polls look for
/// the return. It never registers a waker: the cluster knows exactly when to poll again.
struct CallFuture {
    exchange: ExchangeHandle,
    to: ActorId,
    call: Option<StoreCall>,
    waiting: Option<TaskId>,
}

impl Future for CallFuture {
    type Output = StoreReturn;

    fn poll(mut self: Pin<&mut Self>, _context: &mut Context<'_>) -> Poll<StoreReturn> {
        let this = &mut *self;
        let mut exchange = this.exchange.lock();
        if let Some(call) = this.call.take() {
            let Some(task) = exchange.current else {
                // Only the cluster polls tasks, and it always names the task first.
                return Poll::Ready(StoreReturn::Failed(StoreError::Unavailable("store call outside a simulated task".into())));
            };
            exchange.outbox.push(Outgoing { from_task: task, to: this.to, call });
            this.waiting = Some(task);
            return Poll::Pending;
        }
        match this.waiting.and_then(|task| exchange.returns.remove(&task)) {
            Some(value) => Poll::Ready(value),
            None => Poll::Pending,
        }
    }
}

/// The store ports as messages: what instances (and the replay store) hold instead of a store.
#[derive(Debug, Clone)]
pub struct StoreClient {
    exchange: ExchangeHandle,
    /// The store actor this client talks to.
    store: ActorId,
}

impl StoreClient {
    pub fn new(exchange: ExchangeHandle, store: ActorId) -> StoreClient {
        StoreClient { exchange, store }
    }

    pub(crate) async fn call(&self, call: StoreCall) -> StoreReturn {
        CallFuture { exchange: self.exchange.clone(), to: self.store, call: Some(call), waiting: None }.await
    }
}

fn unexpected(what: &str, value: StoreReturn) -> StoreError {
    match value {
        StoreReturn::Failed(error) => error,
        other => StoreError::Unavailable(format!("the store answered {what} with {other:?}")),
    }
}

impl StoreClient {
    /// The note store's listing, shared with the history (which keeps its own handle on it).
    async fn listing(&self) -> Result<Arc<Vec<Note>>, StoreError> {
        match self.call(StoreCall::ListNotes).await {
            StoreReturn::Notes(notes) => Ok(notes),
            other => Err(unexpected("list_notes", other)),
        }
    }
}

/// The simulated note store answers every read with its whole listing (one `list_notes` delivery, as the
/// transcripts show); the searches below copy only the notes they keep out of it, not the whole listing.
#[async_trait]
impl NoteStore for StoreClient {
    async fn list_notes(&self) -> Result<Vec<Note>, StoreError> {
        let notes = self.listing().await?;
        Ok(Arc::try_unwrap(notes).unwrap_or_else(|shared| (*shared).clone()))
    }

    async fn find_candidates(&self, workspace: &FileUri, query: &str) -> Result<Vec<Note>, StoreError> {
        let notes = self.listing().await?;
        let query = fold_title(query);
        Ok(notes.iter().filter(|note| is_candidate(note, workspace, &query)).cloned().collect())
    }

    async fn notes_by_ids(&self, ids: &[String]) -> Result<Vec<Note>, StoreError> {
        let notes = self.listing().await?;
        Ok(notes.iter().filter(|note| ids.contains(&note.id)).cloned().collect())
    }

    async fn delete_if_inside(&self, id: &str, revision: &str, workspace: &FileUri) -> Result<GuardedDelete, StoreError> {
        let call = StoreCall::DeleteIfInside { note_id: id.to_string(), revision: revision.to_string(), workspace: workspace.clone() };
        match self.call(call).await {
            StoreReturn::Guarded(outcome) => Ok(outcome),
            other => Err(unexpected("delete_if_inside", other)),
        }
    }
}

#[async_trait]
impl OutOfBandStore for StoreClient {
    async fn start(&self, flow: OutOfBandFlow, now_ms: u64) -> Result<FlowStart, StoreError> {
        match self.call(StoreCall::FlowStart { flow, now_ms }).await {
            StoreReturn::FlowStarted => Ok(FlowStart::Started),
            StoreReturn::FlowFull => Ok(FlowStart::Full),
            other => Err(unexpected("flow_start", other)),
        }
    }

    async fn flow(&self, reference: &str) -> Result<Option<FlowRecord>, StoreError> {
        match self.call(StoreCall::FlowRead { reference: reference.to_string() }).await {
            StoreReturn::Flow(record) => Ok(record),
            other => Err(unexpected("flow_read", other)),
        }
    }

    async fn complete(&self, reference: &str, user: &str, now_ms: u64) -> Result<Completion, StoreError> {
        match self.call(StoreCall::FlowComplete { reference: reference.to_string(), user: user.to_string(), now_ms }).await {
            StoreReturn::FlowCompletion(completion) => Ok(completion),
            other => Err(unexpected("flow_complete", other)),
        }
    }
}

#[async_trait]
impl ReplayStore for StoreClient {
    async fn claim(&self, claim: NonceClaim) -> Result<ClaimOutcome, StoreError> {
        match self.call(StoreCall::Claim { claim }).await {
            StoreReturn::Claimed(outcome) => Ok(outcome),
            other => Err(unexpected("claim", other)),
        }
    }

    async fn claim_and_delete(
        &self,
        claim: NonceClaim,
        note_id: &str,
        revision: &str,
        workspace: &FileUri,
    ) -> Result<ClaimAndDelete, StoreError> {
        let call =
            StoreCall::ClaimAndDelete { claim, note_id: note_id.to_string(), revision: revision.to_string(), workspace: workspace.clone() };
        match self.call(call).await {
            StoreReturn::ClaimedAndDeleted(outcome) => Ok(outcome),
            other => Err(unexpected("claim_and_delete", other)),
        }
    }
}
