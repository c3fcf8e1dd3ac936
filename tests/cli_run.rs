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
    for (file, _) in mcpsim::testing::library::SCENARIOS {
        assert!(listing.contains(file.trim_end_matches(".sim")), "{file} is listed");
    }
    // It points to the course and marks the scenarios its lessons run.
    assert!(listing.contains("(mcpsim course)") && listing.contains("L2 02-retry-lands-on-another-instance"), "{listing}");
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
fn trace_client_exports_one_clients_session_and_names_the_clients_it_could_be() {
    let file = "scenarios/62-legacy-confirmation-races-a-modern-one.sim";
    let events = |client: &str| -> Vec<serde_json::Value> {
        let output = mcpsim(repo(), &["run", file, "--format", "mcp-trace", "--trace-client", client]);
        assert!(output.status.success(), "{}", text(&output.stderr));
        text(&output.stdout).lines().map(|line| serde_json::from_str(line).unwrap()).collect()
    };
    let whole = mcpsim(repo(), &["run", file, "--format", "mcp-trace"]);
    let whole = text(&whole.stdout).lines().count();
    let (desk, alice) = (events("desk"), events("alice"));
    assert_eq!(desk.len() + alice.len(), whole, "every message is one client's");
    assert_eq!(desk[0]["payload"]["method"], "initialize", "the legacy host's session opens its trace");
    assert_eq!(desk[0]["payload"]["params"]["clientInfo"]["name"], "desk");
    assert!(alice.iter().all(|event| event["payload"]["method"] != "initialize"), "the modern client's trace is its own");
    let unknown = mcpsim(repo(), &["run", file, "--format", "mcp-trace", "--trace-client", "bob"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(text(&unknown.stderr).contains("declares no client \"bob\"; its clients: alice, desk"), "{}", text(&unknown.stderr));
    let no_trace = mcpsim(repo(), &["run", file, "--trace-client", "desk"]);
    assert_eq!(no_trace.status.code(), Some(2));
    assert!(text(&no_trace.stderr).contains("add --format mcp-trace"), "{}", text(&no_trace.stderr));
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

/// One table of exit statuses for every command, in `mcpsim --help`; a usage error is 2 in every command.
#[test]
fn the_top_level_help_has_the_one_exit_status_table_and_usage_is_2_everywhere() {
    let output = mcpsim(repo(), &["--help"]);
    let stdout = text(&output.stdout);
    assert!(output.status.success());
    for expected in ["Exit status, the same in every command:", "  2  usage or configuration error", "  4  only liveness failed"] {
        assert!(stdout.contains(expected), "{expected:?} missing from:\n{stdout}");
    }
    for command in ["run", "explore", "replay", "attack", "serve", "seed", "keygen", "demo"] {
        let output = mcpsim(repo(), &[command, "--no-such-flag"]);
        assert_eq!(output.status.code(), Some(2), "mcpsim {command} --no-such-flag");
    }
}

#[test]
fn a_failing_scenarios_final_block_lists_every_failure() {
    let scratch = Scratch::new("every-failure");
    let file = scratch.write(
        "three.sim",
        &format!(
            "{CLUSTER}send alice -> i1 tools/list {{}} as tools\nexpect tools input_required\nexpect tools error -32602\nexpect note note-7 absent\n"
        ),
    );
    let output = mcpsim(&scratch.0, &["run", &file]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    let block = &stdout[stdout.find("\nFAIL three.sim (seed 1)").expect("a final block")..];
    for line in ["line 5: expect tools input_required", "line 6: expect tools error -32602", "line 7: expect note note-7 absent"] {
        assert!(block.contains(line), "{line:?} missing from the final block:\n{block}");
    }
}

#[test]
fn a_transcript_header_names_the_mutant_and_the_faults_in_force() {
    let output = mcpsim(repo(), &["run", "05-accepts-race-for-different-candidates", "--mutant", "delete-then-claim", "--format", "text"]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    let header = stdout.lines().next().unwrap();
    assert!(header.contains("MUTANT delete-then-claim (a deliberately unsafe server, not the real one)"), "{header}");
    let output = mcpsim(repo(), &["run", "scenarios/02-retry-lands-on-another-instance.sim", "--seed", "23", "--faults", "drop"]);
    let header = text(&output.stdout).lines().next().unwrap().to_string();
    assert!(header.contains("faults on: drop the client message chosen at delivery"), "{header}");
    // JSON Lines and Mermaid say it too; a run of the real servers without faults says nothing more than before.
    let output = mcpsim(repo(), &["run", "05-accepts-race-for-different-candidates", "--mutant", "delete-then-claim", "--format", "jsonl"]);
    assert!(text(&output.stdout).lines().next().unwrap().contains(r#""mutant":"delete-then-claim""#));
    let output =
        mcpsim(repo(), &["run", "05-accepts-race-for-different-candidates", "--mutant", "delete-then-claim", "--format", "mermaid"]);
    assert!(text(&output.stdout).contains("MUTANT delete-then-claim"), "{}", text(&output.stdout));
    let output = mcpsim(repo(), &["run", "scenarios/02-retry-lands-on-another-instance.sim"]);
    assert_eq!(
        text(&output.stdout).lines().next(),
        Some("# mcpsim transcript: 02-retry-lands-on-another-instance  seed 1  scheduler random")
    );
}

#[test]
fn out_writes_one_diagram_per_scenario_and_one_stream_refuses_several() {
    let scratch = Scratch::new("diagrams");
    let output = mcpsim(repo(), &["run", "scenarios/", "--format", "mermaid"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("writes one diagram per scenario"), "{}", text(&output.stderr));
    let out = scratch.0.join("diagrams");
    let output = mcpsim(repo(), &["run", "scenarios/", "--format", "mermaid", "--out", out.to_str().unwrap()]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    let count = std::fs::read_dir(repo().join("scenarios")).unwrap().count();
    let files: Vec<PathBuf> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), count, "{files:?}");
    for file in &files {
        assert!(file.extension().is_some_and(|e| e == "mmd"), "{}", file.display());
        assert!(std::fs::read_to_string(file).unwrap().starts_with("sequenceDiagram\n"), "{}", file.display());
    }
    assert!(stdout.contains(&format!("{count} of {count} scenario(s) passed")) && stdout.contains("transcripts written to"), "{stdout}");
}

#[test]
fn compact_is_for_terminals_and_text_stays_the_full_form() {
    let file = "scenarios/02-retry-lands-on-another-instance.sim";
    let compact = text(&mcpsim(repo(), &["run", file, "--format", "compact"]).stdout);
    let full = text(&mcpsim(repo(), &["run", file]).stdout);
    assert_eq!(full, text(&mcpsim(repo(), &["run", file, "--format", "text"]).stdout), "not a terminal: text by default");
    assert!(compact.contains("#   Guarantee taught: statelessness"), "the lesson on top:\n{compact}");
    let ink = |text: &str| text.chars().filter(|c| !c.is_whitespace()).count();
    assert!(ink(&compact) < ink(&full), "compact says less: {} against {} characters", ink(&compact), ink(&full));
    assert!(compact.lines().all(|line| line.chars().count() <= 120), "wrapped at 120 columns:\n{compact}");
    assert!(full.lines().any(|line| line.chars().count() > 500), "the full form keeps whole messages on a line");
    // On a terminal (a pseudo-terminal from script(1)), compact is the default.
    let command = format!("{} run {file}", env!("CARGO_BIN_EXE_mcpsim"));
    let output = Command::new("script").args(["-qec", &command, "/dev/null"]).current_dir(repo()).output().expect("script(1) runs");
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("# (compact: _meta shown once per sender"), "{}", text(&output.stdout));
}

#[test]
fn explore_counts_agree_with_the_failures_listed_and_replay_says_what_it_replays() {
    let scratch = Scratch::new("explore-counts");
    let save = scratch.0.join("ce.json");
    let save = save.to_str().unwrap();
    let output = mcpsim(
        &scratch.0,
        &[
            "explore",
            "05-accepts-race-for-different-candidates",
            "--mutant",
            "delete-then-claim",
            "--seeds",
            "5",
            "--save",
            save,
            "--format",
            "mermaid",
        ],
    );
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("  broke safety           5\n  expectations failed    5  (5 of them broke safety too)"), "{stdout}");
    let listed = stdout.split("SAFETY VIOLATED").nth(1).unwrap().lines().filter(|l| l.starts_with("  line ")).count();
    assert!(listed > 0, "expectation failures listed under a count that is not 0:\n{stdout}");
    // The counterexample's diagram is written beside the reproducer.
    let diagram = std::fs::read_to_string(scratch.0.join("ce.mmd")).expect("the diagram beside the reproducer");
    assert!(diagram.starts_with("sequenceDiagram\n") && diagram.contains("MUTANT delete-then-claim"), "{diagram}");
    let output = mcpsim(&scratch.0, &["replay", save]);
    let replayed = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{replayed}");
    assert!(
        replayed.starts_with(&format!(
            "replaying {save}: 05-accepts-race-for-different-candidates seed 1 against MUTANT delete-then-claim (a deliberately unsafe server from the zoo, not the real one); no faults; recorded as breaking at-most-once\n"
        )),
        "{replayed}"
    );
    let output = mcpsim(&scratch.0, &["replay", save, "--format", "mermaid"]);
    assert!(text(&output.stdout).starts_with("sequenceDiagram\n"), "the diagram alone on stdout");
    assert!(text(&output.stderr).starts_with("replaying "), "the verdict on stderr");
}

#[test]
fn an_exploration_where_only_an_expectation_fails_writes_a_shrunk_reproducer_too() {
    // A scenario that assumes one racer always wins: true for some interleavings, not others. No property
    // breaks (the server is right either way); the expectation is what the reproducer keeps failing.
    let scratch = Scratch::new("explore-expectation");
    let scenario = "use demo\nkey k1\ninstance i1 keys k1\ninstance i2 keys k1\nclient alice principal alice\n\
        let delete_tps = {\"workspaceUri\": \"file:///Users/alice/Documents/Notes\", \"title\": \"TPS report\"}\n\
        send alice -> i1 tools/call {\"name\": \"notes_delete\", \"arguments\": $delete_tps} as round1\n\
        parallel {\n  answer alice -> i1 accept {\"note_id\": \"note-7\", \"confirm\": true} for round1 as first\n  \
        answer alice -> i2 accept {\"note_id\": \"note-7\", \"confirm\": true} for round1 as second\n}\n\
        expect first complete\n";
    std::fs::write(scratch.0.join("assumes-a-winner.sim"), scenario).unwrap();
    let save = scratch.0.join("ce.json");
    let output = mcpsim(&scratch.0, &["explore", "assumes-a-winner.sim", "--seeds", "40", "--save", save.to_str().unwrap()]);
    let stdout = text(&output.stdout);
    // A failed expectation is a finding (1) in every command: explore, replay and run alike.
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("EXPECTATIONS FAILED (no safety property broke)"), "{stdout}");
    assert!(stdout.contains("minimal counterexample: expectation at line 12 failed"), "{stdout}");
    let output = mcpsim(&scratch.0, &["replay", save.to_str().unwrap()]);
    let replayed = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{replayed}");
    assert!(replayed.contains("recorded as breaking expectation at line 12\n"), "{replayed}");
    assert!(replayed.contains("FAIL  expect first complete"), "{replayed}");
}

/// The subcommand names under "Commands:" in a help text.
fn commands_listed(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .filter(|line| line.starts_with("  ") && !line.starts_with("   "))
        .filter_map(|line| line.split_whitespace().next().map(str::to_string))
        .filter(|name| name != "help")
        .collect()
}

/// Lines of `text` wider than 100 columns (counted in characters), numbered.
fn wider_than_100(text: &str) -> Vec<String> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| line.chars().count() > 100)
        .map(|(number, line)| format!("line {} ({} columns): {line}", number + 1, line.chars().count()))
        .collect()
}

#[test]
fn every_help_fits_in_100_columns_when_the_terminal_width_is_unknown() {
    let help = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_mcpsim")).args(args).env_remove("COLUMNS").output().unwrap();
        assert!(output.status.success(), "mcpsim {args:?}: {}", text(&output.stderr));
        text(&output.stdout)
    };
    let top = help(&["--help"]);
    let mut pages = vec![(vec![], top.clone())];
    for name in commands_listed(&top) {
        let page = help(&[&name, "--help"]);
        for nested in commands_listed(&page) {
            pages.push((vec![name.clone(), nested.clone()], help(&[&name, &nested, "--help"])));
        }
        pages.push((vec![name.clone()], page));
    }
    assert!(pages.len() >= 14, "the top-level help lists the subcommands: {top}");
    let mut wide = Vec::new();
    for (words, page) in &pages {
        for flag in ["--help", "-h"] {
            let page = if flag == "-h" { help(&words.iter().map(String::as_str).chain([flag]).collect::<Vec<_>>()) } else { page.clone() };
            for line in wider_than_100(&page) {
                wide.push(format!("mcpsim {} {flag}: {line}", words.join(" ")));
            }
        }
    }
    assert!(wide.is_empty(), "help lines over 100 columns:\n{}", wide.join("\n"));
}

#[test]
fn tables_and_lists_fit_in_100_columns() {
    let scratch = Scratch::new("widths");
    let zoo_results = scratch.0.join("zoo.jsonl");
    let race_results = scratch.0.join("race.jsonl");
    let zoo_results = zoo_results.to_str().unwrap();
    let race_results = race_results.to_str().unwrap();
    let commands: Vec<Vec<&str>> = vec![
        vec!["run"],
        vec!["run", "--seeds", "3"],
        vec!["mutants"],
        vec!["scenarios"],
        vec!["explore", "--all-mutants", "--seeds", "3", "--results", zoo_results],
        vec!["merge", zoo_results],
        vec!["explore", "04-accepts-race-for-one-note", "--seeds", "20", "--results", race_results],
        vec!["merge", race_results],
    ];
    let mut wide = Vec::new();
    for args in &commands {
        let output = mcpsim(repo(), args);
        let stdout = text(&output.stdout);
        assert!(stdout.lines().count() > 3, "mcpsim {}: {stdout}\n{}", args.join(" "), text(&output.stderr));
        // Commands (a reproducer, an outcome class's example) stay on one line, to be copied whole.
        let command = |line: &str| ["reproduce:", "example:"].iter().any(|start| line.trim_start().starts_with(start));
        let rows = stdout.lines().filter(|line| !command(line)).collect::<Vec<_>>().join("\n");
        for line in wider_than_100(&rows) {
            wide.push(format!("mcpsim {}: {line}", args.join(" ")));
        }
    }
    assert!(wide.is_empty(), "lines over 100 columns:\n{}", wide.join("\n"));
}

#[test]
fn a_failed_expectation_on_a_long_value_shows_every_differing_path_not_a_cut_off_line() {
    let scratch = Scratch::new("long-expectation");
    let schema = r#"{"properties": {"confirm": {"title": "Yes, delete this note permanently", "type": "boolean"}, "note_id": {"enum": ["note-3", "note-7", "note-14"], "title": "Note to delete", "type": "string"}}, "required": ["note_id", "confirmed"], "type": "object"}"#;
    let file = scratch.write(
        "long.sim",
        &format!(
            "use demo\ninstance i1\nclient alice principal alice capabilities {{\"elicitation\": {{\"form\": {{}}}}}}\n\
             send alice -> i1 tools/call {{\"name\": \"notes_delete\", \"arguments\": {{\"workspaceUri\": \"file:///Users/alice/Documents/Notes\", \"title\": \"TPS report\"}}}} as round1\n\
             expect round1 result.inputRequests.delete_choice.params.requestedSchema = {schema}\n"
        ),
    );
    let output = mcpsim(&scratch.0, &["run", &file, "--format", "text"]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("found a value that differs at these JSON paths (expected, then found):"), "{stdout}");
    assert!(
        stdout.contains("\n    result.inputRequests.delete_choice.params.requestedSchema.required[1]: \"confirmed\", then \"confirm\"\n"),
        "the one difference, whole: {stdout}"
    );
}
