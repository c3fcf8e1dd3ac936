//! The conformance fixture driven through the shared pipeline with the payloads the official conformance
//! suite (0.2.0-alpha.12, `--requirements 2026-07-28`) sends: same methods, params, `_meta`, capabilities
//! and routing headers. Each test names the scenario it stands for.

use mcpsim::testing::MemoryChangeFeed;
use mcpsim::testing::RoutingHeaders;
use mcpsim::testing::{handle_exchange, handle_message, Exchange};
use mcpsim::testing::{Clock, NonceSource};
use mcpsim::testing::{ConformanceFixture, FixtureConfig, PNG_BASE64};
use mcpsim::testing::{KeyRing, StateClaims};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const PRINCIPAL: &str = "anonymous";

struct StepClock(AtomicU64);

impl Clock for StepClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

struct CountingNonces(AtomicU64);

impl NonceSource for CountingNonces {
    fn nonce(&self) -> [u8; 16] {
        let n = self.0.fetch_add(1, Ordering::SeqCst);
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&n.to_be_bytes());
        bytes
    }
}

fn key_ring() -> KeyRing {
    KeyRing::new("k1", vec![42u8; 32]).unwrap()
}

struct Harness {
    fixture: ConformanceFixture,
    clock: Arc<StepClock>,
    feed: Arc<MemoryChangeFeed>,
    next_id: AtomicU64,
}

/// The suite's default capabilities.
fn default_capabilities() -> Value {
    json!({ "sampling": {}, "elicitation": {}, "roots": { "listChanged": true } })
}

impl Harness {
    fn new() -> Harness {
        let clock = Arc::new(StepClock(AtomicU64::new(1_000_000)));
        let feed = Arc::new(MemoryChangeFeed::new());
        let fixture = ConformanceFixture {
            config: Arc::new(FixtureConfig::new(key_ring())),
            clock: clock.clone(),
            nonces: Arc::new(CountingNonces(AtomicU64::new(1))),
            changes: feed.clone(),
        };
        Harness { fixture, clock, feed, next_id: AtomicU64::new(1) }
    }

    /// Like the suite: `_meta` with version, clientInfo and `capabilities`, plus the routing headers.
    fn request(&self, method: &str, mut params: Value, capabilities: Value) -> (Vec<u8>, RoutingHeaders) {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let mut meta = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": { "name": "conformance-test-client", "version": "1.0.0" },
            "io.modelcontextprotocol/clientCapabilities": capabilities,
        });
        if let Some(extra) = params.get("_meta").and_then(Value::as_object) {
            for (key, value) in extra {
                meta[key] = value.clone();
            }
        }
        params["_meta"] = meta;
        let name = match method {
            "tools/call" | "prompts/get" => params.get("name").and_then(Value::as_str).map(String::from),
            "resources/read" => params.get("uri").and_then(Value::as_str).map(String::from),
            _ => None,
        };
        let headers = RoutingHeaders { protocol_version: Some("2026-07-28".into()), method: Some(method.into()), name };
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        (serde_json::to_vec(&body).unwrap(), headers)
    }

    async fn exchange_with(&self, method: &str, params: Value, capabilities: Value) -> Exchange {
        let (body, headers) = self.request(method, params, capabilities);
        handle_exchange(&self.fixture, PRINCIPAL, &body, Some(&headers)).await
    }

    async fn exchange(&self, method: &str, params: Value) -> Exchange {
        self.exchange_with(method, params, default_capabilities()).await
    }

    /// The response's `result`, failing the test on an error response.
    async fn result(&self, method: &str, params: Value) -> Value {
        let exchange = self.exchange(method, params).await;
        result_of(&exchange)
    }

    /// `(code, http status, data)` of an error response.
    async fn error(&self, method: &str, params: Value) -> (i64, u16, Value) {
        let exchange = self.exchange(method, params).await;
        error_of(&exchange)
    }
}

fn result_of(exchange: &Exchange) -> Value {
    let response = exchange.reply.response.as_ref().expect("a response");
    assert!(response.get("error").is_none(), "unexpected error: {response}");
    assert_eq!(exchange.reply.http_status, 200);
    response["result"].clone()
}

fn error_of(exchange: &Exchange) -> (i64, u16, Value) {
    let response = exchange.reply.response.as_ref().expect("a response");
    let error = response.get("error").unwrap_or_else(|| panic!("expected an error, got {response}"));
    (error["code"].as_i64().unwrap(), exchange.reply.http_status, error.get("data").cloned().unwrap_or(Value::Null))
}

fn text_of(result: &Value) -> String {
    result["content"][0]["text"].as_str().unwrap_or_default().to_string()
}

fn accept(content: Value) -> Value {
    json!({ "action": "accept", "content": content })
}

fn sampled(text: &str) -> Value {
    json!({ "role": "assistant", "content": { "type": "text", "text": text }, "model": "test-model", "stopReason": "endTurn" })
}

fn roots() -> Value {
    json!({ "roots": [{ "uri": "file:///test/root", "name": "Test Root" }] })
}

fn call(name: &str, extra: Value) -> Value {
    let mut params = json!({ "name": name, "arguments": {} });
    if let Value::Object(extra) = extra {
        for (key, value) in extra {
            params[key] = value;
        }
    }
    params
}

fn assert_cacheable(result: &Value) {
    assert!(result["ttlMs"].as_u64().is_some(), "ttlMs missing: {result}");
    assert!(matches!(result["cacheScope"].as_str(), Some("public" | "private")), "cacheScope missing: {result}");
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "mcpsim-conformance");
}

// ----- server-stateless --------------------------------------------------------------------------------

#[tokio::test]
async fn discover_declares_what_the_fixture_serves() {
    let h = Harness::new();
    let result = h.result("server/discover", json!({})).await;
    assert_eq!(result["supportedVersions"], json!(["2026-07-28"]));
    let capabilities = &result["capabilities"];
    assert_eq!(capabilities["tools"]["listChanged"], true);
    assert_eq!(capabilities["prompts"]["listChanged"], true);
    assert!(capabilities["resources"].is_object() && capabilities["completions"].is_object());
    assert!(capabilities.get("roots").is_none());
    assert_cacheable(&result);
}

#[tokio::test]
async fn meta_probes_are_refused_with_400_and_the_request_id() {
    let h = Harness::new();
    for (id, params) in [
        (101, json!({})),
        (102, json!({ "_meta": { "io.modelcontextprotocol/clientCapabilities": {} } })),
        (104, json!({ "_meta": { "io.modelcontextprotocol/protocolVersion": "2026-07-28" } })),
    ] {
        let body = serde_json::to_vec(&json!({ "jsonrpc": "2.0", "id": id, "method": "server/discover", "params": params })).unwrap();
        let headers = RoutingHeaders { protocol_version: Some("2026-07-28".into()), method: Some("server/discover".into()), name: None };
        let reply = handle_message(&h.fixture, PRINCIPAL, &body, Some(&headers)).await;
        let response = reply.response.unwrap();
        assert_eq!((response["error"]["code"].as_i64(), reply.http_status, response["id"].as_i64()), (Some(-32602), 400, Some(id)));
    }
}

#[tokio::test]
async fn version_and_header_probes_match_the_suite() {
    let h = Harness::new();
    let unsupported = json!({ "jsonrpc": "2.0", "id": 301, "method": "server/discover", "params": { "_meta": {
        "io.modelcontextprotocol/protocolVersion": "v999.0.0", "io.modelcontextprotocol/clientCapabilities": {} } } });
    let body = serde_json::to_vec(&unsupported).unwrap();
    let both = RoutingHeaders { protocol_version: Some("v999.0.0".into()), method: Some("server/discover".into()), name: None };
    let reply = handle_message(&h.fixture, PRINCIPAL, &body, Some(&both)).await;
    let response = reply.response.unwrap();
    assert_eq!((response["error"]["code"].as_i64(), reply.http_status), (Some(-32022), 400));
    assert_eq!(response["error"]["data"], json!({ "supported": ["2026-07-28"], "requested": "v999.0.0" }));
    let header_only = RoutingHeaders { protocol_version: Some("2026-07-28".into()), ..both };
    let reply = handle_message(&h.fixture, PRINCIPAL, &body, Some(&header_only)).await;
    assert_eq!((reply.response.unwrap()["error"]["code"].as_i64(), reply.http_status), (Some(-32020), 400));
}

#[tokio::test]
async fn missing_sampling_capability_is_32021_with_a_capabilities_object() {
    let h = Harness::new();
    let exchange = h.exchange_with("tools/call", call("test_missing_capability", json!({})), json!({})).await;
    let (code, status, data) = error_of(&exchange);
    assert_eq!((code, status), (-32021, 400));
    assert_eq!(data, json!({ "requiredCapabilities": { "sampling": {} } }));
    // Declared: the tool really asks the client's model, and completes with its answer.
    let asked = h.result("tools/call", call("test_missing_capability", json!({}))).await;
    assert_eq!(asked["resultType"], "input_required");
    assert_eq!(asked["inputRequests"]["sample"]["method"], "sampling/createMessage");
    let done = h.result("tools/call", call("test_missing_capability", json!({ "inputResponses": { "sample": sampled("Hello") } }))).await;
    assert_eq!(text_of(&done), "The client's model said: Hello");
}

#[tokio::test]
async fn removed_and_unknown_methods_are_404() {
    let h = Harness::new();
    for method in ["initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe", "unknown/method"] {
        let (code, status, _) = h.error(method, json!({})).await;
        assert_eq!((code, status), (-32601, 404), "{method}");
    }
}

#[tokio::test]
async fn streaming_elicitation_streams_only_notifications_and_an_incomplete_result() {
    let h = Harness::new();
    let params = call("test_streaming_elicitation", json!({ "_meta": { "progressToken": "stream-1" } }));
    let exchange = h.exchange_with("tools/call", params, json!({ "elicitation": {} })).await;
    assert!(exchange.notifications.iter().all(|n| n["method"].as_str().unwrap().starts_with("notifications/") && n.get("id").is_none()));
    assert_eq!(exchange.notifications.len(), 2);
    let result = result_of(&exchange);
    assert_eq!(result["resultType"], "input_required");
    assert_eq!(result["inputRequests"]["continue"]["method"], "elicitation/create");
}

#[tokio::test]
async fn logging_tool_logs_only_when_the_request_opts_in() {
    let h = Harness::new();
    let silent = h.exchange("tools/call", call("test_logging_tool", json!({}))).await;
    assert!(silent.notifications.is_empty());
    assert!(text_of(&result_of(&silent)).contains("No log messages"));
    let opted =
        h.exchange("tools/call", call("test_logging_tool", json!({ "_meta": { "io.modelcontextprotocol/logLevel": "info" } }))).await;
    let levels: Vec<&str> = opted.notifications.iter().map(|n| n["params"]["level"].as_str().unwrap()).collect();
    assert_eq!(levels, ["info", "warning"]);
    assert!(opted.notifications.iter().all(|n| n["method"] == "notifications/message" && n["params"]["data"].is_string()));
    let (code, _, _) =
        h.error("tools/call", call("test_logging_tool", json!({ "_meta": { "io.modelcontextprotocol/logLevel": "loud" } }))).await;
    assert_eq!(code, -32602);
}

#[tokio::test]
async fn listen_acknowledges_first_and_forwards_only_requested_changes_tagged_with_its_id() {
    let h = Harness::new();
    let (body, headers) = h.request(
        "subscriptions/listen",
        json!({ "notifications": { "toolsListChanged": true, "resourceSubscriptions": ["x"] } }),
        json!({}),
    );
    let listen_id = serde_json::from_slice::<Value>(&body).unwrap()["id"].clone();
    let mut exchange = handle_exchange(&h.fixture, PRINCIPAL, &body, Some(&headers)).await;
    assert!(exchange.is_streamed());
    let acknowledged = &exchange.notifications[0];
    assert_eq!(acknowledged["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(acknowledged["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], listen_id);
    assert_eq!(acknowledged["params"]["notifications"], json!({ "toolsListChanged": true }), "only what is honoured is echoed");
    assert_eq!(h.feed.subscriber_count(), 1, "subscribed before acknowledging");
    // A prompt change is not for this stream; the tool change after it is.
    h.result("tools/call", call("test_trigger_prompt_change", json!({}))).await;
    h.result("tools/call", call("test_trigger_tool_change", json!({}))).await;
    let feed = exchange.feed.as_mut().unwrap();
    let next = feed.next_notification().await.unwrap();
    assert_eq!(next["method"], "notifications/tools/list_changed");
    assert_eq!(next["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], listen_id);
    let closing = result_of(&exchange);
    assert_eq!(closing["_meta"]["io.modelcontextprotocol/subscriptionId"], listen_id);
    drop(exchange);
    assert_eq!(h.feed.subscriber_count(), 0, "dropping the exchange unsubscribes");
}

#[tokio::test]
async fn listen_needs_a_filter() {
    let h = Harness::new();
    let (code, _, data) = h.error("subscriptions/listen", json!({})).await;
    assert_eq!((code, data["reason"].as_str()), (-32602, Some("arguments_invalid")));
}

// ----- tools --------------------------------------------------------------------------------------------

#[tokio::test]
async fn tools_list_is_valid_stable_and_complete() {
    let h = Harness::new();
    let first = h.result("tools/list", json!({})).await;
    assert_eq!(first, h.result("tools/list", json!({})).await, "byte-identical on every call");
    assert_cacheable(&first);
    let names: Vec<&str> = first["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    for tool in first["tools"].as_array().unwrap() {
        let name = tool["name"].as_str().unwrap();
        assert!((1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_./-".contains(&b)));
        assert!(tool["description"].as_str().is_some_and(|d| !d.is_empty()));
        assert_eq!(tool["inputSchema"]["type"], "object");
    }
    for required in [
        "test_simple_text",
        "test_image_content",
        "test_audio_content",
        "test_embedded_resource",
        "test_multiple_content_types",
        "test_error_handling",
        "test_tool_with_progress",
        "test_missing_capability",
        "test_streaming_elicitation",
        "test_logging_tool",
        "test_trigger_tool_change",
        "test_trigger_prompt_change",
        "test_input_required_result_elicitation",
        "test_input_required_result_sampling",
        "test_input_required_result_list_roots",
        "test_input_required_result_request_state",
        "test_input_required_result_multiple_inputs",
        "test_input_required_result_multi_round",
        "test_input_required_result_tampered_state",
        "test_input_required_result_capabilities",
    ] {
        assert!(names.contains(&required), "{required}");
    }
}

#[tokio::test]
async fn content_tools_return_the_documented_content() {
    let h = Harness::new();
    // The suite omits `arguments` for test_simple_text.
    let simple = h.result("tools/call", json!({ "name": "test_simple_text" })).await;
    assert_eq!(text_of(&simple), "This is a simple text response for testing.");
    let image = h.result("tools/call", call("test_image_content", json!({}))).await;
    assert_eq!((image["content"][0]["type"].as_str(), image["content"][0]["mimeType"].as_str()), (Some("image"), Some("image/png")));
    assert_eq!(image["content"][0]["data"], PNG_BASE64);
    let audio = h.result("tools/call", call("test_audio_content", json!({}))).await;
    assert_eq!((audio["content"][0]["type"].as_str(), audio["content"][0]["mimeType"].as_str()), (Some("audio"), Some("audio/wav")));
    let embedded = h.result("tools/call", call("test_embedded_resource", json!({}))).await;
    assert_eq!(embedded["content"][0]["resource"]["uri"], "test://embedded-resource");
    assert_eq!(embedded["content"][0]["resource"]["text"], "This is an embedded resource content.");
    let mixed = h.result("tools/call", call("test_multiple_content_types", json!({}))).await;
    let kinds: Vec<&str> = mixed["content"].as_array().unwrap().iter().map(|c| c["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["text", "image", "resource"]);
    let failed = h.result("tools/call", call("test_error_handling", json!({}))).await;
    assert_eq!(
        (failed["isError"].as_bool(), text_of(&failed).as_str()),
        (Some(true), "This tool intentionally returns an error for testing")
    );
}

#[tokio::test]
async fn tools_refuse_unknown_names_and_arguments() {
    let h = Harness::new();
    let (code, _, data) = h.error("tools/call", call("no_such_tool", json!({}))).await;
    assert_eq!((code, data["reason"].as_str()), (-32602, Some("unknown_tool")));
    let (code, _, data) = h.error("tools/call", json!({ "name": "test_simple_text", "arguments": { "x": 1 } })).await;
    assert_eq!((code, data["reason"].as_str()), (-32602, Some("arguments_invalid")));
}

#[tokio::test]
async fn progress_goes_before_the_result_with_the_requests_token() {
    let h = Harness::new();
    let exchange =
        h.exchange("tools/call", call("test_tool_with_progress", json!({ "_meta": { "progressToken": "progress-test-1" } }))).await;
    let progress: Vec<u64> = exchange
        .notifications
        .iter()
        .map(|n| {
            assert_eq!(
                (n["method"].as_str(), n["params"]["progressToken"].as_str()),
                (Some("notifications/progress"), Some("progress-test-1"))
            );
            n["params"]["progress"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(progress, [0, 50, 100]);
    assert_eq!(result_of(&exchange)["resultType"], "complete");
    let quiet = h.exchange("tools/call", call("test_tool_with_progress", json!({}))).await;
    assert!(quiet.notifications.is_empty() && !quiet.is_streamed());
}

// ----- input-required-result-* ---------------------------------------------------------------------------

#[tokio::test]
async fn basic_elicitation_needs_no_state_and_greets() {
    let h = Harness::new();
    let name = "test_input_required_result_elicitation";
    let first = h.result("tools/call", call(name, json!({}))).await;
    assert_eq!(first["resultType"], "input_required");
    assert!(first.get("requestState").is_none());
    let request = &first["inputRequests"]["user_name"];
    assert_eq!((request["method"].as_str(), request["params"]["mode"].as_str()), (Some("elicitation/create"), Some("form")));
    assert_eq!(request["params"]["requestedSchema"]["required"], json!(["name"]));
    let done = h.result("tools/call", call(name, json!({ "inputResponses": { "user_name": accept(json!({ "name": "Alice" })) } }))).await;
    assert_eq!((done["resultType"].as_str(), text_of(&done).as_str()), (Some("complete"), "Hello, Alice!"));
}

#[tokio::test]
async fn missing_wrong_extra_and_invalid_responses() {
    let h = Harness::new();
    let name = "test_input_required_result_elicitation";
    // input-required-result-missing-input-response: ask again, no error.
    let again = h.result("tools/call", call(name, json!({ "inputResponses": { "wrong_key": accept(json!({ "data": "wrong" })) } }))).await;
    assert_eq!(again["resultType"], "input_required");
    assert!(again["inputRequests"]["user_name"].is_object());
    // input-required-result-ignore-extra-params.
    let extra = json!({ "inputResponses": {
        "user_name": accept(json!({ "name": "Alice" })),
        "unknown_extra_key": { "action": "accept", "content": { "foo": "bar" } },
        "another_unexpected": { "action": "accept", "content": { "baz": 123 } },
    } });
    assert_eq!(text_of(&h.result("tools/call", call(name, extra)).await), "Hello, Alice!");
    // input-required-result-validate-input: a number, then null.
    for responses in [json!({ "user_name": 12345 }), Value::Null, json!({ "user_name": { "action": "accept" } })] {
        let (code, _, data) = h.error("tools/call", call(name, json!({ "inputResponses": responses }))).await;
        assert_eq!((code, data["reason"].as_str()), (-32602, Some("response_invalid")), "{responses}");
    }
    // A refusal ends the flow as a result, not an error, and asks nothing more.
    let declined = h.result("tools/call", call(name, json!({ "inputResponses": { "user_name": { "action": "decline" } } }))).await;
    assert_eq!(declined["resultType"], "complete");
    assert!(text_of(&declined).contains("declined"));
}

#[tokio::test]
async fn basic_sampling_and_roots_round_trip() {
    let h = Harness::new();
    let first = h.result("tools/call", call("test_input_required_result_sampling", json!({}))).await;
    let (key, request) = first["inputRequests"].as_object().unwrap().iter().next().unwrap();
    assert_eq!((key.as_str(), request["method"].as_str()), ("capital_question", Some("sampling/createMessage")));
    assert_eq!(request["params"]["maxTokens"], 100);
    let done = h
        .result(
            "tools/call",
            call("test_input_required_result_sampling", json!({ "inputResponses": { key: sampled("The capital of France is Paris.") } })),
        )
        .await;
    assert_eq!(text_of(&done), "Sampling result: The capital of France is Paris.");
    let first = h.result("tools/call", call("test_input_required_result_list_roots", json!({}))).await;
    assert_eq!(first["inputRequests"]["client_roots"], json!({ "method": "roots/list", "params": {} }));
    let done = h
        .result("tools/call", call("test_input_required_result_list_roots", json!({ "inputResponses": { "client_roots": roots() } })))
        .await;
    assert!(text_of(&done).contains("1 root(s): file:///test/root"));
    let (code, _, _) = h
        .error(
            "tools/call",
            call(
                "test_input_required_result_list_roots",
                json!({ "inputResponses": { "client_roots": { "roots": [{ "uri": "https://x" }] } } }),
            ),
        )
        .await;
    assert_eq!(code, -32602, "roots are file:// URIs");
}

#[tokio::test]
async fn request_state_is_sealed_and_required_on_the_retry() {
    let h = Harness::new();
    let name = "test_input_required_result_request_state";
    let first = h.result("tools/call", call(name, json!({}))).await;
    let state = first["requestState"].as_str().unwrap().to_string();
    assert!(state.starts_with("s1.k1."), "sealed with the shared key ring: {state}");
    let answer = json!({ "confirm": accept(json!({ "ok": true })) });
    let done = h.result("tools/call", call(name, json!({ "inputResponses": answer, "requestState": state }))).await;
    assert!(text_of(&done).contains("state-ok"));
    let (code, _, data) = h.error("tools/call", call(name, json!({ "inputResponses": answer }))).await;
    assert_eq!((code, data["reason"].as_str()), (-32602, Some("continuation_unpaired")));
    let (_, _, data) = h.error("tools/call", call(name, json!({ "requestState": state }))).await;
    assert_eq!(data["reason"], "continuation_unpaired");
}

#[tokio::test]
async fn multiple_inputs_carry_partial_answers_in_a_new_state() {
    let h = Harness::new();
    let name = "test_input_required_result_multiple_inputs";
    let first = h.result("tools/call", call(name, json!({}))).await;
    let methods: Vec<&str> = first["inputRequests"].as_object().unwrap().values().map(|r| r["method"].as_str().unwrap()).collect();
    assert_eq!(methods.len(), 3);
    for method in ["elicitation/create", "sampling/createMessage", "roots/list"] {
        assert!(methods.contains(&method), "{method}");
    }
    // Answer one question: the other two are asked again, under a new state that remembers the first.
    let partial = json!({ "inputResponses": { "user_name": accept(json!({ "name": "Alice" })) }, "requestState": first["requestState"] });
    let second = h.result("tools/call", call(name, partial)).await;
    assert_eq!(second["resultType"], "input_required");
    let keys: Vec<&String> = second["inputRequests"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["client_roots", "greeting"]);
    assert_ne!(second["requestState"], first["requestState"]);
    let rest = json!({ "inputResponses": { "greeting": sampled("Hello there!"), "client_roots": roots() }, "requestState": second["requestState"] });
    let done = h.result("tools/call", call(name, rest)).await;
    assert_eq!(text_of(&done), "Name: Alice; Greeting: Hello there!; Roots: 1");
}

#[tokio::test]
async fn multi_round_asks_twice_with_evolving_state() {
    let h = Harness::new();
    let name = "test_input_required_result_multi_round";
    let first = h.result("tools/call", call(name, json!({}))).await;
    assert!(first["inputRequests"]["step1"].is_object());
    let second = h
        .result(
            "tools/call",
            call(name, json!({ "inputResponses": { "step1": accept(json!({ "name": "Alice" })) }, "requestState": first["requestState"] })),
        )
        .await;
    assert_eq!(second["resultType"], "input_required");
    assert!(second["inputRequests"]["step2"].is_object());
    assert_ne!(second["requestState"], first["requestState"]);
    let third = h
        .result(
            "tools/call",
            call(
                name,
                json!({ "inputResponses": { "step2": accept(json!({ "color": "blue" })) }, "requestState": second["requestState"] }),
            ),
        )
        .await;
    assert_eq!(text_of(&third), "Multi-round complete for Alice who likes blue");
    // The round-1 state cannot be answered with the round-2 question.
    let stale = h
        .result(
            "tools/call",
            call(name, json!({ "inputResponses": { "step2": accept(json!({ "color": "red" })) }, "requestState": first["requestState"] })),
        )
        .await;
    assert_eq!(stale["resultType"], "input_required", "step1 is still owed");
}

#[tokio::test]
async fn tampered_foreign_expired_and_rebound_states_are_refused() {
    let h = Harness::new();
    let name = "test_input_required_result_tampered_state";
    let first = h.result("tools/call", call(name, json!({}))).await;
    let state = first["requestState"].as_str().unwrap().to_string();
    let answer = json!({ "confirm": accept(json!({ "ok": true })) });
    let with = |state: &str| call(name, json!({ "inputResponses": answer, "requestState": state }));
    let reason = |data: Value| data["reason"].as_str().unwrap().to_string();
    let (code, status, data) = h.error("tools/call", with(&format!("{state}-TAMPERED"))).await;
    assert_eq!((code, status), (-32602, 200));
    assert!(["state_signature", "state_malformed"].contains(&reason(data).as_str()));
    // A state of another tool, and a notes-server state sealed with the same ring, do not open here.
    let other = h.result("tools/call", call("test_input_required_result_request_state", json!({}))).await;
    assert_eq!(reason(h.error("tools/call", with(other["requestState"].as_str().unwrap())).await.2), "state_mismatch");
    let notes_state = key_ring().seal(&StateClaims {
        principal: PRINCIPAL.into(),
        method: "tools/call".into(),
        tool: name.into(),
        arguments_digest: String::new(),
        candidates: vec![],
        revisions: Vec::new(),
        phase: "confirm".into(),
        issued_at_ms: 0,
        expires_at_ms: u64::MAX,
        nonce: "n".into(),
    });
    assert_eq!(reason(h.error("tools/call", with(&notes_state)).await.2), "state_malformed");
    // Another principal cannot use it.
    let (body, headers) = h.request("tools/call", with(&state), default_capabilities());
    let reply = handle_message(&h.fixture, "mallory", &body, Some(&headers)).await;
    assert_eq!(reply.response.unwrap()["error"]["data"]["reason"], "state_mismatch");
    // Untouched, it works until it expires.
    assert!(text_of(&h.result("tools/call", with(&state)).await).contains("integrity-ok"));
    h.clock.0.fetch_add(300_000, Ordering::SeqCst);
    assert_eq!(reason(h.error("tools/call", with(&state)).await.2), "state_expired");
}

#[tokio::test]
async fn capability_check_asks_only_through_declared_capabilities() {
    let h = Harness::new();
    let name = "test_input_required_result_capabilities";
    let exchange = h.exchange_with("tools/call", call(name, json!({})), json!({ "sampling": {} })).await;
    let result = result_of(&exchange);
    assert_eq!(result["resultType"], "input_required");
    let methods: Vec<&str> = result["inputRequests"].as_object().unwrap().values().map(|r| r["method"].as_str().unwrap()).collect();
    assert_eq!(methods, ["sampling/createMessage"]);
    let url_only = h.exchange_with("tools/call", call(name, json!({})), json!({ "elicitation": { "url": {} } })).await;
    assert!(text_of(&result_of(&url_only)).contains("nothing to ask"), "URL-only elicitation cannot show a form");
    let done = h
        .exchange_with(
            "tools/call",
            call(name, json!({ "inputResponses": { "sample_input": sampled("ok") }, "requestState": result["requestState"] })),
            json!({ "sampling": {} }),
        )
        .await;
    assert_eq!(text_of(&result_of(&done)), "capabilities-ok: received sample_input");
}

#[tokio::test]
async fn multiple_inputs_name_every_missing_capability() {
    let h = Harness::new();
    let exchange =
        h.exchange_with("tools/call", call("test_input_required_result_multiple_inputs", json!({})), json!({ "sampling": {} })).await;
    let (code, status, data) = error_of(&exchange);
    assert_eq!((code, status), (-32021, 400));
    assert_eq!(data["requiredCapabilities"], json!({ "elicitation": { "form": {} }, "roots": {} }));
}

#[tokio::test]
async fn list_methods_never_answer_input_required() {
    let h = Harness::new();
    for method in ["tools/list", "prompts/list", "resources/list", "resources/templates/list"] {
        assert_eq!(h.result(method, json!({})).await["resultType"], "complete", "{method}");
    }
}

// ----- prompts --------------------------------------------------------------------------------------------

#[tokio::test]
async fn prompts_list_and_get() {
    let h = Harness::new();
    let list = h.result("prompts/list", json!({})).await;
    assert_cacheable(&list);
    for prompt in list["prompts"].as_array().unwrap() {
        assert!(prompt["name"].is_string() && prompt["description"].is_string());
    }
    let simple = h.result("prompts/get", json!({ "name": "test_simple_prompt" })).await;
    assert_eq!(simple["messages"][0]["content"]["text"], "This is a simple prompt for testing.");
    let with_args = h
        .result("prompts/get", json!({ "name": "test_prompt_with_arguments", "arguments": { "arg1": "testValue1", "arg2": "testValue2" } }))
        .await;
    assert_eq!(with_args["messages"][0]["content"]["text"], "Prompt with arguments: arg1='testValue1', arg2='testValue2'");
    let embedded = h
        .result(
            "prompts/get",
            json!({ "name": "test_prompt_with_embedded_resource", "arguments": { "resourceUri": "test://example-resource" } }),
        )
        .await;
    assert_eq!(embedded["messages"][0]["content"]["resource"]["uri"], "test://example-resource");
    let image = h.result("prompts/get", json!({ "name": "test_prompt_with_image" })).await;
    assert_eq!(image["messages"][0]["content"]["type"], "image");
    let (code, _, data) = h.error("prompts/get", json!({ "name": "test_prompt_with_arguments", "arguments": { "arg1": "x" } })).await;
    assert_eq!((code, data["reason"].as_str()), (-32602, Some("arguments_invalid")));
    let (code, _, data) = h.error("prompts/get", json!({ "name": "nope" })).await;
    assert_eq!((code, data["reason"].as_str()), (-32602, Some("unknown_prompt")));
}

#[tokio::test]
async fn prompts_get_can_ask_for_input() {
    let h = Harness::new();
    let first = h.result("prompts/get", json!({ "name": "test_input_required_result_prompt" })).await;
    assert_eq!(first["resultType"], "input_required");
    assert_eq!(first["inputRequests"]["user_context"]["method"], "elicitation/create");
    let done = h
        .result(
            "prompts/get",
            json!({ "name": "test_input_required_result_prompt", "inputResponses": { "user_context": accept(json!({ "context": "test context" })) } }),
        )
        .await;
    assert_eq!(done["resultType"], "complete");
    assert_eq!(done["messages"][0]["content"]["text"], "Prompt with context: test context");
}

// ----- resources, caching, completion ---------------------------------------------------------------------

#[tokio::test]
async fn resources_read_templates_and_not_found() {
    let h = Harness::new();
    let list = h.result("resources/list", json!({})).await;
    assert_cacheable(&list);
    let uris: Vec<&str> = list["resources"].as_array().unwrap().iter().map(|r| r["uri"].as_str().unwrap()).collect();
    assert_eq!(uris, ["test://static-text", "test://static-binary"]);
    assert_cacheable(&h.result("resources/templates/list", json!({})).await);
    let text = h.result("resources/read", json!({ "uri": "test://static-text" })).await;
    assert_cacheable(&text);
    assert_eq!(text["contents"][0]["text"], "This is the content of the static text resource.");
    let binary = h.result("resources/read", json!({ "uri": "test://static-binary" })).await;
    assert_eq!((binary["contents"][0]["blob"].as_str(), binary["contents"][0]["mimeType"].as_str()), (Some(PNG_BASE64), Some("image/png")));
    let templated = h.result("resources/read", json!({ "uri": "test://template/123/data" })).await;
    let data: Value = serde_json::from_str(templated["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(data, json!({ "id": "123", "templateTest": true, "data": "Data for ID: 123" }));
    for missing in ["test://nonexistent-resource-for-conformance-testing", "test://template/../data", "test://template//data"] {
        let (code, _, data) = h.error("resources/read", json!({ "uri": missing })).await;
        assert_eq!((code, data["uri"].as_str(), data["reason"].as_str()), (-32602, Some(missing), Some("resource_not_found")));
    }
}

#[tokio::test]
async fn completion_filters_by_prefix() {
    let h = Harness::new();
    let result = h
        .result(
            "completion/complete",
            json!({ "ref": { "type": "ref/prompt", "name": "test_prompt_with_arguments" }, "argument": { "name": "arg1", "value": "test" } }),
        )
        .await;
    assert_eq!(result["completion"]["values"], json!(["test", "testValue1", "testing"]));
    let ids = h
        .result(
            "completion/complete",
            json!({ "ref": { "type": "ref/resource", "uri": "test://template/{id}/data" }, "argument": { "name": "id", "value": "1" } }),
        )
        .await;
    assert_eq!(ids["completion"]["values"], json!(["1", "123"]));
    let (code, _, data) = h
        .error("completion/complete", json!({ "ref": { "type": "ref/prompt", "name": "nope" }, "argument": { "name": "a", "value": "" } }))
        .await;
    assert_eq!((code, data["reason"].as_str()), (-32602, Some("unknown_prompt")));
}

#[tokio::test]
async fn answers_too_long_to_carry_are_refused_not_sealed_unopenable() {
    let h = Harness::new();
    let name = "test_input_required_result_multiple_inputs";
    let first = h.result("tools/call", call(name, json!({}))).await;
    // 500 control characters serialize as 3000 bytes; with the other carried answers the state would not open.
    let long = "\u{1}".repeat(500);
    let answer = json!({ "user_name": accept(json!({ "name": long })), "greeting": sampled(&"\u{2}".repeat(200)) });
    let partial = json!({ "inputResponses": answer, "requestState": first["requestState"] });
    match h.exchange("tools/call", call(name, partial)).await.reply.response.unwrap() {
        response if response.get("error").is_some() => assert_eq!(response["error"]["data"]["reason"], "response_invalid"),
        response => {
            let state = response["result"]["requestState"].as_str().unwrap().to_string();
            let rest = json!({ "inputResponses": { "client_roots": roots() }, "requestState": state });
            assert_eq!(h.result("tools/call", call(name, rest)).await["resultType"], "complete", "a minted state must open");
        }
    }
}
