//! The swarm's operations, from outside: `explore --check-determinism` (another process re-runs sampled seeds,
//! and a process that prints one byte differently is caught), `scripts/swarm-local.sh` (the Kubernetes
//! manifest's pod command as local processes, merged) and the seed ledger (`merge --ledger`, `explore
//! --ledger` replaying recorded seeds first). Each starts the built `mcpsim`.

mod common;

use common::child::{finish, mcpsim, repo, run_mcpsim, scratch, Ran};
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

const ZOO: &str = "zoo-move-races-the-accept";
const MUTANT: &str = "recheck-then-delete";

/// The seeds of the finding records in a results file.
fn finding_seeds(path: &Path) -> Vec<u64> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter(|record| record["record"] == "finding")
        .map(|record| record["seed"].as_u64().unwrap())
        .collect()
}

#[test]
fn a_planted_failing_seed_is_replayed_before_a_range_that_does_not_hold_it() {
    let dir = scratch("swarm-ops", "ledger");
    let results = dir.join("mutant.jsonl");
    let ledger = dir.join("ledger");
    let (results_arg, ledger_arg) = (results.to_str().unwrap(), ledger.to_str().unwrap());
    // The mutant's counterexamples go to the scratch folder, not the repository.
    let save = dir.join("counterexample.json");
    let save = save.to_str().unwrap();
    // A mutant's run, its findings written through merge --ledger.
    let ran = run_mcpsim(&["explore", ZOO, "--seeds", "30", "--mutant", MUTANT, "--save", save, "--results", results_arg], 300);
    assert_status(&ran, 1);
    let failing = finding_seeds(&results);
    let first = *failing.iter().min().expect("the mutant fails some seed of 30");
    let ran = run_mcpsim(&["merge", results_arg, "--ledger", ledger_arg], 120);
    assert_status(&ran, 1);
    let file = format!("{ZOO}/mutant-{MUTANT}/unsafe-containment-seed{first}.json");
    assert!(ran.stdout.contains(&format!("added {file}")), "{}", ran.stdout);
    let recorded = std::fs::read_to_string(ledger.join(&file)).unwrap();
    // Merged again (the same build): not one byte changes.
    assert_status(&run_mcpsim(&["merge", results_arg, "--ledger", ledger_arg], 120), 1);
    assert_eq!(std::fs::read_to_string(ledger.join(&file)).unwrap(), recorded);

    // A range without that seed: the recorded seed is replayed first and caught, before the range's summary.
    let ran = run_mcpsim(&["explore", ZOO, "--seed-range", "200..205", "--mutant", MUTANT, "--save", save, "--ledger", ledger_arg], 300);
    assert_status(&ran, 1);
    let replay = ran.stdout.find("ledger: replaying 1 recorded failing seed(s) first").expect("the replay is announced");
    let caught = ran.stdout.find(&format!("  seed {first} (recorded unsafe (containment)")).expect("the seed is named");
    let explored = ran.stdout.find("explored zoo-move-races-the-accept against mutant recheck-then-delete: seeds 200..205").unwrap();
    assert!(replay < caught && caught < explored, "{}", ran.stdout);
    assert!(ran.stdout[caught..explored].contains("FAILS AGAIN: unsafe (containment)"), "{}", ran.stdout);
    // The real server, same scenario: the mutant's seed is not its to replay.
    let ran = run_mcpsim(&["explore", ZOO, "--seed-range", "200..202", "--ledger", ledger_arg], 300);
    assert_status(&ran, 0);
    assert!(ran.stdout.contains("ledger: replaying 0 recorded failing seed(s) first"), "{}", ran.stdout);
}

#[test]
fn a_recorded_seed_that_passes_now_counts_builds_in_a_row_and_is_retired() {
    let dir = scratch("swarm-ops", "ledger-pass");
    let results = dir.join("mutant.jsonl");
    let ledger = dir.join("ledger");
    let (results_arg, ledger_arg) = (results.to_str().unwrap(), ledger.to_str().unwrap());
    // The mutant's counterexamples go to the scratch folder, not the repository.
    let save = dir.join("counterexample.json");
    let save = save.to_str().unwrap();
    assert_status(&run_mcpsim(&["explore", ZOO, "--seeds", "30", "--mutant", MUTANT, "--save", save, "--results", results_arg], 300), 1);
    let failing = finding_seeds(&results);
    let first = *failing.iter().min().unwrap();
    let passing = (1..=30).find(|seed| !failing.contains(seed)).expect("the mutant passes some seed of 30");
    // The results of an older build, on which that seed failed: its finding line as that build wrote it.
    let older = "0".repeat(40);
    let text = std::fs::read_to_string(&results).unwrap();
    let line = text
        .lines()
        .find(|line| line.contains("\"record\":\"finding\"") && line.contains(&format!("\"seed\":{first},")))
        .unwrap()
        .replace(&format!("\"seed\":{first},"), &format!("\"seed\":{passing},"))
        .replace(&format!("--seed-range {first}..{first}"), &format!("--seed-range {passing}..{passing}"));
    let line = serde_json::from_str::<serde_json::Value>(&line).map(|mut record| {
        record["build"]["commit"] = older.clone().into();
        record.to_string()
    });
    std::fs::write(&results, line.unwrap() + "\n").unwrap();
    let ran = run_mcpsim(&["merge", results_arg, "--ledger", ledger_arg], 120);
    let file = ledger.join(format!("{ZOO}/mutant-{MUTANT}/unsafe-containment-seed{passing}.json"));
    assert!(file.is_file(), "{}\n{}", ran.stdout, ran.stderr);

    let ran = run_mcpsim(
        &["explore", ZOO, "--seed-range", "200..202", "--mutant", MUTANT, "--save", save, "--ledger", ledger_arg, "--ledger-keep", "2"],
        300,
    );
    assert!(ran.stdout.contains(&format!("  seed {passing} (recorded unsafe (containment), first seen 0000000")), "{}", ran.stdout);
    assert!(ran.stdout.contains("passes now\n    passed on 1 build(s) in a row (retired after 2)"), "{}", ran.stdout);
    let entry: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(entry["passedSince"], 1, "{entry}");
    assert_eq!(entry["lastSeen"]["commit"], older.as_str());
    // The same build passing it again is not another build in a row.
    run_mcpsim(
        &["explore", ZOO, "--seed-range", "200..200", "--mutant", MUTANT, "--save", save, "--ledger", ledger_arg, "--ledger-keep", "2"],
        300,
    );
    let entry: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(entry["passedSince"], 1, "{entry}");
    // Passed on K=1 builds in a row: retired, its file removed.
    let ran = run_mcpsim(
        &["explore", ZOO, "--seed-range", "200..200", "--mutant", MUTANT, "--save", save, "--ledger", ledger_arg, "--ledger-keep", "1"],
        300,
    );
    assert!(ran.stdout.contains("retired: passed on 1 builds in a row"), "{}", ran.stdout);
    assert!(!file.exists());
}

/// The pod command of the Kubernetes manifest: the lines between its markers, the YAML block's indent removed.
fn manifest_pod_command() -> Vec<String> {
    let yaml = std::fs::read_to_string(repo().join("examples/swarm/kubernetes-indexed-job.yaml")).unwrap();
    let lines: Vec<&str> = yaml.lines().collect();
    let begin = lines.iter().position(|l| l.trim() == "# pod command begins").expect("the begin marker");
    let end = lines.iter().position(|l| l.trim() == "# pod command ends").expect("the end marker");
    lines[begin..=end].iter().map(|l| l.trim_start().to_string()).collect()
}

#[test]
fn the_local_swarm_runs_the_manifests_pod_command_and_merges() {
    let command = manifest_pod_command();
    assert!(
        command.iter().any(|l| l.starts_with("mcpsim explore \"$SCENARIO\" --seeds \"$SEEDS\" --shard \"$((JOB_COMPLETION_INDEX + 1))/$SHARDS\" --results \"$RESULTS/shard-$JOB_COMPLETION_INDEX.jsonl\"")),
        "{command:?}"
    );
    // The GitHub workflow's shard step runs the same explore with the matrix's shard.
    let workflow = std::fs::read_to_string(repo().join("examples/swarm/github-actions.yml")).unwrap();
    assert!(workflow.contains("./mcpsim explore \"$SCENARIO\" --seeds \"$SEEDS\" --shard ${{ matrix.shard }}/$SHARDS"), "{workflow}");
    assert!(workflow.contains("./mcpsim merge results/shard-*.jsonl --report report/ --ledger swarm-ledger/"));

    let dir = scratch("swarm-ops", "local");
    let mut script = std::process::Command::new(repo().join("scripts/swarm-local.sh"));
    script
        .args(["3", RACE, "40", "--faults", "drop"])
        .env("MCPSIM", env!("CARGO_BIN_EXE_mcpsim"))
        .env("OUT", dir.join("out"))
        .current_dir(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let ran = finish(script.spawn().unwrap(), 300);
    assert_status(&ran, 0);
    // It printed the manifest's command, line for line, and ran it.
    let printed: Vec<String> = ran
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("pod command (from examples/swarm/kubernetes-indexed-job.yaml):"))
        .skip(1)
        .take(command.len())
        .map(|l| l.strip_prefix("  ").unwrap_or(l).to_string())
        .collect();
    assert_eq!(printed, command);
    for shard in 1..=3 {
        assert!(ran.stdout.contains(&format!("shard {shard}/3: mcpsim explore exited 0")), "{}", ran.stdout);
        assert!(dir.join(format!("out/results/shard-{}.jsonl", shard - 1)).is_file());
    }
    assert!(ran.stdout.contains("merged 3 shard(s)") && ran.stdout.contains("  schedules              40"), "{}", ran.stdout);
    assert!(
        ran.stdout.contains("swarm: 3 shard(s)") && ran.stdout.contains("schedules per CPU-second") && ran.stdout.contains("merge: "),
        "{}",
        ran.stdout
    );
    assert!(dir.join("out/report/index.html").is_file());

    // A shard that cannot run is reported, and the run is not called complete.
    let mut script = std::process::Command::new(repo().join("scripts/swarm-local.sh"));
    script
        .args(["2", "no-such-scenario", "10"])
        .env("MCPSIM", env!("CARGO_BIN_EXE_mcpsim"))
        .env("OUT", dir.join("bad"))
        .current_dir(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let ran = finish(script.spawn().unwrap(), 120);
    assert_status(&ran, 3);
    assert!(
        ran.stdout.contains("shard 1/2 FAILED: the pod command exited 2") && ran.stdout.contains("2 of 2 shard(s) FAILED"),
        "{}",
        ran.stdout
    );

    // OUT naming a folder the script did not make: refused, and nothing in it removed.
    let other = dir.join("someone-elses");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("keep.txt"), "mine").unwrap();
    let mut script = std::process::Command::new(repo().join("scripts/swarm-local.sh"));
    script
        .args(["1", RACE, "10"])
        .env("MCPSIM", env!("CARGO_BIN_EXE_mcpsim"))
        .env("OUT", &other)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let ran = finish(script.spawn().unwrap(), 60);
    assert_status(&ran, 2);
    assert!(ran.stderr.contains("was not made by this script"), "{}", ran.stderr);
    assert_eq!(std::fs::read_to_string(other.join("keep.txt")).unwrap(), "mine");
}
