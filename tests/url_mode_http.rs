//! URL-mode elicitation for real: `mcpsim serve --http --out-of-band`, its `notes_publish` over MCP and its
//! own out-of-band page on the same listener, driven over plain HTTP from the attacker's side as well as the
//! user's (GUARANTEES.md §2.7). `tests/url_mode_browser.rs` drives the same page in headless Chromium.

mod e2e_support;

use e2e_support::*;
use serde_json::{json, Value};

const ALICE: &str = "demo-alice";
const BOB: &str = "demo-bob";

fn publish_message(id: i64, capabilities: Value, extra: Value) -> Value {
    let mut params = json!({ "name": "notes_publish", "arguments": { "workspaceUri": ALICE_WORKSPACE, "noteId": "note-99" } });
    for (key, value) in extra.as_object().expect("extra params are an object") {
        params[key] = value.clone();
    }
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    });
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params })
}

async fn mcp(server: &HttpServer, token: &str, message: &Value) -> (u16, Value) {
    let mut request = reqwest::Client::new().post(&server.url).body(serde_json::to_vec(message).unwrap());
    for (name, value) in conforming_headers(message, token) {
        request = request.header(name, value);
    }
    let response = request.send().await.expect("the server answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON-RPC response"))
}

/// A page response: status, the outcome the page names (`data-outcome`), its body, its Set-Cookie.
struct Page {
    status: u16,
    body: String,
    cookie: Option<String>,
    headers: reqwest::header::HeaderMap,
}

impl Page {
    fn outcome(&self) -> &str {
        let start = self.body.find("data-outcome=\"").map(|at| at + "data-outcome=\"".len()).expect("every page names its outcome");
        let end = self.body[start..].find('"').unwrap() + start;
        &self.body[start..end]
    }

    fn csrf(&self) -> String {
        let start = self.body.find("name=\"csrf\" value=\"").map(|at| at + "name=\"csrf\" value=\"".len()).expect("a CSRF field");
        let end = self.body[start..].find('"').unwrap() + start;
        self.body[start..end].to_string()
    }
}

async fn page(method: reqwest::Method, url: &str, cookie: Option<&str>, form: &[(&str, &str)], origin: Option<&str>) -> Page {
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let mut request = client.request(method, url);
    if let Some(cookie) = cookie {
        request = request.header("Cookie", cookie);
    }
    if let Some(origin) = origin {
        request = request.header("Origin", origin);
    }
    if !form.is_empty() {
        let body: Vec<String> = form.iter().map(|(k, v)| format!("{k}={}", v.replace('+', "%2B").replace('=', "%3D"))).collect();
        request = request.header("Content-Type", "application/x-www-form-urlencoded").body(body.join("&"));
    }
    let response = request.send().await.expect("the page answers");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let cookie = headers.get("set-cookie").map(|value| value.to_str().unwrap().to_string());
    Page { status, body: response.text().await.unwrap(), cookie, headers }
}

/// Signs in on the page of `url` with `token` as a browser does (open the page: its sign-in form and the
/// pre-session cookie its CSRF token is bound to; post the form); returns the session cookie pair to send back.
async fn sign_in(url: &str, token: &str) -> String {
    let form = page(reqwest::Method::GET, url, None, &[], None).await;
    let pre_session = form.cookie.as_deref().expect("a pre-session cookie").split(';').next().unwrap().to_string();
    let csrf = form.csrf();
    let signed =
        page(reqwest::Method::POST, &format!("{url}/sign-in"), Some(&pre_session), &[("csrf", &csrf), ("token", token)], None).await;
    assert_eq!(signed.status, 303, "{}", signed.body);
    let cookie = signed.cookie.expect("a session cookie");
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict") && cookie.contains("Path=/connect/"), "{cookie}");
    assert!(!cookie.contains(token), "the cookie never carries the token");
    cookie.split(';').next().unwrap().to_string()
}

#[tokio::test]
async fn the_principal_completes_the_page_and_the_retry_publishes_while_others_are_refused() {
    let server = HttpServer::start(&["--out-of-band"]);
    let url_capable = json!({ "elicitation": { "url": {} } });

    // A form-only client cannot be sent to a page.
    let (status, refused) = mcp(&server, ALICE, &publish_message(1, json!({ "elicitation": { "form": {} } }), json!({}))).await;
    assert_eq!((status, &refused["error"]["code"]), (400, &json!(-32021)));
    assert_eq!(refused["error"]["data"]["requiredCapabilities"], json!({ "elicitation": { "url": {} } }));

    let (_, round1) = mcp(&server, ALICE, &publish_message(2, url_capable.clone(), json!({}))).await;
    let request = &round1["result"]["inputRequests"]["publish_authorization"]["params"];
    assert_eq!(request["mode"], "url");
    let url = request["url"].as_str().unwrap().to_string();
    let base = server.url.trim_end_matches("/mcp");
    assert!(url.starts_with(&format!("{base}/connect/")), "the page is on this listener: {url}");
    assert!(!url.contains("demo-alice") && !url.contains("alice"), "the URL carries no credential and no user: {url}");
    let state = round1["result"]["requestState"].as_str().unwrap().to_string();
    let accept = json!({ "requestState": state, "inputResponses": { "publish_authorization": { "action": "accept" } } });

    // accept before the page is done: asked again.
    let (_, early) = mcp(&server, ALICE, &publish_message(3, url_capable.clone(), accept.clone())).await;
    assert_eq!(early["result"]["resultType"], "input_required", "{early}");

    // Not signed in: the page asks for a sign-in; a wrong token signs nobody in.
    let anonymous = page(reqwest::Method::GET, &url, None, &[], None).await;
    assert_eq!((anonymous.status, anonymous.outcome()), (200, "sign_in"));
    assert!(anonymous.headers["content-security-policy"].to_str().unwrap().starts_with("default-src 'none'"));
    assert!(!anonymous.body.contains("http://") && !anonymous.body.contains("<script"), "self-contained, no script");
    let pre_session = anonymous.cookie.as_deref().expect("a pre-session cookie").split(';').next().unwrap().to_string();
    let wrong = page(
        reqwest::Method::POST,
        &format!("{url}/sign-in"),
        Some(&pre_session),
        &[("csrf", &anonymous.csrf()), ("token", "guess")],
        None,
    )
    .await;
    assert_eq!((wrong.status, wrong.outcome(), wrong.cookie.is_none()), (401, "sign_in", true));

    // Bob signs in as himself: refused, and without a CSRF token of the page his post is refused too.
    let bob = sign_in(&url, BOB).await;
    let bob_opens = page(reqwest::Method::GET, &url, Some(&bob), &[], None).await;
    assert_eq!((bob_opens.status, bob_opens.outcome()), (403, "wrong_user"), "{}", bob_opens.body);
    assert!(!bob_opens.body.contains("note-99"), "the wrong user is not told what the flow is for");
    let bob_posts = page(reqwest::Method::POST, &url, Some(&bob), &[("csrf", "x")], None).await;
    assert_eq!((bob_posts.status, bob_posts.outcome()), (403, "csrf"));

    // Alice: a tampered link is refused; the genuine one shows the form.
    let alice = sign_in(&url, ALICE).await;
    // The last character changed to another one that still decodes (16 random bytes in unpadded base64url
    // end in one of A, Q, g, w, and the reference may end in 'A' already): a well-formed link to no flow.
    let replacement = if url.ends_with('A') { 'Q' } else { 'A' };
    let tampered = format!("{}{replacement}", &url[..url.len() - 1]);
    let altered = page(reqwest::Method::GET, &format!("{url}x"), Some(&alice), &[], None).await;
    assert_eq!((altered.status, altered.outcome()), (400, "altered"));
    let unknown = page(reqwest::Method::GET, &tampered, Some(&alice), &[], None).await;
    assert_eq!((unknown.status, unknown.outcome()), (404, "unknown"), "{tampered}");
    let ready = page(reqwest::Method::GET, &url, Some(&alice), &[], None).await;
    assert_eq!((ready.status, ready.outcome()), (200, "ready"), "{}", ready.body);
    let csrf = ready.csrf();

    // A post from another site, or with another page's token, is refused; then alice authorizes, once.
    let foreign = page(reqwest::Method::POST, &url, Some(&alice), &[("csrf", &csrf)], Some("http://evil.example")).await;
    assert_eq!((foreign.status, foreign.outcome()), (403, "foreign_origin"));
    let changed = page(reqwest::Method::POST, &url, Some(&alice), &[("csrf", &format!("{csrf}x"))], None).await;
    assert_eq!((changed.status, changed.outcome()), (403, "csrf"));
    let bobs_session = page(reqwest::Method::POST, &url, Some(&bob), &[("csrf", &csrf)], None).await;
    assert_eq!((bobs_session.status, bobs_session.outcome()), (403, "csrf"), "alice's token is bound to alice's session");
    let (_, still) = mcp(&server, ALICE, &publish_message(4, url_capable.clone(), accept.clone())).await;
    assert_eq!(still["result"]["resultType"], "input_required", "nothing refused completed the flow");
    let done = page(reqwest::Method::POST, &url, Some(&alice), &[("csrf", &csrf)], Some(base)).await;
    assert_eq!((done.status, done.outcome()), (200, "completed"), "{}", done.body);
    let twice = page(reqwest::Method::POST, &url, Some(&alice), &[("csrf", &csrf)], None).await;
    assert_eq!((twice.status, twice.outcome()), (409, "already_completed"));

    // The retry over MCP now publishes, exactly once.
    let (_, published) = mcp(&server, ALICE, &publish_message(5, url_capable.clone(), accept.clone())).await;
    assert_eq!(published["result"]["structuredContent"], json!({ "noteId": "note-99", "outcome": "published", "published": true }));
    let (_, again) = mcp(&server, ALICE, &publish_message(6, url_capable, accept)).await;
    assert_eq!(reason(&again), "state_consumed");
}
