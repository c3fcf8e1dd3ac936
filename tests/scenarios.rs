//! The scenario library as a regression suite: every scenario's transcript is a reviewed snapshot, every
//! scenario holds under many interleavings, runs are deterministic, and parallel blocks really interleave.

use mcpsim::testing::runner::{self, RunOptions, RunReport, SchedulerChoice};
use mcpsim::testing::Outcome;
use mcpsim::Scenario;
use mcpsim::{testing::library, Format};
use std::collections::BTreeSet;
use std::path::Path;

/// Seeds every scenario must survive in `every_scenario_holds_across_many_seeds`.
const SEEDS_PER_SCENARIO: u64 = 100;

fn load(file: &str) -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(file.ends_with(".sim"), "scenario files end in .sim");
    mcpsim::parse(&format!("scenarios/{file}"), &text).unwrap_or_else(|e| panic!("{e}"))
}

fn failures(report: &RunReport) -> String {
    report.failures.iter().map(|f| f.to_string()).collect::<Vec<_>>().join("\n")
}

/// Runs the scenario at seed 1 and compares its text transcript with the reviewed snapshot.
fn check_snapshot(file: &str) {
    let scenario = load(file);
    let report = runner::run(&scenario, &RunOptions::seeded(1));
    assert!(report.passed(), "{file} failed at seed 1:\n{}", failures(&report));
    insta::with_settings!({ snapshot_path => "../snapshots", prepend_module_to_snapshot => false, omit_expression => true }, {
        insta::assert_snapshot!(scenario.name.clone(), report.transcript.to_text());
    });
}

macro_rules! scenario_snapshots {
    ($($test:ident => $file:literal,)*) => {
        $(
            #[test]
            fn $test() {
                check_snapshot($file);
            }
        )*
        const FILES: &[&str] = &[$($file),*];
    };
}

scenario_snapshots! {
    lesson_exchange_on_one_instance => "01-lesson-exchange-on-one-instance.sim",
    retry_lands_on_another_instance => "02-retry-lands-on-another-instance.sim",
    retry_after_the_first_instance_crashed => "03-retry-after-the-first-instance-crashed.sim",
    accepts_race_for_one_note => "04-accepts-race-for-one-note.sim",
    accepts_race_for_different_candidates => "05-accepts-race-for-different-candidates.sim",
    note_deleted_after_the_form_was_shown => "06-note-deleted-after-the-form-was-shown.sim",
    note_moved_out_after_the_form_was_shown => "07-note-moved-out-after-the-form-was-shown.sim",
    decline_then_replayed_accept => "08-decline-then-replayed-accept.sim",
    cancel_then_accept_elsewhere => "09-cancel-then-accept-elsewhere.sim",
    state_expires_between_rounds => "10-state-expires-between-rounds.sim",
    tampered_state => "11-tampered-state.sim",
    changed_title => "12-changed-title.sim",
    another_principal_replays_the_state => "13-another-principal-replays-the-state.sim",
    key_rotation_between_rounds => "14-key-rotation-between-rounds.sim",
    misconfigured_instance_key => "15-misconfigured-instance-key.sim",
    crash_between_claim_and_delete => "16-crash-between-claim-and-delete.sim",
    full_replay_store_fails_closed => "17-full-replay-store-fails-closed.sim",
    url_only_client => "18-url-only-client.sim",
    tools_call_as_notification => "19-tools-call-as-notification.sim",
    prefix_confusion_workspace => "20-prefix-confusion-workspace.sim",
    encoded_traversal_workspace => "21-encoded-traversal-workspace.sim",
    admin_changes_between_rounds => "22-admin-changes-between-rounds.sim",
    clock_behind_beyond_the_grace => "23-clock-behind-beyond-the-grace.sim",
    an_attack_battery_across_three_instances => "24-an-attack-battery-across-three-instances.sim",
    crash_of_one_racer_at_the_store => "25-crash-of-one-racer-at-the-store.sim",
    store_outage_between_claim_and_delete => "26-store-outage-between-claim-and-delete.sim",
    one_principal_fills_its_replay_share => "27-one-principal-fills-its-replay-share.sim",
    note_file_swapped_after_the_form => "28-note-file-swapped-after-the-form.sim",
    note_file_swapped_during_the_delete => "29-note-file-swapped-during-the-delete.sim",
    url_mode_publish_completed_on_the_page => "30-url-mode-publish-completed-on-the-page.sim",
    url_mode_completed_by_the_wrong_user => "31-url-mode-completed-by-the-wrong-user.sim",
    url_mode_tampered_url => "32-url-mode-tampered-url.sim",
    url_mode_completion_seen_by_another_instance => "33-url-mode-completion-seen-by-another-instance.sim",
    url_mode_page_completed_after_expiry => "34-url-mode-page-completed-after-expiry.sim",
    url_mode_two_browsers_race_one_url => "35-url-mode-two-browsers-race-one-url.sim",
    url_mode_form_only_client => "36-url-mode-form-only-client.sim",
    gateway_poisoned_description => "40-gateway-poisoned-description.sim",
    gateway_rug_pull_between_two_listings => "41-gateway-rug-pull-between-two-listings.sim",
    gateway_shadowed_search => "42-gateway-shadowed-search.sim",
    gateway_header_body_confusion => "43-gateway-header-body-confusion.sim",
    gateway_capability_is_not_permission => "44-gateway-capability-is-not-permission.sim",
    gateway_tampered_or_retargeted_state => "45-gateway-tampered-or-retargeted-state.sim",
    gateway_familiar_name_unknown_publisher => "46-gateway-familiar-name-unknown-publisher.sim",
    gateways_race_one_export_confirmation => "47-gateways-race-one-export-confirmation.sim",
    gateway_crash_between_claim_and_export => "48-gateway-crash-between-claim-and-export.sim",
    gateway_crash_during_export => "49-gateway-crash-during-export.sim",
    gateway_quota_follows_the_principal => "50-gateway-quota-follows-the-principal.sim",
    gateway_decline_ends_the_export_on_every_instance => "51-gateway-decline-ends-the-export-on-every-instance.sim",
    gateway_revocation_reaches_the_backends => "52-gateway-revocation-reaches-the-backends.sim",
    gateway_body_names_the_tool_even_when_both_would_run => "53-gateway-body-names-the-tool-even-when-both-would-run.sim",
    gateway_an_operators_week => "54-gateway-an-operators-week.sim",
    legacy_and_modern_clients_share_one_deployment => "60-legacy-and-modern-clients-share-one-deployment.sim",
    legacy_roots_name_another_principals_workspace => "61-legacy-roots-name-another-principals-workspace.sim",
    legacy_confirmation_races_a_modern_one => "62-legacy-confirmation-races-a-modern-one.sim",
    legacy_session_on_another_instance => "63-legacy-session-on-another-instance.sim",
    legacy_session_capabilities_stay_in_the_session => "64-legacy-session-capabilities-stay-in-the-session.sim",
    legacy_host_behind_a_modern_gateway => "65-legacy-host-behind-a-modern-gateway.sim",
}

#[test]
fn every_scenario_file_has_a_snapshot_test_and_is_embedded() {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let mut on_disk: Vec<String> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".sim"))
        .collect();
    on_disk.sort();
    assert_eq!(FILES, on_disk.as_slice(), "add a scenario_snapshots! entry for every file in scenarios/");
    let embedded: Vec<&str> = library::SCENARIOS.iter().map(|(name, _)| *name).collect();
    assert_eq!(FILES, embedded.as_slice(), "sim/library.rs must embed exactly the files in scenarios/");
    for (name, text) in library::SCENARIOS {
        assert_eq!(*text, std::fs::read_to_string(folder.join(name)).unwrap(), "{name} is embedded stale");
    }
}

#[test]
fn every_scenario_opens_with_the_guarantee_it_teaches() {
    for file in FILES {
        let scenario = load(file);
        assert!(scenario.summary.len() >= 3, "{file}: open with a comment block saying what it teaches");
        let comment = scenario.summary.join(" ");
        assert!(comment.contains("Guarantee taught:"), "{file}: the opening comment should name the guarantee taught");
    }
}

#[test]
fn every_scenario_holds_across_many_seeds() {
    let mut broken = Vec::new();
    for file in FILES {
        let scenario = load(file);
        for seed in 1..=SEEDS_PER_SCENARIO {
            let mut options = RunOptions::seeded(seed);
            options.record_transcript = false;
            let report = runner::run(&scenario, &options);
            if !report.passed() {
                broken.push(format!("{file} seed {seed}:\n{}", failures(&report)));
                break;
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n\n"));
}

#[test]
fn the_scripted_scheduler_passes_every_scenario_too() {
    for file in FILES {
        let scenario = load(file);
        let options = RunOptions { scheduler: SchedulerChoice::Scripted, ..RunOptions::seeded(1) };
        let report = runner::run(&scenario, &options);
        assert!(report.passed(), "{file}:\n{}", failures(&report));
    }
}

#[test]
fn same_scenario_and_seed_give_byte_identical_transcripts() {
    for file in FILES {
        let scenario = load(file);
        for seed in [1, 42] {
            let first = runner::run(&scenario, &RunOptions::seeded(seed));
            let second = runner::run(&scenario, &RunOptions::seeded(seed));
            for format in [Format::Text, Format::Jsonl, Format::Mermaid] {
                assert_eq!(first.transcript.render(format), second.transcript.render(format), "{file} seed {seed} {format:?}");
            }
            assert_eq!(first.decisions, second.decisions);
        }
    }
}

#[test]
fn a_recorded_decision_log_replays_the_same_run() {
    let scenario = load("05-accepts-race-for-different-candidates.sim");
    for seed in 1..=20 {
        let original = runner::run(&scenario, &RunOptions::seeded(seed));
        let replay = RunOptions { scheduler: SchedulerChoice::Replay(original.decisions.clone()), ..RunOptions::seeded(seed) };
        let replayed = runner::run(&scenario, &replay);
        assert!(replayed.passed(), "{}", failures(&replayed));
        assert_eq!(original.transcript.entries, replayed.transcript.entries, "seed {seed}");
    }
}

/// Which of the named answers completed, per seed.
fn winner(report: &RunReport, names: [&str; 2]) -> String {
    let completed: Vec<&str> = names
        .into_iter()
        .filter(|name| {
            report.history.operations().iter().any(|op| {
                op.name.as_deref() == Some(*name)
                    && matches!(&op.outcome, Outcome::Answered { value, .. } if value.pointer("/result/resultType").is_some())
            })
        })
        .collect();
    completed.join("+")
}

#[test]
fn parallel_blocks_interleave_differently_across_seeds() {
    for (file, names) in [
        ("04-accepts-race-for-one-note.sim", ["first", "second"]),
        ("05-accepts-race-for-different-candidates.sim", ["picks_2023", "picks_2024"]),
    ] {
        let scenario = load(file);
        let mut orders = BTreeSet::new();
        let mut winners = BTreeSet::new();
        let mut in_progress_seen = false;
        for seed in 1..=SEEDS_PER_SCENARIO {
            let report = runner::run(&scenario, &RunOptions::seeded(seed));
            let order: Vec<String> = report
                .transcript
                .entries
                .iter()
                .filter_map(|entry| match entry {
                    mcpsim::testing::Entry::Delivery { from, to, message, .. } => {
                        Some(format!("{}>{}:{}", report.transcript.actors[*from], report.transcript.actors[*to], message.summary()))
                    }
                    _ => None,
                })
                .collect();
            orders.insert(order);
            winners.insert(winner(&report, names));
            in_progress_seen |= report.transcript.to_jsonl().contains(r#""reason":"claim_in_progress""#);
        }
        assert!(orders.len() > 10, "{file}: only {} distinct delivery orders in {SEEDS_PER_SCENARIO} seeds", orders.len());
        let expected: BTreeSet<String> = names.iter().map(|n| n.to_string()).collect();
        assert_eq!(winners, expected, "{file}: each racer should win under some seed, and never both");
        assert!(in_progress_seen, "{file}: some seed should deliver the second claim while the first is still pending");
    }
}

#[test]
fn raw_messages_are_sent_verbatim_and_transcribed_exactly() {
    let text = "use demo\ninstance i1\nclient alice principal alice\n\
        send alice -> i1 raw \"{ \\\"jsonrpc\\\": \\\"2.0\\\", \\\"id\\\": 7, \\\"method\\\": \\\"tools/list\\\" }\" as no_meta\n\
        expect no_meta error -32602 meta_invalid\n\
        send alice -> i1 raw \"{not json\" as garbage\n\
        expect garbage error -32700\n\
        expect garbage id = null\n";
    let scenario = mcpsim::parse("inline", text).unwrap();
    let report = runner::run(&scenario, &RunOptions::seeded(1));
    assert!(report.passed(), "{}", failures(&report));
    let jsonl = report.transcript.to_jsonl();
    assert!(jsonl.contains(r#""bytes":"{ \"jsonrpc\": \"2.0\", \"id\": 7, \"method\": \"tools/list\" }""#), "{jsonl}");
    assert!(jsonl.contains(r#""bytes":"{not json""#), "{jsonl}");
    assert!(report.transcript.to_text().contains(r#"request  "{ \"jsonrpc\": \"2.0\", \"id\": 7, \"method\": \"tools/list\" }""#));
}

#[test]
fn routing_headers_reach_every_kind_of_instance_and_are_checked_against_the_body() {
    // Notes instances get the client's headers as over HTTP; without `headers`, none, as over stdio.
    let text = "use demo\ninstance i1\ngateway g1\nclient alice principal alice\n\
        send alice -> i1 tools/list {} headers {\"MCP-Protocol-Version\": \"2026-07-28\", \"Mcp-Method\": \"tools/call\"} as notes_mismatch\n\
        expect notes_mismatch error -32020\n\
        send alice -> i1 tools/list {} headers {\"mcp-protocol-version\": \"2026-07-28\", \"mcp-method\": \"tools/list\"} as notes_agree\n\
        expect notes_agree complete\n\
        send alice -> i1 tools/list {} as no_headers\n\
        expect no_headers complete\n\
        send alice -> g1 tools/list {} headers {\"MCP-Protocol-Version\": \"2025-06-18\", \"Mcp-Method\": \"tools/list\"} as gateway_version\n\
        expect gateway_version error -32020\n";
    let scenario = mcpsim::parse("inline", text).unwrap();
    let report = runner::run(&scenario, &RunOptions::seeded(1));
    assert!(report.passed(), "{}", failures(&report));
    let bad = "use demo\ngateway g1\nclient alice principal alice\nsend alice -> g1 tools/list {} headers {\"Host\": \"x\"}\n";
    let report = runner::run(&mcpsim::parse("inline", bad).unwrap(), &RunOptions::seeded(1));
    let failure = report.failures.first().expect("an unknown header is a step failure");
    assert_eq!(failure.kind, runner::FailureKind::Step);
    assert!(failure.message.contains("not a routing header"), "{}", failure.message);
}

#[test]
fn a_client_built_request_over_the_size_bound_is_refused_with_its_exact_size() {
    // The simulated network carries a client's request as the value it built; the size bound still applies
    // to the bytes that value is, as it does over a transport. A request a few bytes under it is served.
    let bound = mcpsim::testing::MESSAGE_BYTES_MAX;
    // `$big` twice in one request: a scenario file is itself bounded at 1 MiB. Every control character is six
    // bytes on the wire (`\u0001`), the worst case of the simulator's cheap bound on a request's size.
    let scenario = |characters: usize| {
        format!(
            "use demo\ninstance i1\nclient alice principal alice\nlet big = \"{}\"\n\
             send alice -> i1 tools/call {{\"name\": \"notes_delete\", \"arguments\": {{\"title\": $big, \"extra\": $big, \"x\": \"\\u0001\\u0001\"}}}} as over\n\
             send alice -> i1 tools/call {{\"name\": \"notes_delete\", \"arguments\": {{\"title\": $big, \"extra\": $big}}}} as under\n",
            "\\u0001".repeat(characters)
        )
    };
    let run = |text: &str| {
        let options = RunOptions { check_statelessness: false, ..RunOptions::seeded(1) };
        runner::run(&mcpsim::parse("inline", text).unwrap(), &options)
    };
    let size = |report: &RunReport, index: usize| report.history.operations()[index].request_value.as_deref().unwrap().to_string().len();
    let empty = size(&run(&scenario(0)), 1);
    let characters = (bound - empty) / 12;
    let text = scenario(characters) + "expect over error -32600 payload_too_large\nexpect under error -32602 arguments_invalid\n";
    let report = run(&text);
    assert!(report.passed(), "{}", failures(&report));
    let (over, under) = (size(&report, 0), size(&report, 1));
    assert!(under <= bound && over > bound, "{under} and {over} straddle {bound}");
    let message = report.history.operations()[0].response().unwrap()["error"]["message"].as_str().unwrap().to_string();
    assert!(message.contains(&format!("message of {over} bytes")), "{message}");
}

#[test]
fn a_wrong_consumed_count_lists_the_records_it_counted() {
    // The count is taken without reading the records; they are written out only when it is not the one expected.
    let text = "key k1\ninstance i1 keys k1\ninstance i2 keys k1\nprincipal alice workspaces \"file:///w\"\nclient alice principal alice\n\
                note n0 title \"report\" uri \"file:///w/n0.md\"\n\
                send alice -> i1 tools/call {\"name\": \"notes_delete\", \"arguments\": {\"workspaceUri\": \"file:///w\", \"title\": \"report\"}}\n\
                answer alice -> i2 accept {\"note_id\": \"n0\", \"confirm\": true} as done\n\
                expect consumed count 1\nexpect consumed count 2\n";
    let report = runner::run(&mcpsim::parse("inline", text).unwrap(), &RunOptions::seeded(1));
    let failed = failures(&report);
    assert_eq!(report.failures.len(), 1, "only the wrong count fails: {failed}");
    assert!(failed.contains(r#"expected 2 consumed nonces, found 1: {"noteId":"n0","outcome":"deleted"}"#), "{failed}");
}

/// A snapshot that no longer matches makes insta's assertion fail, and CI's `.ci/snapshot-review.sh`, given
/// that `cargo test` output, names the snapshot and prints the review recipe README.md shows; given a failure
/// that is not a snapshot's, it prints nothing. The failing assertion runs in a child process of this test
/// binary with `INSTA_UPDATE=no`, so the test means the same under `INSTA_UPDATE=always` (which would accept it).
#[test]
fn a_failed_snapshot_gets_the_review_recipe_from_ci() {
    let scenario = load("01-lesson-exchange-on-one-instance.sim");
    if let Ok(dir) = std::env::var("MCPSIM_SNAPSHOT_REVIEW_CHILD") {
        let transcript = runner::run(&scenario, &RunOptions::seeded(1)).transcript.to_text();
        insta::with_settings!({ snapshot_path => dir, prepend_module_to_snapshot => false, omit_expression => true }, {
            insta::assert_snapshot!(scenario.name.clone(), transcript);
        });
        return;
    }
    let dir = std::env::temp_dir().join(format!("mcpsim-snapshot-review-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The reviewed snapshot with one byte changed, as after editing a message.
    let reviewed = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("snapshots").join(format!("{}.snap", scenario.name)));
    let changed = reviewed.unwrap().replacen("notes_delete", "notes_dElete", 1);
    std::fs::write(dir.join(format!("{}.snap", scenario.name)), changed).unwrap();
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "a_failed_snapshot_gets_the_review_recipe_from_ci", "--test-threads", "1"])
        .env("MCPSIM_SNAPSHOT_REVIEW_CHILD", &dir)
        .env("INSTA_UPDATE", "no")
        .output()
        .unwrap();
    let log = format!("{}{}", String::from_utf8_lossy(&child.stdout), String::from_utf8_lossy(&child.stderr));
    assert!(!child.status.success(), "the changed snapshot fails:\n{log}");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/snapshot-review.sh");
    let review = |log: &str| {
        let path = dir.join("cargo-test.log");
        std::fs::write(&path, log).unwrap();
        let output = std::process::Command::new("bash").arg(&script).arg(&path).output().unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).unwrap()
    };
    let recipe = review(&log);
    for expected in [
        "1 snapshot(s) changed: '01-lesson-exchange-on-one-instance'",
        "cargo test --no-fail-fast",
        "INSTA_UPDATE=always cargo test --test scenarios --test demo",
        "git diff snapshots/",
        "cargo insta review",
    ] {
        assert!(recipe.contains(expected), "{expected:?} missing from:\n{recipe}\n(cargo test said: {log})");
    }
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    assert!(
        readme.contains("### When a snapshot test fails") && readme.contains("INSTA_UPDATE=always cargo test --test scenarios --test demo")
    );
    assert_eq!(review("test x ... FAILED\nassertion `left == right` failed\n"), "", "no recipe for other failures");
    let _ = std::fs::remove_dir_all(&dir);
}
