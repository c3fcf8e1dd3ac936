//! Refusals every confirming handler shares: an unopenable or foreign state, a used-up confirmation, a full
//! replay store, a failed store.
//!
//! One wording and one `data` shape for the notes server and the gateway, so clients (and the simulator's
//! checker) read them the same way whichever server answered.

use crate::framework::ports::{ClaimRecord, StoreError};
use crate::policy::state::{key_id_of, KeyRing, OpenError, StateClaims};
use crate::wire::errors::{Reason, RpcError};
use serde_json::{Map, Value};

/// What the user did with an elicitation: MRTR's three answers, each a decision of its own (`GUARANTEES.md` §2.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Validate the content, then continue; absent content is never consent.
    Accept,
    /// An explicit refusal: terminal, so the confirmation is used up.
    Decline,
    /// Dismissed: nothing changes and nothing is used up.
    Cancel,
}

impl Action {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Action::Accept => "accept",
            Action::Decline => "decline",
            Action::Cancel => "cancel",
        }
    }
}

/// `inputResponses.KEY` read as an elicitation's result: an object whose `action` is `accept`, `decline` or
/// `cancel`, with the object itself (an accept's `content` is the server's to validate against what it asked).
/// Anything else is `response_invalid`, naming the key; nothing has been consumed when it is refused.
pub(crate) fn elicitation_answer<'a>(key: &str, answer: &'a Value) -> Result<(Action, &'a Map<String, Value>), RpcError> {
    let Value::Object(answer) = answer else {
        return Err(RpcError::invalid_params(Reason::ResponseInvalid, format!("inputResponses.{key} must be an object")));
    };
    let action = match answer.get("action").and_then(Value::as_str) {
        Some("accept") => Action::Accept,
        Some("decline") => Action::Decline,
        Some("cancel") => Action::Cancel,
        _ => {
            return Err(RpcError::invalid_params(
                Reason::ResponseInvalid,
                format!("inputResponses.{key}.action must be accept, decline or cancel"),
            ))
        }
    };
    Ok((action, answer))
}

/// The continuation fields of a `tools/call`, each optional.
pub(crate) struct RoundTwoFields<'p> {
    pub request_state: Option<&'p str>,
    pub input_responses: Option<&'p Map<String, Value>>,
}

/// Reads the continuation fields, typed when present: `requestState` a string, `inputResponses` an object.
/// Wrong types are refused with the reason clients read.
pub(crate) fn round_two_fields(params: &Value) -> Result<RoundTwoFields<'_>, RpcError> {
    let request_state = match params.get("requestState") {
        None => None,
        Some(Value::String(state)) => Some(state.as_str()),
        Some(_) => return Err(RpcError::invalid_params(Reason::StateMalformed, "requestState must be a string")),
    };
    let input_responses = match params.get("inputResponses") {
        None => None,
        Some(Value::Object(responses)) => Some(responses),
        Some(_) => return Err(RpcError::invalid_params(Reason::ResponseInvalid, "inputResponses must be an object")),
    };
    Ok(RoundTwoFields { request_state, input_responses })
}

/// `requestState` without `inputResponses`: the client echoed a state but answered nothing.
pub(crate) fn state_without_responses(what_to_answer: &str) -> RpcError {
    RpcError::invalid_params(
        Reason::ContinuationUnpaired,
        format!("requestState was sent without inputResponses; answer {what_to_answer}, or start over without requestState"),
    )
}

/// `inputResponses` without `requestState`: answers to a question nobody can show was asked.
pub(crate) fn responses_without_state() -> RpcError {
    RpcError::invalid_params(Reason::ContinuationUnpaired, "inputResponses were sent without the requestState they answer")
}

/// A state that does not open: malformed, failing its tag, or expired. `issuer` is how refusals name this
/// server ("server", "gateway"); `restart` says how to start over ("call notes_delete again without it to get
/// a new form").
pub(crate) fn unopenable(error: OpenError, issuer: &str, restart: &str) -> RpcError {
    match error {
        OpenError::Malformed => {
            RpcError::invalid_params(Reason::StateMalformed, format!("requestState is not a state this {issuer} issued"))
        }
        OpenError::Signature => RpcError::invalid_params(
            Reason::StateSignature,
            format!("requestState failed verification (altered, or signed with a key this {issuer} does not hold)"),
        ),
        OpenError::Expired => expired(restart),
    }
}

/// `state_expired`: the state's expiry has passed by this server's clock.
pub fn expired(restart: &str) -> RpcError {
    RpcError::invalid_params(Reason::StateExpired, format!("requestState has expired; {restart}"))
}

/// `state_mismatch`: the state continues another call (`whose` lists what it is bound to).
pub fn state_mismatch(whose: &str) -> RpcError {
    RpcError::invalid_params(Reason::StateMismatch, format!("requestState belongs to another {whose}"))
}

/// `state_consumed`, carrying what consuming the nonce did (the recovery rule: a retry learns the outcome) —
/// or, while another request's claim is still being carried out, `claim_in_progress`: "already used" would
/// tell the client to start over about a confirmation that may yet be released, or may yet delete.
pub fn consumed(tool: &str, record: ClaimRecord) -> RpcError {
    if record == ClaimRecord::InProgress {
        return RpcError::internal(
            Reason::ClaimInProgress,
            "this confirmation is being carried out by another request right now; retry the same request shortly to learn how it ended",
        );
    }
    RpcError::invalid_params(
        Reason::StateConsumed,
        format!("this confirmation was already used; call {tool} again without requestState to start over"),
    )
    .with_detail("previousOutcome", record.to_json())
}

/// `replay_window_closed`: the replay store refused a claim it can no longer judge (see
/// [`ClaimOutcome::Expired`](super::ports::ClaimOutcome::Expired)). Nothing was consumed or changed.
pub fn replay_window_closed(tool: &str) -> RpcError {
    RpcError::invalid_params(
        Reason::ReplayWindowClosed,
        format!(
            "this confirmation is older than the replay store keeps confirmations (its expiry plus the grace period has passed by the store's clock; \
             is this instance's clock behind?); nothing was done; call {tool} again without requestState to start over"
        ),
    )
}

/// The shared replay store refused a new nonce because it is full of unexpired ones (fail closed).
pub(crate) fn replay_full() -> RpcError {
    RpcError::internal(
        Reason::ReplayStoreFull,
        "the replay store is full of unexpired confirmations and refuses new ones; retry after some expire",
    )
}

/// The shared out-of-band store refused a new flow: its principal holds its share of unexpired flows, or the
/// store its capacity (fail closed, never evicting).
pub(crate) fn out_of_band_full() -> RpcError {
    RpcError::internal(
        Reason::OutOfBandStoreFull,
        "the out-of-band store holds as many unexpired flows as it allows (this principal's share of them, or all of them) and refuses new ones; nothing was started; retry after some expire",
    )
}

/// A store failed; `consequence` says what that left undone (e.g. "nothing was changed").
pub(crate) fn store_failed(error: StoreError, consequence: &str) -> RpcError {
    RpcError::internal(Reason::StoreUnavailable, format!("{error}; {consequence}"))
}

/// What a sealed state must continue: who asked, which tool, which question, which exact arguments.
pub(crate) struct Continuation<'a> {
    /// How refusals name this server ("server", "gateway").
    pub issuer: &'a str,
    pub principal: &'a str,
    pub tool: &'a str,
    pub phase: &'a str,
    /// The canonical arguments of this call; the state must carry their digest under its own key.
    pub arguments: &'a [u8],
    /// What calling the tool again without the state does, e.g. "to get a new form".
    pub restart_hint: &'a str,
}

/// Opens `token` (tag, then expiry) and checks it continues exactly this `tools/call`. Every failure is a
/// `-32602` with its reason; nothing is consumed by any of them.
pub(crate) fn open_continuation(
    key_ring: &KeyRing,
    token: &str,
    now_ms: u64,
    expected: &Continuation<'_>,
) -> Result<StateClaims, RpcError> {
    let Continuation { issuer, tool, restart_hint, .. } = expected;
    let restart = format!("call {tool} again without it {restart_hint}");
    let claims = key_ring.open(token, now_ms).map_err(|error| unopenable(error, issuer, &restart))?;
    let digest = key_id_of(token).and_then(|key_id| key_ring.arguments_digest(key_id, expected.arguments));
    let bound = claims.principal == expected.principal
        && claims.method == "tools/call"
        && claims.tool == expected.tool
        && claims.phase == expected.phase
        && digest.as_deref() == Some(claims.arguments_digest.as_str());
    if !bound {
        return Err(state_mismatch("principal, tool or set of arguments"));
    }
    Ok(claims)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reason(error: RpcError) -> Value {
        error.data.and_then(|d| d.get("reason").cloned()).unwrap_or(Value::Null)
    }

    #[test]
    fn round_two_fields_are_optional_but_typed() {
        let both = json!({"requestState": "s1.k", "inputResponses": {"q": {}}});
        let fields = round_two_fields(&both).unwrap();
        assert_eq!(fields.request_state, Some("s1.k"));
        assert!(fields.input_responses.is_some_and(|r| r.contains_key("q")));
        let neither = json!({"name": "x"});
        let none = round_two_fields(&neither).unwrap();
        assert!(none.request_state.is_none() && none.input_responses.is_none());
        let Err(error) = round_two_fields(&json!({"requestState": 42})) else { panic!("a number is not a state") };
        assert_eq!((error.code, reason(error)), (-32602, json!("state_malformed")));
        let Err(error) = round_two_fields(&json!({"inputResponses": ["accept"]})) else { panic!("an array is not responses") };
        assert_eq!((error.code, reason(error)), (-32602, json!("response_invalid")));
    }
}
