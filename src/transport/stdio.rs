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
use crate::framework::{handle_exchange, Reply, Service};
use crate::wire::jsonrpc::{error_response, payload_too_large, MESSAGE_BYTES_MAX};
use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader};

/// Serves `service` for `principal` on the process's stdin and stdout until stdin ends.
pub(crate) async fn serve_stdio<S: Service + ?Sized>(service: &S, principal: &str) -> std::io::Result<()> {
    serve_lines(service, principal, BufReader::new(tokio::io::stdin()), tokio::io::stdout()).await
}

/// Serves newline-delimited JSON-RPC from `input` to `output` until `input` ends.
///
/// A closed `output` (the client went away) also ends the server cleanly; other I/O errors are returned.
pub(crate) async fn serve_lines<S, R, W>(service: &S, principal: &str, input: R, mut output: W) -> std::io::Result<()>
where
    S: Service + ?Sized,
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut lines = BoundedLines::new(input, MESSAGE_BYTES_MAX);
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
    /// Inside an overlong line already answered: discard up to and including its `\n`.
    skipping: bool,
}

impl<R: AsyncBufRead + Unpin> BoundedLines<R> {
    fn new(reader: R, line_bytes_max: usize) -> Self {
        BoundedLines { reader, line_bytes_max, skipping: false }
    }

    async fn next_line(&mut self) -> std::io::Result<Line> {
        let mut line = Vec::new();
        loop {
            let available = self.reader.fill_buf().await?;
            if available.is_empty() {
                let skipped = std::mem::take(&mut self.skipping);
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
            if line.len() + chunk.len() > self.line_bytes_max + 1 {
                self.reader.consume(consumed);
                self.skipping = newline.is_none();
                return Ok(Line::TooLong);
            }
            line.extend_from_slice(chunk);
            self.reader.consume(consumed);
            if newline.is_some() {
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
