//! `notes_publish`: share a note to an external service, which needs the user's own authorization there: a
//! URL-mode elicitation (GUARANTEES.md §2.7), and the out-of-band page it sends the user to.
//!
//! Round 1 starts a flow in the shared out-of-band store under an unguessable reference, bound to the
//! principal, and answers `input_required` with `elicitation/create` in mode `url` (the URL carries only the
//! reference) and a sealed `requestState` naming the reference. The user opens the page, signs in as
//! themselves, and authorizes; the store records who completed it, refusing anyone but the principal. On the
//! retry the server decides from its own state, never from the client's `accept` (which means only "the user
//! agreed to open the URL"): completed by the principal ⇒ the nonce is claimed in the replay store and the
//! note is published, once; not completed ⇒ another `input_required`; completed by someone else or unknown ⇒
//! refused.

use super::{is_inside, store_failed, workspace_arguments, NotesServer};
use crate::framework::out_of_band::{
    Completion, FlowRecord, FlowStart, FlowStatus, OutOfBandFlow, OutOfBandStore, PageAction, PageAnswer, PageRequest,
};
use crate::framework::pipeline::RequestContext;
use crate::framework::ports::{ClaimOutcome, ClaimRecord, NonceClaim};
use crate::framework::refusals::{self, Action};
use crate::policy::state::{key_id_of, OpenError};
use crate::wire::canonical::canonical_object_bytes;
use crate::wire::errors::{echo, Reason, RpcError};
use crate::wire::meta::{require_url_elicitation, RequestMeta};
use crate::wire::result::{complete, input_required};
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::sync::Arc;

pub const TOOL_NOTES_PUBLISH: &str = "notes_publish";
/// The `inputRequests` key of the authorization request, and the phase sealed into its state.
pub const INPUT_PUBLISH_AUTHORIZATION: &str = "publish_authorization";
/// Where the page lives under the server's base URL: `{base}/connect/{reference}`.
pub const PAGE_PATH: &str = "/connect/";
/// A reference is 16 random bytes in base64url without padding.
const REFERENCE_CHARS: usize = 22;

/// The out-of-band side of a notes server: the shared store of flows and the base URL its page is served at
/// (`https://notes.example` in the simulator, the listener's own address under `serve --http`).
#[derive(Clone)]
pub struct OutOfBand {
    pub store: Arc<dyn OutOfBandStore>,
    pub page_base: String,
}

impl OutOfBand {
    pub fn url(&self, reference: &str) -> String {
        format!("{}{PAGE_PATH}{reference}", self.page_base.trim_end_matches('/'))
    }

    /// The reference a URL of this page carries, if it is exactly one (anything added, removed or changed
    /// around it is an altered URL).
    pub fn reference_of<'u>(&self, url: &'u str) -> Option<&'u str> {
        let prefix = format!("{}{PAGE_PATH}", self.page_base.trim_end_matches('/'));
        let reference = url.strip_prefix(prefix.as_str())?;
        let well_formed =
            reference.len() == REFERENCE_CHARS && reference.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        well_formed.then_some(reference)
    }
}

/// What a publish state seals. Its own claims type: `reference` is required and `candidates` absent, so it
/// never opens as a delete confirmation, nor one as it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PublishClaims {
    pub principal: String,
    pub method: String,
    pub tool: String,
    pub arguments_digest: String,
    pub note_id: String,
    /// The out-of-band flow's reference (the one the URL carries).
    pub reference: String,
    pub phase: String,
    pub issued_at_ms: u64,
    pub expires_at_ms: u64,
    /// One-time nonce, claimed in the replay store when the note is published.
    pub nonce: String,
}

/// A publish state's claims decoded without verifying its tag: for the zoo's deliberately broken servers only.
pub fn read_publish_claims_unverified(token: &str) -> Option<PublishClaims> {
    let payload = token.split('.').nth(2)?;
    serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).ok()?).ok()
}

struct PublishArguments {
    workspace_uri: String,
    note_id: String,
    canonical: Vec<u8>,
}

pub(crate) fn notes_publish_descriptor() -> Value {
    json!({
        "name": TOOL_NOTES_PUBLISH,
        "title": "Publish a note",
        "description": "Share one note of a workspace you are authorized for to the external publishing service. The service needs your own authorization: you are sent to a page to sign in and authorize before anything is shared.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "workspaceUri": { "type": "string", "description": "file:// URI of the workspace folder the note is in." },
                "noteId": { "type": "string", "minLength": 1, "maxLength": 200, "description": "The id of the note to publish." },
            },
            "required": ["workspaceUri", "noteId"],
            "additionalProperties": false,
        },
        "outputSchema": {
            "type": "object",
            "properties": {
                "published": { "type": "boolean" },
                "noteId": { "type": "string" },
                "outcome": { "type": "string", "enum": ["published", "declined", "cancelled"] },
            },
            "required": ["published", "outcome"],
            "additionalProperties": false,
        },
        "annotations": { "title": "Publish a note", "readOnlyHint": false, "destructiveHint": false, "idempotentHint": false, "openWorldHint": true },
    })
}

fn parse_publish_arguments(arguments: Option<&Value>) -> Result<PublishArguments, RpcError> {
    let invalid = |message: String| RpcError::invalid_params(Reason::ArgumentsInvalid, message);
    let (map, workspace_uri) = workspace_arguments(arguments, "notes_publish", "noteId")?;
    let note_id = match map.get("noteId") {
        Some(Value::String(id)) if !id.is_empty() && id.chars().count() <= 200 => id.clone(),
        _ => return Err(invalid("noteId is required: a non-empty string of at most 200 characters".into())),
    };
    Ok(PublishArguments { workspace_uri, note_id, canonical: canonical_object_bytes(map) })
}

fn authorization_request(out_of_band: &OutOfBand, reference: &str, note_id: &str, again: bool) -> Value {
    let why = if again { "The authorization page has not been completed yet. " } else { "" };
    json!({
        INPUT_PUBLISH_AUTHORIZATION: {
            "method": "elicitation/create",
            "params": {
                "mode": "url",
                "message": format!("{why}Publishing {note_id} needs your own authorization at the publishing service. Open the page, sign in as yourself and authorize; then retry."),
                "url": out_of_band.url(reference),
            },
        }
    })
}

impl NotesServer {
    pub(super) async fn publish_call(&self, context: RequestContext<'_>, params: &Value) -> Result<Value, RpcError> {
        let Some(out_of_band) = self.ports.out_of_band.clone() else {
            return Err(RpcError::invalid_params(Reason::UnknownTool, format!("Unknown tool: {TOOL_NOTES_PUBLISH}")));
        };
        let arguments = parse_publish_arguments(params.get("arguments"))?;
        let refusals::RoundTwoFields { request_state, input_responses } = refusals::round_two_fields(params)?;
        match (request_state, input_responses) {
            (None, None) => self.publish_round_one(context, &out_of_band, &arguments).await,
            (Some(state), Some(responses)) => self.publish_round_two(context, &out_of_band, &arguments, state, responses).await,
            (Some(_), None) => Err(refusals::state_without_responses("the authorization request")),
            (None, Some(_)) => Err(refusals::responses_without_state()),
        }
    }

    async fn publish_round_one(
        &self,
        context: RequestContext<'_>,
        out_of_band: &OutOfBand,
        arguments: &PublishArguments,
    ) -> Result<Value, RpcError> {
        // Capability compatibility first, as for every elicitation (GUARANTEES.md §2.6): this one needs URL mode.
        require_url_elicitation(context.meta)?;
        let workspace = self.authorize(context.principal, &arguments.workspace_uri)?;
        let notes = self.ports.notes.list_notes().await.map_err(store_failed)?;
        if !notes.iter().any(|note| note.id == arguments.note_id && is_inside(&workspace, note)) {
            return Ok(self.publish_refused(format!("No note {:?} in {workspace}. Nothing was published.", echo(&arguments.note_id))));
        }
        let now_ms = self.ports.clock.now_ms();
        let encode = |bytes: [u8; 16]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        let claims = PublishClaims {
            principal: context.principal.to_string(),
            method: "tools/call".into(),
            tool: TOOL_NOTES_PUBLISH.into(),
            arguments_digest: self.config.key_ring.signing_arguments_digest(&arguments.canonical),
            note_id: arguments.note_id.clone(),
            reference: encode(self.ports.nonces.nonce()),
            phase: INPUT_PUBLISH_AUTHORIZATION.into(),
            issued_at_ms: now_ms,
            expires_at_ms: now_ms.saturating_add(self.config.state_ttl_ms),
            nonce: encode(self.ports.nonces.nonce()),
        };
        let flow = OutOfBandFlow {
            reference: claims.reference.clone(),
            principal: claims.principal.clone(),
            tool: TOOL_NOTES_PUBLISH.into(),
            subject: claims.note_id.clone(),
            expires_at_ms: claims.expires_at_ms,
        };
        match out_of_band.store.start(flow, now_ms).await.map_err(|error| refusals::store_failed(error, "nothing was started"))? {
            FlowStart::Started => {}
            FlowStart::Full => return Err(refusals::out_of_band_full()),
        }
        let state = self.config.key_ring.seal_claims(&claims);
        Ok(input_required(authorization_request(out_of_band, &claims.reference, &claims.note_id, false), &state, self.info()))
    }

    fn publish_refused(&self, text: String) -> Value {
        complete(json!({ "content": [{ "type": "text", "text": text }], "isError": true }), self.info())
    }

    fn publish_outcome(&self, structured: Value, text: &str) -> Value {
        complete(json!({ "content": [{ "type": "text", "text": text }], "structuredContent": structured }), self.info())
    }

    fn open_publish_state(&self, principal: &str, arguments: &PublishArguments, state: &str) -> Result<PublishClaims, RpcError> {
        let restart = format!("call {TOOL_NOTES_PUBLISH} again without it to get a new authorization page");
        let claims: PublishClaims =
            self.config.key_ring.verify_claims(state).map_err(|error| refusals::unopenable(error, "server", &restart))?;
        if claims.expires_at_ms <= self.ports.clock.now_ms() {
            return Err(refusals::unopenable(OpenError::Expired, "server", &restart));
        }
        let digest = key_id_of(state).and_then(|key_id| self.config.key_ring.arguments_digest(key_id, &arguments.canonical));
        let bound = claims.principal == principal
            && claims.method == "tools/call"
            && claims.tool == TOOL_NOTES_PUBLISH
            && claims.phase == INPUT_PUBLISH_AUTHORIZATION
            && digest.as_deref() == Some(claims.arguments_digest.as_str());
        if !bound {
            return Err(refusals::state_mismatch("principal, tool or set of arguments"));
        }
        Ok(claims)
    }

    async fn publish_round_two(
        &self,
        context: RequestContext<'_>,
        out_of_band: &OutOfBand,
        arguments: &PublishArguments,
        state: &str,
        responses: &Map<String, Value>,
    ) -> Result<Value, RpcError> {
        let claims = self.open_publish_state(context.principal, arguments, state)?;
        let Some(answer) = responses.get(INPUT_PUBLISH_AUTHORIZATION) else {
            return self.ask_to_authorize_again(context.meta, out_of_band, &claims, state);
        };
        let (action, _) = refusals::elicitation_answer(INPUT_PUBLISH_AUTHORIZATION, answer)?;
        match action {
            Action::Cancel => Ok(self.publish_outcome(
                json!({ "published": false, "outcome": "cancelled" }),
                "Nothing was published: the request was dismissed, which uses nothing up; it can be answered until it expires.",
            )),
            Action::Decline => {
                let claim = NonceClaim {
                    nonce: claims.nonce.clone(),
                    principal: claims.principal.clone(),
                    expires_at_ms: claims.expires_at_ms,
                    record: ClaimRecord::Declined { tool: None },
                };
                match self.ports.replay.claim(claim).await.map_err(store_failed)? {
                    ClaimOutcome::Claimed => Ok(self.publish_outcome(
                        json!({ "published": false, "outcome": "declined" }),
                        "Nothing was published: the user declined. This request is now used up.",
                    )),
                    ClaimOutcome::AlreadyClaimed { record } => Err(refusals::consumed(TOOL_NOTES_PUBLISH, record)),
                    ClaimOutcome::Full => Err(refusals::replay_full()),
                    ClaimOutcome::Expired => Err(refusals::replay_window_closed(TOOL_NOTES_PUBLISH)),
                }
            }
            // `accept` only says the user agreed to open the page: whether the authorization happened is the
            // shared store's to say (SPEC-ELIC-5).
            Action::Accept => {
                let record = out_of_band.store.flow(&claims.reference).await.map_err(store_failed)?;
                match record {
                    None => Err(RpcError::invalid_params(
                        Reason::OutOfBandUnknown,
                        format!("the authorization this request waits for is not known here (never started, or forgotten); call {TOOL_NOTES_PUBLISH} again without requestState to start over. Nothing was published."),
                    )),
                    Some(FlowRecord { status: FlowStatus::Started, .. }) => {
                        self.ask_to_authorize_again(context.meta, out_of_band, &claims, state)
                    }
                    Some(FlowRecord { status: FlowStatus::Completed { by }, flow }) => {
                        if by != claims.principal || flow.principal != claims.principal || flow.subject != claims.note_id {
                            return Err(RpcError::invalid_params(
                                Reason::OutOfBandWrongUser,
                                "the authorization page was completed by someone other than the user who asked; nothing was published",
                            ));
                        }
                        self.publish_now(context.principal, arguments, &claims).await
                    }
                }
            }
        }
    }

    fn ask_to_authorize_again(
        &self,
        meta: &RequestMeta<'_>,
        out_of_band: &OutOfBand,
        claims: &PublishClaims,
        state: &str,
    ) -> Result<Value, RpcError> {
        require_url_elicitation(meta)?;
        Ok(input_required(authorization_request(out_of_band, &claims.reference, &claims.note_id, true), state, self.info()))
    }

    /// Completed by the principal: re-authorize, re-read the note, claim the nonce (at most once), publish.
    async fn publish_now(&self, principal: &str, arguments: &PublishArguments, claims: &PublishClaims) -> Result<Value, RpcError> {
        let workspace = self.authorize(principal, &arguments.workspace_uri)?;
        let notes = self.ports.notes.list_notes().await.map_err(store_failed)?;
        if !notes.iter().any(|note| note.id == claims.note_id && is_inside(&workspace, note)) {
            return Err(RpcError::invalid_params(
                Reason::NoteGone,
                "the note is no longer in this workspace; nothing was published or consumed",
            ));
        }
        let claim = NonceClaim {
            nonce: claims.nonce.clone(),
            principal: claims.principal.clone(),
            expires_at_ms: claims.expires_at_ms,
            record: ClaimRecord::Published { note_id: claims.note_id.clone() },
        };
        match self.ports.replay.claim(claim).await.map_err(store_failed)? {
            ClaimOutcome::Claimed => Ok(self.publish_outcome(
                json!({ "published": true, "noteId": claims.note_id, "outcome": "published" }),
                &format!("Published {} to the publishing service with your authorization.", claims.note_id),
            )),
            ClaimOutcome::AlreadyClaimed { record } => Err(refusals::consumed(TOOL_NOTES_PUBLISH, record)),
            ClaimOutcome::Full => Err(refusals::replay_full()),
            ClaimOutcome::Expired => Err(refusals::replay_window_closed(TOOL_NOTES_PUBLISH)),
        }
    }

    /// The out-of-band page, for a browser signed in as `user`.
    pub(super) async fn publish_page(&self, user: &str, request: &PageRequest) -> PageAnswer {
        let Some(out_of_band) = &self.ports.out_of_band else { return PageAnswer::not_here() };
        let Some(reference) = out_of_band.reference_of(&request.url) else {
            return PageAnswer::new(
                400,
                "altered",
                "This link is not one this server issued: it was altered or cut short. Nothing was authorized. Ask for a new link.",
            );
        };
        let now_ms = self.ports.clock.now_ms();
        let unavailable =
            |_| PageAnswer::new(503, "unavailable", "The service cannot reach its records right now. Nothing was authorized; try again.");
        let record = match out_of_band.store.flow(reference).await {
            Ok(record) => record,
            Err(error) => return unavailable(error),
        };
        let decision = match request.action {
            PageAction::Open => crate::framework::out_of_band::decide_completion(record.as_ref(), user, now_ms),
            PageAction::Complete => match out_of_band.store.complete(reference, user, now_ms).await {
                Ok(decision) => decision,
                Err(error) => return unavailable(error),
            },
        };
        let mut answer = match (decision, request.action) {
            (Completion::Completed, PageAction::Open) => PageAnswer::new(200, "ready", "Authorize the publishing service to publish this note for you?"),
            (Completion::Completed, PageAction::Complete) => {
                PageAnswer::new(200, "completed", "Authorized. Return to your assistant: it can publish the note now.")
            }
            (Completion::NotYours, _) => PageAnswer::new(
                403,
                "wrong_user",
                "This authorization was asked for by another account, not the one signed in here. Nothing was authorized. Sign in as the account that asked, or ignore this page.",
            ),
            (Completion::AlreadyCompleted, _) => {
                PageAnswer::new(409, "already_completed", "This authorization was already given; a link works once. Nothing more was done.")
            }
            (Completion::Expired, _) => PageAnswer::new(410, "expired", "This link has expired. Nothing was authorized. Ask your assistant for a new one."),
            (Completion::Unknown, _) => {
                PageAnswer::new(404, "unknown", "This link is not one this server knows: it was altered, or it is too old. Nothing was authorized.")
            }
        };
        // Only the principal is shown what the flow is for.
        if matches!(answer.outcome, "ready" | "completed" | "already_completed" | "expired") {
            answer.flow = record.map(|record| (record.flow.tool, record.flow.subject));
        }
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(arguments: Value) -> RpcError {
        match parse_publish_arguments(Some(&arguments)) {
            Ok(_) => panic!("{arguments} was taken"),
            Err(error) => error,
        }
    }

    #[test]
    fn malformed_arguments_are_refused_saying_what_is_wrong() {
        let uri = "file:///Users/alice/Documents/Notes";
        let cases = [
            (json!("note-7"), "notes_publish needs arguments {workspaceUri, noteId}"),
            (json!({"workspaceUri": uri, "noteId": "note-7", "title": "x"}), "takes only workspaceUri and noteId"),
            (json!({"noteId": "note-7"}), "workspaceUri is required"),
            (json!({"workspaceUri": 7, "noteId": "note-7"}), "workspaceUri is required"),
            (json!({"workspaceUri": uri}), "noteId is required"),
            (json!({"workspaceUri": uri, "noteId": ""}), "noteId is required"),
            (json!({"workspaceUri": uri, "noteId": "n".repeat(201)}), "noteId is required"),
        ];
        for (arguments, says) in cases {
            let error = refusal(arguments.clone());
            assert_eq!(error.code, -32602, "{arguments}");
            assert_eq!(error.data, Some(json!({"reason": "arguments_invalid"})), "{arguments}");
            assert!(error.message.contains(says), "{arguments}: {}", error.message);
        }
        assert!(parse_publish_arguments(None).is_err(), "no arguments at all");
        let taken = parse_publish_arguments(Some(&json!({"workspaceUri": uri, "noteId": "n".repeat(200)}))).expect("200 characters");
        assert_eq!((taken.workspace_uri.as_str(), taken.note_id.len()), (uri, 200));
    }
}
