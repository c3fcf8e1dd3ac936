//! `mcpsim record`: the recording proxy (`--http`) and wrapper (`--stdio`) driven by real clients against the
//! real `mcpsim serve`, and the files they write read back as mcp-trace events (docs/recording.md).
//!
//! What it shows:
//! - mcpsim's own HTTP client (`mcpsim run --live`, src/live/http_client.rs) completes the notes_delete
//!   confirmation through the proxy, and the file holds every exchange in order: each request's `http` event
//!   beside its message, each answer's status beside its message, the last event `transport-close`;
//! - a client of our own writing lines to the wrapper completes it over stdio; the file holds each line as a
//!   message in order between `transport-open` and `transport-close`; the server's exit status is the
//!   wrapper's, and a server that outlives its client is killed;
//! - planted secrets (a bearer token, cookies, a header named by --redact-header, a field named by
//!   --redact-field) never appear in the file's bytes; each becomes the same marker every time it recurs;
//! - a non-loopback --listen is refused before anything starts;
//! - the size bounds hold: the file never passes --max-bytes, ends with an event that says where it stopped,
//!   and the proxy goes on forwarding; a message over --max-message-bytes is a smaller valid message.
//!
//! Ignored (CI runs them, .ci/run sets the variables): the recordings judged by mcp-trace-validator 0.6.0
//! (MCPSIM_TRACE_TOOLS, the directory holding bin/mcp-trace-validator: `.ci/common.sh`'s `trace_tools`), and
//! the official Python SDK (`mcp` 2.3) recorded over HTTP and over stdio (MCPSIM_PYTHON_VENV: `.ci/peers.sh
//! --venv`). Every process a test starts is killed when its handle drops; every wait is bounded.

mod e2e_support;

use e2e_support::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A bearer token planted in the server's configuration: it must never reach a recording.
const PLANTED_TOKEN: &str = "tok-PLANTED-e41c09d7";

/// A fresh directory for one test's files, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!("mcpsim-record-{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::SeqCst)));
        std::fs::create_dir_all(&path).unwrap();
        Scratch(path)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Lines of a child's stream, collected on a thread (so its pipe never fills).
fn collect(stream: impl Read + Send + 'static) -> (Arc<Mutex<Vec<String>>>, Receiver<String>) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let (sender, receiver) = channel();
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line.clone());
            let _ = sender.send(line);
        }
    });
    (lines, receiver)
}

/// Waits (bounded by `limit`) for `child` to exit.
fn wait_within(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    // Polled, not timed: a bound on the number of 20 ms waits.
    for _ in 0..limit.as_millis() / 20 {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// `mcpsim record --http` in front of `upstream`, killed on drop. Its stdin is a pipe: closing it stops it.
struct Proxy {
    child: Child,
    stdin: Option<ChildStdin>,
    url: String,
    out: PathBuf,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Proxy {
    fn start(upstream: &str, out: &Path, extra: &[&str]) -> Proxy {
        let mut child = Command::new(BIN)
            .args(["record", "--http", "--upstream", upstream, "--out"])
            .arg(out)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("mcpsim starts");
        let (stderr, _) = collect(child.stderr.take().unwrap());
        let (_, stdout) = collect(child.stdout.take().unwrap());
        let stdin = child.stdin.take();
        let url = stdout.recv_timeout(WAIT).unwrap_or_else(|_| panic!("no URL on stdout; stderr: {:?}", stderr.lock().unwrap()));
        assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"), "{url}");
        Proxy { child, stdin, url, out: out.to_path_buf(), stderr }
    }

    /// Closes its stdin (a clean stop) and returns its status, its stderr and the file's bytes.
    fn stop(mut self) -> (ExitStatus, String, String) {
        drop(self.stdin.take());
        let status =
            wait_within(&mut self.child, WAIT).unwrap_or_else(|| panic!("the proxy did not stop within {WAIT:?} of its stdin closing"));
        // The reader thread may still hold the last lines for a moment after the exit.
        std::thread::sleep(Duration::from_millis(50));
        let stderr = self.stderr.lock().unwrap().join("\n");
        (status, stderr, std::fs::read_to_string(&self.out).expect("the recording exists"))
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The events of a recording, each line checked to be one JSON object with the members every event has, `seq`
/// counting from 0 in line order.
fn read_events(text: &str, transport: &str) -> Vec<Value> {
    let events: Vec<Value> =
        text.lines().map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))).collect();
    for (index, event) in events.iter().enumerate() {
        assert_eq!(event["seq"], json!(index), "seq is the line order: {event}");
        assert_eq!(event["transport"], transport, "{event}");
        assert!(matches!(event["direction"].as_str(), Some("client-to-server" | "server-to-client")), "{event}");
        assert!(matches!(event["kind"].as_str(), Some("message" | "http" | "lifecycle")), "{event}");
    }
    assert!(text.ends_with('\n'), "every line ends");
    events
}

/// The demo deployment with alice's token replaced by [`PLANTED_TOKEN`].
fn planted_config() -> TempConfig {
    TempConfig::new(&DEMO_TOML.replace("\"demo-alice\"", &format!("\"{PLANTED_TOKEN}\"")))
}

/// The messages of a recording, with their direction.
fn messages(events: &[Value]) -> Vec<(&str, &Value)> {
    events
        .iter()
        .filter(|event| event["kind"] == "message")
        .map(|event| (event["direction"].as_str().unwrap(), &event["payload"]))
        .collect()
}

/// The notes_delete confirmation is in `messages`: round 1 answered input_required with a requestState, a later
/// tools/call echoing that state answered complete with the note deleted.
fn assert_confirmation(messages: &[(&str, &Value)]) {
    let answers: Vec<&Value> =
        messages.iter().filter(|(direction, _)| *direction == "server-to-client").map(|(_, message)| *message).collect();
    let round_one = answers.iter().find(|answer| answer["result"]["resultType"] == "input_required").expect("round 1 was recorded");
    let state = round_one["result"]["requestState"].as_str().expect("with its requestState");
    let round_two = messages
        .iter()
        .find(|(direction, message)| *direction == "client-to-server" && message["params"]["requestState"] == state)
        .expect("round 2, echoing the state, was recorded")
        .1;
    let answer = answers.iter().find(|answer| answer["id"] == round_two["id"]).expect("round 2's answer was recorded");
    assert_eq!(answer["result"]["structuredContent"]["deleted"], true, "{answer}");
}

#[test]
fn own_http_client_completes_notes_delete_through_the_proxy_and_every_exchange_is_recorded() {
    let scratch = Scratch::new();
    let config = planted_config();
    let server = HttpServer::start(&["--config", config.arg()]);
    let proxy = Proxy::start(&server.url, &scratch.file("http.jsonl"), &[]);
    let played = Command::new(BIN)
        .args(["run", "--live", &proxy.url, "--token", &format!("alice={PLANTED_TOKEN}"), "01-lesson-exchange-on-one-instance"])
        .output()
        .expect("mcpsim run starts");
    assert!(played.status.success(), "the lesson plays through the proxy:\n{}", String::from_utf8_lossy(&played.stdout));
    let (status, stderr, text) = proxy.stop();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("mcpsim record: listening on http://127.0.0.1:"), "{stderr}");
    assert!(!text.contains("PLANTED"), "the bearer token never reaches the file");
    let events = read_events(&text, "streamable-http");
    // Every request: its http event, then its message; every answer: its status, then its message.
    let mut index = 0;
    let mut exchanges = 0;
    let mut markers = std::collections::BTreeSet::new();
    while events[index]["kind"] == "http" {
        let (request, sent, head, answer) = (&events[index], &events[index + 1], &events[index + 2], &events[index + 3]);
        assert_eq!((request["direction"].as_str(), request["method"].as_str()), (Some("client-to-server"), Some("POST")), "{request}");
        assert_eq!(request["headers"]["mcp-protocol-version"], "2026-07-28", "{request}");
        assert_eq!(request["headers"]["content-type"], "application/json", "{request}");
        let authorization = request["headers"]["authorization"].as_str().expect("the authorization header is recorded, redacted");
        assert!(authorization.starts_with("Bearer <redacted:") && authorization.ends_with('>'), "{authorization}");
        markers.insert(authorization.to_string());
        assert_eq!((sent["kind"].as_str(), sent["direction"].as_str()), (Some("message"), Some("client-to-server")), "{sent}");
        assert_eq!(sent["payload"]["method"], request["headers"]["mcp-method"], "{sent}");
        assert_eq!((head["kind"].as_str(), head["status"].as_u64()), (Some("http"), Some(200)), "{head}");
        assert!(head.get("method").is_none(), "{head}");
        assert_eq!(answer["payload"]["id"], sent["payload"]["id"], "{answer}");
        index += 4;
        exchanges += 1;
    }
    assert_eq!(markers.len(), 1, "one secret, one marker: {markers:?}");
    assert!(exchanges >= 4, "discover, tools/list, round 1, round 2 at least: {exchanges}");
    assert_eq!(index, events.len() - 1, "nothing but exchanges before the last event");
    assert_eq!(
        events[index],
        json!({"direction": "client-to-server", "event": "transport-close", "kind": "lifecycle", "seq": index, "transport": "streamable-http"})
    );
    assert_confirmation(&messages(&events));
}

#[tokio::test]
async fn planted_secrets_never_reach_the_file_and_each_keeps_one_marker() {
    let scratch = Scratch::new();
    let config = planted_config();
    let server = HttpServer::start(&["--config", config.arg()]);
    let proxy = Proxy::start(
        &server.url,
        &scratch.file("secrets.jsonl"),
        &["--redact-header", "X-Tenant-Secret", "--redact-field", "params.arguments.password", "--redact-field", "params._meta.*.apiKey"],
    );
    let client = reqwest::Client::new();
    let mut message = round_one(1);
    message["params"]["arguments"]["password"] = json!("pw-PLANTED-0b5d");
    message["params"]["_meta"]["com.example/auth"] = json!({"apiKey": "key-PLANTED-91aa"});
    for _ in 0..2 {
        let mut request = client.post(&proxy.url).body(serde_json::to_vec(&message).unwrap());
        for (name, value) in conforming_headers(&message, PLANTED_TOKEN) {
            request = request.header(name, value);
        }
        let answer = request
            .header("Cookie", "sid=cookie-PLANTED-33f1; theme=dark")
            .header("X-Tenant-Secret", "tenant-PLANTED-5e")
            .header("X-Unlisted", "unlisted-PLANTED-77")
            .send()
            .await
            .expect("the proxy forwards");
        // The server's own answer, whatever it is, comes back through the proxy.
        assert!(answer.status().as_u16() < 500, "{}", answer.status());
    }
    let (status, stderr, text) = proxy.stop();
    assert!(status.success(), "{stderr}");
    assert!(!text.contains("PLANTED"), "a planted secret reached the file:\n{text}");
    let events = read_events(&text, "streamable-http");
    let requests: Vec<&Value> = events.iter().filter(|event| event["kind"] == "http" && event["direction"] == "client-to-server").collect();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0]["headers"], requests[1]["headers"], "the same secrets, the same markers");
    let headers = &requests[0]["headers"];
    let cookie = headers["cookie"].as_str().unwrap();
    assert!(cookie.starts_with("sid=<redacted:") && cookie.contains("; theme=<redacted:"), "{cookie}");
    assert!(headers["x-tenant-secret"].as_str().unwrap().starts_with("<redacted:"), "{headers}");
    assert!(headers.get("x-unlisted").is_none(), "a header off the list is not recorded: {headers}");
    let sent: Vec<&Value> =
        messages(&events).into_iter().filter(|(direction, _)| *direction == "client-to-server").map(|(_, m)| m).collect();
    assert_eq!(sent.len(), 2);
    let password = sent[0]["params"]["arguments"]["password"].as_str().unwrap();
    assert!(password.starts_with("<redacted:"), "{password}");
    assert_eq!(sent[1]["params"]["arguments"]["password"], password);
    assert!(sent[0]["params"]["_meta"]["com.example/auth"]["apiKey"].as_str().unwrap().starts_with("<redacted:"));
    assert_eq!(sent[0]["params"]["arguments"]["title"], "TPS report", "what is not secret is kept");
}

/// The next SSE event's data (JSON) of `response`, read as it arrives (bounded by [`WAIT`]).
async fn next_event(response: &mut reqwest::Response, buffer: &mut String) -> Value {
    loop {
        if let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            let data: String = event.lines().filter_map(|line| line.strip_prefix("data: ")).collect();
            if data.is_empty() {
                continue;
            }
            return serde_json::from_str(&data).unwrap_or_else(|e| panic!("not JSON ({e}): {event:?}"));
        }
        let chunk = tokio::time::timeout(WAIT, response.chunk()).await.expect("an event in time").expect("the stream is readable");
        buffer.push_str(&String::from_utf8_lossy(&chunk.expect("the stream is still open")));
    }
}

#[tokio::test]
async fn a_legacy_session_streams_through_the_proxy_event_by_event_with_its_session_id_and_delete() {
    let scratch = Scratch::new();
    let server = HttpServer::start(&["--eras", "both"]);
    let proxy = Proxy::start(&server.url, &scratch.file("legacy.jsonl"), &[]);
    let client = reqwest::Client::new();
    let opened = legacy_post(&client, &proxy.url, "demo-alice", None, &legacy_initialize(json!({ "elicitation": {} }))).await;
    assert_eq!(opened.status().as_u16(), 200);
    let session = opened.headers()["mcp-session-id"].to_str().unwrap().to_string();
    let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
    assert_eq!(legacy_post(&client, &proxy.url, "demo-alice", Some(&session), &initialized).await.status().as_u16(), 202);
    // The call's stream stays open until the question is answered: its first event must come through alone.
    let mut stream = legacy_post(&client, &proxy.url, "demo-alice", Some(&session), &legacy_delete(5, ALICE_WORKSPACE)).await;
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    let mut buffer = String::new();
    let asked = next_event(&mut stream, &mut buffer).await;
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    let reply = json!({ "jsonrpc": "2.0", "id": asked["id"], "result": { "action": "accept", "content": { "note_id": "note-7", "confirm": true } } });
    assert_eq!(legacy_post(&client, &proxy.url, "demo-alice", Some(&session), &reply).await.status().as_u16(), 202);
    let done = next_event(&mut stream, &mut buffer).await;
    assert_eq!(done["result"]["structuredContent"]["deleted"], true, "{done}");
    drop(stream);
    let ended =
        client.delete(&proxy.url).header("Authorization", "Bearer demo-alice").header("Mcp-Session-Id", &session).send().await.unwrap();
    assert!(ended.status().is_success(), "{}", ended.status());
    let (status, stderr, text) = proxy.stop();
    assert!(status.success(), "{stderr}");
    let events = read_events(&text, "streamable-http");
    let minted = events
        .iter()
        .find(|event| event["kind"] == "http" && event["headers"]["mcp-session-id"] == session.as_str())
        .expect("the session id is recorded");
    assert_eq!(minted["direction"], "server-to-client", "first seen on the answer to initialize: {minted}");
    let opened_stream =
        events.iter().position(|event| event["headers"]["content-type"] == "text/event-stream").expect("the stream's head is recorded");
    let streamed: Vec<&Value> =
        events[opened_stream + 1..].iter().filter(|event| event["kind"] == "message" && event["direction"] == "server-to-client").collect();
    assert_eq!(streamed[0]["payload"], asked, "each event's message as it was relayed");
    assert!(streamed.iter().any(|event| event["payload"] == done), "the last event of the stream is recorded");
    let asked_at = events.iter().position(|event| event["payload"] == asked).unwrap();
    let reply_at = events.iter().position(|event| event["payload"] == reply).unwrap();
    let done_at = events.iter().position(|event| event["payload"] == done).unwrap();
    assert!(asked_at < reply_at && reply_at < done_at, "recorded in the order they happened");
    let delete = events.iter().position(|event| event["method"] == "DELETE").expect("the DELETE is recorded");
    assert_eq!(events[delete]["headers"]["mcp-session-id"], session.as_str());
    assert_eq!(events[delete + 1]["kind"], "http", "its answer's head follows (no body)");
    assert!(events[delete + 1]["status"].as_u64().is_some_and(|status| status < 300));
}

#[test]
fn a_non_loopback_listen_address_is_refused_before_anything_starts() {
    let scratch = Scratch::new();
    for address in ["0.0.0.0:0", "[::]:0", "192.0.2.1:8080"] {
        let out = scratch.file("refused.jsonl");
        let ran = Command::new(BIN)
            .args(["record", "--http", "--upstream", "http://127.0.0.1:9/mcp", "--listen", address, "--out"])
            .arg(&out)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&ran.stderr);
        assert_eq!(ran.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("refusing a non-loopback address") && stderr.contains("127.0.0.1:PORT"), "{stderr}");
        assert!(!out.exists(), "nothing is created");
    }
    // And the other usage errors say what to do.
    let ran = Command::new(BIN).args(["record", "--stdio", "--out", "x.jsonl"]).output().unwrap();
    assert_eq!(ran.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&ran.stderr).contains("needs the server command after `--`"));
}

#[tokio::test]
async fn the_file_stops_at_max_bytes_while_the_proxy_goes_on_forwarding_and_big_messages_are_cut_whole() {
    let scratch = Scratch::new();
    let server = HttpServer::start(&[]);
    let proxy = Proxy::start(&server.url, &scratch.file("bounded.jsonl"), &["--max-bytes", "6000", "--max-message-bytes", "600"]);
    let client = reqwest::Client::new();
    let mut answers = Vec::new();
    for id in 1..=12 {
        let (status, answer) = post_message(&client, &proxy.url, "demo-alice", &resources_list(id)).await.expect("the proxy forwards");
        assert_eq!(status, 200);
        answers.push(answer);
    }
    assert!(answers.iter().all(|answer| resource_names(answer).contains(&"note-7".to_string())), "every answer came through whole");
    let (status, stderr, text) = proxy.stop();
    assert!(status.success(), "{stderr}");
    assert!(text.len() <= 6000, "{} bytes", text.len());
    let events = read_events(&text, "streamable-http");
    let last = events.last().unwrap();
    assert_eq!((last["kind"].as_str(), last["event"].as_str()), (Some("lifecycle"), Some("transport-abort")), "{last}");
    assert_eq!(last["truncated"], json!({"max_bytes": 6000, "from_seq": last["seq"]}), "{last}");
    assert!(stderr.contains("reached --max-bytes 6000 at seq"), "{stderr}");
    // A resources/list answer is larger than 600 bytes: recorded as a valid answer to the same id, marked.
    let answer =
        events.iter().find(|event| event["kind"] == "message" && event["direction"] == "server-to-client").expect("an answer was recorded");
    let bytes = answer["truncated"]["bytes"].as_u64().expect("marked truncated");
    assert!(bytes > 600);
    assert_eq!(answer["payload"], json!({"id": 1, "jsonrpc": "2.0", "result": {"_meta": {"mcpsim/truncated": {"bytes": bytes}}}}));
}

/// `mcpsim record --stdio ARGS -- COMMAND…`, killed on drop.
struct Wrapper {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Receiver<String>,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Wrapper {
    fn start(out: &Path, extra: &[&str], command: &[&str]) -> Wrapper {
        let mut child = Command::new(BIN)
            .args(["record", "--stdio", "--out"])
            .arg(out)
            .args(extra)
            .arg("--")
            .args(command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("mcpsim starts");
        let (stderr, _) = collect(child.stderr.take().unwrap());
        let (_, stdout) = collect(child.stdout.take().unwrap());
        Wrapper { stdin: child.stdin.take(), child, stdout, stderr }
    }

    fn exchange(&mut self, message: &Value) -> Value {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
        let line =
            self.stdout.recv_timeout(WAIT).unwrap_or_else(|_| panic!("no answer to {message}; stderr: {:?}", self.stderr.lock().unwrap()));
        serde_json::from_str(&line).unwrap()
    }

    /// Closes its stdin (the client goes away) and waits, bounded, for it to end.
    fn close(mut self, limit: Duration) -> (ExitStatus, String) {
        drop(self.stdin.take());
        self.ended(limit)
    }

    /// Waits, bounded, for it to end with its stdin still open (the server ends the session).
    fn ended(mut self, limit: Duration) -> (ExitStatus, String) {
        let status = wait_within(&mut self.child, limit).unwrap_or_else(|| panic!("the wrapper did not end within {limit:?}"));
        std::thread::sleep(Duration::from_millis(50));
        (status, self.stderr.lock().unwrap().join("\n"))
    }
}

impl Drop for Wrapper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn own_client_completes_notes_delete_through_the_stdio_wrapper_and_every_line_is_recorded() {
    let scratch = Scratch::new();
    let out = scratch.file("stdio.jsonl");
    let mut wrapper = Wrapper::start(&out, &["--redact-field", r"params._meta.com\.example/auth.password"], &[BIN, "serve", "--stdio"]);
    let mut round_one = round_one(1);
    round_one["params"]["_meta"]["com.example/auth"] = json!({"password": "pw-PLANTED-stdio", "user": "alice"});
    let first = wrapper.exchange(&round_one);
    let state = state_of(&first);
    let second = wrapper.exchange(&round_two(2, &state, "note-7"));
    assert_deleted(&second, "note-7");
    let listed = wrapper.exchange(&resources_list(3));
    let (status, stderr) = wrapper.close(WAIT);
    assert!(status.success(), "the server's status 0 is the wrapper's: {stderr}");
    assert!(stderr.contains("serving stdio"), "the server's stderr passes through: {stderr}");
    assert!(stderr.contains("the client closed the session; the server exited with status 0"), "{stderr}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(!text.contains("PLANTED"), "{text}");
    let events = read_events(&text, "stdio");
    assert_eq!(
        events[0],
        json!({"direction": "client-to-server", "event": "transport-open", "kind": "lifecycle", "seq": 0, "transport": "stdio"})
    );
    let last = events.last().unwrap();
    assert_eq!((last["event"].as_str(), last["direction"].as_str()), (Some("transport-close"), Some("client-to-server")), "{last}");
    let mut expected_round_one = round_one.clone();
    let marker = &events[1]["payload"]["params"]["_meta"]["com.example/auth"]["password"];
    assert!(marker.as_str().unwrap().starts_with("<redacted:"), "{marker}");
    expected_round_one["params"]["_meta"]["com.example/auth"]["password"] = marker.clone();
    let expected = [
        ("client-to-server", expected_round_one),
        ("server-to-client", first),
        ("client-to-server", round_two(2, &state, "note-7")),
        ("server-to-client", second),
        ("client-to-server", resources_list(3)),
        ("server-to-client", listed),
    ];
    let recorded = messages(&events);
    assert_eq!(recorded.len(), expected.len(), "{recorded:?}");
    for ((direction, payload), (expected_direction, expected_payload)) in recorded.iter().zip(&expected) {
        assert_eq!((direction, *payload), (expected_direction, expected_payload), "each line exactly as it went, in order");
    }
    assert_eq!(events.len(), expected.len() + 2);
}

#[test]
fn the_servers_exit_status_is_the_wrappers_and_a_server_that_outlives_its_client_is_killed() {
    let scratch = Scratch::new();
    let out = scratch.file("exit.jsonl");
    let wrapper = Wrapper::start(
        &out,
        &[],
        &[
            "sh",
            "-c",
            "echo '{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":1}}'; exit 7",
        ],
    );
    // The client stays: the server ends the session, and the wrapper ends with it.
    let (status, stderr) = wrapper.ended(WAIT);
    assert_eq!(status.code(), Some(7), "{stderr}");
    let events = read_events(&std::fs::read_to_string(&out).unwrap(), "stdio");
    assert_eq!(events[1]["payload"]["method"], "notifications/message");
    let last = events.last().unwrap();
    assert_eq!((last["event"].as_str(), last["direction"].as_str()), (Some("transport-abort"), Some("server-to-client")), "{last}");

    // A server that ignores the end of its input: killed (with its group) once its client has gone.
    let out = scratch.file("outlived.jsonl");
    let pid_file = scratch.file("pid");
    let script = format!("echo $$ > {}; exec sleep 60", pid_file.display());
    let wrapper = Wrapper::start(&out, &[], &["sh", "-c", &script]);
    for waited in 0.. {
        if std::fs::read_to_string(&pid_file).is_ok_and(|pid| !pid.trim().is_empty()) {
            break;
        }
        assert!(waited < WAIT.as_millis() / 20, "the server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = std::fs::read_to_string(&pid_file).unwrap().trim().to_string();
    let (status, stderr) = wrapper.close(Duration::from_secs(10));
    assert_eq!(status.code(), Some(128 + 9), "{stderr}");
    assert!(stderr.contains("the client closed the session; the server was killed by signal 9"), "{stderr}");
    assert!(!Path::new(&format!("/proc/{pid}")).exists(), "the server process {pid} is gone");
    let events = read_events(&std::fs::read_to_string(&out).unwrap(), "stdio");
    assert_eq!(events.last().unwrap()["event"], "transport-abort");
}

/// Sends `signal` (e.g. "-TERM") to `child`.
fn signal(child: &Child, signal: &str) {
    let sent = Command::new("kill").args([signal, &child.id().to_string()]).status().expect("kill runs");
    assert!(sent.success());
}

#[tokio::test]
async fn sigterm_or_sigint_stops_the_proxy_cleanly_and_an_unreachable_upstream_is_a_502_recorded_as_an_abort() {
    let scratch = Scratch::new();
    let server = HttpServer::start(&[]);
    for (name, how) in [("term.jsonl", "-TERM"), ("int.jsonl", "-INT")] {
        let mut proxy = Proxy::start(&server.url, &scratch.file(name), &[]);
        let (status, _) = post_message(&reqwest::Client::new(), &proxy.url, "demo-alice", &resources_list(1)).await.unwrap();
        assert_eq!(status, 200);
        signal(&proxy.child, how);
        let exit = wait_within(&mut proxy.child, WAIT).expect("the proxy stops on the signal");
        assert!(exit.success(), "{how}: {:?}", proxy.stderr.lock().unwrap());
        let events = read_events(&std::fs::read_to_string(scratch.file(name)).unwrap(), "streamable-http");
        assert_eq!(events.len(), 5, "request, its message, the answer's head and message, the close: {events:?}");
        assert_eq!(events[4]["event"], "transport-close");
    }
    // Nothing listens on the upstream: the client gets mcpsim's 502 naming it, the trace an aborted transport.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = format!("http://{}/mcp", closed.local_addr().unwrap());
    drop(closed);
    let proxy = Proxy::start(&nowhere, &scratch.file("nowhere.jsonl"), &[]);
    let answer = reqwest::Client::new().post(&proxy.url).body(resources_list(1).to_string()).send().await.unwrap();
    assert_eq!(answer.status().as_u16(), 502);
    assert!(answer.text().await.unwrap().contains("cannot reach the upstream"));
    let (status, stderr, text) = proxy.stop();
    assert!(status.success(), "{stderr}");
    let events = read_events(&text, "streamable-http");
    assert_eq!(events[2]["kind"], "lifecycle");
    assert_eq!((events[2]["event"].as_str(), events[2]["direction"].as_str()), (Some("transport-abort"), Some("server-to-client")));
}

#[test]
fn sigterm_to_the_wrapper_stops_the_server_and_the_status_says_so() {
    let scratch = Scratch::new();
    let out = scratch.file("term.jsonl");
    let mut wrapper = Wrapper::start(&out, &[], &[BIN, "serve", "--stdio"]);
    let answer = wrapper.exchange(&resources_list(1));
    assert_eq!(answer["id"], 1);
    signal(&wrapper.child, "-TERM");
    let status = wait_within(&mut wrapper.child, WAIT).expect("the wrapper stops on SIGTERM");
    assert_eq!(status.code(), Some(128 + 15));
    let events = read_events(&std::fs::read_to_string(&out).unwrap(), "stdio");
    let last = events.last().unwrap();
    assert_eq!((last["event"].as_str(), last["direction"].as_str()), (Some("transport-abort"), Some("client-to-server")), "{last}");
    assert_eq!(events.len(), 4, "open, the request, its answer, the end: {events:?}");
}

#[test]
fn the_sample_recordings_are_traces_of_the_confirmation_without_the_token() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (file, transport) in [("sdk-python-http-notes-delete.jsonl", "streamable-http"), ("sdk-python-stdio-notes-delete.jsonl", "stdio")] {
        let text = std::fs::read_to_string(root.join("tests/traces").join(file)).unwrap();
        assert!(!text.contains("demo-alice"), "{file}: the bearer token is redacted");
        let events = read_events(&text, transport);
        assert_confirmation(&messages(&events));
        assert_eq!(events.last().unwrap()["event"], "transport-close", "{file}");
    }
}

/// `mcpsim ARGS`, which must exit 0; its stdout and stderr otherwise in the panic.
fn mcpsim_ok(args: &[&str]) -> String {
    let ran = Command::new(BIN).args(args).env_remove("MCPSIM_STORE").output().expect("mcpsim starts");
    let stdout = String::from_utf8_lossy(&ran.stdout).into_owned();
    assert!(ran.status.success(), "mcpsim {}:\n{stdout}{}", args.join(" "), String::from_utf8_lossy(&ran.stderr));
    stdout
}

/// A recording made by `mcpsim record` imported (`mcpsim import`) and replayed with the same outcomes in the
/// simulator and, when `target` is given, against that target fleet of real processes.
fn import_and_replay(trace: &Path, scratch: &Scratch, target: Option<&str>) {
    let scenario = scratch.file(&format!("{}.sim", trace.file_stem().unwrap().to_string_lossy()));
    let scenario_text = scenario.to_str().unwrap();
    mcpsim_ok(&["import", trace.to_str().unwrap(), "--principal", "alice", "--out", scenario_text]);
    let text = std::fs::read_to_string(&scenario).unwrap();
    assert!(text.contains("tools/call") && text.contains("Everything in the trace was mapped"), "{text}");
    mcpsim_ok(&["run", scenario_text]);
    if let Some(target) = target {
        let report = mcpsim_ok(&["run", "--target", target, scenario_text]);
        assert!(report.contains("PASS"), "{report}");
    }
}

#[test]
fn the_sample_recordings_import_and_replay_in_the_simulator_and_on_a_target_fleet() {
    let scratch = Scratch::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = root.join("targets/mcpsim-stdio.toml");
    for file in ["sdk-python-http-notes-delete.jsonl", "sdk-python-stdio-notes-delete.jsonl"] {
        import_and_replay(&root.join("tests/traces").join(file), &scratch, Some(target.to_str().unwrap()));
    }
}

/// The directory holding bin/mcp-trace-validator (MCPSIM_TRACE_TOOLS), or a panic saying how to get it.
fn trace_tools() -> PathBuf {
    let tools = std::env::var_os("MCPSIM_TRACE_TOOLS")
        .map(PathBuf::from)
        .expect("set MCPSIM_TRACE_TOOLS to the directory holding bin/mcp-trace-validator (bash -c 'source .ci/common.sh && trace_tools')");
    assert!(tools.join("bin/mcp-trace-validator").is_file(), "no bin/mcp-trace-validator in {}", tools.display());
    tools
}

/// The recording judged by mcp-trace-validator through .ci/judge-trace.py: no server-side failure.
fn judge(trace: &Path) {
    let validator = trace_tools().join("bin/mcp-trace-validator");
    let judged = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/judge-trace.py"))
        .arg("--validator")
        .arg(&validator)
        .arg(trace)
        .output()
        .expect("python3 runs");
    let report = format!("{}{}", String::from_utf8_lossy(&judged.stdout), String::from_utf8_lossy(&judged.stderr));
    assert!(judged.status.success(), "mcp-trace-validator judged {}:\n{report}", trace.display());
    assert!(report.contains(" pass, 0 fail"), "{report}");
}

#[test]
#[ignore = "needs mcp-trace-validator 0.6.0: MCPSIM_TRACE_TOOLS (.ci/common.sh trace_tools; CI sets it)"]
fn recordings_of_our_own_clients_pass_the_validator() {
    let scratch = Scratch::new();
    let server = HttpServer::start(&[]);
    let proxy = Proxy::start(&server.url, &scratch.file("http.jsonl"), &[]);
    let played = Command::new(BIN).args(["run", "--live", &proxy.url, "01-lesson-exchange-on-one-instance"]).output().unwrap();
    assert!(played.status.success(), "{}", String::from_utf8_lossy(&played.stdout));
    let (status, stderr, _) = proxy.stop();
    assert!(status.success(), "{stderr}");
    judge(&scratch.file("http.jsonl"));

    let out = scratch.file("stdio.jsonl");
    let mut wrapper = Wrapper::start(&out, &[], &[BIN, "serve", "--stdio"]);
    let state = state_of(&wrapper.exchange(&round_one(1)));
    assert_deleted(&wrapper.exchange(&round_two(2, &state, "note-7")), "note-7");
    let (status, stderr) = wrapper.close(WAIT);
    assert!(status.success(), "{stderr}");
    judge(&out);
    // And the sample recordings kept for the importer.
    for file in ["sdk-python-http-notes-delete.jsonl", "sdk-python-stdio-notes-delete.jsonl"] {
        judge(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/traces").join(file));
    }
}

/// The Python SDK's interpreter (MCPSIM_PYTHON_VENV/bin/python), or a panic saying how to get it.
fn python() -> PathBuf {
    let venv = std::env::var_os("MCPSIM_PYTHON_VENV")
        .map(PathBuf::from)
        .expect("set MCPSIM_PYTHON_VENV to the Python peer's virtualenv (.ci/peers.sh --venv prints it)");
    let python = venv.join("bin/python");
    assert!(python.is_file(), "no bin/python in {}", venv.display());
    python
}

fn peer(script: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/python").join(script)
}

/// Runs the peer, bounded in time, and returns its summary line.
fn run_peer(mut command: Command) -> String {
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("python starts");
    let status = wait_within(&mut child, Duration::from_secs(90));
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the Python peer did not finish within 90 s");
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(status.success(), "the Python peer failed:\n{stdout}{stderr}");
    stdout
}

#[test]
#[ignore = "needs the Python SDK (MCPSIM_PYTHON_VENV: .ci/peers.sh --venv) and mcp-trace-validator (MCPSIM_TRACE_TOOLS); CI sets both"]
fn python_sdk_notes_delete_recorded_over_http_and_stdio_passes_the_validator() {
    let python = python();
    let scratch = Scratch::new();
    let config = planted_config();
    let server = HttpServer::start(&["--config", config.arg()]);
    let proxy = Proxy::start(&server.url, &scratch.file("http.jsonl"), &[]);
    let mut command = Command::new(&python);
    command.arg(peer("notes_delete.py")).env("MCPSIM_URL", &proxy.url).env("MCPSIM_TOKEN", PLANTED_TOKEN);
    let summary = run_peer(command);
    assert!(summary.contains("notes_delete complete in 2 rounds"), "{summary}");
    let (status, stderr, text) = proxy.stop();
    assert!(status.success(), "{stderr}");
    assert!(!text.contains("PLANTED"));
    assert_confirmation(&messages(&read_events(&text, "streamable-http")));
    judge(&scratch.file("http.jsonl"));
    import_and_replay(&scratch.file("http.jsonl"), &scratch, None);

    let out = scratch.file("stdio.jsonl");
    let wrapped = json!([BIN, "record", "--stdio", "--out", out, "--", BIN, "serve", "--stdio"]);
    let mut command = Command::new(&python);
    command.arg(peer("notes_delete_stdio.py")).env("MCPSIM_SERVER_COMMAND", wrapped.to_string());
    let summary = run_peer(command);
    assert!(summary.contains("over stdio: notes_delete complete"), "{summary}");
    // The SDK closes the wrapper's stdin and waits for it; the file is complete once the peer has returned.
    let text = std::fs::read_to_string(&out).unwrap();
    let events = read_events(&text, "stdio");
    assert_eq!(events.last().unwrap()["event"], "transport-close");
    assert_confirmation(&messages(&events));
    judge(&out);
    import_and_replay(&out, &scratch, None);
}
