//! The mutants' notes services: the real `NotesServer` with one mistake, made by a port wrapper (a replay
//! or out-of-band store that errs) or a service wrapper (one decision re-made the wrong way). The zoo that
//! names them, and the scenarios that catch them, are the parent module's.

use crate::framework::out_of_band::{Completion, FlowRecord, FlowStart, OutOfBandFlow, OutOfBandStore};
use crate::framework::ports::{ClaimAndDelete, ClaimOutcome, ClaimRecord, GuardedDelete, NonceClaim, NoteStore, ReplayStore, StoreError};
use crate::framework::{RequestContext, Service};
use crate::policy::containment::FileUri;
use crate::policy::state::read_unverified;
use crate::servers::notes::publish::read_publish_claims_unverified;
use crate::servers::notes::{NotesServer, TOOL_NOTES_DELETE, TOOL_NOTES_PUBLISH};
use crate::sim::actors::instance::InstanceParts;
use crate::stores::memory::{MemoryReplayStore, ReplayLimits};
use crate::wire::canonical::canonical_bytes;
use crate::wire::{Reason, RpcError};
use async_trait::async_trait;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

fn server(parts: InstanceParts) -> NotesServer {
    parts.notes_server()
}

/// The real server over `parts` with its replay port replaced by `replay`.
fn over_replay(mut parts: InstanceParts, replay: Arc<dyn ReplayStore>) -> NotesServer {
    parts.ports.replay = replay;
    server(parts)
}

/// Containment that needs nothing: the root of the file system contains every file URI.
fn everywhere() -> FileUri {
    FileUri::parse("file:///").expect("the root is a file URI")
}

// ---------------------------------------------------------------------------------------------------------
// Port wrappers: the real server over a replay store that makes one mistake.

pub(super) fn replay_per_instance(parts: InstanceParts) -> Arc<dyn Service> {
    // Built per incarnation: a restart forgets too (it is memory in the instance's own process).
    let own = Arc::new(MemoryReplayStore::new(parts.ports.notes.clone(), parts.ports.clock.clone(), ReplayLimits::default()));
    Arc::new(over_replay(parts, own))
}

#[derive(Clone, Copy)]
enum ReplayMistake {
    NoLiveRecheck,
    RecheckThenDelete,
    DeleteThenClaim,
    ClaimThenDelete,
    ClaimWithoutOutcome,
    Evicting,
    AdmitsPastRetention,
}

/// The shared replay store, reached through the real port, used the wrong way.
struct MistakenReplay {
    inner: Arc<dyn ReplayStore>,
    notes: Arc<dyn NoteStore>,
    mistake: ReplayMistake,
}

fn with_replay_mistake(parts: InstanceParts, mistake: ReplayMistake) -> Arc<dyn Service> {
    let replay = Arc::new(MistakenReplay { inner: parts.ports.replay.clone(), notes: parts.ports.notes.clone(), mistake });
    Arc::new(over_replay(parts, replay))
}

pub(super) fn no_live_recheck(parts: InstanceParts) -> Arc<dyn Service> {
    with_replay_mistake(parts, ReplayMistake::NoLiveRecheck)
}

pub(super) fn recheck_then_delete(parts: InstanceParts) -> Arc<dyn Service> {
    with_replay_mistake(parts, ReplayMistake::RecheckThenDelete)
}

pub(super) fn delete_then_claim(parts: InstanceParts) -> Arc<dyn Service> {
    with_replay_mistake(parts, ReplayMistake::DeleteThenClaim)
}

pub(super) fn claim_then_delete(parts: InstanceParts) -> Arc<dyn Service> {
    with_replay_mistake(parts, ReplayMistake::ClaimThenDelete)
}

pub(super) fn claim_without_outcome(parts: InstanceParts) -> Arc<dyn Service> {
    with_replay_mistake(parts, ReplayMistake::ClaimWithoutOutcome)
}

pub(super) fn evicting_replay_store(parts: InstanceParts) -> Arc<dyn Service> {
    with_replay_mistake(parts, ReplayMistake::Evicting)
}

pub(super) fn admits_past_retention(parts: InstanceParts) -> Arc<dyn Service> {
    with_replay_mistake(parts, ReplayMistake::AdmitsPastRetention)
}

fn guarded(outcome: GuardedDelete) -> ClaimAndDelete {
    match outcome {
        GuardedDelete::Deleted(note) => ClaimAndDelete::Deleted(note),
        GuardedDelete::Gone => ClaimAndDelete::NoteGone,
        GuardedDelete::OutsideWorkspace => ClaimAndDelete::NoteOutsideWorkspace,
    }
}

#[async_trait]
impl ReplayStore for MistakenReplay {
    async fn claim(&self, claim: NonceClaim) -> Result<ClaimOutcome, StoreError> {
        match (self.mistake, self.inner.claim(claim).await?) {
            // Making room: the claim is admitted, but nothing remembers it.
            (ReplayMistake::Evicting, ClaimOutcome::Full) => Ok(ClaimOutcome::Claimed),
            // The claimant's clock says the state is alive; the store takes its word.
            (ReplayMistake::AdmitsPastRetention, ClaimOutcome::Expired) => Ok(ClaimOutcome::Claimed),
            (_, outcome) => Ok(outcome),
        }
    }

    async fn claim_and_delete(
        &self,
        claim: NonceClaim,
        note_id: &str,
        revision: &str,
        workspace: &FileUri,
    ) -> Result<ClaimAndDelete, StoreError> {
        match self.mistake {
            ReplayMistake::NoLiveRecheck => self.inner.claim_and_delete(claim, note_id, revision, &everywhere()).await,
            ReplayMistake::RecheckThenDelete => {
                // Operation one: the re-check, on a listing.
                let notes = self.notes.list_notes().await?;
                let Some(note) = notes.iter().find(|note| note.id == note_id) else {
                    return Ok(ClaimAndDelete::NoteGone);
                };
                if !FileUri::parse(&note.uri).is_ok_and(|uri| workspace.contains(&uri)) {
                    return Ok(ClaimAndDelete::NoteOutsideWorkspace);
                }
                // Operation two: claim and delete, trusting the re-check above.
                self.inner.claim_and_delete(claim, note_id, revision, &everywhere()).await
            }
            ReplayMistake::DeleteThenClaim => {
                let deleted = guarded(self.notes.delete_if_inside(note_id, revision, workspace).await?);
                if matches!(deleted, ClaimAndDelete::Deleted(_)) {
                    // Too late to refuse: the note is gone whatever the claim says.
                    self.inner.claim(claim).await?;
                }
                Ok(deleted)
            }
            ReplayMistake::ClaimThenDelete | ReplayMistake::ClaimWithoutOutcome => {
                let claim = match self.mistake {
                    // The outcome it means to have, recorded before it has it.
                    ReplayMistake::ClaimThenDelete => claim,
                    // "Pending", to be settled by a second write that never comes.
                    _ => NonceClaim { record: ClaimRecord::InProgress, ..claim },
                };
                match self.inner.claim(claim).await? {
                    ClaimOutcome::Claimed => Ok(guarded(self.notes.delete_if_inside(note_id, revision, workspace).await?)),
                    ClaimOutcome::AlreadyClaimed { record } => Ok(ClaimAndDelete::AlreadyClaimed { record }),
                    ClaimOutcome::Full => Ok(ClaimAndDelete::Full),
                    ClaimOutcome::Expired => Ok(ClaimAndDelete::Expired),
                }
            }
            ReplayMistake::Evicting => match self.inner.claim_and_delete(claim, note_id, revision, workspace).await? {
                ClaimAndDelete::Full => Ok(guarded(self.notes.delete_if_inside(note_id, revision, workspace).await?)),
                outcome => Ok(outcome),
            },
            ReplayMistake::AdmitsPastRetention => match self.inner.claim_and_delete(claim, note_id, revision, workspace).await? {
                ClaimAndDelete::Expired => Ok(guarded(self.notes.delete_if_inside(note_id, revision, workspace).await?)),
                outcome => Ok(outcome),
            },
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Service wrappers: one decision re-made the wrong way, then the real server.

#[derive(Clone, Copy, PartialEq, Eq)]
enum Decision {
    PrefixContainment,
    UndecodedContainment,
    UnboundArguments,
    UnboundPrincipal,
    Unsigned,
    CancelConsumes,
    InvalidAnswerConsumes,
    DeclineNotConsuming,
    RememberedCapabilities,
    NoOutcomeOnReplay,
    HashOrdered,
}

struct MistakenService {
    inner: NotesServer,
    decision: Decision,
    /// Remembered form capabilities per principal (only `RememberedCapabilities` uses it).
    remembered: Mutex<BTreeMap<String, Value>>,
}

fn with_decision(parts: InstanceParts, decision: Decision) -> Arc<dyn Service> {
    Arc::new(MistakenService { inner: server(parts), decision, remembered: Mutex::new(BTreeMap::new()) })
}

pub(super) fn prefix_containment(parts: InstanceParts) -> Arc<dyn Service> {
    with_decision(parts, Decision::PrefixContainment)
}
pub(super) fn undecoded_containment(parts: InstanceParts) -> Arc<dyn Service> {
    with_decision(parts, Decision::UndecodedContainment)
}
pub(super) fn state_unbound_arguments(parts: InstanceParts) -> Arc<dyn Service> {
    with_decision(parts, Decision::UnboundArguments)
}
pub(super) fn state_unbound_principal(parts: InstanceParts) -> Arc<dyn Service> {
    with_decision(parts, Decision::UnboundPrincipal)
}
pub(super) fn unsigned_state(parts: InstanceParts) -> Arc<dyn Service> {
    with_decision(parts, Decision::Unsigned)
}
pub(super) fn cancel_consumes(parts: InstanceParts) -> Arc<dyn Service> {
    with_decision(parts, Decision::CancelConsumes)
}
pub(super) fn invalid_answer_consumes(parts: InstanceParts) -> Arc<dyn Service> {
    with_decision(parts, Decision::InvalidAnswerConsumes)
}
pub(super) fn decline_not_consuming(parts: InstanceParts) -> Arc<dyn Service> {
    with_decision(parts, Decision::DeclineNotConsuming)
}
pub(super) fn remembered_capabilities(parts: InstanceParts) -> Arc<dyn Service> {
    with_decision(parts, Decision::RememberedCapabilities)
}
pub(super) fn no_outcome_on_replay(parts: InstanceParts) -> Arc<dyn Service> {
    with_decision(parts, Decision::NoOutcomeOnReplay)
}
pub(super) fn hash_ordered(parts: InstanceParts) -> Arc<dyn Service> {
    with_decision(parts, Decision::HashOrdered)
}

/// The form's candidates in the order a `HashMap` (randomly seeded per map) iterates them: what a server gets
/// when it collects candidates into a hash map and serializes that.
fn hash_ordered_candidates(mut result: Value) -> Value {
    let reorder = |ids: &mut Vec<Value>| {
        let set: std::collections::HashMap<String, ()> = ids.iter().filter_map(|id| id.as_str().map(|s| (s.to_string(), ()))).collect();
        *ids = set.into_keys().map(Value::String).collect();
    };
    if let Some(requests) = result.get_mut("inputRequests").and_then(Value::as_object_mut) {
        for request in requests.values_mut() {
            if let Some(Value::Array(ids)) = request.pointer_mut("/params/requestedSchema/properties/note_id/enum") {
                reorder(ids);
            }
        }
    }
    result
}

fn is_notes_delete(method: &str, params: &Value) -> bool {
    method == "tools/call" && params.get("name").and_then(Value::as_str) == Some(TOOL_NOTES_DELETE)
}

fn answer_action(params: &Value) -> Option<&str> {
    params.pointer("/inputResponses/delete_choice/action").and_then(Value::as_str)
}

impl MistakenService {
    /// The wrong authorization: a textual comparison of the raw workspace URI with each root. Where it
    /// says yes and the real check says no, the request is served by a server that grants the workspace.
    fn textually_authorized(&self, principal: &str, params: &Value) -> Option<NotesServer> {
        let requested = params.pointer("/arguments/workspaceUri").and_then(Value::as_str)?;
        let authorizations = &self.inner.config.authorizations;
        if authorizations.authorize_workspace(principal, requested).is_ok() {
            return None;
        }
        let passes = authorizations.roots(principal).iter().any(|root| {
            let root = root.to_string();
            match self.decision {
                Decision::PrefixContainment => requested.starts_with(&root),
                // Segment-aware, but on the undecoded text.
                _ => requested == root || requested.starts_with(&format!("{}/", root.trim_end_matches('/'))),
            }
        });
        if !passes {
            return None;
        }
        let mut config = (*self.inner.config).clone();
        Arc::make_mut(&mut config.authorizations).grant(principal, requested).ok()?;
        Some(crate::assembly::notes_server(Arc::new(config), self.inner.ports.clone()))
    }

    /// The wrong state check: reads the claims (verified or not), drops one binding by rewriting it to
    /// match this request, and re-seals so the real server accepts it.
    fn resealed(&self, principal: &str, params: &Value) -> Option<Value> {
        let state = params.get("requestState").and_then(Value::as_str)?;
        let key_ring = &self.inner.config.key_ring;
        let mut claims = match self.decision {
            Decision::Unsigned => read_unverified(state)?,
            _ => key_ring.verify(state).ok()?,
        };
        match self.decision {
            Decision::UnboundArguments => {
                claims.arguments_digest = key_ring.signing_arguments_digest(&canonical_bytes(params.get("arguments")?))
            }
            Decision::UnboundPrincipal => claims.principal = principal.to_string(),
            _ => {}
        }
        let mut params = params.clone();
        params["requestState"] = json!(key_ring.seal(&claims));
        Some(params)
    }
}

#[async_trait]
impl Service for MistakenService {
    fn has_method(&self, method: &str) -> bool {
        self.inner.has_method(method)
    }

    async fn page(&self, user: &str, request: &crate::framework::out_of_band::PageRequest) -> crate::framework::out_of_band::PageAnswer {
        self.inner.page(user, request).await
    }

    async fn call(&self, context: RequestContext<'_>, method: &str, params: &Value) -> Result<Value, RpcError> {
        if !is_notes_delete(method, params) {
            return self.inner.call(context, method, params).await;
        }
        match self.decision {
            Decision::PrefixContainment | Decision::UndecodedContainment => match self.textually_authorized(context.principal, params) {
                Some(granting) => granting.call(context, method, params).await,
                None => self.inner.call(context, method, params).await,
            },
            Decision::UnboundArguments | Decision::UnboundPrincipal | Decision::Unsigned => {
                match self.resealed(context.principal, params) {
                    Some(resealed) => self.inner.call(context, method, &resealed).await,
                    None => self.inner.call(context, method, params).await,
                }
            }
            Decision::CancelConsumes => {
                let result = self.inner.call(context, method, params).await?;
                if answer_action(params) == Some("cancel") {
                    if let Some(claims) = params.get("requestState").and_then(Value::as_str).and_then(read_unverified) {
                        let claim = NonceClaim {
                            nonce: claims.nonce,
                            principal: claims.principal,
                            expires_at_ms: claims.expires_at_ms,
                            record: ClaimRecord::Cancelled,
                        };
                        let _ = self.inner.ports.replay.claim(claim).await;
                    }
                }
                Ok(result)
            }
            Decision::InvalidAnswerConsumes => {
                let answered = self.inner.call(context, method, params).await;
                let invalid = matches!(&answered, Err(error) if matches!(
                    error.reason(),
                    Some(Reason::ResponseInvalid | Reason::NotConfirmed | Reason::NotACandidate)
                ));
                // Claims the nonce for an answer it refused as invalid: the valid accept that follows is refused
                // as a replay.
                if invalid {
                    if let Some(claims) = params.get("requestState").and_then(Value::as_str).and_then(read_unverified) {
                        let claim = NonceClaim {
                            nonce: claims.nonce,
                            principal: claims.principal,
                            expires_at_ms: claims.expires_at_ms,
                            record: ClaimRecord::Declined { tool: None },
                        };
                        let _ = self.inner.ports.replay.claim(claim).await;
                    }
                }
                answered
            }
            Decision::DeclineNotConsuming => {
                if answer_action(params) != Some("decline") {
                    return self.inner.call(context, method, params).await;
                }
                // Served as a cancel (which consumes nothing), reported as a decline.
                let mut as_cancel = params.clone();
                as_cancel["inputResponses"]["delete_choice"] = json!({"action": "cancel"});
                let mut result = self.inner.call(context, method, &as_cancel).await?;
                if let Some(content) = result.get_mut("structuredContent") {
                    *content = json!({"deleted": false, "outcome": "declined"});
                }
                Ok(result)
            }
            Decision::HashOrdered => self.inner.call(context, method, params).await.map(hash_ordered_candidates),
            Decision::NoOutcomeOnReplay => self.inner.call(context, method, params).await.map_err(|mut error| {
                if let Some(Value::Object(data)) = &mut error.data {
                    data.remove("previousOutcome");
                }
                error
            }),
            Decision::RememberedCapabilities => {
                let mut meta = context.meta.clone();
                {
                    let mut remembered = self.remembered.lock().expect("a mutant's memory is never poisoned");
                    match context.meta.client_capabilities.get("elicitation") {
                        Some(elicitation) if elicitation.get("form").is_some() => {
                            remembered.insert(context.principal.to_string(), elicitation.clone());
                        }
                        _ => {
                            if let Some(elicitation) = remembered.get(context.principal) {
                                meta.client_capabilities.to_mut().insert("elicitation".into(), elicitation.clone());
                            }
                        }
                    }
                }
                let context = RequestContext { principal: context.principal, id: context.id, meta: &meta };
                self.inner.call(context, method, params).await
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Sticky sessions: the pending confirmation kept in one instance's memory.

/// The textbook unsafe design (course lesson 2): round 1 remembers the confirmation it opened in this
/// instance's memory (its nonce, as a session would), and round 2 is served only where that memory is. The
/// signed `requestState` already carries everything round 2 needs, but this server asks its memory first, so
/// a retry that a load balancer sends to another instance, or that follows a restart, is refused as if the
/// confirmation had expired. Built per incarnation: a crash forgets the sessions too.
struct StickySession {
    inner: NotesServer,
    /// The nonces of the confirmations this incarnation opened.
    pending: Mutex<BTreeSet<String>>,
}

pub(super) fn sticky_session(parts: InstanceParts) -> Arc<dyn Service> {
    Arc::new(StickySession { inner: server(parts), pending: Mutex::new(BTreeSet::new()) })
}

#[async_trait]
impl Service for StickySession {
    fn has_method(&self, method: &str) -> bool {
        self.inner.has_method(method)
    }

    async fn page(&self, user: &str, request: &crate::framework::out_of_band::PageRequest) -> crate::framework::out_of_band::PageAnswer {
        self.inner.page(user, request).await
    }

    async fn call(&self, context: RequestContext<'_>, method: &str, params: &Value) -> Result<Value, RpcError> {
        if !is_notes_delete(method, params) {
            return self.inner.call(context, method, params).await;
        }
        let nonce_of = |state: Option<&Value>| state.and_then(Value::as_str).and_then(read_unverified).map(|claims| claims.nonce);
        if let Some(nonce) = nonce_of(params.get("requestState")) {
            // Round 2: served only by the instance whose memory holds the session.
            let remembered = self.pending.lock().expect("a mutant's memory is never poisoned").contains(&nonce);
            if !remembered {
                return Err(RpcError::invalid_params(
                    Reason::StateExpired,
                    "no pending confirmation for this requestState on this instance (its session is kept where round 1 ran); start again",
                ));
            }
            return self.inner.call(context, method, params).await;
        }
        let result = self.inner.call(context, method, params).await?;
        if let Some(nonce) = nonce_of(result.get("requestState")) {
            self.pending.lock().expect("a mutant's memory is never poisoned").insert(nonce);
        }
        Ok(result)
    }
}

// ---------------------------------------------------------------------------------------------------------
// URL-mode elicitation (GUARANTEES.md §2.7): the real server with one out-of-band decision made wrongly.

/// An out-of-band store that completes a flow as its own principal, whoever is signed in on the page.
struct UnboundFlows {
    inner: Arc<dyn OutOfBandStore>,
}

#[async_trait]
impl OutOfBandStore for UnboundFlows {
    async fn start(&self, flow: OutOfBandFlow, now_ms: u64) -> Result<FlowStart, StoreError> {
        self.inner.start(flow, now_ms).await
    }

    async fn flow(&self, reference: &str) -> Result<Option<FlowRecord>, StoreError> {
        self.inner.flow(reference).await
    }

    async fn complete(&self, reference: &str, user: &str, now_ms: u64) -> Result<Completion, StoreError> {
        match self.inner.flow(reference).await? {
            Some(record) => self.inner.complete(reference, &record.flow.principal, now_ms).await,
            None => self.inner.complete(reference, user, now_ms).await,
        }
    }
}

pub(super) fn url_bound_to_nothing(mut parts: InstanceParts) -> Arc<dyn Service> {
    if let Some(out_of_band) = &mut parts.ports.out_of_band {
        out_of_band.store = Arc::new(UnboundFlows { inner: out_of_band.store.clone() });
    }
    Arc::new(server(parts))
}

/// The real server behind a wrapper that, on a `notes_publish` retry answered `accept`, marks the flow
/// completed for the principal before handing the request on.
struct AcceptTrusted {
    inner: NotesServer,
}

pub(super) fn accept_trusted_as_completion(parts: InstanceParts) -> Arc<dyn Service> {
    Arc::new(AcceptTrusted { inner: server(parts) })
}

#[async_trait]
impl Service for AcceptTrusted {
    fn has_method(&self, method: &str) -> bool {
        self.inner.has_method(method)
    }

    async fn page(&self, user: &str, request: &crate::framework::out_of_band::PageRequest) -> crate::framework::out_of_band::PageAnswer {
        self.inner.page(user, request).await
    }

    async fn call(&self, context: RequestContext<'_>, method: &str, params: &Value) -> Result<Value, RpcError> {
        let publishing = method == "tools/call" && params.get("name").and_then(Value::as_str) == Some(TOOL_NOTES_PUBLISH);
        let accepted = params.pointer("/inputResponses/publish_authorization/action").and_then(Value::as_str) == Some("accept");
        if let (true, true, Some(out_of_band)) = (publishing, accepted, &self.inner.ports.out_of_band) {
            if let Some(claims) = params.get("requestState").and_then(Value::as_str).and_then(read_publish_claims_unverified) {
                let now_ms = self.inner.ports.clock.now_ms();
                let _ = out_of_band.store.complete(&claims.reference, &claims.principal, now_ms).await;
            }
        }
        self.inner.call(context, method, params).await
    }
}
