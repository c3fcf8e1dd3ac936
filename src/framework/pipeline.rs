//! The request pipeline every server of ours shares, in the spec's order:
//! envelope (-32700/-32600) → notification (no answer) → `_meta` (-32602, 400) → routing headers when the
//! transport has them (-32020, 400) → version (-32022, 400) → method (-32601, 404) → the service.
//! A request failing an early stage spends nothing of a later one.
//!
//! Most requests produce one response ([`Reply`]). Some produce more, which only a streaming transport can
//! deliver (an [`Exchange`]): request-scoped notifications (progress, log messages) that go out before the
//! response on the request's own SSE stream, and, for `subscriptions/listen`, an open [`NotificationFeed`]
//! whose notifications follow until the client goes away. [`handle_message`] keeps the one-response view.

use crate::wire::errors::RpcError;
use crate::wire::headers::{check_routing_headers, RoutingHeaders};
use crate::wire::jsonrpc::{into_error_response, parse_decoded, parse_json, result_response, Incoming, Rejected, RequestId};
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
    fn error(id: Option<&RequestId>, error: RpcError) -> Reply {
        let http_status = error.http_status;
        Reply { response: Some(into_error_response(id, error)), http_status }
    }
}

/// The per-request facts a service may use. `principal` comes from the transport's authentication.
#[derive(Debug, Clone, Copy)]
pub struct RequestContext<'a> {
    pub principal: &'a str,
    pub id: &'a RequestId,
    pub meta: &'a RequestMeta<'a>,
}

#[async_trait]
pub trait Service: Send + Sync {
    /// Methods this service implements; anything else is `-32601` (404).
    fn has_method(&self, method: &str) -> bool;

    /// Runs one validated request. `params` is an object (validated `_meta` included).
    async fn call(&self, context: RequestContext<'_>, method: &str, params: &Value) -> Result<Value, RpcError>;

    /// Like [`Service::call`], for services that also emit notifications or hold a stream open.
    /// The default sends nothing but the result.
    async fn respond(&self, context: RequestContext<'_>, method: &str, params: &Value) -> Result<ServiceResponse, RpcError> {
        self.call(context, method, params).await.map(ServiceResponse::result)
    }

    /// One raw message and the routing headers its transport received, through the shared pipeline.
    ///
    /// HTTP (the one transport with routing headers) calls this rather than [`handle_exchange`] for a single
    /// reason: a test-only mutant of the zoo (`serve --gateway-mutant
    /// routes-by-header-after-authorizing-the-body`, `sim::actors::gateway_mutants`) must read `Mcp-Name`
    /// before the header check, as the gateway bug it reproduces does. No server overrides it
    /// (`tests/tidy.rs` checks), so every server's requests take the one pipeline in its one order.
    async fn exchange(&self, principal: &str, raw: &[u8], headers: Option<&RoutingHeaders>) -> Exchange {
        handle_exchange(self, principal, raw, headers).await
    }

    /// Told of a request the pipeline refused before the service ran (`_meta`, routing headers, version,
    /// unknown method), so a service that must account for every request (the gateway's audit log) can,
    /// whichever transport carried it. The default does nothing; the refusal is already the answer.
    async fn refused(&self, principal: &str, id: &RequestId, method: &str, params: Option<&Value>, error: &RpcError) {
        let _ = (principal, id, method, params, error);
    }

    /// A browser request to this server's out-of-band page (URL-mode elicitation), from `user`, already
    /// signed in on the page. The default: this server has no such page.
    async fn page(&self, user: &str, request: &crate::framework::out_of_band::PageRequest) -> crate::framework::out_of_band::PageAnswer {
        let _ = (user, request);
        crate::framework::out_of_band::PageAnswer::not_here()
    }
}

/// The upper bound on request-scoped notifications one request may emit before its response.
pub const NOTIFICATIONS_PER_REQUEST_MAX: usize = 64;

/// What a service answers a request with, when it has more to say than the result.
pub struct ServiceResponse {
    /// Complete JSON-RPC notifications, sent in order before the result (at most
    /// [`NOTIFICATIONS_PER_REQUEST_MAX`]; the pipeline drops any beyond that).
    pub notifications: Vec<Value>,
    /// The result. With a `feed`, it is the result that ends the stream once the feed ends.
    pub result: Value,
    /// For `subscriptions/listen`: notifications that follow `notifications` for as long as the client listens.
    pub feed: Option<Box<dyn NotificationFeed>>,
}

impl ServiceResponse {
    pub fn result(result: Value) -> ServiceResponse {
        ServiceResponse { notifications: Vec::new(), result, feed: None }
    }

    pub(crate) fn with_notifications(notifications: Vec<Value>, result: Value) -> ServiceResponse {
        ServiceResponse { notifications, result, feed: None }
    }
}

/// Notifications of an open subscription, produced one at a time.
#[async_trait]
pub trait NotificationFeed: Send {
    /// Waits for the next notification to send. `None` means the server ended the subscription: the
    /// transport then sends the exchange's response and closes the stream.
    async fn next_notification(&mut self) -> Option<Value>;
}

/// Everything one incoming message produced, for transports that can stream (HTTP SSE, stdio lines).
///
/// Delivery rules (HTTP): with no `notifications` and no `feed`, send `reply` as today (JSON body, or
/// `202` with an empty body when `reply.response` is `None`). Otherwise answer `200` with
/// `Content-Type: text/event-stream`, write each notification as one SSE event (`data: <json>`), then, if
/// there is a `feed`, every notification it yields until it returns `None` or the client disconnects
/// (then drop the feed: that is the unsubscribe), and finally `reply.response` as the last event unless
/// the client is gone.
pub struct Exchange {
    pub notifications: Vec<Value>,
    pub reply: Reply,
    pub feed: Option<Box<dyn NotificationFeed>>,
}

impl Exchange {
    fn reply(reply: Reply) -> Exchange {
        Exchange { notifications: Vec::new(), reply, feed: None }
    }

    /// Whether this exchange needs a stream (SSE) rather than a single JSON body.
    pub fn is_streamed(&self) -> bool {
        !self.notifications.is_empty() || self.feed.is_some()
    }
}

impl std::fmt::Debug for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchange")
            .field("notifications", &self.notifications)
            .field("reply", &self.reply)
            .field("feed", &self.feed.as_ref().map(|_| "open"))
            .finish()
    }
}

/// Handles one raw message for an authenticated `principal`: the response only.
///
/// Notifications an exchange would stream are dropped; an open subscription is ended at once, so the
/// caller gets the subscription's closing result (a graceful end, as the spec describes).
pub async fn handle_message<S: Service + ?Sized>(service: &S, principal: &str, raw: &[u8], headers: Option<&RoutingHeaders>) -> Reply {
    handle_exchange(service, principal, raw, headers).await.reply
}

/// Handles one raw message for an authenticated `principal`, keeping everything a stream can carry.
pub async fn handle_exchange<S: Service + ?Sized>(service: &S, principal: &str, raw: &[u8], headers: Option<&RoutingHeaders>) -> Exchange {
    match parse_json(raw) {
        Ok(value) => serve_incoming(service, principal, parse_decoded(&value, raw.len()), headers).await,
        Err(rejected) => Exchange::reply(Reply::error(rejected.id.as_ref(), rejected.error)),
    }
}

/// [`handle_exchange`] for a message of `length` bytes that its carrier holds already decoded as `value`
/// (the simulator's network carries what its clients built beside the bytes): the same pipeline from the
/// JSON-RPC checks on.
pub async fn handle_decoded_exchange<S: Service + ?Sized>(
    service: &S,
    principal: &str,
    value: &Value,
    length: usize,
    headers: Option<&RoutingHeaders>,
) -> Exchange {
    serve_incoming(service, principal, parse_decoded(value, length), headers).await
}

async fn serve_incoming<S: Service + ?Sized>(
    service: &S,
    principal: &str,
    incoming: Result<Incoming<'_>, Rejected>,
    headers: Option<&RoutingHeaders>,
) -> Exchange {
    let incoming = match incoming {
        Ok(incoming) => incoming,
        Err(rejected) => return Exchange::reply(Reply::error(rejected.id.as_ref(), rejected.error)),
    };
    let (id, method, params) = match incoming {
        // Never executed, never answered: a request method sent as a notification has no caller to tell.
        Incoming::Notification { .. } => return Exchange::reply(Reply { response: None, http_status: 202 }),
        Incoming::Request { id, method, params } => (id, method, params),
    };
    let refusal = match read_meta(params) {
        // A 2025-11-25 client's handshake carries no modern `_meta`: it gets the answer that names the
        // version this server speaks (VERS-008), not a complaint about a field its era never sent.
        Err(_) if method == "initialize" => Err(RpcError::method_not_found(method)),
        Err(error) => Err(error),
        Ok(meta) => {
            let headers_checked = match headers {
                Some(headers) => check_routing_headers(headers, meta.protocol_version, method, params),
                None => Ok(()),
            };
            headers_checked.and_then(|()| check_version(&meta)).and_then(|()| {
                if service.has_method(method) {
                    Ok(meta)
                } else {
                    Err(RpcError::method_not_found(method))
                }
            })
        }
    };
    let meta = match refusal {
        Ok(meta) => meta,
        Err(error) => {
            service.refused(principal, &id, method, params, &error).await;
            return Exchange::reply(Reply::error(Some(&id), error));
        }
    };
    let no_params = Value::Object(Default::default());
    let params = params.unwrap_or(&no_params);
    let context = RequestContext { principal, id: &id, meta: &meta };
    match service.respond(context, method, params).await {
        Ok(ServiceResponse { mut notifications, result, feed }) => {
            notifications.truncate(NOTIFICATIONS_PER_REQUEST_MAX);
            Exchange { notifications, reply: Reply { response: Some(result_response(&id, result)), http_status: 200 }, feed }
        }
        Err(error) => Exchange::reply(Reply::error(Some(&id), error)),
    }
}
