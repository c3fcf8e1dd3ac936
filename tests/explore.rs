//! Exploration: the real design holds over many random schedules of the race scenarios, the answer does
//! not depend on the number of jobs, a panicking simulator is reported as a crash, and the CLI's exit
//! codes distinguish the outcomes.

use mcpsim::handlers::Service;
use mcpsim::sim::actors::instance::{notes_server_factory, InstanceParts, ServiceFactory};
use mcpsim::sim::explore::{self, SeedOutcome};
use mcpsim::sim::mutants;
use std::process::Command;
use std::sync::Arc;

/// Schedules per race scenario in this (debug-build) test; `mcpsim explore … --seeds 10000` in a release
/// build is the full bar (see docs/exploring.md).
const RACE_SCHEDULES: u64 = 1_000;

#[test]
fn the_real_design_holds_over_many_schedules_of_the_race_scenarios() {
    for name in ["04-accepts-race-for-one-note.sim", "05-accepts-race-for-different-candidates.sim", "zoo-move-races-the-accept"] {
        let scenario = mutants::scenario_named(name).unwrap();
        let found = explore::explore(&scenario, &notes_server_factory(), 1..=RACE_SCHEDULES, 1, false, &|_, _| {});
        assert_eq!(found.schedules, RACE_SCHEDULES);
        assert_eq!((found.unsafe_runs, found.expectation_runs, found.crashed_runs), (0, 0, 0), "{name}: {found:?}");
    }
}

#[test]
fn two_jobs_give_the_same_answer_as_one() {
    let mutant = mutants::find("recheck-then-delete").unwrap();
    let scenario = mutant.scenario();
    let one = explore::explore(&scenario, &mutant.factory(), 1..=41, 1, false, &|_, _| {});
    let two = explore::explore(&scenario, &mutant.factory(), 1..=41, 2, false, &|_, _| {});
    assert!(one.unsafe_runs > 0 && one.unsafe_runs < 41, "some schedules are unsafe, not all: {}", one.unsafe_runs);
    assert_eq!(one, two);
}

#[test]
fn a_panicking_simulator_is_reported_as_a_crash() {
    let factory: ServiceFactory = Arc::new(|_: InstanceParts| -> Arc<dyn Service> { panic!("a broken factory") });
    let scenario = mutants::scenario_named("01-lesson-exchange-on-one-instance.sim").unwrap();
    let (_, outcome) = explore::run_seed(&scenario, &factory, 1);
    assert_eq!(outcome, SeedOutcome::Crashed("a broken factory".into()));
}

fn mcpsim(args: &[&str]) -> (i32, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_mcpsim")).args(args).output().unwrap();
    (output.status.code().unwrap(), String::from_utf8(output.stdout).unwrap())
}

#[test]
fn exit_codes_distinguish_held_unsafe_and_usage() {
    let (code, out) = mcpsim(&["explore", "04-accepts-race-for-one-note", "--seeds", "20"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("all held"), "{out}");
    let saved = std::env::temp_dir().join(format!("mcpsim-exit-codes-{}.json", std::process::id()));
    let (code, out) = mcpsim(&[
        "explore",
        "05-accepts-race-for-different-candidates",
        "--seeds",
        "5",
        "--mutant",
        "delete-then-claim",
        "--save",
        saved.to_str().unwrap(),
    ]);
    std::fs::remove_file(&saved).unwrap();
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("SAFETY VIOLATED (at-most-once)"), "{out}");
    assert!(
        out.contains("reproduce: mcpsim explore 05-accepts-race-for-different-candidates --seed-range 1..1 --mutant delete-then-claim"),
        "{out}"
    );
    assert_eq!(mcpsim(&["explore", "no-such-scenario"]).0, 4);
    assert_eq!(mcpsim(&["explore", "04-accepts-race-for-one-note", "--exhaustive", "--faults", "crash"]).0, 4);
    assert_eq!(mcpsim(&["explore", "--help"]).0, 0);
    assert_eq!(mcpsim(&["explore", "04-accepts-race-for-one-note", "--mutant", "no-such-mutant"]).0, 4);
    assert_eq!(mcpsim(&["explore", "04-accepts-race-for-one-note", "--seed-range", "9..3"]).0, 4);
}

#[test]
fn the_zoo_is_listed_one_sentence_each() {
    let (code, out) = mcpsim(&["mutants"]);
    assert_eq!(code, 0);
    for mutant in mutants::MUTANTS {
        assert!(out.contains(mutant.name) && out.contains(mutant.mistake), "{}", mutant.name);
    }
}

#[test]
fn exhaustive_mode_visits_every_order_of_the_double_accept_and_the_reduction_keeps_every_end_state() {
    use mcpsim::sim::exhaustive::{explore_every_order, explore_exhaustively};
    let scenario = mutants::scenario_named("04-accepts-race-for-one-note.sim").unwrap();
    let reduced = explore_exhaustively(&scenario, &notes_server_factory());
    let every = explore_every_order(&scenario, &notes_server_factory());
    assert!(!reduced.truncated && !every.truncated);
    // Pinned: a change to the scenario, the engine or the reduction shows up here.
    assert_eq!(reduced.schedules, 22, "{reduced:?}");
    assert!(reduced.schedules < every.schedules, "the reduction skips orders: {} of {}", reduced.schedules, every.schedules);
    // Either instance can win the race: two end states, and the reduction loses neither.
    assert_eq!((reduced.end_states, every.end_states), (2, 2));
    assert_eq!((reduced.unsafe_runs, reduced.expectation_runs, every.unsafe_runs, every.expectation_runs), (0, 0, 0, 0));
    // A mutant is caught by the exhaustive search too.
    let mutant = mutants::find("delete-then-claim").unwrap();
    let caught = explore_exhaustively(&mutant.scenario(), &mutant.factory());
    assert!(caught.first_unsafe.is_some());
}

#[test]
fn a_saved_counterexample_replays_its_transcript_byte_for_byte() {
    let directory = std::env::temp_dir().join(format!("mcpsim-explore-test-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    let file = directory.join("counterexample.json");
    let file_arg = file.to_str().unwrap();
    let (code, explored) =
        mcpsim(&["explore", "zoo-move-races-the-accept", "--seeds", "100", "--mutant", "recheck-then-delete", "--save", file_arg]);
    assert_eq!(code, 1, "{explored}");
    assert!(explored.contains("minimal counterexample: property containment broken"), "{explored}");
    assert!(explored.contains(&format!("reproduce byte for byte: mcpsim replay {file_arg}")), "{explored}");
    let transcript = |out: &str| -> String {
        let start = out.find("# mcpsim transcript").expect("a transcript");
        let end = out[start..].find("\n   FAIL").map(|i| start + i).expect("a failed property in the transcript");
        out[start..end].to_string()
    };
    let (code, replayed) = mcpsim(&["replay", file_arg]);
    assert_eq!(code, 1, "{replayed}");
    assert_eq!(transcript(&replayed), transcript(&explored));
    // Shrunk: the move is delivered between the re-check and the delete, and nothing else is unusual.
    let reproducer: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert!(reproducer["choices"].as_array().unwrap().len() <= 3, "{}", reproducer["choices"]);
    std::fs::remove_dir_all(&directory).unwrap();
}

#[test]
fn crash_faults_drawn_from_the_seed_happen_and_the_real_design_stays_safe() {
    use mcpsim::sim::runner::{self, RunOptions};
    let scenario = mutants::scenario_named("04-accepts-race-for-one-note.sim").unwrap();
    let mut lost_answers = 0;
    for seed in 1..=200 {
        let crashes = explore::fault_plan(seed, scenario.cluster.instances.len());
        assert_eq!(crashes, explore::fault_plan(seed, scenario.cluster.instances.len()), "a plan is a function of the seed");
        let options = RunOptions { record_transcript: false, check_statelessness: false, crashes, ..RunOptions::seeded(seed) };
        let report = runner::run(&scenario, &options);
        lost_answers += report.history.operations.iter().filter(|op| mcpsim::sim::check::describe(op) == "no response (lost)").count();
    }
    assert!(lost_answers > 0, "some planned crash lost a request in flight");
    for name in
        ["04-accepts-race-for-one-note.sim", "05-accepts-race-for-different-candidates.sim", "16-crash-between-claim-and-delete.sim"]
    {
        let scenario = mutants::scenario_named(name).unwrap();
        let found = explore::explore(&scenario, &notes_server_factory(), 1..=500, 1, true, &|_, _| {});
        assert_eq!((found.unsafe_runs, found.crashed_runs), (0, 0), "{name}: {found:?}");
    }
    // A mutant is still caught with faults on.
    let mutant = mutants::find("delete-then-claim").unwrap();
    let found = explore::explore(&mutant.scenario(), &mutant.factory(), 1..=50, 1, true, &|_, _| {});
    assert!(found.unsafe_runs > 0);
}
