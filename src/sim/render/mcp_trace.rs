//! A run's client traffic in the trace format of the independent validator (`mcp-trace-validator` 0.6.0,
//! JSON Lines; what `mcp-trace-capture` writes), so a simulated exchange is judged exactly like a captured one:
//! `mcpsim run FILE --format mcp-trace > trace.jsonl && mcp-trace-validator validate trace.jsonl`.
//!
//! One event per delivered JSON-RPC message between a client and an instance, in delivery order:
//!
//! ```text
//! {"direction":"client-to-server","kind":"message","payload":{…the request…},"seq":0,"transport":"stdio"}
//! {"direction":"server-to-client","kind":"message","payload":{…the response…},"seq":1,"transport":"stdio"}
//! ```
//!
//! What is left out, and why:
//! * Store calls and returns, gateway↔backend calls, faults and checks: not MCP traffic between a client and
//!   a server (the text and JSON Lines transcripts keep them).
//! * Dropped envelopes: the server never received them, as a capture in front of it would not have.
//! * Requests whose bytes are not JSON (parse-error probes): the format carries JSON-RPC messages only. The
//!   server's answer to them is kept.
//! * HTTP: the simulated network carries messages, not HTTP exchanges (no status codes, no content
//!   negotiation), so events declare the `stdio` transport and there are no `http` events. A scenario's
//!   routing headers therefore do not appear; HTTP-level behaviour is judged on captures of the real
//!   `serve --http` (`.ci/peers.sh`).
//!
//! Several clients of one scenario share the trace, interleaved as the scheduler delivered their messages;
//! [`render_client`] keeps one client's messages only (`mcpsim run … --trace-client NAME`): the validator
//! judges a trace as one session, and clients of two eras in one trace cannot be (scenario 62).
//! Output is byte-stable: same scenario and seed, same trace (no timestamps; keys sorted).

use crate::sim::engine::message::ActorId;
use crate::sim::render::transcript::{Body, Entry, Kind, Transcript};
use serde_json::json;
use std::fmt::Write as _;

/// The trace events of a transcript, one JSON object per line.
pub fn render(transcript: &Transcript) -> String {
    render_of(transcript, None)
}

// `mcpsim run --format mcp-trace --client` (the `cli` feature).
/// The trace of one client's session: the messages it sent and those it was sent, numbered from 0.
/// `None` if the transcript has no actor of that name.
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub fn render_client(transcript: &Transcript, client: &str) -> Option<String> {
    let actor = transcript.actors.iter().position(|name| name == client)?;
    Some(render_of(transcript, Some(actor)))
}

fn render_of(transcript: &Transcript, client: Option<ActorId>) -> String {
    let mut out = String::new();
    let mut seq = 0u64;
    for entry in &transcript.entries {
        let Entry::Delivery { message, from, to, .. } = entry else { continue };
        if client.is_some_and(|client| *from != client && *to != client) {
            continue;
        }
        let Body::Json(value) = &message.body else { continue };
        let direction = match message.kind {
            Kind::Request | Kind::Notify => "client-to-server",
            Kind::Response => "server-to-client",
            Kind::Call | Kind::Return => continue,
        };
        // A request that was not JSON is held as the string of its bytes: not a message the format can carry.
        if !value.is_object() && message.exact.is_some() {
            continue;
        }
        // A browser's visit to the out-of-band page, and the page's answer, are HTTP between a person and the
        // server, not MCP: not in an MCP trace.
        if value.get("page").is_some() {
            continue;
        }
        let event = json!({
            "seq": seq,
            "direction": direction,
            "transport": "stdio",
            "kind": "message",
            "payload": value.as_ref(),
        });
        let _ = writeln!(out, "{event}");
        seq += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario;
    use crate::sim::library;
    use crate::sim::render::transcript::Message;
    use serde_json::Value;

    /// A trace read back into its events.
    fn parse(trace: &str) -> Result<Vec<Value>, String> {
        trace
            .lines()
            .enumerate()
            .map(|(index, line)| serde_json::from_str(line).map_err(|error| format!("line {}: {error}", index + 1)))
            .collect()
    }
    use crate::sim::runner::{self, RunOptions};

    fn run_library_scenario(file: &str) -> Transcript {
        let (_, text) = library::SCENARIOS.iter().find(|(name, _)| *name == file).expect("the scenario is in the library");
        let parsed = scenario::parse(file, file.trim_end_matches(".sim"), text).expect("library scenarios parse");
        let mut options = RunOptions::seeded(1);
        options.record_transcript = true;
        let report = runner::run(&parsed, &options);
        assert!(report.passed(), "{file} passes");
        report.transcript
    }

    #[test]
    fn every_client_message_in_order_nothing_else() {
        let transcript = run_library_scenario("01-lesson-exchange-on-one-instance.sim");
        let events = parse(&render(&transcript)).unwrap();
        let expected: Vec<(&str, Value)> = transcript
            .entries
            .iter()
            .filter_map(|entry| match entry {
                Entry::Delivery { message: Message { kind: Kind::Request | Kind::Notify, body: Body::Json(value), .. }, .. } => {
                    Some(("client-to-server", value.as_ref().clone()))
                }
                Entry::Delivery { message: Message { kind: Kind::Response, body: Body::Json(value), .. }, .. } => {
                    Some(("server-to-client", value.as_ref().clone()))
                }
                _ => None,
            })
            .collect();
        assert!(expected.len() >= 4, "discover, list, two rounds at least: {expected:?}");
        assert_eq!(events.len(), expected.len());
        for (index, (event, (direction, payload))) in events.iter().zip(&expected).enumerate() {
            assert_eq!(event["seq"], json!(index), "seq counts from 0 without gaps");
            assert_eq!(event["direction"], *direction);
            assert_eq!(event["kind"], "message");
            assert_eq!(event["transport"], "stdio");
            assert_eq!(event["payload"], *payload, "the message exactly as delivered");
        }
        let methods: Vec<&str> = events.iter().filter_map(|event| event["payload"]["method"].as_str()).collect();
        assert!(methods.contains(&"tools/call"), "{methods:?}");
        assert!(events.iter().all(|event| event["payload"]["method"] != "notes/list"), "store traffic never appears");
    }

    #[test]
    fn a_client_trace_holds_that_clients_session_and_every_message_is_in_one() {
        let transcript = run_library_scenario("62-legacy-confirmation-races-a-modern-one.sim");
        let all = parse(&render(&transcript)).unwrap();
        let modern = parse(&render_client(&transcript, "alice").unwrap()).unwrap();
        let legacy = parse(&render_client(&transcript, "desk").unwrap()).unwrap();
        assert!(!modern.is_empty() && !legacy.is_empty());
        assert_eq!(modern.len() + legacy.len(), all.len(), "each message is one client's");
        for trace in [&modern, &legacy] {
            for (index, event) in trace.iter().enumerate() {
                assert_eq!(event["seq"], json!(index), "seq counts from 0 without gaps");
            }
        }
        let methods = |trace: &[Value]| -> Vec<String> {
            trace.iter().filter_map(|event| event["payload"]["method"].as_str().map(String::from)).collect()
        };
        assert_eq!(methods(&legacy).first().map(String::as_str), Some("initialize"), "the legacy session opens: {:?}", methods(&legacy));
        assert!(!methods(&modern).iter().any(|method| method == "initialize"), "the modern client never initializes");
        assert_eq!(render_client(&transcript, "mallory"), None, "no such actor");
    }

    #[test]
    fn the_export_is_byte_stable() {
        let file = "04-accepts-race-for-one-note.sim";
        assert_eq!(render(&run_library_scenario(file)), render(&run_library_scenario(file)));
    }

    #[test]
    fn requests_that_are_not_json_are_left_out_but_their_answers_kept() {
        let mut transcript = Transcript::default();
        let garbage =
            Message { kind: Kind::Request, body: Body::Json(Value::String("{not json".into()).into()), exact: Some("{not json".into()) };
        let answer = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "Parse error"}});
        let response = Message { kind: Kind::Response, body: Body::Json(answer.clone().into()), exact: None };
        transcript.recording = true;
        transcript.push(Entry::Delivery { seq: 1, time_ms: 0, from: 1, to: 0, message: garbage, cause: None, in_flight: 1 });
        transcript.push(Entry::Delivery { seq: 2, time_ms: 1, from: 0, to: 1, message: response, cause: None, in_flight: 1 });
        let events = parse(&render(&transcript)).unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0]["seq"], 0);
        assert_eq!(events[0]["payload"], answer);
    }
}
