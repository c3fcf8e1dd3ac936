//! Streamable HTTP, stateless: one endpoint, `POST /mcp`, one JSON-RPC message per request.
//!
//! # Deadlines and bounds
//!
//! Every resource a client can hold is bounded in time or in count, each by a named constant (shown in
//! `mcpsim serve --help` and in docs/serving.md's table of HTTP checks):
//!
//! - **Headers**: a connection must deliver a request's complete headers within [`HEADER_READ_TIMEOUT_MS`] of
//!   opening, or of the end of its previous response; otherwise hyper closes it. This one deadline also
//!   ends an idle keep-alive connection: after a response, waiting for the next request is reading headers.
//! - **Body**: once the headers are in, the whole body must arrive within [`BODY_READ_TIMEOUT_MS`] → else
//!   `408` and the connection is closed. A total deadline, not one per chunk: a client dripping one byte at
//!   a time cannot stretch it. On **every route** of the listener: [`MCP_PATH`] reads its own body after its
//!   checks; any other route (the out-of-band page, a path that does not exist) gets a body already read by
//!   the listener within the same deadline and at most [`PAGE_BODY_BYTES_MAX`] bytes (`413` beyond), and
//!   one log line like a `/mcp` request's. Such a request also takes a place in flight, from bounds of its
//!   own sized like the endpoint's: per listener [`REQUESTS_IN_FLIGHT_MAX`] (`503`), per client address
//!   [`PRINCIPAL_REQUESTS_IN_FLIGHT_MAX`] (`429`), so page requests and `/mcp` requests never crowd each
//!   other out.
//! - **Connections**: at most [`CONNECTIONS_MAX`] open at once per process (all its listeners together); one
//!   more is answered `503` with `Retry-After` and closed. A connection holds a file descriptor, and a
//!   process that runs out of them stops answering everyone. Of those, one client address (an IPv6 client
//!   by its /64, [`client_key`]) holds at most [`CLIENT_CONNECTIONS_MAX`]; one more is answered `429` with
//!   `Retry-After` and closed, so one address re-filling every slot as it frees cannot keep the others out.
//! - **Requests in flight**: at most [`REQUESTS_IN_FLIGHT_MAX`] per listener are read, handled or streamed at
//!   once, and at most [`PRINCIPAL_REQUESTS_IN_FLIGHT_MAX`] of them for one principal; beyond either, the
//!   request is refused at once (`503` in total, `429` for the principal) rather than queued. So one
//!   principal holding every request it may (its bodies stalled until their deadline) leaves the rest to
//!   the others.
//! - **Legacy calls waiting for their client** (dual-era servers): a call that asks its client something
//!   gives its places in flight back while it waits (the answer, a POST of its own, needs one) and takes one
//!   of [`LEGACY_WAITING_MAX`] waiting places of the listener, at most [`LEGACY_WAITING_PER_PRINCIPAL_MAX`]
//!   for one principal (beyond, the call ends with an error saying so). The wait ends when the answer comes,
//!   after [`LEGACY_ANSWER_TIMEOUT_MS`], or at once when the client closes the call's stream.
//!
//! The deadlines are hyper's own (the header-read timer) and tokio's (one timeout around the body read);
//! the bounds are semaphores taken before anything is read.
//!
//! # The order of the HTTP-level checks
//!
//! Each step runs only if every earlier one passed, so a request refused early costs nothing later (no token
//! lookup for a GET, no body read for an unauthenticated caller):
//!
//! 1. **Method**: anything but POST → `405` with `Allow: POST` (there is no GET stream; only a dual-era server has
//!    sessions to DELETE, see below).
//! 2. **Request target and Host**: the target must be in origin form (`/mcp`, never `http://host/mcp`: this is
//!    an origin server, not a proxy, and an absolute target would name an authority the Host check never
//!    sees), and there must be exactly one non-empty `Host` header (RFC 9112 §3.2) → else `400`.
//! 3. **Host and Origin** (DNS-rebinding defence, SPEC-HTTP-2): when the server listens on a loopback address,
//!    `Host` must name a loopback host ([`check_local_request`]) or the configured public URL's host
//!    ([`HttpOptions::public_url`]); an `Origin` header, when present, must be
//!    allowed by the [`OriginPolicy`] (loopback origins by default). Otherwise `403`.
//! 4. **Authentication**: `Authorization: Bearer TOKEN`, mapped to a principal by the deployment's tokens.
//!    Missing → `401` with `WWW-Authenticate: Bearer realm="mcpsim"`; unknown → `401` adding
//!    `error="invalid_token"`. ([`Authentication::Anonymous`] skips this step; it exists only on loopback.)
//! 5. **Content negotiation**: `Content-Type` must be `application/json` (a UTF-8 charset parameter is fine)
//!    → else `415`; `Accept` must admit both `application/json` and `text/event-stream` (wildcards count, `q=0`
//!    refuses) → else `406`.
//! 6. **Size**: a declared `Content-Length` over [`MESSAGE_BYTES_MAX`] → `413` before reading; a body that grows
//!    past it while being read (chunked) → `413` too, with reason `payload_too_large`.
//! 7. **Capacity**: the principal's share of requests in flight ([`PRINCIPAL_REQUESTS_IN_FLIGHT_MAX`]) → else
//!    `429`; then the listener's ([`REQUESTS_IN_FLIGHT_MAX`]) → else `503`; both with `Retry-After` (a bound,
//!    not a queue).
//! 8. **Body**: read within [`BODY_READ_TIMEOUT_MS`] → else `408`, `Connection: close`. Then the routing
//!    headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`; names case-insensitive, values trimmed)
//!    and the body go to [`Service::exchange`]: the shared pipeline (`handle_exchange`), which applies the protocol's own order
//!    (-32700/-32600 → notification → `_meta` → -32020 → -32022 → -32601).
//!
//! Every refusal carries a JSON-RPC error body (id `null`, `-32600`, a message saying what to do next), so a
//! client always has one shape to read.
//!
//! # Delivery
//!
//! A notification is answered `202` with an empty body. A reply alone is one `application/json` body with the
//! reply's status. An exchange with request-scoped notifications or an open subscription feed is an SSE stream
//! (`text/event-stream`): each notification as one `data:` event, then the feed's notifications for as long as
//! it runs and the client stays (a `:` keep-alive comment every [`STREAM_KEEPALIVE_MS`] lets a vanished client
//! be noticed), then the response as the last event. A client that goes away ends the feed (that is the
//! unsubscribe).
//!
//! On a modern-only server `Mcp-Session-Id` is never minted, echoed or read: nothing here depends on which
//! connection or session a request came from. On a dual-era server (`serve --eras both`, [`HttpOptions::legacy`])
//! a POST without the modern `MCP-Protocol-Version` that is an `initialize` or carries `Mcp-Session-Id` goes to
//! the 2025-11-25 adapter ([`crate::eras`]) instead of the pipeline: its answer is one JSON body (with the
//! `Mcp-Session-Id` an `initialize` minted) or, when the call asks the client something first, an SSE stream
//! carrying the server's requests and then the response; the client's answers arrive as POSTs of their own.
//! A DELETE with `Mcp-Session-Id` ends that session. The sessions are the adapter's, not the transport's.
//!
//! Every request, refused or not, gets one log line (see [`super::log_request`]).

use super::slots::{KeyedSlots, Slot, SlotRefusal};
use super::{log_request, outcome_of, MessageSummary, Stopwatch};
use crate::eras::{is_legacy_http, Channel, ClientLink, LegacyAdapter, LegacyReply, LEGACY_ANSWER_TIMEOUT_MS};
use crate::framework::{Exchange, Service};
use crate::policy::origin::{check_local_request, names_public_url, OriginPolicy};
use crate::wire::errors::{echo, RpcError};
use crate::wire::headers::RoutingHeaders;
use crate::wire::jsonrpc::{error_response, payload_too_large, MESSAGE_BYTES_MAX};
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tracing::Instrument;

/// The one MCP endpoint.
pub const MCP_PATH: &str = "/mcp";
/// The realm named in `WWW-Authenticate` challenges.
pub(crate) const AUTH_REALM: &str = "mcpsim";
/// How long a connection may take to send a request's complete headers, from the moment it opened or its
/// previous response ended (so an idle keep-alive connection is closed after it too).
pub const HEADER_READ_TIMEOUT_MS: u64 = 10_000;
/// How long a request's whole body may take to arrive once its headers have; then `408` and the connection closes.
pub const BODY_READ_TIMEOUT_MS: u64 = 10_000;
/// Connections one process holds open at once, over all its listeners; one more is answered 503 and closed.
pub const CONNECTIONS_MAX: usize = 512;
/// Of those, the most one client address holds (an IPv6 client is its /64); one more is answered 429 and closed.
pub const CLIENT_CONNECTIONS_MAX: usize = 64;
/// Requests one listener reads, handles or streams at once; more are refused with 503 rather than queued.
pub const REQUESTS_IN_FLIGHT_MAX: usize = 64;
/// Of those, the most one principal may have; more of its requests are refused with 429.
pub const PRINCIPAL_REQUESTS_IN_FLIGHT_MAX: usize = 16;
/// Legacy calls one listener lets wait for their client's answer at once (a waiting call holds no place in
/// flight: its client's answer needs one); one more call that would wait is ended with an error instead.
pub const LEGACY_WAITING_MAX: usize = 256;
/// Of those, the most one principal may have.
pub const LEGACY_WAITING_PER_PRINCIPAL_MAX: usize = 16;
/// Bytes of a request body any route but [`MCP_PATH`] may send (the page's forms are a few hundred bytes).
pub const PAGE_BODY_BYTES_MAX: usize = 16 * 1024;
/// Events buffered between a stream's producer and the socket; a slow reader holds the producer back.
pub(crate) const STREAM_EVENTS_BUFFERED_MAX: usize = 16;
/// How often an open subscription stream sends a `:` comment, so a client that vanished is noticed.
pub const STREAM_KEEPALIVE_MS: u64 = 15_000;
/// After a shutdown signal, how long in-flight requests may still run before the process stops anyway.
pub(crate) const SHUTDOWN_GRACE_MS: u64 = 10_000;
/// Connections over [`CONNECTIONS_MAX`] being answered at once; beyond these, one is closed without an answer.
const REFUSALS_IN_FLIGHT_MAX: usize = 64;
/// How long a refused connection is kept to deliver its 503 (and read what the client sent, so that closing
/// does not reset the connection before the client has read the answer).
const REFUSAL_LINGER_MS: u64 = 500;
/// Bytes of a refused connection's request read (and dropped) while its answer is delivered.
const REFUSAL_DRAIN_BYTES_MAX: usize = 64 * 1024;
/// After `accept` fails for want of resources (file descriptors), how long the listener pauses.
const ACCEPT_RETRY_MS: u64 = 250;

/// The limits of one HTTP endpoint; [`HttpLimits::default`] is the named constants above.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    pub header_read_timeout_ms: u64,
    pub body_read_timeout_ms: u64,
    /// Per process: the [`ConnectionSlots`] its listeners share.
    pub connections_max: usize,
    /// Per process too: of `connections_max`, the most one client address holds.
    pub client_connections_max: usize,
    pub requests_in_flight_max: usize,
    pub principal_requests_in_flight_max: usize,
    /// Legacy calls waiting for their client, per listener and per principal (dual-era servers).
    pub legacy_waiting_max: usize,
    pub legacy_waiting_per_principal_max: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            header_read_timeout_ms: HEADER_READ_TIMEOUT_MS,
            body_read_timeout_ms: BODY_READ_TIMEOUT_MS,
            connections_max: CONNECTIONS_MAX,
            client_connections_max: CLIENT_CONNECTIONS_MAX,
            requests_in_flight_max: REQUESTS_IN_FLIGHT_MAX,
            principal_requests_in_flight_max: PRINCIPAL_REQUESTS_IN_FLIGHT_MAX,
            legacy_waiting_max: LEGACY_WAITING_MAX,
            legacy_waiting_per_principal_max: LEGACY_WAITING_PER_PRINCIPAL_MAX,
        }
    }
}

impl std::fmt::Display for HttpLimits {
    /// One line for the start-up log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "headers within {} ms, bodies within {} ms (every route), {} connections per process ({} per client address), {} requests in flight per listener ({} per principal)",
            self.header_read_timeout_ms,
            self.body_read_timeout_ms,
            self.connections_max,
            self.client_connections_max,
            self.requests_in_flight_max,
            self.principal_requests_in_flight_max
        )
    }
}

/// The open connections a process allows, shared by all its listeners (a connection holds a file descriptor,
/// and those are the process's), and each client address's share of them.
#[derive(Debug, Clone)]
pub struct ConnectionSlots {
    places: Arc<KeyedSlots<IpAddr>>,
}

impl ConnectionSlots {
    /// At most `max` connections in all, and at most `client_max` of them from one client address.
    pub fn new(max: usize, client_max: usize) -> ConnectionSlots {
        ConnectionSlots { places: KeyedSlots::new(client_max, max) }
    }

    /// A slot for a connection from `client` (already a [`client_key`]): its client's share first
    /// ([`SlotRefusal::Share`]), then the process's ([`SlotRefusal::Total`]).
    fn try_take(&self, client: IpAddr) -> Result<Slot<IpAddr>, SlotRefusal> {
        self.places.try_take(&client)
    }
}

/// What the per-client bounds key on: an IPv4 address (an IPv4-mapped IPv6 one as IPv4), or an IPv6
/// address's /64 (one host is usually given a whole /64, so its single addresses would be free).
pub fn client_key(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut segments = v6.segments();
                segments[4..].fill(0);
                IpAddr::V6(segments.into())
            }
        },
    }
}

/// The client address of a request (its [`client_key`]), as the listener put it among the request's
/// extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddress(pub IpAddr);

/// Bearer tokens, held as SHA-256 digests: a lookup's timing depends on the digest, which says nothing useful
/// about any real token's bytes.
#[derive(Clone, Default)]
pub struct Tokens {
    principals: BTreeMap<[u8; 32], String>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokens({} principals)", self.principals.len())
    }
}

impl Tokens {
    /// From token → principal (as [`crate::config::Deployment::tokens`] gives it).
    pub fn new(token_principals: BTreeMap<String, String>) -> Tokens {
        Tokens { principals: token_principals.into_iter().map(|(token, principal)| (Sha256::digest(token).into(), principal)).collect() }
    }

    pub fn principal(&self, token: &str) -> Option<&str> {
        self.principals.get(&<[u8; 32]>::from(Sha256::digest(token))).map(String::as_str)
    }

    pub fn is_empty(&self) -> bool {
        self.principals.is_empty()
    }
}

/// Who a request acts for.
#[derive(Debug, Clone)]
pub enum Authentication {
    /// `Authorization: Bearer TOKEN`, mapped to a principal.
    Bearer(Tokens),
    /// No credentials: every request acts for `principal`. Only for servers that hold nothing worth
    /// protecting (the conformance fixture), and only on a loopback address: [`router`] refuses it elsewhere.
    Anonymous { principal: String },
}

/// Settings of the HTTP endpoint beyond the service and its authentication.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub origins: OriginPolicy,
    pub limits: HttpLimits,
    /// On a dual-era server (`serve --eras both`): the 2025-11-25 adapter legacy requests go to.
    pub legacy: Option<Arc<LegacyAdapter>>,
    /// The configured public base URL (`serve --public-url`, as `policy::origin::parse_public_url` writes it):
    /// on a loopback bind, a `Host` naming it is accepted too (a reverse proxy on this machine passing the
    /// browser's Host on, as the out-of-band page needs).
    pub public_url: Option<String>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions { origins: OriginPolicy::Loopback, limits: HttpLimits::default(), legacy: None, public_url: None }
    }
}

struct Endpoint {
    service: Arc<dyn Service>,
    legacy: Option<Arc<LegacyAdapter>>,
    authentication: Authentication,
    origins: OriginPolicy,
    /// Listening on loopback: `Host` must name a loopback host too (or the public URL's, when configured).
    loopback_bind: bool,
    public_url: Option<String>,
    /// Requests in flight: the listener's bound and each principal's share of it.
    in_flight: Arc<KeyedSlots<String>>,
    /// Legacy calls waiting for their client, per listener and per principal (they hold no place in flight
    /// while they wait).
    legacy_waiting: Arc<KeyedSlots<String>>,
    body_read_timeout: Duration,
    /// Names this listener in every log line of its requests: instances of a fleet log to one stream.
    span: tracing::Span,
}

/// What a request in flight holds until its response is written (for a stream, until the stream ends): its
/// place among the listener's and its principal's.
type InFlight = Slot<String>;

/// Why a router was not built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouterError {
    /// [`Authentication::Anonymous`] on `0`, an address that is not loopback.
    #[error("a server without authentication only listens on a loopback address (127.0.0.1 or [::1]), not {0}")]
    AnonymousOffLoopback(SocketAddr),
}

/// The router serving [`MCP_PATH`] for a server listening on `local_address`. Refuses
/// [`Authentication::Anonymous`] unless `local_address` is a loopback address.
pub fn router(
    service: Arc<dyn Service>,
    authentication: Authentication,
    options: HttpOptions,
    local_address: SocketAddr,
) -> Result<Router, RouterError> {
    let loopback_bind = local_address.ip().is_loopback();
    if matches!(authentication, Authentication::Anonymous { .. }) && !loopback_bind {
        return Err(RouterError::AnonymousOffLoopback(local_address));
    }
    let limits = options.limits;
    let endpoint = Arc::new(Endpoint {
        service,
        legacy: options.legacy,
        authentication,
        origins: options.origins,
        loopback_bind,
        public_url: options.public_url,
        in_flight: KeyedSlots::new(limits.principal_requests_in_flight_max, limits.requests_in_flight_max),
        legacy_waiting: KeyedSlots::new(limits.legacy_waiting_per_principal_max, limits.legacy_waiting_max),
        body_read_timeout: Duration::from_millis(limits.body_read_timeout_ms),
        span: tracing::info_span!("http", listen = %local_address),
    });
    Ok(Router::new()
        .route(MCP_PATH, any(mcp_endpoint))
        .fallback(|| async {
            with_route_log(
                refusal(StatusCode::NOT_FOUND, format!("nothing here; the MCP endpoint is POST {MCP_PATH}")),
                None,
                "http_not_found",
            )
        })
        .layer(DefaultBodyLimit::max(MESSAGE_BYTES_MAX))
        .with_state(endpoint))
}

/// Serves `router` on `listener` until `shutdown` resolves, then lets in-flight requests finish (for at most
/// [`SHUTDOWN_GRACE_MS`]).
///
/// Each accepted connection takes one of `connections` (shared by the process's listeners) for as long as it
/// is open, and is served by hyper's HTTP/1 with the header-read deadline of `limits`. A connection beyond
/// the bound is answered `503` and closed.
pub(crate) async fn serve_http(
    listener: TcpListener,
    router: Router,
    connections: ConnectionSlots,
    limits: HttpLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let local_address = listener.local_addr()?;
    let span = tracing::info_span!("http", listen = %local_address);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(Duration::from_millis(limits.header_read_timeout_ms)).keep_alive(true);
    let refusal_bytes: Arc<[u8]> = connections_full_response(connections.places.total()).into();
    let client_refusal_bytes: Arc<[u8]> = client_connections_full_response(connections.places.share()).into();
    let refusals_in_flight = Arc::new(Semaphore::new(REFUSALS_IN_FLIGHT_MAX));
    // Every route's body is read within the body deadline (the MCP endpoint reads its own, after its checks),
    // and every request to a route but the MCP endpoint gets its log line here.
    let guard = Arc::new(ListenerGuard {
        body_read_timeout: Duration::from_millis(limits.body_read_timeout_ms),
        in_flight: KeyedSlots::new(limits.principal_requests_in_flight_max, limits.requests_in_flight_max),
        span: span.clone(),
    });
    let router = router.layer(axum::middleware::from_fn_with_state(guard, guard_route));
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // A client that gave up before we accepted: nothing to do. Anything else (no file
                    // descriptors left) is logged, and the listener pauses rather than spinning.
                    if !matches!(error.kind(), std::io::ErrorKind::ConnectionAborted | std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionRefused) {
                        span.in_scope(|| tracing::warn!("accepting a connection failed: {error}; pausing {ACCEPT_RETRY_MS} ms"));
                        tokio::time::sleep(Duration::from_millis(ACCEPT_RETRY_MS)).await;
                    }
                    continue;
                }
            },
        };
        let client = client_key(peer.ip());
        let slot = match connections.try_take(client) {
            Ok(slot) => slot,
            Err(refusal) => {
                let stopwatch = Stopwatch::start();
                let (status, outcome, bytes) = match refusal {
                    SlotRefusal::Total => (503, "http_connections_full", &refusal_bytes),
                    SlotRefusal::Share => (429, "http_client_connections_full", &client_refusal_bytes),
                };
                span.in_scope(|| log_request("http", "-", &MessageSummary::default(), status, outcome, &stopwatch));
                refuse_connection(stream, bytes.clone(), &refusals_in_flight);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let service = WithClient { inner: TowerToHyperService::new(router.clone()), client: ClientAddress(client) };
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            // A connection ending in an error (a missed header deadline, a client gone mid-request) has
            // nothing more to say: each request on it was logged when it was answered.
            let _ = connection.await;
            drop(slot);
        });
    }
    drop(listener);
    span.in_scope(|| tracing::info!("shutting down: no new connections; finishing requests in flight"));
    tokio::select! {
        biased;
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(Duration::from_millis(SHUTDOWN_GRACE_MS)) => {
            span.in_scope(|| tracing::warn!("requests still in flight after {SHUTDOWN_GRACE_MS} ms; stopping anyway"));
        }
    }
    Ok(())
}

/// The bytes that answer a connection over the bound: a complete `503` response that closes the connection.
fn connections_full_response(connections_max: usize) -> Vec<u8> {
    let message =
        format!("the server holds as many connections as it allows ({connections_max}); retry shortly, or reuse an open connection");
    closing_response("503 Service Unavailable", message)
}

/// The bytes that answer a connection over its client address's share: a complete `429` that closes it.
fn client_connections_full_response(client_connections_max: usize) -> Vec<u8> {
    let message = format!(
        "your address holds as many connections to this server as one client may ({client_connections_max}); reuse an open one, or close one and retry"
    );
    closing_response("429 Too Many Requests", message)
}

fn closing_response(status_line: &str, message: String) -> Vec<u8> {
    let status: u16 = status_line.split(' ').next().and_then(|code| code.parse().ok()).unwrap_or(503);
    let error = RpcError::invalid_request(message).with_status(status);
    let body = serde_json::to_vec(&error_response(None, &error)).expect("serializing a serde_json::Value cannot fail");
    let mut bytes = format!(
        "HTTP/1.1 {status_line}\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    bytes.extend_from_slice(&body);
    bytes
}

/// A connection's service: the router, with the connection's [`ClientAddress`] put among each request's
/// extensions (what the per-client bounds of the routes key on).
#[derive(Clone)]
struct WithClient<S> {
    inner: S,
    client: ClientAddress,
}

impl<S, B> hyper::service::Service<hyper::Request<B>> for WithClient<S>
where
    S: hyper::service::Service<hyper::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn call(&self, mut request: hyper::Request<B>) -> Self::Future {
        request.extensions_mut().insert(self.client);
        self.inner.call(request)
    }
}

/// What [`guard_route`] needs: the body deadline, the bounds of requests in flight off the MCP endpoint (as
/// many as the endpoint's, of which one client address may hold as many as one principal there), and the
/// listener's log span.
struct ListenerGuard {
    body_read_timeout: Duration,
    /// Keyed by client address.
    in_flight: Arc<KeyedSlots<String>>,
    span: tracing::Span,
}

/// What a route other than the MCP endpoint tells the request log: who (if it knows) and how it ended.
/// Never a token, a cookie or a flow reference.
#[derive(Debug, Clone)]
pub struct RouteLog {
    pub principal: Option<String>,
    pub outcome: String,
}

/// Every route but [`MCP_PATH`] (which reads its own body after its checks, within the same deadline): the
/// request takes a place in flight (its client address's share, `429`, then the listener's, `503`, both with
/// `Retry-After`; these are not the MCP endpoint's places, so neither kind of request can crowd out the
/// other), its whole body is read within the body deadline and at most [`PAGE_BODY_BYTES_MAX`] bytes before
/// the route sees it (else `408`, closing the connection, or `413`), and it gets its log line.
async fn guard_route(State(guard): State<Arc<ListenerGuard>>, request: Request, next: axum::middleware::Next) -> Response {
    if request.uri().path() == MCP_PATH {
        return next.run(request).await;
    }
    let stopwatch = Stopwatch::start();
    let route = route_name(request.uri().path());
    let method = request.method().clone();
    let client = request.extensions().get::<ClientAddress>().map_or_else(|| "-".to_string(), |ClientAddress(address)| address.to_string());
    let response = match guard.in_flight.try_take(&client) {
        Err(SlotRefusal::Share) => {
            let message = format!(
                "your address has as many requests in flight here as one client may ({}); wait for one to finish, then retry",
                guard.in_flight.share()
            );
            let response = with_header(refusal(StatusCode::TOO_MANY_REQUESTS, message), header::RETRY_AFTER, HeaderValue::from_static("1"));
            with_route_log(response, None, "http_client_busy")
        }
        Err(SlotRefusal::Total) => {
            let response =
                refusal(StatusCode::SERVICE_UNAVAILABLE, "the server is handling as many requests as it allows at once; retry shortly");
            with_route_log(with_header(response, header::RETRY_AFTER, HeaderValue::from_static("1")), None, "http_busy")
        }
        Ok(place) => {
            let response = read_then_route(&guard, request, next).await;
            drop(place);
            response
        }
    };
    let logged = response.extensions().get::<RouteLog>().cloned();
    let principal = logged.as_ref().and_then(|log| log.principal.as_deref()).unwrap_or("-");
    let outcome = logged.as_ref().map_or("-", |log| log.outcome.as_str());
    let status = response.status().as_u16();
    guard.span.in_scope(|| log_route(&method, route, principal, status, outcome, &stopwatch));
    response
}

/// The body read within the deadline and the size bound, then the route.
async fn read_then_route(guard: &ListenerGuard, request: Request, next: axum::middleware::Next) -> Response {
    let (parts, body) = request.into_parts();
    match read_body(body, guard.body_read_timeout, PAGE_BODY_BYTES_MAX).await {
        Ok(bytes) => next.run(Request::from_parts(parts, Body::from(bytes))).await,
        Err(failure) => {
            let too_large =
                || refusal(StatusCode::PAYLOAD_TOO_LARGE, format!("this route takes at most {PAGE_BODY_BYTES_MAX} bytes of body"));
            let (response, outcome) = failure.refusal(guard.body_read_timeout, too_large);
            with_route_log(with_header(response, header::CONNECTION, HeaderValue::from_static("close")), None, outcome)
        }
    }
}

/// Why a request's body was not read whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyFailure {
    /// More than the route takes.
    TooLarge,
    /// The connection failed while the body was read.
    Unreadable,
    /// Not all of it arrived within the body deadline.
    Late,
}

/// The one body read of every route (`/mcp` after its checks, every other route in [`guard_route`]): the
/// whole body within `deadline` of the headers, at most `max` bytes.
async fn read_body(body: Body, deadline: Duration, max: usize) -> Result<Bytes, BodyFailure> {
    match tokio::time::timeout(deadline, axum::body::to_bytes(body, max)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(error)) if std::error::Error::source(&error).is_some_and(|source| source.is::<http_body_util::LengthLimitError>()) => {
            Err(BodyFailure::TooLarge)
        }
        Ok(Err(_)) => Err(BodyFailure::Unreadable),
        Err(_elapsed) => Err(BodyFailure::Late),
    }
}

impl BodyFailure {
    /// The answer and its log outcome: `too_large` is the route's own `413`; a body that came late is answered
    /// `408` closing the connection (what is left of the body would be read as the next request).
    fn refusal(self, deadline: Duration, too_large: impl FnOnce() -> Response) -> (Response, &'static str) {
        match self {
            BodyFailure::TooLarge => (too_large(), "http_payload_too_large"),
            BodyFailure::Unreadable => {
                (refusal(StatusCode::BAD_REQUEST, "the request body could not be read completely; send it again"), "http_body_unreadable")
            }
            BodyFailure::Late => {
                let message = format!(
                    "the request body did not arrive within {} ms of its headers; send the whole body at once",
                    deadline.as_millis()
                );
                (
                    with_header(refusal(StatusCode::REQUEST_TIMEOUT, message), header::CONNECTION, HeaderValue::from_static("close")),
                    "http_body_timeout",
                )
            }
        }
    }
}

/// Attaches what the request log says of a route's response.
pub fn with_route_log(mut response: Response, principal: Option<&str>, outcome: &str) -> Response {
    response.extensions_mut().insert(RouteLog { principal: principal.map(str::to_string), outcome: outcome.to_string() });
    response
}

/// The route a path names, for the log: the page's routes without their reference, anything else as "other".
fn route_name(path: &str) -> &'static str {
    match path.strip_prefix(crate::servers::notes::publish::PAGE_PATH) {
        Some(rest) if rest.ends_with("/sign-in") => "/connect/{reference}/sign-in",
        Some(_) => "/connect/{reference}",
        None => "other",
    }
}

/// The log line of a request to a route other than the MCP endpoint.
fn log_route(method: &Method, route: &str, principal: &str, status: u16, outcome: &str, latency: &Stopwatch) {
    tracing::info!(
        target: "mcpsim::request",
        transport = "http",
        principal,
        route = ?format!("{method} {route}"),
        status,
        outcome,
        latency_us = latency.elapsed_us(),
    );
}

/// Answers a connection over the bound and closes it, on a task bounded in time ([`REFUSAL_LINGER_MS`]) and in
/// number ([`REFUSALS_IN_FLIGHT_MAX`]; beyond that the connection is closed at once, unanswered).
fn refuse_connection(mut stream: TcpStream, response: Arc<[u8]>, refusals_in_flight: &Arc<Semaphore>) {
    let Ok(permit) = refusals_in_flight.clone().try_acquire_owned() else { return };
    tokio::spawn(async move {
        let _permit = permit;
        let answered = async {
            stream.write_all(&response).await?;
            stream.shutdown().await?;
            // Read what the client sent until it closes: closing with unread bytes would reset the connection,
            // and a reset can discard the answer before the client reads it.
            let mut sink = [0u8; 4096];
            let mut drained = 0;
            while drained < REFUSAL_DRAIN_BYTES_MAX {
                match stream.read(&mut sink).await? {
                    0 => break,
                    read => drained += read,
                }
            }
            Ok::<(), std::io::Error>(())
        };
        let _ = tokio::time::timeout(Duration::from_millis(REFUSAL_LINGER_MS), answered).await;
    });
}

/// A future resolving on SIGTERM or SIGINT (ctrl-c). The handlers are installed by this call, not on first
/// poll, so a signal arriving right after startup is never lost to the default action (immediate exit).
/// Must be called inside a tokio runtime.
#[cfg(unix)]
pub(crate) fn shutdown_signal() -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            biased;
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
    })
}

/// A future resolving on ctrl-c. Must be called inside a tokio runtime.
#[cfg(not(unix))]
pub(crate) fn shutdown_signal() -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    Ok(async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    })
}

/// What the request log needs from one exchange.
struct Handled {
    response: Response,
    principal: Option<String>,
    summary: MessageSummary,
    outcome: String,
}

impl Handled {
    fn refused(response: Response, principal: Option<&str>, outcome: &str) -> Handled {
        Handled { response, principal: principal.map(str::to_string), summary: MessageSummary::default(), outcome: outcome.to_string() }
    }
}

async fn mcp_endpoint(State(endpoint): State<Arc<Endpoint>>, request: Request) -> Response {
    let stopwatch = Stopwatch::start();
    let handled = endpoint.handle(request).instrument(endpoint.span.clone()).await;
    let principal = handled.principal.as_deref().unwrap_or("-");
    endpoint
        .span
        .in_scope(|| log_request("http", principal, &handled.summary, handled.response.status().as_u16(), &handled.outcome, &stopwatch));
    handled.response
}

impl Endpoint {
    async fn handle(&self, request: Request) -> Handled {
        if request.method() == Method::DELETE && self.legacy.is_some() && request.headers().contains_key(MCP_SESSION_ID) {
            return self.end_legacy_session(&request);
        }
        if request.method() != Method::POST {
            let message = format!(
                "{} is not supported: send each JSON-RPC message as its own POST to {MCP_PATH} (this stateless server has no GET stream and no session to DELETE)",
                request.method()
            );
            let response = with_header(refusal(StatusCode::METHOD_NOT_ALLOWED, message), header::ALLOW, HeaderValue::from_static("POST"));
            return Handled::refused(response, None, "http_method_not_allowed");
        }
        let principal = match self.admit(&request) {
            Ok(principal) => principal,
            Err(refused) => return *refused,
        };
        let headers = request.headers();
        if let Some(refused) = check_content_negotiation(headers, &principal) {
            return refused;
        }
        let declared_length = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok());
        if declared_length.is_some_and(|length| length > MESSAGE_BYTES_MAX as u64) {
            return too_large(&principal, declared_length.and_then(|length| usize::try_from(length).ok()));
        }
        // The principal's share first: a principal over it is refused without touching the listener's bound.
        let permit = match self.in_flight.try_take(&principal) {
            Ok(permit) => permit,
            Err(SlotRefusal::Share) => {
                let message = format!(
                    "you have as many requests in flight as one principal may ({}); wait for one to finish, then retry",
                    self.in_flight.share()
                );
                let response =
                    with_header(refusal(StatusCode::TOO_MANY_REQUESTS, message), header::RETRY_AFTER, HeaderValue::from_static("1"));
                return Handled::refused(response, Some(&principal), "http_principal_busy");
            }
            Err(SlotRefusal::Total) => {
                let response =
                    refusal(StatusCode::SERVICE_UNAVAILABLE, "the server is handling as many requests as it allows at once; retry shortly");
                return Handled::refused(
                    with_header(response, header::RETRY_AFTER, HeaderValue::from_static("1")),
                    Some(&principal),
                    "http_busy",
                );
            }
        };
        let routing = routing_headers(headers);
        let session_header = headers.get(MCP_SESSION_ID).cloned();
        let body = match read_body(request.into_body(), self.body_read_timeout, MESSAGE_BYTES_MAX).await {
            Ok(body) => body,
            Err(failure) => {
                let too_large = || json_response(StatusCode::PAYLOAD_TOO_LARGE, &error_response(None, &payload_too_large(None)));
                let (response, outcome) = failure.refusal(self.body_read_timeout, too_large);
                return Handled::refused(response, Some(&principal), outcome);
            }
        };
        let summary = MessageSummary::of(&body);
        if let Some(legacy) = &self.legacy {
            let session_id = headers_session_id(&session_header);
            if is_legacy_http(routing.protocol_version.as_deref(), session_id.as_deref(), &body) {
                let waiting = Waiting { places: self.legacy_waiting.clone(), principal: principal.clone() };
                let (response, outcome) = legacy_exchange(legacy.clone(), principal.clone(), session_id, body, permit, waiting).await;
                return Handled { response, principal: Some(principal), summary, outcome };
            }
        }
        let exchange = self.service.exchange(&principal, &body, Some(&routing)).await;
        let mut outcome = outcome_of(&exchange.reply);
        let response = if exchange.is_streamed() {
            outcome = format!(
                "{outcome} (sse: {} notifications{})",
                exchange.notifications.len(),
                if exchange.feed.is_some() { ", feed" } else { "" }
            );
            stream_exchange(exchange, permit)
        } else {
            match &exchange.reply.response {
                None => StatusCode::ACCEPTED.into_response(),
                Some(message) => {
                    json_response(StatusCode::from_u16(exchange.reply.http_status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), message)
                }
            }
        };
        Handled { response, principal: Some(principal), summary, outcome }
    }

    /// A legacy client's DELETE of its session (dual-era servers only): after the same Host, Origin and
    /// authentication checks as a POST, `200` if the principal held that session, else `404`.
    fn end_legacy_session(&self, request: &Request) -> Handled {
        let principal = match self.admit(request) {
            Ok(principal) => principal,
            Err(refused) => return *refused,
        };
        let headers = request.headers();
        let session_id = headers_session_id(&headers.get(MCP_SESSION_ID).cloned()).unwrap_or_default();
        let closed = self.legacy.as_ref().is_some_and(|legacy| legacy.close(&session_id, &principal));
        let (status, outcome) =
            if closed { (StatusCode::OK, "legacy_session_closed") } else { (StatusCode::NOT_FOUND, "legacy_session_unknown") };
        Handled {
            response: status.into_response(),
            principal: Some(principal),
            summary: MessageSummary::default(),
            outcome: outcome.into(),
        }
    }

    /// What every POST and every legacy DELETE passes first, in this order: the target and Host, the Origin,
    /// then authentication. Returns the authenticated principal.
    fn admit(&self, request: &Request) -> Result<String, Box<Handled>> {
        if let Some(refused) = check_target_and_host(request) {
            return Err(Box::new(refused));
        }
        let headers = request.headers();
        if let Some(refused) = self.check_host_and_origin(headers) {
            return Err(Box::new(refused));
        }
        self.authenticate(headers).map(str::to_string)
    }

    fn check_host_and_origin(&self, headers: &HeaderMap) -> Option<Handled> {
        if self.loopback_bind {
            let host = headers.get(header::HOST).map(|value| String::from_utf8_lossy(value.as_bytes()).trim().to_string());
            let public = self.public_url.as_deref().zip(host.as_deref()).is_some_and(|(public, host)| names_public_url(public, host));
            if let Err(error) = check_local_request(host.as_deref(), None).or_else(|error| if public { Ok(()) } else { Err(error) }) {
                let status = StatusCode::from_u16(error.http_status).unwrap_or(StatusCode::FORBIDDEN);
                return Some(Handled::refused(json_response(status, &error_response(None, &error)), None, "http_host_forbidden"));
            }
        }
        let origins: Vec<String> =
            headers.get_all(header::ORIGIN).iter().map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned()).collect();
        // Two Origin headers are not something a browser sends; refuse rather than pick one.
        match origins.as_slice() {
            [] => None,
            [origin] if self.origins.allows(origin.trim()) => None,
            _ => {
                let shown = echo(&origins.join(", "));
                let message = match &self.origins {
                    OriginPolicy::Loopback => format!(
                        "Origin {shown:?} may not call this server: only pages served from this machine may (a DNS-rebinding defence); allow another origin explicitly (mcpsim serve --allow-origin ORIGIN)"
                    ),
                    OriginPolicy::Only(_) => format!("Origin {shown:?} is not among the origins this server allows"),
                };
                Some(Handled::refused(refusal(StatusCode::FORBIDDEN, message), None, "http_origin_forbidden"))
            }
        }
    }

    fn authenticate(&self, headers: &HeaderMap) -> Result<&str, Box<Handled>> {
        let tokens = match &self.authentication {
            Authentication::Anonymous { principal } => return Ok(principal),
            Authentication::Bearer(tokens) => tokens,
        };
        let mut values = headers.get_all(header::AUTHORIZATION).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return Err(if headers.contains_key(header::AUTHORIZATION) {
                unauthorized(true, "send exactly one Authorization header")
            } else {
                unauthorized(false, "authentication required: send Authorization: Bearer TOKEN, with the token of a principal in the server's configuration")
            });
        };
        let text = value.to_str().unwrap_or("");
        let (scheme, token) = text.trim().split_once(' ').unwrap_or((text.trim(), ""));
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(unauthorized(false, "only bearer tokens are accepted: send Authorization: Bearer TOKEN"));
        }
        tokens.principal(token.trim()).ok_or_else(|| {
            unauthorized(true, "the bearer token is not recognized: use the token of a principal in the server's configuration")
        })
    }
}

/// Step 2: an origin-form request target and exactly one non-empty `Host` (RFC 9112 §3.2), for every bind.
fn check_target_and_host(request: &Request) -> Option<Handled> {
    let refused = target_and_host(request).err()?;
    let message = match refused {
        Misaddressed::AbsoluteTarget => format!("{} ({MCP_PATH})", refused.says()),
        _ => refused.says().to_string(),
    };
    Some(Handled::refused(refusal(StatusCode::BAD_REQUEST, message), None, refused.outcome()))
}

/// Why a request is refused before anything looks at where it is addressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Misaddressed {
    /// An absolute-form target (`GET http://host/path`): a proxy request.
    AbsoluteTarget,
    HostMissing,
    HostRepeated,
}

impl Misaddressed {
    pub(crate) fn says(self) -> &'static str {
        match self {
            Misaddressed::AbsoluteTarget => "send the request target as a path, not as an absolute URI: this server is not a proxy",
            Misaddressed::HostMissing => "send a Host header naming this server",
            Misaddressed::HostRepeated => "send exactly one Host header",
        }
    }

    pub(crate) fn outcome(self) -> &'static str {
        match self {
            Misaddressed::AbsoluteTarget => "http_target_not_origin_form",
            Misaddressed::HostMissing => "http_host_missing",
            Misaddressed::HostRepeated => "http_host_repeated",
        }
    }
}

/// The one check of every route (`/mcp` and the page's) that a request's target is origin-form and that it
/// carries exactly one non-empty `Host`, which it returns (what it must name is each route's own rule).
pub(crate) fn target_and_host(request: &Request) -> Result<&HeaderValue, Misaddressed> {
    let target = request.uri();
    if target.scheme().is_some() || target.authority().is_some() {
        return Err(Misaddressed::AbsoluteTarget);
    }
    let hosts: Vec<&HeaderValue> = request.headers().get_all(header::HOST).iter().collect();
    match hosts.as_slice() {
        [host] if !host.as_bytes().iter().all(u8::is_ascii_whitespace) => Ok(host),
        [] | [_] => Err(Misaddressed::HostMissing),
        _ => Err(Misaddressed::HostRepeated),
    }
}

/// Writes an exchange as an SSE stream from a task of its own, which holds `permit` until the stream ends.
fn stream_exchange(exchange: Exchange, permit: InFlight) -> Response {
    let (sender, receiver) = mpsc::channel::<Bytes>(STREAM_EVENTS_BUFFERED_MAX);
    tokio::spawn(async move {
        let _permit = permit;
        let Exchange { notifications, reply, feed } = exchange;
        for notification in &notifications {
            if sender.send(sse_event(notification)).await.is_err() {
                return;
            }
        }
        if let Some(mut feed) = feed {
            let mut keepalive = tokio::time::interval(Duration::from_millis(STREAM_KEEPALIVE_MS));
            keepalive.tick().await;
            loop {
                tokio::select! {
                    biased;
                    // The client went away: returning drops the feed, which ends the subscription.
                    _ = sender.closed() => {
                        tracing::debug!(target: "mcpsim::request", "stream closed by the client; subscription ended");
                        return;
                    }
                    next = feed.next_notification() => match next {
                        Some(notification) => {
                            if sender.send(sse_event(&notification)).await.is_err() {
                                return;
                            }
                        }
                        None => break,
                    },
                    _ = keepalive.tick() => {
                        if sender.send(Bytes::from_static(b": keep-alive\n\n")).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
        if let Some(response) = &reply.response {
            let _ = sender.send(sse_event(response)).await;
        }
    });
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream")),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (HeaderName::from_static("x-accel-buffering"), HeaderValue::from_static("no")),
        ],
        Body::from_stream(EventStream { receiver }),
    )
        .into_response()
}

/// One SSE event carrying one JSON-RPC message (compact JSON never contains a newline).
fn sse_event(message: &Value) -> Bytes {
    Bytes::from(format!("data: {message}\n\n"))
}

/// The legacy session header (read and written only for legacy requests of a dual-era server).
const MCP_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");

fn headers_session_id(value: &Option<HeaderValue>) -> Option<String> {
    value.as_ref().map(|value| String::from_utf8_lossy(value.as_bytes()).trim().to_string())
}

/// What a legacy call produces, in order: messages for the client, then its reply.
enum LegacyOut {
    Message(Value),
    Done(LegacyReply),
}

/// Where a legacy call's places go while it waits for its client: the listener's and the principal's bounds
/// of waiting calls.
struct Waiting {
    places: Arc<KeyedSlots<String>>,
    principal: String,
}

/// The client end of a legacy HTTP call: messages go out on the call's own SSE stream; answers come back as
/// POSTs carrying the session id, which the adapter hands to the waiting receiver.
///
/// The call holds its places in flight until it first waits on the client ([`ClientLink::park`]); then it
/// trades them for a place among the waiting calls, so the answer it waits for (a POST of its own, which
/// needs a place in flight) never waits for a place the call holds. A client gone (its stream closed) ends
/// the wait at once.
struct HttpLink {
    sender: mpsc::Sender<LegacyOut>,
    in_flight: Mutex<Option<InFlight>>,
    waiting: Waiting,
    /// The call's place among [`Waiting`]'s bounds while it waits; given back when the call ends.
    parked: Mutex<Option<Slot<String>>>,
    answer_timeout: Duration,
}

impl HttpLink {
    fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[async_trait::async_trait]
impl ClientLink for HttpLink {
    async fn send(&self, message: Value) -> bool {
        self.sender.send(LegacyOut::Message(message)).await.is_ok()
    }

    async fn wait(&self, answer: tokio::sync::oneshot::Receiver<Value>) -> Option<Value> {
        tokio::select! {
            answered = tokio::time::timeout(self.answer_timeout, answer) => answered.ok()?.ok(),
            // The call's stream was closed (the client went away): nobody will read an answer any more.
            () = self.sender.closed() => None,
        }
    }

    async fn park(&self) -> Result<(), crate::eras::ParkRefused> {
        let mut parked = HttpLink::lock(&self.parked);
        if parked.is_some() {
            return Ok(());
        }
        match self.waiting.places.try_take(&self.waiting.principal) {
            Ok(place) => *parked = Some(place),
            Err(SlotRefusal::Share) => return Err(crate::eras::ParkRefused::Principal { max: self.waiting.places.share() }),
            Err(SlotRefusal::Total) => return Err(crate::eras::ParkRefused::Listener),
        }
        HttpLink::lock(&self.in_flight).take();
        Ok(())
    }
}

/// Runs one legacy request. A reply that needs nothing of the client is one JSON body (with `Mcp-Session-Id`
/// when `initialize` opened a session); a call that sends the client anything first is an SSE stream whose
/// last event is the reply. The call holds `permit` until it parks ([`HttpLink`]).
async fn legacy_exchange(
    legacy: Arc<LegacyAdapter>,
    principal: String,
    session_id: Option<String>,
    body: Bytes,
    permit: InFlight,
    waiting: Waiting,
) -> (Response, String) {
    let (sender, mut receiver) = mpsc::channel::<LegacyOut>(STREAM_EVENTS_BUFFERED_MAX);
    tokio::spawn(async move {
        let link = HttpLink {
            sender: sender.clone(),
            in_flight: Mutex::new(Some(permit)),
            waiting,
            parked: Mutex::new(None),
            answer_timeout: Duration::from_millis(LEGACY_ANSWER_TIMEOUT_MS),
        };
        let reply = legacy.handle(&principal, Channel::Http { session_id: session_id.as_deref() }, &body, &link).await;
        let _ = sender.send(LegacyOut::Done(reply)).await;
    });
    let first = match receiver.recv().await {
        Some(LegacyOut::Done(reply)) => {
            let outcome = format!(
                "legacy {}",
                outcome_of(&crate::framework::Reply { response: reply.response.clone(), http_status: reply.http_status })
            );
            let status = StatusCode::from_u16(reply.http_status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let response = match &reply.response {
                None => StatusCode::ACCEPTED.into_response(),
                Some(message) => json_response(status, message),
            };
            let response = match reply.session_id.as_deref().and_then(|id| HeaderValue::from_str(id).ok()) {
                Some(id) => with_header(response, MCP_SESSION_ID, id),
                None => response,
            };
            return (response, outcome);
        }
        Some(LegacyOut::Message(message)) => message,
        None => return (refusal(StatusCode::INTERNAL_SERVER_ERROR, "the legacy call ended without an answer"), "legacy_lost".into()),
    };
    let (events, events_out) = mpsc::channel::<Bytes>(STREAM_EVENTS_BUFFERED_MAX);
    tokio::spawn(async move {
        if events.send(sse_event(&first)).await.is_err() {
            return;
        }
        let mut keepalive = tokio::time::interval(Duration::from_millis(STREAM_KEEPALIVE_MS));
        keepalive.tick().await;
        loop {
            // Returning drops `receiver`: the call's link sees its client gone and stops waiting.
            let out = tokio::select! {
                biased;
                () = events.closed() => return,
                out = receiver.recv() => out,
                _ = keepalive.tick() => {
                    if events.send(Bytes::from_static(b": keep-alive\n\n")).await.is_err() {
                        return;
                    }
                    continue;
                }
            };
            let message = match out {
                Some(LegacyOut::Message(message)) => message,
                Some(LegacyOut::Done(reply)) => match reply.response {
                    Some(response) => response,
                    None => return,
                },
                None => return,
            };
            if events.send(sse_event(&message)).await.is_err() {
                return;
            }
        }
    });
    let response = (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream")),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (HeaderName::from_static("x-accel-buffering"), HeaderValue::from_static("no")),
        ],
        Body::from_stream(EventStream { receiver: events_out }),
    )
        .into_response();
    (response, "legacy (sse)".into())
}

/// The receiving end of a stream's events, as the `Stream` axum writes out.
struct EventStream {
    receiver: mpsc::Receiver<Bytes>,
}

impl futures_core::Stream for EventStream {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.receiver.poll_recv(context).map(|event| event.map(Ok))
    }
}

fn unauthorized(token_given: bool, message: &str) -> Box<Handled> {
    let challenge = if token_given {
        format!("Bearer realm=\"{AUTH_REALM}\", error=\"invalid_token\", error_description=\"the token is not recognized\"")
    } else {
        format!("Bearer realm=\"{AUTH_REALM}\"")
    };
    let response = with_header(
        refusal(StatusCode::UNAUTHORIZED, message),
        header::WWW_AUTHENTICATE,
        HeaderValue::from_str(&challenge).expect("the challenge is plain ASCII"),
    );
    Box::new(Handled::refused(
        response,
        None,
        if token_given { "http_unauthorized_invalid_token" } else { "http_unauthorized_missing_token" },
    ))
}

fn check_content_negotiation(headers: &HeaderMap, principal: &str) -> Option<Handled> {
    let content_types: Vec<&HeaderValue> = headers.get_all(header::CONTENT_TYPE).iter().collect();
    let json_body = matches!(content_types.as_slice(), [value] if value.to_str().is_ok_and(is_json_content_type));
    if !json_body {
        let message = "Content-Type must be application/json (UTF-8): the body is one JSON-RPC message";
        return Some(Handled::refused(
            refusal(StatusCode::UNSUPPORTED_MEDIA_TYPE, message),
            Some(principal),
            "http_unsupported_media_type",
        ));
    }
    let accept: Vec<&str> = headers.get_all(header::ACCEPT).iter().filter_map(|value| value.to_str().ok()).collect();
    if !accepts(&accept, "application", "json") || !accepts(&accept, "text", "event-stream") {
        let message = "Accept must list both application/json and text/event-stream: the server answers with either";
        return Some(Handled::refused(refusal(StatusCode::NOT_ACCEPTABLE, message), Some(principal), "http_not_acceptable"));
    }
    None
}

/// `application/json`, optionally with parameters; a `charset` parameter must say UTF-8 (JSON is UTF-8).
pub(crate) fn is_json_content_type(value: &str) -> bool {
    let mut parts = value.split(';');
    if !parts.next().unwrap_or("").trim().eq_ignore_ascii_case("application/json") {
        return false;
    }
    parts.all(|parameter| match parameter.split_once('=') {
        Some((name, value)) if name.trim().eq_ignore_ascii_case("charset") => value.trim().trim_matches('"').eq_ignore_ascii_case("utf-8"),
        _ => true,
    })
}

/// Whether the `Accept` values admit `kind/subtype`: the most specific matching media range decides, and a
/// range with `q=0` refuses.
pub fn accepts(accept_values: &[&str], kind: &str, subtype: &str) -> bool {
    let mut best: Option<(u8, bool)> = None;
    for range in accept_values.iter().flat_map(|value| value.split(',')) {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim();
        let Some((range_kind, range_subtype)) = media.split_once('/') else { continue };
        let specificity = match (range_kind.trim(), range_subtype.trim()) {
            (k, s) if k.eq_ignore_ascii_case(kind) && s.eq_ignore_ascii_case(subtype) => 2,
            (k, "*") if k.eq_ignore_ascii_case(kind) => 1,
            ("*", "*") => 0,
            _ => continue,
        };
        let refused = parts.any(|parameter| {
            matches!(parameter.split_once('='), Some((name, q)) if name.trim().eq_ignore_ascii_case("q") && q.trim().parse::<f32>().is_ok_and(|q| q <= 0.0))
        });
        if best.is_none_or(|(known, _)| specificity > known) {
            best = Some((specificity, !refused));
        }
    }
    best.is_some_and(|(_, acceptable)| acceptable)
}

/// Copies the routing headers. Names are case-insensitive by HTTP; values are trimmed, repeated headers are
/// joined as HTTP combines them (so two differing values never match the body), and bytes that are not UTF-8
/// become U+FFFD, which the header check refuses as invalid characters.
pub fn routing_headers(headers: &HeaderMap) -> RoutingHeaders {
    let read = |name: &'static str| {
        let values: Vec<String> = headers
            .get_all(HeaderName::from_static(name))
            .iter()
            .map(|value| String::from_utf8_lossy(value.as_bytes()).trim_matches([' ', '\t']).to_string())
            .collect();
        (!values.is_empty()).then(|| values.join(", "))
    };
    RoutingHeaders { protocol_version: read("mcp-protocol-version"), method: read("mcp-method"), name: read("mcp-name") }
}

fn too_large(principal: &str, bytes: Option<usize>) -> Handled {
    let error = payload_too_large(bytes);
    let response = json_response(StatusCode::PAYLOAD_TOO_LARGE, &error_response(None, &error));
    Handled::refused(response, Some(principal), "http_payload_too_large")
}

fn json_response(status: StatusCode, message: &Value) -> Response {
    let body = serde_json::to_vec(message).expect("serializing a serde_json::Value cannot fail");
    (status, [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], Body::from(body)).into_response()
}

/// An HTTP-level refusal: `status` with a JSON-RPC error body (id null, `-32600`) saying what to do next.
fn refusal(status: StatusCode, message: impl Into<String>) -> Response {
    let error = RpcError::invalid_request(message.into()).with_status(status.as_u16());
    json_response(status, &error_response(None, &error))
}

fn with_header(mut response: Response, name: HeaderName, value: HeaderValue) -> Response {
    response.headers_mut().insert(name, value);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_map_to_principals() {
        let tokens = Tokens::new([("t-a".to_string(), "alice".to_string())].into());
        assert_eq!(tokens.principal("t-a"), Some("alice"));
        assert_eq!(tokens.principal("t-"), None);
        assert_eq!(tokens.principal(""), None);
        assert!(!format!("{tokens:?}").contains("t-a"), "Debug never prints a token");
    }

    #[test]
    fn content_type_must_be_json_in_utf8() {
        for ok in ["application/json", "Application/JSON", "application/json; charset=utf-8", "application/json;charset=\"UTF-8\""] {
            assert!(is_json_content_type(ok), "{ok}");
        }
        for refused in ["text/plain", "application/json-patch+json", "application/json; charset=latin1", "", "application/*"] {
            assert!(!is_json_content_type(refused), "{refused}");
        }
    }

    #[test]
    fn accept_needs_json_and_event_stream_with_wildcards_counting() {
        let both = |values: &[&str]| accepts(values, "application", "json") && accepts(values, "text", "event-stream");
        assert!(both(&["application/json, text/event-stream"]));
        assert!(both(&["application/json", "text/event-stream"]));
        assert!(both(&["*/*"]));
        assert!(both(&["application/*;q=0.5, text/*"]));
        assert!(both(&["text/event-stream, */*;q=0.1"]));
        assert!(!both(&["application/json"]));
        assert!(!both(&[]));
        assert!(!both(&["application/json, text/event-stream;q=0"]));
        assert!(!both(&["*/*, application/json;q=0"]), "the most specific range decides");
        assert!(!both(&["garbage"]));
    }

    #[tokio::test]
    async fn beyond_the_in_flight_bound_requests_get_503_and_shutdown_is_clean() {
        let server = crate::assembly::demo_notes_server();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let tokens = Tokens::new(crate::config::Deployment::demo().tokens());
        let limits = HttpLimits { requests_in_flight_max: 0, ..HttpLimits::default() };
        let options = HttpOptions { limits, ..HttpOptions::default() };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let router = router(Arc::new(server), Authentication::Bearer(tokens), options, address).unwrap();
        let serving = tokio::spawn(serve_http(
            listener,
            router,
            ConnectionSlots::new(limits.connections_max, limits.client_connections_max),
            limits,
            async move {
                let _ = stopped.await;
            },
        ));
        let response = reqwest::Client::new()
            .post(format!("http://{address}{MCP_PATH}"))
            .header("Authorization", "Bearer demo-alice")
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 503);
        assert_eq!(response.headers()["retry-after"], "1");
        stop.send(()).unwrap();
        serving.await.unwrap().unwrap();
    }

    #[test]
    fn the_connection_refusal_is_a_complete_closing_503() {
        let bytes = connections_full_response(7);
        let text = String::from_utf8(bytes).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{head}");
        assert!(head.contains("\r\nconnection: close") && head.contains("\r\nretry-after: 1"), "{head}");
        assert!(head.contains(&format!("content-length: {}", body.len())), "{head}");
        let body: Value = serde_json::from_str(body).unwrap();
        assert_eq!((body["id"].clone(), body["error"]["code"].clone()), (Value::Null, serde_json::json!(-32600)));
        assert!(body["error"]["message"].as_str().unwrap().contains("(7)"), "{body}");
    }

    #[test]
    fn anonymous_servers_listen_only_on_loopback() {
        let server = crate::assembly::demo_notes_server();
        let server: Arc<dyn Service> = Arc::new(server);
        let anonymous = || Authentication::Anonymous { principal: "anyone".into() };
        for address in ["0.0.0.0:80", "192.168.1.2:80", "[::]:80"] {
            let error = router(server.clone(), anonymous(), HttpOptions::default(), address.parse().unwrap()).unwrap_err();
            assert_eq!(error, RouterError::AnonymousOffLoopback(address.parse().unwrap()));
            assert!(error.to_string().contains("loopback"), "{error}");
        }
        assert!(router(server.clone(), anonymous(), HttpOptions::default(), "127.0.0.1:80".parse().unwrap()).is_ok());
        assert!(router(server, Authentication::Bearer(Tokens::default()), HttpOptions::default(), "0.0.0.0:80".parse().unwrap()).is_ok());
    }

    #[test]
    fn routing_headers_are_trimmed_and_joined() {
        let mut headers = HeaderMap::new();
        headers.insert("MCP-Protocol-Version", HeaderValue::from_static("  2026-07-28\t"));
        headers.append("mcp-method", HeaderValue::from_static("tools/call"));
        headers.append("Mcp-Method", HeaderValue::from_static("tools/list"));
        headers.insert("mcp-name", HeaderValue::from_bytes(b"caf\xe9").unwrap());
        let routing = routing_headers(&headers);
        assert_eq!(routing.protocol_version.as_deref(), Some("2026-07-28"));
        assert_eq!(routing.method.as_deref(), Some("tools/call, tools/list"));
        assert_eq!(routing.name.as_deref(), Some("caf\u{fffd}"));
        assert_eq!(routing_headers(&HeaderMap::new()), RoutingHeaders::default());
    }
}
