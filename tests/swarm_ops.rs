//! The swarm's operations, from outside: `explore --check-determinism` (another process re-runs sampled seeds,
//! and a process that prints one byte differently is caught), `scripts/swarm-local.sh` (the Kubernetes
//! manifest's pod command as local processes, merged) and the seed ledger (`merge --ledger`, `explore
//! --ledger` replaying recorded seeds first). Each starts the built `mcpsim`.

mod common;

use common::child::{finish, mcpsim, run_mcpsim, scratch, Ran};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

const RACE: &str = "04-accepts-race-for-one-note";

fn assert_status(ran: &Ran, status: i32) {
    assert_eq!(ran.status, status, "stdout:\n{}\nstderr:\n{}", ran.stdout, ran.stderr);
}

/// A program that runs the real mcpsim with its arguments and changes one byte of line `line` of its output:
/// another "build" that disagrees.
fn altering_child(dir: &Path, line: usize) -> std::path::PathBuf {
    let script = dir.join("altered-mcpsim.sh");
    let text = format!("#!/bin/sh\n'{}' \"$@\" | sed '{line}s/\"/X/'\n", env!("CARGO_BIN_EXE_mcpsim"));
    std::fs::write(&script, text).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

#[test]
fn the_same_build_agrees_across_processes_on_a_race_with_and_without_faults() {
    for faults in [None, Some("all")] {
        let mut args = vec!["explore", RACE, "--seeds", "40", "--check-determinism=4"];
        args.extend(faults.iter().flat_map(|f| ["--faults", f]));
        let ran = run_mcpsim(&args, 300);
        assert_status(&ran, 0);
        assert!(
            ran.stdout.contains("determinism across processes: 4 seed(s) (1, 14, 27, 40)")
                && ran.stdout.contains("every transcript the same bytes in both processes"),
            "{}",
            ran.stdout
        );
    }
}

#[test]
fn another_process_that_prints_one_byte_differently_is_a_finding() {
    let dir = scratch("swarm-ops", "determinism");
    let child = altering_child(&dir, 3);
    let mut command = mcpsim(&["explore", RACE, "--seeds", "30", "--check-determinism=2"]);
    command.env("MCPSIM_DETERMINISM_CHILD", &child);
    let ran = finish(command.spawn().unwrap(), 300);
    assert_status(&ran, 1);
    // Both sampled seeds are findings, each with the seed and the first differing line of each side.
    for seed in [1, 30] {
        assert!(
            ran.stdout.contains(&format!(
                "NONDETERMINISTIC: seed {seed} ran differently in another process; the transcripts first differ at line 3:"
            )),
            "{}",
            ran.stdout
        );
    }
    assert!(ran.stdout.contains("  this process: {\"from\"") && ran.stdout.contains("  the other: {X"), "{}", ran.stdout);
    assert!(ran.stdout.contains(&format!("reproduce: mcpsim run {RACE} --seed 30 --format jsonl")), "{}", ran.stdout);
}

#[test]
fn a_check_that_cannot_be_made_leaves_the_run_not_judged() {
    let dir = scratch("swarm-ops", "determinism-missing");
    let mut command = mcpsim(&["explore", RACE, "--seeds", "5", "--check-determinism=1"]);
    command.env("MCPSIM_DETERMINISM_CHILD", dir.join("no-such-program"));
    let ran = finish(command.spawn().unwrap(), 120);
    assert_status(&ran, 3);
    assert!(ran.stdout.contains("NOT CHECKED:") && ran.stdout.contains("cannot start it"), "{}", ran.stdout);
    // A child that never ends is killed after the configured time, and said so.
    let hang = dir.join("hang.sh");
    std::fs::write(&hang, "#!/bin/sh\nexec sleep 600\n").unwrap();
    std::fs::set_permissions(&hang, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut command = mcpsim(&["explore", RACE, "--seeds", "5", "--check-determinism=1"]);
    command.env("MCPSIM_DETERMINISM_CHILD", &hang).env("MCPSIM_DETERMINISM_TIMEOUT", "0.5");
    let ran = finish(command.spawn().unwrap(), 60);
    assert_status(&ran, 3);
    assert!(ran.stdout.contains("did not end within 0.5 s"), "{}", ran.stdout);
}
