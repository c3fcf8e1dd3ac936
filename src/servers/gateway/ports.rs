//! What the gateway needs from the world, as traits: its backends, the audit sink, the shared rate-limit
//! counters and the current pins. (The replay store, clock and nonces are the shared ports of
//! [`crate::framework::ports`].)
//!
//! In-process implementations live here ([`LocalBackend`]) and in `stores::gateway`; the simulator provides
//! channel-backed ones, so every backend call, audit append and rate-limit check is a message there.

use crate::framework::pipeline::{RequestContext, Service};
use crate::framework::ports::StoreError;
use crate::policy::pinning::PinFile;
use crate::servers::gateway::audit::AuditRecord;
use crate::wire::errors::RpcError;
use crate::wire::meta::{RequestMeta, KEY_CLIENT_CAPABILITIES, KEY_PROTOCOL_VERSION, KEY_SERVER_INFO};
use crate::wire::{RequestId, PROTOCOL_VERSION};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// The `_meta` key that carries an idempotency key on a forwarded `tools/call`.
pub(crate) const IDEMPOTENCY_KEY_META: &str = "io.mcpsim/idempotencyKey";
/// The principal name the gateway uses for its own requests (descriptor listings), which act for nobody.
pub(crate) const GATEWAY_PRINCIPAL: &str = "mcpsim-gateway";

/// A backend's answer to `tools/list`: its self-reported identity and its descriptors exactly as published.
/// The descriptors are shared, not copied: the gateway reads one per call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolListing {
    pub server_name: String,
    pub server_version: String,
    pub tools: Arc<Vec<Value>>,
}

/// An in-process backend's current listing, read without building a `tools/list` result. It must be exactly
/// what the backend's `tools/list` returns at that moment (tested for our backends).
pub trait LiveListing: Send + Sync {
    fn live_listing(&self) -> ToolListing;
}

/// One forwarded call, in the backend's own names.
#[derive(Debug, Clone, Copy)]
pub struct BackendCall<'a> {
    /// The authenticated principal the gateway acts for.
    pub principal: &'a str,
    /// The backend's unqualified tool name.
    pub tool: &'a str,
    pub arguments: &'a Map<String, Value>,
    /// Passed for confirmed calls: the confirmation's nonce, so a re-driven call runs at most once.
    pub idempotency_key: Option<&'a str>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BackendError {
    /// Not reached, or no answer came back: the call may or may not have run.
    #[error("the backend could not be reached or did not answer: {0}")]
    Unreachable(String),
    /// The backend answered with a JSON-RPC error.
    #[error("the backend refused the call: {0}")]
    Refused(RpcError),
}

/// A backend MCP server as the gateway sees it.
#[async_trait]
pub trait Backend: Send + Sync {
    /// The backend's current descriptors (they may change between any two calls: that is a rug pull).
    async fn list_tools(&self) -> Result<ToolListing, BackendError>;

    /// Runs one tool; returns the backend's `tools/call` result.
    async fn call_tool(&self, call: BackendCall<'_>) -> Result<Value, BackendError>;
}

/// A backend running in this process: any [`Service`] of ours, called without serialization. Listings go
/// through its `tools/list`, or, when it offers one, straight to its `LiveListing` snapshot.
pub struct LocalBackend {
    service: Arc<dyn Service>,
    live: Option<Arc<dyn LiveListing>>,
}

impl LocalBackend {
    pub fn new(service: Arc<dyn Service>) -> Self {
        LocalBackend { service, live: None }
    }

    pub fn with_live_listing(service: Arc<dyn Service>, live: Arc<dyn LiveListing>) -> Self {
        LocalBackend { service, live: Some(live) }
    }
}

fn backend_meta() -> RequestMeta<'static> {
    RequestMeta {
        protocol_version: PROTOCOL_VERSION,
        client_capabilities: std::borrow::Cow::Owned(Map::new()),
        client_info: None,
        progress_token: None,
    }
}

fn meta_params() -> Value {
    json!({ "_meta": { KEY_PROTOCOL_VERSION: PROTOCOL_VERSION, KEY_CLIENT_CAPABILITIES: {} } })
}

#[async_trait]
impl Backend for LocalBackend {
    async fn list_tools(&self) -> Result<ToolListing, BackendError> {
        if let Some(live) = &self.live {
            return Ok(live.live_listing());
        }
        let meta = backend_meta();
        let id = RequestId::String("gateway-list".into());
        let context = RequestContext { principal: GATEWAY_PRINCIPAL, id: &id, meta: &meta };
        let result = self.service.call(context, "tools/list", &meta_params()).await.map_err(BackendError::Refused)?;
        listing_from_result(result)
    }

    async fn call_tool(&self, call: BackendCall<'_>) -> Result<Value, BackendError> {
        let meta = backend_meta();
        let id = RequestId::String("gateway-call".into());
        let context = RequestContext { principal: call.principal, id: &id, meta: &meta };
        let mut meta = Map::new();
        meta.insert(KEY_PROTOCOL_VERSION.into(), Value::String(PROTOCOL_VERSION.into()));
        meta.insert(KEY_CLIENT_CAPABILITIES.into(), Value::Object(Map::new()));
        if let Some(key) = call.idempotency_key {
            meta.insert(IDEMPOTENCY_KEY_META.into(), Value::String(key.into()));
        }
        let mut params = Map::new();
        params.insert("_meta".into(), Value::Object(meta));
        params.insert("name".into(), Value::String(call.tool.into()));
        params.insert("arguments".into(), Value::Object(call.arguments.clone()));
        self.service.call(context, "tools/call", &Value::Object(params)).await.map_err(BackendError::Refused)
    }
}

/// Reads a `tools/list` result: `tools` must be an array; identity comes from `_meta.serverInfo` (absent → empty).
pub fn listing_from_result(mut result: Value) -> Result<ToolListing, BackendError> {
    let Some(Value::Array(tools)) = result.get_mut("tools").map(Value::take) else {
        return Err(BackendError::Unreachable("tools/list answered without a tools array".into()));
    };
    let info = result.get("_meta").and_then(|meta| meta.get(KEY_SERVER_INFO));
    let field = |key: &str| info.and_then(|i| i.get(key)).and_then(Value::as_str).unwrap_or("").to_string();
    Ok(ToolListing { server_name: field("name"), server_version: field("version"), tools: Arc::new(tools) })
}

/// Where audit records go. Append-only: there is no method to change or remove a record.
#[async_trait]
pub trait AuditSink: Send + Sync {
    async fn append(&self, record: &AuditRecord) -> Result<(), StoreError>;
}

/// A quota: at most `calls` calls in each fixed window of `window_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    pub calls: u32,
    pub window_ms: u64,
}

/// The fixed window `now_ms` falls in, and how long until it ends.
pub(crate) fn rate_window(now_ms: u64, window_ms: u64) -> (u64, u64) {
    let window_ms = window_ms.max(1);
    let index = now_ms / window_ms;
    (index, (index + 1) * window_ms - now_ms)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateDecision {
    /// A call was counted; `remaining` more fit in this window.
    Allowed { remaining: u32 },
    /// Nothing was counted.
    Limited { retry_after_ms: u64 },
}

/// Rate-limit counters shared by every gateway instance, keyed on (authenticated principal, qualified tool,
/// window). There is deliberately no session in the key: this protocol has none, and a client could mint
/// as many as it liked.
#[async_trait]
pub trait RateLimiter: Send + Sync {
    /// Counts one call if the quota allows it; otherwise counts nothing.
    async fn acquire(&self, principal: &str, tool: &str, limit: RateLimit, now_ms: u64) -> Result<RateDecision, StoreError>;
}

/// The pins in force right now (replaced as a whole when an operator approves something).
pub trait PinSource: Send + Sync {
    fn pins(&self) -> Arc<PinFile>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_fixed_and_say_when_they_end() {
        assert_eq!(rate_window(0, 1000), (0, 1000));
        assert_eq!(rate_window(999, 1000), (0, 1));
        assert_eq!(rate_window(1000, 1000), (1, 1000));
        assert_eq!(rate_window(5, 0), (5, 1), "a zero window is treated as one millisecond");
    }

    #[test]
    fn listings_need_a_tools_array() {
        assert!(listing_from_result(json!({"tools": {}})).is_err());
        let listing = listing_from_result(json!({"tools": [], "_meta": {KEY_SERVER_INFO: {"name": "n", "version": "1"}}})).unwrap();
        assert_eq!((listing.server_name.as_str(), listing.server_version.as_str()), ("n", "1"));
    }
}
