//! The out-of-band page of URL-mode elicitation (`mcpsim serve --http --out-of-band`) attacked from outside:
//! a real `mcpsim serve` process, real HTTP requests (GUARANTEES.md §2.7).
//!
//! * `Origin: null` and other origins are refused on every post, and the sign-in form is bound to a
//!   pre-session cookie (login CSRF); a browser signed in as the wrong user can sign in again as itself.
//! * Every page route refuses a `Host` that is not the page's (DNS rebinding).
//! * `--out-of-band` on a wildcard bind needs `--public-url`, and the links and checks then use it.
//! * Page sessions are sealed with keys derived from the fleet's key ring: a cookie from one process of a
//!   fleet (same key file, same SQLite store) is accepted by another, across a key rotation too.

mod e2e_support;

use base64::Engine;
use e2e_support::*;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;

const ALICE: &str = "demo-alice";
const BOB: &str = "demo-bob";
const SESSION_COOKIE: &str = "mcpsim_page_session";
const SIGN_IN_COOKIE: &str = "mcpsim_page_sign_in";

fn publish_message(id: i64, extra: Value) -> Value {
    let mut params = json!({ "name": "notes_publish", "arguments": { "workspaceUri": ALICE_WORKSPACE, "noteId": "note-99" } });
    for (key, value) in extra.as_object().expect("extra params are an object") {
        params[key] = value.clone();
    }
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": { "elicitation": { "url": {} } },
    });
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params })
}

async fn mcp(url: &str, token: &str, message: &Value) -> Value {
    let mut request = reqwest::Client::new().post(url).body(serde_json::to_vec(message).unwrap());
    for (name, value) in conforming_headers(message, token) {
        request = request.header(name, value);
    }
    request.send().await.expect("the server answers").json().await.expect("a JSON-RPC response")
}

/// Round 1 of `notes_publish` for alice at `mcp_url`: the page URL the server issued, and the retry that
/// publishes once the page is completed.
async fn start_flow(mcp_url: &str) -> (String, Value) {
    let round1 = mcp(mcp_url, ALICE, &publish_message(1, json!({}))).await;
    let url = round1["result"]["inputRequests"]["publish_authorization"]["params"]["url"]
        .as_str()
        .unwrap_or_else(|| panic!("a URL-mode request: {round1}"))
        .to_string();
    let state = round1["result"]["requestState"].as_str().unwrap().to_string();
    (url, json!({ "requestState": state, "inputResponses": { "publish_authorization": { "action": "accept" } } }))
}

/// Whether the retry publishes (`true`) or is asked again because the page is not completed (`false`).
async fn retry_publishes(mcp_url: &str, retry: &Value) -> bool {
    let answer = mcp(mcp_url, ALICE, &publish_message(2, retry.clone())).await;
    match answer["result"]["resultType"].as_str() {
        Some("input_required") => false,
        _ => {
            assert_eq!(answer["result"]["structuredContent"]["outcome"], "published", "{answer}");
            true
        }
    }
}

/// A page response: status, body, every Set-Cookie.
struct Page {
    status: u16,
    body: String,
    set_cookies: Vec<String>,
}

impl Page {
    fn outcome(&self) -> &str {
        let start = self
            .body
            .find("data-outcome=\"")
            .map(|at| at + "data-outcome=\"".len())
            .unwrap_or_else(|| panic!("every page names its outcome: {} {}", self.status, self.body));
        let end = self.body[start..].find('"').unwrap() + start;
        &self.body[start..end]
    }

    /// The CSRF field of the page's form.
    fn csrf(&self) -> String {
        let start = self.body.find("name=\"csrf\" value=\"").map(|at| at + "name=\"csrf\" value=\"".len()).expect("a CSRF field");
        let end = self.body[start..].find('"').unwrap() + start;
        self.body[start..end].to_string()
    }

    /// `name=value` of the cookie `name` this response sets, with its attributes.
    fn set_cookie(&self, name: &str) -> Option<&str> {
        self.set_cookies.iter().map(String::as_str).find(|cookie| cookie.starts_with(&format!("{name}=")))
    }

    fn cookie_pair(&self, name: &str) -> Option<String> {
        self.set_cookie(name).map(|cookie| cookie.split(';').next().unwrap().to_string())
    }
}

/// What one request to the page carries besides its method and URL.
#[derive(Default, Clone)]
struct Sent<'a> {
    host: Option<&'a str>,
    origin: Option<&'a str>,
    cookies: Vec<String>,
    form: Vec<(&'a str, String)>,
}

async fn send(method: reqwest::Method, url: &str, sent: &Sent<'_>) -> Page {
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).timeout(WAIT).build().unwrap();
    let mut request = client.request(method, url);
    if let Some(host) = sent.host {
        request = request.header("Host", host);
    }
    if let Some(origin) = sent.origin {
        request = request.header("Origin", origin);
    }
    if !sent.cookies.is_empty() {
        request = request.header("Cookie", sent.cookies.join("; "));
    }
    if !sent.form.is_empty() {
        let body: Vec<String> = sent.form.iter().map(|(k, v)| format!("{k}={}", v.replace('+', "%2B").replace('=', "%3D"))).collect();
        request = request.header("Content-Type", "application/x-www-form-urlencoded").body(body.join("&"));
    }
    let response = request.send().await.expect("the page answers");
    let status = response.status().as_u16();
    let set_cookies = response.headers().get_all("set-cookie").iter().map(|value| value.to_str().unwrap().to_string()).collect();
    Page { status, body: response.text().await.unwrap(), set_cookies }
}

/// A browser: keeps the cookies the page sets and sends them back, with the page's own Origin on posts and
/// (behind a load balancer) the public Host.
struct Browser<'a> {
    cookies: BTreeMap<String, String>,
    host: Option<&'a str>,
    origin: Option<&'a str>,
}

impl<'a> Browser<'a> {
    fn new() -> Browser<'a> {
        Browser { cookies: BTreeMap::new(), host: None, origin: None }
    }

    fn sent(&self) -> Sent<'a> {
        Sent { host: self.host, cookies: self.cookies.iter().map(|(name, value)| format!("{name}={value}")).collect(), ..Sent::default() }
    }

    fn keep(&mut self, page: &Page) {
        for cookie in &page.set_cookies {
            let (name, value) = cookie.split(';').next().unwrap().split_once('=').unwrap();
            self.cookies.insert(name.to_string(), value.to_string());
        }
    }

    async fn get(&mut self, url: &str) -> Page {
        let page = send(reqwest::Method::GET, url, &self.sent()).await;
        self.keep(&page);
        page
    }

    async fn post(&mut self, url: &str, form: &[(&'a str, String)]) -> Page {
        let sent = Sent { origin: self.origin, form: form.to_vec(), ..self.sent() };
        let page = send(reqwest::Method::POST, url, &sent).await;
        self.keep(&page);
        page
    }

    /// Opens the page's sign-in form and signs in with `token`; asserts it worked.
    async fn sign_in(&mut self, url: &str, token: &str) {
        let form = self.get(url).await;
        let signed = self.post(&format!("{url}/sign-in"), &[("csrf", form.csrf()), ("token", token.to_string())]).await;
        assert_eq!(signed.status, 303, "{}", signed.body);
        assert!(signed.set_cookie(SESSION_COOKIE).is_some(), "a session cookie");
    }
}

/// One request written byte for byte on a fresh connection (for what an HTTP client will not send); the
/// status code of the answer.
fn raw_status(address: &str, request: &str) -> u16 {
    let mut stream = std::net::TcpStream::connect(address).expect("the server accepts");
    stream.set_read_timeout(Some(WAIT)).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    text.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or_else(|| panic!("no HTTP answer: {text:?}"))
}

#[tokio::test]
async fn origin_null_and_forged_sign_ins_are_refused_and_a_wrong_user_can_sign_in_again() {
    // Every forged sign-in below counts against this address's sign-in allowance (tests/http_hardening.rs
    // tests that); it recovers at once here, so each attempt shows what the origin and CSRF checks decide.
    let server = HttpServer::start(&["--out-of-band", "--page-sign-in-interval-ms", "1"]);
    let own_origin = format!("http://{}", server.address);
    let (url, retry) = start_flow(&server.url).await;
    let sign_in_url = format!("{url}/sign-in");

    // The victim's browser opens the link: a sign-in form, its CSRF token bound to a pre-session cookie.
    let opened = send(reqwest::Method::GET, &url, &Sent::default()).await;
    assert_eq!((opened.status, opened.outcome()), (200, "sign_in"));
    let pre_session = opened.set_cookie(SIGN_IN_COOKIE).expect("a pre-session cookie").to_string();
    assert!(pre_session.contains("HttpOnly") && pre_session.contains("SameSite=Strict") && pre_session.contains("Path=/connect/"));
    let pre_session = opened.cookie_pair(SIGN_IN_COOKIE).unwrap();
    let csrf = opened.csrf();
    let alice_signs_in = |origin| Sent {
        origin,
        cookies: vec![pre_session.clone()],
        form: vec![("csrf", csrf.clone()), ("token", ALICE.to_string())],
        ..Sent::default()
    };

    // Origin: null (a sandboxed frame, a redirect from another site), another site, another loopback
    // origin: refused, nothing set, even with everything else right.
    for origin in ["null", "http://attacker.example", "http://127.0.0.1:1", "http://localhost.attacker.example"] {
        let refused = send(reqwest::Method::POST, &sign_in_url, &alice_signs_in(Some(origin))).await;
        assert_eq!((refused.status, refused.outcome()), (403, "foreign_origin"), "Origin {origin}: {}", refused.body);
        assert!(refused.set_cookies.is_empty(), "Origin {origin}: nothing set");
    }

    // Login CSRF: a sign-in that did not come from this browser's own form is refused and sets nothing.
    let attacker = send(reqwest::Method::GET, &url, &Sent::default()).await;
    let attackers_pair = (attacker.cookie_pair(SIGN_IN_COOKIE).unwrap(), attacker.csrf());
    let forged = [
        ("no CSRF token", vec![pre_session.clone()], vec![("token", BOB.to_string())]),
        (
            "no pre-session cookie (a cross-site post carries no SameSite=Strict cookie)",
            vec![],
            vec![("csrf", csrf.clone()), ("token", BOB.to_string())],
        ),
        ("a wrong CSRF token", vec![pre_session.clone()], vec![("csrf", format!("{csrf}x")), ("token", BOB.to_string())]),
        (
            "the attacker's own token, not bound to this browser's cookie",
            vec![pre_session.clone()],
            vec![("csrf", attackers_pair.1.clone()), ("token", BOB.to_string())],
        ),
        ("another page's token", vec![pre_session.clone()], vec![("csrf", csrf.clone()), ("token", BOB.to_string())]),
        (
            "a session cookie in place of the pre-session one",
            vec![attackers_pair.0.replace(SIGN_IN_COOKIE, SESSION_COOKIE)],
            vec![("csrf", attackers_pair.1.clone()), ("token", BOB.to_string())],
        ),
    ];
    for (index, (what, cookies, form)) in forged.into_iter().enumerate() {
        // The fifth posts to a sign-in of another reference (well-formed, no flow).
        // (16 random bytes end in one of A, Q, g, w in base64url: change the last to another of them.)
        let other_reference = format!("{}{}", &url[..url.len() - 1], if url.ends_with('A') { 'Q' } else { 'A' });
        let target = if index == 4 { format!("{other_reference}/sign-in") } else { sign_in_url.clone() };
        let sent = Sent { origin: Some(&own_origin), cookies, form, ..Sent::default() };
        let refused = send(reqwest::Method::POST, &target, &sent).await;
        assert_eq!((refused.status, refused.outcome()), (403, "csrf"), "{what}: {}", refused.body);
        assert!(refused.set_cookies.is_empty(), "{what}: nothing set, nobody signed in");
    }

    // The lockout: the victim's browser holds a session as the attacker (however planted). The victim's own
    // link says wrong_user but offers the sign-in form, and signing in as herself there works.
    let mut victim = Browser::new();
    victim.origin = Some(&own_origin);
    victim.sign_in(&url, BOB).await;
    let wrong = victim.get(&url).await;
    assert_eq!((wrong.status, wrong.outcome()), (403, "wrong_user"), "{}", wrong.body);
    assert!(wrong.body.contains("id=\"sign-in\"") && wrong.body.contains("signed in as bob"), "{}", wrong.body);
    assert!(!wrong.body.contains("note-99"), "the wrong user is not told what the flow is for");
    let again = victim.post(&sign_in_url, &[("csrf", wrong.csrf()), ("token", ALICE.to_string())]).await;
    assert_eq!(again.status, 303, "{}", again.body);
    let ready = victim.get(&url).await;
    assert_eq!((ready.status, ready.outcome()), (200, "ready"), "{}", ready.body);

    // A submit with Origin: null is refused too, and completes nothing; the same submit from the page works.
    let session = Sent { origin: Some("null"), form: vec![("csrf", ready.csrf())], ..victim.sent() };
    let refused = send(reqwest::Method::POST, &url, &session).await;
    assert_eq!((refused.status, refused.outcome()), (403, "foreign_origin"));
    assert!(!retry_publishes(&server.url, &retry).await, "nothing refused completed the flow");
    let done = victim.post(&url, &[("csrf", ready.csrf())]).await;
    assert_eq!((done.status, done.outcome()), (200, "completed"), "{}", done.body);
    assert!(retry_publishes(&server.url, &retry).await);
}

#[tokio::test]
async fn every_page_route_refuses_a_host_that_is_not_the_pages() {
    let server = HttpServer::start(&["--out-of-band", "--page-sign-in-interval-ms", "1"]);
    let (url, retry) = start_flow(&server.url).await;
    let path = url.trim_start_matches(&format!("http://{}", server.address)).to_string();
    let mut alice = Browser::new();
    alice.sign_in(&url, ALICE).await;
    let ready = alice.get(&url).await;
    assert_eq!(ready.outcome(), "ready");
    let csrf = ready.csrf();
    let port = server.address.rsplit(':').next().unwrap();

    // A rebinding page's requests carry its own host name; an attacker's request names any host it likes.
    // Every route refuses them before anything else, with alice's valid cookies and tokens and all.
    for host in
        ["attacker.example", &format!("attacker.example:{port}"), "0.0.0.0", &format!("10.0.0.1:{port}"), "localhost.attacker.example"]
    {
        let with_host = Sent { host: Some(host), ..alice.sent() };
        let shown = send(reqwest::Method::GET, &url, &with_host).await;
        let signed =
            send(reqwest::Method::POST, &format!("{url}/sign-in"), &Sent { form: vec![("token", ALICE.into())], ..with_host.clone() })
                .await;
        let submitted = send(reqwest::Method::POST, &url, &Sent { form: vec![("csrf", csrf.clone())], ..with_host.clone() }).await;
        for (route, page) in [("GET /connect/REF", &shown), ("POST /connect/REF/sign-in", &signed), ("POST /connect/REF", &submitted)] {
            assert_eq!((page.status, page.outcome()), (403, "wrong_host"), "Host {host}, {route}: {}", page.body);
            assert!(page.set_cookies.is_empty(), "Host {host}, {route}: no cookie");
        }
    }
    assert!(!retry_publishes(&server.url, &retry).await, "no refused submit completed the flow");

    // What an HTTP client would not send: no Host, two Hosts, an absolute target naming another host.
    let address = &server.address;
    assert_eq!(raw_status(address, &format!("GET {path} HTTP/1.0\r\n\r\n")), 400, "no Host");
    assert_eq!(
        raw_status(address, &format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nHost: attacker.example\r\nConnection: close\r\n\r\n")),
        400
    );
    assert_eq!(
        raw_status(address, &format!("GET http://attacker.example{path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n")),
        400
    );

    // Loopback names of this machine are the page's own: localhost works, with its own origin.
    let mut local = Browser::new();
    let local_url = url.replace("127.0.0.1", "localhost");
    let local_origin = format!("http://localhost:{port}");
    local.origin = Some(&local_origin);
    local.sign_in(&local_url, ALICE).await;
    let ready = local.get(&local_url).await;
    assert_eq!((ready.status, ready.outcome()), (200, "ready"), "{}", ready.body);
    let done = local.post(&local_url, &[("csrf", ready.csrf())]).await;
    assert_eq!((done.status, done.outcome()), (200, "completed"), "{}", done.body);
    assert!(retry_publishes(&server.url, &retry).await);
}

/// Runs `mcpsim ARGS`, which must exit by itself within [`WAIT`] (a server that starts instead is killed and
/// the test fails); its exit code and stderr.
fn run_refused(args: &[&str]) -> (Option<i32>, String) {
    let mut child = std::process::Command::new(BIN)
        .args(args)
        .env_remove("MCPSIM_STORE")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the mcpsim binary runs");
    let mut polls = 0;
    while child.try_wait().unwrap().is_none() {
        polls += 1;
        if polls > WAIT.as_millis() / 20 {
            let _ = child.kill();
            let _ = child.wait();
            panic!("mcpsim {args:?} did not refuse to start: it was still running after {WAIT:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    (child.wait().unwrap().code(), stderr)
}

#[tokio::test]
async fn a_wildcard_bind_needs_a_public_url_and_the_links_and_checks_use_it() {
    // Refused at start-up, saying what to pass.
    let (code, stderr) = run_refused(&["serve", "--http", "0.0.0.0:0", "--out-of-band"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("needs --public-url URL") && stderr.contains("0.0.0.0 is no address a browser can open"), "{stderr}");
    let (code, stderr) = run_refused(&["serve", "--http", "0.0.0.0:0", "--out-of-band", "--public-url", "https://notes.test/mcp"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("http(s)://HOST[:PORT]"), "{stderr}");
    let bad_config = TempConfig::new(&format!("public_url = \"notes.test\"\n{DEMO_TOML}"));
    let (code, stderr) = run_refused(&["serve", "--http", "0.0.0.0:0", "--out-of-band", "--config", bad_config.arg()]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("public_url") && stderr.contains("http(s)://HOST[:PORT]"), "{stderr}");

    // Behind a load balancer at http://notes.test:8443: the link names it, and the page answers only it.
    let public = "http://notes.test:8443";
    let server = HttpServer::start_at("0.0.0.0:0", &["--out-of-band", "--public-url", public], 1);
    let port = server.address.rsplit(':').next().unwrap().to_string();
    let mcp_url = format!("http://127.0.0.1:{port}/mcp");
    let (url, retry) = start_flow(&mcp_url).await;
    assert!(url.starts_with("http://notes.test:8443/connect/"), "{url}");
    let reached = url.replace(public, &format!("http://127.0.0.1:{port}"));

    let direct = send(reqwest::Method::GET, &reached, &Sent::default()).await;
    assert_eq!((direct.status, direct.outcome()), (403, "wrong_host"), "Host 127.0.0.1:{port} is not the public host");
    let mut browser = Browser::new();
    browser.host = Some("notes.test:8443");
    browser.origin = Some(public);
    let form = browser.get(&reached).await;
    assert_eq!((form.status, form.outcome()), (200, "sign_in"), "{}", form.body);
    let listener_origin = format!("http://127.0.0.1:{port}");
    let from_listener_origin =
        Sent { origin: Some(&listener_origin), form: vec![("csrf", form.csrf()), ("token", ALICE.into())], ..browser.sent() };
    let refused = send(reqwest::Method::POST, &format!("{reached}/sign-in"), &from_listener_origin).await;
    assert_eq!((refused.status, refused.outcome()), (403, "foreign_origin"));
    browser.sign_in(&reached, ALICE).await;
    let ready = browser.get(&reached).await;
    assert_eq!((ready.status, ready.outcome()), (200, "ready"), "{}", ready.body);
    let done = browser.post(&reached, &[("csrf", ready.csrf())]).await;
    assert_eq!((done.status, done.outcome()), (200, "completed"), "{}", done.body);
    assert!(retry_publishes(&mcp_url, &retry).await);
    drop(server);

    // A reverse proxy on this machine in front of a loopback listener passes the public Host on: /mcp and
    // the page accept it, /mcp still refuses any other name, and the page the listener's own.
    let server = HttpServer::start(&["--out-of-band", "--public-url", public]);
    let tools_list = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": { "_meta": {
        "io.modelcontextprotocol/protocolVersion": VERSION, "io.modelcontextprotocol/clientCapabilities": {} } } });
    for (host, status) in [("notes.test:8443", 200), ("attacker.example", 403), ("notes.test", 403)] {
        let mut request = reqwest::Client::new().post(&server.url).header("Host", host).body(tools_list.to_string());
        for (name, value) in conforming_headers(&tools_list, ALICE) {
            request = request.header(name, value);
        }
        assert_eq!(request.send().await.unwrap().status().as_u16(), status, "/mcp with Host {host}");
    }
    let (url, _) = start_flow(&server.url).await;
    let reached = url.replace(public, &format!("http://{}", server.address));
    let direct = send(reqwest::Method::GET, &reached, &Sent::default()).await;
    assert_eq!((direct.status, direct.outcome()), (403, "wrong_host"), "with a public URL the page answers only its Host");
    let proxied = send(reqwest::Method::GET, &reached, &Sent { host: Some("notes.test:8443"), ..Sent::default() }).await;
    assert_eq!((proxied.status, proxied.outcome()), (200, "sign_in"));
    drop(server);

    // From the deployment file, https: the link names it and the cookies are Secure.
    let config = TempConfig::new(&format!("public_url = \"https://notes.test/\"\n{DEMO_TOML}"));
    let server = HttpServer::start_at("0.0.0.0:0", &["--out-of-band", "--config", config.arg()], 1);
    let port = server.address.rsplit(':').next().unwrap().to_string();
    let (url, _) = start_flow(&format!("http://127.0.0.1:{port}/mcp")).await;
    assert!(url.starts_with("https://notes.test/connect/"), "{url}");
    let reached = url.replace("https://notes.test", &format!("http://127.0.0.1:{port}"));
    let form = send(reqwest::Method::GET, &reached, &Sent { host: Some("notes.test"), ..Sent::default() }).await;
    assert_eq!(form.outcome(), "sign_in");
    assert!(form.set_cookie(SIGN_IN_COOKIE).unwrap().contains("; Secure"), "{:?}", form.set_cookies);
}

/// A folder in the temp directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let path = std::env::temp_dir().join(format!("mcpsim-page-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Scratch(path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const OLD_KEY: [u8; 32] = [0x31; 32];
const NEW_KEY: [u8; 32] = [0x52; 32];

/// A private key file of `(id, key)` tables, the first signing.
fn key_file(keys: &[(&str, [u8; 32])]) -> TempConfig {
    let tables: Vec<String> = keys
        .iter()
        .map(|(id, key)| {
            format!("[[keys]]\nid = \"{id}\"\nsecret_base64 = \"{}\"\n", base64::engine::general_purpose::STANDARD.encode(key))
        })
        .collect();
    let file = TempConfig::new(&tables.join("\n"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file.path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    file
}

type Hmac256 = Hmac<Sha256>;

fn hmac(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut mac = Hmac256::new_from_slice(key).unwrap();
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

/// A session cookie for `principal` sealed as the page seals them (`s1.KEY_ID.PAYLOAD.TAG`), under `key`.
fn forge_session(key_id: &str, key: &[u8], principal: &str) -> String {
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let payload = b64(json!({ "signedIn": principal, "sessionExpiresAtMs": 4_000_000_000_000u64 }).to_string().as_bytes());
    let signed = format!("s1.{key_id}.{payload}");
    format!("{SESSION_COOKIE}={signed}.{}", b64(&hmac(key, &[signed.as_bytes()])))
}

/// The page key of a ring key, as documented: HKDF-SHA256 (RFC 5869), salt "mcpsim derived key v1", info
/// "mcpsim out-of-band page sessions v1", one 32-byte block. Computed here independently of mcpsim.
fn page_key(ring_key: &[u8]) -> Vec<u8> {
    let pseudo_random_key = hmac(b"mcpsim derived key v1", &[ring_key]);
    hmac(&pseudo_random_key, &[b"mcpsim out-of-band page sessions v1", &[1]])
}

#[tokio::test]
async fn a_page_session_from_one_process_is_accepted_by_another_of_the_fleet() {
    let scratch = Scratch::new("fleet");
    let store = format!("sqlite:{}", scratch.0.join("fleet.db").display());
    let (code, _, stderr) = run_with_env(&["seed", "--store", &store], &[]);
    assert_eq!(code, Some(0), "mcpsim seed: {stderr}");
    let keys = key_file(&[("old", OLD_KEY)]);
    let fleet_process = |keys: &TempConfig| HttpServer::start(&["--out-of-band", "--store", &store, "--key-file", keys.arg()]);
    let first = fleet_process(&keys);
    let second = fleet_process(&keys);
    let (url, retry) = start_flow(&first.url).await;
    let on = |server: &HttpServer| url.replace(&first.address, &server.address);
    let origin_of = |server: &HttpServer| format!("http://{}", server.address);
    let (first_origin, second_origin) = (origin_of(&first), origin_of(&second));

    // The load balancer sends the form's GET to process 1 and its post to process 2: the sign-in works.
    let mut browser = Browser::new();
    let form = browser.get(&on(&first)).await;
    browser.origin = Some(&second_origin);
    let signed = browser.post(&format!("{}/sign-in", on(&second)), &[("csrf", form.csrf()), ("token", ALICE.into())]).await;
    assert_eq!(signed.status, 303, "process 2 accepts process 1's pre-session cookie and token: {}", signed.body);

    // Signed in by process 2, shown by process 1; process 1's CSRF token is accepted by process 2. Before the
    // submit, the same cookie is accepted by a process whose ring was rotated (new key signs, the old one
    // still verifies), and refused by processes that do not hold the old key.
    browser.origin = Some(&first_origin);
    let ready = browser.get(&on(&first)).await;
    assert_eq!((ready.status, ready.outcome()), (200, "ready"), "process 1 accepts process 2's session: {}", ready.body);
    let rotated_keys = key_file(&[("new", NEW_KEY), ("old", OLD_KEY)]);
    let rotated = fleet_process(&rotated_keys);
    let shown = browser.get(&on(&rotated)).await;
    assert_eq!((shown.status, shown.outcome()), (200, "ready"), "a rotated ring still verifies the old key's session");
    let retired_keys = key_file(&[("new", NEW_KEY)]);
    let retired = fleet_process(&retired_keys);
    let shown = browser.get(&on(&retired)).await;
    assert_eq!((shown.status, shown.outcome()), (200, "sign_in"), "the old key retired, its sessions end");
    let other_keys = key_file(&[("old", NEW_KEY)]);
    let other = fleet_process(&other_keys);
    let shown = browser.get(&on(&other)).await;
    assert_eq!((shown.status, shown.outcome()), (200, "sign_in"), "same key id, another key: refused");

    // The page's key is derived from the ring's, never the ring's key itself.
    let second_url = on(&second);
    let with_cookie = |cookie: String| Sent { cookies: vec![cookie], ..Sent::default() };
    let raw = send(reqwest::Method::GET, &second_url, &with_cookie(forge_session("old", &OLD_KEY, "alice"))).await;
    assert_eq!(raw.outcome(), "sign_in", "a session sealed with the raw signing key is refused");
    let derived = send(reqwest::Method::GET, &second_url, &with_cookie(forge_session("old", &page_key(&OLD_KEY), "alice"))).await;
    assert_eq!(derived.outcome(), "ready", "the documented derivation: {}", derived.body);

    browser.origin = Some(&second_origin);
    let done = browser.post(&second_url, &[("csrf", ready.csrf())]).await;
    assert_eq!((done.status, done.outcome()), (200, "completed"), "{}", done.body);
    assert!(retry_publishes(&first.url, &retry).await, "process 1 publishes what was authorized on process 2");
}

#[tokio::test]
async fn a_page_post_over_16_kib_is_refused_413_and_changes_nothing() {
    let server = HttpServer::start(&["--out-of-band", "--page-sign-in-interval-ms", "1"]);
    let (url, retry) = start_flow(&server.url).await;
    let padding = "x".repeat(16 * 1024);

    // A sign-in with the right token and a valid form, over 16 KiB: 413, and nobody is signed in.
    let mut alice = Browser::new();
    let form = alice.get(&url).await;
    let signed = alice.post(&format!("{url}/sign-in"), &[("csrf", form.csrf()), ("token", ALICE.into()), ("pad", padding.clone())]).await;
    assert_eq!(signed.status, 413, "{}", signed.body);
    assert!(signed.body.contains("at most 16384 bytes"), "{}", signed.body);
    assert!(signed.set_cookie(SESSION_COOKIE).is_none(), "an oversized sign-in signs nobody in");
    assert_eq!(alice.get(&url).await.outcome(), "sign_in", "still signed out");

    // Signed in, a submit with a valid CSRF token over 16 KiB: 413, and the flow is still open.
    alice.sign_in(&url, ALICE).await;
    let ready = alice.get(&url).await;
    assert_eq!(ready.outcome(), "ready");
    let submitted = alice.post(&url, &[("csrf", ready.csrf()), ("pad", padding)]).await;
    assert_eq!(submitted.status, 413, "{}", submitted.body);
    assert!(!retry_publishes(&server.url, &retry).await, "an oversized submit completed nothing");
    assert_eq!(alice.get(&url).await.outcome(), "ready", "the flow is still open");

    // The same submit within the bound completes it (so the refusal above was the size's).
    let done = alice.post(&url, &[("csrf", ready.csrf())]).await;
    assert_eq!((done.status, done.outcome()), (200, "completed"), "{}", done.body);
    assert!(retry_publishes(&server.url, &retry).await);
}
