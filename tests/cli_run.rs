//! `mcpsim run` from the outside: exit codes, the summary table, failure reports and output formats.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn mcpsim(directory: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mcpsim")).args(args).current_dir(directory).output().expect("mcpsim runs")
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A scratch folder removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let path = std::env::temp_dir().join(format!("mcpsim-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Scratch(path)
    }

    fn write(&self, name: &str, contents: &str) -> String {
        std::fs::write(self.0.join(name), contents).unwrap();
        name.to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const CLUSTER: &str = "use demo\ninstance i1\nclient alice principal alice\n";

#[test]
fn run_with_no_arguments_runs_the_library_from_the_repository_root() {
    let output = mcpsim(repo(), &["run"]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", text(&output.stderr));
    assert!(stdout.starts_with("scenario "), "the summary table comes first:\n{stdout}");
    assert!(stdout.contains("messages  interleavings  result"));
    assert!(stdout.contains("01-lesson-exchange-on-one-instance"));
    let count = std::fs::read_dir(repo().join("scenarios")).unwrap().count();
    assert!(stdout.contains(&format!("{count} of {count} scenario(s) passed")), "{stdout}");
}

#[test]
fn without_a_scenarios_folder_the_embedded_library_runs() {
    let scratch = Scratch::new("embedded");
    let output = mcpsim(&scratch.0, &["run", "--seeds", "2"]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    let race = stdout.lines().find(|line| line.starts_with("04-accepts-race-for-one-note ")).expect("the race scenario ran");
    assert_eq!(race.split_whitespace().nth(1), Some("2"), "two seeds: {race}");
    assert!(text(&output.stderr).contains("built into mcpsim"), "say where the scenarios came from");
}

#[test]
fn a_failed_expectation_names_the_step_shows_expected_and_actual_and_exits_1() {
    let scratch = Scratch::new("failing");
    let file = scratch.write(
        "wrong.sim",
        &format!("{CLUSTER}send alice -> i1 tools/list {{}} as tools\nexpect tools input_required\nexpect tools complete\n"),
    );
    let output = mcpsim(&scratch.0, &["run", &file]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("FAIL  expect tools input_required: expected resultType \"input_required\", got complete"), "{stdout}");
    assert!(stdout.contains("FAIL wrong.sim (seed 1)\n  line 5: expect tools input_required\n      expected resultType"), "{stdout}");
    assert!(stdout.contains("reproduce: mcpsim run wrong.sim --seed 1 --format text"), "{stdout}");
    assert!(stdout.contains("   ok    expect tools complete"), "later expectations still run: {stdout}");
}

#[test]
fn an_unparseable_scenario_reports_file_line_column_and_exits_2() {
    let scratch = Scratch::new("unparseable");
    let file = scratch.write("typo.sim", &format!("{CLUSTER}send alice => i1 tools/list {{}}\n"));
    let output = mcpsim(&scratch.0, &["run", &file]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(2), "{stdout}");
    assert!(stdout.contains("error: typo.sim:4:12: expected `->` between the client and the instance, found `=`"), "{stdout}");
    let output = mcpsim(&scratch.0, &["run", "missing.sim"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stdout).contains("missing.sim: no such file, and no library scenario has that name"), "{}", text(&output.stdout));
}

#[test]
fn library_names_run_in_place_of_paths_and_typos_get_the_closest_name() {
    let scratch = Scratch::new("library-names");
    let output = mcpsim(&scratch.0, &["run", "04-accepts-race-for-one-note", "--seeds", "3"]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("1 of 1 scenario(s) passed"), "{stdout}");
    let output = mcpsim(&scratch.0, &["run", "04-acepts-race-for-one-note"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stdout).contains("did you mean 04-accepts-race-for-one-note?"), "{}", text(&output.stdout));
    let output = mcpsim(&scratch.0, &["scenarios"]);
    let listing = text(&output.stdout);
    assert!(output.status.success());
    for (file, _) in mcpsim::sim::library::SCENARIOS {
        assert!(listing.contains(file.trim_end_matches(".sim")), "{file} is listed");
    }
}

#[test]
fn a_mutant_run_names_the_mutant_in_its_reproduce_line() {
    let output = mcpsim(repo(), &["run", "05-accepts-race-for-different-candidates", "--seeds", "50", "--mutant", "replay-per-instance"]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("property at-most-once violated"), "{stdout}");
    let reproduce = stdout.lines().find(|l| l.contains("reproduce: mcpsim run")).expect("a reproduce line");
    assert!(reproduce.contains("--mutant replay-per-instance"), "{reproduce}");
    let output = mcpsim(repo(), &["run", "05-accepts-race-for-different-candidates", "--mutant", "no-such"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("no mutant is named \"no-such\""), "{}", text(&output.stderr));
}

#[test]
fn jsonl_keeps_stdout_machine_readable_and_mermaid_draws_a_sequence() {
    let file = "scenarios/02-retry-lands-on-another-instance.sim";
    let output = mcpsim(repo(), &["run", file, "--format", "jsonl", "--seed", "9"]);
    assert!(output.status.success());
    let stdout = text(&output.stdout);
    for line in stdout.lines() {
        let value: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(value.get("type").is_some());
    }
    assert!(stdout.starts_with(r#"{"scenario":"02-retry-lands-on-another-instance","scheduler":"random","seed":9,"type":"run"}"#));
    assert!(text(&output.stderr).contains("1 of 1 scenario(s) passed"), "the table goes to stderr");
    let output = mcpsim(repo(), &["run", file, "--format", "mermaid"]);
    let stdout = text(&output.stdout);
    assert!(stdout.starts_with("sequenceDiagram\n    participant alice\n    participant i1\n    participant i2\n    participant notes\n    participant replay\n"), "{stdout}");
    assert!(stdout.contains("i2-->>alice: complete: deleted (id 2)"), "{stdout}");
}

#[test]
fn help_explains_the_exit_status_and_the_defaults() {
    let output = mcpsim(repo(), &["run", "--help"]);
    let stdout = text(&output.stdout);
    assert!(output.status.success());
    for expected in ["Exit status: 0", "--seeds <SEEDS>", "--format <FORMAT>", "embedded library", "byte-identical"] {
        assert!(stdout.contains(expected), "{expected:?} missing from:\n{stdout}");
    }
}
