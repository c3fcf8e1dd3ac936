//! Refusals every confirming handler shares: a used-up confirmation, a full replay store, a failed store.
//!
//! One wording and one `data` shape for the notes server and the gateway, so clients (and the simulator's
//! checker) read them the same way whichever server answered.

use super::ports::StoreError;
use crate::wire::errors::{Reason, RpcError};
use serde_json::Value;

/// `state_consumed`, carrying what consuming the nonce did (the recovery rule: a retry learns the outcome).
pub fn consumed(tool: &str, record: Value) -> RpcError {
    RpcError::invalid_params(
        Reason::StateConsumed,
        format!("this confirmation was already used; call {tool} again without requestState to start over"),
    )
    .with_detail("previousOutcome", record)
}

/// The shared replay store refused a new nonce because it is full of unexpired ones (fail closed).
pub fn replay_full() -> RpcError {
    RpcError::internal(
        Reason::ReplayStoreFull,
        "the replay store is full of unexpired confirmations and refuses new ones; retry after some expire",
    )
}

/// A store failed; `consequence` says what that left undone (e.g. "nothing was changed").
pub fn store_failed(error: StoreError, consequence: &str) -> RpcError {
    RpcError::internal(Reason::StoreUnavailable, format!("{error}; {consequence}"))
}
