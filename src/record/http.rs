//! `mcpsim record --http`: a reverse proxy on a loopback address in front of one server URL. Every request (any
//! method, any path: `POST`, `GET` and `DELETE` of the MCP endpoint, and whatever else the client asks) is
//! forwarded to the same path on the upstream's host, its body and headers as they came (less the hop-by-hop
//! ones, RFC 9110 §7.6.1); the answer comes back the same way, an event stream relayed chunk by chunk as it
//! arrives. The request's `http` event and body are recorded before it is forwarded; a JSON answer's head and
//! body together once read; an event stream's head at once, then each event's data as its last chunk passes.

use super::{Direction, Lifecycle, Piece, Recorder, SseEvents, HELD_BYTES_MAX};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::future::IntoFuture;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

/// Most bytes of a request body read (the body is read whole, recorded, then forwarded); a larger one is
/// refused with 413 and not forwarded.
pub const REQUEST_BYTES_MAX: usize = HELD_BYTES_MAX;
/// How long open exchanges get to finish once the proxy is told to stop.
pub const STOP_GRACE: Duration = Duration::from_secs(2);
/// Event-stream chunks read ahead of a slow client.
const CHUNKS_BUFFERED: usize = 16;

/// Fields that belong to one connection (RFC 9110 §7.6.1): never forwarded.
const HOP_BY_HOP: [&str; 8] =
    ["connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade"];

struct Proxy {
    /// `http://host:port` of the upstream (its path is the client's).
    origin: String,
    client: Client<HttpConnector, Full<Bytes>>,
    recorder: Arc<Recorder>,
    stopping: watch::Receiver<bool>,
}

/// Serves the proxy on `listener` until `stopping` turns true, then lets open exchanges finish for
/// [`STOP_GRACE`] (event streams end at once, between two chunks).
pub async fn serve(listener: TcpListener, upstream: &Uri, recorder: Arc<Recorder>, stopping: watch::Receiver<bool>) -> std::io::Result<()> {
    let origin = format!("http://{}", upstream.authority().map_or("127.0.0.1", |authority| authority.as_str()));
    let client = Client::builder(TokioExecutor::new()).build_http();
    let proxy = Arc::new(Proxy { origin, client, recorder, stopping: stopping.clone() });
    let router = Router::new().fallback(forward).with_state(proxy);
    let mut stop = stopping.clone();
    let server = axum::serve(listener, router).with_graceful_shutdown(async move {
        let _ = stop.wait_for(|stopping| *stopping).await;
    });
    let mut stop = stopping;
    tokio::select! {
        served = server.into_future() => served,
        () = async { let _ = stop.wait_for(|stopping| *stopping).await; tokio::time::sleep(STOP_GRACE).await } => {
            // Connections still open after the grace period (a client holding a keep-alive) are dropped.
            Ok(())
        }
    }
}

/// The (name, value) pairs of `headers`, in order, a value that is not text as `None`.
fn pairs(headers: &HeaderMap) -> Vec<(String, Option<String>)> {
    headers.iter().map(|(name, value)| (name.as_str().to_string(), value.to_str().ok().map(str::to_string))).collect()
}

/// `headers` less the hop-by-hop fields, those `Connection` names, and `also`.
fn forwardable(headers: &HeaderMap, also: &[HeaderName]) -> HeaderMap {
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|token| token.trim().to_ascii_lowercase())
        .collect();
    let mut kept = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let name_text = name.as_str();
        if HOP_BY_HOP.contains(&name_text) || named.iter().any(|token| token == name_text) || also.contains(name) {
            continue;
        }
        kept.append(name.clone(), value.clone());
    }
    kept
}

fn plain(status: StatusCode, text: String) -> Response {
    (status, [(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"))], text).into_response()
}

async fn forward(State(proxy): State<Arc<Proxy>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = match Limited::new(body, REQUEST_BYTES_MAX).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => {
            let text = format!(
                "mcpsim record: the request body could not be read whole ({error}; at most {REQUEST_BYTES_MAX} bytes); not forwarded"
            );
            eprintln!("{text}");
            return plain(StatusCode::PAYLOAD_TOO_LARGE, text);
        }
    };
    proxy.recorder.http_request(parts.method.as_str(), &pairs(&parts.headers), &body);
    let path = parts.uri.path_and_query().map_or("/", |path| path.as_str());
    let target = format!("{}{path}", proxy.origin);
    let mut upstream = hyper::Request::new(Full::new(body));
    *upstream.method_mut() = parts.method.clone();
    *upstream.uri_mut() = match target.parse() {
        Ok(uri) => uri,
        Err(error) => return plain(StatusCode::BAD_REQUEST, format!("mcpsim record: {target:?} is not a URL: {error}")),
    };
    // The client's Host names the proxy: the upstream gets its own (hyper's client sets it). Compression is
    // not asked for, so the recorder reads the bodies it forwards.
    *upstream.headers_mut() = forwardable(&parts.headers, &[header::HOST, header::CONTENT_LENGTH, header::ACCEPT_ENCODING]);
    match proxy.client.request(upstream).await {
        Ok(response) => relay(&proxy, response).await,
        Err(error) => {
            let text = format!("mcpsim record: cannot reach the upstream {}: {}", proxy.origin, with_causes(&error));
            eprintln!("{text}");
            // The 502 is ours, not the server's: the trace says the transport failed.
            proxy.recorder.lifecycle(Direction::ServerToClient, Lifecycle::Abort);
            plain(StatusCode::BAD_GATEWAY, text)
        }
    }
}

async fn relay(proxy: &Arc<Proxy>, response: hyper::Response<hyper::body::Incoming>) -> Response {
    let (parts, incoming) = response.into_parts();
    let headers = pairs(&parts.headers);
    let event_stream = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.trim_start().to_ascii_lowercase().starts_with("text/event-stream"));
    let body = if event_stream {
        proxy.recorder.http_response(parts.status.as_u16(), &headers, None);
        let (sender, receiver) = mpsc::channel(CHUNKS_BUFFERED);
        tokio::spawn(pump_events(incoming, sender, proxy.recorder.clone(), proxy.stopping.clone()));
        Body::from_stream(Chunks { receiver })
    } else {
        match Limited::new(incoming, HELD_BYTES_MAX).collect().await {
            Ok(collected) => {
                let bytes = collected.to_bytes();
                proxy.recorder.http_response(parts.status.as_u16(), &headers, Some(&bytes));
                Body::from(bytes)
            }
            Err(error) => {
                let text =
                    format!("mcpsim record: the upstream's answer could not be read whole ({error}; at most {HELD_BYTES_MAX} bytes)");
                eprintln!("{text}");
                proxy.recorder.http_response(parts.status.as_u16(), &headers, None);
                proxy.recorder.lifecycle(Direction::ServerToClient, Lifecycle::Abort);
                return plain(StatusCode::BAD_GATEWAY, text);
            }
        }
    };
    let mut relayed = Response::new(body);
    *relayed.status_mut() = parts.status;
    *relayed.headers_mut() = forwardable(&parts.headers, &[header::CONTENT_LENGTH]);
    relayed
}

/// Reads an event stream from the upstream, records each event's data, and passes every chunk on after the
/// events it completes are recorded. Ends when the upstream's stream ends or fails, the client goes away
/// (the channel closes), or the proxy stops.
async fn pump_events(
    mut incoming: hyper::body::Incoming,
    sender: mpsc::Sender<Result<Bytes, std::io::Error>>,
    recorder: Arc<Recorder>,
    mut stopping: watch::Receiver<bool>,
) {
    let mut events = SseEvents::new(HELD_BYTES_MAX);
    loop {
        let frame = tokio::select! {
            frame = incoming.frame() => frame,
            _ = stopping.wait_for(|stopping| *stopping) => return,
        };
        let chunk = match frame {
            None => return,
            Some(Err(error)) => {
                eprintln!("mcpsim record: the upstream's event stream was cut off ({error}); the client sees it cut too");
                recorder.lifecycle(Direction::ServerToClient, Lifecycle::Abort);
                let _ = sender.send(Err(std::io::Error::other(error.to_string()))).await;
                return;
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(chunk) => chunk,
                Err(_) => continue,
            },
        };
        for piece in events.push(&chunk) {
            match piece {
                Piece::Line(data) => recorder.message(Direction::ServerToClient, &data),
                Piece::Unheld(bytes) => recorder.unheld(Direction::ServerToClient, bytes),
            }
        }
        if sender.send(Ok(chunk)).await.is_err() {
            return;
        }
    }
}

/// The relayed chunks of an event stream, as the body axum writes out.
struct Chunks {
    receiver: mpsc::Receiver<Result<Bytes, std::io::Error>>,
}

impl futures_core::Stream for Chunks {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.receiver.poll_recv(context)
    }
}

/// An error and its causes (a client error's own message names only the outermost).
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    for _ in 0..8 {
        let Some(next) = cause else { break };
        let next_text = next.to_string();
        if !text.contains(&next_text) {
            text.push_str(&format!(": {next_text}"));
        }
        cause = next.source();
    }
    text
}
