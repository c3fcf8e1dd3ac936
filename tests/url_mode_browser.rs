//! The out-of-band page of URL-mode elicitation in a real browser: Debian's headless Chromium, driven over
//! the DevTools protocol, signs in on `mcpsim serve --http --out-of-band`'s own page and authorizes; the MCP
//! retry then publishes. A wrong user and a tampered link are refused with pages that say why. Screenshots
//! of the page are left under `target/url-mode/` for a person to look at.
//!
//! Ignored by a plain `cargo test` (they need /usr/bin/chromium); `.ci/run` runs them. Without Chromium
//! they fail, never pass.

mod browser;
mod e2e_support;

use browser::Browser;
use e2e_support::*;
use serde_json::{json, Value};
use std::path::PathBuf;

fn screenshots() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target").join("url-mode")
}

fn publish(id: i64, extra: Value) -> Value {
    let mut params = json!({ "name": "notes_publish", "arguments": { "workspaceUri": ALICE_WORKSPACE, "noteId": "note-99" } });
    for (key, value) in extra.as_object().unwrap() {
        params[key] = value.clone();
    }
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": { "elicitation": { "url": {} } },
    });
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params })
}

fn mcp(server: &HttpServer, token: &str, message: &Value) -> Value {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let mut request = reqwest::Client::new().post(&server.url).body(serde_json::to_vec(message).unwrap());
        for (name, value) in conforming_headers(message, token) {
            request = request.header(name, value);
        }
        request.send().await.expect("the server answers").json().await.expect("JSON")
    })
}

fn outcome(browser: &mut Browser) -> String {
    browser.eval("document.querySelector('main').dataset.outcome").as_str().unwrap_or("").to_string()
}

/// Types the token into the sign-in form and submits it, as a person does.
fn sign_in(browser: &mut Browser, token: &str) {
    assert_eq!(outcome(browser), "sign_in");
    browser.eval(&format!("document.getElementById('token').value = {token:?}"));
    let seen = browser.events.len();
    browser.click("sign-in");
    browser.wait_for_load(seen);
}

/// Alice's round 1 of notes_publish: the page's URL, and the retry that accepts it (its sealed state).
fn alice_starts_a_publication(server: &HttpServer) -> (String, Value) {
    let round1 = mcp(server, "demo-alice", &publish(1, json!({})));
    let url = round1["result"]["inputRequests"]["publish_authorization"]["params"]["url"].as_str().unwrap().to_string();
    let accept = json!({
        "requestState": round1["result"]["requestState"],
        "inputResponses": { "publish_authorization": { "action": "accept" } },
    });
    (url, accept)
}

#[test]
#[ignore = "needs /usr/bin/chromium (Debian's chromium package; .ci/run installs it)"]
fn alice_signs_in_and_authorizes_then_the_retry_publishes() {
    let server = HttpServer::start(&["--out-of-band"]);
    let (url, accept) = alice_starts_a_publication(&server);

    let mut browser = Browser::launch("url-mode-alice");
    browser.navigate(&url);
    browser.screenshot(&screenshots().join("1-sign-in.png"), 900, 600);
    sign_in(&mut browser, "demo-alice");
    assert_eq!(outcome(&mut browser), "ready", "signed in as alice, the page asks her to authorize");
    browser.screenshot(&screenshots().join("2-authorize.png"), 900, 600);
    let cookie_visible = browser.eval("document.cookie");
    assert_eq!(cookie_visible, json!(""), "the session cookie is HttpOnly: no script can read it");
    let seen = browser.events.len();
    browser.click("authorize");
    browser.wait_for_load(seen);
    assert_eq!(outcome(&mut browser), "completed");
    browser.screenshot(&screenshots().join("3-authorized.png"), 900, 600);
    let base = server.url.trim_end_matches("/mcp").to_string();
    assert!(browser.requests().iter().all(|request| request.starts_with(&base)), "nothing but the server itself: {:?}", browser.requests());
    let violations = browser.eval("window.__cspViolations");
    assert_eq!(violations, json!([]), "the page runs within its Content-Security-Policy");

    let published = mcp(&server, "demo-alice", &publish(2, accept));
    assert_eq!(published["result"]["structuredContent"]["outcome"], "published", "{published}");
}

#[test]
#[ignore = "needs /usr/bin/chromium (Debian's chromium package; .ci/run installs it)"]
fn the_wrong_user_and_a_tampered_link_are_refused_with_pages_that_say_why() {
    let server = HttpServer::start(&["--out-of-band"]);
    let (url, accept) = alice_starts_a_publication(&server);

    let mut bob = Browser::launch("url-mode-bob");
    bob.navigate(&url);
    sign_in(&mut bob, "demo-bob");
    assert_eq!(outcome(&mut bob), "wrong_user");
    let says = bob.eval("document.getElementById('says').textContent");
    assert!(says.as_str().unwrap().contains("another account"), "{says}");
    assert_eq!(bob.eval("document.getElementById('authorize')"), Value::Null, "no form to submit");
    bob.screenshot(&screenshots().join("4-wrong-user.png"), 900, 600);

    let mut alice = Browser::launch("url-mode-tampered");
    let tampered = format!("{}{}", &url[..url.len() - 2], if url.ends_with("AA") { "BB" } else { "AA" });
    alice.navigate(&tampered);
    sign_in(&mut alice, "demo-alice");
    assert_eq!(outcome(&mut alice), "unknown");
    alice.screenshot(&screenshots().join("5-tampered.png"), 900, 600);

    let still = mcp(&server, "demo-alice", &publish(2, accept));
    assert_eq!(still["result"]["resultType"], "input_required", "nothing was authorized: {still}");
}
