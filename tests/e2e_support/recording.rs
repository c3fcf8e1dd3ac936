//! A recording reverse proxy for end-to-end tests: a client under test talks to the proxy, the proxy forwards
//! each HTTP request to the real server unchanged and keeps what crossed the wire. It lets a test check what a
//! third-party client *sent* (a fresh id on the retry, the `requestState` echoed byte for byte), which the
//! client's own API never shows.
//!
//! Responses are buffered whole before they are passed on, so it suits exchanges that end (JSON replies, SSE
//! streams that close), not an open subscription stream.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, StatusCode};
use axum::response::Response;
use axum::Router;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use tokio::task::JoinHandle;

/// Exchanges a proxy keeps before it refuses more (a bound, not a buffer that grows with a runaway client).
pub const RECORDED_EXCHANGES_MAX: usize = 1_000;
/// Largest request or response body the proxy carries.
pub const PROXIED_BODY_BYTES_MAX: usize = 4 * 1024 * 1024;

/// One HTTP request and its answer, as they crossed the proxy.
#[derive(Debug, Clone)]
pub struct RecordedExchange {
    pub method: String,
    /// The request body parsed as JSON (`Value::Null` when it is empty or not JSON).
    pub request: Value,
    pub status: u16,
    pub content_type: String,
    /// The response body: parsed JSON, or for an SSE stream the JSON of each `data:` line, in order.
    pub responses: Vec<Value>,
}

impl RecordedExchange {
    /// The JSON-RPC method of the request, if it has one.
    pub fn rpc_method(&self) -> Option<&str> {
        self.request["method"].as_str()
    }

    /// The JSON-RPC response to the request (the message whose id matches), if one came back.
    pub fn rpc_response(&self) -> Option<&Value> {
        self.responses.iter().find(|message| message.get("id").is_some() && message["id"] == self.request["id"])
    }
}

struct Upstream {
    url: String,
    client: reqwest::Client,
    recorded: Arc<Mutex<Vec<RecordedExchange>>>,
}

/// A proxy listening on `127.0.0.1:<free port>` in front of one upstream URL; stops when dropped.
pub struct RecordingProxy {
    pub url: String,
    recorded: Arc<Mutex<Vec<RecordedExchange>>>,
    task: JoinHandle<()>,
}

impl RecordingProxy {
    /// Starts a proxy whose every request goes to `upstream_url` (the path the client uses is not consulted:
    /// one proxy stands for one endpoint).
    pub async fn start(upstream_url: &str) -> RecordingProxy {
        let recorded = Arc::new(Mutex::new(Vec::new()));
        let upstream = Arc::new(Upstream { url: upstream_url.to_string(), client: reqwest::Client::new(), recorded: recorded.clone() });
        let router = Router::new().fallback(forward).with_state(upstream);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port is free");
        let address = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        RecordingProxy { url: format!("http://{address}/mcp"), recorded, task }
    }

    /// Everything recorded so far, in the order the answers came back.
    pub fn exchanges(&self) -> Vec<RecordedExchange> {
        self.recorded.lock().unwrap().clone()
    }
}

impl Drop for RecordingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Hop-by-hop headers and those the HTTP client sets itself; every other header passes unchanged.
fn forwarded(headers: &HeaderMap) -> impl Iterator<Item = (&HeaderName, &axum::http::HeaderValue)> {
    headers.iter().filter(|(name, _)| {
        !matches!(name.as_str(), "host" | "content-length" | "connection" | "transfer-encoding" | "keep-alive" | "upgrade")
    })
}

async fn forward(State(upstream): State<Arc<Upstream>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, PROXIED_BODY_BYTES_MAX).await else {
        return status_only(StatusCode::PAYLOAD_TOO_LARGE);
    };
    let method = reqwest::Method::from_bytes(parts.method.as_str().as_bytes()).expect("an HTTP method stays one");
    let mut outgoing = upstream.client.request(method, &upstream.url).body(body.clone());
    for (name, value) in forwarded(&parts.headers) {
        outgoing = outgoing.header(name.as_str(), value.as_bytes());
    }
    let Ok(answer) = outgoing.send().await else { return status_only(StatusCode::BAD_GATEWAY) };
    let status = answer.status().as_u16();
    let headers: Vec<(String, Vec<u8>)> = answer
        .headers()
        .iter()
        .filter(|(name, _)| !matches!(name.as_str(), "content-length" | "connection" | "transfer-encoding"))
        .map(|(name, value)| (name.as_str().to_string(), value.as_bytes().to_vec()))
        .collect();
    let content_type = answer.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let Ok(answer_body) = answer.bytes().await else { return status_only(StatusCode::BAD_GATEWAY) };
    {
        let mut recorded = upstream.recorded.lock().unwrap();
        if recorded.len() >= RECORDED_EXCHANGES_MAX {
            return status_only(StatusCode::INSUFFICIENT_STORAGE);
        }
        recorded.push(RecordedExchange {
            method: parts.method.to_string(),
            request: serde_json::from_slice(&body).unwrap_or(Value::Null),
            status,
            responses: parse_messages(&content_type, &answer_body),
            content_type,
        });
    }
    let mut response = Response::builder().status(status);
    for (name, value) in headers {
        response = response.header(name, value);
    }
    response.body(Body::from(answer_body)).expect("headers copied from a valid response are valid")
}

fn parse_messages(content_type: &str, body: &Bytes) -> Vec<Value> {
    if content_type.starts_with("text/event-stream") {
        String::from_utf8_lossy(body)
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str(data.trim()).ok())
            .collect()
    } else {
        serde_json::from_slice(body).map(|message| vec![message]).unwrap_or_default()
    }
}

fn status_only(status: StatusCode) -> Response {
    Response::builder().status(status).body(Body::empty()).unwrap()
}
