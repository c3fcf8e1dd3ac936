//! Message faults against real fleets, from the outside: `mcpsim run --target` with `drop answer …`,
//! `duplicate …`, `hold …`/`release …` and `retry …` against mcpsim's own stdio and HTTP fleets (three
//! processes, one SQLite store, one key file), and `mcpsim run --live` losing an answer by closing the
//! connection, watched from a tiny HTTP server of the test's own.
//!
//! What it shows, on both transports:
//! - an accept whose answer is lost after the server committed deletes once (the effect probe reads one
//!   effect), the scenario's retry elsewhere learns the truth (`state_consumed` with `previousOutcome`), and a
//!   later accept does not delete again;
//! - an accept written to two instances at once deletes once, and the copy is the network's;
//! - an accept held back while a later one completes, then released, is told `state_consumed`;
//! - a fault armed and never met fails the scenario, naming the fault;
//! - live mode's `closing the connection` really closes it before a byte of the answer is read.

mod common;

use common::child::Ran;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Longest one `mcpsim run` may take here (one scenario on a fresh fleet takes about a second).
const RUN_SECONDS_MAX: u64 = 180;

const FLEETS: [&str; 2] = ["targets/mcpsim-stdio.toml", "targets/mcpsim-http.toml"];

fn run(args: &[&str]) -> Ran {
    common::child::run_mcpsim(args, RUN_SECONDS_MAX)
}

fn scratch(name: &str) -> PathBuf {
    common::child::scratch("target-faults", name)
}

/// Whether a transcript line's message has JSON-RPC id `id` (first, or before `jsonrpc` in an error).
fn has_id(line: &str, id: u64) -> bool {
    line.contains(&format!("{{\"id\":{id},")) || line.contains(&format!("\"id\":{id},\"jsonrpc\""))
}

/// The transcript line answering request `id` (`← tK user: {"id":N,…}` or, discarded, `tK answered (discarded…`).
fn answer_line(ran: &Ran, id: u64) -> &str {
    let found = ran.stdout.lines().find(|l| (l.contains("← t") || l.contains("answered (discarded")) && has_id(l, id));
    found.unwrap_or_else(|| panic!("no answer to id {id}:\n{}", ran.stdout))
}

fn effects(ran: &Ran) -> &str {
    ran.stdout.lines().find(|l| l.starts_with("effects:")).unwrap_or_else(|| panic!("no effects line:\n{}", ran.stdout))
}

#[test]
fn an_answer_lost_after_the_commit_deletes_once_and_the_retry_elsewhere_learns_the_truth() {
    for fleet in FLEETS {
        let ran = run(&["run", "--target", fleet, "08-answer-lost-then-retry-elsewhere", "--reruns", "0"]);
        assert_eq!(ran.status, 0, "{fleet}:\n{}\n{}", ran.stdout, ran.stderr);
        assert!(ran.stdout.contains("fault fired: at the next tools/call to scenario instance 1: its answer lost (read and discarded)"));
        // The server committed (its answer, read and thrown away, says so) ...
        let lost = answer_line(&ran, 2);
        assert!(lost.contains("answered (discarded, the answer lost)") && lost.contains("\"outcome\":\"deleted\""), "{lost}");
        // ... the client saw nothing, its retry elsewhere (a fresh id) hears the one execution ...
        assert!(ran.stdout.contains("ok    line 20: expect round2 no response"), "{}", ran.stdout);
        assert!(ran.stdout.contains("user (a retry): {\"id\":3,"), "{}", ran.stdout);
        let learned = answer_line(&ran, 3);
        assert!(
            learned.contains("state_consumed") && learned.contains("\"previousOutcome\":{\"noteId\":\"note-7\",\"outcome\":\"deleted\"}"),
            "{learned}"
        );
        // ... and one more accept deletes nothing: one effect in all.
        assert!(answer_line(&ran, 4).contains("state_consumed"));
        assert_eq!(effects(&ran), "effects: the probe read 4 before and 3 after", "{fleet}");
        assert!(ran.stdout.contains("ok    property at-most-once"));
    }
}

#[test]
fn an_accept_delivered_to_two_instances_at_once_deletes_once() {
    for fleet in FLEETS {
        let ran = run(&["run", "--target", fleet, "10-accept-delivered-twice", "--reruns", "0"]);
        assert_eq!(ran.status, 0, "{fleet}:\n{}\n{}", ran.stdout, ran.stderr);
        assert!(ran.stdout.contains("(a copy, by the network): {\"id\":2,"), "{}", ran.stdout);
        let answers: Vec<&str> = ran.stdout.lines().filter(|l| l.contains("← t") && has_id(l, 2)).collect();
        assert_eq!(answers.len(), 2, "the request and its copy each answered:\n{}", ran.stdout);
        let deleted =
            answers.iter().filter(|l| l.contains("\"outcome\":\"deleted\",") || l.contains("\"resultType\":\"complete\"")).count();
        assert_eq!(deleted, 1, "exactly one of the two deleted: {answers:?}");
        assert_eq!(effects(&ran), "effects: the probe read 4 before and 3 after", "{fleet}");
    }
}

/// A scenario for mcpsim's own server (its error words are expected), with the target placeholders.
fn scenario(dir: &Path, name: &str, body: &str) -> String {
    let text = format!(
        "principal {{{{principal}}}} workspaces \"file:///target\"\ninstance i1\ninstance i2\ninstance i3\nclient user principal {{{{principal}}}}\n\n\
         send user -> i1 tools/call {{\"name\": \"{{{{tool}}}}\", \"arguments\": {{{{arguments}}}}}} as round1\nexpect round1 input_required\n{body}"
    );
    let path = dir.join(format!("{name}.sim"));
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn an_accept_held_back_while_a_later_one_completes_is_told_the_state_was_consumed() {
    let dir = scratch("hold");
    let file = scenario(
        &dir,
        "held-accept",
        "hold tools/call to i1\nanswer user -> i1 accept {{accept}} as held\n\
         answer user -> i2 accept {{accept}} for round1 as later\nexpect later complete\n\
         release i1\nexpect held error -32602 state_consumed\nexpect held error.data.previousOutcome = {\"noteId\": \"note-7\", \"outcome\": \"deleted\"}\n",
    );
    for fleet in FLEETS {
        let ran = run(&["run", "--target", fleet, &file, "--reruns", "0"]);
        assert_eq!(ran.status, 0, "{fleet}:\n{}\n{}", ran.stdout, ran.stderr);
        assert!(ran.stdout.contains("held back, not written"), "{}", ran.stdout);
        assert!(ran.stdout.contains("released the held request 2 to"), "{}", ran.stdout);
        // Written only after the later accept was answered: the held one's answer comes last.
        let held_at = ran.stdout.find(answer_line(&ran, 2)).unwrap();
        let later_at = ran.stdout.find(answer_line(&ran, 3)).unwrap();
        assert!(later_at < held_at, "{}", ran.stdout);
        assert!(ran.stdout.contains("ok    line 12: expect later complete"), "{}", ran.stdout);
        assert!(ran.stdout.contains("expect held error -32602 state_consumed") && !ran.stdout.contains("FAIL"), "{}", ran.stdout);
        assert_eq!(effects(&ran), "effects: the probe read 4 before and 3 after", "{fleet}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_answer_lost_by_closing_the_connection_deletes_at_most_once() {
    let dir = scratch("closing");
    let file = scenario(
        &dir,
        "closing",
        "drop answer from i1 to tools/call closing the connection\nanswer user -> i1 accept {{accept}} as round2\n\
         expect round2 no response\nretry round2 -> i2 as learned\n",
    );
    for fleet in FLEETS {
        let ran = run(&["run", "--target", fleet, &file, "--reruns", "0"]);
        assert_eq!(ran.status, 0, "{fleet}:\n{}\n{}", ran.stdout, ran.stderr);
        assert!(ran.stdout.contains("the request written, the client stopped waiting (its answer lost)"), "{}", ran.stdout);
        // The lost request never appears answered: nothing with its id was read.
        assert!(!ran.stdout.lines().any(|l| l.contains("← t") && has_id(l, 2)), "{}", ran.stdout);
        // The server may or may not have finished before the retry came: one effect at most, and the retry
        // tells the truth either way (the deletion it did, or the one the first one did).
        let learned = answer_line(&ran, 3);
        assert!(learned.contains("state_consumed") || learned.contains("\"outcome\":\"deleted\""), "{learned}");
        assert_eq!(effects(&ran), "effects: the probe read 4 before and 3 after", "{fleet}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_fault_armed_and_never_met_fails_the_scenario_naming_it() {
    let dir = scratch("unfired");
    // Armed for i3, which the scenario never sends to again.
    let file = scenario(&dir, "unfired", "drop answer from i3 to tools/call\nanswer user -> i2 accept {{accept}} as round2\n");
    let ran = run(&["run", "--target", "targets/mcpsim-stdio.toml", &file, "--reruns", "0"]);
    assert_eq!(ran.status, 1, "{}\n{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout.contains("ERROR fault armed, never fired: at the next tools/call to scenario instance 3: its answer lost"),
        "{}",
        ran.stdout
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// What the test's own HTTP server saw of one POST.
#[derive(Debug)]
struct Seen {
    request: String,
    /// The client closed the connection (EOF) before the server wrote any byte of an answer.
    closed_before_answer: bool,
}

#[test]
fn live_mode_closing_the_connection_closes_it_before_a_byte_of_the_answer_is_read() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let server = std::thread::spawn(move || loop {
        let (mut stream, _) = listener.accept().unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut bytes = Vec::new();
        let mut buffer = [0u8; 4096];
        // The whole request: headers, then Content-Length bytes of body (a connection closed before, such as
        // a reachability check, is not the one watched).
        let request = loop {
            let n = stream.read(&mut buffer).unwrap_or(0);
            if n == 0 {
                break None;
            }
            bytes.extend_from_slice(&buffer[..n]);
            let text = String::from_utf8_lossy(&bytes).into_owned();
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text[..end]
                    .lines()
                    .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse::<usize>().unwrap()))
                    .unwrap_or(0);
                if bytes.len() >= end + 4 + length {
                    break Some(text);
                }
            }
        };
        let Some(request) = request else { continue };
        // Nothing written yet: does the client close its end before any answer comes?
        let closed_before_answer = matches!(stream.read(&mut buffer), Ok(0));
        let _ = stream.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 36\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}",
        );
        break Seen { request, closed_before_answer };
    });
    let dir = scratch("live");
    let file = dir.join("live-closing.sim");
    std::fs::write(
        &file,
        "use demo\ninstance i1\nclient alice principal alice\n\
         drop answer from i1 to tools/call closing the connection\n\
         send alice -> i1 tools/call {\"name\": \"notes_delete\", \"arguments\": {\"workspaceUri\": \"file:///Users/alice/Documents/Notes\", \"title\": \"TPS report\"}} as lost\n\
         expect lost no response\n",
    )
    .unwrap();
    let ran = run(&["run", "--live", &url, file.to_str().unwrap()]);
    let seen = server.join().expect("the test's server saw one POST");
    assert!(seen.request.starts_with("POST /mcp HTTP/1.1\r\n") && seen.request.contains("\"method\":\"tools/call\""), "{seen:?}");
    assert!(seen.closed_before_answer, "the connection stayed open for the answer: {seen:?}\n{}", ran.stdout);
    assert!(ran.stdout.contains("expect lost no response"), "{}\n{}", ran.stdout, ran.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}
