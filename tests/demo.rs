//! `mcpsim demo`, run as a user runs it: exit status and every printed byte, in both forms.

use std::process::Command;

fn demo(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_mcpsim")).arg("demo").args(args).output().expect("the mcpsim binary runs");
    let stdout = String::from_utf8(output.stdout).expect("the demo prints UTF-8");
    assert!(output.status.success(), "demo {args:?} failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("Every step got the expected outcome"));
    stdout
}

/// The default: a line or two per message within 100 columns, round 1 on i1 and round 2 on i2, the state
/// decoded and its seal verified.
#[test]
fn the_demo_walks_the_lesson_on_two_instances_and_prints_the_same_bytes_every_run() {
    let stdout = demo(&[]);
    assert_eq!(demo(&[]), stdout, "the same bytes on every run");
    assert!(stdout.contains("→ i1  #3 tools/call notes_delete"), "round 1 goes to i1:\n{stdout}");
    assert!(stdout.contains("→ i2  #4 tools/call notes_delete"), "round 2 goes to i2:\n{stdout}");
    assert!(stdout.contains("seal            verified"), "the state's seal is verified:\n{stdout}");
    assert!(stdout.contains("│ nonce"), "the state's nonce is shown:\n{stdout}");
    for line in stdout.lines() {
        assert!(line.chars().count() <= 100, "a line of {} columns: {line}", line.chars().count());
    }
    insta::with_settings!({ snapshot_path => "../snapshots", prepend_module_to_snapshot => false }, {
        insta::assert_snapshot!("demo_stdout", stdout);
    });
}

/// `--format json`: every message whole, `_meta` included, on the same two instances.
#[test]
fn the_json_form_prints_every_message_whole() {
    let stdout = demo(&["--format", "json"]);
    assert!(stdout.contains("\"io.modelcontextprotocol/protocolVersion\": \"2026-07-28\""));
    assert!(stdout.contains("← i2"), "{stdout}");
    insta::with_settings!({ snapshot_path => "../snapshots", prepend_module_to_snapshot => false }, {
        insta::assert_snapshot!("demo_stdout_json", stdout);
    });
}
