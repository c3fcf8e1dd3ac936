//! The HTTP limits attacked from outside: the real `mcpsim serve --http`, raw sockets, short deadlines.
//!
//! What it shows (docs/serving.md "The HTTP endpoint", `serve --help` "HTTP limits"):
//! - slowloris: a connection that sends nothing, or half its headers, or stays idle after a response, is closed
//!   by the server; a body that stalls, or drips one byte at a time, is answered `408` and its connection
//!   closed — so a stalled request gives back what it held;
//! - one principal holding its whole share of requests in flight (bodies stalled) is refused `429` for one
//!   more, while another principal is served; the listener's own bound answers `503`;
//! - a connection beyond the process's bound is answered `503` (with `Retry-After` and a JSON-RPC body) and
//!   closed, and a freed slot serves the next one;
//! - an absolute-form target, a second `Host` or none is `400`;
//! - client text echoed in errors is bounded.
//!
//! Deadlines are set short (hidden test flags) so each attack resolves in well under a second. The tests
//! assert what happens, never how fast: every wait is bounded by [`WAIT`] only so a broken server fails the
//! test instead of hanging it. How long things take is measured by `benches/http_attack.py` (docs/benchmarks.md).

mod e2e_support;

use e2e_support::{request, HttpServer, TempConfig, DEMO_TOML, WAIT};
use serde_json::{json, Value};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Short deadlines: a stalled connection resolves within a second.
const HEADER_TIMEOUT_MS: &str = "300";
const BODY_TIMEOUT_MS: &str = "400";

/// A raw HTTP/1.1 connection, for what no well-behaved client library sends.
struct Raw {
    stream: TcpStream,
    buffered: Vec<u8>,
}

/// One parsed response.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(key, _)| key.eq_ignore_ascii_case(name)).map(|(_, value)| value.as_str())
    }
}

impl Raw {
    fn connect(address: &str) -> Raw {
        let stream = TcpStream::connect(address).expect("the server accepts connections");
        stream.set_read_timeout(Some(WAIT)).unwrap();
        Raw { stream, buffered: Vec::new() }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("the server reads");
    }

    fn fill(&mut self) -> usize {
        let mut chunk = [0u8; 8192];
        match self.stream.read(&mut chunk) {
            Ok(read) => {
                self.buffered.extend_from_slice(&chunk[..read]);
                read
            }
            Err(error) if error.kind() == ErrorKind::ConnectionReset => 0,
            Err(error) => panic!("no answer within {WAIT:?}: {error}"),
        }
    }

    /// Reads one response (it must come: the read fails the test after [`WAIT`]).
    fn answer(&mut self) -> Answer {
        let head_end = loop {
            if let Some(at) = self.buffered.windows(4).position(|window| window == b"\r\n\r\n") {
                break at;
            }
            assert!(self.fill() > 0, "the connection closed before a response: {:?}", String::from_utf8_lossy(&self.buffered));
        };
        let head = String::from_utf8(self.buffered[..head_end].to_vec()).unwrap();
        let mut lines = head.split("\r\n");
        let status: u16 = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
        let headers: Vec<(String, String)> = lines
            .map(|line| {
                let (name, value) = line.split_once(':').unwrap();
                (name.trim().to_string(), value.trim().to_string())
            })
            .collect();
        let length: usize =
            headers.iter().find(|(name, _)| name.eq_ignore_ascii_case("content-length")).map_or(0, |(_, v)| v.parse().unwrap());
        while self.buffered.len() < head_end + 4 + length {
            assert!(self.fill() > 0, "the connection closed inside a response body");
        }
        let body_bytes: Vec<u8> = self.buffered.drain(..head_end + 4 + length).skip(head_end + 4).collect();
        let body = if body_bytes.is_empty() { Value::Null } else { serde_json::from_slice(&body_bytes).unwrap() };
        Answer { status, headers, body }
    }

    /// Whether the server has already answered (or closed) this connection; looks without waiting long.
    fn was_answered(&mut self) -> bool {
        self.stream.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
        let mut chunk = [0u8; 1];
        let answered = match self.stream.peek(&mut chunk) {
            Ok(_) => true,
            Err(error) => !matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        };
        self.stream.set_read_timeout(Some(WAIT)).unwrap();
        answered
    }

    /// Waits until the server closes the connection (end of stream, or a reset). Anything it sends first is
    /// returned.
    fn closed_by_server(&mut self) -> Vec<u8> {
        while self.fill() > 0 {}
        std::mem::take(&mut self.buffered)
    }
}

/// A conforming POST of `message` as `token`, as raw bytes.
fn post(message: &Value, token: &str) -> Vec<u8> {
    let body = serde_json::to_vec(message).unwrap();
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(method) = message["method"].as_str() {
        head.push_str(&format!("Mcp-Method: {method}\r\n"));
    }
    if let Some(name) = message["params"]["name"].as_str() {
        head.push_str(&format!("Mcp-Name: {name}\r\n"));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(&body);
    bytes
}

/// The headers of a POST whose body (`declared` bytes) will never arrive in full.
fn stalled_head(token: &str, declared: usize) -> Vec<u8> {
    format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {declared}\r\n\r\n{{"
    )
    .into_bytes()
}

fn discover(id: i64) -> Value {
    request(id, "server/discover", json!({}))
}

fn served(answer: &Answer) {
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.body["result"]["resultType"], "complete", "{answer:?}");
}

/// A refusal: the status, and a JSON-RPC error body with id null.
fn refused(answer: &Answer, status: u16) {
    assert_eq!(answer.status, status, "{answer:?}");
    assert_eq!(answer.body["id"], Value::Null, "{answer:?}");
    assert_eq!(answer.body["error"]["code"], -32600, "{answer:?}");
}

fn slow_server(extra: &[&str]) -> HttpServer {
    let mut args = vec!["--http-header-timeout-ms", HEADER_TIMEOUT_MS, "--http-body-timeout-ms", BODY_TIMEOUT_MS];
    args.extend_from_slice(extra);
    HttpServer::start(&args)
}

#[test]
fn slowloris_connections_are_closed_and_give_back_what_they_held() {
    let server = slow_server(&[]);

    // Connected, nothing sent: closed at the header deadline, unanswered.
    let mut silent = Raw::connect(&server.address);
    assert!(silent.closed_by_server().is_empty(), "a connection that never sent a request gets no answer");

    // Half the headers, then nothing: closed too.
    let mut half = Raw::connect(&server.address);
    half.send(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthoriz");
    assert!(half.closed_by_server().is_empty());

    // Headers trickled one byte at a time never complete: the deadline counts from the connection's start.
    let mut trickle = Raw::connect(&server.address);
    let mut closed = false;
    for byte in b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: ".iter().chain([b'a'; 4096].iter()) {
        if trickle.stream.write_all(&[*byte]).is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(closed || trickle.closed_by_server().is_empty(), "trickled headers are cut off");

    // A served request, then an idle keep-alive connection: closed after the same deadline.
    let mut idle = Raw::connect(&server.address);
    idle.send(&post(&discover(1), "demo-alice"));
    served(&idle.answer());
    assert!(idle.closed_by_server().is_empty(), "an idle keep-alive connection is closed");

    // Headers complete, body stalled after one byte: 408, and the connection is closed.
    let mut stalled = Raw::connect(&server.address);
    stalled.send(&stalled_head("demo-bob", 1000));
    let answer = stalled.answer();
    refused(&answer, 408);
    assert_eq!(answer.header("connection"), Some("close"), "{answer:?}");
    assert!(answer.body["error"]["message"].as_str().unwrap().contains(BODY_TIMEOUT_MS), "{answer:?}");
    assert!(stalled.closed_by_server().is_empty());

    // A body dripped one byte at a time: the deadline is for the whole body, so dripping does not stretch it.
    let mut drip = Raw::connect(&server.address);
    drip.send(&stalled_head("demo-bob", 5000));
    let mut writer = drip.stream.try_clone().unwrap();
    let dripping = std::thread::spawn(move || {
        // Stops when the server has closed the connection (a write then fails), or after the whole body.
        for _ in 0..4999 {
            if writer.write_all(b" ").is_err() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    });
    refused(&drip.answer(), 408);
    assert!(drip.closed_by_server().is_empty());
    assert!(!dripping.join().unwrap(), "the server stopped reading the dripped body before it was complete");

    // Everything stalled has been given back: bob is served again, on the slots his stalls held.
    let mut after = Raw::connect(&server.address);
    after.send(&post(&discover(2), "demo-bob"));
    served(&after.answer());
    // A refusal's log line may still be on its way when its answer is: the lines are read once the process exited.
    let (_, log) = server.terminate_with_stderr();
    let log = log.join("\n");
    assert!(log.contains("outcome=\"http_body_timeout\""), "{log}");
}

#[test]
fn one_principal_holding_its_share_leaves_the_others_served() {
    // Two requests in flight per principal, four per listener; deadlines long enough that stalls stay stalled.
    let config = TempConfig::new(&format!(
        "{DEMO_TOML}\n[principals.carol]\ntoken = \"demo-carol\"\nworkspaces = [\"file:///Users/carol/Notes\"]\n"
    ));
    let server = HttpServer::start(&[
        "--config",
        config.arg(),
        "--http-body-timeout-ms",
        "60000",
        "--http-principal-requests-max",
        "2",
        "--http-requests-max",
        "4",
    ]);
    let mut bob_stalls: Vec<Raw> = (0..2)
        .map(|_| {
            let mut stall = Raw::connect(&server.address);
            stall.send(&stalled_head("demo-bob", 1000));
            stall
        })
        .collect();
    // Wait (bounded) until both stalls hold their slot: bob's third request is then refused with 429. A probe
    // may reach the server before a stall and take its slot, so that stall is answered 429 itself: it is
    // replaced by a new one, until both hold.
    let mut third = None;
    for _ in 0..(WAIT.as_millis() / 10) {
        for stall in bob_stalls.iter_mut() {
            if stall.was_answered() {
                *stall = Raw::connect(&server.address);
                stall.send(&stalled_head("demo-bob", 1000));
            }
        }
        let mut attempt = Raw::connect(&server.address);
        attempt.send(&post(&discover(3), "demo-bob"));
        let answer = attempt.answer();
        if answer.status == 429 {
            third = Some(answer);
            break;
        }
        served(&answer);
        std::thread::sleep(Duration::from_millis(10));
    }
    let third = third.unwrap_or_else(|| {
        panic!("bob's third request in flight is refused; log: {:?}", server.stderr().iter().rev().take(5).collect::<Vec<_>>())
    });
    refused(&third, 429);
    assert_eq!(third.header("retry-after"), Some("1"), "{third:?}");
    assert!(third.body["error"]["message"].as_str().unwrap().contains("(2)"), "{third:?}");

    // alice is served while bob holds his share.
    for id in 10..13 {
        let mut alice = Raw::connect(&server.address);
        alice.send(&post(&discover(id), "demo-alice"));
        served(&alice.answer());
    }

    // carol fills the listener's other two slots: now the listener is full, and alice gets 503.
    let mut carol_stalls: Vec<Raw> = (0..2)
        .map(|_| {
            let mut stall = Raw::connect(&server.address);
            stall.send(&stalled_head("demo-carol", 1000));
            stall
        })
        .collect();
    let mut full = None;
    for _ in 0..(WAIT.as_millis() / 10) {
        // As with bob's: a stall that lost the race for a slot to alice's probe is replaced.
        for stall in carol_stalls.iter_mut() {
            if stall.was_answered() {
                *stall = Raw::connect(&server.address);
                stall.send(&stalled_head("demo-carol", 1000));
            }
        }
        let mut alice = Raw::connect(&server.address);
        alice.send(&post(&discover(20), "demo-alice"));
        let answer = alice.answer();
        if answer.status == 503 {
            full = Some(answer);
            break;
        }
        served(&answer);
        std::thread::sleep(Duration::from_millis(10));
    }
    let full = full.expect("with every slot of the listener held, alice is refused");
    refused(&full, 503);
    assert_eq!(full.header("retry-after"), Some("1"));

    // Bob gives up one stall (closes it): its slot is free again, and alice is served.
    drop(bob_stalls.pop());
    let mut served_again = false;
    for _ in 0..(WAIT.as_millis() / 10) {
        let mut alice = Raw::connect(&server.address);
        alice.send(&post(&discover(30), "demo-alice"));
        let answer = alice.answer();
        if answer.status == 200 {
            served_again = true;
            break;
        }
        refused(&answer, 503);
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(served_again, "a slot given back serves the next request");
    drop((bob_stalls, carol_stalls));
}

#[test]
fn connections_beyond_the_bound_are_refused_with_a_clear_503() {
    let server = HttpServer::start(&["--http-connections-max", "3", "--http-header-timeout-ms", "60000"]);
    let mut held: Vec<Raw> = (0..3).map(|_| Raw::connect(&server.address)).collect();
    // The three are accepted (in order) before the fourth: each has been served one request on it.
    for (id, connection) in held.iter_mut().enumerate() {
        connection.send(&post(&discover(id as i64), "demo-alice"));
        served(&connection.answer());
    }
    let mut fourth = Raw::connect(&server.address);
    fourth.send(&post(&discover(9), "demo-alice"));
    let answer = fourth.answer();
    refused(&answer, 503);
    assert_eq!((answer.header("retry-after"), answer.header("connection")), (Some("1"), Some("close")), "{answer:?}");
    assert!(answer.body["error"]["message"].as_str().unwrap().contains("connections"), "{answer:?}");
    assert!(fourth.closed_by_server().is_empty(), "the refused connection is closed");
    // The open ones still work.
    held[0].send(&post(&discover(10), "demo-alice"));
    served(&held[0].answer());
    // One closes: the next connection is served (once the server has seen the close).
    drop(held.pop());
    let mut served_again = false;
    for id in 0..(WAIT.as_millis() / 10) {
        let mut next = Raw::connect(&server.address);
        next.send(&post(&discover(100 + id as i64), "demo-alice"));
        let answer = next.answer();
        if answer.status == 200 {
            served_again = true;
            break;
        }
        refused(&answer, 503);
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(served_again, "a freed connection slot serves the next connection");
    // A refusal's log line may still be on its way when its answer is: the lines are read once the process exited.
    let (_, log) = server.terminate_with_stderr();
    let log = log.join("\n");
    assert!(log.contains("outcome=\"http_connections_full\""), "refused connections are logged: {log}");
}

#[test]
fn only_origin_form_targets_and_exactly_one_host() {
    let server = HttpServer::start(&[]);
    let body = serde_json::to_vec(&discover(1)).unwrap();
    let rest = format!(
        "Authorization: Bearer demo-alice\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: server/discover\r\nContent-Length: {}\r\n\r\n{}",
        body.len(),
        String::from_utf8(body).unwrap()
    );
    let cases = [
        ("absolute-form target", format!("POST http://127.0.0.1/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n{rest}"), "absolute URI"),
        (
            "absolute-form naming another host",
            format!("POST http://evil.example/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n{rest}"),
            "absolute URI",
        ),
        ("two Host headers", format!("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n{rest}"), "exactly one Host"),
        ("two equal Host headers", format!("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: 127.0.0.1\r\n{rest}"), "exactly one Host"),
        ("no Host header", format!("POST /mcp HTTP/1.1\r\n{rest}"), "Host header"),
        ("an empty Host header", format!("POST /mcp HTTP/1.1\r\nHost: \r\n{rest}"), "Host header"),
    ];
    for (what, raw, says) in cases {
        let mut connection = Raw::connect(&server.address);
        connection.send(raw.as_bytes());
        let answer = connection.answer();
        refused(&answer, 400);
        assert!(answer.body["error"]["message"].as_str().unwrap().contains(says), "{what}: {answer:?}");
    }
    // The same request in origin form with one Host is served.
    let mut connection = Raw::connect(&server.address);
    connection.send(format!("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n{rest}").as_bytes());
    served(&connection.answer());
}

#[test]
fn echoed_client_strings_are_bounded() {
    const SENT_CHARS: usize = 100_000;
    /// What any echo may add to the bounded text: the server's own words around it.
    const ANSWER_CHARS_MAX: usize = 1_000;
    let server = HttpServer::start(&[]);
    let long = "x".repeat(SENT_CHARS);
    let messages = [
        ("method", request(1, &format!("tools/{long}"), json!({}))),
        ("tool", request(2, "tools/call", json!({ "name": long, "arguments": {} }))),
        ("argument name", request(3, "tools/call", json!({ "name": "notes_delete", "arguments": { long.clone(): 1 } }))),
        ("protocol version", {
            let mut message = discover(4);
            message["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!(long);
            message
        }),
        (
            "resource uri",
            request(5, "resources/read", json!({ "uri": format!("file:///Users/alice/Documents/Notes/{}", "y".repeat(4000)) })),
        ),
    ];
    for (what, message) in messages {
        let mut bytes = post(&message, "demo-alice");
        if what == "protocol version" {
            // The header must agree with the body for the version check to be reached.
            let text =
                String::from_utf8(bytes).unwrap().replace("MCP-Protocol-Version: 2026-07-28", &format!("MCP-Protocol-Version: {long}"));
            bytes = text.into_bytes();
        }
        let mut connection = Raw::connect(&server.address);
        connection.send(&bytes);
        let answer = connection.answer();
        let error = &answer.body["error"];
        assert!(error.is_object(), "{what}: {answer:?}");
        let shown = error.to_string();
        assert!(
            shown.chars().count() < ANSWER_CHARS_MAX,
            "{what}: an error of {} characters echoes the client's text",
            shown.chars().count()
        );
        assert!(!shown.contains(&"x".repeat(200)) && !shown.contains(&"y".repeat(200)), "{what}: {shown}");
    }
}

#[test]
fn one_principal_filling_its_replay_share_leaves_the_others_confirming() {
    // Four confirmations in all, two per principal (a hidden test setting and --replay-share 50).
    let server = HttpServer::start(&["--replay-capacity", "4", "--replay-share", "50"]);
    let title = |principal: &str| if principal == "demo-bob" { "TPS report bob" } else { "shopping list" };
    let workspace = |principal: &str| {
        if principal == "demo-bob" {
            "file:///Users/bob/Notes"
        } else {
            e2e_support::ALICE_WORKSPACE
        }
    };
    let mut serial = 0;
    let mut decline = |token: &str| -> Answer {
        serial += 1;
        let round_one = request(
            serial,
            "tools/call",
            json!({ "name": "notes_delete",
            "arguments": { "workspaceUri": workspace(token), "title": title(token) } }),
        );
        let mut connection = Raw::connect(&server.address);
        connection.send(&post(&round_one, token));
        let asked = connection.answer();
        let state = asked.body["result"]["requestState"].as_str().unwrap_or_else(|| panic!("round 1 asks: {asked:?}")).to_string();
        let mut round_two = round_one.clone();
        round_two["id"] = json!(serial + 1000);
        round_two["params"]["requestState"] = json!(state);
        round_two["params"]["inputResponses"] = json!({ "delete_choice": { "action": "decline" } });
        connection.send(&post(&round_two, token));
        connection.answer()
    };
    let outcome = |answer: &Answer| answer.body["result"]["structuredContent"]["outcome"].as_str().map(str::to_string);
    let reason = |answer: &Answer| answer.body["error"]["data"]["reason"].as_str().map(str::to_string);
    // bob declines as fast as he can: two go through, then his share is full.
    for _ in 0..2 {
        assert_eq!(outcome(&decline("demo-bob")).as_deref(), Some("declined"));
    }
    for _ in 0..3 {
        assert_eq!(reason(&decline("demo-bob")).as_deref(), Some("replay_store_full"), "bob's share is full");
    }
    // alice is not bob: her confirmations still go through...
    for _ in 0..2 {
        assert_eq!(outcome(&decline("demo-alice")).as_deref(), Some("declined"), "alice keeps working");
    }
    // ...until the whole store's bound, which is kept.
    assert_eq!(reason(&decline("demo-alice")).as_deref(), Some("replay_store_full"));
}

/// `[replay] capacity` sizes the replay store: the start-up line says so (with the rate it sustains), and the
/// bound is kept from the attacker's side: confirmations beyond it are refused, never evicting a held one.
#[test]
fn the_replay_capacity_is_configured_and_kept() {
    let config = TempConfig::new(&format!("{DEMO_TOML}\n[replay]\ncapacity = 2\n"));
    let server = HttpServer::start(&["--config", config.arg(), "--replay-share", "100"]);
    let summary = server.stderr().join("\n");
    assert!(summary.contains("room for 2 confirmations (2 per principal; 0/s sustained at this TTL + 60 s grace)"), "{summary}");
    let mut serial = 0;
    let mut decline = || -> Value {
        serial += 1;
        let round_one = request(
            serial,
            "tools/call",
            json!({ "name": "notes_delete", "arguments": { "workspaceUri": e2e_support::ALICE_WORKSPACE, "title": "shopping list" } }),
        );
        let mut connection = Raw::connect(&server.address);
        connection.send(&post(&round_one, "demo-alice"));
        let state = connection.answer().body["result"]["requestState"].as_str().expect("round 1 asks").to_string();
        let mut round_two = round_one.clone();
        round_two["id"] = json!(serial + 1000);
        round_two["params"]["requestState"] = json!(state);
        round_two["params"]["inputResponses"] = json!({ "delete_choice": { "action": "decline" } });
        connection.send(&post(&round_two, "demo-alice"));
        connection.answer().body
    };
    for _ in 0..2 {
        assert_eq!(decline()["result"]["structuredContent"]["outcome"], "declined");
    }
    assert_eq!(decline()["error"]["data"]["reason"], "replay_store_full", "the configured bound is kept");

    let defaults = HttpServer::start(&[]);
    let summary = defaults.stderr().join("\n");
    assert!(summary.contains("room for 335544 confirmations (83886 per principal; 932/s sustained"), "memory's default: {summary}");
}
