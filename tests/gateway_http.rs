//! The security gateway end to end over streamable HTTP: the real `mcpsim serve --gateway --http` process,
//! attacked through its routing headers, its transport rules and its quotas.

mod e2e_support;

use e2e_support::{HttpServer, TempConfig, VERSION};
use serde_json::{json, Value};

const ALICE: &str = "demo-alice";
const BOB: &str = "demo-bob";

/// A gateway file with tight quotas, so quota effects show within a few requests.
const TIGHT_QUOTAS: &str = r#"
[backends.notes]
kind = "notes"
destinations = ["archive"]

[backends.issues]
kind = "issues"

[policy]
version = "http-test-1"

[policy.tools."notes.search"]
confirm = false
rate_limit = { calls = 1, window_ms = 3600000 }

[policy.tools."issues.search"]
confirm = false

[policy.tools."notes.export"]
confirm = true
destination_argument = "destination"

[policy.principals.alice.tools]
"notes.search" = {}
"issues.search" = {}
"notes.export" = { destinations = ["archive"] }

[policy.principals.bob.tools]
"notes.search" = {}
"issues.search" = {}
"#;

fn meta(capabilities: Value) -> Value {
    json!({ "io.modelcontextprotocol/protocolVersion": VERSION, "io.modelcontextprotocol/clientCapabilities": capabilities })
}

fn call(id: i64, name: &str, arguments: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "_meta": meta(json!({ "elicitation": { "form": {} } })), "name": name, "arguments": arguments } })
}

fn list(id: i64) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/list", "params": { "_meta": meta(json!({})) } })
}

/// The headers a conforming client sends for `message`.
fn conforming(message: &Value, token: &str) -> Vec<(String, String)> {
    let mut headers = vec![
        ("Authorization".to_string(), format!("Bearer {token}")),
        ("Content-Type".to_string(), "application/json".to_string()),
        ("Accept".to_string(), "application/json, text/event-stream".to_string()),
        ("MCP-Protocol-Version".to_string(), VERSION.to_string()),
        ("Mcp-Method".to_string(), message["method"].as_str().unwrap().to_string()),
    ];
    if let Some(name) = message["params"]["name"].as_str() {
        headers.push(("Mcp-Name".to_string(), name.to_string()));
    }
    headers
}

fn with(headers: &[(String, String)], name: &str, value: &str) -> Vec<(String, String)> {
    let mut headers: Vec<(String, String)> = headers.iter().filter(|(n, _)| !n.eq_ignore_ascii_case(name)).cloned().collect();
    headers.push((name.to_string(), value.to_string()));
    headers
}

async fn send(server: &HttpServer, method: reqwest::Method, headers: &[(String, String)], body: &Value) -> (u16, Option<Value>) {
    let mut request = reqwest::Client::new().request(method, &server.url).body(serde_json::to_vec(body).unwrap());
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let response = request.send().await.expect("the gateway answers");
    assert!(!response.headers().contains_key("mcp-session-id"), "no session is ever minted or echoed");
    let status = response.status().as_u16();
    let bytes = response.bytes().await.unwrap();
    (status, if bytes.is_empty() { None } else { Some(serde_json::from_slice(&bytes).expect("a JSON body")) })
}

async fn post(server: &HttpServer, headers: &[(String, String)], body: &Value) -> (u16, Value) {
    let (status, body) = send(server, reqwest::Method::POST, headers, body).await;
    (status, body.expect("a JSON-RPC response"))
}

fn reason(response: &Value) -> &str {
    response["error"]["data"]["reason"].as_str().unwrap_or("")
}

struct AuditFile(std::path::PathBuf);

impl AuditFile {
    fn new(name: &str) -> AuditFile {
        let path = std::env::temp_dir().join(format!("mcpsim-gateway-http-{name}-{}.jsonl", std::process::id()));
        let _ = std::fs::remove_file(&path);
        AuditFile(path)
    }

    fn arg(&self) -> &str {
        self.0.to_str().unwrap()
    }

    fn records(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.0).unwrap_or_default();
        text.lines().map(|line| serde_json::from_str(line).expect("one JSON object per line")).collect()
    }
}

impl Drop for AuditFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[tokio::test]
async fn header_body_confusion_is_400_and_spends_no_quota_nor_reaches_a_backend() {
    let config = TempConfig::new(TIGHT_QUOTAS);
    let audit = AuditFile::new("confusion");
    let server = HttpServer::start(&["--gateway", "--gateway-config", config.arg(), "--audit-log", audit.arg()]);
    let search = call(1, "notes.search", json!({ "query": "TPS" }));
    // bob may search, not export: a gateway that authorized the body and routed by the header would be fooled.
    for (header, value) in
        [("Mcp-Name", "notes.export"), ("Mcp-Name", "search"), ("Mcp-Method", "tools/list"), ("MCP-Protocol-Version", "2025-11-25")]
    {
        let headers = with(&conforming(&search, BOB), header, value);
        let (status, response) = post(&server, &headers, &search).await;
        assert_eq!((status, response["error"]["code"].as_i64()), (400, Some(-32020)), "{header}: {value}");
    }
    // Each refusal is audited where it happened (the pipeline's routing-header stage): nothing executed.
    let records = audit.records();
    assert_eq!(records.len(), 4, "{records:?}");
    for record in &records {
        assert_eq!((record["decision"].as_str(), record["stage"].as_str()), (Some("refused"), Some("routing_headers")), "{record}");
        assert_eq!(record["executionBegan"], json!(false), "{record}");
    }

    // bob's one call per hour is still there: none of the refused requests spent it.
    let (status, response) = post(&server, &conforming(&search, BOB), &search).await;
    assert_eq!((status, response["result"]["resultType"].as_str()), (200, Some("complete")), "{response}");
    let (status, response) = post(&server, &conforming(&search, BOB), &search).await;
    assert_eq!((status, reason(&response)), (429, "rate_limited"), "{response}");
    let records = audit.records();
    assert_eq!(records.len(), 6);
    assert_eq!((records[4]["decision"].as_str(), records[5]["stage"].as_str()), (Some("allowed"), Some("rate_limit")));
}

#[tokio::test]
async fn a_header_mismatched_call_over_http_leaves_exactly_one_refusal_record() {
    let audit = AuditFile::new("mismatch");
    let server = HttpServer::start(&["--gateway", "--audit-log", audit.arg()]);
    let search = call(7, "notes.search", json!({ "query": "TPS" }));
    let headers = with(&conforming(&search, ALICE), "Mcp-Name", "notes.export");
    let (status, response) = post(&server, &headers, &search).await;
    assert_eq!((status, response["error"]["code"].as_i64()), (400, Some(-32020)), "{response}");
    let records = audit.records();
    assert_eq!(records.len(), 1, "{records:?}");
    let record = &records[0];
    assert_eq!(record["decision"], json!("refused"), "{record}");
    assert_eq!(record["stage"], json!("routing_headers"), "{record}");
    assert_eq!(record["reason"], json!("header_mismatch"), "{record}");
    assert_eq!(record["outcome"], json!({ "error": -32020, "reason": "header_mismatch" }), "{record}");
    assert_eq!(record["executionBegan"], json!(false), "{record}");
    assert_eq!((record["principal"].as_str(), record["tool"].as_str()), (Some("alice"), Some("notes.search")), "{record}");
    assert_eq!(record["requestId"], json!(7), "{record}");

    // A request the pipeline refuses that is not a tool call (here an unknown method) is not a call to audit.
    let unknown = json!({ "jsonrpc": "2.0", "id": 8, "method": "tools/forget", "params": { "_meta": meta(json!({})) } });
    let (status, _) = post(&server, &conforming(&unknown, ALICE), &unknown).await;
    assert_eq!(status, 404);
    assert_eq!(audit.records().len(), 1);
}

#[tokio::test]
async fn quotas_follow_the_principal_whatever_session_or_client_it_claims() {
    let config = TempConfig::new(TIGHT_QUOTAS);
    let server = HttpServer::start(&["--gateway", "--gateway-config", config.arg()]);
    let search = call(1, "notes.search", json!({ "query": "TPS" }));
    let first = with(&conforming(&search, ALICE), "Mcp-Session-Id", "session-one");
    assert_eq!(post(&server, &first, &search).await.0, 200);
    let mut disguised = search.clone();
    disguised["params"]["_meta"]["io.modelcontextprotocol/clientInfo"] = json!({ "name": "a-brand-new-client", "version": "9" });
    let second = with(&conforming(&disguised, ALICE), "Mcp-Session-Id", "session-two");
    let (status, response) = post(&server, &second, &disguised).await;
    assert_eq!((status, reason(&response)), (429, "rate_limited"), "a new session id is not a new quota: {response}");
    assert!(response["error"]["data"]["retryAfterMs"].as_u64().unwrap() > 0);
    assert_eq!(post(&server, &conforming(&search, BOB), &search).await.0, 200, "bob's quota is his own");
    let issues = call(2, "issues.search", json!({ "query": "TPS" }));
    assert_eq!(post(&server, &conforming(&issues, ALICE), &issues).await.0, 200, "and each tool has its own");
}

#[tokio::test]
async fn qualified_names_route_through_mcp_name_and_listings_are_private() {
    let server = HttpServer::start(&["--gateway"]);
    let (status, response) = post(&server, &conforming(&list(1), ALICE), &list(1)).await;
    assert_eq!(status, 200);
    let names: Vec<&str> = response["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["issues.search", "notes.export", "notes.search"], "qualified, sorted, the look-alike withheld");
    assert_eq!(response["result"]["cacheScope"], "private");
    let (_, again) = post(&server, &conforming(&list(2), ALICE), &list(2)).await;
    assert_eq!(response["result"], again["result"], "deterministic");
    let (_, bobs) = post(&server, &conforming(&list(3), BOB), &list(3)).await;
    assert_eq!(bobs["result"]["tools"].as_array().unwrap().len(), 2);

    let issues = call(4, "issues.search", json!({ "query": "cover sheet" }));
    let (status, response) = post(&server, &conforming(&issues, ALICE), &issues).await;
    assert_eq!((status, response["result"]["structuredContent"]["results"][0]["id"].as_str()), (200, Some("ISSUE-12")));
    let bare = call(5, "search", json!({ "query": "TPS" }));
    let (status, response) = post(&server, &conforming(&bare, ALICE), &bare).await;
    assert_eq!((status, reason(&response)), (200, "unknown_tool"), "a bare name is never resolved by discovery order");
    let mirror = call(6, "notes_mirror.search", json!({ "query": "TPS" }));
    let (_, response) = post(&server, &conforming(&mirror, ALICE), &mirror).await;
    assert_eq!(response["error"]["data"]["quarantine"], "unreviewed");
}

#[tokio::test]
async fn transport_rules_hold_in_front_of_the_backends() {
    let server = HttpServer::start(&["--gateway"]);
    let search = call(1, "notes.search", json!({ "query": "TPS" }));
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let (status, _) = send(&server, method.clone(), &conforming(&search, ALICE), &search).await;
        assert_eq!(status, 405, "{method}");
    }
    let (status, _) =
        send(&server, reqwest::Method::POST, &with(&conforming(&search, ALICE), "Authorization", "Bearer nope"), &search).await;
    assert_eq!(status, 401);
    let (status, _) = send(&server, reqwest::Method::POST, &with(&conforming(&search, ALICE), "Accept", "application/json"), &search).await;
    assert_eq!(status, 406);
    let (status, _) = send(&server, reqwest::Method::POST, &with(&conforming(&search, ALICE), "Content-Type", "text/plain"), &search).await;
    assert_eq!(status, 415);

    let mut notification = search.clone();
    notification.as_object_mut().unwrap().remove("id");
    let (status, body) = send(&server, reqwest::Method::POST, &conforming(&notification, ALICE), &notification).await;
    assert_eq!((status, body), (202, None), "a notification is neither executed nor answered");

    let unknown = json!({ "jsonrpc": "2.0", "id": 2, "method": "resources/list", "params": { "_meta": meta(json!({})) } });
    let (status, response) = post(&server, &conforming(&unknown, ALICE), &unknown).await;
    assert_eq!((status, response["error"]["code"].as_i64()), (404, Some(-32601)));

    let mut old = search.clone();
    old["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2025-11-25");
    let headers = with(&conforming(&old, ALICE), "MCP-Protocol-Version", "2025-11-25");
    let (status, response) = post(&server, &headers, &old).await;
    assert_eq!((status, response["error"]["code"].as_i64()), (400, Some(-32022)));
    assert_eq!(response["error"]["data"], json!({ "supported": [VERSION], "requested": "2025-11-25" }));
}

#[tokio::test]
async fn export_needs_form_elicitation_then_a_confirmation_and_exports_once() {
    let audit = AuditFile::new("export");
    let server = HttpServer::start(&["--gateway", "--audit-log", audit.arg()]);
    let arguments = json!({ "query": "TPS hunter2", "destination": "archive" });
    let mut url_only = call(1, "notes.export", arguments.clone());
    url_only["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({ "elicitation": { "url": {} } });
    let (status, response) = post(&server, &conforming(&url_only, ALICE), &url_only).await;
    assert_eq!((status, response["error"]["code"].as_i64()), (400, Some(-32021)));
    assert_eq!(response["error"]["data"], json!({ "requiredCapabilities": { "elicitation": { "form": {} } } }));

    let round_one = call(2, "notes.export", arguments.clone());
    let (status, response) = post(&server, &conforming(&round_one, ALICE), &round_one).await;
    assert_eq!((status, response["result"]["resultType"].as_str()), (200, Some("input_required")));
    let state = response["result"]["requestState"].as_str().unwrap().to_string();

    let mut round_two = call(3, "notes.export", arguments.clone());
    round_two["params"]["requestState"] = json!(state);
    round_two["params"]["inputResponses"] = json!({ "confirm": { "action": "accept", "content": { "confirm": true } } });
    let (status, bobs) = post(&server, &conforming(&round_two, BOB), &round_two).await;
    assert_eq!((status, reason(&bobs)), (200, "tool_unauthorized"), "bob holds no grant, whatever state he replays");
    let (status, response) = post(&server, &conforming(&round_two, ALICE), &round_two).await;
    assert_eq!((status, response["result"]["structuredContent"]["outcome"].as_str()), (200, Some("exported")), "{response}");
    let first = response["result"]["structuredContent"].clone();
    let (_, replay) = post(&server, &conforming(&round_two, ALICE), &round_two).await;
    assert_eq!(replay["result"]["structuredContent"], first, "a replayed accept returns the first outcome, nothing new");

    let records = audit.records();
    let text = serde_json::to_string(&records).unwrap();
    assert!(!text.contains("hunter2") && !text.contains(&state), "the audit log holds digests, not arguments or states");
    let decisions: Vec<&str> = records.iter().map(|r| r["decision"].as_str().unwrap()).collect();
    assert_eq!(decisions, ["refused", "asked", "refused", "allowed", "allowed"]);
    assert_eq!(records[3]["approvedBy"], "alice");
    assert_eq!(records[4]["redriven"], true);
}

#[tokio::test]
async fn refused_confirmations_spend_no_quota() {
    // The demo allows alice 5 notes.export calls a minute. Round 2s refused for any reason (a tampered state, a
    // state without answers, confirm=false, a used state) spend nothing: five confirmed exports still fit.
    let server = HttpServer::start(&["--gateway"]);
    let arguments = json!({ "query": "TPS", "destination": "archive" });
    let mut id = 0;
    let mut next = |message: Value| {
        id += 1;
        let mut message = message;
        message["id"] = json!(id);
        message
    };
    let accept = json!({ "confirm": { "action": "accept", "content": { "confirm": true } } });
    let mut exported = Vec::new();
    for flow in 0..5 {
        let round_one = next(call(0, "notes.export", arguments.clone()));
        let (status, response) = post(&server, &conforming(&round_one, ALICE), &round_one).await;
        assert_eq!((status, response["result"]["resultType"].as_str()), (200, Some("input_required")), "flow {flow}: {response}");
        let state = response["result"]["requestState"].as_str().unwrap().to_string();
        let answer = |state: &str, responses: Option<Value>| {
            let mut message = call(0, "notes.export", arguments.clone());
            message["params"]["requestState"] = json!(state);
            if let Some(responses) = responses {
                message["params"]["inputResponses"] = responses;
            }
            message
        };
        let mut tampered = state.clone();
        tampered.replace_range(20..21, if &state[20..21] == "A" { "B" } else { "A" });
        let refusals = [
            (answer(&tampered, Some(accept.clone())), "a tampered state"),
            (answer(&state, None), "a state without answers"),
            (answer(&state, Some(json!({ "confirm": { "action": "accept", "content": { "confirm": false } } }))), "confirm=false"),
        ];
        for (message, what) in refusals {
            let message = next(message);
            let (_, response) = post(&server, &conforming(&message, ALICE), &message).await;
            assert!(response["error"].is_object(), "flow {flow}: {what} is refused: {response}");
            assert_ne!(reason(&response), "rate_limited", "flow {flow}: {response}");
        }
        let message = next(answer(&state, Some(accept.clone())));
        let (_, response) = post(&server, &conforming(&message, ALICE), &message).await;
        assert_eq!(response["result"]["structuredContent"]["outcome"], "exported", "flow {flow}: {response}");
        exported.push(response["result"]["structuredContent"]["exportId"].clone());
        // The used state declined afterwards: refused as consumed, and it spends nothing either.
        let message = next(answer(&state, Some(json!({ "confirm": { "action": "decline" } }))));
        let (_, response) = post(&server, &conforming(&message, ALICE), &message).await;
        assert_eq!(reason(&response), "state_consumed", "flow {flow}: {response}");
    }
    exported.dedup();
    assert_eq!(exported.len(), 5, "five confirmations, five exports");
    // The sixth call in the window is the one refused.
    let sixth = next(call(0, "notes.export", arguments.clone()));
    let (status, response) = post(&server, &conforming(&sixth, ALICE), &sixth).await;
    assert_eq!((status, reason(&response)), (429, "rate_limited"), "{response}");
}

/// Sends SIGHUP to the server and waits (bounded) for the stderr line containing `marker`, the `nth` such.
fn hang_up_and_wait(server: &HttpServer, marker: &str, nth: usize) {
    let sent = std::process::Command::new("kill").args(["-HUP", &server.pid().to_string()]).status().expect("kill runs");
    assert!(sent.success());
    for _ in 0..500 {
        if server.stderr().iter().filter(|line| line.contains(marker)).count() >= nth {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("no {marker:?} line after SIGHUP; stderr: {:?}", server.stderr());
}

fn listed(response: &Value) -> Vec<String> {
    response["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
}

/// The operator's revocation on a running gateway: SIGHUP re-reads `--pins FILE`. A pin removed from the file
/// (replaced by a rename, as `pins approve` writes it, so the sandbox's rule on the folder is what lets it be
/// read) is revoked from the next request on; a file that does not parse changes nothing and is logged.
#[tokio::test]
async fn sighup_reloads_the_pins_and_a_removed_pin_is_revoked() {
    let dir = std::env::temp_dir().join(format!("mcpsim-gateway-http-pins-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pins_path = dir.join("pins.json");
    let embedded: Value = serde_json::from_str(include_str!("../src/config/gateway_pins.json")).unwrap();
    std::fs::write(&pins_path, serde_json::to_vec_pretty(&embedded).unwrap()).unwrap();
    let server = HttpServer::start(&["--gateway", "--pins", pins_path.to_str().unwrap()]);
    assert!(server.stderr().iter().any(|l| l.contains("(SIGHUP reloads it)")), "{:?}", server.stderr());
    let (_, before) = post(&server, &conforming(&list(1), ALICE), &list(1)).await;
    assert!(listed(&before).contains(&"notes.search".to_string()), "{before}");

    let mut revoked = embedded.clone();
    revoked["pins"].as_object_mut().unwrap().remove("notes.search").expect("the demo pins notes.search");
    let next = dir.join("pins.json.tmp");
    std::fs::write(&next, serde_json::to_vec_pretty(&revoked).unwrap()).unwrap();
    std::fs::rename(&next, &pins_path).unwrap();
    hang_up_and_wait(&server, "SIGHUP: pins reloaded", 1);
    assert!(server.stderr().iter().any(|l| l.contains("1 withdrawn")), "{:?}", server.stderr());
    let (_, after) = post(&server, &conforming(&list(2), ALICE), &list(2)).await;
    assert!(!listed(&after).contains(&"notes.search".to_string()), "{after}");
    assert!(listed(&after).contains(&"issues.search".to_string()), "{after}");
    let search = call(3, "notes.search", json!({ "query": "TPS" }));
    let (_, refused) = post(&server, &conforming(&search, ALICE), &search).await;
    assert_eq!(reason(&refused), "tool_quarantined", "{refused}");

    std::fs::write(&pins_path, "{ not json").unwrap();
    hang_up_and_wait(&server, "SIGHUP: the pins in force stay", 1);
    let (_, kept) = post(&server, &conforming(&list(4), ALICE), &list(4)).await;
    assert_eq!(listed(&kept), listed(&after), "a bad file changes nothing");
    let (status, _) = server.terminate_with_stderr();
    assert!(status.success(), "the gateway outlived both signals and stopped cleanly: {status:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
