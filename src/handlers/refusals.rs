//! Refusals every confirming handler shares: an unopenable or foreign state, a used-up confirmation, a full
//! replay store, a failed store.
//!
//! One wording and one `data` shape for the notes server and the gateway, so clients (and the simulator's
//! checker) read them the same way whichever server answered.

use super::ports::StoreError;
use crate::policy::state::{KeyRing, OpenError, StateClaims};
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

/// What a sealed state must continue: who asked, which tool, which question, which exact arguments.
pub struct Continuation<'a> {
    /// How refusals name this server ("server", "gateway").
    pub issuer: &'a str,
    pub principal: &'a str,
    pub tool: &'a str,
    pub phase: &'a str,
    pub arguments_digest: &'a str,
    /// What calling the tool again without the state does, e.g. "to get a new form".
    pub restart_hint: &'a str,
}

/// Opens `token` (tag, then expiry) and checks it continues exactly this `tools/call`. Every failure is a
/// `-32602` with its reason; nothing is consumed by any of them.
pub fn open_continuation(key_ring: &KeyRing, token: &str, now_ms: u64, expected: &Continuation<'_>) -> Result<StateClaims, RpcError> {
    let Continuation { issuer, tool, restart_hint, .. } = expected;
    let claims = key_ring.open(token, now_ms).map_err(|error| match error {
        OpenError::Malformed => {
            RpcError::invalid_params(Reason::StateMalformed, format!("requestState is not a state this {issuer} issued"))
        }
        OpenError::Signature => RpcError::invalid_params(
            Reason::StateSignature,
            format!("requestState failed verification (altered, or signed with a key this {issuer} does not hold)"),
        ),
        OpenError::Expired => {
            RpcError::invalid_params(Reason::StateExpired, format!("requestState has expired; call {tool} again without it {restart_hint}"))
        }
    })?;
    let bound = claims.principal == expected.principal
        && claims.method == "tools/call"
        && claims.tool == expected.tool
        && claims.phase == expected.phase
        && claims.arguments_digest == expected.arguments_digest;
    if !bound {
        return Err(RpcError::invalid_params(Reason::StateMismatch, "requestState belongs to another principal, tool or set of arguments"));
    }
    Ok(claims)
}
