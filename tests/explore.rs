//! Exploration: the real design holds over many random schedules of the race scenarios, with every fault
//! on, the answer does not depend on the number of jobs, faults fire as planned and are replayed from the
//! decision log, a panicking simulator is reported as a crash, and the CLI's exit codes distinguish the
//! outcomes.

use mcpsim::testing::explore::{self, SeedOutcome};
use mcpsim::testing::mutants;
use mcpsim::testing::Service;
use mcpsim::testing::{notes_server_factory, InstanceParts, ServiceFactory};
use mcpsim::{testing::Fault, FaultKind};
use std::process::Command;
use std::sync::Arc;

/// Schedules per race scenario without faults (every expectation judged too).
const RACE_SCHEDULES: u64 = 1_000;
/// Schedules per race scenario with every fault on.
const FAULTY_RACE_SCHEDULES: u64 = 10_000;
const RACE_SCENARIOS: [&str; 4] = [
    "04-accepts-race-for-one-note.sim",
    "05-accepts-race-for-different-candidates.sim",
    "zoo-move-races-the-accept",
    "47-gateways-race-one-export-confirmation.sim",
];

#[test]
fn the_real_design_holds_over_many_schedules_of_the_race_scenarios() {
    for name in RACE_SCENARIOS {
        let scenario = mcpsim::library(name).unwrap();
        let found = explore::explore(&scenario, &notes_server_factory(), 1..=RACE_SCHEDULES, 1, &[], &|_, _| {});
        assert_eq!(found.schedules, RACE_SCHEDULES);
        assert_eq!((found.unsafe_runs, found.not_live_runs, found.crashed_runs), (0, 0, 0), "{name}: {found:?}");
    }
}

/// Also CI's coverage gate: across these explorations every fault kind fires (a kind that never fired
/// would make "safe under every fault" an empty claim), and every race scenario's parallel block races.
#[test]
fn the_real_design_stays_safe_and_live_over_ten_thousand_schedules_with_every_fault_on() {
    let mut fired = std::collections::BTreeMap::new();
    for name in RACE_SCENARIOS {
        let scenario = mcpsim::library(name).unwrap();
        let (found, coverage) =
            explore::explore_with_coverage(&scenario, &notes_server_factory(), 1..=FAULTY_RACE_SCHEDULES, 2, &FaultKind::ALL, &|_, _| {});
        assert_eq!(found.schedules, FAULTY_RACE_SCHEDULES);
        assert_eq!((found.unsafe_runs, found.not_live_runs, found.crashed_runs), (0, 0, 0), "{name}: {found:?}");
        assert_eq!(coverage.runs, FAULTY_RACE_SCHEDULES);
        for (kind, reached) in &coverage.faults {
            *fired.entry(kind.as_str()).or_insert(0) += reached.times;
        }
        let parallel = coverage.steps.values().filter(|step| step.text.starts_with("parallel")).collect::<Vec<_>>();
        assert!(!parallel.is_empty() && parallel.iter().all(|step| step.raced_runs > 0), "{name}: {parallel:?}");
        println!("{name}: faults fired {:?}", coverage.faults.iter().map(|(k, r)| (k.as_str(), r.times)).collect::<Vec<_>>());
    }
    for kind in FaultKind::ALL {
        assert!(
            fired.get(kind.as_str()).copied().unwrap_or(0) > 0,
            "{} never fired across the race explorations: {fired:?}",
            kind.as_str()
        );
    }
}

#[test]
fn two_jobs_give_the_same_answer_as_one() {
    let mutant = mutants::find("recheck-then-delete").unwrap();
    let scenario = mutant.scenario();
    let one = explore::explore(&scenario, &mutant.factory(), 1..=41, 1, &[], &|_, _| {});
    let two = explore::explore(&scenario, &mutant.factory(), 1..=41, 2, &[], &|_, _| {});
    assert!(one.unsafe_runs > 0 && one.unsafe_runs < 41, "some schedules are unsafe, not all: {}", one.unsafe_runs);
    assert_eq!(one, two);
    let one = explore::explore(&scenario, &mutant.factory(), 1..=41, 1, &FaultKind::ALL, &|_, _| {});
    let two = explore::explore(&scenario, &mutant.factory(), 1..=41, 2, &FaultKind::ALL, &|_, _| {});
    assert!(one.unsafe_runs > 0);
    assert_eq!(one, two, "with faults too");
}

/// Threads take blocks of seeds as they get to them (which thread runs which depends on timing); the answer,
/// first violating seed and coverage included, is read in seed order and so the same for any number of jobs.
#[test]
fn any_number_of_jobs_gives_the_same_answer_and_coverage() {
    let mutant = mutants::find("recheck-then-delete").unwrap();
    let scenario = mutant.scenario();
    let seeds = 1..=130;
    let (one, one_covered) = explore::explore_with_coverage(&scenario, &mutant.factory(), seeds.clone(), 1, &[], &|_, _| {});
    assert!(one.unsafe_runs > 0 && one.unsafe_runs < 130, "some schedules are unsafe, not all: {}", one.unsafe_runs);
    for jobs in [2, 3, 7] {
        let (many, many_covered) = explore::explore_with_coverage(&scenario, &mutant.factory(), seeds.clone(), jobs, &[], &|_, _| {});
        assert_eq!(one, many, "{jobs} jobs");
        assert_eq!(one_covered, many_covered, "{jobs} jobs: coverage");
    }
}

#[test]
fn a_panicking_simulator_is_reported_as_a_crash() {
    let factory: ServiceFactory = Arc::new(|_: InstanceParts| -> Arc<dyn Service> { panic!("a broken factory") });
    let scenario = mcpsim::library("01-lesson-exchange-on-one-instance.sim").unwrap();
    let (_, outcome) = explore::run_seed(&scenario, &factory, 1);
    assert_eq!(outcome, SeedOutcome::Crashed("a broken factory".into()));
}

fn mcpsim(args: &[&str]) -> (i32, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_mcpsim")).args(args).output().unwrap();
    (output.status.code().unwrap(), String::from_utf8(output.stdout).unwrap())
}

#[test]
fn exit_codes_distinguish_held_unsafe_not_live_and_usage() {
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
    assert_eq!(mcpsim(&["explore", "no-such-scenario"]).0, 2, "a usage error, as in every command");
    assert_eq!(mcpsim(&["explore", "04-accepts-race-for-one-note", "--exhaustive", "--faults", "crash"]).0, 2);
    let (code, out) = mcpsim(&["explore", "04-accepts-race-for-one-note", "--seeds", "20", "--faults", "all"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("broke liveness         0") && out.contains("liveness with clients retrying"), "{out}");
    let saved = std::env::temp_dir().join(format!("mcpsim-exit-codes-liveness-{}.json", std::process::id()));
    let args = ["explore", "04-accepts-race-for-one-note", "--seeds", "3", "--faults", "drop", "--mutant", "claim-without-outcome"];
    let (code, out) = mcpsim(&[&args[..], &["--save", saved.to_str().unwrap()]].concat());
    assert_eq!(code, 4, "only liveness broke: {out}");
    assert!(out.contains("LIVENESS FAILED") && out.contains("minimal counterexample: property liveness broken"), "{out}");
    let (code, replayed) = mcpsim(&["replay", saved.to_str().unwrap()]);
    std::fs::remove_file(&saved).unwrap();
    assert_eq!(code, 4, "a replayed liveness failure exits 4 too: {replayed}");
    let (code, _) = mcpsim(&["explore", "04-accepts-race-for-one-note", "--faults", "crash,partition"]);
    assert_eq!(code, 2, "an unknown fault is a usage error");
    assert_eq!(mcpsim(&["explore", "--all-mutants", "--faults", "all"]).0, 2, "each mutant has its own faults");
    assert_eq!(mcpsim(&["explore", "--help"]).0, 0);
    assert_eq!(mcpsim(&["explore", "04-accepts-race-for-one-note", "--mutant", "no-such-mutant"]).0, 2);
    assert_eq!(mcpsim(&["explore", "04-accepts-race-for-one-note", "--seed-range", "9..3"]).0, 2);
    let typo = Command::new(env!("CARGO_BIN_EXE_mcpsim")).args(["explore", "04-acepts-race-for-one-note"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&typo.stderr);
    assert_eq!(typo.status.code(), Some(2), "a usage error, as in every command: {stderr}");
    assert!(stderr.contains("did you mean 04-accepts-race-for-one-note?"), "a typo gets the closest name: {stderr}");
}

#[test]
fn the_zoo_is_listed_one_sentence_each() {
    let (code, out) = mcpsim(&["mutants"]);
    assert_eq!(code, 0);
    // The sentences are wrapped within 100 columns: compared with the line breaks read as spaces.
    let words = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
    for mutant in mutants::MUTANTS {
        assert!(out.contains(mutant.name) && words(&out).contains(&words(mutant.mistake)), "{}", mutant.name);
    }
}

/// The outcome classes an exploration found, on the terminal: each with its runs and an example seed given as
/// the `mcpsim run` command that shows it.
#[test]
fn explore_prints_the_outcome_classes_each_with_a_command_showing_an_example() {
    let (code, out) = mcpsim(&["explore", "04-accepts-race-for-one-note", "--seeds", "60", "--faults", "all"]);
    assert_eq!(code, 0, "{out}");
    let block: Vec<&str> = out.lines().skip_while(|line| !line.starts_with("outcome classes: ")).collect();
    let count: usize = block.first().and_then(|line| line["outcome classes: ".len()..].split(' ').next()?.parse().ok()).expect(&out);
    assert!(count >= 2, "the race settles in several ways: {out}");
    let examples: Vec<&str> = block.iter().filter_map(|line| line.trim().strip_prefix("example: ")).collect();
    assert_eq!(examples.len(), count.min(8), "one example per class listed: {out}");
    let runs: u64 = block
        .iter()
        .filter(|line| line.trim_start().split_once(". ").is_some_and(|(number, _)| number.parse::<usize>().is_ok()))
        .filter_map(|line| line.split_once(", ").and_then(|(_, rest)| rest.split(" run").next()?.parse::<u64>().ok()))
        .sum();
    assert_eq!(runs, 60, "the classes partition the runs: {out}");
    // The first class's example, run with the same flags: it is a run of the class, held.
    let words: Vec<&str> = examples[0].split_whitespace().collect();
    assert_eq!(&words[..3], ["mcpsim", "run", "04-accepts-race-for-one-note"], "{out}");
    assert!(words.contains(&"--faults"), "the example repeats the faults: {out}");
    let (code, transcript) = mcpsim(&words[1..]);
    assert_eq!(code, 0, "{transcript}");
}

#[test]
fn exhaustive_mode_visits_every_order_of_the_double_accept_and_the_reduction_keeps_every_end_state() {
    use mcpsim::testing::explore::exhaustive::{explore_every_order, explore_exhaustively};
    let scenario = mcpsim::library("04-accepts-race-for-one-note.sim").unwrap();
    let reduced = explore_exhaustively(&scenario, &notes_server_factory());
    let every = explore_every_order(&scenario, &notes_server_factory());
    assert!(!reduced.truncated && !every.truncated);
    // Pinned: a change to the scenario, the engine or the reduction shows up here.
    assert_eq!(reduced.schedules, 22, "{reduced:?}");
    assert!(reduced.schedules < every.schedules, "the reduction skips orders: {} of {}", reduced.schedules, every.schedules);
    // Either instance can win the race, and the loser hears either "consumed" or, while the winner's claim is
    // still being carried out, "in progress": four end states, and the reduction loses none.
    assert_eq!((reduced.end_states, every.end_states), (4, 4));
    assert_eq!((reduced.unsafe_runs, reduced.expectation_runs, every.unsafe_runs, every.expectation_runs), (0, 0, 0, 0));
    // A mutant is caught by the exhaustive search too.
    let mutant = mutants::find("delete-then-claim").unwrap();
    let caught = explore_exhaustively(&mutant.scenario(), &mutant.factory());
    assert!(caught.first_unsafe.is_some());
}

#[test]
fn exhaustive_mode_reaches_both_ends_of_a_swap_racing_the_delete() {
    use mcpsim::testing::explore::exhaustive::explore_exhaustively;
    let scenario = mcpsim::library("29-note-file-swapped-during-the-delete.sim").unwrap();
    let explored = explore_exhaustively(&scenario, &notes_server_factory());
    assert!(!explored.truncated);
    // The swap lands first (the accept hears note_gone) or the delete does (the copy shown is deleted, the
    // swap finds nothing): both orders are reached, and neither breaks a property or an expectation.
    assert_eq!(explored.end_states, 2, "{explored:?}");
    assert_eq!((explored.unsafe_runs, explored.expectation_runs), (0, 0));
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

/// Every kind of fault, drawn from seeds, fires in some run; what fired is in the decision log; replaying
/// that log (choices and faults) gives the same transcript byte for byte.
#[test]
fn faults_fire_are_recorded_in_the_decision_log_and_replay_byte_for_byte() {
    use mcpsim::testing::runner::{self, RunOptions, SchedulerChoice};
    use mcpsim::Format;
    let scenario = mcpsim::library("04-accepts-race-for-one-note.sim").unwrap();
    let mut fired_kinds = Vec::new();
    let (mut retries, mut duplicates) = (0, 0);
    for seed in 1..=300 {
        let plan = explore::fault_plan(&scenario, seed, &FaultKind::ALL);
        assert_eq!(plan, explore::fault_plan(&scenario, seed, &FaultKind::ALL), "a plan is a function of the seed");
        let options = RunOptions { check_statelessness: false, faults: Some(plan), ..RunOptions::seeded(seed) };
        let report = runner::run(&scenario, &options);
        assert!(report.passed(), "seed {seed}: {:?}", report.failures);
        fired_kinds.extend(report.decisions.faults.iter().map(Fault::kind));
        for attempt in report.history.attempts().values() {
            match attempt {
                mcpsim::testing::Attempt::Retry { .. } => retries += 1,
                mcpsim::testing::Attempt::Duplicate { .. } => duplicates += 1,
            }
        }
        let replay = RunOptions {
            check_statelessness: false,
            scheduler: SchedulerChoice::Replay(report.decisions.clone()),
            faults: Some(report.decisions.faults.clone()),
            ..RunOptions::seeded(seed)
        };
        let again = runner::run(&scenario, &replay);
        // Byte for byte, but for the header's scheduler name ("replay" instead of "random").
        let body = |text: String| text.split_once('\n').map(|(_, body)| body.to_string()).unwrap();
        assert_eq!(body(again.transcript.render(Format::Text)), body(report.transcript.render(Format::Text)), "seed {seed} replays");
        assert_eq!(again.decisions, report.decisions);
    }
    for kind in FaultKind::ALL {
        assert!(fired_kinds.contains(&kind), "{kind:?} fired in some run");
    }
    assert!(retries > 0 && duplicates > 0, "clients retried ({retries}) and the network duplicated ({duplicates})");
}

/// Under faults the checks still bite: a safety mutant is caught with every fault on, and the liveness
/// mutant is caught only when clients retry.
#[test]
fn mutants_are_caught_with_faults_on_and_liveness_needs_them() {
    let mutant = mutants::find("delete-then-claim").unwrap();
    let found = explore::explore(&mutant.scenario(), &mutant.factory(), 1..=50, 1, &FaultKind::ALL, &|_, _| {});
    assert!(found.unsafe_runs > 0);
    let mutant = mutants::find("claim-without-outcome").unwrap();
    let without = explore::explore(&mutant.scenario(), &mutant.factory(), 1..=50, 1, &[], &|_, _| {});
    assert_eq!(without.unsafe_runs, 0, "it breaks no safety property: {without:?}");
    assert!(without.properties_broken.is_empty(), "without retries liveness is not judged: {without:?}");
    let with = explore::explore(&mutant.scenario(), &mutant.factory(), 1..=50, 1, &FaultKind::ALL, &|_, _| {});
    assert!(with.not_live_runs > 0 && with.unsafe_runs == 0, "{with:?}");
    assert_eq!(with.properties_broken, [mcpsim::Property::Liveness]);
}

/// Skew may cost availability, never at-most-once. An instance whose clock runs behind takes a state for
/// unexpired after the replay store has pruned its nonce (at expiry + grace by the store's own clock); the store
/// refuses the claim itself (`replay_window_closed`), at any skew, so one confirmation never deletes twice.
/// Within the grace, the lagging instance's own expiry check refuses it first (`state_expired`).
#[test]
fn clock_skew_at_any_size_costs_availability_never_at_most_once() {
    use mcpsim::testing::runner::{self, RunOptions};
    let scenario_with = |skew: &str| {
        let text = format!(
            "use demo\n\
             key k1\n\
             instance i1 keys k1\n\
             instance i2 keys k1 clock {skew}\n\
             client alice principal alice\n\
             state-ttl 5m\n\
             replay capacity 1 grace 60s\n\
             let delete_tps = {{\"workspaceUri\": \"file:///Users/alice/Documents/Notes\", \"title\": \"TPS report\"}}\n\
             send alice -> i1 tools/call {{\"name\": \"notes_delete\", \"arguments\": $delete_tps}} as first\n\
             answer alice -> i1 accept {{\"note_id\": \"note-7\", \"confirm\": true}} for first as used\n\
             advance 361s\n\
             # Another confirmation needs the one slot: the first nonce, past expiry + grace by the store's clock, is\n\
             # pruned; its note is gone, so its own claim is released and the slot is free again.\n\
             send alice -> i1 tools/call {{\"name\": \"notes_delete\", \"arguments\": $delete_tps}} as second\n\
             admin delete note-14\n\
             answer alice -> i1 accept {{\"note_id\": \"note-14\", \"confirm\": true}} for second as frees\n\
             # The first form again, on the instance whose clock is behind: another of its candidates.\n\
             answer alice -> i2 accept {{\"note_id\": \"note-3\", \"confirm\": true}} for first as replayed\n"
        );
        mcpsim::testing::scenario::parse("inline", "skew-beyond-grace", &text).unwrap()
    };
    let options = RunOptions { record_transcript: false, check_statelessness: false, ..RunOptions::seeded(1) };
    for (skew, refused_with) in [("-50s", "state_expired"), ("-90s", "replay_window_closed"), ("-1h", "replay_window_closed")] {
        let run = runner::run(&scenario_with(skew), &options);
        assert!(run.passed(), "{skew} behind, 60 s grace: {:?}", run.failures);
        let replayed = run.history.operations().last().unwrap().response().unwrap();
        assert_eq!(replayed["error"]["data"]["reason"], refused_with, "{skew}: {replayed}");
        let deleted = run.history.effects().iter().filter(|e| matches!(e.kind, mcpsim::testing::EffectKind::NoteDeleted { .. })).count();
        assert_eq!(deleted, 1, "{skew}: one confirmation, one deletion");
    }
}

/// Liveness promises an answer once faults stop; an instance the scenario stops for good is not a fault that
/// stops. A request with no live instance left to retry on is given up, said so, and not held against the
/// server; with another instance up, the retry goes there and is answered.
#[test]
fn a_request_with_no_live_instance_left_is_given_up_not_failed() {
    use mcpsim::testing::runner::{self, RunOptions};
    use mcpsim::Format;
    let scenario_with = |instances: &str| {
        let text = format!(
            "use demo\nkey k1\n{instances}client alice principal alice\n\
             crash i1\n\
             send alice -> i1 tools/list {{}} as listed\n"
        );
        mcpsim::testing::scenario::parse("inline", "crashed-for-good", &text).unwrap()
    };
    let options = RunOptions { check_statelessness: false, faults: Some(Vec::new()), ..RunOptions::seeded(1) };
    let alone = runner::run(&scenario_with("instance i1 keys k1\n"), &options);
    assert!(alone.passed(), "{:?}", alone.failures);
    assert!(alone.transcript.render(Format::Text).contains("no live instance to retry on; gives up"));
    let pair = runner::run(&scenario_with("instance i1 keys k1\ninstance i2 keys k1\n"), &options);
    assert!(pair.passed(), "{:?}", pair.failures);
    assert!(pair.history.settled(mcpsim::testing::OperationId(0)).response().is_some(), "the retry on i2 is answered");
}

/// Found in review, kept fixed: a crash fault on the only instance of its kind restarts it before its client
/// retries (the request is not given up, so liveness judges it and a liveness mutant is caught); a crash fault
/// on an instance the scenario already stopped leaves it down; a retry fails over only to an instance of the
/// same deployment (same keys), never to one deliberately given other keys.
#[test]
fn crash_faults_restart_before_the_retry_and_retries_stay_within_the_deployment() {
    use mcpsim::testing::runner::{self, RunOptions};
    use mcpsim::Format;
    let mutant = mutants::find("claim-without-outcome").unwrap();
    let alone = mcpsim::library("01-lesson-exchange-on-one-instance.sim").unwrap();
    let found = explore::explore(&alone, &mutant.factory(), 1..=300, 2, &[FaultKind::Crash], &|_, _| {});
    assert!(found.not_live_runs > 0, "caught on one instance with crashes alone: {found:?}");
    let real = explore::explore(&alone, &notes_server_factory(), 1..=300, 2, &[FaultKind::Crash], &|_, _| {});
    assert_eq!((real.unsafe_runs, real.not_live_runs, real.crashed_runs), (0, 0, 0), "{real:?}");
    let run = |file: &str, seed: u64, kinds: &[FaultKind]| {
        let scenario = mcpsim::library(file).unwrap();
        let faults = Some(explore::fault_plan(&scenario, seed, kinds));
        let report = runner::run(&scenario, &RunOptions { check_statelessness: false, faults, ..RunOptions::seeded(seed) });
        assert!(report.passed(), "{file} seed {seed}: {:?}", report.failures);
        report.transcript.render(Format::Text)
    };
    let stopped = run("03-retry-after-the-first-instance-crashed.sim", 1, &[FaultKind::Crash]);
    assert!(stopped.contains("crash: already down (stays down)"), "{stopped}");
    // Scenario 15's i3 signs with another key: alice's lost answer from i2 is retried on i1, not on i3.
    let misconfigured = run("15-misconfigured-instance-key.sim", 24, &[FaultKind::Drop]);
    assert!(misconfigured.contains("for request id 3: retries it on i1"), "{misconfigured}");
}

/// Liveness also asks that a client learn what its own request did: a server that answers the retry of a
/// used confirmation with a refusal that hides the outcome (here: as if the state were forged) deletes once
/// and never tells. No safety property sees it; liveness, with clients retrying after lost answers, does.
#[test]
fn a_retry_that_never_learns_its_own_deletion_breaks_liveness() {
    use mcpsim::testing::RequestContext;
    use mcpsim::testing::RpcError;
    use serde_json::Value;
    struct HidesTheOutcome(Arc<dyn Service>);
    #[async_trait::async_trait]
    impl Service for HidesTheOutcome {
        fn has_method(&self, method: &str) -> bool {
            self.0.has_method(method)
        }
        async fn call(&self, context: RequestContext<'_>, method: &str, params: &Value) -> Result<Value, RpcError> {
            self.0.call(context, method, params).await.map_err(|mut error| {
                if let Some(Value::Object(data)) = &mut error.data {
                    if data.get("reason").and_then(Value::as_str) == Some("state_consumed") {
                        data.clear();
                        data.insert("reason".into(), "state_signature".into());
                    }
                }
                error
            })
        }
    }
    let real = notes_server_factory();
    let factory: ServiceFactory = Arc::new(move |parts: InstanceParts| -> Arc<dyn Service> { Arc::new(HidesTheOutcome(real(parts))) });
    let scenario = mcpsim::library("02-retry-lands-on-another-instance.sim").unwrap();
    let found = explore::explore(&scenario, &factory, 1..=200, 2, &[FaultKind::Drop], &|_, _| {});
    assert_eq!(found.unsafe_runs, 0, "{found:?}");
    assert!(found.not_live_runs > 0, "{found:?}");
    let (_, failures) = found.first_not_live.unwrap();
    assert!(failures.iter().any(|f| f.message.contains("but its client never learned it")), "{failures:?}");
}

/// A reproducer from another format version is refused with what to do, never misread.
#[test]
fn a_reproducer_of_another_format_is_refused_with_what_to_do() {
    let file = std::env::temp_dir().join(format!("mcpsim-old-reproducer-{}.json", std::process::id()));
    std::fs::write(&file, r#"{"format": "mcpsim-reproducer/1", "scenarioName": "x", "crashes": []}"#).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_mcpsim")).args(["replay", file.to_str().unwrap()]).output().unwrap();
    std::fs::remove_file(&file).unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("mcpsim-reproducer/1") && stderr.contains("run the exploration again"), "{stderr}");
}

/// Under faults the expectations marked `always` are judged (05's: at most one pick deletes, and never the
/// other note), so a mutant that deletes both picks fails them as well as at-most-once; the real server holds
/// them; an unmarked expectation is not judged, and `run` says how many were not and why.
#[test]
fn expectations_marked_always_are_judged_under_faults_and_can_fail() {
    let race = "05-accepts-race-for-different-candidates";
    let (code, out) = mcpsim(&["explore", race, "--seeds", "30", "--faults", "all", "--mutant", "replay-per-instance"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("line 32: expect always at most 1 of picks_2023, picks_2024: complete\n"), "{out}");
    assert!(out.contains("expected at most 1 to pass, 2 of 2 did"), "{out}");
    let failed: u64 = out.lines().find_map(|l| l.strip_prefix("  expectations failed    ")?.split(' ').next()?.parse().ok()).expect(&out);
    assert!(failed > 0, "{out}");
    let (code, out) = mcpsim(&["explore", race, "--seeds", "200", "--faults", "all"]);
    assert_eq!(code, 0, "the real server holds them: {out}");
    assert!(out.contains("  expectations failed    0  (those marked `always`; the rest are not judged under faults)"), "{out}");
    // A marked expectation that is false fails the run under faults (exit 1), with the unmarked ones counted.
    let dir = std::env::temp_dir().join(format!("mcpsim-always-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("marked.sim");
    std::fs::write(
        &file,
        "use demo\ninstance i1\ninstance i2\nclient alice principal alice\n\
         send alice -> i1 tools/call {\"name\": \"notes_delete\", \"arguments\": {\"workspaceUri\": \"file:///Users/alice/Documents/Notes\", \"title\": \"TPS report\"}} as round1\n\
         expect always round1 complete\nexpect round1 complete\nexpect notes count 3\n",
    )
    .unwrap();
    let (code, out) = mcpsim(&["run", file.to_str().unwrap(), "--faults", "drop", "--format", "text"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("FAIL  expect always round1 complete: expected resultType \"complete\", got input_required"), "{out}");
    assert!(out.contains("not judged under faults (not marked `always`): expect notes count 3"), "{out}");
    assert!(out.contains("2 expectation(s) not judged under faults: not marked `always`"), "{out}");
    let (code, out) =
        mcpsim(&["explore", file.to_str().unwrap(), "--seeds", "5", "--faults", "drop", "--save", dir.join("cx.json").to_str().unwrap()]);
    assert_eq!(code, 1, "a failed expectation is a finding, not a liveness failure: {out}");
    assert!(out.contains("EXPECTATIONS FAILED (no safety property broke); first at seed 1:"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
