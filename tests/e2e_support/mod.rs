//! Shared helpers for the end-to-end tests (`e2e_stdio`, `e2e_http`): build requests, start the real `mcpsim`
//! binary, stop it. (`tests/common` is the in-process harness; this one drives processes.)
//!
//! Every process started here is killed when its handle drops, so a failing test leaves nothing running.
#![allow(dead_code)] // Each test binary uses a different subset.

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
pub const DEMO_TOML: &str = include_str!("../../src/demo.toml");
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
    pub address: String,
    pub url: String,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl HttpServer {
    pub fn start(extra_args: &[&str]) -> HttpServer {
        let mut child = Command::new(BIN)
            .args(["serve", "--http", "127.0.0.1:0"])
            .args(extra_args)
            // Debug lines of our own request log only (e.g. a subscription stream ending).
            .env("MCPSIM_LOG", "info,mcpsim::request=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the mcpsim binary starts");
        let (stderr, lines, _) = collect_lines(child.stderr.take().unwrap());
        let mut server = HttpServer { child, address: String::new(), url: String::new(), stderr };
        loop {
            let line = lines.recv_timeout(WAIT).unwrap_or_else(|_| panic!("no 'listening on' line; stderr: {:?}", server.stderr()));
            if let Some(url) = line.strip_prefix("listening on ") {
                server.url = url.to_string();
                server.address = url.trim_start_matches("http://").trim_end_matches("/mcp").to_string();
                return server;
            }
        }
    }

    pub fn stderr(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits (bounded) for the process to exit.
    pub fn terminate(mut self) -> ExitStatus {
        let sent = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().expect("kill runs");
        assert!(sent.success());
        wait_bounded(&mut self.child)
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
        let (stderr, _, _) = collect_lines(child.stderr.take().unwrap());
        StdioServer { child, stdin, stdout, stdout_lines, stdout_reader: Some(stdout_reader), stderr }
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
    let output = Command::new(BIN).args(args).stdin(Stdio::null()).output().expect("the mcpsim binary runs");
    (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
}
