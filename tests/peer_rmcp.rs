//! The official Rust MCP SDK (`rmcp` 3.x, client side) as a real peer of `mcpsim serve --http`: it discovers
//! the server, lists, calls `notes_delete`, its elicitation handler accepts note-7, the SDK retries on its own
//! with a fresh id and the `requestState` echoed byte for byte, and the note is gone.
//!
//! The client talks through a recording proxy, so the retry is checked from what the SDK sent, not from what
//! it reports. (The TypeScript and Python SDKs run the same flow from `.ci/peers.sh`.)

mod e2e_support;

use e2e_support::recording::{RecordedExchange, RecordingProxy};
use e2e_support::*;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction, Implementation,
    ProtocolVersion,
};
use rmcp::service::{serve_client_with_lifecycle, ClientLifecycleMode, RequestContext, RoleClient};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, ErrorData};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

const CHOSEN_NOTE: &str = "note-7";

/// The "user": accepts the candidate the server offers, as a person picking from the form would, and keeps
/// the candidates each form offered.
#[derive(Clone, Default)]
struct AcceptChosenNote {
    offered: Arc<Mutex<Vec<Value>>>,
}

impl ClientHandler for AcceptChosenNote {
    fn get_info(&self) -> ClientConfig {
        let capabilities: ClientCapabilities =
            serde_json::from_value(json!({ "elicitation": { "form": {} } })).expect("a valid capabilities object");
        ClientConfig::new(capabilities, Implementation::new("mcpsim-peer-rmcp", "1.0.0"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let ElicitRequestParams::FormElicitationParams { requested_schema, .. } = request else {
            return Err(ErrorData::invalid_params("this client answers form elicitations only", None));
        };
        let schema = serde_json::to_value(&requested_schema).expect("a schema serializes");
        let candidates = schema["properties"]["note_id"]["enum"].clone();
        self.offered.lock().unwrap().push(candidates.clone());
        if !candidates.as_array().is_some_and(|ids| ids.contains(&json!(CHOSEN_NOTE))) {
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        }
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({ "note_id": CHOSEN_NOTE, "confirm": true })))
    }
}

fn tool_calls(exchanges: &[RecordedExchange]) -> Vec<&RecordedExchange> {
    exchanges.iter().filter(|exchange| exchange.rpc_method() == Some("tools/call")).collect()
}

#[tokio::test]
async fn rmcp_client_completes_notes_delete_with_its_own_retry() {
    let server = HttpServer::start(&[]);
    let proxy = RecordingProxy::start(&server.url).await;
    let handler = AcceptChosenNote::default();
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(proxy.url.clone()).auth_header("demo-alice"),
    );
    let lifecycle = ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
    let client = tokio::time::timeout(WAIT, serve_client_with_lifecycle(handler.clone(), transport, lifecycle))
        .await
        .expect("discovery answers in time")
        .unwrap_or_else(|error| panic!("rmcp discovers the server: {error}; server log: {:?}", server.stderr()));
    let server_info = client.peer_info().expect("discovery tells who the server is");
    assert_eq!(server_info.protocol_version, ProtocolVersion::V_2026_07_28);

    let tools = client.list_tools(None).await.expect("tools/list");
    assert!(tools.tools.iter().any(|tool| tool.name == "notes_delete"), "{tools:?}");
    let before = client.list_resources(None).await.expect("resources/list");
    assert!(before.resources.iter().any(|resource| resource.name == CHOSEN_NOTE), "{before:?}");

    let arguments = json!({ "workspaceUri": ALICE_WORKSPACE, "title": "TPS report" });
    let call = CallToolRequestParams::new("notes_delete").with_arguments(arguments.as_object().unwrap().clone());
    let result = tokio::time::timeout(WAIT, client.call_tool(call))
        .await
        .expect("the flow completes in time")
        .unwrap_or_else(|error| panic!("notes_delete completes: {error}; server log: {:?}", server.stderr()));
    assert_eq!(result.structured_content, Some(json!({ "deleted": true, "noteId": CHOSEN_NOTE, "outcome": "deleted" })), "{result:?}");
    assert_eq!(*handler.offered.lock().unwrap(), [json!(["note-3", "note-7", "note-14"])], "one form, offering alice's three reports");

    // The rounds as the SDK sent them.
    let exchanges = proxy.exchanges();
    let calls = tool_calls(&exchanges);
    assert_eq!(calls.len(), 2, "round 1 and one retry: {calls:#?}");
    let (first, retry) = (calls[0], calls[1]);
    let first_result = &first.rpc_response().expect("round 1 was answered")["result"];
    assert_eq!(first_result["resultType"], "input_required");
    assert_ne!(retry.request["id"], first.request["id"], "the retry is a new request with a fresh id");
    assert_eq!(retry.request["params"]["requestState"], first_result["requestState"], "requestState echoed byte for byte");
    assert_eq!(
        retry.request["params"]["inputResponses"],
        json!({ "delete_choice": { "action": "accept", "content": { "note_id": CHOSEN_NOTE, "confirm": true } } })
    );
    assert_eq!(retry.request["params"]["arguments"], arguments, "the retry repeats the original arguments");

    // The SDK may serve a cached list (the server allows it); a host that just deleted something refreshes.
    client.clear_response_cache().await;
    let after = client.list_resources(None).await.expect("resources/list");
    let names: Vec<&str> = after.resources.iter().map(|resource| resource.name.as_str()).collect();
    assert_eq!(names, ["note-3", "note-14", "note-99"], "note-7 is gone, the rest stay");
    client.cancel().await.expect("the client stops cleanly");
}
