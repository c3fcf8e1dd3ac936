//! `mcpsim record`: real traffic between a client and a server written as an mcp-trace, the JSON Lines format of
//! `mcp-trace-capture` / `mcp-trace-validator` 0.6.0 (docs/recording.md, "The trace format", is the schema).
//!
//! * [`Recorder`]: one trace file: `seq` in line order, one lock over numbering and writing, every line flushed
//!   as it is written; secrets redacted ([`Redactor`]) before anything is serialized; bounded in size (a message
//!   over the per-message cap is written as a smaller valid message with a marker; a file at its size bound
//!   stops with a last event that says so, while the traffic goes on being forwarded).
//! * [`Framer`]: a byte stream cut into newline-ended lines (stdio) with a bound on what it holds, and
//!   [`SseEvents`] the `data` of server-sent events built on it.
//! * `http` (the reverse proxy) and `stdio` (the wrapper around a server command) move the bytes.
//!
//! Nothing here is deterministic by design: this is the real world, recorded. The secret key of the markers is
//! drawn from the OS for each recording and never written.

pub mod http;
pub mod stdio;

use hmac::{Hmac, Mac};
use rand_core::{OsRng, RngCore};
use serde_json::{json, Map, Value};
use sha2::Sha256;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::{Mutex, PoisonError};

/// Default bound on the whole file (`--max-bytes`): the validator's own default message size.
pub const MAX_BYTES_DEFAULT: u64 = 64 * 1024 * 1024;
/// Default bound on one message as written (`--max-message-bytes`).
pub const MAX_MESSAGE_BYTES_DEFAULT: usize = 4 * 1024 * 1024;
/// The smallest `--max-bytes` accepted: room for a few events and the closing one.
pub const MAX_BYTES_MIN: u64 = 4096;
/// The smallest `--max-message-bytes` accepted: room for a truncated message's envelope.
pub const MAX_MESSAGE_BYTES_MIN: usize = 512;
/// Most bytes of one message (a line, an SSE event) held in memory to be recorded; past it the message is
/// forwarded but not recorded (said on stderr), since it could not even be parsed for its id.
pub const HELD_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Bytes kept free at the end of a bounded file for its last event.
const TAIL_RESERVE: u64 = 512;

/// The headers `mcp-trace-capture` 0.6.0 records (its allowlist; `mcp-param-*` besides), kept as they are.
pub const RECORDED_HEADERS: [&str; 10] = [
    "host",
    "origin",
    "accept",
    "content-type",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
    "mcp-method",
    "mcp-name",
    "x-accel-buffering",
];
/// Headers recorded as they are beyond the allowlist: a challenge names a scheme and a realm, no secret.
const ALSO_RECORDED: [&str; 1] = ["www-authenticate"];
/// Headers always recorded redacted: credentials.
pub const REDACTED_HEADERS_DEFAULT: [&str; 4] = ["authorization", "cookie", "set-cookie", "x-api-key"];

/// Which way a message or event went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    ClientToServer,
    ServerToClient,
}

impl Direction {
    fn as_str(self) -> &'static str {
        match self {
            Direction::ClientToServer => "client-to-server",
            Direction::ServerToClient => "server-to-client",
        }
    }
}

/// The `transport` of every event of one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Stdio,
    StreamableHttp,
}

impl Transport {
    fn as_str(self) -> &'static str {
        match self {
            Transport::Stdio => "stdio",
            Transport::StreamableHttp => "streamable-http",
        }
    }
}

/// A `lifecycle` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    Open,
    Close,
    Abort,
}

impl Lifecycle {
    fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Open => "transport-open",
            Lifecycle::Close => "transport-close",
            Lifecycle::Abort => "transport-abort",
        }
    }
}

/// A JSON field path of `--redact-field`: keys from the message's root, `*` any one key or index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPath(Vec<String>);

impl FieldPath {
    /// `params.arguments.password`. Refuses an empty path or an empty segment.
    /// `params.arguments.password`; a dot inside a key is written `\.` (`params._meta.com\.example/auth.token`).
    /// Refuses an empty path or an empty segment.
    pub fn parse(text: &str) -> Result<FieldPath, String> {
        let mut segments = Vec::new();
        let mut segment = String::new();
        let mut characters = text.chars();
        while let Some(character) = characters.next() {
            match character {
                '\\' if characters.as_str().starts_with('.') => {
                    characters.next();
                    segment.push('.');
                }
                '.' => segments.push(std::mem::take(&mut segment)),
                other => segment.push(other),
            }
        }
        segments.push(segment);
        if text.trim().is_empty() || segments.iter().any(String::is_empty) {
            return Err(format!(
                "{text:?} is not a field path; write keys from the message's root joined by dots, e.g. params.arguments.password (* for any one key, \\. for a dot inside a key)"
            ));
        }
        Ok(FieldPath(segments))
    }
}

/// What is secret, and the key its markers are derived under.
pub struct Redactor {
    key: [u8; 32],
    headers: BTreeSet<String>,
    fields: Vec<FieldPath>,
}

impl Redactor {
    /// The default headers plus `extra_headers` (any case), and `fields`; the key drawn from the OS.
    pub fn new(extra_headers: &[String], fields: Vec<FieldPath>) -> Redactor {
        let mut key = [0u8; 32];
        OsRng.fill_bytes(&mut key);
        Redactor::with_key(key, extra_headers, fields)
    }

    fn with_key(key: [u8; 32], extra_headers: &[String], fields: Vec<FieldPath>) -> Redactor {
        let headers = REDACTED_HEADERS_DEFAULT
            .iter()
            .map(|name| name.to_string())
            .chain(extra_headers.iter().map(|name| name.trim().to_ascii_lowercase()))
            .collect();
        Redactor { key, headers, fields }
    }

    /// `<redacted:HHHHHHHHHHHH>`: twelve hex digits of HMAC-SHA256(key, secret).
    pub fn marker(&self, secret: &str) -> String {
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.key) else { unreachable!("HMAC takes a key of any length") };
        mac.update(secret.as_bytes());
        let digest = mac.finalize().into_bytes();
        let hex: String = digest[..6].iter().map(|byte| format!("{byte:02x}")).collect();
        format!("<redacted:{hex}>")
    }

    /// The headers a recording keeps, lowercased, repeated fields joined by `", "`, secrets redacted. `headers`
    /// are (name, value) pairs as received, in order; a value that is not UTF-8 is left out.
    pub fn headers(&self, headers: &[(String, Option<String>)]) -> BTreeMap<String, String> {
        let mut kept: BTreeMap<String, String> = BTreeMap::new();
        for (name, value) in headers {
            let name = name.to_ascii_lowercase();
            let redacted = self.headers.contains(&name);
            let recorded = redacted
                || RECORDED_HEADERS.contains(&name.as_str())
                || ALSO_RECORDED.contains(&name.as_str())
                || name.starts_with("mcp-param-");
            if !recorded {
                continue;
            }
            let Some(value) = value else { continue };
            let value = if redacted { self.header_value(&name, value) } else { value.clone() };
            match kept.get_mut(&name) {
                Some(joined) => {
                    joined.push_str(", ");
                    joined.push_str(&value);
                }
                None => {
                    kept.insert(name, value);
                }
            }
        }
        kept
    }

    fn header_value(&self, name: &str, value: &str) -> String {
        match name {
            // `Bearer TOKEN`: the scheme says what kind of credential it was.
            "authorization" => match value.trim().split_once(' ') {
                Some((scheme, credential)) => format!("{scheme} {}", self.marker(credential.trim())),
                None => self.marker(value.trim()),
            },
            // `a=1; b=2`: each cookie's name kept.
            "cookie" => value.split(';').map(|pair| self.cookie_pair(pair.trim())).collect::<Vec<_>>().join("; "),
            // `sid=SECRET; Path=/; HttpOnly`: the cookie's value only; its attributes are not secret.
            "set-cookie" => {
                let (pair, attributes) = value.split_once(';').map_or((value, None), |(pair, rest)| (pair, Some(rest)));
                let mut redacted = self.cookie_pair(pair.trim());
                if let Some(attributes) = attributes {
                    redacted.push(';');
                    redacted.push_str(attributes);
                }
                redacted
            }
            _ => self.marker(value.trim()),
        }
    }

    fn cookie_pair(&self, pair: &str) -> String {
        match pair.split_once('=') {
            Some((name, value)) => format!("{name}={}", self.marker(value)),
            None => self.marker(pair),
        }
    }

    /// `message` with every `--redact-field` path's value replaced by its marker (a batch: in each element).
    pub fn message(&self, message: &mut Value) {
        if self.fields.is_empty() {
            return;
        }
        match message {
            Value::Array(batch) => {
                for element in batch {
                    self.message(element);
                }
            }
            _ => {
                for path in &self.fields {
                    self.redact_at(message, &path.0);
                }
            }
        }
    }

    fn redact_at(&self, value: &mut Value, path: &[String]) {
        let Some((first, rest)) = path.split_first() else {
            let secret = match &*value {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            *value = Value::String(self.marker(&secret));
            return;
        };
        match value {
            Value::Object(object) if first == "*" => object.values_mut().for_each(|child| self.redact_at(child, rest)),
            Value::Object(object) => {
                if let Some(child) = object.get_mut(first) {
                    self.redact_at(child, rest);
                }
            }
            Value::Array(items) if first == "*" => items.iter_mut().for_each(|child| self.redact_at(child, rest)),
            Value::Array(items) => {
                if let Some(child) = first.parse::<usize>().ok().and_then(|index| items.get_mut(index)) {
                    self.redact_at(child, rest);
                }
            }
            _ => {}
        }
    }
}

/// The bounds of one recording.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// The whole file, in bytes.
    pub max_bytes: u64,
    /// One message's payload as written; a larger one is written truncated.
    pub max_message_bytes: usize,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds { max_bytes: MAX_BYTES_DEFAULT, max_message_bytes: MAX_MESSAGE_BYTES_DEFAULT }
    }
}

/// What a recording did, for the closing lines on stderr.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Events written.
    pub events: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Messages written truncated (over the per-message cap).
    pub truncated_messages: u64,
    /// Bodies, lines or SSE events that were not JSON (forwarded, not recorded).
    pub not_json: u64,
    /// Messages too large to hold ([`HELD_BYTES_MAX`]): forwarded, not recorded.
    pub unheld: u64,
    /// The `seq` of the first event not written because the file reached `--max-bytes`.
    pub stopped_at: Option<u64>,
    /// Events not written after the file reached its bound or a write failed.
    pub dropped: u64,
    /// The first write error.
    pub error: Option<String>,
}

struct Inner {
    sink: Box<dyn Write + Send>,
    summary: Summary,
    closed: bool,
}

/// One trace file being written. Every method takes `&self`: the proxy's connections and the wrapper's two pumps
/// share it; one lock orders numbering and writing, so `seq` is the order of the lines.
pub struct Recorder {
    inner: Mutex<Inner>,
    transport: Transport,
    redactor: Redactor,
    bounds: Bounds,
}

/// One event to write, before it has its `seq`.
type Pending = Map<String, Value>;

impl Recorder {
    pub fn new(sink: Box<dyn Write + Send>, transport: Transport, redactor: Redactor, bounds: Bounds) -> Recorder {
        Recorder { inner: Mutex::new(Inner { sink, summary: Summary::default(), closed: false }), transport, redactor, bounds }
    }

    #[cfg(test)]
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// An HTTP request (method, headers as received) and the message its body carries, as adjacent lines.
    pub fn http_request(&self, method: &str, headers: &[(String, Option<String>)], body: &[u8]) {
        let mut http = self.event(Direction::ClientToServer, "http");
        http.insert("method".into(), Value::String(method.to_ascii_uppercase()));
        self.insert_headers(&mut http, headers);
        let message = self.message_event(Direction::ClientToServer, body);
        self.write(std::iter::once(http).chain(message).collect());
    }

    /// An HTTP response's head, and the message of its body when it was read whole (`None`: an event stream,
    /// whose messages follow one by one).
    pub fn http_response(&self, status: u16, headers: &[(String, Option<String>)], body: Option<&[u8]>) {
        let mut http = self.event(Direction::ServerToClient, "http");
        http.insert("status".into(), json!(status));
        self.insert_headers(&mut http, headers);
        let message = body.and_then(|body| self.message_event(Direction::ServerToClient, body));
        self.write(std::iter::once(http).chain(message).collect());
    }

    /// One message (a stdio line, an SSE event's data): recorded when it is JSON.
    pub fn message(&self, direction: Direction, bytes: &[u8]) {
        if let Some(event) = self.message_event(direction, bytes) {
            self.write(vec![event]);
        }
    }

    /// A message too large to hold: forwarded, not recorded; counted and said.
    pub fn unheld(&self, direction: Direction, bytes: usize) {
        eprintln!(
            "mcpsim record: a {} message of more than {bytes} bytes was forwarded but not recorded (more than {HELD_BYTES_MAX} bytes cannot be held)",
            direction.as_str()
        );
        self.lock().summary.unheld += 1;
    }

    /// A `lifecycle` event.
    pub fn lifecycle(&self, direction: Direction, event: Lifecycle) {
        let mut pending = self.event(direction, "lifecycle");
        pending.insert("event".into(), Value::String(event.as_str().into()));
        self.write(vec![pending]);
    }

    /// The last event, then nothing more is written (a straggling pump records nothing after it). Not written
    /// when the file already ended at its bound (that event is the last). Returns what the recording did.
    pub fn close(&self, direction: Direction, event: Lifecycle) -> Summary {
        let stopped = self.lock().summary.stopped_at.is_some();
        if !stopped {
            self.lifecycle(direction, event);
        }
        let mut inner = self.lock();
        inner.closed = true;
        if inner.summary.error.is_none() {
            if let Err(error) = inner.sink.flush() {
                inner.summary.error = Some(error.to_string());
            }
        }
        inner.summary.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The sink is the only code run under the lock; the counters stay consistent if it panicked.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn event(&self, direction: Direction, kind: &str) -> Pending {
        let mut event = Map::new();
        event.insert("direction".into(), Value::String(direction.as_str().into()));
        event.insert("transport".into(), Value::String(self.transport.as_str().into()));
        event.insert("kind".into(), Value::String(kind.into()));
        event
    }

    fn insert_headers(&self, event: &mut Pending, headers: &[(String, Option<String>)]) {
        let kept = self.redactor.headers(headers);
        if !kept.is_empty() {
            event.insert("headers".into(), json!(kept));
        }
    }

    /// The `message` event of `bytes`, redacted and within the per-message cap; `None` (counted) if not JSON.
    fn message_event(&self, direction: Direction, bytes: &[u8]) -> Option<Pending> {
        let text = trim_ascii(bytes);
        if text.is_empty() {
            return None;
        }
        let Ok(mut payload) = serde_json::from_slice::<Value>(text) else {
            self.lock().summary.not_json += 1;
            return None;
        };
        self.redactor.message(&mut payload);
        let mut event = self.event(direction, "message");
        let size = payload.to_string().len();
        if size > self.bounds.max_message_bytes {
            payload = truncated(&payload, bytes.len());
            event.insert("truncated".into(), json!({ "bytes": bytes.len() }));
            self.lock().summary.truncated_messages += 1;
        }
        event.insert("payload".into(), payload);
        Some(event)
    }

    /// Writes `events` as adjacent lines, numbered; or, when they would pass the file's bound, the last event
    /// that says the recording stopped there.
    fn write(&self, events: Vec<Pending>) {
        let mut inner = self.lock();
        if inner.closed {
            return;
        }
        if inner.summary.stopped_at.is_some() || inner.summary.error.is_some() {
            inner.summary.dropped += events.len() as u64;
            return;
        }
        let first_seq = inner.summary.events;
        let mut text = String::new();
        for (offset, mut event) in events.into_iter().enumerate() {
            event.insert("seq".into(), json!(first_seq + offset as u64));
            text.push_str(&Value::Object(event).to_string());
            text.push('\n');
        }
        let count = text.bytes().filter(|byte| *byte == b'\n').count() as u64;
        if inner.summary.bytes + text.len() as u64 + TAIL_RESERVE > self.bounds.max_bytes {
            let mut last = self.event(Direction::ServerToClient, "lifecycle");
            last.insert("event".into(), Value::String(Lifecycle::Abort.as_str().into()));
            last.insert("truncated".into(), json!({ "max_bytes": self.bounds.max_bytes, "from_seq": first_seq }));
            last.insert("seq".into(), json!(first_seq));
            let line = format!("{}\n", Value::Object(last));
            inner.summary.stopped_at = Some(first_seq);
            inner.summary.dropped += count;
            eprintln!(
                "mcpsim record: the recording reached --max-bytes {} at seq {first_seq}; it ends there (a last transport-abort event says so) and the traffic goes on being forwarded, unrecorded",
                self.bounds.max_bytes
            );
            Self::put(&mut inner, &line, 1);
            return;
        }
        Self::put(&mut inner, &text, count);
    }

    fn put(inner: &mut Inner, text: &str, count: u64) {
        match inner.sink.write_all(text.as_bytes()).and_then(|()| inner.sink.flush()) {
            Ok(()) => {
                inner.summary.events += count;
                inner.summary.bytes += text.len() as u64;
            }
            Err(error) => {
                eprintln!(
                    "mcpsim record: cannot write the recording ({error}); the traffic goes on being forwarded, but events from seq {} on are not recorded",
                    inner.summary.events
                );
                inner.summary.error = Some(error.to_string());
                inner.summary.dropped += count;
            }
        }
    }
}

/// `message` made small: `jsonrpc`, `id`, `method` kept; `params` / `result` (and an error's `data`) replaced by
/// a `_meta` marker naming the original size. Always a valid JSON-RPC message of the same kind.
fn truncated(message: &Value, wire_bytes: usize) -> Value {
    let marker = json!({ "_meta": { "mcpsim/truncated": { "bytes": wire_bytes } } });
    let Value::Object(object) = message else {
        // A batch: its elements' envelopes are not worth keeping apart; one marker notification stands for it.
        return json!({ "jsonrpc": "2.0", "method": "notifications/message", "params": marker });
    };
    let mut small = Map::new();
    for key in ["jsonrpc", "id", "method"] {
        if let Some(value) = object.get(key) {
            small.insert(key.into(), short(value));
        }
    }
    if object.contains_key("params") {
        small.insert("params".into(), marker.clone());
    }
    if object.contains_key("result") {
        small.insert("result".into(), marker.clone());
    }
    if let Some(error) = object.get("error") {
        let mut kept = Map::new();
        kept.insert("code".into(), error.get("code").cloned().unwrap_or(json!(-32603)));
        let text = error.get("message").and_then(Value::as_str).unwrap_or("");
        kept.insert("message".into(), Value::String(text.chars().take(200).collect()));
        kept.insert("data".into(), marker);
        small.insert("error".into(), Value::Object(kept));
    }
    Value::Object(small)
}

/// An envelope value kept short (an absurd id or method is cut, not written whole).
fn short(value: &Value) -> Value {
    match value {
        Value::String(text) if text.len() > 200 => Value::String(text.chars().take(200).collect()),
        Value::String(_) | Value::Number(_) | Value::Null | Value::Bool(_) => value.clone(),
        _ => Value::Null,
    }
}

fn trim_ascii(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|byte| !byte.is_ascii_whitespace()).unwrap_or(bytes.len());
    let end = bytes.iter().rposition(|byte| !byte.is_ascii_whitespace()).map_or(start, |end| end + 1);
    &bytes[start..end]
}

/// A piece a [`Framer`] cut: a whole line (without its `\n`), or one longer than [`HELD_BYTES_MAX`] (its length).
#[derive(Debug, PartialEq, Eq)]
pub enum Piece {
    Line(Vec<u8>),
    Unheld(usize),
}

/// A byte stream cut into lines ending in `\n`, holding at most `held_max` bytes of the line being read.
pub struct Framer {
    line: Vec<u8>,
    over: usize,
    held_max: usize,
}

impl Framer {
    pub fn new(held_max: usize) -> Framer {
        Framer { line: Vec::new(), over: 0, held_max }
    }

    /// The lines `chunk` completes.
    pub fn push(&mut self, mut chunk: &[u8]) -> Vec<Piece> {
        let mut pieces = Vec::new();
        while !chunk.is_empty() {
            let (part, done) = match memchr::memchr(b'\n', chunk) {
                Some(end) => (&chunk[..end], true),
                None => (chunk, false),
            };
            if self.over > 0 || self.line.len() + part.len() > self.held_max {
                self.over += self.line.len() + part.len();
                self.line = Vec::new();
            } else {
                self.line.extend_from_slice(part);
            }
            if done {
                pieces.push(self.take());
                chunk = &chunk[part.len() + 1..];
            } else {
                chunk = &[];
            }
        }
        pieces
    }

    /// What is left when the stream ends (a last line without its `\n`), if anything.
    pub fn finish(&mut self) -> Option<Piece> {
        (self.over > 0 || !self.line.is_empty()).then(|| self.take())
    }

    fn take(&mut self) -> Piece {
        let piece = if self.over > 0 { Piece::Unheld(self.over) } else { Piece::Line(std::mem::take(&mut self.line)) };
        self.over = 0;
        piece
    }
}

/// The `data` of each server-sent event of a stream (multi-line `data:` fields joined by `\n`, `\r\n` line ends,
/// comments and other fields ignored), as the stream is read.
pub struct SseEvents {
    lines: Framer,
    data: Vec<u8>,
    has_data: bool,
    over: usize,
    held_max: usize,
}

impl SseEvents {
    pub fn new(held_max: usize) -> SseEvents {
        SseEvents { lines: Framer::new(held_max), data: Vec::new(), has_data: false, over: 0, held_max }
    }

    /// The events `chunk` completes: each one's data, or [`Piece::Unheld`] for one too large to hold.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Piece> {
        let mut events = Vec::new();
        for piece in self.lines.push(chunk) {
            let line = match piece {
                Piece::Line(mut line) => {
                    if line.last() == Some(&b'\r') {
                        line.pop();
                    }
                    line
                }
                Piece::Unheld(bytes) => {
                    self.over += bytes;
                    self.has_data = true;
                    continue;
                }
            };
            if line.is_empty() {
                if self.has_data {
                    let data = std::mem::take(&mut self.data);
                    events.push(if self.over > 0 { Piece::Unheld(self.over + data.len()) } else { Piece::Line(data) });
                }
                self.has_data = false;
                self.over = 0;
                continue;
            }
            let Some(value) = line.strip_prefix(b"data") else { continue };
            let value = match value.first() {
                Some(b':') => value[1..].strip_prefix(b" ").unwrap_or(&value[1..]),
                None => value,
                Some(_) => continue,
            };
            if self.has_data {
                self.data.push(b'\n');
            }
            self.has_data = true;
            if self.over > 0 || self.data.len() + value.len() > self.held_max {
                self.over += self.data.len() + value.len();
                self.data.clear();
            } else {
                self.data.extend_from_slice(value);
            }
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::sync::Arc;

    /// A sink the test reads back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn recorder(bounds: Bounds, fields: &[&str], headers: &[&str]) -> (Recorder, Shared) {
        let sink = Shared::default();
        let fields = fields.iter().map(|path| FieldPath::parse(path).unwrap()).collect();
        let headers: Vec<String> = headers.iter().map(|name| name.to_string()).collect();
        let recorder = Recorder::new(Box::new(sink.clone()), Transport::StreamableHttp, Redactor::new(&headers, fields), bounds);
        (recorder, sink)
    }

    fn lines(sink: &Shared) -> Vec<Value> {
        let bytes = sink.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap().lines().map(|line| serde_json::from_str(line).unwrap()).collect()
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, Option<String>)> {
        list.iter().map(|(name, value)| (name.to_string(), Some(value.to_string()))).collect()
    }

    #[test]
    fn secrets_become_stable_markers_and_never_reach_the_file() {
        let (recorder, sink) = recorder(Bounds::default(), &["params.arguments.password", "params.*.pin"], &["X-Tenant-Secret"]);
        let headers = pairs(&[
            ("Authorization", "Bearer tok-SECRET-1"),
            ("Cookie", "sid=cookie-SECRET-2; theme=dark"),
            ("X-Tenant-Secret", "tenant-SECRET-3"),
            ("X-Unlisted", "not-recorded-SECRET-4"),
            ("Mcp-Protocol-Version", "2026-07-28"),
        ]);
        let body =
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"password":"pw-SECRET-5","pin":1234}}}"#;
        recorder.http_request("post", &headers, body);
        recorder.http_request("POST", &pairs(&[("authorization", "Bearer tok-SECRET-1")]), b"");
        recorder.http_response(200, &pairs(&[("Set-Cookie", "sid=cookie-SECRET-2; Path=/; HttpOnly")]), Some(b"{}"));
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        assert!(!text.contains("SECRET"), "{text}");
        let events = lines(&sink);
        let marker = recorder.redactor().marker("tok-SECRET-1");
        assert_eq!(events[0]["headers"]["authorization"], format!("Bearer {marker}"));
        assert_eq!(events[2]["headers"]["authorization"], format!("Bearer {marker}"), "the same secret, the same marker");
        let cookie = recorder.redactor().marker("cookie-SECRET-2");
        assert_eq!(events[0]["headers"]["cookie"], format!("sid={cookie}; theme={}", recorder.redactor().marker("dark")));
        assert_eq!(events[3]["headers"]["set-cookie"], format!("sid={cookie}; Path=/; HttpOnly"));
        assert_eq!(events[0]["headers"]["mcp-protocol-version"], "2026-07-28");
        assert!(events[0]["headers"].get("x-unlisted").is_none());
        assert_eq!(events[1]["payload"]["params"]["arguments"]["pin"], recorder.redactor().marker("1234"));
        assert_eq!(events[0]["method"], "POST");
        assert_eq!(events.iter().map(|event| event["seq"].as_u64().unwrap()).collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
        // Another recording's key: another marker for the same secret.
        let (other, _) = recorder_pair();
        assert_ne!(other.redactor().marker("tok-SECRET-1"), marker);
    }

    fn recorder_pair() -> (Recorder, Shared) {
        recorder(Bounds::default(), &[], &[])
    }

    #[test]
    fn a_message_over_the_cap_is_a_smaller_valid_message_with_its_id() {
        let (recorder, sink) = recorder(Bounds { max_bytes: MAX_BYTES_DEFAULT, max_message_bytes: 600 }, &[], &[]);
        let big = "x".repeat(5000);
        let request = json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"notes_read","arguments":{"body":big}}});
        let response = json!({"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":big}]}});
        let error = json!({"jsonrpc":"2.0","id":8,"error":{"code":-32602,"message":"too big","data":big}});
        for (direction, message) in
            [(Direction::ClientToServer, &request), (Direction::ServerToClient, &response), (Direction::ServerToClient, &error)]
        {
            recorder.message(direction, message.to_string().as_bytes());
        }
        let events = lines(&sink);
        assert_eq!(
            events[0]["payload"],
            json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"_meta":{"mcpsim/truncated":{"bytes":request.to_string().len()}}}})
        );
        assert_eq!(events[0]["truncated"]["bytes"], request.to_string().len());
        assert_eq!(events[1]["payload"]["id"], 7);
        assert!(events[1]["payload"]["result"]["_meta"]["mcpsim/truncated"].is_object());
        assert_eq!(events[2]["payload"]["error"]["code"], -32602);
        assert_eq!(recorder.close(Direction::ClientToServer, Lifecycle::Close).truncated_messages, 3);
    }

    #[test]
    fn the_file_stops_at_its_bound_with_a_last_event_and_never_passes_it() {
        let (recorder, sink) = recorder(Bounds { max_bytes: 4096, max_message_bytes: 1024 }, &[], &[]);
        let message = json!({"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"y".repeat(300)}}).to_string();
        for _ in 0..40 {
            recorder.message(Direction::ClientToServer, message.as_bytes());
        }
        let summary = recorder.close(Direction::ClientToServer, Lifecycle::Close);
        let bytes = sink.0.lock().unwrap().len() as u64;
        assert!(bytes <= 4096, "{bytes}");
        let events = lines(&sink);
        let last = events.last().unwrap();
        assert_eq!(last["kind"], "lifecycle");
        assert_eq!(last["event"], "transport-abort");
        assert_eq!(last["truncated"]["from_seq"], last["seq"]);
        assert_eq!(summary.stopped_at, last["seq"].as_u64());
        assert_eq!(summary.events as usize, events.len());
        assert!(summary.dropped > 0);
        assert!(events.iter().enumerate().all(|(index, event)| event["seq"] == json!(index)));
    }

    #[test]
    fn not_json_is_counted_not_written_and_close_is_last() {
        let (recorder, sink) = recorder_pair();
        recorder.message(Direction::ServerToClient, b"not json");
        recorder.message(Direction::ServerToClient, b"   ");
        let summary = recorder.close(Direction::ServerToClient, Lifecycle::Abort);
        recorder.message(Direction::ServerToClient, b"{}");
        assert_eq!(summary.not_json, 1);
        let events = lines(&sink);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0]["event"], "transport-abort");
    }

    #[test]
    fn framer_cuts_lines_and_bounds_what_it_holds() {
        let mut framer = Framer::new(8);
        assert_eq!(framer.push(b"ab"), []);
        assert_eq!(framer.push(b"c\nde\n"), [Piece::Line(b"abc".to_vec()), Piece::Line(b"de".to_vec())]);
        assert_eq!(framer.push(b"0123456789"), []);
        assert_eq!(framer.push(b"ab\nok"), [Piece::Unheld(12)]);
        assert_eq!(framer.finish(), Some(Piece::Line(b"ok".to_vec())));
        assert_eq!(framer.finish(), None);
    }

    #[test]
    fn sse_events_join_data_lines_and_skip_the_rest() {
        let mut sse = SseEvents::new(1024);
        let stream = b": comment\r\nevent: message\r\nid: 1\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\ndata:{}\n\nretry: 5\n\n";
        let mut events = Vec::new();
        for byte in stream.chunks(3) {
            events.extend(sse.push(byte));
        }
        assert_eq!(events, [Piece::Line(b"{\"a\":\n1}".to_vec()), Piece::Line(b"{}".to_vec())]);
    }

    #[test]
    fn field_paths_are_checked() {
        assert!(FieldPath::parse("params..x").is_err());
        assert!(FieldPath::parse("").is_err());
        assert_eq!(FieldPath::parse("a.*.b").unwrap(), FieldPath(vec!["a".into(), "*".into(), "b".into()]));
        assert_eq!(FieldPath::parse(r"params._meta.com\.example/auth.token").unwrap().0, ["params", "_meta", "com.example/auth", "token"]);
    }
}
