//! `mcpsim explore --target … --faults KINDS` and `run --target … --fault-plan` from the outside, on real
//! processes: plans drawn from the seed and printed with every fault that fired, the same seed printing the
//! same plans and decisions, the coverage naming what fired where and what never did, a failure shrunk to the
//! fewest fault events with the one command that repeats it (and that command repeating it), and a given plan
//! or a fault list that is wrong refused before anything starts.
//!
//! Every mcpsim run here is bounded ([`RUN_SECONDS_MAX`]) and killed if it overstays.

mod common;

use common::child::Ran;

/// Longest one mcpsim run may take here (five seeds of scenario 02 on three processes take ~6 s).
const RUN_SECONDS_MAX: u64 = 180;

fn run(args: &[&str]) -> Ran {
    common::child::run_mcpsim(args, RUN_SECONDS_MAX)
}

/// What an exploration decided, seed by seed: each seed's line-indented decisions (its routing, the plan
/// drawn, each fault as it fired, each retry) and the coverage. The verdicts are left out: whether a play held
/// is the servers' timing as well as mcpsim's decisions.
fn decisions_and_coverage(ran: &Ran) -> Vec<&str> {
    let mut kept = Vec::new();
    let mut in_coverage = false;
    for line in ran.stdout.lines() {
        in_coverage |= line.starts_with("coverage (");
        let is_verdict = line.ends_with(" seed(s) held") || line.contains(" seed(s) failed") || line.starts_with("every one of");
        if (line.starts_with("  ") && !in_coverage) || (in_coverage && !is_verdict && !line.starts_with("seed ")) {
            kept.push(line);
        }
        if in_coverage && is_verdict {
            break;
        }
    }
    kept
}

const MESSAGE_FAULTS: [&str; 7] =
    ["explore", "--target", "targets/mcpsim-stdio.toml", "02-accepts-race", "--faults", "lost-answer,duplicate,hold", "--seeds"];

#[test]
fn the_same_seeds_draw_the_same_plans_and_make_the_same_decisions_with_the_coverage_printed() {
    let args: Vec<&str> = MESSAGE_FAULTS.iter().copied().chain(["5"]).collect();
    let first = run(&args);
    assert!([0, 1, 3].contains(&first.status), "a judged run: {}\n{}", first.stdout, first.stderr);
    let planned = first.stdout.lines().filter(|l| l.starts_with("  fault planned: ")).count();
    let fired = first.stdout.lines().filter(|l| l.starts_with("  fault fired: ")).count();
    assert!(planned >= 3 && fired >= 1, "five seeds draw plans and faults fire:\n{}", first.stdout);
    assert!(first.stdout.contains("coverage (5 seed(s), faults turned on: lost-answer, duplicate, hold):"), "{}", first.stdout);
    // Each kind turned on has a line: where it fired, or why it never did.
    for kind in ["lost-answer", "duplicate", "hold"] {
        let line =
            first.stdout.lines().find(|l| l.starts_with(&format!("  {kind} "))).unwrap_or_else(|| panic!("{kind}: {}", first.stdout));
        assert!(line.contains(" fired ") || line.contains("never fired: "), "{line}");
    }
    assert!(first.stdout.lines().any(|l| l.starts_with("  lost-answer  fired ") && l.contains(" → t") && l.contains("at request ")));
    let second = run(&args);
    assert_eq!(decisions_and_coverage(&first), decisions_and_coverage(&second), "{}\n---\n{}", first.stdout, second.stdout);
    assert!(decisions_and_coverage(&first).len() > 10);
}

#[test]
fn our_stdio_fleet_holds_under_lost_answers_copies_and_held_requests() {
    // Ten seeds draw every one of the three kinds at least once (five leave copies undrawn: exit 3).
    let args: Vec<&str> = MESSAGE_FAULTS.iter().copied().chain(["10"]).collect();
    let ran = run(&args);
    assert_eq!(ran.status, 0, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("every one of 10 seed(s) held"), "{}", ran.stdout);
    // No kind is listed as never fired in the coverage (a single drawn event may come after the play's end).
    let never: Vec<&str> =
        ran.stdout.lines().filter(|l| l.starts_with("  ") && !l.starts_with("  fault ") && l.contains(" never fired: ")).collect();
    assert!(never.is_empty(), "{never:?}\n{}", ran.stdout);
}

#[test]
fn a_failure_under_copies_is_shrunk_and_its_reproduce_command_repeats_it() {
    // Seeds 10 and 11 draw copies for scenario 02; a process with its own memory store breaks at most once.
    let ran = run(&[
        "explore",
        "--target",
        "targets/broken-own-memory-store.toml",
        "02-accepts-race",
        "--faults",
        "duplicate",
        "--seed-range",
        "10..11",
        "--reruns",
        "2",
    ]);
    assert_eq!(ran.status, 1, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("seed 10: FAIL (at-most-once"), "{}", ran.stdout);
    assert!(ran.stdout.contains("  fault fired: at request 2: delivered twice"), "{}", ran.stdout);
    assert!(ran.stdout.contains("  duplicate  fired 3 of 3 drawn, in 2 of 2 seed(s)"), "{}", ran.stdout);
    // Its memory store breaks at-most-once with no fault at all: the fewest events that still fail are none.
    assert!(ran.stdout.contains("seed 10 shrunk from 2 fault event(s) to 0 in 1 play(s): it fails with no fault at all"), "{}", ran.stdout);
    assert!(ran.stdout.contains("reproduced 2 of 2 re-run(s)"), "{}", ran.stdout);
    let reproduce = ran.stdout.lines().find_map(|l| l.strip_prefix("reproduce: mcpsim ")).expect("a reproduce command");
    assert!(
        reproduce.starts_with("run --target targets/broken-own-memory-store.toml 02-accepts-race --seed 10 --fault-plan '"),
        "{reproduce}"
    );
    let (head, plan) = reproduce.split_once(" --fault-plan ").unwrap();
    let plan = plan.trim_matches('\'');
    assert_eq!(plan, r#"{"kinds":["duplicate"],"events":[]}"#);
    let mut args: Vec<&str> = head.split(' ').collect();
    args.extend(["--fault-plan", plan, "--reruns", "2"]);
    let again = run(&args);
    assert_eq!(again.status, 1, "{}\n{}", again.stdout, again.stderr);
    assert!(again.stdout.contains("FAIL (at-most-once"), "{}", again.stdout);
    assert!(again.stdout.contains("reproduced 2 of 2 re-runs"), "{}", again.stdout);
}

#[test]
fn a_given_plan_is_played_as_given_and_printed_in_the_decisions() {
    let plan = r#"{"kinds":["lost-answer"],"events":[{"trigger":{"request":{"number":2}},"action":{"fault":"lose-answer","closeConnection":false,"retry":"other"}}]}"#;
    let ran =
        run(&["run", "--target", "targets/mcpsim-stdio.toml", "02-accepts-race", "--seed", "4", "--fault-plan", plan, "--reruns", "0"]);
    assert!([0, 1].contains(&ran.status), "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran
        .stdout
        .contains("  fault planned: at request 2: its answer lost (read and discarded); the client retries on another instance"));
    assert!(ran.stdout.contains("  fault fired: at request 2: its answer lost (read and discarded)"), "{}", ran.stdout);
    assert!(ran.stdout.contains("the client retries request 2 on "), "{}", ran.stdout);
}

#[test]
fn a_plan_with_an_unknown_field_or_an_unknown_fault_is_refused_before_anything_starts() {
    let ran = run(&[
        "run",
        "--target",
        "targets/mcpsim-stdio.toml",
        "02-accepts-race",
        "--fault-plan",
        r#"{"kinds":["duplicate"],"events":[],"probability":0.5}"#,
    ]);
    assert_eq!(ran.status, 2, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stderr.contains("--fault-plan: not a fault plan: unknown field `probability`"), "{}", ran.stderr);
    assert!(!ran.stdout.contains("preflight"), "refused before the fleet started: {}", ran.stdout);
    let ran = run(&["run", "--target", "targets/mcpsim-stdio.toml", "--fault-plan", "/nonexistent/plan.json"]);
    assert_eq!(ran.status, 2, "{}", ran.stderr);
    assert!(ran.stderr.contains("--fault-plan /nonexistent/plan.json: cannot read"), "{}", ran.stderr);
    for command in ["run", "explore"] {
        let ran = run(&[command, "--target", "targets/mcpsim-stdio.toml", "02-accepts-race", "--faults", "lost-answer,partition"]);
        assert_eq!(ran.status, 2, "{command}: {}", ran.stderr);
        assert!(ran.stderr.contains("unknown fault \"partition\" against a target: the faults are lost-answer, duplicate, hold, pause, crash, clock-skew, store-cut, or all"), "{command}: {}", ran.stderr);
    }
    // The simulator's faults are not a target's.
    let ran = run(&["explore", "--target", "targets/mcpsim-stdio.toml", "02-accepts-race", "--faults", "slow-store"]);
    assert_eq!(ran.status, 2, "{}", ran.stderr);
}

#[test]
fn a_kind_turned_on_that_never_fired_is_listed_and_the_run_is_not_a_pass() {
    // Seeds 1 to 3 draw no copy for scenario 02: every seed holds, and still nothing was judged under copies.
    let ran = run(&["explore", "--target", "targets/mcpsim-stdio.toml", "02-accepts-race", "--faults", "duplicate", "--seeds", "3"]);
    assert_eq!(ran.status, 3, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("  duplicate  never fired: no plan of the 3 seed(s) drew it"), "{}", ran.stdout);
    assert!(ran.stdout.contains("every one of 3 seed(s) held, but not under duplicate: it never fired"), "{}", ran.stdout);
    assert!(!ran.stdout.contains("fault fired"), "{}", ran.stdout);
}
