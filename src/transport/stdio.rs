//! Newline-delimited JSON-RPC over stdin/stdout (MCP's stdio transport).
//!
//! One message per line in, one compact JSON line out per response, flushed at once. The principal is fixed
//! for the whole process: whoever started it is who it serves (stdio carries no credentials). Lines are read
//! with a bounded reader: a line longer than [`MESSAGE_BYTES_MAX`] is answered with `payload_too_large` as soon
//! as the limit is crossed and the rest of it is skipped without being buffered. Messages are handled one at a
//! time, in order. End of input ends the server cleanly. Only JSON-RPC goes to stdout; logs go to stderr.
//!
//! Request-scoped notifications (progress, log messages) are written as lines before their response. A
//! subscription (`subscriptions/listen`) is not held open: messages are handled one at a time, so the
//! acknowledgement is written and the subscription ends at once with its closing result.

use super::{log_request, outcome_of, MessageSummary, Stopwatch};
use crate::eras::{is_initialize, Channel, ClientLink, LegacyAdapter, LEGACY_ANSWER_TIMEOUT_MS};
use crate::framework::{handle_exchange, Reply, Service};
use crate::wire::errors::RpcError;
use crate::wire::jsonrpc::{error_response, payload_too_large, MESSAGE_BYTES_MAX};
use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader};

/// Serves `service` for `principal` on the process's stdin and stdout until stdin ends; with `legacy`, a
/// process whose first request is `initialize` is served as a 2025-11-25 session through the adapter.
pub(crate) async fn serve_stdio<S: Service + ?Sized>(service: &S, legacy: Option<&LegacyAdapter>, principal: &str) -> std::io::Result<()> {
    serve_lines_eras(service, legacy, principal, BufReader::new(tokio::io::stdin()), tokio::io::stdout()).await
}

/// Serves newline-delimited JSON-RPC from `input` to `output` until `input` ends (MCP 2026-07-28 only).
///
/// A closed `output` (the client went away) also ends the server cleanly; other I/O errors are returned.
#[cfg(test)]
pub(crate) async fn serve_lines<S, R, W>(service: &S, principal: &str, input: R, output: W) -> std::io::Result<()>
where
    S: Service + ?Sized,
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    serve_lines_eras(service, None, principal, input, output).await
}

/// The client end of a legacy stdio call: messages are queued for stdout (written by the loop, in order).
struct StdioLink {
    sender: tokio::sync::mpsc::Sender<Value>,
}

#[async_trait::async_trait]
impl ClientLink for StdioLink {
    async fn send(&self, message: Value) -> bool {
        self.sender.send(message).await.is_ok()
    }

    async fn wait(&self, answer: tokio::sync::oneshot::Receiver<Value>) -> Option<Value> {
        tokio::time::timeout(std::time::Duration::from_millis(LEGACY_ANSWER_TIMEOUT_MS), answer).await.ok()?.ok()
    }
}

/// Serves newline-delimited JSON-RPC from `input` to `output` until `input` ends, legacy sessions included
/// when `legacy` is given: an `initialize` selects legacy semantics for the rest of the process.
pub(crate) async fn serve_lines_eras<S, R, W>(
    service: &S,
    legacy: Option<&LegacyAdapter>,
    principal: &str,
    input: R,
    mut output: W,
) -> std::io::Result<()>
where
    S: Service + ?Sized,
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut lines = BoundedLines::new(input, MESSAGE_BYTES_MAX);
    // The first message decides the process's era: an `initialize` makes it a legacy session for good;
    // anything else makes it modern, so a later `initialize` gets the modern `-32601`.
    let mut legacy_process: Option<bool> = None;
    loop {
        let stopwatch = Stopwatch::start();
        let (summary, notifications, reply) = match lines.next_line().await? {
            Line::End => return Ok(()),
            Line::TooLong => {
                let error = payload_too_large(None);
                (
                    MessageSummary::default(),
                    Vec::new(),
                    Reply { response: Some(error_response(None, &error)), http_status: error.http_status },
                )
            }
            Line::Message(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => continue,
            Line::Message(bytes) if legacy.is_some() && *legacy_process.get_or_insert_with(|| is_initialize(&bytes)) => {
                let adapter = legacy.expect("checked just above");
                match legacy_call(adapter, principal, &bytes, &mut lines, &mut output).await? {
                    Some(reply) => (MessageSummary::of(&bytes), Vec::new(), reply),
                    None => return Ok(()),
                }
            }
            Line::Message(bytes) => {
                // An open feed is dropped here, unread: that ends the subscription (see the module doc).
                let exchange = handle_exchange(service, principal, &bytes, None).await;
                (MessageSummary::of(&bytes), exchange.notifications, exchange.reply)
            }
        };
        log_request("stdio", principal, &summary, reply.http_status, &outcome_of(&reply), &stopwatch);
        for message in notifications.iter().chain(&reply.response) {
            match write_line(&mut output, message).await {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {
                    tracing::info!("stdout closed by the client; stopping");
                    return Ok(());
                }
                Err(error) => return Err(error),
            }
        }
    }
}

/// One legacy message. While its call waits for the client, lines keep being read: answers go to the
/// adapter, a `ping` is answered, anything else is refused (one call at a time). `None`: input ended or
/// output closed meanwhile.
async fn legacy_call<R, W>(
    adapter: &LegacyAdapter,
    principal: &str,
    bytes: &[u8],
    lines: &mut BoundedLines<R>,
    output: &mut W,
) -> std::io::Result<Option<Reply>>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (sender, mut outgoing) = tokio::sync::mpsc::channel::<Value>(16);
    let link = StdioLink { sender };
    let call = adapter.handle(principal, Channel::Stdio, bytes, &link);
    tokio::pin!(call);
    let reply = loop {
        tokio::select! {
            biased;
            Some(message) = outgoing.recv() => {
                if !write_or_closed(output, &message).await? {
                    return Ok(None);
                }
            }
            reply = &mut call => break reply,
            line = lines.next_line() => match line? {
                Line::End => return Ok(None),
                Line::TooLong => {
                    let error = payload_too_large(None);
                    if !write_or_closed(output, &error_response(None, &error)).await? {
                        return Ok(None);
                    }
                }
                Line::Message(inner) if inner.iter().all(u8::is_ascii_whitespace) => {}
                Line::Message(inner) => {
                    let answer = if is_request(&inner, "ping") || !is_any_request(&inner) {
                        adapter.handle(principal, Channel::Stdio, &inner, &link).await.response
                    } else {
                        let id = serde_json::from_slice::<Value>(&inner).ok().and_then(|v| v.get("id").and_then(crate::wire::RequestId::from_json));
                        let error = RpcError::invalid_request("one call at a time: this server is waiting for your answer to its request");
                        Some(error_response(id.as_ref(), &error))
                    };
                    if let Some(answer) = answer {
                        if !write_or_closed(output, &answer).await? {
                            return Ok(None);
                        }
                    }
                }
            },
        }
    };
    while let Ok(message) = outgoing.try_recv() {
        if !write_or_closed(output, &message).await? {
            return Ok(None);
        }
    }
    Ok(Some(Reply { response: reply.response, http_status: reply.http_status }))
}

fn is_request(raw: &[u8], method: &str) -> bool {
    serde_json::from_slice::<Value>(raw).is_ok_and(|v| v.get("id").is_some() && v.get("method").and_then(Value::as_str) == Some(method))
}

fn is_any_request(raw: &[u8]) -> bool {
    serde_json::from_slice::<Value>(raw).is_ok_and(|v| v.get("id").is_some() && v.get("method").is_some())
}

/// Writes one line; false when the client closed stdout.
async fn write_or_closed<W: AsyncWrite + Unpin>(output: &mut W, message: &Value) -> std::io::Result<bool> {
    match write_line(output, message).await {
        Ok(()) => Ok(true),
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(error) => Err(error),
    }
}

async fn write_line<W: AsyncWrite + Unpin>(output: &mut W, response: &Value) -> std::io::Result<()> {
    // Compact serialization escapes every newline inside strings, so one response is exactly one line.
    let mut bytes = serde_json::to_vec(response).expect("serializing a serde_json::Value cannot fail");
    bytes.push(b'\n');
    output.write_all(&bytes).await?;
    output.flush().await
}

/// One unit read from the input.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// A complete line without its `\n` (and without a trailing `\r`).
    Message(Vec<u8>),
    /// A line exceeded the limit; what was read of it is dropped and the rest will be skipped.
    TooLong,
    /// End of input.
    End,
}

/// A line reader that never holds more than `line_bytes_max` (+1 for a `\r`) bytes of one line.
struct BoundedLines<R> {
    reader: R,
    line_bytes_max: usize,
    /// The line read so far: kept here, not in a local, so a `next_line` cancelled by `select!` loses nothing.
    partial: Vec<u8>,
    /// Inside an overlong line already answered: discard up to and including its `\n`.
    skipping: bool,
}

impl<R: AsyncBufRead + Unpin> BoundedLines<R> {
    fn new(reader: R, line_bytes_max: usize) -> Self {
        BoundedLines { reader, line_bytes_max, partial: Vec::new(), skipping: false }
    }

    async fn next_line(&mut self) -> std::io::Result<Line> {
        loop {
            let available = self.reader.fill_buf().await?;
            if available.is_empty() {
                let skipped = std::mem::take(&mut self.skipping);
                let line = std::mem::take(&mut self.partial);
                return Ok(if skipped || line.is_empty() { Line::End } else { self.finish(line) });
            }
            let newline = available.iter().position(|&byte| byte == b'\n');
            let chunk = &available[..newline.unwrap_or(available.len())];
            let consumed = chunk.len() + usize::from(newline.is_some());
            if self.skipping {
                self.reader.consume(consumed);
                self.skipping = newline.is_none();
                continue;
            }
            // The +1 leaves room for the `\r` of a CRLF line end, stripped in `finish`.
            if self.partial.len() + chunk.len() > self.line_bytes_max + 1 {
                self.reader.consume(consumed);
                self.skipping = newline.is_none();
                self.partial.clear();
                return Ok(Line::TooLong);
            }
            self.partial.extend_from_slice(chunk);
            self.reader.consume(consumed);
            if newline.is_some() {
                let line = std::mem::take(&mut self.partial);
                return Ok(self.finish(line));
            }
        }
    }

    fn finish(&self, mut line: Vec<u8>) -> Line {
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if line.len() > self.line_bytes_max {
            Line::TooLong
        } else {
            Line::Message(line)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assembly::demo_notes_server;
    use serde_json::json;

    async fn read_all(input: &[u8], line_bytes_max: usize) -> Vec<Line> {
        // A tiny buffer makes lines span many reads, as a slow pipe would.
        let mut lines = BoundedLines::new(BufReader::with_capacity(3, input), line_bytes_max);
        let mut out = Vec::new();
        loop {
            let line = lines.next_line().await.unwrap();
            let end = line == Line::End;
            out.push(line);
            if end {
                return out;
            }
        }
    }

    fn message(text: &str) -> Line {
        Line::Message(text.as_bytes().to_vec())
    }

    #[tokio::test]
    async fn lines_split_on_newlines_and_strip_crlf() {
        assert_eq!(read_all(b"ab\ncd\r\n\nlast", 10).await, [message("ab"), message("cd"), message(""), message("last"), Line::End]);
        assert_eq!(read_all(b"", 10).await, [Line::End]);
    }

    #[tokio::test]
    async fn an_overlong_line_is_reported_once_and_skipped() {
        assert_eq!(read_all(b"12345\nabcdefghijkl\nok\n", 5).await, [message("12345"), Line::TooLong, message("ok"), Line::End]);
        assert_eq!(read_all(b"12345\r\n123456\r\n", 5).await, [message("12345"), Line::TooLong, Line::End]);
        assert_eq!(read_all(b"abcdefghijklmnop", 5).await, [Line::TooLong, Line::End], "overlong to the end of input");
    }

    async fn converse(input: &str) -> Vec<Value> {
        let server = demo_notes_server();
        let mut output = Vec::new();
        serve_lines(&server, "alice", input.as_bytes(), &mut output).await.unwrap();
        String::from_utf8(output).unwrap().lines().map(|line| serde_json::from_str(line).unwrap()).collect()
    }

    fn request(id: u64, method: &str) -> String {
        let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}});
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {"_meta": meta}}).to_string()
    }

    #[tokio::test]
    async fn one_response_line_per_request_none_for_notifications_or_blank_lines() {
        let notification = r#"{"jsonrpc":"2.0","method":"tools/list","params":{}}"#;
        let input = format!("{}\n\n   \n{notification}\n{}\n", request(1, "tools/list"), request(2, "server/discover"));
        let responses = converse(&input).await;
        assert_eq!(responses.iter().map(|r| r["id"].clone()).collect::<Vec<_>>(), [json!(1), json!(2)]);
        assert_eq!(responses[0]["result"]["resultType"], "complete");
    }

    #[tokio::test]
    async fn an_overlong_line_gets_payload_too_large_and_the_next_line_is_served() {
        let input = format!("{}\n{}\n", "x".repeat(MESSAGE_BYTES_MAX + 10), request(3, "tools/list"));
        let responses = converse(&input).await;
        assert_eq!(responses.len(), 2);
        assert_eq!(responses[0]["id"], Value::Null);
        assert_eq!(responses[0]["error"]["code"], -32600);
        assert_eq!(responses[0]["error"]["data"]["reason"], "payload_too_large");
        assert_eq!(responses[1]["id"], 3);
    }

    #[tokio::test]
    async fn garbage_gets_a_parse_error_not_silence() {
        let responses = converse("{not json\n").await;
        assert_eq!(responses[0]["error"]["code"], -32700);
    }
}
