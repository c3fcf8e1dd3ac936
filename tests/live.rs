//! `mcpsim run --live`: library scenarios played against a real fleet (`mcpsim serve --instances 2` on one
//! SQLite file and one key file), compared step by step with the simulator.
//!
//! What it shows:
//! - the scenarios the fleet can play in full end with every step matching the simulator and every answer
//!   expectation held (store expectations are listed as not evaluated, never as held);
//! - steps that need the servers' processes, clock or store are reported SKIPPED with the reason, the answers
//!   after them are shown but not compared, and expectations on skipped answers are not evaluated;
//! - a live answer that differs from the simulator's fails the run (exit 1), and so does a wrong token;
//! - an instance declared unlike the fleet (another key) is flagged as a configuration mismatch, and what
//!   it answered differently, and everything after, is shown but not judged;
//! - a scenario with more instances than URLs is refused before anything is sent (exit 2), saying so;
//! - with `--reseed SPEC` every scenario starts from its own notes without a hand re-seed, note admin steps are
//!   made in the store, and store expectations are read from the store named (failing when it disagrees).

mod e2e_support;

use e2e_support::*;
use std::path::Path;

/// A test key, never a real one (32 bytes of 0x2a).
const KEY_FILE: &str = "[[keys]]\nid = \"live\"\nsecret_base64 = \"KioqKioqKioqKioqKioqKioqKioqKioqKioqKioqKio=\"\n";

/// Two instances in one process on one SQLite file, with the file, the key file and the process removed on drop.
struct Fleet {
    server: HttpServer,
    store: String,
    _key_file: TempConfig,
    database: std::path::PathBuf,
}

impl Fleet {
    fn start() -> Fleet {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let serial = COUNTER.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let database = std::env::temp_dir().join(format!("mcpsim-live-{}-{serial}.db", std::process::id()));
        let store = format!("sqlite:{}", database.display());
        let key_file = TempConfig::new(KEY_FILE);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&key_file.path, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let fleet = Fleet {
            server: HttpServer::start_instances(&["--instances", "2", "--store", &store, "--key-file", key_file.arg()], 2),
            store,
            _key_file: key_file,
            database,
        };
        fleet.seed();
        fleet
    }

    /// Restores the demo's seven notes: each scenario starts from them, as in the simulator.
    fn seed(&self) {
        let (code, stdout, stderr) = run_with_env(&["seed", "--store", &self.store], &[]);
        assert_eq!(code, Some(0), "mcpsim seed failed: {stdout}{stderr}");
    }

    fn urls(&self) -> String {
        self.server.urls.join(",")
    }

    /// `mcpsim run --live URLS EXTRA… scenarios/FILE`: exit code and stdout.
    fn play(&self, scenario: &str, extra: &[&str]) -> (Option<i32>, String) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(scenario);
        let urls = self.urls();
        let mut args = vec!["run", "--live", &urls];
        args.extend_from_slice(extra);
        let path = path.to_str().unwrap().to_string();
        args.push(&path);
        let (code, stdout, stderr) = run_with_env(&args, &[]);
        (code, format!("{stdout}{stderr}"))
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.database.display()));
        }
    }
}

/// The row of the parity table for source line `line`.
fn row(output: &str, line: usize) -> &str {
    let prefix = format!("{line:>5}  ");
    output.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("no row for line {line} in:\n{output}"))
}

#[test]
fn scenarios_the_fleet_can_play_in_full_match_the_simulator() {
    let fleet = Fleet::start();
    // (file, steps compared, answer expectations held, store expectations not evaluated)
    let cases = [
        ("01-lesson-exchange-on-one-instance.sim", 4, 10, 4),
        ("02-retry-lands-on-another-instance.sim", 3, 5, 3),
        // Its `expect always at most 1 of …: complete`, judged under faults too, holds here as well.
        ("04-accepts-race-for-one-note.sim", 3, 6, 4),
        // Either note may win live; the simulator produces both interleavings among the seeds tried.
        // Its `if` expectations (two, and the same two marked `always`): the one whose condition held reads the
        // store (not evaluated), the other holds vacuously, whichever note won.
        ("05-accepts-race-for-different-candidates.sim", 2, 6, 4),
        ("11-tampered-state.sim", 6, 6, 2),
        ("12-changed-title.sim", 5, 5, 1),
        ("13-another-principal-replays-the-state.sim", 5, 5, 2),
    ];
    for (file, steps, held, not_evaluated) in cases {
        fleet.seed();
        let (code, output) = fleet.play(file, &[]);
        assert_eq!(code, Some(0), "{file}:\n{output}");
        let summary = format!(
            "PASS: steps {steps} match, 0 differ, 0 not compared, 0 skipped; expectations {held} held, 0 failed, {not_evaluated} not evaluated; 0 error(s)"
        );
        assert!(output.contains(&summary), "{file}: expected {summary:?} in:\n{output}");
        assert!(!output.contains("SKIPPED"), "{file}:\n{output}");
    }
    // The race: one deletes, the other is refused, whichever instance wins; compared as a set.
    fleet.seed();
    let (_, output) = fleet.play("04-accepts-race-for-one-note.sim", &[]);
    let race = row(&output, 21);
    assert!(race.contains("complete {\"deleted\":true") && race.ends_with("yes"), "{race}");
    assert!(output.contains("expect one of first, second: error -32602 state_consumed or error -32603 claim_in_progress"), "{output}");
    // Store expectations are listed, never counted as held.
    assert!(output.contains("expect note note-7 absent: not evaluated: it reads the store"), "{output}");
}

#[test]
fn steps_that_need_the_servers_are_skipped_and_what_follows_is_not_judged() {
    let fleet = Fleet::start();
    let (code, output) = fleet.play("03-retry-after-the-first-instance-crashed.sim", &[]);
    assert_eq!(code, Some(0), "skips do not fail the run:\n{output}");
    assert!(
        row(&output, 17).contains("SKIPPED: live mode does not stop processes; requests to i1 are skipped until `restart`"),
        "{output}"
    );
    // The request the simulator lost to the crash is not sent live (the live i1 would answer it).
    let lost = row(&output, 20);
    assert!(lost.contains("no response") && lost.contains("SKIPPED: i1 is crashed at this point of the scenario"), "{lost}");
    assert!(output.contains("expect lost no response: not evaluated: lost was not sent live"), "{output}");
    assert!(row(&output, 32).contains("SKIPPED: the live i1 was never stopped"), "{output}");
    // A plain crash changes nothing for the other instance: its answers are still compared.
    assert!(row(&output, 26).ends_with("yes"), "{output}");
    assert!(output.contains("steps 3 match, 0 differ, 0 not compared, 3 skipped"), "{output}");

    fleet.seed();
    let (code, output) = fleet.play("10-state-expires-between-rounds.sim", &[]);
    assert_eq!(code, Some(0), "{output}");
    assert!(output.contains("configuration mismatch: i2 declares clock offset 240000 ms (the fleet runs on the wall clock)"), "{output}");
    assert!(row(&output, 20).contains("SKIPPED: the fleet runs on the wall clock, which cannot be advanced"), "{output}");
    // Live, the state has not expired: the answer differs, and is shown but not judged.
    let skewed = row(&output, 22);
    assert!(
        skewed.contains("error -32602 state_expired") && skewed.contains("not compared: after skipped line 20 (advance 90s)"),
        "{skewed}"
    );
    assert!(output.contains("expect skewed error -32602 state_expired: not evaluated: skewed is not comparable"), "{output}");
    assert!(output.contains("2 skipped"), "{output}");

    fleet.seed();
    let (code, output) = fleet.play("22-admin-changes-between-rounds.sim", &[]);
    assert_eq!(code, Some(0), "{output}");
    assert!(row(&output, 18).contains("SKIPPED: admin changes need the store"), "{output}");
    assert!(row(&output, 25).contains("SKIPPED: a revocation changes the servers' configuration"), "{output}");
    // The summary table counts the skips.
    assert!(output.contains("1 of 1 scenario(s) matched the simulator live; 2 step(s) skipped"), "{output}");

    // An instance declared with another key: the fleet's one key ring accepts what the simulator refused, so
    // that answer and everything after it (the store changed) are shown, not judged.
    fleet.seed();
    let urls = format!("{},{}", fleet.urls(), fleet.server.urls[0]);
    let path = format!("{}/scenarios/15-misconfigured-instance-key.sim", env!("CARGO_MANIFEST_DIR"));
    let (code, stdout, _) = run_with_env(&["run", "--live", &urls, &path], &[]);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("configuration mismatch: i3 declares keys k9 (the fleet shares one key ring)"), "{stdout}");
    let on_misconfigured = row(&stdout, 20);
    assert!(on_misconfigured.contains("error -32602 state_signature") && on_misconfigured.contains("not compared: configuration: i3"));
    assert!(row(&stdout, 24).contains("not compared: after line 20 (answer alice -> i3"), "{stdout}");
    assert!(stdout.contains("expect on_healthy complete: not evaluated: on_healthy is not comparable"), "{stdout}");
}

#[test]
fn a_live_answer_unlike_the_simulators_fails_the_run() {
    let fleet = Fleet::start();
    let (code, output) = fleet.play("02-retry-lands-on-another-instance.sim", &[]);
    assert_eq!(code, Some(0), "{output}");
    // Not re-seeded: note-3 is already gone, so round 1 offers other notes and the accept is refused.
    let (code, output) = fleet.play("02-retry-lands-on-another-instance.sim", &[]);
    assert_eq!(code, Some(1), "{output}");
    assert!(row(&output, 19).ends_with("NO"), "{output}");
    assert!(output.contains("line 19 differs:\n    simulator: complete {\"deleted\":true,\"noteId\":\"note-3\""), "{output}");
    assert!(output.contains("FAIL scenarios/") || output.contains("FAIL /"), "{output}");
    // The final block lists every failure of the scenario, not only the last one.
    let differing = output.lines().filter(|l| l.starts_with("    ") && l.ends_with("NO")).count()
        + output.lines().filter(|l| l.starts_with("  ") && l.trim_end().ends_with("NO")).count();
    let block = &output[output.rfind("\nFAIL ").expect("a FAIL block")..];
    let failed_expectations = output.lines().filter(|l| l.starts_with("   FAIL  line ")).count();
    assert!(differing > 0 && failed_expectations > 0, "{output}");
    assert_eq!(block.matches(" differs: simulator ").count(), output.lines().filter(|l| l.ends_with("  NO")).count(), "{block}");
    assert_eq!(block.lines().filter(|l| l.starts_with("  line ") && !l.contains(" differs: ")).count(), failed_expectations, "{block}");

    // A token the fleet does not know: every answer is the transport's 401 refusal, never a pass.
    fleet.seed();
    let (code, output) = fleet.play("01-lesson-exchange-on-one-instance.sim", &["--token", "alice=not-a-token"]);
    assert_eq!(code, Some(1), "{output}");
    assert!(row(&output, 12).contains("error -32600") && row(&output, 12).ends_with("NO"), "{output}");
}

#[test]
fn with_reseed_each_scenario_starts_from_its_notes_and_store_expectations_read_the_store() {
    let fleet = Fleet::start();
    // Several scenarios in one run, never re-seeded by hand: each one deletes notes the next one needs.
    let scenarios: Vec<String> = [
        "04-accepts-race-for-one-note.sim",
        "02-retry-lands-on-another-instance.sim",
        "06-note-deleted-after-the-form-was-shown.sim",
        "08-decline-then-replayed-accept.sim",
        "02-retry-lands-on-another-instance.sim",
    ]
    .iter()
    .map(|file| format!("{}/scenarios/{file}", env!("CARGO_MANIFEST_DIR")))
    .collect();
    let urls = fleet.urls();
    let mut args = vec!["run", "--live", &urls, "--reseed", &fleet.store];
    args.extend(scenarios.iter().map(String::as_str));
    let (code, stdout, stderr) = run_with_env(&args, &[]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("5 of 5 scenario(s) matched the simulator live; 0 step(s) skipped"), "{stdout}");
    assert!(!stdout.contains(": not evaluated:"), "every store expectation is evaluated:\n{stdout}");
    assert!(stdout.contains("store: re-seeded sqlite:"), "{stdout}");
    // Scenario 04's store expectations, held in the fleet's own store.
    for held in [
        "   ok    line 32: expect note note-7 absent",
        "   ok    line 33: expect notes count 6",
        "   ok    line 34: expect consumed count 1",
        "   ok    line 35: expect nonce of round1 consumed",
    ] {
        assert!(stdout.contains(held), "{held:?} in:\n{stdout}");
    }
    // Scenario 06's admin change is made in the store, and compared like any step.
    let admin = stdout.lines().find(|l| l.contains("admin delete note-7")).unwrap_or_else(|| panic!("no admin row in:\n{stdout}"));
    assert!(admin.contains("(performed)") && admin.contains("done") && admin.ends_with("yes"), "{admin}");
    assert!(stdout.contains("   ok    line 25: expect nonce of round1 unused"), "{stdout}");
    // The second run of 02 starts from the demo's notes again (note-3 restored, its earlier nonce still used).
    let runs_of_02 = stdout.lines().filter(|l| l.starts_with("02-retry-lands-on-another-instance") && l.ends_with("  ok")).count();
    assert_eq!(runs_of_02, 2, "{stdout}");
    assert!(stdout.contains("the 1 nonce(s) consumed before stay consumed"), "the 04 run's nonce is kept:\n{stdout}");
}

#[test]
fn store_expectations_fail_when_the_store_disagrees_and_need_a_shared_store() {
    let fleet = Fleet::start();
    // Re-seed and read a store the fleet does not use: the fleet deletes note-7 in its own, so the expectations
    // read from this one fail. They are read, not assumed.
    let decoy = std::env::temp_dir().join(format!("mcpsim-live-decoy-{}.db", std::process::id()));
    let decoy_spec = format!("sqlite:{}", decoy.display());
    let (code, output) = fleet.play("04-accepts-race-for-one-note.sim", &["--reseed", &decoy_spec]);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", decoy.display()));
    }
    assert_eq!(code, Some(1), "{output}");
    assert!(output.contains("   FAIL  line 32: expect note note-7 absent: expected note note-7 absent, it is still there"), "{output}");
    assert!(output.contains("   FAIL  line 34: expect consumed count 1: expected 1 consumed nonces, found 0"), "{output}");
    // Every answer still matched: only the store said otherwise.
    assert!(output.contains("steps 3 match, 0 differ"), "{output}");

    let (code, output) = fleet.play("04-accepts-race-for-one-note.sim", &["--reseed", "memory"]);
    assert_eq!(code, Some(2), "{output}");
    assert!(output.contains("a memory store lives inside its `mcpsim serve` process"), "{output}");
}

#[test]
fn more_instances_than_urls_is_refused_saying_so() {
    let fleet = Fleet::start();
    let (code, output) = fleet.play("15-misconfigured-instance-key.sim", &[]);
    assert_eq!(code, Some(2), "{output}");
    assert!(
        output.contains("declares 3 instance(s) (i1, i2, i3) but --live names 2 URL(s); pass one URL per instance, in declaration order"),
        "{output}"
    );
    let (code, stderr) = run_to_exit(&["run", "--live", "ftp://example/mcp", "scenarios"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("only http:// URLs are supported"), "{stderr}");
}

#[test]
fn a_scenarios_own_routing_headers_are_sent_exactly() {
    let fleet = Fleet::start();
    let scenario = std::env::temp_dir().join(format!("mcpsim-live-headers-{}.sim", std::process::id()));
    std::fs::write(
        &scenario,
        r#"# Guarantee taught: the routing headers must agree with the body, live as in the simulator.
use demo
instance i1
client alice principal alice
send alice -> i1 tools/list {} headers {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call"} as confused
expect confused error -32020
send alice -> i1 tools/list {} headers {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"} as agreeing
expect agreeing complete
"#,
    )
    .unwrap();
    let (code, stdout, _) = run_with_env(&["run", "--live", &fleet.server.urls[0], scenario.to_str().unwrap()], &[]);
    let _ = std::fs::remove_file(&scenario);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(row(&stdout, 5).contains("error -32020") && row(&stdout, 5).ends_with("yes"), "{stdout}");
    assert!(stdout.contains("PASS: steps 2 match, 0 differ, 0 not compared, 0 skipped; expectations 2 held"), "{stdout}");
}

#[test]
fn steps_built_from_a_skipped_answer_are_skipped_too() {
    let fleet = Fleet::start();
    let scenario = std::env::temp_dir().join(format!("mcpsim-live-dependent-{}.sim", std::process::id()));
    std::fs::write(
        &scenario,
        r#"# Guarantee taught: what depends on a request that was not sent live is not sent either, and is not failed.
use demo
key k1
instance i1 keys k1
instance i2 keys k1
client alice principal alice
let delete_tps = {"workspaceUri": "file:///Users/alice/Documents/Notes", "title": "TPS report"}
send alice -> i1 tools/call {"name": "notes_delete", "arguments": $delete_tps} as round1
crash i1
send alice -> i1 tools/call {"name": "notes_delete", "arguments": $delete_tps} as lost
let lost_state = $lost.result.requestState
answer alice -> i2 decline for round1 state $lost_state as refused
expect refused error -32602
parallel {
  answer alice -> i2 accept {"note_id": "note-7", "confirm": true} for round1 as first
  send alice -> i1 tools/list {} as listed
}
answer alice -> i2 accept {"note_id": "note-7", "confirm": true} for round1 as done
expect done complete
"#,
    )
    .unwrap();
    let (code, stdout, _) = run_with_env(&["run", "--live", &fleet.urls(), scenario.to_str().unwrap()], &[]);
    let _ = std::fs::remove_file(&scenario);
    assert_eq!(code, Some(0), "skips are not failures:\n{stdout}");
    assert!(row(&stdout, 12).contains("SKIPPED: it uses lost_state, which was not sent live"), "{stdout}");
    assert!(stdout.contains("expect refused error -32602: not evaluated: refused was not sent live"), "{stdout}");
    // A race with one runner missing is another race: the whole block is skipped, and what follows is not judged.
    assert!(row(&stdout, 14).contains("SKIPPED: i1 is crashed at this point of the scenario"), "{stdout}");
    assert!(stdout.contains("expect done complete: not evaluated: done is not comparable (after skipped line 14"), "{stdout}");
    assert!(stdout.contains("0 error(s)"), "{stdout}");
}

#[test]
fn a_scenario_that_compares_no_request_is_not_comparable_never_matched() {
    let fleet = Fleet::start();
    // A gateway scenario against a fleet of notes servers: its answers are shown, none is compared, even where
    // both sides happen to refuse alike; it passes, but is counted apart from the scenarios that matched.
    let scenarios: Vec<String> = ["01-lesson-exchange-on-one-instance.sim", "43-gateway-header-body-confusion.sim"]
        .iter()
        .map(|file| format!("{}/scenarios/{file}", env!("CARGO_MANIFEST_DIR")))
        .collect();
    let urls = fleet.urls();
    let mut args = vec!["run", "--live", &urls];
    args.extend(scenarios.iter().map(String::as_str));
    let (code, stdout, stderr) = run_with_env(&args, &[]);
    assert_eq!(code, Some(0), "not comparable is not a failure:\n{stdout}{stderr}");
    assert!(stdout.contains("NOT COMPARABLE (no request was compared: g1 declares a gateway"), "{stdout}");
    assert!(stdout.contains("steps 0 match, 0 differ, 4 not compared"), "{stdout}");
    let gateway_row = stdout.lines().find(|l| l.starts_with("43-gateway-header-body-confusion")).expect("a table row");
    assert!(gateway_row.ends_with("not comparable"), "{gateway_row}");
    assert!(stdout.contains("1 of 2 scenario(s) matched the simulator live; 1 not comparable; 0 step(s) skipped"), "{stdout}");
    assert!(stdout.contains("  43-gateway-header-body-confusion: g1 declares a gateway"), "the reason is listed:\n{stdout}");
}

#[test]
fn a_fleet_that_is_not_running_is_one_error_saying_what_to_start() {
    // Two ports nothing listens on (bound once to find them free, then released).
    let free = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let urls = format!("http://127.0.0.1:{}/mcp,http://127.0.0.1:{}/mcp", free(), free());
    let path = format!("{}/scenarios", env!("CARGO_MANIFEST_DIR"));
    let (code, stdout, stderr) = run_with_env(&["run", "--live", &urls, &path], &[]);
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert_eq!(stderr.matches("nothing answers").count(), 1, "one error, not one per request:\n{stderr}");
    assert_eq!(stderr.matches("Connection refused").count(), 2, "each URL once:\n{stderr}");
    assert!(stderr.contains("mcpsim serve --http 127.0.0.1:") && stderr.contains("--instances 2"), "{stderr}");
    assert!(stdout.is_empty(), "no scenario ran:\n{stdout}");
}

#[test]
fn a_fleet_that_stops_answering_ends_the_run_with_one_error() {
    let fleet = Fleet::start();
    // The second URL accepts exactly one connection (live mode's check that something listens) and then
    // nothing: the first request sent there finds no one, as if the fleet had gone away mid-run.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let once = std::thread::spawn(move || drop(listener.accept()));
    let urls = format!("{},http://127.0.0.1:{port}/mcp", fleet.server.urls[0]);
    let scenarios: Vec<String> = ["02-retry-lands-on-another-instance.sim", "01-lesson-exchange-on-one-instance.sim"]
        .iter()
        .map(|file| format!("{}/scenarios/{file}", env!("CARGO_MANIFEST_DIR")))
        .collect();
    let mut args = vec!["run", "--live", &urls];
    args.extend(scenarios.iter().map(String::as_str));
    let (code, stdout, stderr) = run_with_env(&args, &[]);
    once.join().unwrap();
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    // Round 1 went to the fleet; round 2 found no one: the scenario stops there, the next one is not run.
    let errors: Vec<&str> = stdout.lines().filter(|l| l.starts_with("   ERROR")).collect();
    assert!(errors.len() == 1 && errors[0].contains("line 19") && errors[0].contains("nothing answers there"), "{stdout}");
    assert!(stdout.contains("01-lesson-exchange-on-one-instance: not run: the fleet stopped answering"), "{stdout}");
    assert!(stdout.contains("0 of 2 scenario(s) matched the simulator live; 1 failed; 1 not run"), "{stdout}");
}
