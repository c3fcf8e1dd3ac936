//! Streamable HTTP, stateless: one endpoint, `POST /mcp`, one JSON-RPC message per request, one JSON answer.
//!
//! # The order of the HTTP-level checks
//!
//! Each step runs only if every earlier one passed, so a request refused early costs nothing later (no token
//! lookup for a GET, no body read for an unauthenticated caller):
//!
//! 1. **Method**: anything but POST → `405` with `Allow: POST` (there is no GET stream and no session to DELETE).
//! 2. **Origin** (DNS-rebinding defence, SPEC-HTTP-2): an `Origin` header that is present and not allowed → `403`.
//!    When the server listens on a loopback address, a `Host` naming anything but a loopback host is also `403`:
//!    a rebound DNS name reaching a local server is exactly the attack.
//! 3. **Authentication**: `Authorization: Bearer TOKEN`, mapped to a principal by the deployment's tokens.
//!    Missing → `401` with `WWW-Authenticate: Bearer realm="mcpsim"`; unknown → `401` adding `error="invalid_token"`.
//! 4. **Content negotiation**: `Content-Type` must be `application/json` (a UTF-8 charset parameter is fine)
//!    → else `415`; `Accept` must admit both `application/json` and `text/event-stream` (wildcards count, `q=0`
//!    refuses) → else `406`.
//! 5. **Size**: a declared `Content-Length` over [`MESSAGE_BYTES_MAX`] → `413` before reading; a body that grows
//!    past it while being read (chunked) → `413` too. Both carry a JSON-RPC error (`payload_too_large`, id null).
//! 6. **Capacity**: at most [`REQUESTS_IN_FLIGHT_MAX`] bodies are read and handled at once; beyond that → `503`
//!    with `Retry-After` (a bound, not a queue).
//! 7. **Body**: the routing headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`; names case-insensitive,
//!    values trimmed) and the body go to [`handle_message`], which applies the protocol's own order
//!    (-32700/-32600 → notification → `_meta` → -32020 → -32022 → -32601). A notification is answered `202` with an
//!    empty body; anything else with the reply's status and `Content-Type: application/json`.
//!
//! `Mcp-Session-Id` is never minted, echoed or read: nothing here depends on which connection or session a
//! request came from. Refusals in steps 1–4 and 6 have a one-line `text/plain` body saying what to do next.
//! Every request, refused or not, gets one log line (see [`super::log_request`]).

use super::{log_request, outcome_of, MessageSummary, Stopwatch};
use crate::handlers::{handle_message, Service};
use crate::wire::headers::RoutingHeaders;
use crate::wire::jsonrpc::{error_response, payload_too_large, MESSAGE_BYTES_MAX};
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// The one MCP endpoint.
pub const MCP_PATH: &str = "/mcp";
/// The realm named in `WWW-Authenticate` challenges.
pub const AUTH_REALM: &str = "mcpsim";
/// Requests whose bodies are read and handled at once; more are refused with 503 rather than queued.
pub const REQUESTS_IN_FLIGHT_MAX: usize = 64;
/// After a shutdown signal, how long in-flight requests may still run before the process stops anyway.
pub const SHUTDOWN_GRACE_MS: u64 = 10_000;
/// Longest `Origin` or `Host` value repeated back in a refusal.
const ECHO_CHARS_MAX: usize = 100;

/// Which browser origins may call the server. Requests without an `Origin` header (non-browser clients) are
/// never refused by this check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OriginPolicy {
    /// The default: pages served from this machine (`localhost`, `127.0.0.1`, `[::1]`, any port and scheme).
    Loopback,
    /// Exactly these origins (normalized `scheme://host[:port]`), nothing else — not even loopback.
    Only(BTreeSet<String>),
}

impl OriginPolicy {
    /// The policy for a list of `--allow-origin` values: empty means [`OriginPolicy::Loopback`].
    pub fn from_allowed(origins: &[String]) -> Result<OriginPolicy, String> {
        if origins.is_empty() {
            return Ok(OriginPolicy::Loopback);
        }
        let mut allowed = BTreeSet::new();
        for origin in origins {
            let normalized = normalize_origin(origin.strip_suffix('/').unwrap_or(origin)).ok_or_else(|| {
                format!("--allow-origin {origin:?} is not an origin: expected scheme://host[:port] with scheme http or https, e.g. https://app.example.com")
            })?;
            allowed.insert(normalized);
        }
        Ok(OriginPolicy::Only(allowed))
    }

    pub fn allows(&self, origin: &str) -> bool {
        let Some(origin) = normalize_origin(origin) else { return false };
        match self {
            OriginPolicy::Loopback => origin.split_once("://").is_some_and(|(_, authority)| is_loopback_authority(authority)),
            OriginPolicy::Only(allowed) => allowed.contains(&origin),
        }
    }
}

/// `scheme://host[:port]`, lower-cased, default port dropped; `None` for anything else (including `null`).
pub fn normalize_origin(text: &str) -> Option<String> {
    let text = text.trim().to_ascii_lowercase();
    let (scheme, authority) = text.split_once("://")?;
    let default_port = match scheme {
        "http" => "80",
        "https" => "443",
        _ => return None,
    };
    if authority.is_empty() || authority.contains(['/', '?', '#', '@', ' ']) {
        return None;
    }
    let (host, port) = split_authority(authority)?;
    if host.is_empty() {
        return None;
    }
    match port {
        Some(port) if port.is_empty() || port.parse::<u16>().is_err() => None,
        Some(port) if port == default_port => Some(format!("{scheme}://{host}")),
        Some(port) => Some(format!("{scheme}://{host}:{port}")),
        None => Some(format!("{scheme}://{host}")),
    }
}

/// Splits `host[:port]` (IPv6 hosts bracketed) into host and optional port.
fn split_authority(authority: &str) -> Option<(&str, Option<&str>)> {
    if authority.starts_with('[') {
        let end = authority.find(']')?;
        let (host, rest) = authority.split_at(end + 1);
        return match rest {
            "" => Some((host, None)),
            _ => rest.strip_prefix(':').map(|port| (host, Some(port))),
        };
    }
    Some(match authority.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    })
}

fn is_loopback_authority(authority: &str) -> bool {
    let Some((host, _)) = split_authority(authority) else { return false };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

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
}

/// Settings of the HTTP endpoint beyond the service and its tokens.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub origins: OriginPolicy,
    pub requests_in_flight_max: usize,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions { origins: OriginPolicy::Loopback, requests_in_flight_max: REQUESTS_IN_FLIGHT_MAX }
    }
}

struct Endpoint {
    service: Arc<dyn Service>,
    tokens: Tokens,
    origins: OriginPolicy,
    /// Listening on loopback: `Host` must name a loopback host too.
    loopback_hosts_only: bool,
    in_flight: Semaphore,
}

/// The router serving [`MCP_PATH`] for a server listening on `local_address`.
pub fn router(service: Arc<dyn Service>, tokens: Tokens, options: HttpOptions, local_address: SocketAddr) -> Router {
    let endpoint = Arc::new(Endpoint {
        service,
        tokens,
        origins: options.origins,
        loopback_hosts_only: local_address.ip().is_loopback(),
        in_flight: Semaphore::new(options.requests_in_flight_max),
    });
    Router::new()
        .route(MCP_PATH, any(mcp_endpoint))
        .fallback(|| async { (StatusCode::NOT_FOUND, plain(format!("Not found. The MCP endpoint is POST {MCP_PATH}."))) })
        .layer(DefaultBodyLimit::max(MESSAGE_BYTES_MAX))
        .with_state(endpoint)
}

/// Serves `router` on `listener` until `shutdown` resolves, then lets in-flight requests finish (for at most
/// [`SHUTDOWN_GRACE_MS`]).
pub async fn serve_http(listener: TcpListener, router: Router, shutdown: impl Future<Output = ()> + Send + 'static) -> std::io::Result<()> {
    let (stop_sender, mut stop) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_sender.send(true);
    });
    let mut grace = stop.clone();
    let server = axum::serve(listener, router).with_graceful_shutdown(async move {
        let _ = stop.wait_for(|stopping| *stopping).await;
        tracing::info!("shutting down: no new connections; finishing requests in flight");
    });
    tokio::select! {
        biased;
        served = server => served,
        _ = async move {
            let _ = grace.wait_for(|stopping| *stopping).await;
            tokio::time::sleep(Duration::from_millis(SHUTDOWN_GRACE_MS)).await;
        } => {
            tracing::warn!("requests still in flight after {SHUTDOWN_GRACE_MS} ms; stopping anyway");
            Ok(())
        }
    }
}

/// A future resolving on SIGTERM or SIGINT (ctrl-c). The handlers are installed by this call, not on first
/// poll, so a signal arriving right after startup is never lost to the default action (immediate exit).
/// Must be called inside a tokio runtime.
#[cfg(unix)]
pub fn shutdown_signal() -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
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
pub fn shutdown_signal() -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
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
    let handled = endpoint.handle(request).await;
    let principal = handled.principal.as_deref().unwrap_or("-");
    log_request("http", principal, &handled.summary, handled.response.status().as_u16(), &handled.outcome, &stopwatch);
    handled.response
}

impl Endpoint {
    async fn handle(&self, request: Request) -> Handled {
        if request.method() != Method::POST {
            let response = refusal(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("{} is not supported. Send each JSON-RPC message as its own POST to {MCP_PATH}: this stateless server has no GET stream and no session to DELETE.", request.method()),
            );
            return Handled::refused(
                with_header(response, header::ALLOW, HeaderValue::from_static("POST")),
                None,
                "http_method_not_allowed",
            );
        }
        let headers = request.headers();
        if let Some(refused) = self.check_origin(headers) {
            return refused;
        }
        let principal = match self.authenticate(headers) {
            Ok(principal) => principal.to_string(),
            Err(refused) => return *refused,
        };
        if let Some(refused) = check_content_negotiation(headers, &principal) {
            return refused;
        }
        let declared_length = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok());
        if declared_length.is_some_and(|length| length > MESSAGE_BYTES_MAX as u64) {
            return too_large(&principal, declared_length.and_then(|length| usize::try_from(length).ok()));
        }
        let Ok(_permit) = self.in_flight.try_acquire() else {
            let response =
                refusal(StatusCode::SERVICE_UNAVAILABLE, "The server is handling as many requests as it allows at once. Retry shortly.");
            return Handled::refused(
                with_header(response, header::RETRY_AFTER, HeaderValue::from_static("1")),
                Some(&principal),
                "http_busy",
            );
        };
        let routing = routing_headers(headers);
        let body = match Bytes::from_request(request, &()).await {
            Ok(body) => body,
            Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => return too_large(&principal, None),
            Err(_) => {
                let response = refusal(StatusCode::BAD_REQUEST, "The request body could not be read completely. Send it again.");
                return Handled::refused(response, Some(&principal), "http_body_unreadable");
            }
        };
        let summary = MessageSummary::of(&body);
        let reply = handle_message(&*self.service, &principal, &body, Some(&routing)).await;
        let outcome = outcome_of(&reply);
        let response = match &reply.response {
            None => StatusCode::ACCEPTED.into_response(),
            Some(message) => {
                let status = StatusCode::from_u16(reply.http_status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                json_response(status, message)
            }
        };
        Handled { response, principal: Some(principal), summary, outcome }
    }

    fn check_origin(&self, headers: &HeaderMap) -> Option<Handled> {
        if self.loopback_hosts_only {
            if let Some(host) = headers.get(header::HOST) {
                let host = String::from_utf8_lossy(host.as_bytes());
                if !is_loopback_authority(host.trim()) {
                    let message = format!(
                        "Host {:?} is not this server: it listens on a loopback address and answers only to localhost, 127.0.0.1 or [::1] (a DNS-rebinding defence).",
                        echo(&host)
                    );
                    return Some(Handled::refused(refusal(StatusCode::FORBIDDEN, message), None, "http_host_forbidden"));
                }
            }
        }
        let mut origins = headers.get_all(header::ORIGIN).iter().peekable();
        origins.peek()?;
        let origins: Vec<String> = origins.map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned()).collect();
        // Two Origin headers are not something a browser sends; refuse rather than pick one.
        if origins.len() == 1 && self.origins.allows(&origins[0]) {
            return None;
        }
        let shown = echo(&origins.join(", "));
        let message = match &self.origins {
            OriginPolicy::Loopback => format!(
                "Origin {shown:?} is not allowed: by default only pages served from this machine may call this server. Start it with --allow-origin ORIGIN to allow another origin."
            ),
            OriginPolicy::Only(_) => format!("Origin {shown:?} is not in this server's --allow-origin list."),
        };
        Some(Handled::refused(refusal(StatusCode::FORBIDDEN, message), None, "http_origin_forbidden"))
    }

    fn authenticate(&self, headers: &HeaderMap) -> Result<&str, Box<Handled>> {
        let mut values = headers.get_all(header::AUTHORIZATION).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            let present = headers.contains_key(header::AUTHORIZATION);
            return Err(if present {
                unauthorized(true, "Send exactly one Authorization header.")
            } else {
                unauthorized(false, "Authentication required: send Authorization: Bearer TOKEN, with the token of a principal in the server's configuration.")
            });
        };
        let text = value.to_str().unwrap_or("");
        let (scheme, token) = text.trim().split_once(' ').unwrap_or((text.trim(), ""));
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(unauthorized(false, "Only bearer tokens are accepted: send Authorization: Bearer TOKEN."));
        }
        let token = token.trim();
        self.tokens.principal(token).ok_or_else(|| {
            unauthorized(true, "The bearer token is not recognized: use the token of a principal in the server's configuration.")
        })
    }
}

fn unauthorized(token_given: bool, message: &str) -> Box<Handled> {
    let challenge = if token_given {
        format!("Bearer realm=\"{AUTH_REALM}\", error=\"invalid_token\", error_description=\"the token is not recognized\"")
    } else {
        format!("Bearer realm=\"{AUTH_REALM}\"")
    };
    let response = with_header(
        refusal(StatusCode::UNAUTHORIZED, message.to_string()),
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
        let message = "Content-Type must be application/json (UTF-8): the body is one JSON-RPC message.";
        return Some(Handled::refused(
            refusal(StatusCode::UNSUPPORTED_MEDIA_TYPE, message),
            Some(principal),
            "http_unsupported_media_type",
        ));
    }
    let accept: Vec<&str> = headers.get_all(header::ACCEPT).iter().filter_map(|value| value.to_str().ok()).collect();
    if !accepts(&accept, "application", "json") || !accepts(&accept, "text", "event-stream") {
        let message = "Accept must list both application/json and text/event-stream: the server may answer with either.";
        return Some(Handled::refused(refusal(StatusCode::NOT_ACCEPTABLE, message), Some(principal), "http_not_acceptable"));
    }
    None
}

/// `application/json`, optionally with parameters; a `charset` parameter must say UTF-8 (JSON is UTF-8).
pub fn is_json_content_type(value: &str) -> bool {
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

fn json_response(status: StatusCode, message: &serde_json::Value) -> Response {
    let body = serde_json::to_vec(message).expect("serializing a serde_json::Value cannot fail");
    (status, [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], Body::from(body)).into_response()
}

fn refusal(status: StatusCode, message: impl Into<String>) -> Response {
    (status, plain(message.into())).into_response()
}

fn plain(message: String) -> ([(HeaderName, HeaderValue); 1], String) {
    ([(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"))], format!("{message}\n"))
}

fn with_header(mut response: Response, name: HeaderName, value: HeaderValue) -> Response {
    response.headers_mut().insert(name, value);
    response
}

fn echo(text: &str) -> String {
    text.chars().take(ECHO_CHARS_MAX).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_normalize_to_scheme_host_port() {
        assert_eq!(normalize_origin("HTTPS://App.Example.com:443").as_deref(), Some("https://app.example.com"));
        assert_eq!(normalize_origin("http://localhost:6274").as_deref(), Some("http://localhost:6274"));
        assert_eq!(normalize_origin("http://[::1]:80").as_deref(), Some("http://[::1]"));
        for bad in ["null", "", "file://", "ftp://x", "http://", "http://a/b", "http://a:99999", "http://a:", "http://u@a", "http://[::1"] {
            assert_eq!(normalize_origin(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn loopback_policy_allows_only_this_machine() {
        let policy = OriginPolicy::Loopback;
        for allowed in ["http://localhost:6274", "http://127.0.0.1", "https://[::1]:8443", "http://LOCALHOST", "http://127.0.0.2:1"] {
            assert!(policy.allows(allowed), "{allowed}");
        }
        for refused in ["http://evil.example", "http://localhost.evil.example", "http://127.0.0.1.nip.io", "null", "http://[::2]"] {
            assert!(!policy.allows(refused), "{refused}");
        }
    }

    #[test]
    fn an_allowlist_replaces_the_loopback_default() {
        let policy = OriginPolicy::from_allowed(&["https://app.example.com/".into()]).unwrap();
        assert!(policy.allows("https://app.example.com"));
        assert!(policy.allows("https://APP.example.com:443"));
        assert!(!policy.allows("http://app.example.com"));
        assert!(!policy.allows("http://localhost"));
        let error = OriginPolicy::from_allowed(&["app.example.com".into()]).unwrap_err();
        assert!(error.contains("scheme://host"), "{error}");
    }

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
        let (server, _) = crate::transport::build_notes_server(&crate::config::Deployment::demo(), None).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let tokens = Tokens::new(crate::config::Deployment::demo().tokens());
        let options = HttpOptions { requests_in_flight_max: 0, ..HttpOptions::default() };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(serve_http(listener, router(Arc::new(server), tokens, options, address), async move {
            let _ = stopped.await;
        }));
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
