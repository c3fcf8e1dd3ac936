//! JSON-RPC error codes and the closed set of machine-readable failure reasons.
//!
//! Codes are only those the spec defines; nothing is invented inside the reserved -32020..-32099 range.
//! MRTR, state and policy failures all use `-32602` (Invalid params) and say *why* in `error.data.reason`,
//! a value from [`Reason`], so clients and the simulator's checker can branch on it without parsing prose.

use serde_json::{json, Map, Value};

pub(crate) const PARSE_ERROR: i64 = -32700;
pub(crate) const INVALID_REQUEST: i64 = -32600;
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
pub(crate) const INVALID_PARAMS: i64 = -32602;
pub(crate) const INTERNAL_ERROR: i64 = -32603;
pub(crate) const HEADER_MISMATCH: i64 = -32020;
pub(crate) const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
pub(crate) const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// Longest piece of client-chosen text (a method, tool, prompt or argument name, a URI, a header value, a
/// requested version) an error repeats, in `message` or in `data`. Longer text is cut and ends in `…`: a
/// client that sends a 100,000-character method name gets a bounded answer, and the log lines and audit
/// records that quote errors stay bounded too.
pub const ECHO_CHARS_MAX: usize = 128;
/// Longest `message` an error carries, whatever built it (a backstop behind [`echo`]).
pub const ERROR_MESSAGE_CHARS_MAX: usize = 2_048;

/// `text` as an error may repeat it: at most [`ECHO_CHARS_MAX`] characters, then `…`.
pub fn echo(text: &str) -> String {
    bounded(text, ECHO_CHARS_MAX)
}

fn bounded(text: &str, chars_max: usize) -> String {
    match text.char_indices().nth(chars_max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// Why a request was refused. Serialized in snake_case into `error.data.reason`.
///
/// The set is closed and documented in docs/notes-server.md ("Failure reasons"); adding a variant is a wire change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// `params._meta` or one of its required fields is absent or of the wrong type.
    MetaInvalid,
    /// The message exceeded the configured size limit.
    PayloadTooLarge,
    /// Tool arguments do not match the tool's closed input schema.
    ArgumentsInvalid,
    /// `tools/call` named a tool this server does not have.
    UnknownTool,
    /// `prompts/get` or `completion/complete` named a prompt this server does not have.
    UnknownPrompt,
    /// A URI argument is not a well-formed `file` URI we accept (scheme, query, fragment, encoding, escape).
    UriInvalid,
    /// The workspace is not one of the authenticated principal's authorized workspaces (or inside one).
    WorkspaceUnauthorized,
    /// A resource does not exist or is not visible to this principal (the two are indistinguishable on purpose).
    ResourceNotFound,
    /// `requestState` could not be decoded at all.
    StateMalformed,
    /// `requestState` failed HMAC verification, or names a key this instance does not hold.
    StateSignature,
    /// `requestState` expired (`expiresAt <= now`).
    StateExpired,
    /// `requestState` is genuine but its one-time nonce was already used.
    StateConsumed,
    /// `requestState` is genuine and its confirmation is being carried out right now (another request's claim
    /// is in flight): retry to learn how it ended. Nothing was done by this request.
    ClaimInProgress,
    /// The state expired beyond the replay store's grace by the store's own clock (or the store already pruned
    /// nonces that old): it cannot tell whether the confirmation was used, so it refuses it. Nothing done.
    ReplayWindowClosed,
    /// `requestState` is genuine but bound to another principal, method, tool, arguments or phase.
    StateMismatch,
    /// `requestState` without `inputResponses`, or `inputResponses` without `requestState`.
    ContinuationUnpaired,
    /// The elicitation answer does not match the schema that was asked, or its action is unknown.
    ResponseInvalid,
    /// The form was accepted with `confirm: false`: not consent, nothing consumed.
    NotConfirmed,
    /// The chosen note id is not among the candidates signed into the state.
    NotACandidate,
    /// The chosen note no longer exists (deleted after the form was shown). Nothing consumed.
    NoteGone,
    /// The chosen note now lies outside the workspace (moved after the form was shown). Nothing consumed.
    NoteOutsideWorkspace,
    /// The shared replay store is full of unexpired nonces and refuses new claims (fail closed).
    ReplayStoreFull,
    /// A store could not be reached or failed; nothing was changed.
    StoreUnavailable,
    /// Gateway: the tool's descriptor is unreviewed, changed since approval (rug pull), or from a changed publisher.
    ToolQuarantined,
    /// Gateway: the descriptor tripped the metadata scanner, or is malformed or ambiguous.
    ToolBlocked,
    /// Gateway: the authenticated principal is not granted this (qualified) tool.
    ToolUnauthorized,
    /// Gateway: the principal is not granted the destination (resource) named in the arguments.
    DestinationUnauthorized,
    /// Gateway: the principal's quota for this tool in the current window is spent (HTTP 429). No side effect.
    RateLimited,
    /// Gateway: a backend could not be reached or answered out of contract; see `data` for whether anything ran.
    BackendUnavailable,
    /// Backend: an idempotency key was presented again with a different request.
    IdempotencyConflict,
    /// URL mode: the out-of-band flow this state continues is not in the shared store (never started there,
    /// or pruned). Nothing was done.
    OutOfBandUnknown,
    /// URL mode: the out-of-band flow was completed by someone other than the principal who started it.
    /// Nothing was done.
    OutOfBandWrongUser,
    /// URL mode: the shared out-of-band store holds this principal's share of unexpired flows, or its whole
    /// capacity, and refuses to start another (fail closed, never evicting). Nothing was started.
    OutOfBandStoreFull,
}

impl Reason {
    pub const ALL: [Reason; 33] = [
        Reason::MetaInvalid,
        Reason::PayloadTooLarge,
        Reason::ArgumentsInvalid,
        Reason::UnknownTool,
        Reason::UnknownPrompt,
        Reason::UriInvalid,
        Reason::WorkspaceUnauthorized,
        Reason::ResourceNotFound,
        Reason::StateMalformed,
        Reason::StateSignature,
        Reason::StateExpired,
        Reason::StateConsumed,
        Reason::ClaimInProgress,
        Reason::ReplayWindowClosed,
        Reason::StateMismatch,
        Reason::ContinuationUnpaired,
        Reason::ResponseInvalid,
        Reason::NotConfirmed,
        Reason::NotACandidate,
        Reason::NoteGone,
        Reason::NoteOutsideWorkspace,
        Reason::ReplayStoreFull,
        Reason::StoreUnavailable,
        Reason::ToolQuarantined,
        Reason::ToolBlocked,
        Reason::ToolUnauthorized,
        Reason::DestinationUnauthorized,
        Reason::RateLimited,
        Reason::BackendUnavailable,
        Reason::IdempotencyConflict,
        Reason::OutOfBandUnknown,
        Reason::OutOfBandWrongUser,
        Reason::OutOfBandStoreFull,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::MetaInvalid => "meta_invalid",
            Reason::PayloadTooLarge => "payload_too_large",
            Reason::ArgumentsInvalid => "arguments_invalid",
            Reason::UnknownTool => "unknown_tool",
            Reason::UnknownPrompt => "unknown_prompt",
            Reason::UriInvalid => "uri_invalid",
            Reason::WorkspaceUnauthorized => "workspace_unauthorized",
            Reason::ResourceNotFound => "resource_not_found",
            Reason::StateMalformed => "state_malformed",
            Reason::StateSignature => "state_signature",
            Reason::StateExpired => "state_expired",
            Reason::StateConsumed => "state_consumed",
            Reason::ClaimInProgress => "claim_in_progress",
            Reason::ReplayWindowClosed => "replay_window_closed",
            Reason::StateMismatch => "state_mismatch",
            Reason::ContinuationUnpaired => "continuation_unpaired",
            Reason::ResponseInvalid => "response_invalid",
            Reason::NotConfirmed => "not_confirmed",
            Reason::NotACandidate => "not_a_candidate",
            Reason::NoteGone => "note_gone",
            Reason::NoteOutsideWorkspace => "note_outside_workspace",
            Reason::ReplayStoreFull => "replay_store_full",
            Reason::StoreUnavailable => "store_unavailable",
            Reason::ToolQuarantined => "tool_quarantined",
            Reason::ToolBlocked => "tool_blocked",
            Reason::ToolUnauthorized => "tool_unauthorized",
            Reason::DestinationUnauthorized => "destination_unauthorized",
            Reason::RateLimited => "rate_limited",
            Reason::BackendUnavailable => "backend_unavailable",
            Reason::OutOfBandUnknown => "out_of_band_unknown",
            Reason::OutOfBandWrongUser => "out_of_band_wrong_user",
            Reason::OutOfBandStoreFull => "out_of_band_store_full",
            Reason::IdempotencyConflict => "idempotency_conflict",
        }
    }

    pub fn parse(text: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|reason| reason.as_str() == text)
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A JSON-RPC error object plus the HTTP status the streamable HTTP transport must use for it.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
    /// Only the HTTP transport reads this; stdio and the simulator ignore it.
    pub http_status: u16,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        let http_status = match code {
            PARSE_ERROR | INVALID_REQUEST => 400,
            METHOD_NOT_FOUND => 404,
            HEADER_MISMATCH | MISSING_REQUIRED_CLIENT_CAPABILITY | UNSUPPORTED_PROTOCOL_VERSION => 400,
            _ => 200,
        };
        RpcError { code, message: bounded(&message.into(), ERROR_MESSAGE_CHARS_MAX), data: None, http_status }
    }

    pub(crate) fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    pub(crate) fn with_status(mut self, http_status: u16) -> Self {
        self.http_status = http_status;
        self
    }

    pub(crate) fn parse_error(detail: impl std::fmt::Display) -> Self {
        RpcError::new(PARSE_ERROR, format!("Parse error: {detail}"))
    }

    pub(crate) fn invalid_request(detail: impl Into<String>) -> Self {
        RpcError::new(INVALID_REQUEST, format!("Invalid request: {}", detail.into()))
    }

    pub(crate) fn method_not_found(method: &str) -> Self {
        if method == "initialize" {
            // A legacy client has no fall-forward: this error is all it can show its user, so name what we speak.
            return RpcError::new(
                METHOD_NOT_FOUND,
                format!(
                    "Method not found: initialize. This server speaks only MCP {} (no handshake: send server/discover)",
                    super::PROTOCOL_VERSION
                ),
            )
            .with_data(json!({ "supported": [super::PROTOCOL_VERSION] }));
        }
        RpcError::new(METHOD_NOT_FOUND, format!("Method not found: {}", echo(method)))
    }

    /// `-32602` with `data.reason` and optional extra fields merged into `data`.
    pub fn invalid_params(reason: Reason, message: impl Into<String>) -> Self {
        RpcError::new(INVALID_PARAMS, message).with_data(json!({ "reason": reason.as_str() }))
    }

    /// Malformed `_meta`: `-32602` and, per the spec, HTTP 400.
    pub fn meta_invalid(message: impl Into<String>) -> Self {
        RpcError::invalid_params(Reason::MetaInvalid, message).with_status(400)
    }

    pub(crate) fn internal(reason: Reason, message: impl Into<String>) -> Self {
        RpcError::new(INTERNAL_ERROR, message).with_data(json!({ "reason": reason.as_str() }))
    }

    pub fn header_mismatch(message: impl Into<String>) -> Self {
        RpcError::new(HEADER_MISMATCH, message)
    }

    /// `-32022`; `data` is exactly `{"supported":[...],"requested":"..."}`, the requested version repeated as
    /// sent (cut to [`ECHO_CHARS_MAX`] characters, far beyond any version string).
    pub(crate) fn unsupported_version(requested: &str) -> Self {
        RpcError::new(UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version")
            .with_data(json!({ "supported": [super::PROTOCOL_VERSION], "requested": echo(requested) }))
    }

    /// `-32021`; `data.requiredCapabilities` is a `ClientCapabilities` object.
    pub(crate) fn missing_capability(required: Value, message: impl Into<String>) -> Self {
        RpcError::new(MISSING_REQUIRED_CLIENT_CAPABILITY, message).with_data(json!({ "requiredCapabilities": required }))
    }

    /// Adds a field to `data` (which must already be an object, as every reason-carrying error is).
    pub(crate) fn with_detail(mut self, key: &str, value: Value) -> Self {
        match &mut self.data {
            Some(Value::Object(map)) => {
                map.insert(key.to_string(), value);
            }
            _ => {
                let mut map = Map::new();
                map.insert(key.to_string(), value);
                self.data = Some(Value::Object(map));
            }
        }
        self
    }

    /// The reason in `data.reason`, if any.
    pub fn reason(&self) -> Option<Reason> {
        self.data.as_ref()?.get("reason")?.as_str().and_then(Reason::parse)
    }

    pub fn to_json(&self) -> Value {
        self.clone().into_json()
    }

    /// [`RpcError::to_json`], moving the message and data instead of copying them.
    pub fn into_json(self) -> Value {
        let mut error = Map::new();
        error.insert("code".into(), json!(self.code));
        error.insert("message".into(), Value::String(self.message));
        if let Some(data) = self.data {
            error.insert("data".into(), data);
        }
        Value::Object(error)
    }
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for RpcError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_round_trip_and_are_unique() {
        let mut names: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        for reason in Reason::ALL {
            assert_eq!(Reason::parse(reason.as_str()), Some(reason));
        }
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Reason::ALL.len());
        assert_eq!(Reason::parse("made_up"), None);
    }

    #[test]
    fn spec_codes_carry_spec_http_statuses() {
        assert_eq!(RpcError::unsupported_version("x").http_status, 400);
        assert_eq!(RpcError::header_mismatch("x").http_status, 400);
        assert_eq!(RpcError::method_not_found("x").http_status, 404);
        let initialize = RpcError::method_not_found("initialize");
        assert_eq!((initialize.code, initialize.http_status), (METHOD_NOT_FOUND, 404));
        assert_eq!(initialize.data, Some(json!({ "supported": ["2026-07-28"] })), "VERS-008: name the supported versions");
        assert_eq!(RpcError::meta_invalid("x").http_status, 400);
        assert_eq!(RpcError::invalid_params(Reason::StateExpired, "x").http_status, 200);
    }

    #[test]
    fn no_code_is_invented_in_the_reserved_range() {
        for code in [HEADER_MISMATCH, MISSING_REQUIRED_CLIENT_CAPABILITY, UNSUPPORTED_PROTOCOL_VERSION] {
            assert!((-32022..=-32020).contains(&code));
        }
    }

    #[test]
    fn echoed_client_text_is_bounded() {
        assert_eq!(echo("tools/call"), "tools/call");
        let long = "m".repeat(100_000);
        let error = RpcError::method_not_found(&long);
        assert_eq!(error.message.chars().count(), "Method not found: ".len() + ECHO_CHARS_MAX + 1);
        assert!(error.message.ends_with('…'));
        let version = RpcError::unsupported_version(&long);
        assert_eq!(version.data.unwrap()["requested"].as_str().unwrap().chars().count(), ECHO_CHARS_MAX + 1);
        let exact = "é".repeat(ECHO_CHARS_MAX);
        assert_eq!(echo(&exact), exact, "exactly the bound is kept whole (counted in characters, not bytes)");
        let built = RpcError::new(INVALID_PARAMS, "x".repeat(10 * ERROR_MESSAGE_CHARS_MAX));
        assert_eq!(built.message.chars().count(), ERROR_MESSAGE_CHARS_MAX + 1, "every message is bounded, however built");
    }

    #[test]
    fn unsupported_version_data_is_exact() {
        let error = RpcError::unsupported_version("1900-01-01");
        assert_eq!(error.data, Some(json!({"supported":["2026-07-28"],"requested":"1900-01-01"})));
    }
}
