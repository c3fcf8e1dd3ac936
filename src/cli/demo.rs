//! `mcpsim demo`: the lesson exchange, message by message, on two instances of the embedded demo.
//!
//! The notes servers here are the unchanged handler `mcpsim serve` runs, two instances built by `assembly`
//! over the same in-memory note store and replay store and the same key (as the simulator's instances and
//! `serve --instances` are), called in-process through [`handle_message`] (no transport). Round 1 goes to i1
//! and round 2 to i2. The `requestState` is decoded and its seal verified by the decoder of the HTML report's
//! inspector. A fixed key, a fixed clock and seeded nonces make every printed byte the same on every run, so
//! the output doubles as a snapshot test of the whole flow. The default is one or two lines per message within
//! [`WIDTH`] columns; `--format json` prints every message whole.

use crate::assembly::in_memory_notes_fleet;
use crate::config::{Deployment, DEFAULT_PRINCIPAL};
use crate::framework::handle_message;
use crate::framework::ports::NonceSource;
use crate::policy::state::KeyRing;
use crate::servers::notes::{NotesServer, INPUT_DELETE_CHOICE, TOOL_NOTES_DELETE};
use crate::sim::render::html::{decode_state, RunKeys};
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

/// Lines of the compact form are wrapped to this many columns.
pub(crate) const WIDTH: usize = 100;

/// How the messages are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum DemoFormat {
    /// One or two lines per message, within 100 columns: what each message carries, `_meta` left out.
    #[default]
    Compact,
    /// Every message whole, as pretty-printed JSON (what a server of yours must send and accept).
    Json,
}

/// Options of `mcpsim demo` (the walkthrough itself is fixed so its output is stable).
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  mcpsim demo                    # the lesson exchange on instances i1 and i2, a line or two per message
  mcpsim demo --format json      # the same exchange, every message whole (what your server must speak)

The same exchange on a simulated cluster, message by message: mcpsim run 02-retry-lands-on-another-instance
The course that starts here: mcpsim course (docs/course/README.md)
Exit status: 0 when every step got the expected outcome; 1 otherwise.")]
pub struct DemoArgs {
    /// How to print the messages: compact (the default) or json (every message whole).
    #[arg(long, value_enum, default_value_t = DemoFormat::Compact)]
    pub format: DemoFormat,
}

pub fn run(args: DemoArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("mcpsim demo: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let walkthrough = runtime.block_on(walkthrough(args.format));
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

/// The demo's key ring: the published demo key.
fn demo_key_ring() -> KeyRing {
    KeyRing::new(DEMO_KEY_ID, DEMO_KEY.to_vec()).expect("the demo key is 32 bytes")
}

/// Builds the demo's fleet: two instances of the embedded deployment (i1, i2) over the same stores, with the
/// fixed key and clock, and seeded nonces of their own.
pub(crate) fn demo_fleet() -> Vec<(&'static str, NotesServer)> {
    let clock = Arc::new(ManualClock::new(DEMO_NOW_MS));
    let nonces: Vec<Arc<dyn NonceSource>> =
        vec![Arc::new(SeededNonces::new(DEMO_NONCE_SEED)), Arc::new(SeededNonces::new(DEMO_NONCE_SEED + 1))];
    let (servers, _) =
        in_memory_notes_fleet(&Deployment::demo(), demo_key_ring(), None, clock, nonces).expect("the embedded demo is valid");
    ["i1", "i2"].into_iter().zip(servers).collect()
}

pub(crate) async fn walkthrough(format: DemoFormat) -> Walkthrough {
    let mut script =
        Script { fleet: demo_fleet(), format, keys: RunKeys::of_ring(demo_key_ring()), arguments_sent: Vec::new(), text: String::new() };
    let succeeded = script.play().await.is_ok();
    Walkthrough { text: script.text, succeeded }
}

struct Script {
    fleet: Vec<(&'static str, NotesServer)>,
    format: DemoFormat,
    keys: RunKeys,
    /// The arguments each earlier request sent (by its id), so a retry says "as in #3" (compact form).
    arguments_sent: Vec<(Value, Value)>,
    text: String,
}

/// A step that did not get its expected outcome (already printed).
struct StepFailed;

/// The instances the demo's fleet runs (indexes into `Script::fleet`).
const I1: usize = 0;
const I2: usize = 1;

impl Script {
    async fn play(&mut self) -> Result<(), StepFailed> {
        self.line("mcpsim demo: the MCP 2026-07-28 lesson exchange on two instances, i1 and i2, of the embedded");
        self.line("demo notes server. They share the note store, the replay store and the signing key; nothing else.");
        self.line(&format!("The caller is principal {DEFAULT_PRINCIPAL:?} (over HTTP her bearer token would say so). A fixed key, clock"));
        self.line("and nonces make this output the same on every run. → is what the client sends, ← the answer.");
        if self.format == DemoFormat::Compact {
            self.line("Messages are shown in brief, without _meta; mcpsim demo --format json prints them whole.");
        }

        self.step(
            1,
            &[
                "server/discover: what does the server support? There is no initialize handshake and no",
                "session: every request carries its own _meta (protocol version, client capabilities).",
            ],
        );
        let response = self.exchange(I1, request(1, "server/discover", json!({}))).await;
        let supported = response["result"]["supportedVersions"].as_array().is_some_and(|v| v.contains(&json!(PROTOCOL_VERSION)));
        self.expect(is_complete(&response) && supported, &format!("a complete result listing {PROTOCOL_VERSION}"))?;

        self.step(
            2,
            &[
                "tools/list: the tool descriptors, byte-identical on every call, so clients may cache",
                "them. notes_delete takes explicit scope: the workspace to search and part of a title.",
            ],
        );
        let response = self.exchange(I1, request(2, "tools/list", json!({}))).await;
        let listed = response["result"]["tools"].as_array().is_some_and(|tools| tools.iter().any(|tool| tool["name"] == TOOL_NOTES_DELETE));
        self.expect(is_complete(&response) && listed, "a complete result listing notes_delete")?;

        self.step(
            3,
            &[
                &format!("tools/call notes_delete on i1, round 1: delete {TITLE:?} in alice's workspace. Three"),
                "notes match and every delete needs the user's choice, so i1 deletes nothing yet: it answers",
                "input_required with a form (inputRequests) and a signed requestState, and forgets the call.",
            ],
        );
        let arguments = json!({ "workspaceUri": WORKSPACE, "title": TITLE });
        let response = self.exchange(I1, request(3, "tools/call", json!({ "name": TOOL_NOTES_DELETE, "arguments": arguments }))).await;
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
        let verified = self.render_state(&request_state);
        self.expect(verified, "the requestState's seal verifies with the fleet's key")?;

        self.step(
            4,
            &[
                "The host shows the form to the user. No message is sent: no instance keeps anything or",
                "waits for anything. Everything round 2 needs travels in the requestState, sealed above.",
            ],
        );
        self.render_form(form);

        self.step(
            5,
            &[
                "tools/call notes_delete on i2, round 2: the load balancer sends the retry to the other",
                "instance, which never saw round 1. Same call, a fresh id, the user's answer in inputResponses,",
                "the requestState echoed unchanged. i2 verifies the seal, the answer and the live note, then",
                "claims the one-time nonce and deletes, in one replay-store operation.",
            ],
        );
        let answer = json!({ "action": "accept", "content": { "note_id": CHOSEN_NOTE, "confirm": true } });
        let params = json!({
            "name": TOOL_NOTES_DELETE,
            "arguments": arguments,
            "inputResponses": { INPUT_DELETE_CHOICE: answer },
            "requestState": request_state,
        });
        let response = self.exchange(I2, request(4, "tools/call", params)).await;
        let outcome = &response["result"]["structuredContent"];
        self.expect(
            is_complete(&response) && *outcome == json!({ "deleted": true, "noteId": CHOSEN_NOTE, "outcome": "deleted" }),
            "a complete result from i2: deleted note-7",
        )?;

        self.step(
            6,
            &[
                "resources/list on i1: note-7 is gone for every instance (they share the note store).",
                "Alice sees only notes in her workspace: never bob's, never the \"evil twin\" in Notes-evil",
                "(a string prefix is not containment), never /tmp.",
            ],
        );
        let response = self.exchange(I1, request(5, "resources/list", json!({}))).await;
        let names: Vec<&str> =
            response["result"]["resources"].as_array().map(|r| r.iter().filter_map(|r| r["name"].as_str()).collect()).unwrap_or_default();
        self.expect(is_complete(&response) && names == ["note-3", "note-14", "note-99"], "note-3, note-14 and note-99, without note-7")?;

        self.step(
            7,
            &[
                "Round 2 replayed on i1 with the same requestState, now picking note-3 (a stale retry, or",
                "someone who saw the state): i2 claimed its nonce in the shared replay store, so i1 deletes",
                "nothing; the error says what the confirmation already did.",
            ],
        );
        let replay = json!({
            "name": TOOL_NOTES_DELETE,
            "arguments": arguments,
            "inputResponses": { INPUT_DELETE_CHOICE: { "action": "accept", "content": { "note_id": "note-3", "confirm": true } } },
            "requestState": request_state,
        });
        let response = self.exchange(I1, request(6, "tools/call", replay)).await;
        let data = &response["error"]["data"];
        self.expect(
            data["reason"] == "state_consumed" && data["previousOutcome"]["noteId"] == CHOSEN_NOTE,
            "state_consumed, naming the earlier delete of note-7",
        )?;

        self.line("");
        self.line("Every step got the expected outcome: one confirmation, one delete, two instances. Next:");
        self.line("  mcpsim run 02-retry-lands-on-another-instance   # the same on a simulated cluster");
        self.line("  mcpsim course                                   # the course, lesson by lesson");
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

    async fn exchange(&mut self, instance: usize, request: Value) -> Value {
        let (name, server) = &self.fleet[instance];
        let name = *name;
        let bytes = serde_json::to_vec(&request).expect("serializing a serde_json::Value cannot fail");
        let reply = handle_message(server, DEFAULT_PRINCIPAL, &bytes, None).await;
        let response = reply.response.unwrap_or(Value::Null);
        match self.format {
            DemoFormat::Json => {
                self.line(&format!("→ {name}"));
                self.line(&pretty(&request));
                self.line(&format!("← {name}"));
                self.line(&pretty(&response));
            }
            DemoFormat::Compact => {
                let sent = brief_request(&request, &mut self.arguments_sent);
                let answered = brief_response(&response);
                let continuation = " ".repeat(format!("→ {name}  ").chars().count() + 2);
                self.wrapped(&format!("→ {name}  "), &continuation, &sent);
                self.wrapped(&format!("← {name}  "), &continuation, &answered);
            }
        }
        response
    }

    /// `text` after `lead`, wrapped to [`WIDTH`] columns after a space or a comma, each further line after
    /// `continuation`.
    fn wrapped(&mut self, lead: &str, continuation: &str, text: &str) {
        let mut line = lead.to_string();
        let mut fresh = true;
        for piece in split_keeping(text) {
            if !fresh && line.chars().count() + piece.trim_end().chars().count() > WIDTH {
                self.line(line.trim_end());
                line = continuation.to_string();
                fresh = true;
            }
            line.push_str(if fresh { piece.trim_start() } else { piece });
            fresh = false;
        }
        self.line(line.trim_end());
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

    /// The requestState decoded and its seal checked, by the HTML inspector's decoder; whether it verified.
    fn render_state(&mut self, token: &str) -> bool {
        let view = decode_state(token, &self.keys);
        let mut parts = token.split('.');
        let (version, key_id) = (parts.next().unwrap_or("?"), parts.next().unwrap_or("?"));
        self.line(&format!("   ┌ the requestState decoded ({} characters; the HTML report's inspector shows the same):", view.chars));
        self.line(&format!("   │ {:<16}{version}.{key_id}.PAYLOAD.TAG: format {version}, signed with key id {key_id:?}", "form"));
        let seal = if view.verified() {
            format!("verified: the HMAC-SHA256 tag checks with key {key_id:?}, which i1 and i2 both hold")
        } else {
            format!("{}: {}", view.status, view.status_text)
        };
        self.line(&format!("   │ {:<16}{seal}", "seal"));
        for (name, value) in &view.fields {
            let shown = if value.is_empty() { "(none)" } else { value.as_str() };
            self.line(&format!("   │ {name:<16}{shown}"));
        }
        self.line("   └ The nonce is claimed once, in the shared replay store, by whichever instance finishes.");
        view.verified()
    }

    /// Prints the form the way a host would show it, from the `elicitation/create` request alone.
    fn render_form(&mut self, form: &Value) {
        let params = &form["params"];
        let method = form["method"].as_str().unwrap_or("?");
        self.line(&format!("   ┌ inputRequests.{INPUT_DELETE_CHOICE}: {method}, mode {}", params["mode"].as_str().unwrap_or("?")));
        for line in params["message"].as_str().unwrap_or("").lines() {
            self.wrapped("   │ ", "   │   ", line);
        }
        let mut shown = String::new();
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
        self.text.push_str(&shown);
        self.line(&format!("   └ The user picks {CHOSEN_NOTE}, ticks confirm and presses Accept."));
    }
}

/// `text` cut after each space and comma (kept), for wrapping.
fn split_keeping(text: &str) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut start = 0;
    for (index, c) in text.char_indices() {
        if c == ' ' || c == ',' {
            pieces.push(&text[start..index + c.len_utf8()]);
            start = index + c.len_utf8();
        }
    }
    if start < text.len() {
        pieces.push(&text[start..]);
    }
    pieces
}

/// A `requestState` in brief: its format and key id, and its length.
fn brief_state(token: &str) -> String {
    let mut parts = token.split('.');
    format!("{}.{}.… ({} chars)", parts.next().unwrap_or("?"), parts.next().unwrap_or("?"), token.chars().count())
}

fn compact_json(value: &Value) -> String {
    serde_json::to_string(value).expect("serializing a serde_json::Value cannot fail")
}

/// What a request carries, without `jsonrpc` and `_meta`: id, method, tool, arguments (or the earlier request
/// that sent the same ones), answers, state.
fn brief_request(request: &Value, earlier: &mut Vec<(Value, Value)>) -> String {
    let params = &request["params"];
    let mut text = format!("#{} {}", request["id"], request["method"].as_str().unwrap_or("?"));
    if let Some(tool) = params["name"].as_str() {
        match earlier.iter().find(|(_, arguments)| *arguments == params["arguments"]) {
            Some((id, _)) => text += &format!(" {tool} arguments as in #{id}"),
            None => {
                text += &format!(" {tool} arguments {}", compact_json(&params["arguments"]));
                earlier.push((request["id"].clone(), params["arguments"].clone()));
            }
        }
    }
    if let Some(answers) = params["inputResponses"].as_object() {
        for (key, answer) in answers {
            let content = answer.get("content").map(|content| format!(" {}", compact_json(content))).unwrap_or_default();
            text += &format!(" inputResponses.{key} {}{content}", answer["action"].as_str().unwrap_or("?"));
        }
    }
    if let Some(state) = params["requestState"].as_str() {
        text += &format!(" requestState {}, echoed unchanged", brief_state(state));
    }
    text
}

/// What an answer says, in brief: the result type and its facts, or the error's code, reason and data.
fn brief_response(response: &Value) -> String {
    let id = &response["id"];
    if let Some(error) = response.get("error") {
        let mut data = error["data"].clone();
        let reason = data.as_object_mut().and_then(|data| data.remove("reason"));
        let reason = reason.as_ref().and_then(Value::as_str).map(|r| format!(" {r}")).unwrap_or_default();
        let rest: String = data.as_object().into_iter().flatten().map(|(key, value)| format!(" {key} {}", compact_json(value))).collect();
        return format!("#{id} error {}{reason}{rest}: {}", error["code"], error["message"].as_str().unwrap_or(""));
    }
    let result = &response["result"];
    let mut text = format!("#{id} {}", result["resultType"].as_str().unwrap_or("?"));
    if let Some(versions) = result.get("supportedVersions") {
        text += &format!(" supportedVersions {}", compact_json(versions));
    }
    let names = |items: &Value| -> Option<String> {
        items.as_array().map(|items| items.iter().filter_map(|item| item["name"].as_str()).collect::<Vec<_>>().join(", "))
    };
    if let Some(tools) = names(&result["tools"]) {
        text += &format!(" tools [{tools}]");
    }
    if let Some(resources) = names(&result["resources"]) {
        text += &format!(" resources [{resources}]");
    }
    if let Some(requests) = result["inputRequests"].as_object() {
        for (key, form) in requests {
            let offered = form.pointer("/params/requestedSchema/properties/note_id/enum").map(compact_json).unwrap_or_default();
            text += &format!(" inputRequests.{key} {} form, note_id one of {offered}", form["method"].as_str().unwrap_or("?"));
        }
    }
    if let Some(state) = result["requestState"].as_str() {
        text += &format!(" requestState {}", brief_state(state));
    }
    if let Some(content) = result.get("structuredContent") {
        text += &format!(" structuredContent {}", compact_json(content));
    }
    text
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
        for format in [DemoFormat::Compact, DemoFormat::Json] {
            let first = walkthrough(format).await;
            assert!(first.succeeded, "{}", first.text);
            assert_eq!(walkthrough(format).await.text, first.text);
            assert!(first.text.contains("s1.demo."), "the state is sealed with the demo key");
            assert!(first.text.contains("→ i2") && first.text.contains("← i2"), "round 2 goes to the second instance");
            assert!(first.text.contains("seal            verified"), "the state is decoded and verified:\n{}", first.text);
        }
    }

    #[tokio::test]
    async fn the_compact_form_fits_in_100_columns_and_leaves_out_meta() {
        let compact = walkthrough(DemoFormat::Compact).await.text;
        for line in compact.lines() {
            assert!(line.chars().count() <= WIDTH, "{} columns: {line}", line.chars().count());
        }
        assert!(!compact.contains("io.modelcontextprotocol/"), "no _meta key in the compact form:\n{compact}");
        let json = walkthrough(DemoFormat::Json).await.text;
        assert!(json.contains("io.modelcontextprotocol/clientCapabilities"), "the JSON form keeps every byte");
    }

    #[test]
    fn a_forged_state_is_reported_unverified() {
        let mut script = Script {
            fleet: Vec::new(),
            format: DemoFormat::Compact,
            keys: RunKeys::of_ring(demo_key_ring()),
            arguments_sent: Vec::new(),
            text: String::new(),
        };
        let other = KeyRing::new(DEMO_KEY_ID, [7u8; 32].to_vec()).unwrap();
        let forged = other.seal(&crate::policy::state::StateClaims {
            principal: "alice".into(),
            method: "tools/call".into(),
            tool: "notes_delete".into(),
            arguments_digest: "ab".repeat(32),
            candidates: vec!["note-99".into()],
            revisions: Vec::new(),
            phase: "delete_choice".into(),
            issued_at_ms: 1,
            expires_at_ms: 2,
            nonce: "n".into(),
        });
        assert!(!script.render_state(&forged));
        assert!(script.text.contains("does NOT verify"), "{}", script.text);
    }
}
