//! End to end over streamable HTTP: the real `mcpsim serve --http` process, driven by an HTTP client and,
//! where a client library would be too polite, by raw bytes on a socket.

mod e2e_support;

use e2e_support::*;
use reqwest::header::HeaderMap;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;

const ALICE: &str = "demo-alice";
const BOB: &str = "demo-bob";
const MESSAGE_BYTES_MAX: usize = 1024 * 1024;

fn without(headers: &[(String, String)], name: &str) -> Vec<(String, String)> {
    headers.iter().filter(|(n, _)| !n.eq_ignore_ascii_case(name)).cloned().collect()
}

fn with(headers: &[(String, String)], name: &str, value: &str) -> Vec<(String, String)> {
    let mut headers = without(headers, name);
    headers.push((name.to_string(), value.to_string()));
    headers
}

struct Answer {
    status: u16,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        assert_eq!(self.headers.get("content-type").map(|v| v.to_str().unwrap()), Some("application/json"), "status {}", self.status);
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

async fn send(url: &str, method: reqwest::Method, headers: &[(String, String)], body: Vec<u8>) -> Answer {
    let mut request = reqwest::Client::new().request(method, url).body(body);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let response = request.send().await.expect("the server answers");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.bytes().await.expect("the body arrives").to_vec();
    assert!(!headers.contains_key("mcp-session-id"), "a stateless server never mints or echoes a session id");
    Answer { status, headers, body }
}

async fn post(server: &HttpServer, headers: &[(String, String)], message: &Value) -> Answer {
    send(&server.url, reqwest::Method::POST, headers, serde_json::to_vec(message).unwrap()).await
}

/// A conforming call as `token`; returns the HTTP status and the JSON-RPC response.
async fn call(server: &HttpServer, token: &str, message: &Value) -> (u16, Value) {
    let answer = post(server, &conforming_headers(message, token), message).await;
    (answer.status, answer.json())
}

/// Raw request bytes to the server; returns everything it sends back before closing.
fn raw_exchange(address: &str, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(address).expect("the server accepts connections");
    stream.set_read_timeout(Some(WAIT)).unwrap();
    stream.write_all(request).expect("the server reads the request");
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn two_rounds_over_http_delete_the_chosen_note_and_log_no_secrets() {
    let server = HttpServer::start(&[]);
    let (status, response) = call(&server, ALICE, &round_one(1)).await;
    assert_eq!(status, 200);
    let state = state_of(&response);
    let (status, response) = call(&server, ALICE, &round_two(2, &state, "note-7")).await;
    assert_eq!(status, 200);
    assert_deleted(&response, "note-7");
    let (_, response) = call(&server, ALICE, &resources_list(3)).await;
    assert_eq!(resource_names(&response), ["note-3", "note-14", "note-99"]);

    // Every line the process wrote: a request's log line may still be on its way while the client holds the
    // answer, so the lines are read once the process has exited.
    let (_, logs) = server.terminate_with_stderr();
    let logs = logs.join("\n");
    assert!(logs.contains("principal=\"alice\"") || logs.contains("principal=alice"), "{logs}");
    assert!(logs.contains("tool=\"notes_delete\""), "{logs}");
    assert!(logs.contains("input_required") && logs.contains("complete:deleted") && logs.contains("latency_us="), "{logs}");
    for secret in [ALICE, &state, "TPS report\"", ALICE_WORKSPACE] {
        assert!(!logs.contains(secret), "the log must not contain {secret:?}: {logs}");
    }
}

#[tokio::test]
async fn methods_other_than_post_get_405_with_allow_post() {
    let server = HttpServer::start(&[]);
    for method in [reqwest::Method::GET, reqwest::Method::DELETE, reqwest::Method::PUT, reqwest::Method::OPTIONS, reqwest::Method::PATCH] {
        let headers = vec![("Authorization".to_string(), format!("Bearer {ALICE}")), ("Mcp-Session-Id".to_string(), "abc".to_string())];
        let answer = send(&server.url, method.clone(), &headers, Vec::new()).await;
        assert_eq!(answer.status, 405, "{method}");
        assert_eq!(answer.headers["allow"], "POST", "{method}");
    }
    let answer = send(&server.url.replace("/mcp", "/other"), reqwest::Method::POST, &[], Vec::new()).await;
    assert_eq!(answer.status, 404);
    assert!(answer.text().contains("POST /mcp"), "{}", answer.text());
}

#[tokio::test]
async fn foreign_origins_and_rebound_hosts_get_403_loopback_origins_pass() {
    let server = HttpServer::start(&[]);
    let message = resources_list(1);
    let headers = conforming_headers(&message, ALICE);
    for origin in ["http://evil.example", "null", "http://localhost.evil.example", "https://127.0.0.1.nip.io"] {
        let answer = post(&server, &with(&headers, "Origin", origin), &message).await;
        assert_eq!(answer.status, 403, "{origin}");
        assert!(answer.text().contains("--allow-origin"), "{}", answer.text());
    }
    for origin in ["http://localhost:6274", "http://127.0.0.1:3000", "http://[::1]"] {
        assert_eq!(post(&server, &with(&headers, "Origin", origin), &message).await.status, 200, "{origin}");
    }
    // The origin check comes before authentication: a foreign page learns nothing about tokens.
    assert_eq!(post(&server, &with(&without(&headers, "Authorization"), "Origin", "http://evil.example"), &message).await.status, 403);

    // DNS rebinding: a foreign name resolving to 127.0.0.1 reaches the socket, but not the server.
    let answer =
        raw_exchange(&server.address, b"POST /mcp HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");

    let strict = HttpServer::start(&["--allow-origin", "https://app.example.com"]);
    let answer = post(&strict, &with(&headers, "Origin", "https://app.example.com"), &message).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    let answer = post(&strict, &with(&headers, "Origin", "http://localhost:6274"), &message).await;
    assert_eq!(answer.status, 403, "an allowlist replaces the loopback default");
}

#[tokio::test]
async fn missing_or_unknown_tokens_get_401_with_a_bearer_challenge() {
    let server = HttpServer::start(&[]);
    let message = resources_list(1);
    let headers = conforming_headers(&message, ALICE);

    let answer = post(&server, &without(&headers, "Authorization"), &message).await;
    assert_eq!(answer.status, 401);
    assert_eq!(answer.headers["www-authenticate"], "Bearer realm=\"mcpsim\"");

    for token in ["Bearer not-a-token", "Bearer ", "Bearer demo-alice-x", "Bearer DEMO-ALICE"] {
        let answer = post(&server, &with(&headers, "Authorization", token), &message).await;
        assert_eq!(answer.status, 401, "{token}");
        let challenge = answer.headers["www-authenticate"].to_str().unwrap();
        assert!(challenge.starts_with("Bearer realm=\"mcpsim\"") && challenge.contains("error=\"invalid_token\""), "{challenge}");
    }
    let answer = post(&server, &with(&headers, "Authorization", "Basic ZGVtby1hbGljZTo="), &message).await;
    assert_eq!(answer.status, 401);
    assert!(!answer.headers["www-authenticate"].to_str().unwrap().contains("error="), "no bearer token was given");

    assert_eq!(
        post(&server, &with(&headers, "Authorization", "bearer demo-alice"), &message).await.status,
        200,
        "the scheme is case-insensitive"
    );
}

#[tokio::test]
async fn the_body_must_be_declared_json_else_415() {
    let server = HttpServer::start(&[]);
    let message = resources_list(1);
    let headers = conforming_headers(&message, ALICE);
    for content_type in ["text/plain", "application/x-www-form-urlencoded", "application/json; charset=latin1"] {
        assert_eq!(post(&server, &with(&headers, "Content-Type", content_type), &message).await.status, 415, "{content_type}");
    }
    assert_eq!(post(&server, &without(&headers, "Content-Type"), &message).await.status, 415);
    assert_eq!(post(&server, &with(&headers, "Content-Type", "application/json; charset=UTF-8"), &message).await.status, 200);
}

#[tokio::test]
async fn accept_must_admit_json_and_event_stream_else_406() {
    let server = HttpServer::start(&[]);
    let message = resources_list(1);
    let headers = conforming_headers(&message, ALICE);
    for accept in ["application/json", "text/event-stream", "text/html", "application/json, text/event-stream;q=0"] {
        assert_eq!(post(&server, &with(&headers, "Accept", accept), &message).await.status, 406, "{accept}");
    }
    // (Client libraries add `Accept: */*` when none is set, so "no Accept at all" takes raw bytes.)
    let body = message.to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {ALICE}\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let answer = raw_exchange(&server.address, request.as_bytes());
    assert!(answer.starts_with("HTTP/1.1 406"), "{answer}");
    for accept in ["*/*", "application/*, text/*", "text/event-stream, application/json;q=0.9"] {
        assert_eq!(post(&server, &with(&headers, "Accept", accept), &message).await.status, 200, "{accept}");
    }
}

#[tokio::test]
async fn oversized_bodies_get_413_with_a_json_rpc_error_and_the_server_keeps_serving() {
    let server = HttpServer::start(&[]);
    let mut huge = round_one(1);
    huge["params"]["arguments"]["title"] = json!("x".repeat(MESSAGE_BYTES_MAX));
    let answer = post(&server, &conforming_headers(&huge, ALICE), &huge).await;
    assert_eq!(answer.status, 413);
    let error = answer.json();
    assert_eq!(error["id"], Value::Null);
    assert_eq!(error["error"]["code"], -32600);
    assert_eq!(reason(&error), "payload_too_large");

    // Without Content-Length (chunked), the limit is enforced while reading.
    let chunk = vec![b' '; 64 * 1024];
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {ALICE}\r\nContent-Type: application/json\r\nAccept: */*\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    .into_bytes();
    for _ in 0..(MESSAGE_BYTES_MAX / chunk.len() + 2) {
        request.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        request.extend_from_slice(&chunk);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    let answer = raw_exchange(&server.address, &request);
    assert!(answer.starts_with("HTTP/1.1 413"), "{}", &answer[..answer.len().min(300)]);
    assert!(answer.contains("payload_too_large"), "{answer}");

    let (status, response) = call(&server, ALICE, &resources_list(2)).await;
    assert_eq!((status, response["id"].clone()), (200, json!(2)), "still serving");
}

#[tokio::test]
async fn notifications_get_202_empty_and_are_never_executed() {
    let server = HttpServer::start(&[]);
    let (_, response) = call(&server, ALICE, &round_one(1)).await;
    let state = state_of(&response);
    let notification = as_notification(round_two(2, &state, "note-7"));
    let answer = post(&server, &conforming_headers(&notification, ALICE), &notification).await;
    assert_eq!(answer.status, 202);
    assert!(answer.body.is_empty(), "202 has an empty body: {:?}", answer.text());

    let (_, response) = call(&server, ALICE, &resources_list(3)).await;
    assert_eq!(resource_names(&response), ["note-3", "note-7", "note-14", "note-99"], "nothing was deleted");
    let (_, response) = call(&server, ALICE, &round_two(4, &state, "note-7")).await;
    assert_deleted(&response, "note-7");
}

#[tokio::test]
async fn header_mismatch_is_refused_before_version_support_and_routing() {
    let server = HttpServer::start(&[]);
    let mut old = resources_list(1);
    old["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("1900-01-01");
    let headers = conforming_headers(&old, ALICE);

    // Header says the supported version, body an unsupported one: a mismatch, reported as such first.
    let answer = post(&server, &with(&headers, "MCP-Protocol-Version", VERSION), &old).await;
    assert_eq!(answer.status, 400);
    assert_eq!(answer.json()["error"]["code"], -32020);

    // Header and body agree on an unsupported version: -32022 with exact data.
    let answer = post(&server, &headers, &old).await;
    assert_eq!(answer.status, 400);
    let error = answer.json();
    assert_eq!(error["error"]["code"], -32022);
    assert_eq!(error["error"]["data"], json!({ "supported": [VERSION], "requested": "1900-01-01" }));

    let message = round_one(2);
    let headers = conforming_headers(&message, ALICE);
    for broken in [
        without(&headers, "MCP-Protocol-Version"),
        without(&headers, "Mcp-Method"),
        without(&headers, "Mcp-Name"),
        with(&headers, "Mcp-Method", "tools/list"),
        with(&headers, "Mcp-Name", "notes_export"),
        with(&headers, "Mcp-Name", "=?base64?not base64?="),
    ] {
        let answer = post(&server, &broken, &message).await;
        assert_eq!((answer.status, answer.json()["error"]["code"].clone()), (400, json!(-32020)), "{broken:?}");
    }
    // An unknown method with mismatched headers is still a mismatch: headers are checked before routing.
    let unknown = request(3, "initialize", json!({}));
    let answer = post(&server, &with(&conforming_headers(&unknown, ALICE), "Mcp-Method", "ping"), &unknown).await;
    assert_eq!(answer.json()["error"]["code"], -32020);

    // Header names are case-insensitive, values trimmed, base64-wrapped names decoded.
    let relaxed = vec![
        ("authorization".to_string(), format!("Bearer {ALICE}")),
        ("content-type".to_string(), "application/json".to_string()),
        ("accept".to_string(), "application/json, text/event-stream".to_string()),
        ("mcp-protocol-version".to_string(), format!("  {VERSION} ")),
        ("MCP-METHOD".to_string(), "tools/call".to_string()),
        ("mCp-NaMe".to_string(), "=?base64?bm90ZXNfZGVsZXRl?=".to_string()),
    ];
    let answer = post(&server, &relaxed, &message).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.json()["result"]["resultType"], "input_required");
}

#[tokio::test]
async fn unknown_and_removed_methods_get_32601_with_404_keeping_the_id() {
    let server = HttpServer::start(&[]);
    for (id, method) in [(7, "initialize"), (8, "ping"), (9, "resources/subscribe"), (10, "notes/nuke")] {
        let (status, response) = call(&server, ALICE, &request(id, method, json!({}))).await;
        assert_eq!(status, 404, "{method}");
        assert_eq!(response["error"]["code"], -32601, "{method}");
        assert_eq!(response["id"], id);
    }
}

#[tokio::test]
async fn session_ids_are_ignored_and_never_returned() {
    let server = HttpServer::start(&[]);
    let first = round_one(1);
    let answer = post(&server, &with(&conforming_headers(&first, ALICE), "Mcp-Session-Id", "session-a"), &first).await;
    let state = state_of(&answer.json());
    // Round 2 claims another session: there are no sessions, so nothing binds to it (send() checks no echo).
    let second = round_two(2, &state, "note-14");
    let answer = post(&server, &with(&conforming_headers(&second, ALICE), "Mcp-Session-Id", "session-b"), &second).await;
    assert_deleted(&answer.json(), "note-14");
    // A session id does not stand in for authentication either.
    let answer =
        post(&server, &with(&without(&conforming_headers(&second, ALICE), "Authorization"), "Mcp-Session-Id", "session-a"), &second).await;
    assert_eq!(answer.status, 401);
}

#[tokio::test]
async fn bob_can_neither_see_nor_delete_alices_notes() {
    let server = HttpServer::start(&[]);
    let (_, response) = call(&server, BOB, &resources_list(1)).await;
    assert_eq!(resource_names(&response), ["note-300"]);

    let read = request(2, "resources/read", json!({ "uri": "file:///Users/alice/Documents/Notes/tps-2024.md" }));
    let (_, response) = call(&server, BOB, &read).await;
    assert_eq!(reason(&response), "resource_not_found", "indistinguishable from a missing note");

    let (_, response) = call(&server, BOB, &round_one(3)).await;
    assert_eq!(reason(&response), "workspace_unauthorized");

    // Alice's genuine confirmation, presented by bob.
    let (_, response) = call(&server, ALICE, &round_one(4)).await;
    let state = state_of(&response);
    let (_, response) = call(&server, BOB, &round_two(5, &state, "note-7")).await;
    assert!(["state_mismatch", "workspace_unauthorized"].contains(&reason(&response)), "{response}");
    let (_, response) = call(&server, ALICE, &resources_list(6)).await;
    assert_eq!(resource_names(&response), ["note-3", "note-7", "note-14", "note-99"], "nothing of alice's was deleted");
}

#[tokio::test]
async fn a_state_from_one_unconfigured_process_fails_closed_on_another() {
    let first = HttpServer::start(&[]);
    let second = HttpServer::start(&[]);
    let (_, response) = call(&first, ALICE, &round_one(1)).await;
    let state = state_of(&response);
    let (status, response) = call(&second, ALICE, &round_two(2, &state, "note-7")).await;
    assert_eq!(status, 200, "an invalid-params error travels in a 200");
    assert_eq!(reason(&response), "state_signature");
    let (_, response) = call(&second, ALICE, &resources_list(3)).await;
    assert_eq!(resource_names(&response), ["note-3", "note-7", "note-14", "note-99"]);
    // The refusal consumed nothing: the process that issued the state still completes it.
    let (_, response) = call(&first, ALICE, &round_two(4, &state, "note-7")).await;
    assert_deleted(&response, "note-7");
}

#[tokio::test]
async fn processes_sharing_a_configured_key_finish_each_others_retries() {
    let config = TempConfig::demo_with_shared_key();
    let first = HttpServer::start(&["--config", config.arg()]);
    let second = HttpServer::start(&["--config", config.arg()]);
    let (_, response) = call(&first, ALICE, &round_one(1)).await;
    let state = state_of(&response);
    assert!(state.starts_with("s1.shared."), "signed with the configured key: {state}");

    // Round 2 lands on the other process: it verifies the state and reaches the store, deleting its own copy.
    let (_, response) = call(&second, ALICE, &round_two(2, &state, "note-7")).await;
    assert_deleted(&response, "note-7");
    let (_, response) = call(&second, ALICE, &resources_list(3)).await;
    assert_eq!(resource_names(&response), ["note-3", "note-14", "note-99"]);
    // Each process still holds its own notes in memory (no shared store yet): the first still lists note-7.
    let (_, response) = call(&first, ALICE, &resources_list(4)).await;
    assert_eq!(resource_names(&response), ["note-3", "note-7", "note-14", "note-99"]);
}

/// Reads SSE events (`data:` payloads as JSON) from `response` until `done` says enough, within [`WAIT`].
async fn read_events(response: &mut reqwest::Response, pending: &mut String, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let mut events = Vec::new();
    let deadline = tokio::time::sleep(WAIT);
    tokio::pin!(deadline);
    while !done(&events) {
        while let Some(end) = pending.find("\n\n") {
            let event: String = pending.drain(..end + 2).collect();
            for line in event.lines() {
                if let Some(data) = line.strip_prefix("data: ") {
                    events.push(serde_json::from_str(data).unwrap_or_else(|e| panic!("event is not JSON ({e}): {data}")));
                }
            }
        }
        if done(&events) {
            break;
        }
        tokio::select! {
            biased;
            _ = &mut deadline => panic!("stream events so far: {events:?}"),
            chunk = response.chunk() => match chunk.expect("the stream stays readable") {
                Some(bytes) => pending.push_str(std::str::from_utf8(&bytes).unwrap()),
                None => break,
            },
        }
    }
    events
}

fn fixture_request(id: i64, method: &str, params: Value) -> Value {
    let mut message = request(id, method, params.clone());
    if let Some(extra) = params.get("_meta").and_then(Value::as_object) {
        for (key, value) in extra {
            message["params"]["_meta"][key] = value.clone();
        }
    }
    message
}

#[tokio::test]
async fn request_scoped_notifications_stream_as_sse_before_the_response() {
    let server = HttpServer::start(&["--fixture", "conformance"]);
    let message = fixture_request(
        1,
        "tools/call",
        json!({ "name": "test_tool_with_progress", "arguments": {}, "_meta": { "progressToken": "p-1" } }),
    );
    // The fixture needs no token: any Authorization header is simply not looked at.
    let headers = without(&conforming_headers(&message, "unused"), "Authorization");
    let mut response = reqwest::Client::new().post(&server.url).body(message.to_string());
    for (name, value) in &headers {
        response = response.header(name, value);
    }
    let mut response = response.send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    assert_eq!(response.headers()["x-accel-buffering"], "no");
    let events = read_events(&mut response, &mut String::new(), |events| events.iter().any(|e| e.get("id").is_some())).await;
    let progress: Vec<i64> = events
        .iter()
        .filter(|e| e["method"] == "notifications/progress")
        .map(|e| {
            assert_eq!(e["params"]["progressToken"], "p-1");
            e["params"]["progress"].as_i64().unwrap()
        })
        .collect();
    assert_eq!(progress, [0, 50, 100]);
    let last = events.last().unwrap();
    assert_eq!((last["id"].clone(), last["result"]["resultType"].clone()), (json!(1), json!("complete")), "the response is the last event");
}

#[tokio::test]
async fn a_subscription_streams_changes_until_the_client_leaves() {
    let server = HttpServer::start(&["--fixture", "conformance"]);
    let listen = fixture_request(1, "subscriptions/listen", json!({ "notifications": { "toolsListChanged": true } }));
    let headers = without(&conforming_headers(&listen, "unused"), "Authorization");
    let mut builder = reqwest::Client::new().post(&server.url).body(listen.to_string());
    for (name, value) in &headers {
        builder = builder.header(name, value);
    }
    let mut stream = builder.send().await.unwrap();
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    let mut pending = String::new();
    let events = read_events(&mut stream, &mut pending, |events| !events.is_empty()).await;
    assert_eq!(events[0]["method"], "notifications/subscriptions/acknowledged");

    // Another request, on another connection, changes the tool list while the stream stays open.
    let trigger = fixture_request(2, "tools/call", json!({ "name": "test_trigger_tool_change", "arguments": {} }));
    let answer = post(&server, &without(&conforming_headers(&trigger, "unused"), "Authorization"), &trigger).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    let events = read_events(&mut stream, &mut pending, |events| !events.is_empty()).await;
    assert_eq!(events[0]["method"], "notifications/tools/list_changed");
    assert!(events[0]["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"].is_number(), "{}", events[0]);

    // Leaving ends the subscription on the server.
    drop(stream);
    let noticed = async {
        while !server.stderr().iter().any(|line| line.contains("stream closed by the client")) {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(WAIT, noticed).await.unwrap_or_else(|_| panic!("the server never noticed the client left: {:?}", server.stderr()));
}

#[tokio::test]
async fn the_fixture_has_no_authentication_so_it_stays_on_loopback() {
    let server = HttpServer::start(&["--fixture", "conformance"]);
    let message = fixture_request(1, "tools/list", json!({}));
    let answer = post(&server, &without(&conforming_headers(&message, "unused"), "Authorization"), &message).await;
    assert_eq!(answer.status, 200);
    let answer = post(&server, &with(&conforming_headers(&message, "unused"), "Origin", "http://evil.example"), &message).await;
    assert_eq!(answer.status, 403);
    let answer =
        raw_exchange(&server.address, b"POST /mcp HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");

    let (code, stderr) = run_to_exit(&["serve", "--http", "0.0.0.0:0", "--fixture", "conformance"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("loopback"), "{stderr}");
    let (code, stderr) = run_to_exit(&["serve", "--stdio", "--fixture", "conformance", "--config", "x.toml"]);
    assert_eq!(code, Some(2), "{stderr}");
}

#[test]
fn sigterm_stops_the_server_cleanly() {
    let server = HttpServer::start(&[]);
    let status = server.terminate();
    assert!(status.success(), "{status:?}");
}

#[test]
fn http_cli_errors_say_what_to_do_next() {
    let (code, stderr) = run_to_exit(&["serve", "--http", "not-an-address"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("IP:PORT"), "{stderr}");

    let (code, stderr) = run_to_exit(&["serve", "--http", "127.0.0.1:0", "--principal", "bob"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("--principal"), "{stderr}");

    let (code, stderr) = run_to_exit(&["serve", "--http", "127.0.0.1:0", "--allow-origin", "app.example.com"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("scheme://host"), "{stderr}");

    let busy = HttpServer::start(&[]);
    let (code, stderr) = run_to_exit(&["serve", "--http", &busy.address]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("cannot listen on") && stderr.contains("port 0"), "{stderr}");
}
