//! `mcpsim import TRACE` from the outside: mcpsim's own trace round-trips; real mcp-trace-capture 0.6.0
//! recordings (`tests/traces/`, made by `tests/traces/capture-notes-delete.py`, docs/importing.md) replay in
//! the simulator and against real processes with the same outcomes; the per-process key is found by `explore
//! --perturb` and shrunk; a changed server is reported at its first drifted answer with JSON paths; malformed
//! traces are refused with FILE:LINE; a credential in a trace never reaches the scenario.
//!
//! Every mcpsim run is bounded ([`SECONDS_MAX`]). The target runs start mcpsim's own `serve --stdio` (~2 s each).

mod common;

use common::child::{repo, run_mcpsim, scratch, Ran};
use serde_json::Value;
use std::path::{Path, PathBuf};

const SECONDS_MAX: u64 = 180;
const HTTP_CAPTURE: &str = "tests/traces/capture-http-notes-delete.jsonl";
const STDIO_CAPTURE: &str = "tests/traces/capture-stdio-notes-delete.jsonl";

fn mcpsim(args: &[&str]) -> Ran {
    run_mcpsim(args, SECONDS_MAX)
}

fn dir(name: &str) -> PathBuf {
    scratch("import", name)
}

fn text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Imports `trace` with `extra` arguments into `out`, which must succeed.
fn import(trace: &str, out: &Path, extra: &[&str]) -> String {
    let out_arg = out.to_str().unwrap();
    let mut args = vec!["import", trace, "--out", out_arg];
    args.extend_from_slice(extra);
    let ran = mcpsim(&args);
    assert_eq!(ran.status, 0, "import {trace}: {}", ran.stderr);
    text(out)
}

/// The outcome of every answer of a trace, in order: `result TYPE` or `error CODE REASON`.
fn outcomes(trace: &str) -> Vec<String> {
    trace
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["direction"] == "server-to-client" && event["kind"] == "message")
        .map(|event| {
            let payload = &event["payload"];
            match payload.get("error") {
                Some(error) => format!("error {} {}", error["code"], error["data"]["reason"]),
                None => format!("result {} {}", payload["result"]["resultType"], payload["result"]["structuredContent"]),
            }
        })
        .collect()
}

#[test]
fn mcpsims_own_trace_round_trips_to_the_same_outcomes() {
    let dir = dir("own");
    let original = mcpsim(&["run", "02-retry-lands-on-another-instance", "--format", "mcp-trace"]);
    assert_eq!(original.status, 0, "{}", original.stderr);
    let trace = dir.join("own.jsonl");
    std::fs::write(&trace, &original.stdout).unwrap();
    let sim = import(trace.to_str().unwrap(), &dir.join("own.sim"), &[]);
    assert!(sim.contains("for call1 as answer2") && sim.contains("for call1 as answer3"), "rounds found by requestState:\n{sim}");
    assert!(sim.contains("GUESSED from clientInfo.name \"alice\""), "a stdio trace has no credential, and says so:\n{sim}");
    let replayed = mcpsim(&["run", dir.join("own.sim").to_str().unwrap(), "--format", "mcp-trace"]);
    assert_eq!(replayed.status, 0, "{}\n{}", replayed.stdout, replayed.stderr);
    assert_eq!(outcomes(&replayed.stdout), outcomes(&original.stdout));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_real_capture_replays_in_the_simulator_and_against_real_processes_with_the_same_outcomes() {
    let dir = dir("capture");
    let recorded = outcomes(&text(&repo().join(HTTP_CAPTURE)));
    assert_eq!(recorded.len(), 5, "discover, list, round 1, round 2, the replay: {recorded:?}");
    for capture in [HTTP_CAPTURE, STDIO_CAPTURE] {
        let sim_path = dir.join("capture.sim");
        let sim = import(capture, &sim_path, &["--principal", "alice"]);
        assert!(sim.contains("answer alice -> i1 accept {\"confirm\": true, \"note_id\": \"note-7\"} for call3 as answer4"), "{sim}");
        assert!(sim.contains("Everything in the trace was mapped."), "{sim}");
        let simulated = mcpsim(&["run", sim_path.to_str().unwrap(), "--format", "mcp-trace"]);
        assert_eq!(simulated.status, 0, "{capture} in the simulator:\n{}", simulated.stdout);
        assert_eq!(outcomes(&simulated.stdout), recorded, "{capture}");
    }
    // Against three real `serve --stdio` processes (one store, one key file): every expectation holds.
    let sim_path = dir.join("capture.sim");
    import(HTTP_CAPTURE, &sim_path, &["--principal", "alice"]);
    let target = mcpsim(&["run", "--target", "targets/mcpsim-stdio.toml", sim_path.to_str().unwrap(), "--format", "mcp-trace"]);
    assert_eq!(target.status, 0, "{}\n{}", target.stdout, target.stderr);
    let trace: String = target.stdout.lines().filter(|l| l.starts_with('{')).collect::<Vec<_>>().join("\n");
    assert_eq!(outcomes(&trace), recorded, "the target's answers:\n{}", target.stdout);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn round_two_on_another_instance_of_a_fleet_without_a_shared_key_is_found_and_shrunk() {
    let dir = dir("perturb");
    let broken = dir.join("broken.sim");
    let sim = import(HTTP_CAPTURE, &broken, &["--principal", "alice", "--own-keys"]);
    assert!(sim.contains("instance i1 keys k1\ninstance i2 keys k2\n"), "{sim}");
    // Verbatim, every round on i1: it passes, in the simulator and on the broken target.
    assert_eq!(mcpsim(&["run", broken.to_str().unwrap()]).status, 0);
    let verbatim = mcpsim(&["run", "--target", "targets/broken-no-shared-key.toml", broken.to_str().unwrap()]);
    assert_eq!(verbatim.status, 0, "{}", verbatim.stdout);
    // Perturbed: round 2 on i2 is refused (state_signature), shrunk to round 1 and round 2.
    let shrunk = dir.join("shrunk.sim");
    let explored = mcpsim(&["explore", broken.to_str().unwrap(), "--perturb", "--save", shrunk.to_str().unwrap(), "--format", "mcp-trace"]);
    assert_eq!(explored.status, 1, "{}\n{}", explored.stdout, explored.stderr);
    assert!(explored.stdout.contains("FAILS after 1 variant(s): answer4 (line"), "{}", explored.stdout);
    assert!(explored.stdout.contains("sent to i2"), "{}", explored.stdout);
    assert!(explored.stdout.contains("got error -32602 state_signature"), "{}", explored.stdout);
    assert!(explored.stdout.contains("shrunk to 2 request(s) on seed 1 (removed: discover1 (line"), "{}", explored.stdout);
    let reproducer = text(&shrunk);
    assert!(reproducer.contains("answer alice -> i2 accept"), "{reproducer}");
    // Its transcript as an mcp-trace, for the validator: round 1, its form, round 2, the refusal.
    assert_eq!(outcomes(&text(&dir.join("shrunk.trace.jsonl"))), ["result \"input_required\" null", "error -32602 \"state_signature\""]);
    // The shrunk file fails the same way in the simulator and on the broken target's real processes.
    assert_eq!(mcpsim(&["run", shrunk.to_str().unwrap()]).status, 1);
    let target = mcpsim(&["run", "--target", "targets/broken-no-shared-key.toml", shrunk.to_str().unwrap()]);
    assert_eq!(target.status, 1, "{}", target.stdout);
    assert!(target.stdout.contains("FAIL  line") && target.stdout.contains("state_signature"), "{}", target.stdout);
    // A fleet with a shared key holds under every variant.
    let healthy = dir.join("healthy.sim");
    import(HTTP_CAPTURE, &healthy, &["--principal", "alice"]);
    let held = mcpsim(&["explore", healthy.to_str().unwrap(), "--perturb", "--seeds", "5"]);
    assert_eq!(held.status, 0, "{}", held.stdout);
    assert!(held.stdout.contains("held: 7 variant(s)"), "{}", held.stdout);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_changed_answer_is_reported_at_its_round_with_the_json_paths_that_drifted() {
    let dir = dir("drift");
    let sim_path = dir.join("capture.sim");
    import(HTTP_CAPTURE, &sim_path, &["--principal", "alice"]);
    // The "new build": the same server, deployed with note-7 renamed, so round 1's form changes.
    let config = dir.join("renamed.toml");
    let demo = text(&repo().join("src/config/demo.toml"));
    std::fs::write(&config, demo.replace("title = \"TPS report 2024\"", "title = \"TPS report 2024 (final)\"")).unwrap();
    let target = dir.join("renamed-target.toml");
    let stdio = text(&repo().join("targets/mcpsim-stdio.toml"));
    let config_arg = format!("\"--config\", \"{}\"", config.display());
    let changed = stdio
        .replace(
            "\"seed\", \"--store\", \"sqlite:{data_dir}/notes.db\"",
            &format!("\"seed\", \"--store\", \"sqlite:{{data_dir}}/notes.db\", {config_arg}"),
        )
        .replace("\"serve\", \"--stdio\",", &format!("\"serve\", \"--stdio\", {config_arg},"));
    assert_ne!(changed, stdio);
    std::fs::write(&target, changed).unwrap();
    let ran = mcpsim(&["run", "--target", target.to_str().unwrap(), sim_path.to_str().unwrap()]);
    assert_eq!(ran.status, 1, "{}\n{}", ran.stdout, ran.stderr);
    // The first failure with the lines its diff continues on (behind the message's gutter).
    let lines: Vec<&str> = ran.stdout.lines().collect();
    let at = lines.iter().position(|l| l.trim_start().starts_with("FAIL  line")).expect("a failure");
    let continued = lines[at + 1..].iter().take_while(|l| l.starts_with("         | "));
    let first = std::iter::once(lines[at]).chain(continued.copied()).collect::<Vec<_>>().join("\n");
    assert!(first.contains("expect call3 result.inputRequests"), "the first drift is round 1's form: {first}");
    assert!(
        first.contains("result.inputRequests.delete_choice.params.message: the lines from line 2 differ:"),
        "the JSON path of the drift: {first}"
    );
    assert!(first.contains("\n         |       - note-7: TPS report 2024 (file:///"), "the line expected: {first}");
    assert!(first.contains("\n         |       + note-7: TPS report 2024 (final) (file:///"), "the line found: {first}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn malformed_or_truncated_traces_are_refused_with_the_file_and_the_line() {
    let dir = dir("malformed");
    let good = text(&repo().join(STDIO_CAPTURE));
    let lines: Vec<&str> = good.lines().collect();
    let cut = &lines[3][..lines[3].len() / 2];
    let response = lines.iter().find(|l| l.contains("server-to-client") && l.contains("\"message\"")).unwrap();
    let cases: Vec<(&str, String, String)> = vec![
        ("truncated", format!("{}\n{}\n{}\n{cut}", lines[0], lines[1], lines[2]), ":4: the last event is cut short".into()),
        ("not-json", format!("{}\n{}\nHTTP/1.1 200 OK\n", lines[0], lines[1]), ":3: not a JSON event".into()),
        (
            "unknown-kind",
            format!("{}\n{}\n", lines[0], lines[1].replace("\"kind\":\"message\"", "\"kind\":\"telemetry\"")),
            ":2: unknown event kind \"telemetry\"".into(),
        ),
        ("orphan-response", format!("{}\n{response}\n", lines[0]), ":2: a response (id 1) without a request".into()),
    ];
    for (name, body, expected) in cases {
        let path = dir.join(format!("{name}.jsonl"));
        std::fs::write(&path, body).unwrap();
        let ran = mcpsim(&["import", path.to_str().unwrap()]);
        assert_eq!(ran.status, 2, "{name}: {}", ran.stderr);
        let wanted = format!("mcpsim import: {}{expected}", path.display());
        assert!(ran.stderr.starts_with(&wanted), "{name}: expected {wanted:?}, got {}", ran.stderr);
        assert!(!ran.stderr.contains("panicked"), "{}", ran.stderr);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_credential_in_a_trace_identifies_a_principal_and_is_never_written() {
    let dir = dir("secrets");
    let capture = text(&repo().join(HTTP_CAPTURE));
    // Plant an unredacted bearer token on every request of alice's session (a recorder that kept it), and a
    // second session with a redacted marker and a made-up secret token.
    let planted = capture.replace("\"headers\":{\"accept\"", "\"headers\":{\"authorization\":\"Bearer demo-alice\",\"accept\"");
    assert_ne!(planted, capture);
    let path = dir.join("planted.jsonl");
    std::fs::write(&path, &planted).unwrap();
    let sim = import(path.to_str().unwrap(), &dir.join("planted.sim"), &[]);
    assert!(!sim.contains("demo-alice"), "the token is never written:\n{sim}");
    assert!(sim.contains("client alice principal alice"), "{sim}");
    assert!(sim.contains("a bearer token of the demo deployment"), "{sim}");
    assert_eq!(mcpsim(&["run", dir.join("planted.sim").to_str().unwrap()]).status, 0);

    let secret = capture.replace("\"headers\":{\"accept\"", "\"headers\":{\"authorization\":\"Bearer sk-planted-0123456789\",\"accept\"");
    std::fs::write(&path, &secret).unwrap();
    let sim = import(path.to_str().unwrap(), &dir.join("secret.sim"), &["--principal", "sk-planted-0123456789=alice"]);
    assert!(!sim.contains("sk-planted"), "neither the token nor the marker naming it:\n{sim}");
    assert!(sim.contains("named by --principal"), "{sim}");
    let unnamed = import(path.to_str().unwrap(), &dir.join("unnamed.sim"), &[]);
    assert!(!unnamed.contains("sk-planted") && unnamed.contains("GUESSED"), "{unnamed}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_imported_capture_plays_on_a_live_fleet_matching_the_simulator() {
    use std::io::{BufRead, BufReader};
    let dir = dir("live");
    let sim_path = dir.join("capture.sim");
    import(HTTP_CAPTURE, &sim_path, &["--principal", "alice"]);
    let store = format!("sqlite:{}", dir.join("notes.db").display());
    let keys = dir.join("keys.toml");
    assert_eq!(mcpsim(&["keygen", "--out", keys.to_str().unwrap()]).status, 0);
    assert_eq!(mcpsim(&["seed", "--store", &store]).status, 0);
    let mut server = common::child::mcpsim(&[
        "serve",
        "--http",
        "127.0.0.1:0",
        "--instances",
        "2",
        "--store",
        &store,
        "--key-file",
        keys.to_str().unwrap(),
    ])
    .spawn()
    .expect("serve starts");
    let mut stderr = BufReader::new(server.stderr.take().unwrap());
    let mut urls = Vec::new();
    let mut line = String::new();
    while urls.len() < 2 {
        line.clear();
        if stderr.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        if let Some(url) = line.trim().strip_prefix("listening on ") {
            urls.push(url.split_whitespace().next().unwrap().to_string());
        }
    }
    // Keep draining the server's log so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in stderr.lines() {});
    assert_eq!(urls.len(), 2, "two instances listen");
    let ran = mcpsim(&["run", "--live", &urls.join(","), sim_path.to_str().unwrap()]);
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(ran.status, 0, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("expectations 23 held, 0 failed"), "{}", ran.stdout);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn spread_sends_each_round_answering_a_form_to_the_next_instance() {
    let dir = dir("spread");
    let sim_path = dir.join("spread.sim");
    let sim = import(HTTP_CAPTURE, &sim_path, &["--principal", "alice", "--spread", "--instances", "3"]);
    assert!(sim.contains("send alice -> i1 tools/call"), "{sim}");
    assert!(sim.contains("answer alice -> i2 accept {\"confirm\": true, \"note_id\": \"note-7\"} for call3 as answer4"), "{sim}");
    assert!(sim.contains("instance i3 keys k1"), "{sim}");
    assert_eq!(mcpsim(&["run", sim_path.to_str().unwrap()]).status, 0, "a fleet sharing its key answers alike");
    let refused = mcpsim(&["import", HTTP_CAPTURE, "--instances", "17"]);
    assert_eq!(refused.status, 2);
    assert!(refused.stderr.contains("--instances must be between 1 and 16"), "{}", refused.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_message_the_recorder_truncated_is_listed_and_nothing_is_expected_of_it() {
    let dir = dir("truncated");
    let capture = text(&repo().join(HTTP_CAPTURE));
    // `mcpsim record`'s stub for a message over its size bound (docs/importing.md): the tools/list answer.
    let lines: Vec<String> = capture
        .lines()
        .map(|line| {
            let event: Value = serde_json::from_str(line).unwrap();
            if event["kind"] == "message" && event["payload"]["id"] == 2 && event["direction"] == "server-to-client" {
                let mut event = event.clone();
                event["payload"]["result"] = serde_json::json!({"_meta": {"mcpsim/truncated": {"bytes": 99999}}});
                event["truncated"] = serde_json::json!({"bytes": 99999});
                event.to_string()
            } else {
                line.to_string()
            }
        })
        .collect();
    let path = dir.join("truncated.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let sim_path = dir.join("truncated.sim");
    let sim = import(path.to_str().unwrap(), &sim_path, &["--principal", "alice"]);
    // The comment lines are wrapped at spaces: read them joined.
    let flat = sim.replace("\n#     ", " ");
    let listed = format!("{}:8: the answer to line 6 was truncated by the recorder (over its message size)", path.display());
    assert!(flat.contains(&listed), "{listed:?} in:\n{sim}");
    assert!(!sim.contains("expect list2"), "{sim}");
    assert_eq!(mcpsim(&["run", sim_path.to_str().unwrap()]).status, 0);
    let _ = std::fs::remove_dir_all(&dir);
}
