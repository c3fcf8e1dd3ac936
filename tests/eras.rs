//! Both eras on one process, from the outside: the real `mcpsim serve --eras both` driven as a 2025-11-25
//! client (initialize, Mcp-Session-Id, the confirmation as an `elicitation/create` request inside the open
//! call) and as a 2026-07-28 client beside it, and a modern-only server answering `initialize`.
//!
//! The attacks: a session used by another principal, by another instance, after DELETE; a modern request
//! carrying a legacy session's id to borrow its capabilities; a root list naming another principal's
//! workspace; an answer delivered twice.

mod e2e_support;

use e2e_support::*;
use serde_json::{json, Value};

const ALICE: &str = "demo-alice";
const BOB: &str = "demo-bob";
const BOB_WORKSPACE: &str = "file:///Users/bob/Notes";

/// Opens a legacy session as `token`; returns its id.
async fn open_session(url: &str, token: &str, capabilities: Value) -> String {
    let response = legacy_post(&reqwest::Client::new(), url, token, None, &legacy_initialize(capabilities)).await;
    assert_eq!(response.status().as_u16(), 200);
    let session = response.headers().get("mcp-session-id").expect("a legacy initialize gets a session id").to_str().unwrap().to_string();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["result"]["protocolVersion"], LEGACY, "{body}");
    assert_eq!(body["result"]["serverInfo"]["name"], "mcpsim-notes");
    assert!(body["result"].get("resultType").is_none(), "a legacy result has no resultType: {body}");
    let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
    assert_eq!(legacy_post(&reqwest::Client::new(), url, token, Some(&session), &initialized).await.status().as_u16(), 202);
    session
}

/// The SSE events of an open legacy call, read as they arrive.
struct Events {
    response: reqwest::Response,
    buffer: String,
}

impl Events {
    fn new(response: reqwest::Response) -> Events {
        assert_eq!(response.headers().get("content-type").unwrap(), "text/event-stream");
        Events { response, buffer: String::new() }
    }

    async fn next(&mut self) -> Value {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                let data = event.lines().filter_map(|line| line.strip_prefix("data: ")).collect::<String>();
                return serde_json::from_str(&data).unwrap_or_else(|e| panic!("not JSON ({e}): {event:?}"));
            }
            let chunk = tokio::time::timeout(WAIT, self.response.chunk()).await.expect("an event in time").unwrap();
            self.buffer.push_str(&String::from_utf8_lossy(&chunk.expect("the stream is still open")));
        }
    }
}

fn answer(request: &Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": request["id"], "result": result })
}

fn accept(note_id: &str) -> Value {
    json!({ "action": "accept", "content": { "note_id": note_id, "confirm": true } })
}

async fn modern(url: &str, token: &str, message: &Value, session: Option<&str>) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
    let mut request = reqwest::Client::new().post(url).body(serde_json::to_vec(message).unwrap());
    for (name, value) in conforming_headers(message, token) {
        request = request.header(name, value);
    }
    if let Some(session) = session {
        request = request.header("Mcp-Session-Id", session);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.bytes().await.unwrap().to_vec())
}

#[tokio::test]
async fn a_legacy_confirmation_is_an_elicitation_inside_the_call_and_deletes_once() {
    let server = HttpServer::start(&["--eras", "both"]);
    let session = open_session(&server.url, ALICE, json!({ "elicitation": {} })).await;
    let mut events =
        Events::new(legacy_post(&reqwest::Client::new(), &server.url, ALICE, Some(&session), &legacy_delete(5, ALICE_WORKSPACE)).await);
    let asked = events.next().await;
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    assert_eq!(asked["params"]["requestedSchema"]["properties"]["note_id"]["enum"], json!(["note-3", "note-7", "note-14"]));
    let reply = answer(&asked, accept("note-7"));
    assert_eq!(legacy_post(&reqwest::Client::new(), &server.url, ALICE, Some(&session), &reply).await.status().as_u16(), 202);
    let done = events.next().await;
    assert_eq!(done["id"], 5);
    assert_eq!(done["result"]["structuredContent"], json!({ "deleted": true, "noteId": "note-7", "outcome": "deleted" }), "{done}");
    assert!(done["result"].get("resultType").is_none());
    // The same answer again reaches nothing: the question was answered once.
    assert_eq!(legacy_post(&reqwest::Client::new(), &server.url, ALICE, Some(&session), &reply).await.status().as_u16(), 202);
    // Bob cannot answer alice's questions, nor use her session at all.
    let ping = legacy_request(6, "ping", json!({}));
    assert_eq!(legacy_post(&reqwest::Client::new(), &server.url, BOB, Some(&session), &ping).await.status().as_u16(), 404);
    let pong: Value = legacy_post(&reqwest::Client::new(), &server.url, ALICE, Some(&session), &ping).await.json().await.unwrap();
    assert_eq!(pong["result"], json!({}));
    // The delete is the shared store's: a modern client sees it too.
    let (_, _, body) = modern(&server.url, ALICE, &resources_list(7), None).await;
    assert_eq!(resource_names(&serde_json::from_slice(&body).unwrap()), ["note-3", "note-14", "note-99"]);
    // A declined confirmation deletes nothing.
    let mut events =
        Events::new(legacy_post(&reqwest::Client::new(), &server.url, ALICE, Some(&session), &legacy_delete(8, ALICE_WORKSPACE)).await);
    let asked = events.next().await;
    legacy_post(&reqwest::Client::new(), &server.url, ALICE, Some(&session), &answer(&asked, json!({ "action": "decline" }))).await;
    assert_eq!(events.next().await["result"]["structuredContent"]["outcome"], "declined");
    // A DELETE passes the checks a POST does: unauthenticated, from a foreign page, or by another principal,
    // it ends nothing.
    let delete = |token: Option<&str>, origin: Option<&str>| {
        let mut request = reqwest::Client::new().delete(&server.url).header("Mcp-Session-Id", &session);
        if let Some(token) = token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        if let Some(origin) = origin {
            request = request.header("Origin", origin);
        }
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(delete(None, None).await, 401);
    assert_eq!(delete(Some(ALICE), Some("http://evil.example")).await, 403);
    assert_eq!(delete(Some(BOB), None).await, 404, "bob cannot end alice's session");
    assert_eq!(
        legacy_post(&reqwest::Client::new(), &server.url, ALICE, Some(&session), &ping).await.status().as_u16(),
        200,
        "still alice's"
    );
    // DELETE ends the session: its id is then unknown.
    assert_eq!(delete(Some(ALICE), None).await, 200);
    assert_eq!(legacy_post(&reqwest::Client::new(), &server.url, ALICE, Some(&session), &ping).await.status().as_u16(), 404);
}

#[tokio::test]
async fn modern_requests_on_a_dual_era_server_are_answered_as_on_a_modern_only_one() {
    let modern_only = HttpServer::start(&[]);
    let both = HttpServer::start(&["--eras", "both"]);
    let session = open_session(&both.url, ALICE, json!({ "elicitation": {} })).await;
    for message in [request(1, "server/discover", json!({})), request(2, "tools/list", json!({})), resources_list(3)] {
        let expected = modern(&modern_only.url, ALICE, &message, None).await;
        for carried in [None, Some(session.as_str())] {
            let (status, headers, body) = modern(&both.url, ALICE, &message, carried).await;
            assert_eq!((status, body.clone()), (expected.0, expected.2.clone()), "{message}: byte for byte");
            assert!(!headers.contains_key("mcp-session-id"), "a modern answer never carries a session id");
        }
    }
    // A modern request naming a legacy session borrows nothing from it: declaring no capabilities, it is
    // refused for want of form elicitation though the session declared it.
    let mut bare = round_one(4);
    bare["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({});
    let (status, _, body) = modern(&both.url, ALICE, &bare, Some(&session)).await;
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!((status, body["error"]["code"].clone()), (400, json!(-32021)), "{body}");
}

#[tokio::test]
async fn a_modern_only_server_answers_initialize_naming_its_version_and_mints_no_session() {
    let server = HttpServer::start(&["--eras", "modern"]);
    let response = legacy_post(&reqwest::Client::new(), &server.url, ALICE, None, &legacy_initialize(json!({}))).await;
    assert_eq!(response.status().as_u16(), 404);
    assert!(!response.headers().contains_key("mcp-session-id"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32601);
    assert_eq!(body["error"]["data"]["supported"], json!(["2026-07-28"]), "{body}");
}

#[tokio::test]
async fn roots_narrow_what_authorization_allows_and_never_widen_it() {
    let server = HttpServer::start(&["--eras", "both"]);
    let session = open_session(&server.url, ALICE, json!({ "elicitation": {}, "roots": {} })).await;
    // Roots naming bob's workspace: the call gets past the roots and is refused by the server's own authorization.
    let mut events =
        Events::new(legacy_post(&reqwest::Client::new(), &server.url, ALICE, Some(&session), &legacy_delete(1, BOB_WORKSPACE)).await);
    let asked = events.next().await;
    assert_eq!(asked["method"], "roots/list");
    legacy_post(
        &reqwest::Client::new(),
        &server.url,
        ALICE,
        Some(&session),
        &answer(&asked, json!({ "roots": [{ "uri": BOB_WORKSPACE }] })),
    )
    .await;
    assert_eq!(reason(&events.next().await), "workspace_unauthorized");
    // Roots that leave out alice's own workspace: refused though she is authorized for it.
    let mut events =
        Events::new(legacy_post(&reqwest::Client::new(), &server.url, ALICE, Some(&session), &legacy_delete(2, ALICE_WORKSPACE)).await);
    let asked = events.next().await;
    legacy_post(
        &reqwest::Client::new(),
        &server.url,
        ALICE,
        Some(&session),
        &answer(&asked, json!({ "roots": [{ "uri": "file:///Users/alice/Other" }] })),
    )
    .await;
    let refused = events.next().await;
    assert_eq!(reason(&refused), "workspace_unauthorized");
    assert!(refused["error"]["message"].as_str().unwrap().contains("outside every root"), "{refused}");
    // Roots containing it: on to the confirmation, and nothing was deleted by the refusals.
    let mut events =
        Events::new(legacy_post(&reqwest::Client::new(), &server.url, ALICE, Some(&session), &legacy_delete(3, ALICE_WORKSPACE)).await);
    let asked = events.next().await;
    legacy_post(
        &reqwest::Client::new(),
        &server.url,
        ALICE,
        Some(&session),
        &answer(&asked, json!({ "roots": [{ "uri": "file:///Users/alice" }] })),
    )
    .await;
    let asked = events.next().await;
    assert_eq!(asked["method"], "elicitation/create");
    legacy_post(&reqwest::Client::new(), &server.url, ALICE, Some(&session), &answer(&asked, accept("note-14"))).await;
    assert_eq!(events.next().await["result"]["structuredContent"]["noteId"], "note-14");
}

#[tokio::test]
async fn sessions_live_on_the_instance_that_made_them() {
    let fleet = HttpServer::start_instances(&["--eras", "both", "--instances", "2"], 2);
    let session = open_session(&fleet.urls[0], ALICE, json!({ "elicitation": {} })).await;
    let ping = legacy_request(1, "ping", json!({}));
    assert_eq!(legacy_post(&reqwest::Client::new(), &fleet.urls[0], ALICE, Some(&session), &ping).await.status().as_u16(), 200);
    // The other instance never saw it: 404, which tells a legacy client to initialize again there.
    let elsewhere = legacy_post(&reqwest::Client::new(), &fleet.urls[1], ALICE, Some(&session), &ping).await;
    assert_eq!(elsewhere.status().as_u16(), 404);
    let body: Value = elsewhere.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("initialize again"), "{body}");
    assert!(!open_session(&fleet.urls[1], ALICE, json!({})).await.is_empty());
}

#[test]
fn a_stdio_process_opened_with_initialize_is_one_legacy_session() {
    let mut server = StdioServer::start(&["--eras", "both"]);
    let opened = server.call(&legacy_initialize(json!({ "elicitation": {} })));
    assert_eq!(opened["result"]["protocolVersion"], LEGACY);
    server.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
    server.send(&legacy_delete(1, ALICE_WORKSPACE));
    let asked = server.receive();
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    // A ping while the call waits is answered; the answer then completes the call.
    assert_eq!(server.call(&legacy_request(2, "ping", json!({})))["result"], json!({}));
    server.send(&answer(&asked, accept("note-3")));
    let done = server.receive();
    assert_eq!(done["id"], 1);
    assert_eq!(done["result"]["structuredContent"]["noteId"], "note-3", "{done}");
    let (status, _) = server.finish();
    assert!(status.success());
}

#[test]
fn a_stdio_process_without_initialize_stays_modern() {
    let mut server = StdioServer::start(&["--eras", "both"]);
    let listed = server.call(&request(1, "tools/list", json!({})));
    assert_eq!(listed["result"]["resultType"], "complete", "{listed}");
    // Once modern, an initialize is what it is on a modern-only server.
    let refused = server.call(&legacy_initialize(json!({})));
    assert_eq!(refused["error"]["code"], -32601, "{refused}");
}
