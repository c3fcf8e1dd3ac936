//! `mcpsim demo`, run as a user runs it: exit status and every printed byte.

use std::process::Command;

#[test]
fn the_demo_walks_the_lesson_and_prints_the_same_bytes_every_run() {
    let output = Command::new(env!("CARGO_BIN_EXE_mcpsim")).arg("demo").output().expect("the mcpsim binary runs");
    let stdout = String::from_utf8(output.stdout).expect("the demo prints UTF-8");
    assert!(output.status.success(), "demo failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("Every step got the expected outcome"));
    insta::with_settings!({ snapshot_path => "../snapshots", prepend_module_to_snapshot => false }, {
        insta::assert_snapshot!("demo_stdout", stdout);
    });
}
