//! Issue 35's attacks on `mcpsim serve --http`, repeated from outside against the real process (raw sockets,
//! distinct 127.0.0.x source addresses, reqwest), each asserting the guarantee that now holds
//! (GUARANTEES.md §5):
//!
//! - every route reads its body within the body deadline: a stalled POST to the out-of-band page, or to a
//!   route that does not exist, is answered `408` and closed like one to `/mcp`, giving its slot back; page
//!   requests hold places in flight of their own, bounded per address and per listener;
//! - a legacy call waiting for its client's answer holds no place in flight (its answer never needs a place
//!   the call holds; other principals stay served), waiting calls are bounded per principal, and a client
//!   that goes away ends the wait at once; a call finding every waiting place of the listener taken ends at
//!   once with a `-32600` saying so;
//! - legacy sessions are bounded by size, each and per principal, with a `-32602` / `503` that says so;
//! - one client address holds at most its share of the process's connections (`429` beyond), so a flood
//!   from one address leaves others served;
//! - page requests are logged (no token, cookie or reference in the log) and sign-in guesses are throttled
//!   per address and per flow reference (`429` with `Retry-After`); with the throttle's tables full, a new
//!   address is refused and one over its allowance still is.
//!
//! Deadlines are set short with the hidden test flags. Upper bounds on time are generous (3x the deadline);
//! the times measured are printed (`--nocapture`) for the record.

mod e2e_support;

use e2e_support::*;
use serde_json::{json, Value};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

const ALICE: &str = "demo-alice";
const BOB: &str = "demo-bob";
/// A well-formed flow reference (16 bytes in base64url) naming no flow: sign-in does not look flows up.
const REFERENCE: &str = "AAAAAAAAAAAAAAAAAAAAAA";

/// Wall time for the figures a test prints and the generous upper bounds it asserts (never in the server).
#[allow(clippy::disallowed_methods)]
fn now() -> std::time::Instant {
    std::time::Instant::now()
}

fn loopback(last: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, last])
}

/// A blocking connection to `address` from the source address `from` (bound before connecting).
async fn connect_from(from: IpAddr, address: &str) -> std::io::Result<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    let stream = socket.connect(address.parse().unwrap()).await?.into_std()?;
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(WAIT))?;
    Ok(stream)
}

/// Everything the server sends until it closes the connection (fails the test after [`WAIT`]).
fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => return bytes,
            Ok(read) => bytes.extend_from_slice(&chunk[..read]),
            Err(error) if error.kind() == ErrorKind::ConnectionReset => return bytes,
            Err(error) => panic!("the server neither answered nor closed within {WAIT:?}: {error}"),
        }
    }
}

fn status_of(response: &[u8]) -> u16 {
    let text = String::from_utf8_lossy(response);
    text.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or_else(|| panic!("not an HTTP response: {text:?}"))
}

/// Whether the server has answered or closed `stream` yet (looks without waiting).
fn answered_or_closed(stream: &TcpStream) -> bool {
    stream.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    let result = match stream.peek(&mut byte) {
        Ok(_) => true,
        Err(error) => error.kind() != ErrorKind::WouldBlock,
    };
    stream.set_nonblocking(false).unwrap();
    result
}

fn client_from(from: IpAddr) -> reqwest::Client {
    reqwest::Client::builder().local_address(from).redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

async fn discover_status(client: &reqwest::Client, url: &str, token: &str) -> u16 {
    match post_message(client, url, token, &request(1, "server/discover", json!({}))).await {
        Ok((status, _)) => status,
        Err(error) => panic!("the server answers: {error}"),
    }
}

// --- 1: every route gets the body deadline ---------------------------------------------------------------

const BODY_TIMEOUT_MS: u64 = 400;

/// The head of a POST to `path` declaring a 1000-byte body, and its first byte: the rest never comes.
fn stalled_post(path: &str, content_type: &str, extra: &str) -> Vec<u8> {
    format!("POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n{extra}Content-Length: 1000\r\n\r\nt").into_bytes()
}

#[tokio::test]
async fn a_stalled_body_is_answered_408_and_closed_on_every_route() {
    let body_timeout = BODY_TIMEOUT_MS.to_string();
    let server = HttpServer::start(&[
        "--out-of-band",
        "--http-body-timeout-ms",
        &body_timeout,
        "--http-connections-max",
        "8",
        "--http-client-connections-max",
        "8",
    ]);
    let form = "application/x-www-form-urlencoded";
    let routes = [
        stalled_post(&format!("/connect/{REFERENCE}/sign-in"), form, ""),
        stalled_post(&format!("/connect/{REFERENCE}"), form, "Cookie: mcpsim_page_session=x\r\n"),
        stalled_post("/no-such-route", form, ""),
        stalled_post("/mcp", "application/json", "Authorization: Bearer demo-bob\r\nAccept: application/json, text/event-stream\r\n"),
    ];
    for head in &routes {
        let mut stream = connect_from(loopback(1), &server.address).await.unwrap();
        let started = now();
        stream.write_all(head).unwrap();
        let response = read_until_closed(&mut stream);
        let lived = started.elapsed();
        let text = String::from_utf8_lossy(&response);
        let route = String::from_utf8_lossy(&head[..head.iter().position(|b| *b == b'\r').unwrap()]).to_string();
        eprintln!("{route}: stalled body answered {} and closed after {lived:?}", status_of(&response));
        assert_eq!(status_of(&response), 408, "{route}: {text}");
        assert!(text.to_ascii_lowercase().contains("connection: close"), "{route}: {text}");
        assert!(lived < Duration::from_millis(3 * BODY_TIMEOUT_MS), "{route}: closed after {lived:?}");
    }

    // The original attack: every slot held by a stalled sign-in. Each is answered and gives its slot back, so
    // alice is served once the deadline has passed (before, they held the slots for as long as they liked).
    // A connection's place is given back when its task ends, just after its client sees the close: the four
    // above must have ended before the eight below can hold all eight places (without this pause, on a loaded
    // machine one of the eight was refused 503 while a closed one was still counted).
    std::thread::sleep(Duration::from_millis(500));
    let mut stalled = Vec::new();
    for _ in 0..8 {
        let mut stream = connect_from(loopback(2), &server.address).await.unwrap();
        stream.write_all(&routes[0]).unwrap();
        stalled.push(stream);
    }
    let started = now();
    for stream in &mut stalled {
        assert_eq!(status_of(&read_until_closed(stream)), 408);
    }
    eprintln!("8 stalled sign-ins holding every slot all answered 408 within {:?}", started.elapsed());
    assert_eq!(discover_status(&client_from(loopback(1)), &server.url, ALICE).await, 200, "alice is served on the slots given back");

    let (_, log) = server.terminate_with_stderr();
    let log = log.join("\n");
    assert!(log.contains("route=\"POST /connect/{reference}/sign-in\"") && log.contains("outcome=\"http_body_timeout\""), "{log}");
}

#[tokio::test]
async fn page_requests_have_bounded_places_of_their_own_per_address_and_per_listener() {
    // Four places in flight off /mcp per listener, two per client address; bodies within 6 s (time enough for
    // the checks below while the four stalled requests hold their places, on a loaded machine too).
    let server = HttpServer::start(&[
        "--out-of-band",
        "--http-requests-max",
        "4",
        "--http-principal-requests-max",
        "2",
        "--http-body-timeout-ms",
        "6000",
    ]);
    let sign_in = stalled_post(&format!("/connect/{REFERENCE}/sign-in"), "application/x-www-form-urlencoded", "");
    let mut held = Vec::new();
    for last in [2, 2, 3, 3] {
        let mut stream = connect_from(loopback(last), &server.address).await.unwrap();
        stream.write_all(&sign_in).unwrap();
        held.push((last, stream));
    }
    // Wait until the server has taken all four (each stalled in its body read), by asking from a fifth address.
    // A probe takes a place while it is answered: a stalled request arriving meanwhile is refused (503) and
    // is sent again, until all four are held.
    let started = now();
    let page = format!("{}/connect/{REFERENCE}", server.url.trim_end_matches("/mcp"));
    let busy = loop {
        for (last, stream) in &mut held {
            if answered_already(stream) {
                *stream = connect_from(loopback(*last), &server.address).await.unwrap();
                stream.write_all(&sign_in).unwrap();
            }
        }
        let response = client_from(loopback(4)).get(&page).send().await.unwrap();
        let status = response.status().as_u16();
        if status == 503 {
            break response;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "four stalled sign-ins never filled the page's places (last answer {status})");
    };
    assert_eq!(busy.headers()["retry-after"], "1");
    // A third from an address holding its two: 429, its share.
    let mut third = connect_from(loopback(2), &server.address).await.unwrap();
    third.write_all(&sign_in).unwrap();
    assert_eq!(status_of(&read_until_closed_or_answered(&mut third)), 429);
    // /mcp has places of its own: alice is served while the page's are all held.
    assert_eq!(discover_status(&client_from(loopback(5)), &server.url, ALICE).await, 200);
    // The stalled ones end at the body deadline and give their places back.
    for (_, stream) in &mut held {
        assert_eq!(status_of(&read_until_closed(stream)), 408);
    }
    let shown = client_from(loopback(4)).get(&page).send().await.unwrap();
    assert_eq!(shown.status().as_u16(), 200, "the sign-in page again");
}

/// Whether the server has already answered on `stream` (a request refused at once), without waiting.
fn answered_already(stream: &mut TcpStream) -> bool {
    stream.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    let answered = matches!(stream.peek(&mut byte), Ok(read) if read > 0);
    stream.set_nonblocking(false).unwrap();
    answered
}

/// The first response on `stream` (its head, at least), without waiting for the connection to close.
fn read_until_closed_or_answered(stream: &mut TcpStream) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 8192];
    while !bytes.windows(4).any(|window| window == b"\r\n\r\n") {
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(read) => bytes.extend_from_slice(&chunk[..read]),
            Err(error) => panic!("no answer within {WAIT:?}: {error}"),
        }
    }
    bytes
}

// --- 2: legacy calls waiting on their client ---------------------------------------------------------------

async fn open_session(client: &reqwest::Client, url: &str, token: &str) -> String {
    let response = legacy_post(client, url, token, None, &legacy_initialize(json!({ "elicitation": {} }))).await;
    assert_eq!(response.status().as_u16(), 200);
    response.headers()["mcp-session-id"].to_str().unwrap().to_string()
}

/// The next SSE event of an open legacy call.
async fn next_event(response: &mut reqwest::Response, buffer: &mut String) -> Value {
    loop {
        if let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            let data: String = event.lines().filter_map(|line| line.strip_prefix("data: ")).collect();
            if data.is_empty() {
                continue; // a keep-alive comment
            }
            return serde_json::from_str(&data).unwrap_or_else(|e| panic!("not JSON ({e}): {event:?}"));
        }
        let chunk = tokio::time::timeout(WAIT, response.chunk()).await.expect("an event in time").unwrap();
        buffer.push_str(&String::from_utf8_lossy(&chunk.expect("the stream is still open")));
    }
}

/// Opens a legacy delete call and reads its first event, the question to the client.
async fn asked(client: &reqwest::Client, url: &str, session: &str, id: i64) -> (reqwest::Response, String, Value) {
    let mut response = legacy_post(client, url, ALICE, Some(session), &legacy_delete(id, ALICE_WORKSPACE)).await;
    assert_eq!(response.headers()["content-type"], "text/event-stream", "call {id} asks the client something");
    let mut buffer = String::new();
    let question = next_event(&mut response, &mut buffer).await;
    assert_eq!(question["method"], "elicitation/create", "{question}");
    (response, buffer, question)
}

#[tokio::test]
async fn a_legacy_call_waiting_on_its_client_holds_no_place_and_ends_when_the_client_goes() {
    // Two places in flight for the listener and for each principal: before, two waiting calls of alice held
    // them all for 300 s, so bob got 503 and alice's own answers 429.
    let server = HttpServer::start(&["--eras", "both", "--http-requests-max", "2", "--http-principal-requests-max", "2"]);
    let alice = reqwest::Client::new();
    let session = open_session(&alice, &server.url, ALICE).await;
    let (mut first, mut first_buffer, first_question) = asked(&alice, &server.url, &session, 1).await;
    let (mut second, mut second_buffer, second_question) = asked(&alice, &server.url, &session, 2).await;

    // Both calls wait on alice: bob is served, and so are alice's own answers (each a POST needing a place).
    assert_eq!(discover_status(&reqwest::Client::new(), &server.url, BOB).await, 200, "the waiting calls hold no place in flight");
    for (question, note) in [(&first_question, "note-3"), (&second_question, "note-7")] {
        let answer = json!({ "jsonrpc": "2.0", "id": question["id"], "result": { "action": "accept", "content": { "note_id": note, "confirm": true } } });
        assert_eq!(legacy_post(&alice, &server.url, ALICE, Some(&session), &answer).await.status().as_u16(), 202, "the answer is taken");
    }
    assert_eq!(next_event(&mut first, &mut first_buffer).await["result"]["structuredContent"]["noteId"], "note-3");
    assert_eq!(next_event(&mut second, &mut second_buffer).await["result"]["structuredContent"]["noteId"], "note-7");

    // Waiting calls are bounded per principal (16): the 17th of alice's is ended with a message, at once.
    let mut waiting = Vec::new();
    for id in 0..16 {
        waiting.push(asked(&reqwest::Client::new(), &server.url, &session, 100 + id).await);
    }
    let refused = legacy_post(&reqwest::Client::new(), &server.url, ALICE, Some(&session), &legacy_delete(200, ALICE_WORKSPACE)).await;
    let refused: Value = refused.json().await.unwrap();
    assert!(refused["error"]["message"].as_str().unwrap().contains("as many of your legacy calls wait"), "{refused}");
    assert_eq!(discover_status(&reqwest::Client::new(), &server.url, BOB).await, 200, "bob still served beside 16 waiting calls");

    // Alice's client goes away (its connections close): the calls stop waiting at once, so their places are
    // free again long before the 300 s an unanswered question may wait.
    drop(waiting);
    let started = now();
    let freed = loop {
        let response = legacy_post(&reqwest::Client::new(), &server.url, ALICE, Some(&session), &legacy_delete(300, ALICE_WORKSPACE)).await;
        if response.headers()["content-type"] == "text/event-stream" {
            break started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(3), "the abandoned calls still wait after 3 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    eprintln!("16 abandoned legacy calls gave their places back {freed:?} after their client went away");
}

#[tokio::test]
async fn a_legacy_call_finding_every_waiting_place_taken_is_refused_and_served_once_one_is_free() {
    // Two waiting places for the listener (16 per principal): alice's third question finds them all taken.
    let server = HttpServer::start(&["--eras", "both", "--http-legacy-waiting-max", "2"]);
    let alice = reqwest::Client::new();
    let session = open_session(&alice, &server.url, ALICE).await;
    let waiting = vec![
        asked(&reqwest::Client::new(), &server.url, &session, 1).await,
        asked(&reqwest::Client::new(), &server.url, &session, 2).await,
    ];

    let started = now();
    let refused = legacy_post(&reqwest::Client::new(), &server.url, ALICE, Some(&session), &legacy_delete(3, ALICE_WORKSPACE)).await;
    let status = refused.status().as_u16();
    let content_type = refused.headers()["content-type"].to_str().unwrap().to_string();
    let refused: Value = refused.json().await.unwrap();
    eprintln!(
        "a legacy call finding both waiting places taken: HTTP {status}, error {} after {:?}",
        refused["error"]["code"],
        started.elapsed()
    );
    assert_eq!((status, content_type.as_str()), (200, "application/json"), "{refused}");
    assert_eq!(refused["id"], 3, "{refused}");
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("as many legacy calls waiting for their clients as it allows"), "{refused}");
    assert_eq!(discover_status(&reqwest::Client::new(), &server.url, BOB).await, 200, "waiting calls hold no place in flight");

    // The two waiting calls' client goes away: their places come back, and the same call is asked again.
    drop(waiting);
    let started = now();
    loop {
        let response = legacy_post(&reqwest::Client::new(), &server.url, ALICE, Some(&session), &legacy_delete(4, ALICE_WORKSPACE)).await;
        if response.headers()["content-type"] == "text/event-stream" {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(3), "the waiting places were not given back within 3 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// --- 9: legacy sessions bounded by size ----------------------------------------------------------------------

/// Capabilities whose JSON takes about `bytes` bytes.
fn capabilities_of(bytes: usize) -> Value {
    json!({ "elicitation": {}, "experimental": { "padding": "x".repeat(bytes) } })
}

#[tokio::test]
async fn legacy_sessions_are_bounded_by_size_each_and_per_principal() {
    let server = HttpServer::start(&["--eras", "both"]);
    let client = reqwest::Client::new();

    // bob's ~700 KB of capabilities: refused, no session, -32602 saying why.
    let response = legacy_post(&client, &server.url, BOB, None, &legacy_initialize(capabilities_of(700_000))).await;
    assert_eq!(response.status().as_u16(), 200);
    assert!(!response.headers().contains_key("mcp-session-id"), "no session was opened");
    let body: Value = response.json().await.unwrap();
    assert_eq!((body["error"]["code"].clone(), reason(&body)), (json!(-32602), "payload_too_large"), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("16384 bytes"), "{body}");

    // Sessions just under the per-session bound: a principal's sessions hold at most 128 KiB together.
    let mut opened = Vec::new();
    let refusal = loop {
        let response = legacy_post(&client, &server.url, BOB, None, &legacy_initialize(capabilities_of(15_000))).await;
        match response.headers().get("mcp-session-id") {
            Some(id) => opened.push(id.to_str().unwrap().to_string()),
            None => break (response.status().as_u16(), response.json::<Value>().await.unwrap()),
        }
        assert!(opened.len() <= 32, "sessions of 15 KB keep being opened");
    };
    eprintln!("bob opened {} sessions of ~15 KB before {refusal:?}", opened.len());
    assert_eq!(opened.len(), 8, "128 KiB / ~15.1 KB");
    assert_eq!(refusal.0, 503, "{refusal:?}");
    assert!(refusal.1["error"]["message"].as_str().unwrap().contains("bytes"), "{refusal:?}");
    // Alice is not bob: her share is her own.
    assert_eq!(legacy_post(&client, &server.url, ALICE, None, &legacy_initialize(capabilities_of(15_000))).await.status().as_u16(), 200);
    // Ending one of bob's sessions gives its bytes back.
    let ended = client.delete(&server.url).header("Authorization", format!("Bearer {BOB}")).header("Mcp-Session-Id", &opened[0]);
    assert_eq!(ended.send().await.unwrap().status().as_u16(), 200);
    let again = legacy_post(&client, &server.url, BOB, None, &legacy_initialize(capabilities_of(15_000))).await;
    assert!(again.headers().contains_key("mcp-session-id"), "room again after a DELETE");
}

// --- 10: connections per client address ----------------------------------------------------------------------

#[tokio::test]
async fn one_address_flooding_connections_leaves_other_clients_served() {
    // 16 connections per process, 4 per address; headers must arrive within 1 s.
    let server =
        HttpServer::start(&["--http-connections-max", "16", "--http-client-connections-max", "4", "--http-header-timeout-ms", "1000"]);
    // 127.0.0.2 sends half a request on as many connections as it can, and again on each one closed.
    let address = server.address.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flooding = stop.clone();
    let flood = tokio::spawn(async move {
        let (mut opened, mut refused, mut held) = (0usize, 0usize, Vec::<TcpStream>::new());
        while !flooding.load(std::sync::atomic::Ordering::SeqCst) {
            held.retain(|stream| !answered_or_closed(stream));
            while held.len() < 40 {
                let Ok(mut stream) = connect_from(loopback(2), &address).await else { break };
                opened += 1;
                let _ = stream.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthoriz");
                held.push(stream);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            let before = held.len();
            held.retain(|stream| !answered_or_closed(stream));
            refused += before - held.len();
        }
        (opened, refused, held.len())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Meanwhile alice (127.0.0.1) makes 30 requests, each on a new connection.
    let mut served = 0;
    for _ in 0..30 {
        let client = reqwest::Client::builder().local_address(loopback(1)).pool_max_idle_per_host(0).build().unwrap();
        if discover_status(&client, &server.url, ALICE).await == 200 {
            served += 1;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (opened, refused, _) = flood.await.unwrap();
    eprintln!("alice served {served} of 30 while 127.0.0.2 opened {opened} connections ({refused} refused or closed)");
    assert_eq!(served, 30, "one address's flood takes at most its share");
    assert!(opened > 16, "the flood tried more connections than the process allows: {opened}");

    // The refusal itself, from a fresh address over its share: a closing 429 with Retry-After.
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(connect_from(loopback(3), &server.address).await.unwrap());
    }
    let mut over = connect_from(loopback(3), &server.address).await.unwrap();
    let response = read_until_closed(&mut over);
    let text = String::from_utf8_lossy(&response).to_ascii_lowercase();
    assert_eq!(status_of(&response), 429, "{text}");
    assert!(text.contains("retry-after: 1") && text.contains("connection: close") && text.contains("one client may (4)"), "{text}");
    let (_, log) = server.terminate_with_stderr();
    assert!(log.join("\n").contains("outcome=\"http_client_connections_full\""), "refusals are logged");
}

// --- 16: page requests logged, sign-in guessing throttled ----------------------------------------------------

/// A sign-in as a browser makes it: the page's form fetched first (its pre-session cookie and CSRF token,
/// which a guesser can fetch afresh for every guess), then posted with the token.
async fn sign_in_attempt(client: &reqwest::Client, base: &str, reference: &str, token: &str) -> reqwest::Response {
    let form = client.get(format!("{base}/connect/{reference}")).send().await.expect("the page answers");
    let cookie = form
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find(|cookie| cookie.starts_with("mcpsim_page_sign_in="))
        .map(|cookie| cookie.split(';').next().unwrap().to_string())
        .expect("the sign-in form sets a pre-session cookie");
    let body = form.text().await.expect("the sign-in form has a body");
    let marker = "name=\"csrf\" value=\"";
    let csrf = body.find(marker).map(|at| &body[at + marker.len()..]).and_then(|rest| rest.split('"').next()).expect("a CSRF field");
    client
        .post(format!("{base}/connect/{reference}/sign-in"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .header("Cookie", cookie)
        .body(format!("csrf={csrf}&token={token}"))
        .send()
        .await
        .expect("the page answers")
}

/// A bare sign-in POST (no form, no cookie: it is counted before anything is looked at) from `from` on
/// `reference`, on a connection of its own; the status.
async fn bare_sign_in(from: IpAddr, address: &str, reference: &str) -> u16 {
    let mut stream = connect_from(from, address).await.unwrap_or_else(|error| panic!("connecting from {from}: {error}"));
    let head = format!(
        "POST /connect/{reference}/sign-in HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 11\r\nConnection: close\r\n\r\ntoken=guess"
    );
    stream.write_all(head.as_bytes()).unwrap();
    status_of(&read_until_closed(&mut stream))
}

/// The `index`th address of 127.1.0.0/16 (all loopback on Linux), none of which another test uses.
fn filler_address(index: usize) -> IpAddr {
    IpAddr::from([127, 1, (index / 250) as u8, (index % 250 + 1) as u8])
}

#[tokio::test]
async fn a_full_sign_in_throttle_table_admits_no_new_key_and_still_refuses_over_limit_sign_ins() {
    // Allowances that do not come back within the test: every key counted stays in its table.
    let server = HttpServer::start(&["--out-of-band", "--page-sign-in-interval-ms", "600000"]);
    let over = loopback(20);
    for attempt in 0..5 {
        assert_eq!(
            bare_sign_in(over, &server.address, &format!("over{attempt:0>18}")).await,
            403,
            "counted, then refused as a forged form"
        );
    }
    assert_eq!(bare_sign_in(over, &server.address, "over-the-limit-attempt").await, 429, "the sixth attempt from one address");

    // Fresh addresses and fresh references, one attempt each, until a table is full (4096 keys each).
    let started = now();
    let mut checked = 0;
    let full_at = loop {
        let status = bare_sign_in(filler_address(checked), &server.address, &format!("{checked:0>22}")).await;
        if status == 429 {
            break checked;
        }
        assert_eq!(status, 403, "attempt {checked}");
        checked += 1;
        assert!(checked <= 4096, "more keys were admitted than a table holds");
    };
    eprintln!("{checked} fresh addresses and references counted in {:?} before the tables were full", started.elapsed());
    assert!(full_at >= 4096 - 16, "the tables hold 4096 keys each; full after {full_at}");

    // Full: a new address (with a new reference) is refused before anything is looked at, however many
    // come, and the address over its allowance is still refused. Keys already counted keep their allowance.
    for index in 0..20 {
        let status = bare_sign_in(filler_address(5000 + index), &server.address, &format!("new{index:0>19}")).await;
        assert_eq!(status, 429, "new key {index} while the tables are full");
    }
    assert_eq!(bare_sign_in(over, &server.address, "over-the-limit-again").await, 429, "over its allowance, table full or not");
    assert_eq!(bare_sign_in(filler_address(0), &server.address, &format!("{:0>22}", 0)).await, 403, "a counted key keeps its allowance");
    let (_, log) = server.terminate_with_stderr();
    assert!(log.iter().filter(|line| line.contains("outcome=\"sign_in_throttled\"")).count() >= 22, "every refusal is logged");
}

#[tokio::test]
async fn sign_in_guesses_are_throttled_per_address_and_reference_and_every_page_request_is_logged() {
    // The counts first, on a server whose allowances do not come back within the test (one per minute).
    let slow = HttpServer::start(&["--out-of-band", "--page-sign-in-interval-ms", "60000"]);
    let base = slow.url.trim_end_matches("/mcp").to_string();
    let guesser = client_from(loopback(2));

    // 127.0.0.2: five guesses are checked (401), the sixth is not even looked at, not even the right token.
    for _ in 0..5 {
        assert_eq!(sign_in_attempt(&guesser, &base, REFERENCE, "guess").await.status().as_u16(), 401);
    }
    let throttled = sign_in_attempt(&guesser, &base, REFERENCE, ALICE).await;
    assert_eq!(throttled.status().as_u16(), 429);
    assert_eq!(throttled.headers()["retry-after"], "60");
    assert!(throttled.headers().get("set-cookie").is_none(), "a throttled attempt signs nobody in");
    assert!(throttled.text().await.unwrap().contains("data-outcome=\"sign_in_throttled\""));

    // Another address has its own allowance, but the reference's (10) runs out whatever the address.
    for last in 3..8 {
        assert_eq!(sign_in_attempt(&client_from(loopback(last)), &base, REFERENCE, "guess").await.status().as_u16(), 401);
    }
    let spread = sign_in_attempt(&client_from(loopback(8)), &base, REFERENCE, "guess").await;
    assert_eq!(spread.status().as_u16(), 429, "ten guesses on one reference from anywhere");
    let other_reference = "QUFBQUFBQUFBQUFBQUFBQQ";
    assert_eq!(sign_in_attempt(&client_from(loopback(8)), &base, other_reference, "guess").await.status().as_u16(), 401);
    let (_, log) = slow.terminate_with_stderr();
    assert!(log.join("\n").contains("status=429 outcome=\"sign_in_throttled\""), "throttled attempts are logged");

    // The rate a guesser gets with the default allowance: a flood from one address for 3 s, a fresh
    // reference each time (so only the address's allowance counts).
    let server = HttpServer::start(&["--out-of-band"]);
    let base = server.url.trim_end_matches("/mcp").to_string();
    let mut before_throttled = 0;
    let throttled = loop {
        let attempt = sign_in_attempt(&client_from(loopback(2)), &base, REFERENCE, "guess").await;
        if attempt.status().as_u16() == 429 {
            break attempt;
        }
        before_throttled += 1;
        assert!(before_throttled <= 8, "a burst of 5 (and what came back meanwhile), then 429");
    };
    assert!(before_throttled >= 5, "the burst: {before_throttled}");
    assert_eq!(throttled.headers()["retry-after"], "1", "one attempt a second after the burst");
    let flooder = client_from(loopback(9));
    let started = now();
    let (mut attempts, mut checked) = (0, 0);
    while started.elapsed() < Duration::from_secs(3) {
        let reference = format!("{:0>22}", attempts);
        if sign_in_attempt(&flooder, &base, &reference, "guess").await.status().as_u16() == 401 {
            checked += 1;
        }
        attempts += 1;
    }
    eprintln!("one address: {checked} of {attempts} sign-in guesses checked in 3 s");
    assert!(attempts > 20, "the flood was a flood: {attempts}");
    assert!((5..=9).contains(&checked), "a burst of 5, then one a second: {checked}");

    // A real sign-in (from a rested address), then the page: all logged, without token, cookie or reference.
    let alice = client_from(loopback(10));
    let signed = sign_in_attempt(&alice, &base, REFERENCE.replace('A', "B").as_str(), ALICE).await;
    assert_eq!(signed.status().as_u16(), 303);
    let cookie = signed.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let shown = alice.get(format!("{base}/connect/{REFERENCE}")).header("Cookie", &cookie).send().await.unwrap();
    assert_eq!(shown.status().as_u16(), 404, "no such flow");

    let (_, log) = server.terminate_with_stderr();
    let page_lines: Vec<&String> = log.iter().filter(|line| line.contains("route=\"")).collect();
    // Each sign-in attempt is two requests (the form, then the post), as a browser's or a guesser's is.
    let expected_lines = 2 * (before_throttled + 1) + 2 * attempts + 2 + 1;
    assert_eq!(page_lines.len(), expected_lines, "one line per page request: {page_lines:#?}");
    let all = log.join("\n");
    for line in [
        "route=\"POST /connect/{reference}/sign-in\" status=401 outcome=\"sign_in\"",
        "route=\"POST /connect/{reference}/sign-in\" status=429 outcome=\"sign_in_throttled\"",
        "principal=\"alice\" route=\"POST /connect/{reference}/sign-in\" status=303 outcome=\"signed_in\"",
        "principal=\"alice\" route=\"GET /connect/{reference}\" status=404 outcome=\"unknown\"",
    ] {
        assert!(all.contains(line), "{line} in {page_lines:#?}");
    }
    let session_value = cookie.split_once('=').unwrap().1;
    for secret in [ALICE, REFERENCE, session_value] {
        assert!(!all.contains(secret), "the log never holds {secret}");
    }
}
