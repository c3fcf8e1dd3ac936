//! Shared helpers for the end-to-end tests (`e2e_stdio`, `e2e_http`): build requests, start the real `mcpsim`
//! binary, stop it. (`tests/common` is the in-process harness; this one drives processes.)
//!
//! Every process started here is killed when its handle drops, so a failing test leaves nothing running.
#![allow(dead_code)] // Each test binary uses a different subset.

pub mod recording;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_mcpsim");
pub const VERSION: &str = "2026-07-28";
pub const ALICE_WORKSPACE: &str = "file:///Users/alice/Documents/Notes";
pub const DEMO_TOML: &str = include_str!("../../src/config/demo.toml");
/// How long a test waits for the server to start or answer before failing (never a sleep: a bound).
pub const WAIT: Duration = Duration::from_secs(20);

pub fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": { "elicitation": { "form": {} } },
    })
}

pub fn request(id: i64, method: &str, params: Value) -> Value {
    let mut params = params;
    params["_meta"] = meta();
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
}

/// The same message without an id: a notification.
pub fn as_notification(mut message: Value) -> Value {
    message.as_object_mut().expect("a message is an object").remove("id");
    message
}

pub fn delete_arguments(workspace: &str, title: &str) -> Value {
    json!({ "workspaceUri": workspace, "title": title })
}

pub fn round_one(id: i64) -> Value {
    request(id, "tools/call", json!({ "name": "notes_delete", "arguments": delete_arguments(ALICE_WORKSPACE, "TPS report") }))
}

pub fn round_two(id: i64, state: &str, note_id: &str) -> Value {
    request(
        id,
        "tools/call",
        json!({
            "name": "notes_delete",
            "arguments": delete_arguments(ALICE_WORKSPACE, "TPS report"),
            "inputResponses": { "delete_choice": { "action": "accept", "content": { "note_id": note_id, "confirm": true } } },
            "requestState": state,
        }),
    )
}

/// The headers a conforming client sends with `message`: auth, content negotiation and the routing headers.
pub fn conforming_headers(message: &Value, token: &str) -> Vec<(String, String)> {
    let mut headers = vec![
        ("Authorization".to_string(), format!("Bearer {token}")),
        ("Content-Type".to_string(), "application/json".to_string()),
        ("Accept".to_string(), "application/json, text/event-stream".to_string()),
    ];
    if let Some(version) = message["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"].as_str() {
        headers.push(("MCP-Protocol-Version".into(), version.into()));
    }
    if let Some(method) = message["method"].as_str() {
        headers.push(("Mcp-Method".into(), method.into()));
        let name = match method {
            "tools/call" => message["params"]["name"].as_str(),
            "resources/read" => message["params"]["uri"].as_str(),
            _ => None,
        };
        if let Some(name) = name {
            headers.push(("Mcp-Name".into(), name.into()));
        }
    }
    headers
}

/// A conforming POST of `message` as `token`: the HTTP status and the JSON-RPC response, or the transport
/// error (e.g. the process was killed mid-request).
pub async fn post_message(client: &reqwest::Client, url: &str, token: &str, message: &Value) -> Result<(u16, Value), reqwest::Error> {
    let mut request = client.post(url).body(serde_json::to_vec(message).unwrap());
    for (name, value) in conforming_headers(message, token) {
        request = request.header(name, value);
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    let body = response.bytes().await?;
    let json = serde_json::from_slice(&body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&body)));
    Ok((status, json))
}

/// `notes_delete` round 1 for `title` in alice's workspace.
pub fn delete_round_one(id: i64, title: &str) -> Value {
    request(id, "tools/call", json!({ "name": "notes_delete", "arguments": delete_arguments(ALICE_WORKSPACE, title) }))
}

/// `notes_delete` round 2 accepting `note_id` for `title` in alice's workspace.
pub fn delete_round_two(id: i64, title: &str, state: &str, note_id: &str) -> Value {
    request(
        id,
        "tools/call",
        json!({
            "name": "notes_delete",
            "arguments": delete_arguments(ALICE_WORKSPACE, title),
            "inputResponses": { "delete_choice": { "action": "accept", "content": { "note_id": note_id, "confirm": true } } },
            "requestState": state,
        }),
    )
}

pub fn resources_list(id: i64) -> Value {
    request(id, "resources/list", json!({}))
}

/// The `requestState` of an `input_required` response offering exactly alice's three TPS reports.
pub fn state_of(response: &Value) -> String {
    let result = &response["result"];
    assert_eq!(result["resultType"], "input_required", "{response}");
    assert_eq!(
        result["inputRequests"]["delete_choice"]["params"]["requestedSchema"]["properties"]["note_id"]["enum"],
        json!(["note-3", "note-7", "note-14"])
    );
    result["requestState"].as_str().expect("requestState is a string").to_string()
}

pub fn resource_names(response: &Value) -> Vec<String> {
    response["result"]["resources"]
        .as_array()
        .unwrap_or_else(|| panic!("not a resources/list result: {response}"))
        .iter()
        .map(|resource| resource["name"].as_str().unwrap().to_string())
        .collect()
}

pub fn assert_deleted(response: &Value, note_id: &str) {
    assert_eq!(response["result"]["resultType"], "complete", "{response}");
    assert_eq!(response["result"]["structuredContent"], json!({ "deleted": true, "noteId": note_id, "outcome": "deleted" }), "{response}");
}

pub fn reason(response: &Value) -> &str {
    response["error"]["data"]["reason"].as_str().unwrap_or_else(|| panic!("no error reason in {response}"))
}

/// A deployment file in the temp directory, removed on drop.
pub struct TempConfig {
    pub path: PathBuf,
}

impl TempConfig {
    pub fn new(contents: &str) -> TempConfig {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let name = format!("mcpsim-e2e-{}-{}.toml", std::process::id(), COUNTER.fetch_add(1, Ordering::SeqCst));
        let path = std::env::temp_dir().join(name);
        std::fs::write(&path, contents).expect("the temp directory is writable");
        TempConfig { path }
    }

    /// The embedded demo plus one shared signing key, so several processes verify each other's states.
    pub fn demo_with_shared_key() -> TempConfig {
        // 32 bytes of 0x07, base64: a test key, never a real one.
        TempConfig::new(&format!(
            "{DEMO_TOML}\n[[keys]]\nid = \"shared\"\nsecret_base64 = \"BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\"\n"
        ))
    }

    pub fn arg(&self) -> &str {
        self.path.to_str().expect("temp paths are UTF-8 here")
    }
}

impl Drop for TempConfig {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Collects a child's stderr lines on a thread (so the pipe never fills and blocks the server).
fn collect_lines(stream: impl Read + Send + 'static) -> (Arc<Mutex<Vec<String>>>, Receiver<String>, JoinHandle<()>) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let (sender, receiver) = channel();
    let sink = lines.clone();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line.clone());
            let _ = sender.send(line);
        }
    });
    (lines, receiver, reader)
}

/// `mcpsim serve --http 127.0.0.1:0 ARGS`, killed on drop.
pub struct HttpServer {
    child: Child,
    stderr_reader: Option<JoinHandle<()>>,
    /// The first (or only) instance's address and URL.
    pub address: String,
    pub url: String,
    /// Every instance's URL (`--instances N`), in the order they were announced.
    pub urls: Vec<String>,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl HttpServer {
    pub fn start(extra_args: &[&str]) -> HttpServer {
        HttpServer::start_instances(extra_args, 1)
    }

    /// Starts the process and waits for `instances` "listening on" lines (pass `--instances N` in `extra_args`).
    pub fn start_instances(extra_args: &[&str], instances: usize) -> HttpServer {
        HttpServer::start_at("127.0.0.1:0", extra_args, instances)
    }

    /// [`HttpServer::start_instances`] listening on `address` (e.g. `0.0.0.0:0`) instead of `127.0.0.1:0`.
    pub fn start_at(address: &str, extra_args: &[&str], instances: usize) -> HttpServer {
        // Debug lines of our own request log only (e.g. a subscription stream ending).
        HttpServer::start_logging(address, extra_args, instances, "info,mcpsim::request=debug")
    }

    /// [`HttpServer::start_at`] with `MCPSIM_LOG` set to `log` (a tracing filter).
    pub fn start_logging(address: &str, extra_args: &[&str], instances: usize, log: &str) -> HttpServer {
        let mut child = Command::new(BIN)
            .args(["serve", "--http", address])
            .args(extra_args)
            .env("MCPSIM_LOG", log)
            .env_remove("MCPSIM_STORE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the mcpsim binary starts");
        let (stderr, lines, reader) = collect_lines(child.stderr.take().unwrap());
        let mut server =
            HttpServer { child, stderr_reader: Some(reader), address: String::new(), url: String::new(), urls: Vec::new(), stderr };
        while server.urls.len() < instances {
            let line = lines.recv_timeout(WAIT).unwrap_or_else(|_| panic!("no 'listening on' line; stderr: {:?}", server.stderr()));
            if let Some(url) = line.strip_prefix("listening on ") {
                server.urls.push(url.to_string());
            }
        }
        server.url = server.urls[0].clone();
        server.address = server.url.trim_start_matches("http://").trim_end_matches("/mcp").to_string();
        server
    }

    pub fn stderr(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the process at once (SIGKILL on Unix): no shutdown, no cleanup, as a crash or an OOM kill.
    pub fn kill(mut self) -> ExitStatus {
        self.child.kill().expect("the process can be killed");
        wait_bounded(&mut self.child)
    }

    /// Sends SIGTERM and waits (bounded) for the process to exit.
    pub fn terminate(self) -> ExitStatus {
        self.terminate_with_stderr().0
    }

    /// Sends SIGTERM, waits (bounded) for the process to exit, and returns its status and every stderr line,
    /// including those written while shutting down.
    pub fn terminate_with_stderr(mut self) -> (ExitStatus, Vec<String>) {
        let sent = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().expect("kill runs");
        assert!(sent.success());
        let status = wait_bounded(&mut self.child);
        // The process has exited, so its stderr is at end of file and the reader thread ends.
        if let Some(reader) = self.stderr_reader.take() {
            reader.join().expect("the stderr reader does not panic");
        }
        (status, self.stderr())
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_bounded(child: &mut Child) -> ExitStatus {
    for _ in 0..(WAIT.as_millis() / 20) {
        if let Some(status) = child.try_wait().expect("the child can be waited for") {
            return status;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    panic!("the server did not exit within {WAIT:?}");
}

/// `mcpsim serve --stdio ARGS`, killed on drop.
pub struct StdioServer {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Receiver<String>,
    stdout_lines: Arc<Mutex<Vec<String>>>,
    stdout_reader: Option<JoinHandle<()>>,
    stderr: Arc<Mutex<Vec<String>>>,
    stderr_reader: Option<JoinHandle<()>>,
}

impl StdioServer {
    pub fn start(extra_args: &[&str]) -> StdioServer {
        let mut child = Command::new(BIN)
            .args(["serve", "--stdio"])
            .args(extra_args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the mcpsim binary starts");
        let stdin = child.stdin.take();
        let (stdout_lines, stdout, stdout_reader) = collect_lines(child.stdout.take().unwrap());
        let (stderr, _, stderr_reader) = collect_lines(child.stderr.take().unwrap());
        StdioServer { child, stdin, stdout, stdout_lines, stdout_reader: Some(stdout_reader), stderr, stderr_reader: Some(stderr_reader) }
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(bytes).expect("the server reads stdin");
        stdin.flush().unwrap();
    }

    pub fn send(&mut self, message: &Value) {
        self.send_raw(format!("{message}\n").as_bytes());
    }

    pub fn receive(&mut self) -> Value {
        let line = self.stdout.recv_timeout(WAIT).unwrap_or_else(|_| panic!("no response line; stderr: {:?}", self.stderr()));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line:?}"))
    }

    pub fn call(&mut self, message: &Value) -> Value {
        self.send(message);
        let response = self.receive();
        assert_eq!(response["id"], message["id"], "responses come in order");
        response
    }

    /// Closes stdin and waits (bounded) for the process to exit; returns its status and every stdout line.
    pub fn finish(mut self) -> (ExitStatus, Vec<String>) {
        drop(self.stdin.take());
        let status = wait_bounded(&mut self.child);
        // The process has exited, so its stdout is at end of file and the reader thread ends.
        if let Some(reader) = self.stdout_reader.take() {
            reader.join().expect("the stdout reader does not panic");
        }
        (status, self.stdout_lines.lock().unwrap().clone())
    }

    /// [`StdioServer::finish`], and every stderr line: read after the process exited, so a log line written
    /// just before an answer cannot still be on its way (what [`StdioServer::stderr`] shows of a running one).
    pub fn finish_with_stderr(mut self) -> (ExitStatus, Vec<String>, Vec<String>) {
        let stderr_reader = self.stderr_reader.take();
        let stderr = self.stderr.clone();
        let (status, stdout) = self.finish();
        if let Some(reader) = stderr_reader {
            reader.join().expect("the stderr reader does not panic");
        }
        let stderr = stderr.lock().unwrap().clone();
        (status, stdout, stderr)
    }

    /// The stderr lines read so far (the process may still be writing).
    pub fn stderr(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }
}

impl Drop for StdioServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `mcpsim ARGS` to completion with empty stdin; returns exit code and stderr.
pub fn run_to_exit(args: &[&str]) -> (Option<i32>, String) {
    let (code, _, stderr) = run_with_env(args, &[]);
    (code, stderr)
}

/// Runs `mcpsim ARGS` with extra environment variables to completion; returns exit code, stdout and stderr.
pub fn run_with_env(args: &[&str], environment: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let output = Command::new(BIN)
        .args(args)
        .env_remove("MCPSIM_STORE")
        .envs(environment.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("the mcpsim binary runs");
    (output.status.code(), String::from_utf8_lossy(&output.stdout).into_owned(), String::from_utf8_lossy(&output.stderr).into_owned())
}

// ----- 2025-11-25 (legacy) clients, for the tests of `serve --eras both` -----

/// The protocol revision a legacy client speaks.
pub const LEGACY: &str = "2025-11-25";

pub fn legacy_request(id: i64, method: &str, params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
}

/// A legacy `initialize` declaring `capabilities`.
pub fn legacy_initialize(capabilities: Value) -> Value {
    legacy_request(
        0,
        "initialize",
        json!({ "protocolVersion": LEGACY, "capabilities": capabilities, "clientInfo": { "name": "e2e-legacy", "version": "1" } }),
    )
}

/// A legacy `notes_delete` call for the TPS reports of `workspace`.
pub fn legacy_delete(id: i64, workspace: &str) -> Value {
    legacy_request(id, "tools/call", json!({ "name": "notes_delete", "arguments": delete_arguments(workspace, "TPS report") }))
}

/// A POST as a legacy client sends it: no modern routing headers, the session id once there is one.
pub async fn legacy_post(client: &reqwest::Client, url: &str, token: &str, session: Option<&str>, message: &Value) -> reqwest::Response {
    let mut request = client
        .post(url)
        .header("Authorization", format!("Bearer {token}"))
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .body(serde_json::to_vec(message).unwrap());
    if let Some(session) = session {
        request = request.header("Mcp-Session-Id", session).header("MCP-Protocol-Version", LEGACY);
    }
    request.send().await.expect("the server answers")
}
