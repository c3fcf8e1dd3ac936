//! Shared harness for in-process tests of the notes server (and, in `child`, a child mcpsim run to its end).
//!
//! A harness is the embedded demo deployment (`config::Deployment::demo()`) with memory stores, a fixed signing
//! key, a clock the test moves by hand and nonces from a counter, so every run sees the same states and bytes.
//! Requests go in as raw JSON bytes through `handlers::pipeline::handle_message`, exactly as a transport hands
//! them over; responses are taken apart with exact assertions (JSON-RPC shape, echoed id, HTTP status,
//! `resultType` and server identity on every result, a reason from the closed set on every -32602/-32603).
//!
//! Every test binary includes this module but uses a different part of it.
#![allow(dead_code)]

pub mod child;

use async_trait::async_trait;
use mcpsim::testing::Deployment;
use mcpsim::testing::FileUri;
use mcpsim::testing::KeyRing;
use mcpsim::testing::Reason;
use mcpsim::testing::RoutingHeaders;
use mcpsim::testing::{handle_message, Reply};
use mcpsim::testing::{notes_server, NotesConfig, NotesPorts, NotesServer};
use mcpsim::testing::{Clock, GuardedDelete, NonceSource, Note, NoteStore, StoreError};
use mcpsim::testing::{MemoryNoteStore, MemoryReplayStore, ReplayLimits};
use mcpsim::testing::{KEY_CLIENT_CAPABILITIES, KEY_CLIENT_INFO, KEY_PROTOCOL_VERSION, KEY_SERVER_INFO};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub const VERSION: &str = "2026-07-28";
pub const ALICE_WORKSPACE: &str = "file:///Users/alice/Documents/Notes";
pub const BOB_WORKSPACE: &str = "file:///Users/bob/Notes";
pub const EVIL_TWIN_FOLDER: &str = "file:///Users/alice/Documents/Notes-evil";
/// Where the harness clock starts (an ordinary 2027 instant, far from zero so underflow would show).
pub const START_MS: u64 = 1_800_000_000_000;
/// The demo's state TTL (`state_ttl_secs = 300`).
pub const STATE_TTL_MS: u64 = 300_000;
pub const KEY_ID: &str = "test-1";
pub const KEY_BYTES: [u8; 32] = [0x5a; 32];
/// Every note of the demo, in listing order.
pub const DEMO_NOTE_IDS: [&str; 7] = ["note-3", "note-7", "note-14", "note-99", "note-100", "note-200", "note-300"];

/// A clock that only moves when the test says so.
#[derive(Debug)]
pub struct TestClock(AtomicU64);

impl TestClock {
    pub fn new(now_ms: u64) -> TestClock {
        TestClock(AtomicU64::new(now_ms))
    }

    pub fn set(&self, now_ms: u64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }

    pub fn advance(&self, by_ms: u64) {
        self.0.fetch_add(by_ms, Ordering::SeqCst);
    }
}

impl Clock for TestClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Nonces 1, 2, 3, … (big-endian in the last eight bytes): distinct and reproducible.
#[derive(Debug, Default)]
pub struct CountingNonces(AtomicU64);

impl CountingNonces {
    /// How many nonces were drawn: every minted state draws exactly one.
    pub fn issued(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl NonceSource for CountingNonces {
    fn nonce(&self) -> [u8; 16] {
        let count = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        let mut bytes = *b"nonce...\0\0\0\0\0\0\0\0";
        bytes[8..].copy_from_slice(&count.to_be_bytes());
        bytes
    }
}

/// How the note store behaves when the replay store asks it to delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteBehaviour {
    /// Delete at once (a plain memory store).
    Immediate,
    /// Give other tasks one turn first, so two confirmations can interleave inside claim-and-delete.
    YieldOnce,
    /// Never finish: models an instance that crashed after claiming the nonce and before deleting.
    Hang,
}

/// The demo's memory note store behind a switch that can slow down or stall deletes.
pub struct ControlledNoteStore {
    pub inner: Arc<MemoryNoteStore>,
    behaviour: Mutex<DeleteBehaviour>,
}

impl ControlledNoteStore {
    pub fn set_behaviour(&self, behaviour: DeleteBehaviour) {
        *self.behaviour.lock().unwrap() = behaviour;
    }
}

#[async_trait]
impl NoteStore for ControlledNoteStore {
    async fn list_notes(&self) -> Result<Vec<Note>, StoreError> {
        self.inner.list_notes().await
    }

    async fn delete_if_inside(&self, id: &str, revision: &str, workspace: &FileUri) -> Result<GuardedDelete, StoreError> {
        let behaviour = *self.behaviour.lock().unwrap();
        match behaviour {
            DeleteBehaviour::Immediate => {}
            DeleteBehaviour::YieldOnce => tokio::task::yield_now().await,
            DeleteBehaviour::Hang => std::future::pending::<()>().await,
        }
        self.inner.delete_if_inside(id, revision, workspace).await
    }
}

/// One request and what came back.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub id: Value,
    pub reply: Reply,
}

impl Exchange {
    /// The response object (panics if there was none).
    pub fn response(&self) -> &Value {
        self.reply.response.as_ref().expect("a request gets a response")
    }

    /// Asserts a successful result for this request and returns it.
    pub fn result(&self) -> Value {
        let response = self.response();
        assert_valid_response(response, self.reply.http_status);
        assert_eq!(response["id"], self.id, "the response echoes the request id: {response}");
        assert!(response.get("error").is_none(), "expected a result, got {response}");
        assert_eq!(self.reply.http_status, 200, "{response}");
        response["result"].clone()
    }

    /// Asserts an error for this request (echoing its id) and returns the error object.
    pub fn error(&self) -> Value {
        let response = self.response();
        assert_valid_response(response, self.reply.http_status);
        assert_eq!(response["id"], self.id, "the error echoes the request id: {response}");
        assert!(response.get("error").is_some(), "expected an error, got {response}");
        response["error"].clone()
    }

    /// Asserts an error with this code and `data.reason`, and returns `data`.
    pub fn refused(&self, code: i64, reason: &str) -> Value {
        let error = self.error();
        assert_eq!(error["code"], code, "{error}");
        assert_eq!(error["data"]["reason"], reason, "{error}");
        error["data"].clone()
    }

    /// The usual refusal of an MRTR/state/policy problem: -32602 with a reason, HTTP 200.
    pub fn invalid(&self, reason: &str) -> Value {
        let data = self.refused(-32602, reason);
        assert_eq!(self.reply.http_status, 200);
        data
    }

    /// The complete result's `structuredContent`, after asserting it is a non-error outcome.
    pub fn outcome(&self) -> Value {
        let result = self.result();
        assert_eq!(result["resultType"], "complete", "{result}");
        assert_eq!(result["isError"], false, "{result}");
        result["structuredContent"].clone()
    }
}

/// Asserts that `response` is a JSON-RPC 2.0 response object our server may send, consistent with `http_status`.
///
/// Exactly `jsonrpc`, `id` and one of `result`/`error`; `id` an integer, a string, or null on an error; errors
/// carry an integer code and a non-empty message, and every -32602/-32603 names a reason from the closed set;
/// results carry `resultType` and `_meta["io.modelcontextprotocol/serverInfo"]`.
pub fn assert_valid_response(response: &Value, http_status: u16) {
    let object = response.as_object().unwrap_or_else(|| panic!("a response is an object: {response}"));
    assert_eq!(object.get("jsonrpc"), Some(&json!("2.0")), "{response}");
    let id = object.get("id").unwrap_or_else(|| panic!("a response always has an id member: {response}"));
    let id_ok = id.is_string() || id.is_i64() || (id.is_null() && object.contains_key("error"));
    assert!(id_ok, "id must be an integer, a string, or null on an error: {response}");
    assert_eq!(object.len(), 3, "exactly jsonrpc, id and one of result/error: {response}");
    match (object.get("result"), object.get("error")) {
        (Some(result), None) => {
            assert_eq!(http_status, 200, "{response}");
            let result_type = result["resultType"].as_str().unwrap_or_else(|| panic!("resultType is a string: {response}"));
            assert!(["complete", "input_required"].contains(&result_type), "{response}");
            let info = &result["_meta"][KEY_SERVER_INFO];
            assert!(info["name"].is_string() && info["version"].is_string(), "serverInfo in _meta: {response}");
            assert!(result.get("serverInfo").is_none(), "server identity lives only in _meta: {response}");
        }
        (None, Some(error)) => {
            let code = error["code"].as_i64().unwrap_or_else(|| panic!("error.code is an integer: {response}"));
            assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()), "{response}");
            assert!(error.as_object().unwrap().keys().all(|k| ["code", "message", "data"].contains(&k.as_str())), "{response}");
            if code == -32602 || code == -32603 {
                let reason = error["data"]["reason"].as_str().unwrap_or_else(|| panic!("a reason on every {code}: {response}"));
                assert!(Reason::parse(reason).is_some(), "reason {reason:?} is not in the closed set: {response}");
            }
            let expected_status: &[u16] = match code {
                -32700 | -32020 | -32021 | -32022 => &[400],
                -32600 => &[400, 413],
                -32601 => &[404],
                -32602 => &[200, 400],
                -32603 => &[200],
                other => panic!("code {other} is not one this server sends: {response}"),
            };
            assert!(expected_status.contains(&http_status), "code {code} with HTTP {http_status}: {response}");
        }
        _ => panic!("exactly one of result and error: {response}"),
    }
}

/// `params._meta` for the protocol version this server speaks.
pub fn meta(capabilities: Value) -> Value {
    json!({
        KEY_PROTOCOL_VERSION: VERSION,
        KEY_CLIENT_CAPABILITIES: capabilities,
        KEY_CLIENT_INFO: { "name": "notes-server-tests", "version": "1" },
    })
}

pub fn form_capabilities() -> Value {
    json!({ "elicitation": { "form": {} } })
}

pub fn delete_arguments(workspace_uri: &str, title: &str) -> Value {
    json!({ "workspaceUri": workspace_uri, "title": title })
}

/// The lesson's arguments: alice's workspace, "TPS report".
pub fn lesson_arguments() -> Value {
    delete_arguments(ALICE_WORKSPACE, "TPS report")
}

pub fn accept(note_id: &str) -> Value {
    json!({ "delete_choice": { "action": "accept", "content": { "note_id": note_id, "confirm": true } } })
}

pub fn decline() -> Value {
    json!({ "delete_choice": { "action": "decline" } })
}

pub fn cancel() -> Value {
    json!({ "delete_choice": { "action": "cancel" } })
}

/// The demo deployment's notes configuration, signed with the test key.
pub fn demo_config() -> NotesConfig {
    config_with_ring(KeyRing::new(KEY_ID, KEY_BYTES.to_vec()).unwrap())
}

pub fn config_with_ring(key_ring: KeyRing) -> NotesConfig {
    Deployment::demo().notes_config(key_ring, None).unwrap()
}

/// A demo deployment: memory stores, test clock and nonces, and one server instance over them.
pub struct Harness {
    pub notes: Arc<MemoryNoteStore>,
    pub note_store: Arc<ControlledNoteStore>,
    pub replay: Arc<MemoryReplayStore>,
    pub clock: Arc<TestClock>,
    pub nonces: Arc<CountingNonces>,
    pub server: NotesServer,
    next_id: AtomicI64,
}

impl Default for Harness {
    fn default() -> Self {
        Harness::new()
    }
}

impl Harness {
    pub fn new() -> Harness {
        Harness::with_limits(ReplayLimits::default())
    }

    pub fn with_limits(limits: ReplayLimits) -> Harness {
        let notes = Arc::new(MemoryNoteStore::new(Deployment::demo().notes()));
        let note_store = Arc::new(ControlledNoteStore { inner: notes.clone(), behaviour: Mutex::new(DeleteBehaviour::Immediate) });
        let clock = Arc::new(TestClock::new(START_MS));
        let replay = Arc::new(MemoryReplayStore::new(note_store.clone(), clock.clone(), limits));
        let nonces = Arc::new(CountingNonces::default());
        let ports = NotesPorts {
            notes: note_store.clone(),
            replay: replay.clone(),
            clock: clock.clone(),
            nonces: nonces.clone(),
            out_of_band: None,
        };
        let server = notes_server(Arc::new(demo_config()), ports);
        Harness { notes, note_store, replay, clock, nonces, server, next_id: AtomicI64::new(1) }
    }

    /// Another instance of the deployment: its own configuration, the same shared stores, clock and nonces.
    pub fn instance(&self, config: NotesConfig) -> NotesServer {
        notes_server(Arc::new(config), self.server.ports.clone())
    }

    /// A request id never used before in this harness.
    pub fn fresh_id(&self) -> i64 {
        self.next_id.fetch_add(1, Ordering::SeqCst)
    }

    /// A request object with a fresh id; `params` gets `_meta` with `capabilities` unless it already has one.
    pub fn request(&self, method: &str, params: Value, capabilities: Value) -> Value {
        let mut params = params;
        if params.get("_meta").is_none() {
            params["_meta"] = meta(capabilities);
        }
        json!({ "jsonrpc": "2.0", "id": self.fresh_id(), "method": method, "params": params })
    }

    pub async fn send_bytes(&self, principal: &str, bytes: &[u8]) -> Reply {
        handle_message(&self.server, principal, bytes, None).await
    }

    /// Sends `message` (serialized) to `server` as `principal`.
    pub async fn send_to(&self, server: &NotesServer, principal: &str, message: &Value) -> Exchange {
        self.send_with_headers(server, principal, message, None).await
    }

    pub async fn send_with_headers(
        &self,
        server: &NotesServer,
        principal: &str,
        message: &Value,
        headers: Option<&RoutingHeaders>,
    ) -> Exchange {
        let bytes = serde_json::to_vec(message).unwrap();
        let reply = handle_message(server, principal, &bytes, headers).await;
        Exchange { id: message.get("id").cloned().unwrap_or(Value::Null), reply }
    }

    pub async fn send(&self, principal: &str, message: &Value) -> Exchange {
        self.send_to(&self.server, principal, message).await
    }

    pub async fn call(&self, principal: &str, method: &str, params: Value) -> Exchange {
        let message = self.request(method, params, json!({}));
        self.send(principal, &message).await
    }

    /// `tools/call notes_delete` with `extra` params merged in, declaring `capabilities`.
    pub async fn delete_call(
        &self,
        server: &NotesServer,
        principal: &str,
        arguments: &Value,
        extra: Value,
        capabilities: Value,
    ) -> Exchange {
        let mut params = json!({ "name": "notes_delete", "arguments": arguments });
        if let Value::Object(extra) = extra {
            params.as_object_mut().unwrap().extend(extra);
        }
        let message = self.request("tools/call", params, capabilities);
        self.send_to(server, principal, &message).await
    }

    /// Round 1 on the default instance, asserting `input_required`; returns the whole result.
    pub async fn round_one_result(&self, principal: &str, arguments: &Value) -> Value {
        let result = self.delete_call(&self.server, principal, arguments, json!({}), form_capabilities()).await.result();
        assert_eq!(result["resultType"], "input_required", "{result}");
        result
    }

    /// Round 1 on the default instance; returns the `requestState`.
    pub async fn round_one(&self, principal: &str, arguments: &Value) -> String {
        let result = self.round_one_result(principal, arguments).await;
        result["requestState"].as_str().expect("round 1 carries a requestState").to_string()
    }

    /// Round 1 of the lesson (alice, her workspace, "TPS report").
    pub async fn lesson_state(&self) -> String {
        self.round_one("alice", &lesson_arguments()).await
    }

    /// Round 2 on the default instance with a fresh id.
    pub async fn answer(&self, principal: &str, arguments: &Value, state: &str, responses: Value) -> Exchange {
        self.answer_on(&self.server, principal, arguments, state, responses).await
    }

    pub async fn answer_on(&self, server: &NotesServer, principal: &str, arguments: &Value, state: &str, responses: Value) -> Exchange {
        let extra = json!({ "requestState": state, "inputResponses": responses });
        self.delete_call(server, principal, arguments, extra, form_capabilities()).await
    }

    /// Accepts `note_id` for alice on the lesson arguments and asserts it was deleted: the proof that an
    /// earlier refusal consumed nothing.
    pub async fn accept_succeeds(&self, state: &str, note_id: &str) {
        let outcome = self.answer("alice", &lesson_arguments(), state, accept(note_id)).await.outcome();
        assert_eq!(outcome, json!({ "deleted": true, "noteId": note_id, "outcome": "deleted" }));
        assert!(!self.note_ids().contains(&note_id.to_string()), "{note_id} is gone after the accept");
    }

    pub fn note_ids(&self) -> Vec<String> {
        self.notes.snapshot().into_iter().map(|note| note.id).collect()
    }

    pub fn note(&self, id: &str) -> Option<Note> {
        self.notes.snapshot().into_iter().find(|note| note.id == id)
    }

    /// Asserts the note store still holds every demo note and the replay store holds nothing.
    pub fn assert_untouched(&self) {
        assert_eq!(self.note_ids(), DEMO_NOTE_IDS, "no note was deleted");
        assert!(self.replay.is_empty(), "no nonce was consumed: {:?}", self.replay.consumed());
    }
}

/// The demo note ids without `removed`, in listing order.
pub fn demo_ids_without(removed: &[&str]) -> Vec<String> {
    DEMO_NOTE_IDS.iter().filter(|id| !removed.contains(id)).map(|id| id.to_string()).collect()
}

/// Replaces the character at `index` (ASCII tokens only).
pub fn replace_char(text: &str, index: usize, replacement: char) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    chars[index] = replacement;
    chars.into_iter().collect()
}

/// A base64url character different from `current` (for tampering that stays well-formed).
pub fn other_base64_char(current: char) -> char {
    if current == 'A' {
        'B'
    } else {
        'A'
    }
}
