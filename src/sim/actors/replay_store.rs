//! The replay-store actor: the in-memory replay store shared by every instance, serving one call per task.
//!
//! It runs `stores::memory::MemoryReplayStore` unchanged. That store's note port is a `StoreClient` to the
//! note-store actor, so claim-and-delete is: claim (pending) here, `delete_if_inside` as a message to the
//! note store, then commit or release here. Other calls can be served while one waits, exactly the
//! concurrency the pending claim exists for. It also keeps the cluster's out-of-band flows (URL-mode
//! elicitation), so every instance sees a flow started or completed on any other.

use super::{TaskFuture, TaskOutput};
use crate::framework::out_of_band::{FlowStart, OutOfBandStore};
use crate::framework::ports::{ReplayStore, StoreError};
use crate::sim::engine::message::{StoreCall, StoreReturn};
use crate::stores::memory::MemoryReplayStore;
use crate::stores::out_of_band::MemoryOutOfBandStore;
use std::sync::Arc;

/// Serves one call: a replay-store call, or one on the out-of-band flows this actor also keeps
/// (`flows`: the cluster's `MemoryOutOfBandStore`, shared by every instance).
pub fn serve(replay: Arc<MemoryReplayStore>, flows: Arc<MemoryOutOfBandStore>, call: StoreCall) -> TaskFuture {
    Box::pin(async move {
        let value = match call {
            StoreCall::Claim { claim } => match replay.claim(claim).await {
                Ok(outcome) => StoreReturn::Claimed(outcome),
                Err(error) => StoreReturn::Failed(error),
            },
            StoreCall::ClaimAndDelete { claim, note_id, revision, workspace } => {
                match replay.claim_and_delete(claim, &note_id, &revision, &workspace).await {
                    Ok(outcome) => StoreReturn::ClaimedAndDeleted(outcome),
                    Err(error) => StoreReturn::Failed(error),
                }
            }
            StoreCall::FlowStart { flow, now_ms } => match flows.start(flow, now_ms).await {
                Ok(FlowStart::Started) => StoreReturn::FlowStarted,
                Ok(FlowStart::Full) => StoreReturn::FlowFull,
                Err(error) => StoreReturn::Failed(error),
            },
            StoreCall::FlowRead { reference } => match flows.flow(&reference).await {
                Ok(record) => StoreReturn::Flow(record),
                Err(error) => StoreReturn::Failed(error),
            },
            StoreCall::FlowComplete { reference, user, now_ms } => match flows.complete(&reference, &user, now_ms).await {
                Ok(completion) => StoreReturn::FlowCompletion(completion),
                Err(error) => StoreReturn::Failed(error),
            },
            other => StoreReturn::Failed(StoreError::Unavailable(format!("the replay store does not serve {}", other.label()))),
        };
        TaskOutput::Return(value)
    })
}
