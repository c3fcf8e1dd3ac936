//! `mcpsim demo`: the lesson exchange, message by message, against the embedded demo.
//!
//! The notes server here is the unchanged handler `mcpsim serve` runs, called in-process through
//! [`handle_message`] (no transport). A fixed key, a fixed clock and seeded nonces make every printed byte the
//! same on every run, so the output doubles as a snapshot test of the whole flow.

use crate::assembly::in_memory_notes_server;
use crate::config::{Deployment, DEFAULT_PRINCIPAL};
use crate::framework::handle_message;
use crate::policy::state::KeyRing;
use crate::servers::notes::{NotesServer, INPUT_DELETE_CHOICE, TOOL_NOTES_DELETE};
use crate::stores::deterministic::{ManualClock, SeededNonces};
use crate::wire::meta::{KEY_CLIENT_CAPABILITIES, KEY_CLIENT_INFO, KEY_PROTOCOL_VERSION};
use crate::wire::PROTOCOL_VERSION;
use serde_json::{json, Value};
use std::fmt::Write;
use std::process::ExitCode;
use std::sync::Arc;

/// 2026-07-28T09:00:00Z: the demo's clock never moves.
pub(crate) const DEMO_NOW_MS: u64 = 1_785_229_200_000;
pub(crate) const DEMO_NONCE_SEED: u64 = 20_260_728;
pub(crate) const DEMO_KEY_ID: &str = "demo";
/// A published key: fine for a walkthrough, never for a deployment (anyone could forge states with it).
pub(crate) const DEMO_KEY: &[u8; 32] = b"mcpsim-demo-key-not-for-real-use";

const WORKSPACE: &str = "file:///Users/alice/Documents/Notes";
const TITLE: &str = "TPS report";
const CHOSEN_NOTE: &str = "note-7";

/// Options of `mcpsim demo` (none yet: the walkthrough is fixed so its output is stable).
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  mcpsim demo                    # every message of the lesson exchange, with what each step shows
  mcpsim demo | less             # the same, to read at leisure

The same exchange on a simulated cluster of two instances: mcpsim run 02-retry-lands-on-another-instance
Exit status: 0 when every step got the expected outcome; 1 otherwise.")]
pub struct DemoArgs {}

pub fn run(_args: DemoArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("mcpsim demo: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let walkthrough = runtime.block_on(walkthrough());
    print!("{}", walkthrough.text);
    if walkthrough.succeeded {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The printed exchange and whether every step got its expected outcome.
#[derive(Debug, Clone)]
pub(crate) struct Walkthrough {
    pub text: String,
    pub succeeded: bool,
}

/// Builds the demo's notes server: the embedded deployment with the fixed key, clock and nonces.
pub(crate) fn demo_server() -> NotesServer {
    let key_ring = KeyRing::new(DEMO_KEY_ID, DEMO_KEY.to_vec()).expect("the demo key is 32 bytes");
    let clock = Arc::new(ManualClock::new(DEMO_NOW_MS));
    let nonces = Arc::new(SeededNonces::new(DEMO_NONCE_SEED));
    let (server, _) = in_memory_notes_server(&Deployment::demo(), key_ring, None, clock, nonces).expect("the embedded demo is valid");
    server
}

pub(crate) async fn walkthrough() -> Walkthrough {
    let mut script = Script { server: demo_server(), text: String::new() };
    let succeeded = script.play().await.is_ok();
    Walkthrough { text: script.text, succeeded }
}

struct Script {
    server: NotesServer,
    text: String,
}

/// A step that did not get its expected outcome (already printed).
struct StepFailed;

impl Script {
    async fn play(&mut self) -> Result<(), StepFailed> {
        self.line("mcpsim demo: the MCP 2026-07-28 lesson exchange, against the embedded demo notes server.");
        self.line(&format!(
            "The caller is principal {DEFAULT_PRINCIPAL:?} (over HTTP her bearer token would say so). A fixed key, clock and nonces make"
        ));
        self.line("this output the same on every run. → is what the client sends, ← what the server answers.");

        self.step(
            1,
            &[
                "server/discover: what does the server support? There is no initialize handshake and no session:",
                "every request carries its own _meta (protocol version, client capabilities).",
            ],
        );
        let response = self.exchange(request(1, "server/discover", json!({}))).await;
        let supported = response["result"]["supportedVersions"].as_array().is_some_and(|v| v.contains(&json!(PROTOCOL_VERSION)));
        self.expect(is_complete(&response) && supported, &format!("a complete result listing {PROTOCOL_VERSION}"))?;

        self.step(
            2,
            &[
                "tools/list: the tool descriptors, byte-identical on every call, so clients may cache and pin them.",
                "notes_delete takes explicit scope: the workspace to search and part of a title.",
            ],
        );
        let response = self.exchange(request(2, "tools/list", json!({}))).await;
        let listed = response["result"]["tools"].as_array().is_some_and(|tools| tools.iter().any(|tool| tool["name"] == TOOL_NOTES_DELETE));
        self.expect(is_complete(&response) && listed, "a complete result listing notes_delete")?;

        self.step(
            3,
            &[
                &format!("tools/call notes_delete, round 1: delete {TITLE:?} in alice's workspace. Three notes match"),
                "and every delete needs the user's choice, so the server deletes nothing yet: it answers",
                "input_required with a form (inputRequests) and a signed requestState.",
            ],
        );
        let arguments = json!({ "workspaceUri": WORKSPACE, "title": TITLE });
        let response = self.exchange(request(3, "tools/call", json!({ "name": TOOL_NOTES_DELETE, "arguments": arguments }))).await;
        let result = &response["result"];
        let form = &result["inputRequests"][INPUT_DELETE_CHOICE];
        let offered = &form["params"]["requestedSchema"]["properties"]["note_id"]["enum"];
        let request_state = result["requestState"].as_str().map(str::to_string);
        let expected_offer = json!(["note-3", "note-7", "note-14"]);
        self.expect(
            result["resultType"] == "input_required" && *offered == expected_offer && request_state.is_some(),
            "input_required offering note-3, note-7 and note-14, with a requestState",
        )?;
        let request_state = request_state.unwrap_or_default();

        self.step(
            4,
            &[
                "The host shows the form to the user. No message is sent: the server keeps nothing and waits for",
                "nothing. Everything round 2 needs travels in the requestState, sealed with the server's key.",
            ],
        );
        self.render_form(form);

        self.step(
            5,
            &[
                "tools/call notes_delete, round 2: the same call on a fresh id, the user's answer in inputResponses,",
                "the requestState echoed unchanged. Any instance holding the key can finish it: it re-verifies the",
                "state and the answer, re-checks the live note, claims the one-time nonce and deletes, atomically.",
            ],
        );
        let answer = json!({ "action": "accept", "content": { "note_id": CHOSEN_NOTE, "confirm": true } });
        let params = json!({
            "name": TOOL_NOTES_DELETE,
            "arguments": arguments,
            "inputResponses": { INPUT_DELETE_CHOICE: answer },
            "requestState": request_state,
        });
        let response = self.exchange(request(4, "tools/call", params)).await;
        let outcome = &response["result"]["structuredContent"];
        self.expect(
            is_complete(&response) && *outcome == json!({ "deleted": true, "noteId": CHOSEN_NOTE, "outcome": "deleted" }),
            "a complete result: deleted note-7",
        )?;

        self.step(
            6,
            &[
                "resources/list: note-7 is gone. Alice sees only notes inside her workspace: never bob's, never",
                "the \"evil twin\" in Notes-evil (a string prefix is not containment), never /tmp.",
            ],
        );
        let response = self.exchange(request(5, "resources/list", json!({}))).await;
        let names: Vec<&str> =
            response["result"]["resources"].as_array().map(|r| r.iter().filter_map(|r| r["name"].as_str()).collect()).unwrap_or_default();
        self.expect(is_complete(&response) && names == ["note-3", "note-14", "note-99"], "note-3, note-14 and note-99, without note-7")?;

        self.step(
            7,
            &[
                "Round 2 replayed with the same requestState, now picking note-3 (a stale retry, or someone who saw",
                "the state): its one-time nonce is already claimed, so nothing is deleted; the error says by what.",
            ],
        );
        let replay = json!({
            "name": TOOL_NOTES_DELETE,
            "arguments": arguments,
            "inputResponses": { INPUT_DELETE_CHOICE: { "action": "accept", "content": { "note_id": "note-3", "confirm": true } } },
            "requestState": request_state,
        });
        let response = self.exchange(request(6, "tools/call", replay)).await;
        let data = &response["error"]["data"];
        self.expect(
            data["reason"] == "state_consumed" && data["previousOutcome"]["noteId"] == CHOSEN_NOTE,
            "state_consumed, naming the earlier delete of note-7",
        )?;

        self.line("");
        self.line("Every step got the expected outcome: one confirmation, one delete, any instance.");
        Ok(())
    }

    fn line(&mut self, text: &str) {
        self.text.push_str(text);
        self.text.push('\n');
    }

    fn step(&mut self, number: u32, explanation: &[&str]) {
        self.line("");
        for (index, text) in explanation.iter().enumerate() {
            let lead = if index == 0 { format!("── Step {number}. ") } else { "   ".to_string() };
            self.line(&format!("{lead}{text}"));
        }
    }

    async fn exchange(&mut self, request: Value) -> Value {
        self.line("→");
        self.line(&pretty(&request));
        let bytes = serde_json::to_vec(&request).expect("serializing a serde_json::Value cannot fail");
        let reply = handle_message(&self.server, DEFAULT_PRINCIPAL, &bytes, None).await;
        let response = reply.response.unwrap_or(Value::Null);
        self.line("←");
        self.line(&pretty(&response));
        response
    }

    fn expect(&mut self, held: bool, expected: &str) -> Result<(), StepFailed> {
        if held {
            self.line(&format!("✓ {expected}"));
            Ok(())
        } else {
            self.line(&format!("✗ expected {expected}; stopping here."));
            Err(StepFailed)
        }
    }

    /// Prints the form the way a host would show it, from the `elicitation/create` request alone.
    fn render_form(&mut self, form: &Value) {
        let params = &form["params"];
        let mut shown = String::new();
        for line in params["message"].as_str().unwrap_or("").lines() {
            let _ = writeln!(shown, "   │ {line}");
        }
        let schema = &params["requestedSchema"];
        if let Some(properties) = schema["properties"].as_object() {
            for (field, property) in properties {
                let title = property["title"].as_str().unwrap_or(field);
                let choices = match property["enum"].as_array() {
                    Some(options) => options.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" | "),
                    None => property["type"].as_str().unwrap_or("value").to_string(),
                };
                let _ = writeln!(shown, "   │ [{field}] {title}: {choices}");
            }
        }
        let method = form["method"].as_str().unwrap_or("?");
        self.line(&format!("   ┌ inputRequests.{INPUT_DELETE_CHOICE}: {method}, mode {}", params["mode"].as_str().unwrap_or("?")));
        self.text.push_str(&shown);
        self.line(&format!("   └ The user picks {CHOSEN_NOTE}, ticks confirm and presses Accept."));
    }
}

/// A request as the demo host sends it: `_meta` on every request, form elicitation declared.
fn request(id: u64, method: &str, params: Value) -> Value {
    let mut params = params;
    params["_meta"] = json!({
        KEY_PROTOCOL_VERSION: PROTOCOL_VERSION,
        KEY_CLIENT_CAPABILITIES: { "elicitation": { "form": {} } },
        KEY_CLIENT_INFO: { "name": "mcpsim-demo-host", "version": "1.0.0" },
    });
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
}

fn is_complete(response: &Value) -> bool {
    response["result"]["resultType"] == "complete"
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).expect("serializing a serde_json::Value cannot fail")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_walkthrough_succeeds_and_is_byte_stable() {
        let first = walkthrough().await;
        assert!(first.succeeded, "{}", first.text);
        assert_eq!(walkthrough().await.text, first.text);
        assert!(first.text.contains("s1.demo."), "the state is sealed with the demo key");
    }
}
