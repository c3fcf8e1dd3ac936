//! `mcpsim run --target FILE` from the outside: our own fleets pass, the two broken deployments fail naming
//! the property, a failure is reproduced from its decision log, a bad target file is refused with where and
//! what, and every process mcpsim started is gone after Ctrl-C, SIGTERM or mcpsim's own death.
//!
//! Every mcpsim run here is bounded ([`RUN_SECONDS_MAX`]) and killed if it overstays.

mod common;

use common::child::{finish, repo, Ran};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Longest one `mcpsim run --target` may take here (a full run of the target scenarios takes ~2 s).
const RUN_SECONDS_MAX: u64 = 180;

fn spawn(args: &[&str]) -> Child {
    common::child::mcpsim(args).spawn().expect("mcpsim starts")
}

fn run(args: &[&str]) -> Ran {
    finish(spawn(args), RUN_SECONDS_MAX)
}

/// The summary table's row for `scenario`.
fn row<'a>(ran: &'a Ran, scenario: &str) -> &'a str {
    ran.stdout
        .lines()
        .find(|l| l.trim_start().starts_with(scenario) && !l.contains('#'))
        .unwrap_or_else(|| panic!("no row for {scenario}:\n{}", ran.stdout))
}

const SCENARIOS: [&str; 10] = [
    "01-retry-lands-elsewhere",
    "02-accepts-race",
    "03-decline-then-accept",
    "04-cancel-then-accept",
    "05-retry-after-the-first-instance-crashed",
    "06-another-principal-replays-the-state",
    "07-invalid-answers-then-accept",
    "08-answer-lost-then-retry-elsewhere",
    "09-retry-while-the-first-is-paused",
    "10-accept-delivered-twice",
];

/// The lessons that need the target file's `[admin]` and `[store]` (mcpsim's own fleets have them).
const STORE_LESSONS: [&str; 2] = ["12-item-deleted-after-the-form", "13-store-cut-between-claim-and-effect"];

#[test]
fn our_stdio_fleet_passes_every_target_scenario() {
    let ran = run(&["run", "--target", "targets/mcpsim-stdio.toml"]);
    assert_eq!(ran.status, 0, "{}\n{}", ran.stdout, ran.stderr);
    for scenario in SCENARIOS.iter().chain(&STORE_LESSONS) {
        assert!(row(&ran, scenario).ends_with("PASS"), "{}", row(&ran, scenario));
    }
    assert!(ran.stdout.contains("3 instance(s) over stdio"), "{}", ran.stdout);
}

#[test]
fn our_http_fleet_passes_every_target_scenario() {
    let ran = run(&["run", "--target", "targets/mcpsim-http.toml"]);
    assert_eq!(ran.status, 0, "{}\n{}", ran.stdout, ran.stderr);
    for scenario in SCENARIOS.iter().chain(&STORE_LESSONS) {
        assert!(row(&ran, scenario).ends_with("PASS"), "{}", row(&ran, scenario));
    }
}

#[test]
fn one_memory_store_per_process_breaks_at_most_once() {
    let ran = run(&["run", "--target", "targets/broken-own-memory-store.toml", "--reruns", "0"]);
    assert_eq!(ran.status, 1, "{}\n{}", ran.stdout, ran.stderr);
    assert!(row(&ran, "02-accepts-race").contains("FAIL (at-most-once"), "{}", row(&ran, "02-accepts-race"));
    assert!(row(&ran, "01-retry-lands-elsewhere").contains("at-most-once"), "{}", row(&ran, "01-retry-lands-elsewhere"));
    assert!(ran.stdout.contains("FAIL  property at-most-once: one confirmation succeeded 2 times"), "{}", ran.stdout);
    assert!(ran.stdout.contains("reproduce: mcpsim run --target targets/broken-own-memory-store.toml"), "{}", ran.stdout);
}

#[test]
fn processes_without_a_shared_key_break_statelessness() {
    let ran = run(&["run", "--target", "targets/broken-no-shared-key.toml", "--reruns", "0"]);
    assert_eq!(ran.status, 1, "{}\n{}", ran.stdout, ran.stderr);
    let retry = row(&ran, "01-retry-lands-elsewhere");
    assert!(retry.contains("FAIL (statelessness"), "{retry}");
    assert!(ran.stdout.contains("FAIL  property statelessness: line"), "{}", ran.stdout);
    // Nothing is deleted twice: the shared store still holds at most once.
    assert!(!ran.stdout.contains("property at-most-once:"), "{}", ran.stdout);
}

#[test]
fn a_failure_is_played_again_from_its_decision_log_and_says_how_often_it_reproduced() {
    let args = [
        "run",
        "--target",
        "targets/broken-own-memory-store.toml",
        "targets/scenarios/02-accepts-race.sim",
        "--seed",
        "5",
        "--reruns",
        "3",
    ];
    let first = run(&args);
    assert_eq!(first.status, 1, "{}", first.stdout);
    assert!(first.stdout.contains("reproduced 3 of 3 re-runs from its decision log"), "{}", first.stdout);
    // The decisions are the seed's: a second invocation logs exactly the same ones.
    let decisions = |ran: &Ran| -> Vec<String> {
        ran.stdout
            .lines()
            .skip_while(|l| !l.starts_with("decisions"))
            .skip(1)
            .take_while(|l| l.starts_with("  ") && !l.starts_with("  setup"))
            .map(str::to_string)
            .collect()
    };
    let second = run(&args);
    assert!(!decisions(&first).is_empty(), "{}", first.stdout);
    assert_eq!(decisions(&first), decisions(&second));
    assert!(decisions(&first).iter().any(|d| d.contains("parallel released in the order")), "{:?}", decisions(&first));
}

#[test]
fn a_target_file_with_an_unknown_key_is_refused_with_the_file_the_line_and_the_keys() {
    let dir = scratch("bad-file");
    let good = std::fs::read_to_string(repo().join("targets/mcpsim-stdio.toml")).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, good.replace("instances = 3", "instances = 3\nreplicas = 3")).unwrap();
    let ran = run(&["run", "--target", bad.to_str().unwrap()]);
    assert_eq!(ran.status, 2, "{}", ran.stderr);
    assert!(ran.stderr.contains(&format!("{}: TOML parse error at line 6", bad.display())), "{}", ran.stderr);
    assert!(ran.stderr.contains("unknown field `replicas`, expected one of `name`, `transport`, `instances`"), "{}", ran.stderr);
    assert!(ran.stderr.contains("docs/targets.md"), "{}", ran.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

fn scratch(name: &str) -> PathBuf {
    common::child::scratch("target-test", name)
}

/// A target whose "server" records its pid and then never answers, so mcpsim is mid-run (waiting for round 1)
/// when the test interrupts it.
fn hanging_target(dir: &Path) -> PathBuf {
    let pids = dir.join("pids");
    let file = dir.join("hang.toml");
    let text = format!(
        r#"name = "a server that never answers"
transport = "stdio"
instances = 3
command = ["sh", "-c", "echo $$ >> {pids}; exec sleep 300"]
request_timeout_ms = 100000
[principals.alice]
[tool]
name = "t"
arguments = {{}}
accept = {{}}
principal = "alice"
[effects]
command = ["echo", "0"]
"#,
        pids = pids.display()
    );
    std::fs::write(&file, text).unwrap();
    file
}

fn started_pids(dir: &Path, count: usize) -> Vec<u32> {
    for _ in 0..1000 {
        let text = std::fs::read_to_string(dir.join("pids")).unwrap_or_default();
        let pids: Vec<u32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        if pids.len() >= count {
            return pids;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("the target's processes did not start");
}

fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().next().unwrap_or("").to_string()))
        .is_some_and(|state| state != "Z" && state != "X")
}

fn assert_all_gone(pids: &[u32]) {
    for _ in 0..250 {
        if pids.iter().all(|&p| !running(p)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let alive: Vec<u32> = pids.iter().copied().filter(|&p| running(p)).collect();
    for pid in &alive {
        // SAFETY: cleaning up after a failed assertion; kill(2) touches no memory.
        unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
    }
    panic!("processes outlived mcpsim: {alive:?}");
}

/// `expected_status`: mcpsim's own exit status, and its handler's last word (a plain death by the signal would
/// give the same status, so the message shows the handler ran).
fn interrupted_by(signal: i32, expected_status: Option<i32>) {
    let dir = scratch(&format!("signal-{signal}"));
    let file = hanging_target(&dir);
    let child = spawn(&["run", "--target", file.to_str().unwrap(), "targets/scenarios/01-retry-lands-elsewhere.sim"]);
    let pids = started_pids(&dir, 3);
    assert!(pids.iter().all(|&p| running(p)));
    // SAFETY: signalling the child this test started.
    unsafe { libc::kill(child.id() as i32, signal) };
    let ran = finish(child, 30);
    if let Some(status) = expected_status {
        assert_eq!(ran.status, status, "{}", ran.stderr);
        assert!(ran.stderr.contains("interrupted; every process of the target was killed"), "{}", ran.stderr);
    }
    assert_all_gone(&pids);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ctrl_c_kills_every_process_of_the_target() {
    interrupted_by(libc::SIGINT, Some(130));
}

#[test]
fn sigterm_kills_every_process_of_the_target() {
    interrupted_by(libc::SIGTERM, Some(143));
}

#[cfg(target_os = "linux")]
#[test]
fn the_processes_die_with_mcpsim_even_when_it_is_killed_outright() {
    interrupted_by(libc::SIGKILL, None);
}

#[test]
fn the_attack_battery_holds_against_our_stdio_and_http_fleets() {
    for (file, applicable) in [("targets/mcpsim-stdio.toml", 18), ("targets/mcpsim-http.toml", 19)] {
        let ran = run(&["attack", "--target", file]);
        assert_eq!(ran.status, 0, "{}\n{}", ran.stdout, ran.stderr);
        assert!(ran.stdout.contains(&format!("19 attack(s): {applicable} held, 0 finding(s), 0 inconclusive")), "{}", ran.stdout);
        for clause in ["SPEC-MRTR-7", "SPEC-MRTR-8(a)", "SPEC-META-6", "SPEC-MRTR-16"] {
            assert!(ran.stdout.contains(clause), "{clause}: {}", ran.stdout);
        }
    }
}

#[test]
fn the_attack_battery_finds_the_replays_a_per_process_store_lets_through_and_prints_their_reproduction() {
    let ran = run(&["attack", "--target", "targets/broken-own-memory-store.toml", "--only", "replay-concurrent,tampered-state"]);
    assert_eq!(ran.status, 1, "{}\n{}", ran.stdout, ran.stderr);
    let finding = ran.stdout.lines().find(|l| l.starts_with("FINDING")).expect("a finding");
    assert!(
        finding.contains("replay-concurrent") && finding.contains("SPEC-MRTR-8") && finding.contains("3 of 3 concurrent accepts succeeded"),
        "{finding}"
    );
    assert!(ran.stdout.lines().any(|l| l.starts_with("ok") && l.contains("tampered-state")), "{}", ran.stdout);
    // The reproduction: every message, with the instance it went to, and the command that runs it alone.
    assert!(ran.stdout.contains("--only replay-concurrent"), "{}", ran.stdout);
    for instance in ["t1", "t2", "t3"] {
        assert!(ran.stdout.contains(&format!("→ {instance} as alice: {{")), "{instance}: {}", ran.stdout);
    }
    assert!(ran.stdout.contains("2 attack(s): 1 held, 1 finding(s)"), "{}", ran.stdout);
}

#[test]
fn an_unknown_attack_is_refused_with_the_battery() {
    let ran = run(&["attack", "--target", "targets/mcpsim-stdio.toml", "--only", "replay"]);
    assert_eq!(ran.status, 2);
    assert!(ran.stderr.contains("there is no attack \"replay\"; the battery: replay-sequential, replay-concurrent"), "{}", ran.stderr);
}

#[test]
fn a_wrong_input_key_in_the_target_file_is_reported_against_the_file() {
    let dir = scratch("input-key");
    let file = dir.join("wrong-key.toml");
    let good = std::fs::read_to_string(repo().join("targets/mcpsim-stdio.toml")).unwrap();
    std::fs::write(&file, good.replace("input_key = \"delete_choice\"", "input_key = \"confirm\"")).unwrap();
    let ran = run(&["run", "--target", file.to_str().unwrap(), "targets/scenarios/01-retry-lands-elsewhere.sim", "--reruns", "0"]);
    // The preflight stops it before any scenario, in one error against the file.
    assert_eq!(ran.status, 2, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stderr.contains("tool.input_key = \"confirm\": round 1 asked under delete_choice instead"), "{}", ran.stderr);
    assert!(!ran.stdout.contains("01-retry-lands-elsewhere seed"), "no scenario was played: {}", ran.stdout);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn explore_with_a_target_runs_each_seed_on_fresh_processes_and_lists_the_failing_ones() {
    let ran = run(&["explore", "--target", "targets/broken-own-memory-store.toml", "02-accepts-race", "--seeds", "3"]);
    assert_eq!(ran.status, 1, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("3 of 3 seed(s) failed: at-most-once in 3"), "{}", ran.stdout);
    assert!(ran.stdout.contains("seed 2: FAIL (at-most-once"), "{}", ran.stdout);
    assert!(
        ran.stdout.contains("reproduce: mcpsim run --target targets/broken-own-memory-store.toml 02-accepts-race --seed 1"),
        "{}",
        ran.stdout
    );
    let clean = run(&["explore", "--target", "targets/mcpsim-stdio.toml", "02-accepts-race", "--seeds", "3"]);
    assert_eq!(clean.status, 0, "{}\n{}", clean.stdout, clean.stderr);
    assert!(clean.stdout.contains("every one of 3 seed(s) held"), "{}", clean.stdout);
}

#[test]
fn the_mcp_trace_of_a_target_run_names_the_instance_of_every_message() {
    let ran =
        run(&["run", "--target", "targets/mcpsim-http.toml", "targets/scenarios/01-retry-lands-elsewhere.sim", "--format", "mcp-trace"]);
    assert_eq!(ran.status, 0, "{}", ran.stderr);
    let events: Vec<serde_json::Value> = ran.stdout.lines().map(|l| serde_json::from_str(l).expect("one JSON event per line")).collect();
    assert_eq!(events.len(), 6, "three requests and their answers: {}", ran.stdout);
    for (seq, event) in events.iter().enumerate() {
        assert_eq!(event["seq"], seq as u64);
        assert_eq!(event["transport"], "streamable-http");
        assert!(event["payload"]["jsonrpc"] == "2.0", "{event}");
    }
    let instances: Vec<&str> = events.iter().map(|e| e["instance"].as_str().unwrap()).collect();
    // Round 1, the retry and the replay each went to another process, and the trace says which.
    let fleet: std::collections::BTreeSet<&str> = instances.iter().map(|i| i.split('@').nth(1).unwrap()).collect();
    assert_eq!(fleet.len(), 3, "{instances:?}");
    assert!(instances[0].starts_with("i1@") && instances[2].starts_with("i2@") && instances[4].starts_with("i3@"), "{instances:?}");
    // The report went to stderr, so stdout is the trace alone.
    assert!(ran.stderr.contains("01-retry-lands-elsewhere seed 1") && ran.stderr.contains("PASS"), "{}", ran.stderr);
}

/// A target file for `tests/peers/python/planted_notes_server.py` (three stdio processes, one SQLite file)
/// with the mistakes `planted` names (empty: the correct server), written in `dir`.
fn planted_target(dir: &Path, planted: &str) -> PathBuf {
    let file = dir.join(format!("planted-{}.toml", if planted.is_empty() { "none" } else { planted }));
    let text = format!(
        r#"name = "planted notes server (no SDK): {planted}"
transport = "stdio"
instances = 3
setup = [["python3", "tests/peers/python/planted_notes_server.py", "seed", "{{data_dir}}/notes.db"]]
command = ["python3", "tests/peers/python/planted_notes_server.py", "stdio", "{{data_dir}}/notes.db"]
env = {{ PLANTED = "{planted}" }}

[principals.alice]
args = ["alice"]

[principals.bob]
args = ["bob"]

[tool]
name = "notes_delete"
arguments = {{ workspaceUri = "file:///notes", title = "TPS report" }}
input_key = "delete_choice"
accept = {{ note_id = "note-7", confirm = true }}
principal = "alice"
other_principal = "bob"

[effects]
method = "resources/list"
count = "result.resources"
"#
    );
    std::fs::write(&file, text).unwrap();
    file
}

fn findings(ran: &Ran) -> Vec<&str> {
    ran.stdout.lines().filter(|l| l.starts_with("FINDING")).collect()
}

#[test]
fn the_correct_planted_server_passes_every_scenario_and_attack_with_no_false_positive() {
    let dir = scratch("planted-none");
    let file = planted_target(&dir, "");
    let ran = run(&["run", "--target", file.to_str().unwrap()]);
    assert_eq!(ran.status, 0, "{}\n{}", ran.stdout, ran.stderr);
    for scenario in SCENARIOS {
        assert!(row(&ran, scenario).ends_with("PASS"), "{}", row(&ran, scenario));
    }
    let attacked = run(&["attack", "--target", file.to_str().unwrap()]);
    assert_eq!(attacked.status, 0, "{}\n{}", attacked.stdout, attacked.stderr);
    assert!(attacked.stdout.contains("19 attack(s): 18 held, 0 finding(s), 0 inconclusive, 1 not applicable"), "{}", attacked.stdout);
    assert!(attacked.stdout.contains("held in 5 of 5 tries"), "the race was tried 5 times: {}", attacked.stdout);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_server_burning_its_state_on_a_cancel_is_caught_by_the_battery_and_by_scenario_04() {
    let dir = scratch("planted-cancel");
    let file = planted_target(&dir, "burn-on-cancel");
    let attacked = run(&["attack", "--target", file.to_str().unwrap(), "--only", "cancel-then-accept,decline-then-accept"]);
    assert_eq!(attacked.status, 1, "{}\n{}", attacked.stdout, attacked.stderr);
    let found = findings(&attacked);
    assert_eq!(found.len(), 1, "{}", attacked.stdout);
    assert!(found[0].contains("cancel-then-accept") && found[0].contains("MISSION.md §3"), "{}", found[0]);
    assert!(found[0].contains("after the cancel, the valid accept on") && found[0].contains("state_consumed"), "{}", found[0]);
    assert!(found[0].contains("cancel consumes nothing"), "the finding names the rule: {}", found[0]);
    let ran = run(&["run", "--target", file.to_str().unwrap(), "04-cancel-then-accept", "--reruns", "0"]);
    assert_eq!(ran.status, 1, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("FAIL  line 19: expect accepted complete"), "{}", ran.stdout);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_server_burning_its_state_on_an_invalid_answer_is_caught_by_each_kind_of_invalid_answer_and_by_scenario_07() {
    let dir = scratch("planted-invalid");
    let file = planted_target(&dir, "burn-on-invalid");
    let kinds = "schema-mismatch,missing-field-then-accept,not-shown-then-accept,unasked-key-only-then-accept,cancel-then-accept";
    let attacked = run(&["attack", "--target", file.to_str().unwrap(), "--only", kinds]);
    assert_eq!(attacked.status, 1, "{}\n{}", attacked.stdout, attacked.stderr);
    let found = findings(&attacked);
    // The three kinds it refuses as invalid burn the state; an unasked key alone is asked again (consumes
    // nothing there), and a cancel is left alone by this mistake.
    for kind in ["schema-mismatch", "missing-field-then-accept", "not-shown-then-accept"] {
        let line = found.iter().find(|l| l.contains(kind)).unwrap_or_else(|| panic!("{kind}: {}", attacked.stdout));
        assert!(line.contains("an invalid response consumes nothing") && line.contains("state_consumed"), "{line}");
    }
    assert_eq!(found.len(), 3, "{}", attacked.stdout);
    let ran = run(&["run", "--target", file.to_str().unwrap(), "07-invalid-answers-then-accept", "--reruns", "0"]);
    assert_eq!(ran.status, 1, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("FAIL  line 21: expect accepted complete"), "{}", ran.stdout);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_server_binding_the_state_to_client_info_is_caught_by_another_principal_and_by_scenario_06() {
    let dir = scratch("planted-client-info");
    let file = planted_target(&dir, "bind-client-info");
    let attacked = run(&["attack", "--target", file.to_str().unwrap(), "--only", "another-principal"]);
    assert_eq!(attacked.status, 1, "{}\n{}", attacked.stdout, attacked.stderr);
    let found = findings(&attacked);
    assert!(found.len() == 1 && found[0].contains("bob's accept of the state issued to alice succeeded"), "{}", attacked.stdout);
    // The intruder's request carries the victim's _meta byte for byte.
    let meta = |who: &str| {
        attacked.stdout.lines().find(|l| l.contains(&format!("as {who}: {{"))).and_then(|l| {
            let json: serde_json::Value = serde_json::from_str(&l[l.find('{').unwrap()..]).ok()?;
            Some(json["params"]["_meta"].to_string())
        })
    };
    assert_eq!(meta("alice"), meta("bob"), "{}", attacked.stdout);
    assert!(meta("bob").is_some_and(|m| m.contains("clientInfo")), "{}", attacked.stdout);
    let ran = run(&["run", "--target", file.to_str().unwrap(), "06-another-principal-replays-the-state", "--reruns", "0"]);
    assert_eq!(ran.status, 1, "{}\n{}", ran.stdout, ran.stderr);
    assert!(row(&ran, "06-another-principal-replays-the-state").contains("FAIL (consent"), "{}", ran.stdout);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_tool_error_on_every_accept_fails_expect_complete_and_is_shown_as_a_tool_error() {
    let dir = scratch("planted-tool-error");
    let file = planted_target(&dir, "error-on-accept");
    let ran = run(&["run", "--target", file.to_str().unwrap(), "05-retry-after-the-first-instance-crashed", "--reruns", "0"]);
    assert_eq!(ran.status, 1, "{}\n{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout.contains("FAIL  line 17: expect round2 complete: expected resultType \"complete\" (not a tool error), got tool_error"),
        "{}",
        ran.stdout
    );
    assert!(row(&ran, "05-retry-after-the-first-instance-crashed").contains("FAIL (expectations)"), "{}", ran.stdout);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_broken_probe_or_tool_in_the_target_file_stops_the_run_with_exit_2_naming_the_key() {
    let dir = scratch("preflight");
    let good = std::fs::read_to_string(repo().join("targets/mcpsim-stdio.toml")).unwrap();
    let cases = [
        (
            "count",
            good.replace("count = \"result.resources\"", "count = \"result.resource\""),
            "[effects] count = \"result.resource\": the probe's answer has no list there",
        ),
        ("params", good.replace("method = \"resources/list\"", "method = \"tools/call\""), "[effects] params is missing"),
        (
            "tool",
            good.replace("name = \"notes_delete\"", "name = \"notes_delet\""),
            "tool.name = \"notes_delet\": the server lists no such tool: did you mean \"notes_delete\"?",
        ),
    ];
    for (name, text, expected) in cases {
        let file = dir.join(format!("{name}.toml"));
        std::fs::write(&file, text).unwrap();
        for command in ["run", "attack"] {
            let ran = run(&[command, "--target", file.to_str().unwrap()]);
            assert_eq!(ran.status, 2, "{name} {command}: {}\n{}", ran.stdout, ran.stderr);
            assert!(ran.stderr.contains(expected), "{name} {command}: {}", ran.stderr);
            assert!(!ran.stdout.contains("PASS") && !ran.stdout.contains("held"), "nothing was judged: {}", ran.stdout);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_run_whose_every_scenario_was_skipped_exits_3() {
    let dir = scratch("skipped");
    let good = std::fs::read_to_string(repo().join("targets/mcpsim-stdio.toml")).unwrap();
    let file = dir.join("no-other.toml");
    std::fs::write(&file, good.replace("other_principal = \"bob\"\n", "")).unwrap();
    let ran = run(&["run", "--target", file.to_str().unwrap(), "06-another-principal-replays-the-state"]);
    assert_eq!(ran.status, 3, "{}\n{}", ran.stdout, ran.stderr);
    assert!(row(&ran, "06-another-principal-replays-the-state").ends_with("SKIPPED"), "{}", ran.stdout);
    assert!(ran.stdout.contains("every scenario was skipped: nothing was judged"), "{}", ran.stdout);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_target_scenarios_are_in_the_binary_so_a_run_outside_the_checkout_plays_them_by_name_too() {
    let dir = scratch("outside");
    let file = repo().join("targets/mcpsim-stdio.toml");
    let outside = |args: &[&str]| {
        let child = Command::new(env!("CARGO_BIN_EXE_mcpsim"))
            .args(args)
            .current_dir(&dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("mcpsim starts");
        finish(child, RUN_SECONDS_MAX)
    };
    let ran = outside(&["run", "--target", file.to_str().unwrap(), "04-cancel-then-accept"]);
    assert_eq!(ran.status, 0, "{}\n{}", ran.stdout, ran.stderr);
    assert!(row(&ran, "04-cancel-then-accept").ends_with("PASS"), "{}", ran.stdout);
    let unknown = outside(&["run", "--target", file.to_str().unwrap(), "04-cancel"]);
    assert_eq!(unknown.status, 2, "{}", unknown.stderr);
    assert!(unknown.stderr.contains("no target scenario has that name (they are: 01-retry-lands-elsewhere"), "{}", unknown.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn each_attack_mints_where_the_seed_says_and_logs_it() {
    let columns = |seed: &str| -> Vec<String> {
        let ran = run(&[
            "attack",
            "--target",
            "targets/mcpsim-stdio.toml",
            "--seed",
            seed,
            "--only",
            "changed-arguments,tampered-state,decline-then-accept,retry-after-kill",
        ]);
        assert_eq!(ran.status, 0, "{}\n{}", ran.stdout, ran.stderr);
        assert!(ran.stdout.contains(&format!("seed {seed} (each attack's minting instance first)")), "{}", ran.stdout);
        ran.stdout.lines().filter(|l| l.starts_with("ok")).map(|l| l[l.find('[').unwrap()..=l.find(']').unwrap()].to_string()).collect()
    };
    let first = columns("1");
    assert_eq!(first.len(), 4);
    assert!(first.iter().any(|c| !c.starts_with("[t1")), "not every attack mints on t1: {first:?}");
    assert_eq!(first, columns("1"), "the same seed draws the same instances");
}

#[test]
fn a_race_attack_is_tried_on_warmed_fleets_and_says_how_many_tries_found_it() {
    let ran = run(&["attack", "--target", "targets/broken-own-memory-store.toml", "--only", "replay-concurrent", "--race-tries", "3"]);
    assert_eq!(ran.status, 1, "{}\n{}", ran.stdout, ran.stderr);
    let finding = findings(&ran).pop().expect("a finding");
    assert!(finding.contains(" of 3 tries; try "), "{finding}");
    // Every instance answered a request before the race: one tools/list each.
    assert_eq!(ran.stdout.matches("\"method\":\"tools/list\"").count(), 3, "{}", ran.stdout);
}

/// A server that answers two requests in flight on one process in the reverse of the order they were written
/// (as rmcp does: each as it finishes): mcpsim matches answers to requests by id, so both are answered and none
/// is dropped as a stray line (it was, and the dropped request's read then waited out its timeout: a false
/// statelessness finding on scenario 02's one-instance play).
#[test]
fn answers_that_come_back_out_of_order_on_one_stdio_process_each_reach_their_request() {
    let dir = std::env::temp_dir().join(format!("mcpsim-out-of-order-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("t.toml");
    std::fs::write(
        &file,
        r#"name = "answers out of order"
transport = "stdio"
instances = 1
command = ["python3", "tests/peers/out_of_order_server.py"]
request_timeout_ms = 5000
[principals.alice]
[tool]
name = "t"
arguments = {}
input_key = "choice"
accept = { ok = true }
principal = "alice"
[effects]
method = "tools/call"
params = { name = "count", arguments = {} }
count = "result.structuredContent.done"
"#,
    )
    .unwrap();
    let scenario = dir.join("race-on-one-process.sim");
    std::fs::write(
        &scenario,
        r#"principal alice workspaces "file:///target"
instance i1
client user principal alice

send user -> i1 tools/call {"name": "t", "arguments": {}} as round1
expect round1 input_required

parallel {
  answer user -> i1 accept {"ok": true} as first
  answer user -> i1 accept {"ok": true} as second
}
expect one of first, second: complete
expect one of first, second: error -32602 state_consumed
"#,
    )
    .unwrap();
    let ran = run(&["run", "--target", file.to_str().unwrap(), scenario.to_str().unwrap(), "--reruns", "0", "--transcript"]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(ran.status, 0, "{}\n{}", ran.stdout, ran.stderr);
    assert!(!ran.stdout.contains("gave no answer"), "{}", ran.stdout);
}
