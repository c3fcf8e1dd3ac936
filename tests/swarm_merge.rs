//! `mcpsim explore --shard I/N --results FILE` and `mcpsim merge`, driven through the built binary: N shards
//! merged say exactly what one unsharded run says (the summary lines, the findings, the coverage JSON bytes),
//! and the merge refuses or flags what must not be added up silently (mixed builds, mixed options, a missing
//! shard, a malformed line).

mod common;

use common::child::{run_mcpsim, scratch, Ran};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

const SECONDS: u64 = 600;

/// `mcpsim ARGS` with `@/` in an argument standing for the scratch directory `dir` (mcpsim runs in the repo root).
fn mcpsim_in(dir: &Path, args: &[&str]) -> Ran {
    let prefix = format!("{}/", dir.display());
    let args: Vec<String> = args.iter().map(|a| a.replace("@/", &prefix)).collect();
    run_mcpsim(&args.iter().map(String::as_str).collect::<Vec<_>>(), SECONDS)
}

/// The summary block: from `explored …` to the first blank line after the verdict (its reproduce lines included).
fn summary_block(stdout: &str) -> String {
    let start = stdout.find("\nexplored ").map(|at| at + 1).or_else(|| stdout.starts_with("explored ").then_some(0)).expect(stdout);
    let mut lines = Vec::new();
    let mut blanks = 0;
    for line in stdout[start..].lines() {
        if line.is_empty() {
            blanks += 1;
            if blanks == 2 {
                break;
            }
        }
        if line.starts_with("minimal counterexample") || line.starts_with("results written") || line.starts_with("coverage") {
            break;
        }
        lines.push(line);
    }
    lines.join("\n").trim_end().to_string()
}

fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The findings of results files, without the build and shard (what must be the same however seeds were cut).
fn findings(paths: &[&Path]) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for path in paths {
        for mut record in records(path) {
            if record["record"] == "finding" {
                record.as_object_mut().unwrap().remove("build");
                found.insert(record.to_string());
            }
        }
    }
    found
}

/// Runs `explore ARGS` unsharded (with --results and --coverage-json) and as 3 shards, then merges the shards.
struct Swarm {
    dir: std::path::PathBuf,
    whole: Ran,
    merged: Ran,
}

fn swarm(test: &str, args: &[&str]) -> Swarm {
    let dir = scratch("swarm-merge", test);
    let mut whole_args = args.to_vec();
    whole_args.extend(["--results", "@/whole.jsonl", "--coverage-json", "@/whole-coverage.json"]);
    let whole = mcpsim_in(&dir, &whole_args);
    for index in 1..=3 {
        let shard = format!("{index}/3");
        let results = format!("@/shard-{index}.jsonl");
        let mut shard_args = args.to_vec();
        shard_args.extend(["--shard", &shard, "--results", &results]);
        let ran = mcpsim_in(&dir, &shard_args);
        assert!(ran.status == 0 || ran.status == 1, "shard {shard}: {}\n{}", ran.stdout, ran.stderr);
        assert!(ran.stdout.contains(&format!("shard {shard}: seeds ")), "{}", ran.stdout);
    }
    let merged =
        mcpsim_in(&dir, &["merge", "@/shard-1.jsonl", "@/shard-2.jsonl", "@/shard-3.jsonl", "--coverage-json", "@/merged-coverage.json"]);
    Swarm { dir, whole, merged }
}

#[test]
fn three_shards_of_a_clean_race_under_faults_merge_to_the_unsharded_run() {
    let s = swarm("clean", &["explore", "04-accepts-race-for-one-note", "--seeds", "90", "--faults", "all"]);
    assert_eq!(s.whole.status, 0, "{}\n{}", s.whole.stdout, s.whole.stderr);
    assert_eq!(s.merged.status, s.whole.status, "{}\n{}", s.merged.stdout, s.merged.stderr);
    assert_eq!(summary_block(&s.merged.stdout), summary_block(&s.whole.stdout));
    assert!(summary_block(&s.merged.stdout).contains("schedules              90"), "{}", s.merged.stdout);
    // The outcome classes, each with its example seed, as the unsharded run printed them.
    let classes = |stdout: &str| -> Vec<String> {
        let mut lines = stdout.lines().skip_while(|l| !l.starts_with("outcome classes: "));
        let head = lines.next().into_iter();
        head.chain(lines.take_while(|l| l.starts_with(' '))).map(str::to_string).collect()
    };
    assert!(classes(&s.whole.stdout).len() > 3, "{}", s.whole.stdout);
    assert_eq!(classes(&s.merged.stdout), classes(&s.whole.stdout), "merged:\n{}\nwhole:\n{}", s.merged.stdout, s.whole.stdout);
    let whole = std::fs::read(s.dir.join("whole-coverage.json")).unwrap();
    let merged = std::fs::read(s.dir.join("merged-coverage.json")).unwrap();
    assert!(whole.len() > 200);
    assert_eq!(String::from_utf8(merged).unwrap(), String::from_utf8(whole).unwrap(), "the merged coverage JSON is the unsharded run's");
    let shards = [s.dir.join("shard-1.jsonl"), s.dir.join("shard-2.jsonl"), s.dir.join("shard-3.jsonl")];
    assert_eq!(findings(&shards.iter().map(|p| p.as_path()).collect::<Vec<_>>()), findings(&[&s.dir.join("whole.jsonl")]));
    // A clean run under all faults: every kind fired somewhere, or merge names the one that never did.
    let coverage: Value = serde_json::from_slice(&std::fs::read(s.dir.join("merged-coverage.json")).unwrap()).unwrap();
    for never in coverage["faultsNeverFired"].as_array().unwrap() {
        assert!(s.merged.stdout.contains(never.as_str().unwrap()), "{never} never fired but merge did not say so:\n{}", s.merged.stdout);
    }
    let _ = std::fs::remove_dir_all(&s.dir);
}

#[test]
fn three_shards_of_a_mutant_merge_to_the_unsharded_run_with_the_same_findings() {
    let s = swarm("mutant", &["explore", "05-accepts-race-for-different-candidates", "--mutant", "delete-then-claim", "--seeds", "45"]);
    assert_eq!(s.whole.status, 1, "{}\n{}", s.whole.stdout, s.whole.stderr);
    assert_eq!(s.merged.status, 1, "{}\n{}", s.merged.stdout, s.merged.stderr);
    let block = summary_block(&s.merged.stdout);
    assert_eq!(block, summary_block(&s.whole.stdout));
    assert!(block.contains("SAFETY VIOLATED (at-most-once); first at seed 1:"), "{block}");
    assert!(
        block.contains("reproduce: mcpsim explore 05-accepts-race-for-different-candidates --seed-range 1..1 --mutant delete-then-claim")
    );
    let shards = [s.dir.join("shard-1.jsonl"), s.dir.join("shard-2.jsonl"), s.dir.join("shard-3.jsonl")];
    let sharded = findings(&shards.iter().map(|p| p.as_path()).collect::<Vec<_>>());
    assert!(!sharded.is_empty());
    assert_eq!(sharded, findings(&[&s.dir.join("whole.jsonl")]));
    assert!(s.merged.stdout.contains("at-most-once: seed 1 ("), "the first failing run per property:\n{}", s.merged.stdout);
    assert_eq!(std::fs::read(s.dir.join("merged-coverage.json")).unwrap(), std::fs::read(s.dir.join("whole-coverage.json")).unwrap());
    // Merging writes the exploration page of the merged run.
    let report = mcpsim_in(&s.dir, &["merge", "@/shard-3.jsonl", "@/shard-1.jsonl", "@/shard-2.jsonl", "--report", "@/report"]);
    assert_eq!(report.status, 1, "{}\n{}", report.stdout, report.stderr);
    let page = std::fs::read_to_string(s.dir.join("report/index.html")).unwrap();
    assert!(page.contains("delete-then-claim") && page.contains("counterexample.html"), "{page}");
    let _ = std::fs::remove_dir_all(&s.dir);
}

#[test]
fn all_mutants_in_shards_merge_to_the_whole_table() {
    let dir = scratch("swarm-merge", "zoo");
    let whole = mcpsim_in(&dir, &["explore", "--all-mutants", "--seeds", "5"]);
    let mut files = Vec::new();
    for index in 1..=3 {
        let (shard, results) = (format!("{index}/3"), format!("@/zoo-{index}.jsonl"));
        let ran = mcpsim_in(&dir, &["explore", "--all-mutants", "--seeds", "5", "--shard", &shard, "--results", &results]);
        assert!(ran.stdout.contains(&format!("shard {shard}: rows ")), "{}", ran.stdout);
        files.push(results);
    }
    let mut merge_args = vec!["merge"];
    merge_args.extend(files.iter().rev().map(String::as_str));
    let merged = mcpsim_in(&dir, &merge_args);
    assert_eq!(merged.status, whole.status, "{}\n{}", merged.stdout, merged.stderr);
    // hash-ordered-candidates serializes a HashMap's order, which std seeds afresh in every process: the seed it
    // is caught at (and so its row) may differ between any two processes, sharded or not. Every other row is
    // deterministic and must be the same.
    let table = |stdout: &str| -> Vec<String> {
        stdout
            .lines()
            .skip_while(|l| !l.starts_with("mutant "))
            .filter(|l| !l.starts_with("hash-ordered-candidates "))
            .map(str::to_string)
            .collect()
    };
    let (whole_table, merged_table) = (table(&whole.stdout), table(&merged.stdout));
    assert!(whole_table.len() > 20, "{}", whole.stdout);
    assert_eq!(merged_table, whole_table, "merged:\n{}\nwhole:\n{}", merged.stdout, whole.stdout);
    assert!(merged.stdout.contains("hash-ordered-candidates "), "{}", merged.stdout);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Three small shards of a clean run (and what the unsharded run prints), for the refusal tests.
fn small_swarm(test: &str) -> (std::path::PathBuf, Ran) {
    let dir = scratch("swarm-merge", test);
    let whole = mcpsim_in(&dir, &["explore", "04-accepts-race-for-one-note", "--seeds", "12"]);
    for index in 1..=3 {
        let (shard, results) = (format!("{index}/3"), format!("@/shard-{index}.jsonl"));
        let ran = mcpsim_in(&dir, &["explore", "04-accepts-race-for-one-note", "--seeds", "12", "--shard", &shard, "--results", &results]);
        assert_eq!(ran.status, 0, "{}\n{}", ran.stdout, ran.stderr);
    }
    (dir, whole)
}

#[test]
fn the_merge_refuses_mixed_builds_naming_the_files_and_what_differs() {
    let (dir, whole) = small_swarm("mixed-builds");
    // shard-2 as another build would have written it.
    let other: Vec<String> = records(&dir.join("shard-2.jsonl"))
        .into_iter()
        .map(|mut record| {
            record["build"]["commit"] = "a59821d0000000000000000000000000000000ff".into();
            record.to_string()
        })
        .collect();
    std::fs::write(dir.join("shard-2.jsonl"), other.join("\n") + "\n").unwrap();
    let refused = mcpsim_in(&dir, &["merge", "@/shard-1.jsonl", "@/shard-2.jsonl", "@/shard-3.jsonl"]);
    assert_eq!(refused.status, 2, "{}\n{}", refused.stdout, refused.stderr);
    assert!(refused.stderr.contains("commit differs") && refused.stderr.contains("shard-2.jsonl a59821d0000"), "{}", refused.stderr);
    assert!(refused.stderr.contains("from a59821d") && refused.stderr.contains("--allow-mixed"), "{}", refused.stderr);
    assert!(!refused.stdout.contains("explored "), "nothing merged: {}", refused.stdout);
    let allowed = mcpsim_in(&dir, &["merge", "@/shard-1.jsonl", "@/shard-2.jsonl", "@/shard-3.jsonl", "--allow-mixed"]);
    assert_eq!(allowed.status, 0, "{}\n{}", allowed.stdout, allowed.stderr);
    assert!(allowed.stdout.contains("(merged with --allow-mixed: builds or options differ)"), "{}", allowed.stdout);
    assert_eq!(summary_block(&allowed.stdout), summary_block(&whole.stdout));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_merge_refuses_shards_of_different_options() {
    let (dir, _) = small_swarm("mixed-options");
    let ran =
        mcpsim_in(&dir, &["explore", "04-accepts-race-for-one-note", "--seeds", "13", "--shard", "2/3", "--results", "@/other.jsonl"]);
    assert_eq!(ran.status, 0);
    let refused = mcpsim_in(&dir, &["merge", "@/shard-1.jsonl", "@/other.jsonl", "@/shard-3.jsonl"]);
    assert_eq!(refused.status, 2, "{}\n{}", refused.stdout, refused.stderr);
    assert!(refused.stderr.contains("seeds differs") && refused.stderr.contains("other.jsonl 1..13"), "{}", refused.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_malformed_line_is_named_with_file_and_line_and_the_rest_is_merged() {
    let (dir, whole) = small_swarm("malformed");
    let mut text = std::fs::read_to_string(dir.join("shard-2.jsonl")).unwrap();
    text = format!("{{\"record\": \"summary\", truncated\n{text}");
    std::fs::write(dir.join("shard-2.jsonl"), text).unwrap();
    let merged = mcpsim_in(&dir, &["merge", "@/shard-1.jsonl", "@/shard-2.jsonl", "@/shard-3.jsonl"]);
    assert_eq!(merged.status, 3, "not judged completely: {}\n{}", merged.stdout, merged.stderr);
    assert!(merged.stdout.contains("shard-2.jsonl:1: not JSON"), "{}", merged.stdout);
    // Everything else merged: the totals are the unsharded run's.
    assert_eq!(summary_block(&merged.stdout), summary_block(&whole.stdout));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_shard_is_reported_and_the_merge_is_incomplete() {
    let (dir, _) = small_swarm("missing");
    let merged = mcpsim_in(&dir, &["merge", "@/shard-1.jsonl", "@/shard-3.jsonl"]);
    assert_eq!(merged.status, 3, "{}\n{}", merged.stdout, merged.stderr);
    assert!(merged.stdout.contains("missing shards of 04-accepts-race-for-one-note (1 of 3): 2/3"), "{}", merged.stdout);
    assert!(merged.stdout.contains("schedules              8"), "{}", merged.stdout);
    // The same file named twice, or the same shard in two files, is counted once.
    let twice = mcpsim_in(&dir, &["merge", "@/shard-1.jsonl", "@/shard-2.jsonl", "@/shard-3.jsonl", "@/shard-2.jsonl"]);
    assert_eq!(twice.status, 0, "{}\n{}", twice.stdout, twice.stderr);
    assert!(twice.stdout.contains("schedules              12"), "{}", twice.stdout);
    assert!(twice.stdout.contains("shard-2.jsonl is named twice: read once"), "{}", twice.stdout);
    std::fs::copy(dir.join("shard-2.jsonl"), dir.join("copy-of-2.jsonl")).unwrap();
    let copied = mcpsim_in(&dir, &["merge", "@/shard-1.jsonl", "@/shard-2.jsonl", "@/shard-3.jsonl", "@/copy-of-2.jsonl"]);
    assert_eq!(copied.status, 0, "{}\n{}", copied.stdout, copied.stderr);
    assert!(copied.stdout.contains("schedules              12"), "{}", copied.stdout);
    assert!(copied.stdout.contains("copy-of-2.jsonl: counted once") && copied.stdout.contains("(the same records)"), "{}", copied.stdout);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_empty_shard_explores_nothing_and_still_merges() {
    let dir = scratch("swarm-merge", "empty");
    let whole = mcpsim_in(&dir, &["explore", "04-accepts-race-for-one-note", "--seeds", "2"]);
    for index in 1..=3 {
        let (shard, results) = (format!("{index}/3"), format!("@/shard-{index}.jsonl"));
        let ran = mcpsim_in(&dir, &["explore", "04-accepts-race-for-one-note", "--seeds", "2", "--shard", &shard, "--results", &results]);
        assert_eq!(ran.status, 0, "{}\n{}", ran.stdout, ran.stderr);
        if index == 3 {
            assert!(ran.stdout.contains("shard 3/3 of seeds 1..2 is empty"), "{}", ran.stdout);
        }
    }
    let merged = mcpsim_in(&dir, &["merge", "@/shard-1.jsonl", "@/shard-2.jsonl", "@/shard-3.jsonl"]);
    assert_eq!(merged.status, 0, "{}\n{}", merged.stdout, merged.stderr);
    assert_eq!(summary_block(&merged.stdout), summary_block(&whole.stdout));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_shards_and_unreadable_files_are_usage_errors() {
    for shard in ["0/3", "4/3", "1/3x", " 1/3", "1/0", "+1/3", "1/10001", "1"] {
        let ran = run_mcpsim(&["explore", "04-accepts-race-for-one-note", "--seeds", "3", "--shard", shard], SECONDS);
        assert_eq!(ran.status, 2, "--shard {shard:?}: {}", ran.stderr);
        assert!(ran.stderr.contains("--shard"), "{}", ran.stderr);
    }
    let ran = run_mcpsim(&["explore", "04-accepts-race-for-one-note", "--exhaustive", "--shard", "1/2"], SECONDS);
    assert_eq!(ran.status, 2, "{}", ran.stderr);
    let ran = run_mcpsim(&["merge", "/nonexistent/mcpsim/shard-1.jsonl"], SECONDS);
    assert_eq!(ran.status, 2, "{}", ran.stderr);
    assert!(ran.stderr.contains("cannot read /nonexistent/mcpsim/shard-1.jsonl"), "{}", ran.stderr);
}

#[test]
fn a_shard_of_a_target_exploration_plays_only_its_seeds() {
    let ran = run_mcpsim(
        &["explore", "--target", "targets/broken-own-memory-store.toml", "02-accepts-race", "--seeds", "3", "--shard", "2/3"],
        SECONDS,
    );
    assert_eq!(ran.status, 1, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("shard 2/3: seeds 2..2 of 1..3"), "{}", ran.stdout);
    assert!(ran.stdout.contains("seed 2: FAIL (at-most-once"), "{}", ran.stdout);
    assert!(!ran.stdout.contains("seed 1:") && !ran.stdout.contains("seed 3:"), "only seed 2 played: {}", ran.stdout);
    assert!(ran.stdout.contains("1 of 1 seed(s) failed"), "{}", ran.stdout);
    let refused = run_mcpsim(&["explore", "--target", "targets/mcpsim-stdio.toml", "02-accepts-race", "--results", "r.jsonl"], SECONDS);
    assert_eq!(refused.status, 2, "{}", refused.stderr);
}
