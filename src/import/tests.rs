//! The import in-process: mcpsim's own trace of a library scenario imported, parsed and run.

use super::*;
use crate::scenario;
use crate::sim::library;
use crate::sim::render::mcp_trace;
use crate::sim::runner::{self, RunOptions};

fn trace_of(file: &str) -> String {
    let (_, text) = library::SCENARIOS.iter().find(|(name, _)| *name == file).expect("in the library");
    let parsed = scenario::parse(file, "s", text).expect("parses");
    let mut options = RunOptions::seeded(1);
    options.record_transcript = true;
    let report = runner::run(&parsed, &options);
    assert!(report.passed());
    mcp_trace::render(&report.transcript)
}

fn run_text(text: &str) -> runner::RunReport {
    let parsed = scenario::parse("imported.sim", "imported", text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    runner::run(&parsed, &RunOptions::seeded(1))
}

#[test]
fn an_own_trace_imports_into_rounds_correlated_by_state_and_runs() {
    let imported = import(&trace_of("02-retry-lands-on-another-instance.sim"), &Options::default()).unwrap();
    let text = &imported.text;
    assert_eq!((imported.steps, imported.rounds), (3, 2), "{text}");
    assert!(text.contains("answer alice -> i1 accept {\"confirm\": true, \"note_id\": \"note-3\"} for call1 as answer2"), "{text}");
    assert!(text.contains("for call1 as answer3"), "the replay answers the same form, found by its state: {text}");
    assert!(text.contains("expect call1 result.requestState present"), "{text}");
    assert!(text.contains("expect answer3 error -32602 state_consumed"), "{text}");
    assert!(!text.contains("s1.k1."), "no state literal: {text}");
    let report = run_text(text);
    assert!(report.passed(), "{:?}\n{text}", report.failures);
}

#[test]
fn a_drifted_answer_fails_at_its_member_with_the_paths() {
    let imported = import(&trace_of("02-retry-lands-on-another-instance.sim"), &Options::default()).unwrap();
    let drifted =
        imported.text.replace("\"noteId\": \"note-3\", \"outcome\": \"deleted\"}", "\"noteId\": \"note-3\", \"outcome\": \"kept\"}");
    assert_ne!(drifted, imported.text);
    let report = run_text(&drifted);
    let first = report.failures.first().expect("the drift fails").to_string();
    assert!(
        first.contains(
            "differs at these JSON paths (expected, then found):\n    result.structuredContent.outcome: \"kept\", then \"deleted\""
        ),
        "{first}"
    );
}

#[test]
fn a_response_without_a_request_is_refused_with_its_line() {
    let text = "{\"seq\":0,\"direction\":\"server-to-client\",\"transport\":\"stdio\",\"kind\":\"message\",\"payload\":{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{}}}\n";
    let error = import(text, &Options::default()).unwrap_err().to_string();
    assert_eq!(error, "trace.jsonl:1: a response (id 4) without a request: no earlier request with that id is waiting");
}
