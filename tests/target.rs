//! `mcpsim run --target FILE` from the outside: our own fleets pass, the two broken deployments fail naming
//! the property, a failure is reproduced from its decision log, a bad target file is refused with where and
//! what, and every process mcpsim started is gone after Ctrl-C, SIGTERM or mcpsim's own death.
//!
//! Every mcpsim run here is bounded ([`RUN_SECONDS_MAX`]) and killed if it overstays.

mod common;

use common::child::{finish, Ran};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Longest one `mcpsim run --target` may take here (a full run of the target scenarios takes ~2 s).
const RUN_SECONDS_MAX: u64 = 180;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn spawn(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_mcpsim"))
        .args(args)
        .current_dir(repo())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mcpsim starts")
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

const SCENARIOS: [&str; 6] = [
    "01-retry-lands-elsewhere",
    "02-accepts-race",
    "03-decline-then-accept",
    "04-cancel-then-accept",
    "05-retry-after-the-first-instance-crashed",
    "06-another-principal-replays-the-state",
];

#[test]
fn our_stdio_fleet_passes_every_target_scenario() {
    let ran = run(&["run", "--target", "targets/mcpsim-stdio.toml"]);
    assert_eq!(ran.status, 0, "{}\n{}", ran.stdout, ran.stderr);
    for scenario in SCENARIOS {
        assert!(row(&ran, scenario).ends_with("PASS"), "{}", row(&ran, scenario));
    }
    assert!(ran.stdout.contains("3 instance(s) over stdio"), "{}", ran.stdout);
}

#[test]
fn our_http_fleet_passes_every_target_scenario() {
    let ran = run(&["run", "--target", "targets/mcpsim-http.toml"]);
    assert_eq!(ran.status, 0, "{}\n{}", ran.stdout, ran.stderr);
    for scenario in SCENARIOS {
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
    let dir = std::env::temp_dir().join(format!("mcpsim-target-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
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
    for (file, applicable) in [("targets/mcpsim-stdio.toml", 15), ("targets/mcpsim-http.toml", 16)] {
        let ran = run(&["attack", "--target", file]);
        assert_eq!(ran.status, 0, "{}\n{}", ran.stdout, ran.stderr);
        assert!(ran.stdout.contains(&format!("16 attack(s): {applicable} held, 0 finding(s), 0 inconclusive")), "{}", ran.stdout);
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
    assert_eq!(ran.status, 1, "{}", ran.stdout);
    assert!(ran.stdout.contains("the target file says tool.input_key = \"confirm\", but round1 on i1@"), "{}", ran.stdout);
    assert!(ran.stdout.contains("asked under delete_choice"), "{}", ran.stdout);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn explore_with_a_target_runs_each_seed_on_fresh_processes_and_lists_the_failing_ones() {
    let ran = run(&["explore", "--target", "targets/broken-own-memory-store.toml", "02-accepts-race", "--seeds", "3"]);
    assert_eq!(ran.status, 1, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("3 of 3 seed(s) failed: at-most-once in 3"), "{}", ran.stdout);
    assert!(ran.stdout.contains("seed 2: FAIL (at-most-once"), "{}", ran.stdout);
    assert!(
        ran.stdout
            .contains("reproduce: mcpsim run --target targets/broken-own-memory-store.toml targets/scenarios/02-accepts-race.sim --seed 1"),
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
