//! End to end over stdio: the real `mcpsim serve --stdio` process, newline-delimited JSON-RPC.

mod e2e_support;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use e2e_support::*;
use serde_json::{json, Value};

#[test]
fn two_rounds_over_stdio_delete_the_chosen_note() {
    let mut server = StdioServer::start(&[]);
    assert_eq!(resource_names(&server.call(&resources_list(1))), ["note-3", "note-7", "note-14", "note-99"]);
    let state = state_of(&server.call(&round_one(2)));
    assert_deleted(&server.call(&round_two(3, &state, "note-7")), "note-7");
    assert_eq!(resource_names(&server.call(&resources_list(4))), ["note-3", "note-14", "note-99"]);
    assert_eq!(reason(&server.call(&round_two(5, &state, "note-3"))), "state_consumed", "one confirmation, one delete");

    let (status, stdout, stderr) = server.finish_with_stderr();
    assert!(status.success(), "end of input stops the server cleanly: {status:?}");
    assert_eq!(stdout.len(), 5, "one line per response, nothing else on stdout: {stdout:?}");
    for line in &stdout {
        serde_json::from_str::<Value>(line).expect("every stdout line is a JSON-RPC message");
    }
    let logs = stderr.join("\n");
    assert!(logs.contains("tool=\"notes_delete\""), "{logs}");
    assert!(!logs.contains(&state) && !logs.contains("TPS report\""), "logs never carry requestState or argument values: {logs}");
}

#[test]
fn notifications_and_blank_lines_get_no_output_and_notifications_are_not_executed() {
    let mut server = StdioServer::start(&[]);
    let state = state_of(&server.call(&round_one(1)));
    // A fully valid accept, sent as a notification: never executed, never answered.
    server.send(&as_notification(round_two(2, &state, "note-7")));
    server.send_raw(b"\n   \r\n\t\n");
    assert_eq!(resource_names(&server.call(&resources_list(3))), ["note-3", "note-7", "note-14", "note-99"]);
    // The nonce was not consumed either: the same state still deletes, exactly once.
    assert_deleted(&server.call(&round_two(4, &state, "note-7")), "note-7");
}

#[test]
fn an_overlong_line_is_refused_with_null_id_and_the_next_line_is_served() {
    let mut server = StdioServer::start(&[]);
    let mut huge = round_one(1);
    huge["params"]["arguments"]["title"] = json!("x".repeat(1024 * 1024 + 10));
    server.send(&huge);
    let refused = server.receive();
    assert_eq!(refused["id"], Value::Null);
    assert_eq!(refused["error"]["code"], -32600);
    assert_eq!(reason(&refused), "payload_too_large");
    assert_eq!(server.call(&resources_list(2))["id"], 2);
}

#[test]
fn garbage_and_bad_envelopes_get_json_rpc_errors() {
    let mut server = StdioServer::start(&[]);
    server.send_raw(b"{not json\n");
    assert_eq!(server.receive()["error"]["code"], -32700);
    server.send_raw(b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}]\n");
    assert_eq!(server.receive()["error"]["code"], -32600);
    let unknown = request(9, "initialize", json!({}));
    assert_eq!(server.call(&unknown)["error"]["code"], -32601);
}

#[test]
fn the_principal_flag_decides_who_is_served() {
    let mut bob = StdioServer::start(&["--principal", "bob"]);
    assert_eq!(resource_names(&bob.call(&resources_list(1))), ["note-300"]);
    assert_eq!(reason(&bob.call(&round_one(2))), "workspace_unauthorized", "alice's workspace is not bob's");
}

#[test]
fn a_state_from_one_process_fails_closed_on_another_without_shared_keys() {
    let mut first = StdioServer::start(&[]);
    let mut second = StdioServer::start(&[]);
    let state = state_of(&first.call(&round_one(1)));
    assert_eq!(reason(&second.call(&round_two(1, &state, "note-7"))), "state_signature");
    assert_deleted(&first.call(&round_two(2, &state, "note-7")), "note-7");
}

#[test]
fn the_state_ttl_flag_bounds_how_long_a_confirmation_lives() {
    let mut server = StdioServer::start(&["--state-ttl", "1"]);
    let state = state_of(&server.call(&round_one(1)));
    // The expiry is sealed into the state (milliseconds since the epoch); 1 s after issue.
    let payload = state.split('.').nth(2).unwrap();
    let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
    assert_eq!(claims["expiresAtMs"].as_u64().unwrap() - claims["issuedAtMs"].as_u64().unwrap(), 1_000);
}

#[test]
fn request_scoped_notifications_come_as_lines_before_the_response() {
    let mut server = StdioServer::start(&["--fixture", "conformance"]);
    let mut message = request(1, "tools/call", json!({ "name": "test_tool_with_progress", "arguments": {} }));
    message["params"]["_meta"]["progressToken"] = json!("p-1");
    server.send(&message);
    let progress: Vec<Value> = (0..3).map(|_| server.receive()).collect();
    for (event, expected) in progress.iter().zip([0, 50, 100]) {
        assert_eq!(
            (event["method"].as_str(), event["params"]["progress"].as_i64()),
            (Some("notifications/progress"), Some(expected)),
            "{event}"
        );
    }
    assert_eq!(server.receive()["id"], 1, "the response follows its notifications");

    // A subscription is not held open on stdio: acknowledged, then closed at once with its result.
    server.send(&request(2, "subscriptions/listen", json!({ "notifications": { "toolsListChanged": true } })));
    assert_eq!(server.receive()["method"], "notifications/subscriptions/acknowledged");
    let closing = server.receive();
    assert_eq!((closing["id"].clone(), closing["result"]["resultType"].clone()), (json!(2), json!("complete")), "{closing}");
}

#[test]
fn cli_errors_say_what_to_do_next() {
    let (code, stderr) = run_to_exit(&["serve", "--stdio", "--principal", "carol"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("unknown principal \"carol\"") && stderr.contains("alice, bob"), "{stderr}");

    let (code, stderr) = run_to_exit(&["serve", "--stdio", "--config", "/nonexistent/mcpsim.toml"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("/nonexistent/mcpsim.toml") && stderr.contains("omit --config"), "{stderr}");

    let broken = TempConfig::new("[principals.alice]\nworkspaces = [\"http://not-a-file-uri\"]\n");
    let (code, stderr) = run_to_exit(&["serve", "--stdio", "--config", broken.arg()]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("principal alice") && stderr.contains("--help"), "{stderr}");

    let (code, stderr) = run_to_exit(&["serve"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("--stdio") && stderr.contains("--http"), "{stderr}");

    let (code, stderr) = run_to_exit(&["serve", "--stdio", "--state-ttl", "0"]);
    assert_eq!(code, Some(2), "{stderr}");

    let (code, stderr) = run_to_exit(&["serve", "--stdio", "--allow-origin", "https://app.example.com"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("--allow-origin"), "{stderr}");
}
