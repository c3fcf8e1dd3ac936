//! The 2025-11-25 adapter: serves a legacy client (one that opens with `initialize`) from the unchanged
//! 2026-07-28 servers, strictly beside them.
//!
//! Nothing here decides anything a modern server decides. A legacy request is rewritten into the modern
//! request a conforming 2026-07-28 client would send (the session's negotiated capabilities in `_meta`) and
//! handed to the same [`Service`] through the same pipeline ([`handle_exchange`]); so authorization,
//! containment, the live re-check and the one claim in the shared replay store are the modern server's own
//! code, run once. What the adapter adds is the legacy *shape*:
//!
//! - `initialize` / `notifications/initialized`, `ping`, `logging/setLevel` (the level travels into `_meta`);
//! - sessions ([`session`]): over HTTP an unguessable `Mcp-Session-Id`, minted by a legacy `initialize` and
//!   honoured only for legacy requests, bounded in number and lifetime by the [`Clock`] port; over stdio the
//!   process itself is the session;
//! - an `input_required` result becomes real server→client requests inside the open call: each embedded
//!   `elicitation/create` (or `sampling/createMessage`, `roots/list`) is sent to the client over the
//!   [`ClientLink`], the client's answers become `inputResponses`, and the modern request is retried with the
//!   sealed `requestState`, as a modern client would retry it;
//! - roots: when a legacy client declares `roots`, a call naming a `workspaceUri` first asks it `roots/list`
//!   and is refused unless the workspace lies inside one of them. Roots only ever *narrow*: a workspace inside
//!   a root still goes to the server's own authorization, which alone can allow it.
//!
//! A dual-era server (`serve --eras both`) sends a request here only when it is legacy: over HTTP
//! ([`is_legacy_http`]) an `initialize`, or anything carrying `Mcp-Session-Id` without the modern
//! `MCP-Protocol-Version`; over stdio, every message after an `initialize` opened the process. Modern
//! requests never reach this module, so they are answered byte for byte as on a modern-only server, and a
//! legacy session's capabilities can never reach a modern request.

pub mod session;

use crate::framework::pipeline::{handle_exchange, Service};
use crate::framework::ports::{Clock, NonceSource};
use crate::policy::containment::FileUri;
use crate::wire::errors::{Reason, RpcError};
use crate::wire::jsonrpc::{error_response, parse_decoded, parse_json, Incoming, RequestId};
use crate::wire::meta::{KEY_CLIENT_CAPABILITIES, KEY_CLIENT_INFO, KEY_LOG_LEVEL, KEY_PROTOCOL_VERSION, KEY_SERVER_INFO};
use crate::wire::PROTOCOL_VERSION;
use async_trait::async_trait;
use serde_json::{json, Map, Value};
use session::{Negotiated, SessionLimits, SessionRefusal, SessionTable};
use std::sync::Arc;
use tokio::sync::oneshot;

/// The legacy revision this adapter speaks, and the one it answers a version it does not know with.
pub const LEGACY_PROTOCOL_VERSION: &str = "2025-11-25";
/// The legacy revisions an `initialize` may ask for and get (older ones differ from it in nothing served here).
pub const LEGACY_PROTOCOL_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
// The transports' bound (the `cli` feature); the simulator answers in virtual time.
/// How long a real transport lets a legacy call wait for the client's answer to a request sent inside it.
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub const LEGACY_ANSWER_TIMEOUT_MS: u64 = 300_000;
/// Rounds of server→client requests one legacy call may take before it is ended with an error.
pub const LEGACY_ROUNDS_MAX: usize = 8;
/// The session key of a stdio process (its one session).
const STDIO_SESSION: &str = "stdio";
/// Server→client requests the adapter sends for an embedded input request.
const INPUT_METHODS: [&str; 3] = ["elicitation/create", "sampling/createMessage", "roots/list"];

/// Why a call that would wait on its client may not: the transport's bound of waiting calls is full.
// Only a transport (with `cli`) bounds waiting calls and so refuses one.
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParkRefused {
    /// The principal's share of waiting calls (`max` of them) is taken.
    #[error("as many of your legacy calls wait for your answers as one principal's may ({max}): answer them, then retry")]
    Principal { max: usize },
    /// The listener's waiting calls are as many as it allows.
    #[error("the server has as many legacy calls waiting for their clients as it allows; retry shortly")]
    Listener,
}

/// Where the adapter's messages to the client go, and how its answers come back (a transport's part).
#[async_trait]
pub trait ClientLink: Send + Sync {
    /// Sends one message (a notification or a server→client request) to the client, in order; false when
    /// the client is gone.
    async fn send(&self, message: Value) -> bool;
    /// Waits for the answer to a request sent, within the transport's own bound; `None` if none came (or
    /// the client went away, which ends the wait at once).
    async fn wait(&self, answer: oneshot::Receiver<Value>) -> Option<Value>;
    /// Called before the call's first request to the client: from here on the call waits on the client, and
    /// a transport that bounds work in flight moves it out of that bound into its own bound of waiting calls
    /// (so the client's answer never needs a place its own call holds). `Err` says why the call may not
    /// wait (too many of the principal's calls wait already); it is ended with that message.
    async fn park(&self) -> Result<(), ParkRefused> {
        Ok(())
    }
}

/// Which transport a message came over.
#[derive(Debug, Clone, Copy)]
pub enum Channel<'a> {
    /// An HTTP POST and the `Mcp-Session-Id` it carried.
    Http { session_id: Option<&'a str> },
    // Only the stdio transport (the `cli` feature) sends it.
    /// A line of a stdio process (the process is the session).
    #[cfg_attr(not(feature = "cli"), allow(dead_code))]
    Stdio,
}

/// The adapter's answer to one message.
#[derive(Debug, Clone, PartialEq)]
pub struct LegacyReply {
    /// The JSON-RPC response; `None` for notifications and for answers to the server's own requests.
    pub response: Option<Value>,
    pub http_status: u16,
    /// A session `initialize` just opened: HTTP returns it as `Mcp-Session-Id`.
    pub session_id: Option<String>,
}

impl LegacyReply {
    fn accepted() -> LegacyReply {
        LegacyReply { response: None, http_status: 202, session_id: None }
    }

    fn error(id: Option<&RequestId>, error: &RpcError, http_status: u16) -> LegacyReply {
        LegacyReply { response: Some(error_response(id, error)), http_status, session_id: None }
    }

    fn result(id: &RequestId, result: Value) -> LegacyReply {
        LegacyReply {
            response: Some(json!({ "jsonrpc": "2.0", "id": id.to_json(), "result": result })),
            http_status: 200,
            session_id: None,
        }
    }
}

/// An `initialize` declaring more than one session may keep: `-32602` (`payload_too_large`), no session.
fn session_too_large(id: &RequestId, sessions: &SessionTable) -> LegacyReply {
    let limits = sessions.limits();
    let error = RpcError::invalid_params(
        Reason::PayloadTooLarge,
        format!(
            "initialize declares more than a session keeps ({} bytes of capabilities and clientInfo as JSON; {} for all of a principal's sessions): declare only what you use",
            limits.session_bytes_max, limits.principal_bytes_max
        ),
    );
    LegacyReply::error(Some(id), &error, 200)
}

/// Whether an HTTP POST to a dual-era server is legacy: never when it carries the modern
/// `MCP-Protocol-Version`; otherwise when it carries `Mcp-Session-Id` or is an `initialize`.
pub fn is_legacy_http(protocol_version: Option<&str>, session_id: Option<&str>, raw: &[u8]) -> bool {
    if protocol_version == Some(PROTOCOL_VERSION) {
        return false;
    }
    session_id.is_some() || is_initialize(raw)
}

/// Whether a message is an `initialize` request (what selects legacy semantics for a stdio process).
pub fn is_initialize(raw: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Peek {
        method: Option<Value>,
        id: Option<Value>,
    }
    serde_json::from_slice::<Peek>(raw)
        .is_ok_and(|peek| peek.id.is_some() && peek.method.as_ref().and_then(Value::as_str) == Some("initialize"))
}

/// The adapter: a modern service and the legacy sessions of one instance.
pub struct LegacyAdapter {
    service: Arc<dyn Service>,
    sessions: SessionTable,
}

impl std::fmt::Debug for LegacyAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LegacyAdapter").field("sessions", &self.sessions).finish()
    }
}

impl LegacyAdapter {
    pub fn new(service: Arc<dyn Service>, limits: SessionLimits, clock: Arc<dyn Clock>, nonces: Arc<dyn NonceSource>) -> LegacyAdapter {
        LegacyAdapter { service, sessions: SessionTable::new(limits, clock, nonces) }
    }

    // A legacy client's DELETE reaches it over HTTP alone (the `cli` feature).
    /// Ends an HTTP session (a legacy client's DELETE); false when `principal` held no such session.
    #[cfg_attr(not(feature = "cli"), allow(dead_code))]
    pub fn close(&self, session_id: &str, principal: &str) -> bool {
        self.sessions.close(session_id, principal)
    }

    /// Handles one legacy message for `principal`.
    pub async fn handle(&self, principal: &str, channel: Channel<'_>, raw: &[u8], link: &dyn ClientLink) -> LegacyReply {
        if let Some(reply) = self.answer_from_client(principal, channel, raw) {
            return reply;
        }
        let message = match parse_json(raw) {
            Ok(message) => message,
            Err(rejected) => return LegacyReply::error(rejected.id.as_ref(), &rejected.error, rejected.error.http_status),
        };
        let (id, method, params) = match parse_decoded(&message, raw.len()) {
            Ok(Incoming::Request { id, method, params }) => (id, method.to_string(), params.cloned().unwrap_or_else(|| json!({}))),
            Ok(Incoming::Notification { .. }) => return LegacyReply::accepted(),
            Err(rejected) => return LegacyReply::error(rejected.id.as_ref(), &rejected.error, rejected.error.http_status),
        };
        if method == "initialize" {
            return self.initialize(principal, channel, &id, &params).await;
        }
        let key = match channel {
            Channel::Stdio => STDIO_SESSION,
            Channel::Http { session_id: Some(session_id) } => session_id,
            Channel::Http { session_id: None } => {
                let error = RpcError::invalid_request("send the Mcp-Session-Id your initialize returned (or initialize first)");
                return LegacyReply::error(Some(&id), &error, 400);
            }
        };
        let negotiated = match self.sessions.use_session(key, principal) {
            Ok(negotiated) => negotiated,
            Err(_) => return session_unknown(&id),
        };
        match method.as_str() {
            "ping" => LegacyReply::result(&id, json!({})),
            "logging/setLevel" => match params.get("level").and_then(Value::as_str) {
                Some(level) if crate::wire::meta::read_log_level(&json!({ "_meta": { KEY_LOG_LEVEL: level } })).is_ok() => {
                    self.sessions.set_log_level(key, level);
                    LegacyReply::result(&id, json!({}))
                }
                _ => LegacyReply::error(Some(&id), &RpcError::invalid_params(Reason::ArgumentsInvalid, "level must be a log level"), 200),
            },
            _ => self.call(&negotiated, key, &id, &method, params, link).await,
        }
    }

    /// A JSON-RPC response from the client: the answer to one of the server's requests of that session.
    fn answer_from_client(&self, principal: &str, channel: Channel<'_>, raw: &[u8]) -> Option<LegacyReply> {
        let value: Value = serde_json::from_slice(raw).ok()?;
        let object = value.as_object()?;
        if object.contains_key("method") || !(object.contains_key("result") || object.contains_key("error")) {
            return None;
        }
        let key = match channel {
            Channel::Stdio => STDIO_SESSION,
            Channel::Http { session_id: Some(session_id) } => session_id,
            Channel::Http { session_id: None } => {
                return Some(LegacyReply::error(None, &RpcError::invalid_request("an answer needs the Mcp-Session-Id of its session"), 400))
            }
        };
        if self.sessions.use_session(key, principal).is_err() {
            return Some(session_unknown_without_id());
        }
        let request_id = object.get("id").and_then(Value::as_str).unwrap_or("");
        // An answer nobody waits for (late, repeated, made up) is dropped: it changes nothing.
        let _delivered = self.sessions.deliver(key, principal, request_id, value.clone());
        Some(LegacyReply::accepted())
    }

    async fn initialize(&self, principal: &str, channel: Channel<'_>, id: &RequestId, params: &Value) -> LegacyReply {
        let Some(requested) = params.get("protocolVersion").and_then(Value::as_str) else {
            let error = RpcError::invalid_params(Reason::ArgumentsInvalid, "initialize needs params.protocolVersion, a string");
            return LegacyReply::error(Some(id), &error, 200);
        };
        let capabilities = match params.get("capabilities") {
            None => Map::new(),
            Some(Value::Object(capabilities)) => capabilities.clone(),
            Some(_) => {
                let error = RpcError::invalid_params(Reason::ArgumentsInvalid, "initialize params.capabilities must be an object");
                return LegacyReply::error(Some(id), &error, 200);
            }
        };
        let version = LEGACY_PROTOCOL_VERSIONS.iter().find(|v| **v == requested).copied().unwrap_or(LEGACY_PROTOCOL_VERSION);
        let negotiated = Negotiated {
            principal: principal.to_string(),
            protocol_version: version.to_string(),
            capabilities,
            client_info: params.get("clientInfo").cloned(),
            log_level: None,
        };
        // A session too large to keep is refused before anything is asked of the server.
        if negotiated.bytes() > self.sessions.limits().session_bytes_max {
            return session_too_large(id, &self.sessions);
        }
        // What the server offers is what its own discover says (asked as a client with no capabilities).
        let discover = self.modern(&negotiated_without_capabilities(principal), id, "server/discover", json!({})).await;
        let Some(discovered) = discover.response.as_ref().and_then(|r| r.get("result")) else {
            return LegacyReply { response: discover.response, http_status: 200, session_id: None };
        };
        let mut offered = discovered.get("capabilities").cloned().unwrap_or_else(|| json!({}));
        offered["logging"] = json!({});
        let server_info = discovered
            .get("_meta")
            .and_then(|m| m.get(KEY_SERVER_INFO))
            .cloned()
            .unwrap_or_else(|| json!({ "name": "mcpsim", "version": env!("CARGO_PKG_VERSION") }));
        let opened = match channel {
            Channel::Stdio => self.sessions.open(Some(STDIO_SESSION), negotiated),
            Channel::Http { .. } => self.sessions.open(None, negotiated),
        };
        let session_id = match opened {
            Ok(session_id) => session_id,
            Err(SessionRefusal::TooLarge) => return session_too_large(id, &self.sessions),
            Err(_) => {
                let error = RpcError::invalid_request(
                    "this server holds as many legacy sessions (or as many bytes of them) as it allows for you; end one with DELETE or retry later, or use MCP 2026-07-28 (no sessions)",
                );
                return LegacyReply::error(Some(id), &error, 503);
            }
        };
        let mut result = json!({ "protocolVersion": version, "capabilities": offered, "serverInfo": server_info });
        if let Some(instructions) = discovered.get("instructions") {
            result["instructions"] = instructions.clone();
        }
        let mut reply = LegacyReply::result(id, result);
        if matches!(channel, Channel::Http { .. }) {
            reply.session_id = Some(session_id);
        }
        reply
    }

    /// A legacy request other than the handshake: as a modern request, with embedded input requests asked of
    /// the client for real and the request retried with the answers, until it completes.
    async fn call(
        &self,
        negotiated: &Negotiated,
        key: &str,
        id: &RequestId,
        method: &str,
        mut params: Value,
        link: &dyn ClientLink,
    ) -> LegacyReply {
        if method == "tools/call" {
            if let Some(refusal) = self.narrow_by_roots(negotiated, key, id, &params, link).await {
                return refusal;
            }
        }
        for _round in 0..LEGACY_ROUNDS_MAX {
            let exchange = self.modern(negotiated, id, method, params.clone()).await;
            for notification in &exchange.notifications {
                if !link.send(notification.clone()).await {
                    return LegacyReply::accepted();
                }
            }
            let Some(response) = exchange.response else { return LegacyReply::accepted() };
            let Some(result) = response.get("result") else {
                // Errors keep their code, message and data; over a legacy session they travel with HTTP 200.
                return LegacyReply { response: Some(response), http_status: 200, session_id: None };
            };
            if result.get("resultType").and_then(Value::as_str) != Some("input_required") {
                return LegacyReply::result(id, legacy_result(result.clone()));
            }
            let mut answers = Map::new();
            let requests = result.get("inputRequests").and_then(Value::as_object).cloned().unwrap_or_default();
            for (input_key, request) in &requests {
                let (Some(input_method), input_params) = (request.get("method").and_then(Value::as_str), request.get("params")) else {
                    return internal(id, "the server embedded an input request without a method");
                };
                if !INPUT_METHODS.contains(&input_method) {
                    return internal(id, "the server embedded an input request a legacy client cannot be asked");
                }
                match self.ask(key, input_method, input_params.cloned().unwrap_or_else(|| json!({})), link).await {
                    Ok(answer) => {
                        answers.insert(input_key.clone(), answer);
                    }
                    Err(refusal) => return LegacyReply::error(Some(id), &refusal, 200),
                }
            }
            let Value::Object(call) = &mut params else { return internal(id, "params must be an object") };
            call.insert("inputResponses".into(), Value::Object(answers));
            match result.get("requestState") {
                Some(state) => call.insert("requestState".into(), state.clone()),
                None => call.remove("requestState"),
            };
        }
        internal(id, "the server kept asking for input; the call was ended after the most rounds a legacy call may take")
    }

    /// Asks the client one server→client request and returns its result (an error answer refuses the call).
    async fn ask(&self, key: &str, method: &str, params: Value, link: &dyn ClientLink) -> Result<Value, RpcError> {
        if let Err(refused) = link.park().await {
            return Err(RpcError::invalid_request(refused.to_string()));
        }
        let (request_id, answer) = self.sessions.expect_answer(key).map_err(|refusal| match refusal {
            SessionRefusal::TooManyPending => RpcError::invalid_request("too many of this session's server requests wait for answers"),
            _ => RpcError::invalid_request("the session ended while the call was open; initialize again"),
        })?;
        let request = json!({ "jsonrpc": "2.0", "id": request_id, "method": method, "params": params });
        if !link.send(request).await {
            return Err(RpcError::invalid_request("the client went away while the server asked it something"));
        }
        let Some(answer) = link.wait(answer).await else {
            return Err(RpcError::invalid_request(format!("the client did not answer {method} in time; nothing was done")));
        };
        match answer.get("result") {
            Some(result) => Ok(result.clone()),
            None => Err(RpcError::invalid_request(format!("the client answered {method} with an error; nothing was done"))),
        }
    }

    /// Roots narrow, never widen: a declared `roots` capability makes a call naming a `workspaceUri` ask the
    /// client's roots first, and refuses it unless the workspace lies inside one. The server's own
    /// authorization still decides every call that gets through.
    async fn narrow_by_roots(
        &self,
        negotiated: &Negotiated,
        key: &str,
        id: &RequestId,
        params: &Value,
        link: &dyn ClientLink,
    ) -> Option<LegacyReply> {
        if !negotiated.capabilities.get("roots").is_some_and(Value::is_object) {
            return None;
        }
        let workspace = params.get("arguments").and_then(|a| a.get("workspaceUri")).and_then(Value::as_str)?;
        // A workspace that does not parse is the server's to refuse, with its own words.
        let workspace = FileUri::parse(workspace).ok()?;
        let roots = match self.ask(key, "roots/list", json!({}), link).await {
            Ok(listed) => listed,
            Err(refusal) => return Some(LegacyReply::error(Some(id), &refusal, 200)),
        };
        let inside = roots.get("roots").and_then(Value::as_array).is_some_and(|roots| {
            roots
                .iter()
                .filter_map(|root| root.get("uri").and_then(Value::as_str))
                .filter_map(|uri| FileUri::parse(uri).ok())
                .any(|root| root.contains(&workspace))
        });
        if inside {
            return None;
        }
        let error = RpcError::invalid_params(
            Reason::WorkspaceUnauthorized,
            "workspaceUri is outside every root your client shared; nothing was done",
        );
        Some(LegacyReply::error(Some(id), &error, 200))
    }

    /// The modern request a 2026-07-28 client with this session's capabilities would send, through the pipeline.
    async fn modern(&self, negotiated: &Negotiated, id: &RequestId, method: &str, mut params: Value) -> ModernAnswer {
        if !params.is_object() {
            params = json!({});
        }
        let mut meta = match params.get("_meta") {
            Some(Value::Object(meta)) => meta.clone(),
            _ => Map::new(),
        };
        // Whatever a legacy client wrote under the modern keys is replaced by what its session negotiated.
        meta.retain(|key, _| !key.starts_with("io.modelcontextprotocol/"));
        meta.insert(KEY_PROTOCOL_VERSION.into(), json!(PROTOCOL_VERSION));
        meta.insert(KEY_CLIENT_CAPABILITIES.into(), Value::Object(negotiated.capabilities.clone()));
        if let Some(info) = &negotiated.client_info {
            meta.insert(KEY_CLIENT_INFO.into(), info.clone());
        }
        if let Some(level) = &negotiated.log_level {
            meta.insert(KEY_LOG_LEVEL.into(), json!(level));
        }
        params["_meta"] = Value::Object(meta);
        let message = json!({ "jsonrpc": "2.0", "id": id.to_json(), "method": method, "params": params });
        let bytes = serde_json::to_vec(&message).expect("serializing a serde_json::Value cannot fail");
        let exchange = handle_exchange(&*self.service, &negotiated.principal, &bytes, None).await;
        ModernAnswer { notifications: exchange.notifications, response: exchange.reply.response }
    }
}

struct ModernAnswer {
    notifications: Vec<Value>,
    response: Option<Value>,
}

fn negotiated_without_capabilities(principal: &str) -> Negotiated {
    Negotiated {
        principal: principal.into(),
        protocol_version: LEGACY_PROTOCOL_VERSION.into(),
        capabilities: Map::new(),
        client_info: None,
        log_level: None,
    }
}

/// A modern result in the legacy shape: the same members without the 2026-07-28 result type and cache hints.
fn legacy_result(mut result: Value) -> Value {
    if let Value::Object(map) = &mut result {
        map.remove("resultType");
        map.remove("ttlMs");
        map.remove("cacheScope");
    }
    result
}

fn session_unknown(id: &RequestId) -> LegacyReply {
    let error = RpcError::invalid_request(
        "unknown or expired session on this server: send initialize again (sessions live on the instance that made them)",
    );
    LegacyReply::error(Some(id), &error, 404)
}

fn session_unknown_without_id() -> LegacyReply {
    let error = RpcError::invalid_request("unknown or expired session on this server: send initialize again");
    LegacyReply::error(None, &error, 404)
}

fn internal(id: &RequestId, message: &str) -> LegacyReply {
    LegacyReply::error(Some(id), &RpcError::new(crate::wire::errors::INTERNAL_ERROR, message), 200)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_legacy_http_requests_reach_the_adapter() {
        let initialize = br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}"#;
        let list = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#;
        assert!(is_legacy_http(None, None, initialize));
        assert!(is_legacy_http(Some("2025-11-25"), Some("abc"), list));
        assert!(!is_legacy_http(None, None, list), "no session, no handshake: the modern pipeline answers");
        assert!(!is_legacy_http(Some(PROTOCOL_VERSION), Some("abc"), list), "a modern request never reads a session");
        assert!(!is_legacy_http(Some(PROTOCOL_VERSION), None, initialize), "a modern initialize gets the modern -32601");
        assert!(!is_initialize(br#"{"jsonrpc":"2.0","method":"initialize"}"#), "a notification is not a handshake");
    }

    use crate::assembly::demo_notes_server;
    use crate::stores::deterministic::{ManualClock, SeededNonces};
    use std::sync::Mutex;

    /// A client that answers each server request with the next scripted result, from the adapter's own table.
    struct ScriptedClient {
        adapter: Arc<LegacyAdapter>,
        answers: Mutex<Vec<Value>>,
        asked: Mutex<Vec<Value>>,
    }

    #[async_trait]
    impl ClientLink for ScriptedClient {
        async fn send(&self, message: Value) -> bool {
            self.asked.lock().unwrap().push(message.clone());
            let next = if self.answers.lock().unwrap().is_empty() { None } else { Some(self.answers.lock().unwrap().remove(0)) };
            if let (Some(_), Some(result)) = (message.get("id"), next) {
                let raw = serde_json::to_vec(&json!({ "jsonrpc": "2.0", "id": message["id"], "result": result })).unwrap();
                let delivered = self.adapter.handle("alice", Channel::Stdio, &raw, self).await;
                assert_eq!(delivered.http_status, 202);
            }
            true
        }

        async fn wait(&self, mut answer: oneshot::Receiver<Value>) -> Option<Value> {
            answer.try_recv().ok()
        }
    }

    fn scripted(capabilities: Value, answers: Vec<Value>) -> ScriptedClient {
        let adapter = Arc::new(LegacyAdapter::new(
            Arc::new(demo_notes_server()),
            SessionLimits::default(),
            Arc::new(ManualClock::new(0)),
            Arc::new(SeededNonces::new(7)),
        ));
        let client = ScriptedClient { adapter, answers: Mutex::new(answers), asked: Mutex::default() };
        let initialize = json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": { "protocolVersion": "2025-11-25", "capabilities": capabilities } });
        let opened = block_on(client.adapter.handle("alice", Channel::Stdio, &serde_json::to_vec(&initialize).unwrap(), &client));
        assert_eq!(opened.response.unwrap()["result"]["protocolVersion"], "2025-11-25");
        client
    }

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(future)
    }

    fn delete(client: &ScriptedClient, workspace: &str) -> Value {
        let call = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": { "name": "notes_delete", "arguments": { "workspaceUri": workspace, "title": "TPS" } } });
        block_on(client.adapter.handle("alice", Channel::Stdio, &serde_json::to_vec(&call).unwrap(), client)).response.unwrap()
    }

    const ALICE_WORKSPACE: &str = "file:///Users/alice/Documents/Notes";

    #[test]
    fn a_legacy_confirmation_runs_the_modern_rounds_and_answers_in_the_legacy_shape() {
        let client = scripted(
            json!({ "elicitation": {} }),
            vec![json!({ "action": "accept", "content": { "note_id": "note-7", "confirm": true } })],
        );
        let done = delete(&client, ALICE_WORKSPACE);
        assert_eq!(done["result"]["structuredContent"]["noteId"], "note-7", "{done}");
        assert!(done["result"].get("resultType").is_none());
        let asked = client.asked.lock().unwrap();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0]["method"], "elicitation/create");
    }

    #[test]
    fn bytes_that_are_no_json_rpc_request_are_refused_as_the_modern_pipeline_refuses_them() {
        let client = scripted(json!({ "elicitation": {} }), vec![]);
        let handle = |raw: &[u8]| block_on(client.adapter.handle("alice", Channel::Stdio, raw, &client));
        let unparsed = handle(b"{\"jsonrpc\": \"2.0\", \"id\": 3, ");
        assert_eq!(unparsed.http_status, 400);
        let body = unparsed.response.unwrap();
        assert_eq!((body["id"].clone(), body["error"]["code"].clone()), (Value::Null, json!(-32700)), "{body}");
        let no_method = handle(br#"{"jsonrpc":"2.0","id":4,"method":""}"#);
        let body = no_method.response.unwrap();
        assert_eq!((body["id"].clone(), body["error"]["code"].clone()), (json!(4), json!(-32600)), "{body}");
        assert!(client.asked.lock().unwrap().is_empty(), "nothing was asked of the client");
    }

    #[test]
    fn a_legacy_client_without_elicitation_gets_the_modern_capability_refusal() {
        let client = scripted(json!({}), vec![]);
        assert_eq!(delete(&client, ALICE_WORKSPACE)["error"]["code"], -32021);
        assert!(client.asked.lock().unwrap().is_empty(), "nothing was asked of the client");
    }

    #[test]
    fn roots_only_narrow() {
        let bob = "file:///Users/bob/Notes";
        let client = scripted(json!({ "elicitation": {}, "roots": {} }), vec![json!({ "roots": [{ "uri": bob }] })]);
        let refused = delete(&client, bob);
        assert_eq!(refused["error"]["data"]["reason"], "workspace_unauthorized", "bob's workspace in the roots authorizes nothing");
        assert!(
            refused["error"]["message"].as_str().unwrap().contains("not a workspace you are authorized"),
            "the server's own refusal: {refused}"
        );
        let client = scripted(json!({ "elicitation": {}, "roots": {} }), vec![json!({ "roots": [] })]);
        let refused = delete(&client, ALICE_WORKSPACE);
        assert!(refused["error"]["message"].as_str().unwrap().contains("outside every root"), "{refused}");
    }

    #[test]
    fn a_client_that_does_not_answer_ends_the_call_and_nothing_is_consumed() {
        let client = scripted(json!({ "elicitation": {} }), vec![]);
        let ended = delete(&client, ALICE_WORKSPACE);
        assert!(ended["error"]["message"].as_str().unwrap().contains("did not answer elicitation/create"), "{ended}");
        client.answers.lock().unwrap().push(json!({ "action": "accept", "content": { "note_id": "note-7", "confirm": true } }));
        assert_eq!(delete(&client, ALICE_WORKSPACE)["result"]["structuredContent"]["noteId"], "note-7", "the note was still there");
    }

    #[test]
    fn stray_answers_and_other_principals_reach_nothing() {
        let client = scripted(json!({ "elicitation": {} }), vec![]);
        // The answer arrives for a request nobody asked: dropped.
        let stray = serde_json::to_vec(&json!({ "jsonrpc": "2.0", "id": "mcpsim-99", "result": {} })).unwrap();
        let dropped = block_on(client.adapter.handle("alice", Channel::Stdio, &stray, &client));
        assert_eq!((dropped.response, dropped.http_status), (None, 202));
        // Bob's process has no session: it cannot call as alice's.
        let ping = serde_json::to_vec(&json!({ "jsonrpc": "2.0", "id": 3, "method": "ping" })).unwrap();
        let refused = block_on(client.adapter.handle("bob", Channel::Stdio, &ping, &client));
        assert_eq!(refused.http_status, 404);
    }

    #[test]
    fn legacy_results_lose_only_the_modern_members() {
        let modern = json!({ "resultType": "complete", "ttlMs": 5, "cacheScope": "public", "tools": [], "_meta": { "x": 1 } });
        assert_eq!(legacy_result(modern), json!({ "tools": [], "_meta": { "x": 1 } }));
    }
}
