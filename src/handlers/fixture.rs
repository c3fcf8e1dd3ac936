//! The conformance fixture: an "everything server" for MCP 2026-07-28.
//!
//! Every tool, prompt, resource, template and completion the official conformance suite's required server
//! scenarios name (see `docs/conformance.md`), plus the MRTR flows a client author wants to test against:
//! elicitation, sampling, roots, several requests at once, several rounds, sealed and tampered state,
//! capability-aware asking. It runs through the same [`pipeline`](super::pipeline) as the notes server and
//! seals its `requestState` with the same [`KeyRing`], in the same token format.
//!
//! Nothing here mutates data, so no flow consumes a nonce: the nonce in each state only makes every state
//! unique. States are still bound to the principal, the method, the tool or prompt and the exact
//! arguments, and they expire; a state issued for one flow (or by the notes server) never opens as another.

use super::pipeline::{NotificationFeed, RequestContext, Service, ServiceResponse};
use super::ports::{ChangeFeed, ChangeSubscription, Clock, ListChanged, NonceSource};
use crate::policy::state::{KeyRing, OpenError, STATE_CHARS_MAX};
use crate::wire::canonical::digest_hex;
use crate::wire::errors::{Reason, RpcError};
use crate::wire::jsonrpc::notification;
use crate::wire::meta::{read_log_level, supports_form_elicitation, LogLevel, RequestMeta, KEY_SUBSCRIPTION_ID};
use crate::wire::result::{complete, complete_cacheable, input_required, CacheScope, ServerInfo};
use crate::wire::PROTOCOL_VERSION;
use async_trait::async_trait;
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

pub const FIXTURE_SERVER_NAME: &str = "mcpsim-conformance";
pub const DISCOVER_TTL_MS: u64 = 3_600_000;
/// The fixture's lists and resources never change (list-changed notifications are announcements only).
pub const LIST_TTL_MS: u64 = 300_000;
pub const DEFAULT_STATE_TTL_MS: u64 = 300_000;
/// Longest string a form answer may carry (the forms say so in `maxLength`).
pub const ANSWER_CHARS_MAX: usize = 500;
/// Longest sampled text kept in a state; longer model output is cut (it is shown, never trusted).
pub const SAMPLED_TEXT_CHARS_MAX: usize = 200;
/// Longest model name kept.
pub const MODEL_CHARS_MAX: usize = 100;
/// Most roots a `roots/list` answer may report.
pub const ROOTS_MAX: usize = 64;
/// Roots kept in a state or shown in a result; the count is always exact.
pub const ROOTS_SHOWN_MAX: usize = 4;
pub const URI_CHARS_MAX: usize = 2048;
/// Longest `{id}` the resource template accepts.
pub const TEMPLATE_ID_CHARS_MAX: usize = 64;
pub const COMPLETION_VALUES_MAX: usize = 100;

/// A 1×1 red PNG.
pub const PNG_BASE64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
/// A WAV file of eight silent 8-bit samples at 8 kHz.
pub const WAV_BASE64: &str = "UklGRiwAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQgAAACAgICAgICAgA==";

const METHODS: [&str; 10] = [
    "server/discover",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "completion/complete",
    "subscriptions/listen",
];

/// Per-instance configuration.
#[derive(Debug, Clone)]
pub struct FixtureConfig {
    pub server_info: ServerInfo,
    pub key_ring: KeyRing,
    pub state_ttl_ms: u64,
}

impl FixtureConfig {
    pub fn new(key_ring: KeyRing) -> FixtureConfig {
        FixtureConfig {
            server_info: ServerInfo { name: FIXTURE_SERVER_NAME.into(), version: env!("CARGO_PKG_VERSION").into() },
            key_ring,
            state_ttl_ms: DEFAULT_STATE_TTL_MS,
        }
    }
}

/// The fixture server: configuration plus ports. Holds no per-client state; open subscriptions live in the
/// change feed, which only fans announcements out.
#[derive(Clone)]
pub struct ConformanceFixture {
    pub config: Arc<FixtureConfig>,
    pub clock: Arc<dyn Clock>,
    pub nonces: Arc<dyn NonceSource>,
    pub changes: Arc<dyn ChangeFeed>,
}

// ---------------------------------------------------------------------------------------------------------
// Catalog

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tool {
    SimpleText,
    Image,
    Audio,
    EmbeddedResource,
    MultipleContent,
    ErrorHandling,
    Progress,
    Logging,
    TriggerToolChange,
    TriggerPromptChange,
    Flow(FlowKind),
}

/// The MRTR flows. Each names what it asks; the engine in [`ConformanceFixture::run_flow`] drives them all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FlowKind {
    MissingCapability,
    StreamingElicitation,
    Elicitation,
    Sampling,
    ListRoots,
    RequestState,
    MultipleInputs,
    MultiRound,
    TamperedState,
    Capabilities,
    Prompt,
}

const TOOLS: [(&str, Tool, &str); 20] = [
    ("test_simple_text", Tool::SimpleText, "Returns one text content item."),
    ("test_image_content", Tool::Image, "Returns one image content item (a 1x1 PNG)."),
    ("test_audio_content", Tool::Audio, "Returns one audio content item (a short silent WAV)."),
    ("test_embedded_resource", Tool::EmbeddedResource, "Returns one embedded text resource."),
    ("test_multiple_content_types", Tool::MultipleContent, "Returns text, image and embedded-resource content together."),
    ("test_error_handling", Tool::ErrorHandling, "Always fails as a tool: a result with isError true, not a JSON-RPC error."),
    (
        "test_tool_with_progress",
        Tool::Progress,
        "Reports progress 0, 50 and 100 of 100 on the request's stream when the request carries _meta.progressToken.",
    ),
    (
        "test_logging_tool",
        Tool::Logging,
        "Sends notifications/message only when the request opts in with _meta io.modelcontextprotocol/logLevel, and only at or above that level.",
    ),
    (
        "test_trigger_tool_change",
        Tool::TriggerToolChange,
        "Announces notifications/tools/list_changed to open subscriptions/listen streams that asked for it (the list itself is fixed).",
    ),
    (
        "test_trigger_prompt_change",
        Tool::TriggerPromptChange,
        "Announces notifications/prompts/list_changed to open subscriptions/listen streams that asked for it (the list itself is fixed).",
    ),
    (
        "test_missing_capability",
        Tool::Flow(FlowKind::MissingCapability),
        "Asks the client's model one question through MRTR sampling; without the sampling capability in this request it fails with -32021.",
    ),
    (
        "test_streaming_elicitation",
        Tool::Flow(FlowKind::StreamingElicitation),
        "Streams progress (with a progressToken) and then asks for confirmation with an input_required result; never sends a request of its own.",
    ),
    (
        "test_input_required_result_elicitation",
        Tool::Flow(FlowKind::Elicitation),
        "MRTR: asks for your name with a form (inputRequests.user_name), then greets you. Needs no requestState.",
    ),
    (
        "test_input_required_result_sampling",
        Tool::Flow(FlowKind::Sampling),
        "MRTR: asks the client's model a question (inputRequests.capital_question), then returns its answer.",
    ),
    (
        "test_input_required_result_list_roots",
        Tool::Flow(FlowKind::ListRoots),
        "MRTR: asks for the client's roots (inputRequests.client_roots) and reports them; roots grant no access here.",
    ),
    (
        "test_input_required_result_request_state",
        Tool::Flow(FlowKind::RequestState),
        "MRTR: asks for confirmation with a sealed requestState; the retry must echo it unchanged.",
    ),
    (
        "test_input_required_result_multiple_inputs",
        Tool::Flow(FlowKind::MultipleInputs),
        "MRTR: asks for an elicitation, a sampling and a roots/list answer at once, with a sealed requestState that keeps partial answers.",
    ),
    (
        "test_input_required_result_multi_round",
        Tool::Flow(FlowKind::MultiRound),
        "MRTR: two rounds (name, then favourite colour); the second requestState carries the first answer.",
    ),
    (
        "test_input_required_result_tampered_state",
        Tool::Flow(FlowKind::TamperedState),
        "MRTR: issues an HMAC-sealed requestState; any change to it is refused with -32602 before anything else happens.",
    ),
    (
        "test_input_required_result_capabilities",
        Tool::Flow(FlowKind::Capabilities),
        "MRTR: asks only through the capabilities this request declares (form elicitation and/or sampling).",
    ),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prompt {
    Simple,
    WithArguments,
    EmbeddedResource,
    Image,
    InputRequired,
}

/// Name, prompt, description, arguments (name, description, required).
type PromptEntry = (&'static str, Prompt, &'static str, &'static [(&'static str, &'static str, bool)]);

const PROMPTS: [PromptEntry; 5] = [
    ("test_simple_prompt", Prompt::Simple, "A prompt without arguments.", &[]),
    (
        "test_prompt_with_arguments",
        Prompt::WithArguments,
        "A prompt that substitutes two arguments into its text.",
        &[("arg1", "First test argument", true), ("arg2", "Second test argument", true)],
    ),
    (
        "test_prompt_with_embedded_resource",
        Prompt::EmbeddedResource,
        "A prompt that embeds a text resource at the URI you give.",
        &[("resourceUri", "URI of the resource to embed", true)],
    ),
    ("test_prompt_with_image", Prompt::Image, "A prompt with an image (a 1x1 PNG) and a question about it.", &[]),
    (
        "test_input_required_result_prompt",
        Prompt::InputRequired,
        "MRTR on prompts/get: asks what context the prompt should use, then returns it.",
        &[],
    ),
];

const STATIC_TEXT_URI: &str = "test://static-text";
const STATIC_BINARY_URI: &str = "test://static-binary";
const TEMPLATE_URI: &str = "test://template/{id}/data";
const TEMPLATE_PREFIX: &str = "test://template/";
const TEMPLATE_SUFFIX: &str = "/data";

// ---------------------------------------------------------------------------------------------------------
// Input requests and answers

/// One question a flow can put in `inputRequests`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ask {
    /// A one-field form: `key`, message, field name, field kind.
    Form {
        key: &'static str,
        message: &'static str,
        field: &'static str,
        kind: FieldKind,
    },
    Sample {
        key: &'static str,
        question: &'static str,
        max_tokens: u32,
    },
    Roots {
        key: &'static str,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FieldKind {
    Text,
    Boolean,
}

impl Ask {
    fn key(self) -> &'static str {
        match self {
            Ask::Form { key, .. } | Ask::Sample { key, .. } | Ask::Roots { key } => key,
        }
    }

    /// Whether this request's declared capabilities let us ask this.
    fn is_declared(self, meta: &RequestMeta) -> bool {
        let capabilities = &meta.client_capabilities;
        match self {
            Ask::Form { .. } => supports_form_elicitation(capabilities),
            Ask::Sample { .. } => capabilities.get("sampling").is_some_and(Value::is_object),
            Ask::Roots { .. } => capabilities.get("roots").is_some_and(Value::is_object),
        }
    }

    fn required_capability(self) -> (&'static str, Value) {
        match self {
            Ask::Form { .. } => ("elicitation", json!({ "form": {} })),
            Ask::Sample { .. } => ("sampling", json!({})),
            Ask::Roots { .. } => ("roots", json!({})),
        }
    }

    /// The embedded request (`method` + `params`).
    fn request(self) -> Value {
        match self {
            Ask::Form { message, field, kind, .. } => {
                let property = match kind {
                    FieldKind::Text => json!({ "type": "string", "maxLength": ANSWER_CHARS_MAX }),
                    FieldKind::Boolean => json!({ "type": "boolean" }),
                };
                json!({
                    "method": "elicitation/create",
                    "params": {
                        "mode": "form",
                        "message": message,
                        "requestedSchema": { "type": "object", "properties": { field: property }, "required": [field] },
                    },
                })
            }
            Ask::Sample { question, max_tokens, .. } => json!({
                "method": "sampling/createMessage",
                "params": {
                    "messages": [{ "role": "user", "content": { "type": "text", "text": question } }],
                    "maxTokens": max_tokens,
                },
            }),
            Ask::Roots { .. } => json!({ "method": "roots/list", "params": {} }),
        }
    }

    /// Server-side validation of the client's answer (client-side validation builds no trust). Returns the
    /// compact form kept in a state: `{"action":"accept","value":…}`, `{"action":"decline"}`,
    /// `{"text":…,"model":…}` or `{"count":n,"uris":[…]}`.
    fn validate(self, answer: &Value) -> Result<Value, RpcError> {
        let key = self.key();
        let invalid = |problem: String| {
            RpcError::invalid_params(Reason::ResponseInvalid, format!("inputResponses.{key} {problem}")).with_detail("inputKey", json!(key))
        };
        let Value::Object(answer) = answer else {
            return Err(invalid("must be an object (the result of the request it answers)".into()));
        };
        match self {
            Ask::Form { field, kind, .. } => {
                let action = answer.get("action").and_then(Value::as_str);
                match action {
                    Some("decline") | Some("cancel") => return Ok(json!({ "action": action })),
                    Some("accept") => {}
                    _ => return Err(invalid("needs action accept, decline or cancel".into())),
                }
                let Some(Value::Object(content)) = answer.get("content") else {
                    return Err(invalid("accepts without content; content is required with accept".into()));
                };
                if let Some(unknown) = content.keys().find(|name| name.as_str() != field) {
                    return Err(invalid(format!("content has a field the form did not ask for: {unknown:?}")));
                }
                let value = match (kind, content.get(field)) {
                    (FieldKind::Text, Some(Value::String(text))) if text.chars().count() <= ANSWER_CHARS_MAX => json!(text),
                    (FieldKind::Boolean, Some(Value::Bool(flag))) => json!(flag),
                    _ => {
                        let expected = match kind {
                            FieldKind::Text => format!("a string of at most {ANSWER_CHARS_MAX} characters"),
                            FieldKind::Boolean => "a boolean".into(),
                        };
                        return Err(invalid(format!("content.{field} is required and must be {expected}")));
                    }
                };
                Ok(json!({ "action": "accept", "value": value }))
            }
            Ask::Sample { .. } => {
                if answer.get("role").and_then(Value::as_str) != Some("assistant") {
                    return Err(invalid("must be a sampling result with role \"assistant\"".into()));
                }
                let Some(model) = answer.get("model").and_then(Value::as_str) else {
                    return Err(invalid("must name the model that answered".into()));
                };
                let text = match answer.get("content") {
                    Some(Value::Object(content)) => {
                        sampled_text(content).ok_or_else(|| invalid("content must be a content block with a type".into()))?
                    }
                    Some(Value::Array(blocks)) => blocks
                        .iter()
                        .filter_map(Value::as_object)
                        .map(sampled_text)
                        .collect::<Option<Vec<String>>>()
                        .map(|parts| parts.join(" "))
                        .ok_or_else(|| invalid("content blocks must each have a type".into()))?,
                    _ => return Err(invalid("needs content".into())),
                };
                Ok(json!({ "text": truncate(&text, SAMPLED_TEXT_CHARS_MAX), "model": truncate(model, MODEL_CHARS_MAX) }))
            }
            Ask::Roots { .. } => {
                let Some(Value::Array(roots)) = answer.get("roots") else {
                    return Err(invalid("must be a roots/list result with a roots array".into()));
                };
                if roots.len() > ROOTS_MAX {
                    return Err(invalid(format!("reports more than {ROOTS_MAX} roots")));
                }
                let mut uris = Vec::new();
                for root in roots {
                    match root.get("uri").and_then(Value::as_str) {
                        Some(uri) if uri.starts_with("file://") && uri.len() <= URI_CHARS_MAX => uris.push(uri.to_string()),
                        _ => return Err(invalid("has a root whose uri is not a file:// URI".into())),
                    }
                }
                let shown: Vec<String> = uris.iter().take(ROOTS_SHOWN_MAX).map(|uri| truncate(uri, 200)).collect();
                Ok(json!({ "count": uris.len(), "uris": shown }))
            }
        }
    }
}

fn sampled_text(content: &Map<String, Value>) -> Option<String> {
    match content.get("type").and_then(Value::as_str)? {
        "text" => Some(content.get("text").and_then(Value::as_str).unwrap_or("").to_string()),
        other => Some(format!("[{other} content]")),
    }
}

fn truncate(text: &str, chars_max: usize) -> String {
    text.chars().take(chars_max).collect()
}

const ASK_NAME: Ask = Ask::Form { key: "user_name", message: "What is your name?", field: "name", kind: FieldKind::Text };
const ASK_CAPITAL: Ask = Ask::Sample { key: "capital_question", question: "What is the capital of France?", max_tokens: 100 };
const ASK_ROOTS: Ask = Ask::Roots { key: "client_roots" };
const ASK_CONFIRM: Ask = Ask::Form { key: "confirm", message: "Please confirm", field: "ok", kind: FieldKind::Boolean };
const ASK_GREETING: Ask = Ask::Sample { key: "greeting", question: "Generate a greeting", max_tokens: 50 };
const ASK_STEP1: Ask = Ask::Form { key: "step1", message: "Step 1: What is your name?", field: "name", kind: FieldKind::Text };
const ASK_STEP2: Ask = Ask::Form { key: "step2", message: "Step 2: What is your favorite color?", field: "color", kind: FieldKind::Text };
const ASK_ELICIT_INPUT: Ask = Ask::Form { key: "elicit_input", message: "Elicitation input", field: "value", kind: FieldKind::Text };
const ASK_SAMPLE_INPUT: Ask = Ask::Sample { key: "sample_input", question: "Sample request", max_tokens: 50 };
const ASK_HELLO: Ask = Ask::Sample { key: "sample", question: "Say hello in one word.", max_tokens: 20 };
const ASK_CONTINUE: Ask =
    Ask::Form { key: "continue", message: "The operation streamed its progress. Continue?", field: "ok", kind: FieldKind::Boolean };
const ASK_CONTEXT: Ask =
    Ask::Form { key: "user_context", message: "What context should the prompt use?", field: "context", kind: FieldKind::Text };

impl FlowKind {
    /// Every question this flow may ask, so a state's pending keys resolve to their definitions.
    fn catalog(self) -> &'static [Ask] {
        match self {
            FlowKind::MissingCapability => &[ASK_HELLO],
            FlowKind::StreamingElicitation => &[ASK_CONTINUE],
            FlowKind::Elicitation => &[ASK_NAME],
            FlowKind::Sampling => &[ASK_CAPITAL],
            FlowKind::ListRoots => &[ASK_ROOTS],
            FlowKind::RequestState | FlowKind::TamperedState => &[ASK_CONFIRM],
            FlowKind::MultipleInputs => &[ASK_NAME, ASK_GREETING, ASK_ROOTS],
            FlowKind::MultiRound => &[ASK_STEP1, ASK_STEP2],
            FlowKind::Capabilities => &[ASK_ELICIT_INPUT, ASK_SAMPLE_INPUT],
            FlowKind::Prompt => &[ASK_CONTEXT],
        }
    }

    /// Whether rounds carry a sealed `requestState`. Unsealed flows have a single round and need no state:
    /// the answer itself is everything the retry needs.
    fn is_sealed(self) -> bool {
        matches!(
            self,
            FlowKind::RequestState | FlowKind::MultipleInputs | FlowKind::MultiRound | FlowKind::TamperedState | FlowKind::Capabilities
        )
    }

    /// What to ask first. Only the capabilities flow looks at the request's capabilities here; the others
    /// ask what they need and fail with -32021 when it is not declared.
    fn first_asks(self, meta: &RequestMeta) -> Vec<Ask> {
        match self {
            FlowKind::MultiRound => vec![ASK_STEP1],
            FlowKind::Capabilities => self.catalog().iter().copied().filter(|ask| ask.is_declared(meta)).collect(),
            _ => self.catalog().to_vec(),
        }
    }

    /// What to ask once everything asked so far is answered.
    fn next_asks(self, answers: &BTreeMap<String, Value>) -> Vec<Ask> {
        match self {
            FlowKind::MultiRound if !answers.contains_key(ASK_STEP2.key()) => vec![ASK_STEP2],
            _ => Vec::new(),
        }
    }
}

/// What a fixture `requestState` asserts. `fixture` (always [`FIXTURE_SERVER_NAME`]) and `target` are
/// fields the notes server's claims lack, and `deny_unknown_fields` makes each refuse the other's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FlowState {
    fixture: String,
    principal: String,
    method: String,
    /// The tool or prompt name.
    target: String,
    arguments_digest: String,
    /// Keys asked in the `input_required` this state came with.
    pending: Vec<String>,
    /// Validated answers of earlier rounds, by input key.
    answers: BTreeMap<String, Value>,
    issued_at_ms: u64,
    expires_at_ms: u64,
    nonce: String,
}

/// The request a flow runs for.
struct FlowCall<'a> {
    kind: FlowKind,
    method: &'static str,
    target: &'a str,
    arguments_digest: String,
    /// Present only for prompts/get: the prompt's arguments (none for the fixture's MRTR prompt).
    params: &'a Value,
}

// ---------------------------------------------------------------------------------------------------------
// Service

#[async_trait]
impl Service for ConformanceFixture {
    fn has_method(&self, method: &str) -> bool {
        METHODS.contains(&method)
    }

    async fn call(&self, context: RequestContext<'_>, method: &str, params: &Value) -> Result<Value, RpcError> {
        self.respond(context, method, params).await.map(|response| response.result)
    }

    async fn respond(&self, context: RequestContext<'_>, method: &str, params: &Value) -> Result<ServiceResponse, RpcError> {
        match method {
            "server/discover" => Ok(ServiceResponse::result(self.discover())),
            "tools/list" => Ok(ServiceResponse::result(self.tools_list())),
            "tools/call" => self.tools_call(context, params).await,
            "prompts/list" => Ok(ServiceResponse::result(self.prompts_list())),
            "prompts/get" => self.prompts_get(context, params).map(ServiceResponse::result),
            "resources/list" => Ok(ServiceResponse::result(self.resources_list())),
            "resources/templates/list" => Ok(ServiceResponse::result(self.templates_list())),
            "resources/read" => self.resources_read(params).map(ServiceResponse::result),
            "completion/complete" => self.complete(params).map(ServiceResponse::result),
            "subscriptions/listen" => self.listen(context, params),
            other => Err(RpcError::method_not_found(other)),
        }
    }
}

impl ConformanceFixture {
    fn info(&self) -> &ServerInfo {
        &self.config.server_info
    }

    fn text_result(&self, text: &str) -> Value {
        complete(json!({ "content": [{ "type": "text", "text": text }], "isError": false }), self.info())
    }

    fn discover(&self) -> Value {
        complete_cacheable(
            json!({
                "supportedVersions": [PROTOCOL_VERSION],
                "capabilities": {
                    "tools": { "listChanged": true },
                    "prompts": { "listChanged": true },
                    "resources": {},
                    "completions": {},
                    "logging": {},
                },
                "instructions": "Conformance fixture: every tool, prompt and resource the official MCP conformance suite uses, plus MRTR flows (elicitation, sampling, roots, several inputs, several rounds, sealed and tampered state). Nothing here changes any data.",
            }),
            DISCOVER_TTL_MS,
            CacheScope::Public,
            self.info(),
        )
    }

    fn tools_list(&self) -> Value {
        let tools: Vec<Value> = TOOLS
            .iter()
            .map(|(name, _, description)| {
                json!({
                    "name": name,
                    "description": description,
                    "inputSchema": { "type": "object", "properties": {}, "additionalProperties": false },
                })
            })
            .collect();
        complete_cacheable(json!({ "tools": tools }), LIST_TTL_MS, CacheScope::Public, self.info())
    }

    async fn tools_call(&self, context: RequestContext<'_>, params: &Value) -> Result<ServiceResponse, RpcError> {
        let name = match params.get("name") {
            Some(Value::String(name)) => name.as_str(),
            _ => return Err(RpcError::invalid_params(Reason::ArgumentsInvalid, "tools/call needs params.name, a string")),
        };
        let Some((name, tool, _)) = TOOLS.iter().find(|(tool_name, _, _)| *tool_name == name) else {
            return Err(RpcError::invalid_params(Reason::UnknownTool, format!("Unknown tool: {name}")).with_detail("name", json!(name)));
        };
        let arguments_digest = no_arguments(name, params.get("arguments"))?;
        let progress = |steps: &[(u64, &str)]| -> Vec<Value> {
            match &context.meta.progress_token {
                Some(token) => steps
                    .iter()
                    .map(|(done, message)| {
                        notification(
                            "notifications/progress",
                            json!({ "progressToken": token, "progress": done, "total": 100, "message": message }),
                        )
                    })
                    .collect(),
                None => Vec::new(),
            }
        };
        let result = |value: Value| Ok(ServiceResponse::result(value));
        match tool {
            Tool::SimpleText => result(self.text_result("This is a simple text response for testing.")),
            Tool::Image => result(complete(json!({ "content": [image_content()], "isError": false }), self.info())),
            Tool::Audio => result(complete(
                json!({ "content": [{ "type": "audio", "data": WAV_BASE64, "mimeType": "audio/wav" }], "isError": false }),
                self.info(),
            )),
            Tool::EmbeddedResource => result(complete(
                json!({ "content": [{ "type": "resource", "resource": { "uri": "test://embedded-resource", "mimeType": "text/plain", "text": "This is an embedded resource content." } }], "isError": false }),
                self.info(),
            )),
            Tool::MultipleContent => result(complete(
                json!({
                    "content": [
                        { "type": "text", "text": "Multiple content types test:" },
                        image_content(),
                        { "type": "resource", "resource": { "uri": "test://mixed-content-resource", "mimeType": "application/json", "text": "{\"test\":\"data\",\"value\":123}" } },
                    ],
                    "isError": false,
                }),
                self.info(),
            )),
            Tool::ErrorHandling => result(complete(
                json!({ "content": [{ "type": "text", "text": "This tool intentionally returns an error for testing" }], "isError": true }),
                self.info(),
            )),
            Tool::Progress => {
                let notifications = progress(&[(0, "Started"), (50, "Halfway"), (100, "Done")]);
                let text = if notifications.is_empty() {
                    "Done. The request carried no progressToken, so no progress was reported."
                } else {
                    "Done. Progress 0, 50 and 100 of 100 was reported on this request's stream."
                };
                Ok(ServiceResponse::with_notifications(notifications, self.text_result(text)))
            }
            Tool::Logging => {
                let level = read_log_level(params)?;
                let messages = [
                    (LogLevel::Debug, "test_logging_tool started"),
                    (LogLevel::Info, "test_logging_tool is working"),
                    (LogLevel::Warning, "test_logging_tool emits this warning on purpose"),
                ];
                let notifications: Vec<Value> = match level {
                    Some(threshold) => messages
                        .iter()
                        .filter(|(message_level, _)| *message_level >= threshold)
                        .map(|(message_level, text)| {
                            notification(
                                "notifications/message",
                                json!({ "level": message_level.as_str(), "logger": "test_logging_tool", "data": text }),
                            )
                        })
                        .collect(),
                    None => Vec::new(),
                };
                let text = match level {
                    Some(threshold) => format!("Sent {} log message(s) at or above {}.", notifications.len(), threshold.as_str()),
                    None => "No log messages: this request did not opt in with _meta io.modelcontextprotocol/logLevel.".to_string(),
                };
                Ok(ServiceResponse::with_notifications(notifications, self.text_result(&text)))
            }
            Tool::TriggerToolChange => {
                self.changes.publish(ListChanged::Tools);
                result(self.text_result("Announced notifications/tools/list_changed to open subscriptions that asked for it."))
            }
            Tool::TriggerPromptChange => {
                self.changes.publish(ListChanged::Prompts);
                result(self.text_result("Announced notifications/prompts/list_changed to open subscriptions that asked for it."))
            }
            Tool::Flow(kind) => {
                let notifications = match kind {
                    FlowKind::StreamingElicitation => progress(&[(0, "Started"), (100, "Waiting for confirmation")]),
                    _ => Vec::new(),
                };
                let call = FlowCall { kind: *kind, method: "tools/call", target: name, arguments_digest, params };
                let result = self.run_flow(context, &call)?;
                Ok(ServiceResponse::with_notifications(notifications, result))
            }
        }
    }

    fn prompts_list(&self) -> Value {
        let prompts: Vec<Value> = PROMPTS
            .iter()
            .map(|(name, _, description, arguments)| {
                let mut prompt = json!({ "name": name, "description": description });
                if !arguments.is_empty() {
                    prompt["arguments"] = arguments
                        .iter()
                        .map(|(argument, description, required)| json!({ "name": argument, "description": description, "required": required }))
                        .collect();
                }
                prompt
            })
            .collect();
        complete_cacheable(json!({ "prompts": prompts }), LIST_TTL_MS, CacheScope::Public, self.info())
    }

    fn prompts_get(&self, context: RequestContext<'_>, params: &Value) -> Result<Value, RpcError> {
        let name = match params.get("name") {
            Some(Value::String(name)) => name.as_str(),
            _ => return Err(RpcError::invalid_params(Reason::ArgumentsInvalid, "prompts/get needs params.name, a string")),
        };
        let Some((name, prompt, description, declared)) = PROMPTS.iter().find(|(prompt_name, ..)| *prompt_name == name) else {
            return Err(RpcError::invalid_params(Reason::UnknownPrompt, format!("Unknown prompt: {name}")).with_detail("name", json!(name)));
        };
        let arguments = prompt_arguments(name, declared, params.get("arguments"))?;
        let user = |content: Value| json!({ "role": "user", "content": content });
        let text = |text: String| json!({ "type": "text", "text": text });
        let messages = match prompt {
            Prompt::Simple => vec![user(text("This is a simple prompt for testing.".into()))],
            Prompt::WithArguments => {
                vec![user(text(format!("Prompt with arguments: arg1='{}', arg2='{}'", arguments["arg1"], arguments["arg2"])))]
            }
            Prompt::EmbeddedResource => vec![
                user(
                    json!({ "type": "resource", "resource": { "uri": arguments["resourceUri"], "mimeType": "text/plain", "text": "Embedded resource content for testing." } }),
                ),
                user(text("Please process the embedded resource above.".into())),
            ],
            Prompt::Image => vec![user(image_content()), user(text("Please analyze the image above.".into()))],
            Prompt::InputRequired => {
                let digest = digest_hex(&Value::Object(arguments.iter().map(|(k, v)| (k.clone(), json!(v))).collect()));
                let call = FlowCall { kind: FlowKind::Prompt, method: "prompts/get", target: name, arguments_digest: digest, params };
                return self.run_flow(context, &call);
            }
        };
        Ok(complete(json!({ "description": description, "messages": messages }), self.info()))
    }

    fn resources_list(&self) -> Value {
        complete_cacheable(
            json!({ "resources": [
                { "uri": STATIC_TEXT_URI, "name": "static-text", "title": "Static text", "description": "A fixed text resource.", "mimeType": "text/plain" },
                { "uri": STATIC_BINARY_URI, "name": "static-binary", "title": "Static binary", "description": "A fixed binary resource (a 1x1 PNG).", "mimeType": "image/png" },
            ] }),
            LIST_TTL_MS,
            CacheScope::Public,
            self.info(),
        )
    }

    fn templates_list(&self) -> Value {
        complete_cacheable(
            json!({ "resourceTemplates": [{
                "uriTemplate": TEMPLATE_URI,
                "name": "template-data",
                "title": "Data by id",
                "description": "JSON data for any id of 1 to 64 letters, digits, '-' or '_'.",
                "mimeType": "application/json",
            }] }),
            LIST_TTL_MS,
            CacheScope::Public,
            self.info(),
        )
    }

    fn resources_read(&self, params: &Value) -> Result<Value, RpcError> {
        let Some(uri) = params.get("uri").and_then(Value::as_str) else {
            return Err(RpcError::invalid_params(Reason::ArgumentsInvalid, "resources/read needs params.uri, a string"));
        };
        let contents = if uri == STATIC_TEXT_URI {
            json!({ "uri": uri, "mimeType": "text/plain", "text": "This is the content of the static text resource." })
        } else if uri == STATIC_BINARY_URI {
            json!({ "uri": uri, "mimeType": "image/png", "blob": PNG_BASE64 })
        } else if let Some(id) = template_id(uri) {
            let data = json!({ "id": id, "templateTest": true, "data": format!("Data for ID: {id}") });
            json!({ "uri": uri, "mimeType": "application/json", "text": data.to_string() })
        } else {
            return Err(RpcError::invalid_params(Reason::ResourceNotFound, "Resource not found")
                .with_detail("uri", json!(truncate(uri, URI_CHARS_MAX))));
        };
        Ok(complete_cacheable(json!({ "contents": [contents] }), LIST_TTL_MS, CacheScope::Public, self.info()))
    }

    fn complete(&self, params: &Value) -> Result<Value, RpcError> {
        let invalid = |message: String| RpcError::invalid_params(Reason::ArgumentsInvalid, message);
        let reference = params.get("ref").ok_or_else(|| invalid("completion/complete needs params.ref".into()))?;
        let argument_name = params.pointer("/argument/name").and_then(Value::as_str);
        let argument_value = params.pointer("/argument/value").and_then(Value::as_str);
        let (Some(argument_name), Some(prefix)) = (argument_name, argument_value) else {
            return Err(invalid("completion/complete needs params.argument {name, value}, both strings".into()));
        };
        let candidates: &[&str] = match (reference.get("type").and_then(Value::as_str), argument_name) {
            (Some("ref/prompt"), argument) => {
                let name = reference.get("name").and_then(Value::as_str).unwrap_or("");
                match (name, argument) {
                    ("test_prompt_with_arguments", "arg1") => &["test", "testValue1", "testing", "hello"],
                    ("test_prompt_with_arguments", "arg2") => &["testValue2", "world", "wonder"],
                    ("test_prompt_with_embedded_resource", "resourceUri") => {
                        &[STATIC_TEXT_URI, STATIC_BINARY_URI, "test://example-resource"]
                    }
                    _ if PROMPTS.iter().any(|p| p.0 == name) => {
                        return Err(invalid(format!("prompt {name} has no argument {argument:?} to complete")));
                    }
                    _ => return Err(RpcError::invalid_params(Reason::UnknownPrompt, format!("Unknown prompt: {name}"))),
                }
            }
            (Some("ref/resource"), "id") if reference.get("uri").and_then(Value::as_str) == Some(TEMPLATE_URI) => &["1", "2", "3", "123"],
            (Some("ref/resource"), argument) => {
                return Err(invalid(format!(
                    "no resource template with a variable {argument:?} at that uri; the template is {TEMPLATE_URI}"
                )));
            }
            _ => return Err(invalid("params.ref.type must be ref/prompt or ref/resource".into())),
        };
        let lower = prefix.to_lowercase();
        let values: Vec<&str> =
            candidates.iter().copied().filter(|value| value.to_lowercase().starts_with(&lower)).take(COMPLETION_VALUES_MAX).collect();
        Ok(complete(json!({ "completion": { "values": values, "total": values.len(), "hasMore": false } }), self.info()))
    }

    /// `subscriptions/listen`: acknowledge the honoured part of the filter, then forward list changes.
    fn listen(&self, context: RequestContext<'_>, params: &Value) -> Result<ServiceResponse, RpcError> {
        let Some(Value::Object(filter)) = params.get("notifications") else {
            return Err(RpcError::invalid_params(Reason::ArgumentsInvalid, "subscriptions/listen needs params.notifications, an object"));
        };
        let wants = |key: &str| filter.get(key) == Some(&Value::Bool(true));
        let mut honoured = Map::new();
        let mut kinds = Vec::new();
        for (key, kind) in [("toolsListChanged", ListChanged::Tools), ("promptsListChanged", ListChanged::Prompts)] {
            if wants(key) {
                honoured.insert(key.into(), json!(true));
                kinds.push(kind);
            }
        }
        let subscription_id = context.id.to_json();
        // Subscribe before acknowledging: a change announced right after the acknowledgement is not lost.
        let subscription = self.changes.subscribe();
        let acknowledged = notification(
            "notifications/subscriptions/acknowledged",
            json!({ "_meta": { KEY_SUBSCRIPTION_ID: subscription_id }, "notifications": honoured }),
        );
        let mut result = complete(json!({}), self.info());
        result["_meta"][KEY_SUBSCRIPTION_ID] = subscription_id.clone();
        let feed = ListChangedFeed { subscription, kinds, subscription_id };
        Ok(ServiceResponse { notifications: vec![acknowledged], result, feed: Some(Box::new(feed)) })
    }

    /// The MRTR engine: open and check the state, validate the answers to what was asked, then finish,
    /// ask what is still missing, or ask the next round.
    fn run_flow(&self, context: RequestContext<'_>, call: &FlowCall<'_>) -> Result<Value, RpcError> {
        let params = call.params;
        let request_state = match params.get("requestState") {
            None => None,
            Some(Value::String(state)) => Some(state.as_str()),
            Some(_) => return Err(RpcError::invalid_params(Reason::StateMalformed, "requestState must be a string")),
        };
        let responses = match params.get("inputResponses") {
            None => None,
            Some(Value::Object(responses)) => Some(responses),
            Some(_) => {
                return Err(RpcError::invalid_params(Reason::ResponseInvalid, "inputResponses must be an object keyed by input request"))
            }
        };
        let (asked, mut answers) = match (request_state, responses) {
            (Some(state), Some(_)) => {
                let state = self.open_state(context, call, state)?;
                let asked = state
                    .pending
                    .iter()
                    .map(|key| call.kind.catalog().iter().copied().find(|ask| ask.key() == key))
                    .collect::<Option<Vec<Ask>>>()
                    .ok_or_else(|| RpcError::invalid_params(Reason::StateMismatch, "requestState names a question this flow never asks"))?;
                (asked, state.answers)
            }
            (Some(_), None) => {
                return Err(RpcError::invalid_params(
                    Reason::ContinuationUnpaired,
                    "requestState was sent without inputResponses; answer the input requests, or start over without requestState",
                ));
            }
            (None, Some(_)) if call.kind.is_sealed() => {
                return Err(RpcError::invalid_params(
                    Reason::ContinuationUnpaired,
                    "inputResponses were sent without the requestState they answer; echo the requestState you were given",
                ));
            }
            (None, _) => (call.kind.first_asks(context.meta), BTreeMap::new()),
        };
        // Answers to questions not asked are ignored (SEP-2322: ignore what you do not recognize).
        let mut unanswered = Vec::new();
        for ask in &asked {
            match responses.and_then(|responses| responses.get(ask.key())) {
                Some(answer) => {
                    answers.insert(ask.key().to_string(), ask.validate(answer)?);
                }
                None => unanswered.push(*ask),
            }
        }
        if let Some((key, refusal)) = answers.iter().find_map(|(key, answer)| {
            answer.get("action").and_then(Value::as_str).filter(|action| *action != "accept").map(|action| (key, action))
        }) {
            let verb = if refusal == "decline" { "declined" } else { "cancelled" };
            return Ok(self.finish_refused(call, key, verb));
        }
        let to_ask = if unanswered.is_empty() { call.kind.next_asks(&answers) } else { unanswered };
        if to_ask.is_empty() {
            return Ok(self.finish(call, &answers));
        }
        let missing: Map<String, Value> = to_ask
            .iter()
            .filter(|ask| !ask.is_declared(context.meta))
            .map(|ask| {
                let (name, value) = ask.required_capability();
                (name.to_string(), value)
            })
            .collect();
        if !missing.is_empty() {
            return Err(RpcError::missing_capability(
                Value::Object(missing),
                format!(
                    "{} needs client capabilities this request does not declare; declare them in this request's clientCapabilities",
                    call.target
                ),
            ));
        }
        let requests: Map<String, Value> = to_ask.iter().map(|ask| (ask.key().to_string(), ask.request())).collect();
        let state = if call.kind.is_sealed() { self.seal_state(context, call, &to_ask, answers)? } else { String::new() };
        let mut result = input_required(Value::Object(requests), &state, self.info());
        if state.is_empty() {
            if let Value::Object(map) = &mut result {
                map.remove("requestState");
            }
        }
        Ok(result)
    }

    /// Seals the next round's state. Answers are bounded, but their sum could still exceed what
    /// [`KeyRing::verify_claims`] accepts; such a state is refused here rather than minted unopenable.
    fn seal_state(
        &self,
        context: RequestContext<'_>,
        call: &FlowCall<'_>,
        asked: &[Ask],
        answers: BTreeMap<String, Value>,
    ) -> Result<String, RpcError> {
        let now_ms = self.clock.now_ms();
        let state = FlowState {
            fixture: FIXTURE_SERVER_NAME.into(),
            principal: context.principal.to_string(),
            method: call.method.into(),
            target: call.target.to_string(),
            arguments_digest: call.arguments_digest.clone(),
            pending: asked.iter().map(|ask| ask.key().to_string()).collect(),
            answers,
            issued_at_ms: now_ms,
            expires_at_ms: now_ms.saturating_add(self.config.state_ttl_ms),
            nonce: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(self.nonces.nonce()),
        };
        let token = self.config.key_ring.seal_claims(&state);
        if token.len() > STATE_CHARS_MAX {
            return Err(RpcError::invalid_params(
                Reason::ResponseInvalid,
                format!("the answers so far are too long to carry in a requestState of at most {STATE_CHARS_MAX} characters; answer more briefly"),
            ));
        }
        Ok(token)
    }

    fn open_state(&self, context: RequestContext<'_>, call: &FlowCall<'_>, token: &str) -> Result<FlowState, RpcError> {
        let state: FlowState = self.config.key_ring.verify_claims(token).map_err(|error| match error {
            OpenError::Malformed => RpcError::invalid_params(Reason::StateMalformed, "requestState is not a state this server issued"),
            OpenError::Signature => RpcError::invalid_params(
                Reason::StateSignature,
                "requestState failed its integrity check (altered, or signed with a key this server does not hold)",
            ),
            OpenError::Expired => {
                RpcError::invalid_params(Reason::StateExpired, "requestState has expired; call again without it to start over")
            }
        })?;
        if state.expires_at_ms <= self.clock.now_ms() {
            return Err(RpcError::invalid_params(Reason::StateExpired, "requestState has expired; call again without it to start over"));
        }
        let bound = state.fixture == FIXTURE_SERVER_NAME
            && state.principal == context.principal
            && state.method == call.method
            && state.target == call.target
            && state.arguments_digest == call.arguments_digest;
        if !bound {
            return Err(RpcError::invalid_params(
                Reason::StateMismatch,
                "requestState belongs to another principal, method, tool, prompt or set of arguments",
            ));
        }
        Ok(state)
    }

    fn finish_refused(&self, call: &FlowCall<'_>, key: &str, verb: &str) -> Value {
        let text = format!("You {verb} the request {key:?}; {} stopped without asking anything else.", call.target);
        match call.kind {
            FlowKind::Prompt => {
                complete(json!({ "messages": [{ "role": "user", "content": { "type": "text", "text": text } }] }), self.info())
            }
            _ => self.text_result(&text),
        }
    }

    fn finish(&self, call: &FlowCall<'_>, answers: &BTreeMap<String, Value>) -> Value {
        let value = |key: &str| answers.get(key).and_then(|answer| answer.get("value")).cloned().unwrap_or(Value::Null);
        let text_of = |key: &str| match value(key) {
            Value::String(text) => text,
            other => other.to_string(),
        };
        let sampled = |key: &str| answers.get(key).and_then(|answer| answer.get("text")).and_then(Value::as_str).unwrap_or("").to_string();
        let roots = |key: &str| {
            let answer = answers.get(key);
            let count = answer.and_then(|answer| answer.get("count")).and_then(Value::as_u64).unwrap_or(0);
            let uris: Vec<&str> = answer
                .and_then(|answer| answer.get("uris"))
                .and_then(Value::as_array)
                .map(|uris| uris.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            (count, uris.join(", "))
        };
        let text = match call.kind {
            FlowKind::MissingCapability => format!("The client's model said: {}", sampled("sample")),
            FlowKind::StreamingElicitation => format!("Streaming complete; continue = {}", text_of("continue")),
            FlowKind::Elicitation => format!("Hello, {}!", text_of("user_name")),
            FlowKind::Sampling => format!("Sampling result: {}", sampled("capital_question")),
            FlowKind::ListRoots => {
                let (count, uris) = roots("client_roots");
                format!("The client reported {count} root(s): {uris}. Roots are information only; they grant no access.")
            }
            FlowKind::RequestState => format!("state-ok: requestState verified for this call; ok = {}", text_of("confirm")),
            FlowKind::MultipleInputs => {
                let (count, _) = roots("client_roots");
                format!("Name: {}; Greeting: {}; Roots: {count}", text_of("user_name"), sampled("greeting"))
            }
            FlowKind::MultiRound => format!("Multi-round complete for {} who likes {}", text_of("step1"), text_of("step2")),
            FlowKind::TamperedState => format!("integrity-ok: requestState verified; ok = {}", text_of("confirm")),
            FlowKind::Capabilities => {
                if answers.is_empty() {
                    "This request declares neither form elicitation nor sampling, so there was nothing to ask.".to_string()
                } else {
                    format!("capabilities-ok: received {}", answers.keys().cloned().collect::<Vec<_>>().join(", "))
                }
            }
            FlowKind::Prompt => {
                let text = format!("Prompt with context: {}", text_of("user_context"));
                return complete(json!({ "messages": [{ "role": "user", "content": { "type": "text", "text": text } }] }), self.info());
            }
        };
        self.text_result(&text)
    }
}

/// Forwards list changes to one `subscriptions/listen` stream: only the kinds it asked for, each tagged
/// with the subscription id (the listen request's id).
struct ListChangedFeed {
    subscription: Box<dyn ChangeSubscription>,
    kinds: Vec<ListChanged>,
    subscription_id: Value,
}

#[async_trait]
impl NotificationFeed for ListChangedFeed {
    async fn next_notification(&mut self) -> Option<Value> {
        loop {
            let change = self.subscription.next_change().await?;
            if !self.kinds.contains(&change) {
                continue;
            }
            let method = match change {
                ListChanged::Tools => "notifications/tools/list_changed",
                ListChanged::Prompts => "notifications/prompts/list_changed",
                ListChanged::Resources => "notifications/resources/list_changed",
            };
            return Some(notification(method, json!({ "_meta": { KEY_SUBSCRIPTION_ID: self.subscription_id } })));
        }
    }
}

fn image_content() -> Value {
    json!({ "type": "image", "data": PNG_BASE64, "mimeType": "image/png" })
}

/// The fixture's tools take no arguments: absent or `{}`. Returns the digest states bind to.
fn no_arguments(tool: &str, arguments: Option<&Value>) -> Result<String, RpcError> {
    match arguments {
        None => Ok(digest_hex(&json!({}))),
        Some(Value::Object(map)) if map.is_empty() => Ok(digest_hex(&json!({}))),
        Some(Value::Object(map)) => Err(RpcError::invalid_params(
            Reason::ArgumentsInvalid,
            format!("{tool} takes no arguments; unknown argument {:?}", map.keys().next().map(String::as_str).unwrap_or("")),
        )),
        Some(_) => Err(RpcError::invalid_params(Reason::ArgumentsInvalid, "arguments must be an object")),
    }
}

/// Prompt arguments: an object of strings with exactly the declared names, required ones present.
fn prompt_arguments(
    prompt: &str,
    declared: &[(&str, &str, bool)],
    arguments: Option<&Value>,
) -> Result<BTreeMap<String, String>, RpcError> {
    let invalid = |message: String| RpcError::invalid_params(Reason::ArgumentsInvalid, message);
    let map = match arguments {
        None => Map::new(),
        Some(Value::Object(map)) => map.clone(),
        Some(_) => return Err(invalid("prompt arguments must be an object of strings".into())),
    };
    let mut values = BTreeMap::new();
    for (name, value) in map {
        if !declared.iter().any(|(declared_name, ..)| *declared_name == name) {
            return Err(invalid(format!("prompt {prompt} has no argument {name:?}")));
        }
        match value {
            Value::String(text) if text.chars().count() <= ANSWER_CHARS_MAX => {
                values.insert(name, text);
            }
            _ => return Err(invalid(format!("argument {name:?} must be a string of at most {ANSWER_CHARS_MAX} characters"))),
        }
    }
    if let Some((missing, ..)) = declared.iter().find(|(name, _, required)| *required && !values.contains_key(*name)) {
        return Err(invalid(format!("prompt {prompt} needs the argument {missing:?}")));
    }
    Ok(values)
}

/// `{id}` of `test://template/{id}/data`, when the URI matches and the id is acceptable.
fn template_id(uri: &str) -> Option<&str> {
    let id = uri.strip_prefix(TEMPLATE_PREFIX)?.strip_suffix(TEMPLATE_SUFFIX)?;
    let acceptable = !id.is_empty()
        && id.len() <= TEMPLATE_ID_CHARS_MAX
        && id.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_');
    acceptable.then_some(id)
}
