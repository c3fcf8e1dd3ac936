//! What travels through the simulated network: client↔instance JSON-RPC bytes and store calls.
//!
//! Client↔instance payloads are the exact bytes a real transport would carry. Store calls are the store
//! ports (`NoteStore`, `ReplayStore`) and the admin's data changes, reified as messages so that each one is
//! a separate delivery the scheduler can interleave. Each message renders to a label and a JSON value (sorted
//! keys) for transcripts.

use crate::framework::out_of_band::{Completion, FlowRecord, FlowStatus, OutOfBandFlow};
use crate::framework::ports::{ClaimAndDelete, ClaimOutcome, GuardedDelete, NonceClaim, Note, StoreError};
use crate::policy::containment::FileUri;
use crate::servers::gateway::ports::{BackendError, ToolListing};
use crate::wire::headers::RoutingHeaders;
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// Index of an actor in the cluster (instances, stores, clients, admin).
pub(crate) type ActorId = usize;

/// A running piece of work inside an actor: one request being handled, or one store call being served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId(pub u64);

pub use crate::oracle::history::OperationId;

#[derive(Debug, Clone)]
pub(crate) enum Payload {
    /// Client → instance: the JSON-RPC request, and the principal the transport authenticated.
    /// `headers` are the HTTP routing headers the client sent (`None`: a transport without headers).
    /// `session` is the `Mcp-Session-Id` a legacy client sends (the one its last `initialize` got).
    Request { operation: OperationId, principal: String, body: RequestBody, headers: Option<RoutingHeaders>, session: Option<String> },
    /// Instance → client: the JSON-RPC response bytes, and the value they encode (the instance serialized
    /// exactly this value, so the client need not parse the bytes back).
    /// `session`: the `Mcp-Session-Id` a legacy `initialize` opened, returned beside the body as over HTTP.
    Response { operation: OperationId, value: Arc<Value>, session: Option<String> },
    /// A task (or the admin) → a store actor.
    Call(StoreCall),
    /// A store actor → the task (or admin) that called it; `call` is the call's label.
    Return { call: &'static str, value: StoreReturn },
}

/// A request's body as the simulated network carries it: its bytes, and what they encode when that is known.
///
/// The bytes of a message a client built are its value's compact serialization; they are made only where
/// something reads the text (a legacy adapter, the gateway, the out-of-band page), never for the notes
/// pipeline, which starts from the value. Their length is always known: the pipeline's size bound is on it.
#[derive(Debug, Clone)]
pub(crate) struct RequestBody {
    /// The exact bytes, when they are not `decoded`'s compact serialization (or nothing encodes them).
    exact: Option<Vec<u8>>,
    /// The JSON value the bytes encode, when the cluster knows it (a client built it, or the bytes were
    /// its compact serialization): an instance need not read the text again.
    pub decoded: Option<Arc<Value>>,
    /// How many bytes the body is, or, for a body far within the pipeline's size bound, a bound on that (all
    /// the pipeline reads of it is whether it exceeds its own bound).
    pub length: usize,
}

impl RequestBody {
    /// A body that is `value`'s compact serialization. Its length is counted only when the cheap bound on it
    /// does not already show it within [`MESSAGE_BYTES_MAX`](crate::wire::jsonrpc::MESSAGE_BYTES_MAX).
    pub fn compact(value: Arc<Value>) -> RequestBody {
        use crate::wire::canonical::{canonical_len, canonical_len_bound};
        let bound = canonical_len_bound(&value);
        let length = if bound <= crate::wire::jsonrpc::MESSAGE_BYTES_MAX { bound } else { canonical_len(&value) };
        RequestBody { exact: None, length, decoded: Some(value) }
    }

    /// Exactly `bytes`, which encode `decoded` if it is given.
    pub fn exact(bytes: Vec<u8>, decoded: Option<Arc<Value>>) -> RequestBody {
        RequestBody { length: bytes.len(), exact: Some(bytes), decoded }
    }

    /// The bytes themselves.
    pub fn bytes(&self) -> std::borrow::Cow<'_, [u8]> {
        crate::wire::canonical::exact_or_compact(self.exact.as_deref(), self.decoded.as_deref())
    }

    /// The JSON-RPC method, if the body names one.
    pub fn method(&self) -> Option<String> {
        let parsed;
        let value = match &self.decoded {
            Some(value) => &**value,
            None => {
                parsed = serde_json::from_slice::<Value>(&self.bytes()).ok()?;
                &parsed
            }
        };
        value.get("method").and_then(Value::as_str).map(str::to_string)
    }
}

/// A store port call, or an admin change to the notes.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreCall {
    ListNotes,
    DeleteIfInside {
        note_id: String,
        revision: String,
        workspace: FileUri,
    },
    Claim {
        claim: NonceClaim,
    },
    ClaimAndDelete {
        claim: NonceClaim,
        note_id: String,
        revision: String,
        workspace: FileUri,
    },
    /// Admin: delete a note behind everyone's back.
    AdminDelete {
        note_id: String,
    },
    /// Admin: move a note to another URI (for example out of its workspace).
    AdminMove {
        note_id: String,
        uri: String,
    },
    /// Admin: rename a note.
    AdminRename {
        note_id: String,
        title: String,
    },
    /// Admin: replace a note by another copy (a new revision).
    AdminSwap {
        note_id: String,
    },
    /// A gateway → a backend actor: the backend's current descriptors.
    ListTools,
    /// A gateway → a backend actor: one forwarded `tools/call`, in the backend's own names.
    CallTool {
        principal: String,
        tool: String,
        arguments: Map<String, Value>,
        idempotency_key: Option<String>,
    },
    /// Admin → a backend actor: change what the backend publishes (a rug pull, a shadowing or poisoned
    /// descriptor). `tool: Some` merges `fields` into that descriptor; `None` publishes `fields` as a new one.
    AdminDescriptor {
        tool: Option<String>,
        fields: Value,
    },
    /// An instance → the replay-store actor (which keeps the out-of-band flows too): start a flow.
    FlowStart {
        flow: OutOfBandFlow,
        now_ms: u64,
    },
    /// Read a flow.
    FlowRead {
        reference: String,
    },
    /// Complete a flow as `user` (the page's submit), atomically.
    FlowComplete {
        reference: String,
        user: String,
        now_ms: u64,
    },
    /// The legacy adapter on an instance → a legacy client: a server→client JSON-RPC request inside an open
    /// call (`elicitation/create`, `roots/list`); the client's JSON-RPC answer is the return.
    AskClient {
        request: Value,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub enum StoreReturn {
    /// Shared with the history (and the transcript) rather than copied for each.
    Notes(Arc<Vec<Note>>),
    Guarded(GuardedDelete),
    Claimed(ClaimOutcome),
    ClaimedAndDeleted(ClaimAndDelete),
    /// Whether the note (or descriptor) the admin named existed.
    AdminDone {
        existed: bool,
    },
    Listing(ToolListing),
    ToolResult(Result<Value, BackendError>),
    FlowStarted,
    /// The out-of-band store refused to start the flow: its principal's share, or the store, is full.
    FlowFull,
    Flow(Option<FlowRecord>),
    FlowCompletion(Completion),
    /// A legacy client's JSON-RPC answer to an [`StoreCall::AskClient`].
    ClientAnswer(Value),
    Failed(StoreError),
}

impl StoreCall {
    /// The operation's name, as transcripts print it and `crash … receives <label>` matches it.
    pub fn label(&self) -> &'static str {
        match self {
            StoreCall::ListNotes => "list_notes",
            StoreCall::DeleteIfInside { .. } => "delete_if_inside",
            StoreCall::Claim { .. } => "claim",
            StoreCall::ClaimAndDelete { .. } => "claim_and_delete",
            StoreCall::AdminDelete { .. } => "admin_delete",
            StoreCall::AdminMove { .. } => "admin_move",
            StoreCall::AdminRename { .. } => "admin_rename",
            StoreCall::AdminSwap { .. } => "admin_swap",
            StoreCall::ListTools => "list_tools",
            StoreCall::CallTool { .. } => "call_tool",
            StoreCall::AdminDescriptor { .. } => "admin_descriptor",
            StoreCall::FlowStart { .. } => "flow_start",
            StoreCall::FlowRead { .. } => "flow_read",
            StoreCall::FlowComplete { .. } => "flow_complete",
            StoreCall::AskClient { request } => match request.get("method").and_then(Value::as_str) {
                Some("elicitation/create") => "elicitation/create",
                Some("roots/list") => "roots/list",
                Some("sampling/createMessage") => "sampling/createMessage",
                _ => "client_request",
            },
        }
    }

    pub fn to_json(&self) -> Value {
        match self {
            StoreCall::ListNotes => json!({}),
            StoreCall::DeleteIfInside { note_id, revision, workspace } => {
                with_revision(json!({ "noteId": note_id, "workspace": workspace.to_string() }), revision)
            }
            StoreCall::Claim { claim } => json!({ "claim": claim_json(claim) }),
            StoreCall::ClaimAndDelete { claim, note_id, revision, workspace } => {
                with_revision(json!({ "claim": claim_json(claim), "noteId": note_id, "workspace": workspace.to_string() }), revision)
            }
            StoreCall::AdminDelete { note_id } => json!({ "noteId": note_id }),
            StoreCall::AdminMove { note_id, uri } => json!({ "noteId": note_id, "uri": uri }),
            StoreCall::AdminRename { note_id, title } => json!({ "noteId": note_id, "title": title }),
            StoreCall::AdminSwap { note_id } => json!({ "noteId": note_id }),
            StoreCall::ListTools => json!({}),
            StoreCall::CallTool { principal, tool, arguments, idempotency_key } => {
                json!({ "principal": principal, "tool": tool, "arguments": arguments, "idempotencyKey": idempotency_key })
            }
            StoreCall::AdminDescriptor { tool, fields } => json!({ "tool": tool, "fields": fields }),
            StoreCall::FlowStart { flow, .. } => json!({
                "reference": flow.reference, "principal": flow.principal, "tool": flow.tool, "subject": flow.subject, "expiresAtMs": flow.expires_at_ms,
            }),
            StoreCall::FlowRead { reference } => json!({ "reference": reference }),
            StoreCall::FlowComplete { reference, user, .. } => json!({ "reference": reference, "user": user }),
            StoreCall::AskClient { request } => request.clone(),
        }
    }

    /// The nonce this call consumes, if any.
    pub fn nonce(&self) -> Option<&str> {
        match self {
            StoreCall::Claim { claim } | StoreCall::ClaimAndDelete { claim, .. } => Some(&claim.nonce),
            _ => None,
        }
    }
}

impl StoreReturn {
    pub fn to_json(&self) -> Value {
        match self {
            StoreReturn::Notes(notes) => json!({ "notes": notes.iter().map(note_json).collect::<Vec<_>>() }),
            StoreReturn::Guarded(GuardedDelete::Deleted(note)) => json!({ "deleted": note_json(note) }),
            StoreReturn::Guarded(GuardedDelete::Gone) => json!({ "gone": true }),
            StoreReturn::Guarded(GuardedDelete::OutsideWorkspace) => json!({ "outsideWorkspace": true }),
            StoreReturn::Claimed(outcome) => match outcome {
                ClaimOutcome::Claimed => json!({ "claimed": true }),
                ClaimOutcome::AlreadyClaimed { record } => json!({ "alreadyClaimed": record }),
                ClaimOutcome::Full => json!({ "full": true }),
                ClaimOutcome::Expired => json!({ "expired": true }),
            },
            StoreReturn::ClaimedAndDeleted(outcome) => match outcome {
                ClaimAndDelete::Deleted(note) => json!({ "deleted": note_json(note) }),
                ClaimAndDelete::NoteGone => json!({ "noteGone": true }),
                ClaimAndDelete::NoteOutsideWorkspace => json!({ "noteOutsideWorkspace": true }),
                ClaimAndDelete::AlreadyClaimed { record } => json!({ "alreadyClaimed": record }),
                ClaimAndDelete::Full => json!({ "full": true }),
                ClaimAndDelete::Expired => json!({ "expired": true }),
            },
            StoreReturn::AdminDone { existed } => json!({ "existed": existed }),
            // Descriptors by name and digest: the full text is in the scenario; the digest shows any change.
            StoreReturn::Listing(listing) => json!({
                "serverName": listing.server_name,
                "tools": listing.tools.iter().map(|d| json!({
                    "name": d.get("name").cloned().unwrap_or(Value::Null),
                    "digest": crate::policy::pinning::descriptor_digest(d).chars().take(DIGEST_CHARS_SHOWN).collect::<String>(),
                })).collect::<Vec<_>>(),
            }),
            StoreReturn::ToolResult(Ok(result)) => json!({ "result": result.get("structuredContent").cloned().unwrap_or(Value::Null) }),
            StoreReturn::ToolResult(Err(error)) => json!({ "failed": error.to_string() }),
            StoreReturn::FlowStarted => json!({ "started": true }),
            StoreReturn::FlowFull => json!({ "started": false, "full": true }),
            StoreReturn::Flow(None) => json!({ "flow": null }),
            StoreReturn::Flow(Some(record)) => json!({ "flow": match &record.status {
                FlowStatus::Started => json!({ "principal": record.flow.principal, "status": "started" }),
                FlowStatus::Completed { by } => json!({ "principal": record.flow.principal, "status": "completed", "by": by }),
            } }),
            StoreReturn::FlowCompletion(completion) => json!({ "completion": format!("{completion:?}") }),
            StoreReturn::ClientAnswer(answer) => answer.clone(),
            StoreReturn::Failed(error) => json!({ "failed": error.to_string() }),
        }
    }
}

/// Leading hex digits of a descriptor digest shown in transcripts (enough to see that it changed).
pub(crate) const DIGEST_CHARS_SHOWN: usize = 12;

fn claim_json(claim: &NonceClaim) -> Value {
    json!({ "nonce": claim.nonce, "expiresAtMs": claim.expires_at_ms, "record": claim.record })
}

/// A note as store messages show it (the body included: stores return it).
pub(crate) fn note_json(note: &Note) -> Value {
    with_revision(json!({ "id": note.id, "title": note.title, "uri": note.uri, "body": note.body }), &note.revision)
}

/// Adds `revision` to a JSON object only when there is one, so transcripts of revision-less runs keep their bytes.
fn with_revision(mut value: Value, revision: &str) -> Value {
    if !revision.is_empty() {
        value["revision"] = json!(revision);
    }
    value
}
