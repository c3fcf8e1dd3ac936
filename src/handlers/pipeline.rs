//! The request pipeline every server of ours shares, in the spec's order:
//! envelope (-32700/-32600) → notification (no answer) → `_meta` (-32602, 400) → routing headers when the
//! transport has them (-32020, 400) → version (-32022, 400) → method (-32601, 404) → the service.
//! A request failing an early stage spends nothing of a later one.

use crate::wire::errors::RpcError;
use crate::wire::headers::{check_routing_headers, RoutingHeaders};
use crate::wire::jsonrpc::{error_response, parse_message, result_response, Incoming, RequestId};
use crate::wire::meta::{check_version, read_meta, RequestMeta};
use async_trait::async_trait;
use serde_json::Value;

/// What to send back: a JSON-RPC response (absent for notifications) and the HTTP status to use.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub response: Option<Value>,
    pub http_status: u16,
}

impl Reply {
    fn error(id: Option<&RequestId>, error: &RpcError) -> Reply {
        Reply { response: Some(error_response(id, error)), http_status: error.http_status }
    }
}

/// The per-request facts a service may use. `principal` comes from the transport's authentication.
#[derive(Debug, Clone, Copy)]
pub struct RequestContext<'a> {
    pub principal: &'a str,
    pub id: &'a RequestId,
    pub meta: &'a RequestMeta,
}

#[async_trait]
pub trait Service: Send + Sync {
    /// Methods this service implements; anything else is `-32601` (404).
    fn has_method(&self, method: &str) -> bool;

    /// Runs one validated request. `params` is an object (validated `_meta` included).
    async fn call(&self, context: RequestContext<'_>, method: &str, params: &Value) -> Result<Value, RpcError>;
}

/// Handles one raw message for an authenticated `principal`.
pub async fn handle_message<S: Service + ?Sized>(service: &S, principal: &str, raw: &[u8], headers: Option<&RoutingHeaders>) -> Reply {
    let incoming = match parse_message(raw) {
        Ok(incoming) => incoming,
        Err(rejected) => return Reply::error(rejected.id.as_ref(), &rejected.error),
    };
    let (id, method, params) = match incoming {
        // Never executed, never answered: a request method sent as a notification has no caller to tell.
        Incoming::Notification { .. } => return Reply { response: None, http_status: 202 },
        Incoming::Request { id, method, params } => (id, method, params),
    };
    let meta = match read_meta(params.as_ref()) {
        Ok(meta) => meta,
        Err(error) => return Reply::error(Some(&id), &error),
    };
    if let Some(headers) = headers {
        if let Err(error) = check_routing_headers(headers, &meta.protocol_version, &method, params.as_ref()) {
            return Reply::error(Some(&id), &error);
        }
    }
    if let Err(error) = check_version(&meta) {
        return Reply::error(Some(&id), &error);
    }
    if !service.has_method(&method) {
        return Reply::error(Some(&id), &RpcError::method_not_found(&method));
    }
    let params = params.unwrap_or_else(|| Value::Object(Default::default()));
    let context = RequestContext { principal, id: &id, meta: &meta };
    match service.call(context, &method, &params).await {
        Ok(result) => Reply { response: Some(result_response(&id, result)), http_status: 200 },
        Err(error) => Reply::error(Some(&id), &error),
    }
}
