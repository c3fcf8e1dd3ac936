//! The HTTP client live mode is: plain HTTP/1.1 POSTs over hyper (already compiled in for the server side),
//! each bounded in time and in the size of what it reads back.

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;

/// A pooled HTTP/1.1 client (connections are kept alive between the requests of a run).
#[derive(Clone)]
pub struct HttpClient {
    client: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
    body_bytes_max: usize,
}

/// Why an exchange failed, in words for the person running it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostError {
    pub message: String,
    /// Nothing answered at the address at all (refused, unreachable): the fleet is not running there.
    pub unreachable: bool,
}

impl std::fmt::Display for PostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<String> for PostError {
    fn from(message: String) -> PostError {
        PostError { message, unreachable: false }
    }
}

/// What came back.
#[derive(Debug, Clone)]
pub struct HttpAnswer {
    pub status: u16,
    /// `Content-Type`, when it was text.
    pub content_type: Option<String>,
    /// `Mcp-Session-Id`, when the server minted or echoed one (a 2025-11-25 session; modern servers send none).
    pub session_id: Option<String>,
    pub body: Bytes,
}

impl HttpClient {
    /// Each exchange (connect, send, read the whole answer) must end within `timeout`; an answer longer than
    /// `body_bytes_max` is refused rather than read.
    pub fn new(timeout: Duration, body_bytes_max: usize) -> HttpClient {
        HttpClient { client: Client::builder(TokioExecutor::new()).build_http(), timeout, body_bytes_max }
    }

    /// POSTs `body` to `url` with `headers`. The error says what failed, in words for the person running it.
    pub async fn post(&self, url: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Result<HttpAnswer, PostError> {
        let request = post_request(url, headers, body)?;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| PostError { message: format!("POST {url} failed: {}", with_causes(&e)), unreachable: e.is_connect() })?;
            let status = response.status().as_u16();
            let (content_type, session_id) = (text_header(&response, "content-type"), text_header(&response, "mcp-session-id"));
            let body = Limited::new(response.into_body(), self.body_bytes_max)
                .collect()
                .await
                .map_err(|e| format!("reading the answer from {url} failed: {e} (at most {} bytes are read)", self.body_bytes_max))
                .map_err(PostError::from)?
                .to_bytes();
            Ok(HttpAnswer { status, content_type, session_id, body })
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(format!("POST {url} got no complete answer within {} ms", self.timeout.as_millis()).into()),
        }
    }
}

/// A POST of `body` to `url` with `headers`; a header value HTTP cannot carry is refused, named.
fn post_request(url: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Result<hyper::Request<Full<Bytes>>, PostError> {
    let mut request = hyper::Request::post(url);
    for (name, value) in headers {
        let value = hyper::header::HeaderValue::from_str(value)
            .map_err(|_| PostError::from(format!("the {name} header value {value:?} cannot be sent over HTTP (not visible ASCII)")))?;
        request = request.header(*name, value);
    }
    request.body(Full::new(Bytes::from(body))).map_err(|e| PostError::from(format!("POST {url}: not a request: {e}")))
}

/// A response header's value, when it is text.
fn text_header<B>(response: &hyper::Response<B>, name: &str) -> Option<String> {
    response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
}

/// An answer whose body is read as it arrives (an event stream a client must act on before it ends).
pub struct StreamedAnswer {
    pub status: u16,
    pub content_type: Option<String>,
    pub session_id: Option<String>,
    pub body: hyper::body::Incoming,
}

impl HttpClient {
    /// POSTs `body` to `url` with `headers` and returns once the answer's head arrived (within the timeout);
    /// the caller reads the body, bounding what it reads and how long it waits.
    pub async fn post_streamed(&self, url: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Result<StreamedAnswer, PostError> {
        let request = post_request(url, headers, body)?;
        let response = match tokio::time::timeout(self.timeout, self.client.request(request)).await {
            Ok(response) => response
                .map_err(|e| PostError { message: format!("POST {url} failed: {}", with_causes(&e)), unreachable: e.is_connect() })?,
            Err(_) => return Err(format!("POST {url} got no answer within {} ms", self.timeout.as_millis()).into()),
        };
        let (content_type, session_id) = (text_header(&response, "content-type"), text_header(&response, "mcp-session-id"));
        Ok(StreamedAnswer { status: response.status().as_u16(), content_type, session_id, body: response.into_body() })
    }

    /// POSTs `body` to `url` with `headers` on a connection of its own, and closes that connection as soon as
    /// the request's last byte is written, before any byte of the answer is read: a client that stops waiting
    /// (a lost answer). `Ok` once written; the server may or may not go on to process it, on its own timing.
    /// Only `http://HOST:PORT/…` URLs (a target's loopback instances, a live fleet's plain-HTTP URLs).
    pub async fn post_and_close(&self, url: &str, headers: &[(&str, &str)], body: &[u8]) -> Result<(), PostError> {
        use tokio::io::AsyncWriteExt;
        let uri: hyper::Uri = url.parse().map_err(|e| PostError::from(format!("POST {url}: not a URL: {e}")))?;
        if uri.scheme_str() != Some("http") {
            return Err(PostError::from(format!("POST {url}: closing the connection before the answer is built for http:// URLs only")));
        }
        let host = uri.host().unwrap_or("127.0.0.1").trim_start_matches('[').trim_end_matches(']').to_string();
        let port = uri.port_u16().unwrap_or(80);
        let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let mut head = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            uri.authority().map(|a| a.as_str()).unwrap_or(&host),
            body.len()
        );
        for (name, value) in headers {
            if value.bytes().any(|b| !(b == b'\t' || (0x20..0x7f).contains(&b))) || name.bytes().any(|b| !b.is_ascii_graphic() || b == b':')
            {
                return Err(PostError::from(format!("the {name} header value {value:?} cannot be sent over HTTP (not visible ASCII)")));
            }
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let exchange = async {
            let mut stream = tokio::net::TcpStream::connect((host.as_str(), port))
                .await
                .map_err(|e| PostError { message: format!("POST {url} failed: {e}"), unreachable: true })?;
            stream.write_all(head.as_bytes()).await.map_err(|e| PostError::from(format!("POST {url}: writing the request failed: {e}")))?;
            stream.write_all(body).await.map_err(|e| PostError::from(format!("POST {url}: writing the request failed: {e}")))?;
            stream.flush().await.map_err(|e| PostError::from(format!("POST {url}: writing the request failed: {e}")))?;
            // Dropped unread: the kernel closes the connection (a reset if answer bytes arrive unread).
            drop(stream);
            Ok(())
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(written) => written,
            Err(_) => Err(format!("POST {url}: the request could not be written within {} ms", self.timeout.as_millis()).into()),
        }
    }
}

/// An error and its causes, one after another (a client error's own message names only the outermost).
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    // Bounded: an error chain is short, but nothing guarantees it.
    for _ in 0..8 {
        let Some(next) = cause else { break };
        text.push_str(&format!(": {next}"));
        cause = next.source();
    }
    text
}
