//! The stateless notes server: `server/discover`, `tools/list`, `tools/call notes_delete` (with MRTR
//! confirmation), `resources/list` and `resources/read`.
//!
//! Two questions are kept apart (GUARANTEES.md §1, §2): *which workspace may this touch* is answered by configuration
//! (authorization) and normalized path-segment containment; *which note did the user mean* is answered by the
//! user through a form. Everything round 2 needs travels in the sealed `requestState`; the only shared state is
//! the replay store and the notes themselves, so any instance can finish any retry.

use crate::framework::pipeline::{RequestContext, Service};
use crate::framework::ports::{
    fold_title, is_candidate, note_is_inside, ClaimAndDelete, ClaimOutcome, ClaimRecord, Clock, NonceClaim, NonceSource, Note, NoteStore,
    ReplayStore, StoreError,
};
use crate::framework::refusals::{self, Action};
use crate::policy::authorization::{AuthorizationError, Authorizations};
use crate::policy::containment::FileUri;
use crate::policy::state::{KeyRing, StateClaims, STATE_CHARS_MAX};
use crate::wire::canonical::canonical_object_bytes;
use crate::wire::errors::{echo, Reason, RpcError};
use crate::wire::meta::{require_form_elicitation, RequestMeta};
use crate::wire::result::{complete, complete_cacheable, input_required, CacheScope, ServerInfo};
use crate::wire::{object, PROTOCOL_VERSION};
use async_trait::async_trait;
use base64::Engine;
use serde_json::{json, Map, Value};
use std::sync::Arc;

pub mod publish;
pub use publish::{OutOfBand, TOOL_NOTES_PUBLISH};

pub(crate) const TOOL_NOTES_DELETE: &str = "notes_delete";
/// The `inputRequests` key of the delete confirmation form, and the phase sealed into its state.
pub(crate) const INPUT_DELETE_CHOICE: &str = "delete_choice";
pub(crate) const TITLE_CHARS_MAX: usize = 200;
/// Most notes one confirmation form offers. More matches get a request for a narrower title: a longer list is
/// no real choice for a user, and every candidate id travels in the sealed state, which is itself bounded.
pub const CANDIDATES_MAX: usize = 20;
pub(crate) const DISCOVER_TTL_MS: u64 = 3_600_000;
pub(crate) const TOOLS_TTL_MS: u64 = 300_000;
/// Notes change underneath clients (deletes, moves), so resource results are fresh for a short time only.
pub(crate) const RESOURCES_TTL_MS: u64 = 5_000;

const METHODS: [&str; 5] = ["server/discover", "tools/list", "tools/call", "resources/list", "resources/read"];

/// Per-instance configuration. Immutable while a request runs; the simulator swaps it between requests.
#[derive(Debug, Clone)]
pub struct NotesConfig {
    pub server_info: ServerInfo,
    /// Shared: every instance of a deployment (and every simulated incarnation) holds the same grants.
    pub authorizations: Arc<Authorizations>,
    pub key_ring: KeyRing,
    pub state_ttl_ms: u64,
}

/// What a notes server reaches the world through: real stores, the wall clock and OS nonces in a process;
/// message-passing store clients, a virtual clock and seeded nonces in the simulator.
#[derive(Clone)]
pub struct NotesPorts {
    pub notes: Arc<dyn NoteStore>,
    pub replay: Arc<dyn ReplayStore>,
    pub clock: Arc<dyn Clock>,
    pub nonces: Arc<dyn NonceSource>,
    /// The shared out-of-band flows and the page's base URL: with them the server offers `notes_publish`
    /// (URL-mode elicitation) and serves its page; without, neither exists.
    pub out_of_band: Option<OutOfBand>,
}

/// The notes server: configuration plus ports (put together by `assembly::notes_server`). Holds no
/// per-client state.
#[derive(Clone)]
pub struct NotesServer {
    pub config: Arc<NotesConfig>,
    pub ports: NotesPorts,
}

#[async_trait]
impl Service for NotesServer {
    fn has_method(&self, method: &str) -> bool {
        METHODS.contains(&method)
    }

    async fn call(&self, context: RequestContext<'_>, method: &str, params: &Value) -> Result<Value, RpcError> {
        match method {
            "server/discover" => Ok(self.discover()),
            "tools/list" => Ok(self.tools_list()),
            "tools/call" => self.tools_call(context, params).await,
            "resources/list" => self.resources_list(context.principal).await,
            "resources/read" => self.resources_read(context.principal, params).await,
            other => Err(RpcError::method_not_found(other)),
        }
    }

    async fn page(&self, user: &str, request: &crate::framework::out_of_band::PageRequest) -> crate::framework::out_of_band::PageAnswer {
        self.publish_page(user, request).await
    }
}

/// The validated arguments of `notes_delete`.
struct DeleteArguments {
    workspace_uri: String,
    title: String,
    /// The canonical arguments object: a state carries its keyed digest, which any changed or added
    /// argument changes.
    canonical: Vec<u8>,
}

impl NotesServer {
    fn info(&self) -> &ServerInfo {
        &self.config.server_info
    }

    fn discover(&self) -> Value {
        complete_cacheable(
            json!({
                "supportedVersions": [PROTOCOL_VERSION],
                "capabilities": { "tools": {}, "resources": {} },
                "instructions": "Notes live in workspaces your credentials authorize. notes_delete always asks the user to pick and confirm the note before anything is deleted.",
            }),
            DISCOVER_TTL_MS,
            CacheScope::Public,
            self.info(),
        )
    }

    /// The same bytes for every caller and every call: pins and public caches stay valid.
    fn tools_list(&self) -> Value {
        let mut tools = vec![notes_delete_descriptor()];
        if self.ports.out_of_band.is_some() {
            tools.push(publish::notes_publish_descriptor());
        }
        complete_cacheable(json!({ "tools": tools }), TOOLS_TTL_MS, CacheScope::Public, self.info())
    }

    async fn tools_call(&self, context: RequestContext<'_>, params: &Value) -> Result<Value, RpcError> {
        let name = match params.get("name") {
            Some(Value::String(name)) => name.as_str(),
            _ => return Err(RpcError::invalid_params(Reason::ArgumentsInvalid, "tools/call needs params.name, a string")),
        };
        if name == TOOL_NOTES_PUBLISH && self.ports.out_of_band.is_some() {
            return self.publish_call(context, params).await;
        }
        if name != TOOL_NOTES_DELETE {
            return Err(RpcError::invalid_params(Reason::UnknownTool, format!("Unknown tool: {}", echo(name))));
        }
        let arguments = parse_delete_arguments(params.get("arguments"))?;
        let refusals::RoundTwoFields { request_state, input_responses } = refusals::round_two_fields(params)?;
        match (request_state, input_responses) {
            (None, None) => self.delete_round_one(context, &arguments).await,
            (Some(state), Some(responses)) => self.delete_round_two(context, &arguments, state, responses).await,
            (Some(_), None) => Err(refusals::state_without_responses("the form")),
            (None, Some(_)) => Err(refusals::responses_without_state()),
        }
    }

    fn authorize(&self, principal: &str, workspace_uri: &str) -> Result<FileUri, RpcError> {
        self.config.authorizations.authorize_workspace(principal, workspace_uri).map_err(|error| match error {
            AuthorizationError::Uri(uri_error) => {
                RpcError::invalid_params(Reason::UriInvalid, format!("workspaceUri is not acceptable: {uri_error}"))
            }
            AuthorizationError::Unauthorized => {
                RpcError::invalid_params(Reason::WorkspaceUnauthorized, "workspaceUri is not a workspace you are authorized for")
            }
        })
    }

    /// Round 1: authorize, contain, find candidates, ask the user to pick and confirm.
    async fn delete_round_one(&self, context: RequestContext<'_>, arguments: &DeleteArguments) -> Result<Value, RpcError> {
        // Capability compatibility comes before authorization (GUARANTEES.md §3.5): every delete asks the user.
        require_form_elicitation(context.meta)?;
        let workspace = self.authorize(context.principal, &arguments.workspace_uri)?;
        let found = self.ports.notes.find_candidates(&workspace, &arguments.title).await.map_err(store_failed)?;
        // The store's index narrowed the search; it never authorizes: every candidate is checked here again.
        let query = fold_title(&arguments.title);
        let candidates: Vec<Note> = found.into_iter().filter(|note| is_candidate(note, &workspace, &query)).collect();
        if candidates.is_empty() {
            // Never says whether matching notes exist elsewhere.
            return Ok(complete(
                json!({
                    "content": [{ "type": "text", "text": format!("No note titled like {:?} in {workspace}. Nothing was deleted.", arguments.title) }],
                    "isError": true,
                }),
                self.info(),
            ));
        }
        if candidates.len() > CANDIDATES_MAX {
            return Ok(self.unconfirmable(format!(
                "{} notes in {workspace} match {:?}; one confirmation form offers at most {CANDIDATES_MAX}.",
                candidates.len(),
                arguments.title
            )));
        }
        let now_ms = self.ports.clock.now_ms();
        let claims = StateClaims {
            principal: context.principal.to_string(),
            method: "tools/call".into(),
            tool: TOOL_NOTES_DELETE.into(),
            arguments_digest: self.config.key_ring.signing_arguments_digest(&arguments.canonical),
            candidates: candidates.iter().map(|note| note.id.clone()).collect(),
            // The form binds the copy it showed: a note swapped for another file since is `note_gone`.
            revisions: if candidates.iter().all(|note| note.revision.is_empty()) {
                Vec::new()
            } else {
                candidates.iter().map(|note| note.revision.clone()).collect()
            },
            phase: INPUT_DELETE_CHOICE.into(),
            issued_at_ms: now_ms,
            expires_at_ms: now_ms.saturating_add(self.config.state_ttl_ms),
            nonce: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(self.ports.nonces.nonce()),
        };
        let state = self.config.key_ring.seal(&claims);
        if state.len() > STATE_CHARS_MAX {
            // Never hand out a state that `open` would refuse as malformed (e.g. very long note ids).
            return Ok(self.unconfirmable(format!(
                "The notes in {workspace} matching {:?} cannot be offered in one confirmation form: their ids are too long.",
                arguments.title
            )));
        }
        Ok(input_required(
            object([(INPUT_DELETE_CHOICE, delete_choice_form(&workspace, &arguments.title, &candidates))]),
            &state,
            self.info(),
        ))
    }

    /// A complete error result for matches that cannot be offered in one form. It speaks only of notes inside
    /// the authorized workspace, so it reveals nothing the caller could not list anyway.
    fn unconfirmable(&self, why: String) -> Value {
        let text = format!("{why} Use a more specific title. Nothing was deleted.");
        complete(json!({ "content": [{ "type": "text", "text": text }], "isError": true }), self.info())
    }

    /// Round 2: verify the state, validate the answer, re-authorize, then claim-and-delete atomically.
    async fn delete_round_two(
        &self,
        context: RequestContext<'_>,
        arguments: &DeleteArguments,
        state: &str,
        responses: &Map<String, Value>,
    ) -> Result<Value, RpcError> {
        let claims = self.open_state(context, arguments, state)?;
        let Some(answer) = responses.get(INPUT_DELETE_CHOICE) else {
            // The needed answer is missing: ask again with the same state (SPEC-MRTR-17); nothing consumed.
            return self.ask_again(context.principal, context.meta, arguments, &claims, state).await;
        };
        let (action, answer) = refusals::elicitation_answer(INPUT_DELETE_CHOICE, answer)?;
        match action {
            // A cancel reads no store, so it cannot know whether the confirmation was used meanwhile (a lost
            // answer); it says only what it knows, and how to find out the rest.
            Action::Cancel => Ok(self.outcome(
                json!({ "deleted": false, "outcome": "cancelled" }),
                "This answer deleted nothing: the form was dismissed, which uses nothing up. The confirmation can be answered \
                 until it expires; if it was already used, that answer reports what it did.",
            )),
            Action::Decline => self.decline(&claims).await,
            Action::Accept => {
                let note_id = validate_accept(answer.get("content"), &claims.candidates)?;
                // The grant may have been revoked since round 1.
                let workspace = self.authorize(context.principal, &arguments.workspace_uri)?;
                self.confirmed_delete(&claims, &note_id, &workspace).await
            }
        }
    }

    fn open_state(&self, context: RequestContext<'_>, arguments: &DeleteArguments, state: &str) -> Result<StateClaims, RpcError> {
        let expected = refusals::Continuation {
            issuer: "server",
            principal: context.principal,
            tool: TOOL_NOTES_DELETE,
            phase: INPUT_DELETE_CHOICE,
            arguments: &arguments.canonical,
            restart_hint: "to get a new form",
        };
        refusals::open_continuation(&self.config.key_ring, state, self.ports.clock.now_ms(), &expected)
    }

    async fn ask_again(
        &self,
        principal: &str,
        meta: &RequestMeta<'_>,
        arguments: &DeleteArguments,
        claims: &StateClaims,
        state: &str,
    ) -> Result<Value, RpcError> {
        require_form_elicitation(meta)?;
        let workspace = self.authorize(principal, &arguments.workspace_uri)?;
        let notes = self.ports.notes.notes_by_ids(&claims.candidates).await.map_err(store_failed)?;
        // Only candidates still inside the workspace are described: a note moved elsewhere since round 1 (say,
        // into another principal's workspace) must not have its new location or title shown to this caller.
        let shown: Vec<Note> =
            claims.candidates.iter().filter_map(|id| notes.iter().find(|n| &n.id == id && is_inside(&workspace, n)).cloned()).collect();
        Ok(input_required(
            object([(INPUT_DELETE_CHOICE, delete_choice_form_for_ids(&workspace, &arguments.title, &claims.candidates, &shown))]),
            state,
            self.info(),
        ))
    }

    async fn decline(&self, claims: &StateClaims) -> Result<Value, RpcError> {
        let claim = NonceClaim {
            nonce: claims.nonce.clone(),
            principal: claims.principal.clone(),
            expires_at_ms: claims.expires_at_ms,
            record: ClaimRecord::Declined { tool: None },
        };
        match self.ports.replay.claim(claim).await.map_err(store_failed)? {
            ClaimOutcome::Claimed => Ok(self.outcome(
                json!({ "deleted": false, "outcome": "declined" }),
                "Nothing was deleted: the user declined. This confirmation is now used up.",
            )),
            ClaimOutcome::AlreadyClaimed { record } => Err(refusals::consumed(TOOL_NOTES_DELETE, record)),
            ClaimOutcome::Full => Err(refusals::replay_full()),
            ClaimOutcome::Expired => Err(refusals::replay_window_closed(TOOL_NOTES_DELETE)),
        }
    }

    async fn confirmed_delete(&self, claims: &StateClaims, note_id: &str, workspace: &FileUri) -> Result<Value, RpcError> {
        let claim = NonceClaim {
            nonce: claims.nonce.clone(),
            principal: claims.principal.clone(),
            expires_at_ms: claims.expires_at_ms,
            record: ClaimRecord::Deleted { note_id: note_id.to_string() },
        };
        let revision = claims.candidates.iter().position(|id| id == note_id).and_then(|index| claims.revisions.get(index));
        let revision = revision.map_or("", String::as_str);
        match self.ports.replay.claim_and_delete(claim, note_id, revision, workspace).await.map_err(store_failed)? {
            ClaimAndDelete::Deleted(note) => Ok(self.outcome(
                json!({ "deleted": true, "noteId": note.id, "outcome": "deleted" }),
                &format!("Deleted {} {:?} ({}).", note.id, note.title, note.uri),
            )),
            ClaimAndDelete::NoteGone => Err(RpcError::invalid_params(
                Reason::NoteGone,
                format!("{note_id} no longer exists; nothing was deleted and the confirmation was not used"),
            )
            .with_detail("noteId", json!(note_id))),
            ClaimAndDelete::NoteOutsideWorkspace => Err(RpcError::invalid_params(
                Reason::NoteOutsideWorkspace,
                format!("{note_id} is no longer inside {workspace}; nothing was deleted and the confirmation was not used"),
            )
            .with_detail("noteId", json!(note_id))),
            ClaimAndDelete::AlreadyClaimed { record } => Err(refusals::consumed(TOOL_NOTES_DELETE, record)),
            ClaimAndDelete::Full => Err(refusals::replay_full()),
            ClaimAndDelete::Expired => Err(refusals::replay_window_closed(TOOL_NOTES_DELETE)),
        }
    }

    fn outcome(&self, structured: Value, text: &str) -> Value {
        complete(
            object([("content", json!([{ "type": "text", "text": text }])), ("structuredContent", structured), ("isError", false.into())]),
            self.info(),
        )
    }

    async fn resources_list(&self, principal: &str) -> Result<Value, RpcError> {
        let notes = self.ports.notes.list_notes().await.map_err(store_failed)?;
        let resources: Vec<Value> = notes
            .iter()
            .filter_map(|note| {
                let uri = FileUri::parse(&note.uri).ok()?;
                self.config
                    .authorizations
                    .may_access(principal, &uri)
                    .then(|| json!({ "uri": uri.to_string(), "name": note.id, "title": note.title, "mimeType": "text/markdown" }))
            })
            .collect();
        Ok(complete_cacheable(json!({ "resources": resources }), RESOURCES_TTL_MS, CacheScope::Private, self.info()))
    }

    async fn resources_read(&self, principal: &str, params: &Value) -> Result<Value, RpcError> {
        let Some(requested) = params.get("uri").and_then(Value::as_str) else {
            return Err(RpcError::invalid_params(Reason::ArgumentsInvalid, "resources/read needs params.uri, a string"));
        };
        let uri =
            FileUri::parse(requested).map_err(|e| RpcError::invalid_params(Reason::UriInvalid, format!("uri is not acceptable: {e}")))?;
        let not_found =
            || RpcError::invalid_params(Reason::ResourceNotFound, "Resource not found").with_detail("uri", json!(echo(requested)));
        if !self.config.authorizations.may_access(principal, &uri) {
            return Err(not_found());
        }
        let notes = self.ports.notes.list_notes().await.map_err(store_failed)?;
        let note = notes.iter().find(|note| FileUri::parse(&note.uri).is_ok_and(|u| u == uri)).ok_or_else(not_found)?;
        Ok(complete_cacheable(
            json!({ "contents": [{ "uri": uri.to_string(), "mimeType": "text/markdown", "text": note.body }] }),
            RESOURCES_TTL_MS,
            CacheScope::Private,
            self.info(),
        ))
    }
}

/// The descriptor of `notes_delete`: a closed input schema with explicit scope.
pub(crate) fn notes_delete_descriptor() -> Value {
    json!({
        "name": TOOL_NOTES_DELETE,
        "title": "Delete a note",
        "description": "Delete one note, found by title inside a workspace you are authorized for. The user always picks and confirms the note in a form before anything is deleted.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "workspaceUri": { "type": "string", "description": "file:// URI of the workspace folder to search in." },
                "title": { "type": "string", "minLength": 1, "maxLength": TITLE_CHARS_MAX, "description": "Part of the note's title; matching ignores case." },
            },
            "required": ["workspaceUri", "title"],
            "additionalProperties": false,
        },
        "outputSchema": {
            "type": "object",
            "properties": {
                "deleted": { "type": "boolean" },
                "noteId": { "type": "string" },
                "outcome": { "type": "string", "enum": ["deleted", "declined", "cancelled"] },
            },
            "required": ["deleted", "outcome"],
            "additionalProperties": false,
        },
        "annotations": { "title": "Delete a note", "readOnlyHint": false, "destructiveHint": true, "idempotentHint": false, "openWorldHint": false },
    })
}

/// The arguments of a tool taking exactly `workspaceUri` and `other`: the object and its workspace URI, or
/// the refusal naming what is wrong (not an object, an unknown key, a missing or non-string URI).
fn workspace_arguments<'a>(arguments: Option<&'a Value>, tool: &str, other: &str) -> Result<(&'a Map<String, Value>, String), RpcError> {
    let invalid = |message: String| RpcError::invalid_params(Reason::ArgumentsInvalid, message);
    let Some(Value::Object(map)) = arguments else {
        return Err(invalid(format!("{tool} needs arguments {{workspaceUri, {other}}}")));
    };
    if let Some(unknown) = map.keys().find(|key| *key != "workspaceUri" && *key != other) {
        return Err(invalid(format!("unknown argument {:?}: {tool} takes only workspaceUri and {other}", echo(unknown))));
    }
    match map.get("workspaceUri") {
        Some(Value::String(uri)) => Ok((map, uri.clone())),
        _ => Err(invalid("workspaceUri is required and must be a string".into())),
    }
}

fn parse_delete_arguments(arguments: Option<&Value>) -> Result<DeleteArguments, RpcError> {
    let invalid = |message: String| RpcError::invalid_params(Reason::ArgumentsInvalid, message);
    let (map, workspace_uri) = workspace_arguments(arguments, "notes_delete", "title")?;
    let title = match map.get("title") {
        Some(Value::String(title)) if !title.trim().is_empty() && title.chars().count() <= TITLE_CHARS_MAX => title.clone(),
        _ => return Err(invalid(format!("title is required: a non-blank string of at most {TITLE_CHARS_MAX} characters"))),
    };
    Ok(DeleteArguments { workspace_uri, title, canonical: canonical_object_bytes(map) })
}

fn is_inside(workspace: &FileUri, note: &Note) -> bool {
    note_is_inside(workspace, note)
}

fn delete_choice_form(workspace: &FileUri, title: &str, candidates: &[Note]) -> Value {
    let ids: Vec<String> = candidates.iter().map(|note| note.id.clone()).collect();
    delete_choice_form_for_ids(workspace, title, &ids, candidates)
}

/// The form: a flat object with `note_id` (enum of candidate ids) and `confirm`, both required.
fn delete_choice_form_for_ids(workspace: &FileUri, title: &str, ids: &[String], shown: &[Note]) -> Value {
    let listing: Vec<String> = ids
        .iter()
        .map(|id| match shown.iter().find(|note| &note.id == id) {
            Some(note) => format!("{id}: {} ({})", note.title, note.uri),
            // Gone or moved out: the same words, so the form says nothing about where a note went.
            None => format!("{id}: (no longer in this workspace)"),
        })
        .collect();
    json!({
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": format!("{} note(s) in {workspace} match {title:?}. Choose the one to delete and confirm; deleting cannot be undone.\n{}", ids.len(), listing.join("\n")),
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "note_id": { "type": "string", "title": "Note to delete", "enum": ids },
                    "confirm": { "type": "boolean", "title": "Yes, delete this note permanently" },
                },
                "required": ["note_id", "confirm"],
            },
        },
    })
}

/// Server-side validation of an accepted form (client-side validation builds no trust).
fn validate_accept(content: Option<&Value>, candidates: &[String]) -> Result<String, RpcError> {
    let invalid = |message: &str| RpcError::invalid_params(Reason::ResponseInvalid, message.to_string());
    let Some(Value::Object(content)) = content else {
        return Err(invalid("accept without content is not consent: content {note_id, confirm} is required"));
    };
    if let Some(unknown) = content.keys().find(|key| *key != "note_id" && *key != "confirm") {
        return Err(invalid(&format!("the form has no field {:?}", echo(unknown))));
    }
    let note_id = match content.get("note_id") {
        Some(Value::String(id)) => id.clone(),
        _ => return Err(invalid("content.note_id is required and must be a string")),
    };
    let confirm = match content.get("confirm") {
        Some(Value::Bool(confirm)) => *confirm,
        _ => return Err(invalid("content.confirm is required and must be a boolean")),
    };
    if !candidates.contains(&note_id) {
        return Err(RpcError::invalid_params(Reason::NotACandidate, format!("{:?} was not one of the notes offered", echo(&note_id)))
            .with_detail("noteId", json!(echo(&note_id))));
    }
    if !confirm {
        return Err(RpcError::invalid_params(
            Reason::NotConfirmed,
            "confirm was false: nothing deleted and nothing consumed; answer decline to refuse",
        ));
    }
    Ok(note_id)
}

fn store_failed(error: StoreError) -> RpcError {
    refusals::store_failed(error, "nothing was changed")
}
