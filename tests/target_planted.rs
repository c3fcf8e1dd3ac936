//! The planted mistakes of `targets/sdk/` against the real binary, on the server that needs nothing but
//! python3 (tests/peers/nosdk/notes_server.py, three stdio processes on one SQLite file): what `run --target`
//! and `attack --target` catch, and that the correct server is not flagged. The SDK servers' rows of the same
//! table (docs/targets.md, "Planted mistakes") are checked by .ci/sdk-target.sh, which installs the SDKs.
//!
//! Each planted mistake has its test: what must catch it. That each plant is live is checked without mcpsim
//! first (tests/peers/planted_live.py), so a miss here is the judge's.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Longest one mcpsim run may take here (one or two scenarios, or one attack, on python3 processes: ~5 s).
const RUN_SECONDS_MAX: u64 = 120;

struct Ran {
    status: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs mcpsim to its end, or kills it (SIGKILL; its watchdog then ends what it started) after
/// [`RUN_SECONDS_MAX`].
fn mcpsim(args: &[&str]) -> Ran {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    runtime.block_on(async {
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcpsim"))
            .args(args)
            .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
            .kill_on_drop(true)
            .output();
        let Ok(output) = tokio::time::timeout(Duration::from_secs(RUN_SECONDS_MAX), output).await else {
            panic!("mcpsim {args:?} ran longer than {RUN_SECONDS_MAX} s and was killed");
        };
        let output = output.expect("mcpsim starts");
        Ran {
            status: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    })
}

fn target(name: &str) -> String {
    format!("targets/sdk/nosdk-{name}.toml")
}

fn scenario(name: &str) -> String {
    format!("targets/scenarios/{name}.sim")
}

/// `run --target` of one scenario, without re-runs.
fn run(planted: &str, scenario_name: &str) -> Ran {
    mcpsim(&["run", "--target", &target(planted), &scenario(scenario_name), "--reruns", "0"])
}

fn attack(planted: &str, only: &str) -> Ran {
    mcpsim(&["attack", "--target", &target(planted), "--only", only])
}

fn finding<'a>(ran: &'a Ran, name: &str) -> &'a str {
    ran.stdout
        .lines()
        .find(|l| l.starts_with("FINDING") && l.contains(name))
        .unwrap_or_else(|| panic!("no finding {name}:\n{}\n{}", ran.stdout, ran.stderr))
}

/// The plants themselves, without mcpsim (tests/peers/planted_live.py): a miss in the table below is a miss of the
/// judge, not a plant that does nothing.
#[test]
fn every_planted_mistake_of_the_hand_written_server_does_what_it_plants() {
    let out = Command::new("python3")
        .args(["tests/peers/planted_live.py", "python3", "tests/peers/nosdk/notes_server.py"])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for bug in ["correct", "burn-on-cancel", "burn-on-invalid", "bind-client-info", "error-on-retry"] {
        assert!(stdout.lines().any(|l| l.starts_with("ok ") && l.contains(bug)), "{bug}: {stdout}");
    }
}

#[test]
fn the_correct_server_without_a_random_field_passes_the_race_the_decline_and_the_cancel() {
    let ran = run("correct-no-audit", "02-accepts-race");
    assert_eq!(ran.status, Some(0), "{}\n{}", ran.stdout, ran.stderr);
    let ran = attack("correct-no-audit", "decline-then-accept,cancel-then-accept,another-principal");
    assert_eq!(ran.status, Some(0), "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("3 attack(s): 3 held, 0 finding(s)"), "{}", ran.stdout);
}

#[test]
fn no_single_use_is_caught_by_refusal_when_a_declined_state_is_accepted() {
    let ran = run("no-single-use", "03-decline-then-accept");
    assert_eq!(ran.status, Some(1), "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("FAIL  property refusal"), "{}", ran.stdout);
    let ran = attack("no-single-use", "decline-then-accept");
    assert_eq!(ran.status, Some(1), "{}\n{}", ran.stdout, ran.stderr);
    assert!(finding(&ran, "decline-then-accept").contains("refusal"), "{}", ran.stdout);
}

/// A race: two accepts written to two processes at once both pass the ledger check when they overlap inside the
/// delete's 100 ms. Scenario 02 caught it on every server (its round 1 on i1 first); the battery's one-shot
/// `replay-concurrent` on processes that have answered nothing yet can miss it (issue 36 item 3), so it is not
/// what this test relies on. A race is not certain on a loaded machine: up to three tries, each reported.
#[test]
fn check_then_act_is_caught_by_at_most_once_when_two_accepts_race() {
    let mut tries = Vec::new();
    for _ in 0..3 {
        let ran = run("check-then-act", "02-accepts-race");
        if ran.status == Some(1) && ran.stdout.contains("FAIL  property at-most-once: one confirmation succeeded 2 times") {
            return;
        }
        tries.push(format!("exit {:?}\n{}\n{}", ran.status, ran.stdout, ran.stderr));
    }
    panic!("check-then-act was not caught in 3 tries:\n{}", tries.join("\n---\n"));
}

#[test]
fn burn_on_cancel_is_caught_by_the_scenario_and_the_battery() {
    let ran = run("burn-on-cancel", "04-cancel-then-accept");
    assert_eq!(ran.status, Some(1), "{}\n{}", ran.stdout, ran.stderr);
    let ran = attack("burn-on-cancel", "cancel-then-accept");
    assert_eq!(ran.status, Some(1), "{}\n{}", ran.stdout, ran.stderr);
}

#[test]
fn burn_on_invalid_is_caught_by_the_battery() {
    let ran = attack("burn-on-invalid", "schema-mismatch");
    assert_eq!(ran.status, Some(1), "{}\n{}", ran.stdout, ran.stderr);
}

#[test]
fn bind_client_info_is_caught_when_the_other_principal_copies_the_victims_meta() {
    let ran = run("bind-client-info", "06-another-principal-replays-the-state");
    assert_eq!(ran.status, Some(1), "{}\n{}", ran.stdout, ran.stderr);
    let ran = attack("bind-client-info", "another-principal");
    assert_eq!(ran.status, Some(1), "{}\n{}", ran.stdout, ran.stderr);
}

#[test]
fn error_on_retry_fails_expect_complete() {
    let ran = run("error-on-retry", "05-retry-after-the-first-instance-crashed");
    assert_eq!(ran.status, Some(1), "{}\n{}", ran.stdout, ran.stderr);
}

/// A correct server with a random audit id in every result: the file names it under `differ_by_design`, so it
/// passes, and the report says what was masked; the same file without that line fails statelessness on the
/// audit id alone (the false positive masks exist for).
#[test]
fn the_correct_server_with_a_random_audit_id_passes_once_the_file_masks_it() {
    let ran = mcpsim(&["run", "--target", &target("correct"), &scenario("01-retry-lands-elsewhere"), "--reruns", "0"]);
    assert_eq!(ran.status, Some(0), "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("masked as differing by design: result.structuredContent.audit"), "{}", ran.stdout);

    let dir = std::env::temp_dir().join(format!("mcpsim-unmasked-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let unmasked = dir.join("nosdk-correct-unmasked.toml");
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(target("correct"))).unwrap();
    let without: String = text.lines().filter(|l| !l.starts_with("differ_by_design")).map(|l| format!("{l}\n")).collect();
    assert_ne!(without, text, "the file names the audit id");
    std::fs::write(&unmasked, without).unwrap();
    let ran = mcpsim(&["run", "--target", unmasked.to_str().unwrap(), &scenario("01-retry-lands-elsewhere"), "--reruns", "0"]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(ran.status, Some(1), "{}\n{}", ran.stdout, ran.stderr);
    // Each finding with the lines behind its gutter (the JSON paths where the two answers differ).
    let lines: Vec<&str> = ran.stdout.lines().collect();
    let statelessness: Vec<String> = (0..lines.len())
        .filter(|&at| lines[at].contains("FAIL  property statelessness"))
        .map(|at| {
            let continued = lines[at + 1..].iter().take_while(|l| l.starts_with("         | "));
            std::iter::once(lines[at]).chain(continued.copied()).collect::<Vec<_>>().join("\n")
        })
        .collect();
    assert!(!statelessness.is_empty() && statelessness.iter().all(|f| f.contains("audit")), "{}", ran.stdout);
}

/// `gone-on-replay` (a plant of the no-SDK server only): single use holds (the ledger is claimed with the
/// delete), but the live note is looked up first, so a used confirmation's replay is answered "already gone",
/// as if nothing had been done. Only the honest-outcome judgement of the replays catches it: the correct
/// server's replays ("this confirmation was already used") hold.
#[test]
fn gone_on_replay_is_caught_by_honest_outcome_in_replay_sequential_and_scenario_01() {
    let dir = std::env::temp_dir().join(format!("mcpsim-gone-on-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let planted = dir.join("nosdk-gone-on-replay.toml");
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(target("correct-no-audit"))).unwrap();
    let with_bug = text.replace(r#"NOTES_EFFECT_MS = "100" }"#, r#"NOTES_EFFECT_MS = "100", NOTES_BUG = "gone-on-replay" }"#);
    assert_ne!(with_bug, text, "the bug is switched on");
    std::fs::write(&planted, with_bug).unwrap();
    let planted = planted.to_str().unwrap();

    let correct = attack("correct-no-audit", "replay-sequential");
    let replayed = mcpsim(&["attack", "--target", planted, "--only", "replay-sequential"]);
    let scenario = mcpsim(&["run", "--target", planted, &scenario("01-retry-lands-elsewhere"), "--reruns", "0"]);
    let _ = std::fs::remove_dir_all(&dir);

    assert_eq!(correct.status, Some(0), "{}\n{}", correct.stdout, correct.stderr);
    assert!(correct.stdout.contains("1 attack(s): 1 held, 0 finding(s)"), "{}", correct.stdout);
    assert_eq!(replayed.status, Some(1), "{}\n{}", replayed.stdout, replayed.stderr);
    let line = finding(&replayed, "replay-sequential");
    assert!(
        line.contains("honest-outcome") && line.contains(r#"says nothing was done (outcome "gone")"#) && line.contains("MISSION.md §3"),
        "{line}"
    );
    assert_eq!(scenario.status, Some(1), "{}\n{}", scenario.stdout, scenario.stderr);
    assert!(scenario.stdout.contains("FAIL  property honest-outcome: replayed on i3@"), "{}", scenario.stdout);
    assert!(scenario.stdout.contains("   ok    property at-most-once"), "{}", scenario.stdout);
}

/// An indeterminate request against real processes, without any fault: the accept's delete takes 2.5 s, the
/// request timeout is 1 s, so its answer is lost while the delete commits. The report lists it as "may have
/// happened"; the probe's one effect is explained by it (at most once holds), and the replay on a third process,
/// told "this confirmation was already used", is consistent with that one execution (honest outcome holds).
#[test]
fn a_timed_out_accept_is_reported_as_may_have_happened_and_its_replay_judged_against_its_effect() {
    let dir = std::env::temp_dir().join(format!("mcpsim-timed-out-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let slow = dir.join("nosdk-slow.toml");
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(target("correct-no-audit"))).unwrap();
    let changed = text
        .replace(r#"NOTES_EFFECT_MS = "100" }"#, r#"NOTES_EFFECT_MS = "2500" }"#)
        .replace("instances = 3\n", "instances = 3\nrequest_timeout_ms = 1000\n");
    assert_eq!(changed.matches("2500").count() + changed.matches("request_timeout_ms").count(), 2, "{changed}");
    std::fs::write(&slow, changed).unwrap();
    let ran = mcpsim(&["run", "--target", slow.to_str().unwrap(), &scenario("01-retry-lands-elsewhere"), "--reruns", "0"]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(ran.status, Some(1), "{}\n{}", ran.stdout, ran.stderr);
    let lines: Vec<&str> = ran.stdout.lines().filter(|l| l.contains("may have happened")).collect();
    assert!(
        lines.len() == 1 && lines[0].starts_with("   ?     may have happened: round2 on i2@t") && lines[0].contains("(answer lost: "),
        "{}",
        ran.stdout
    );
    for held in ["effects: the probe read 3 before and 2 after", "   ok    property at-most-once", "   ok    property honest-outcome"] {
        assert!(ran.stdout.contains(held), "{held}: {}", ran.stdout);
    }
    assert!(ran.stdout.contains("FAIL  line 18: expect round2 complete: expected a response, got no response (lost)"), "{}", ran.stdout);
}
