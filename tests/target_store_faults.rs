//! Store faults and admin changes against real fleets, from the outside: `mcpsim run --target` with the
//! lessons `12-item-deleted-after-the-form` and `13-store-cut-between-claim-and-effect` against mcpsim's own
//! fleets (SQLite: the write lock; PostgreSQL: the proxy's cut, at every statement of the accept), a target
//! without the tables skipping them by name, and typos in `[store]`/`[admin]` refused with the file and line.
//! The proxy's own closing on drop and on panic (port, connections, threads) is tested beside it, in
//! `src/target/store_proxy.rs`; here, every proxy port a run opened refuses once the run is over.
//!
//! Every mcpsim run here is bounded ([`RUN_SECONDS_MAX`]) and killed if it overstays.

mod common;

use common::child::{repo, Ran};
use std::path::PathBuf;

/// Longest one run may take here (a SQLite lock lesson waits out the server's 5 s busy timeout per play).
const RUN_SECONDS_MAX: u64 = 180;
const POSTGRES: &str = "MCPSIM_TEST_POSTGRES_URL";

fn run(args: &[&str]) -> Ran {
    common::child::run_mcpsim(args, RUN_SECONDS_MAX)
}

/// A scratch directory of this test, fresh.
fn scratch(name: &str) -> PathBuf {
    common::child::scratch("store-faults", name)
}

/// The answers the transcript shows, in order (`← tN user: {…}`), as JSON.
fn answers(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("← t"))
        .filter_map(|rest| rest.split_once(": ").and_then(|(_, json)| serde_json::from_str(json).ok()))
        .collect()
}

fn succeeded(answer: &serde_json::Value) -> bool {
    answer.pointer("/result/resultType").and_then(|v| v.as_str()) == Some("complete")
        && answer.pointer("/result/isError").and_then(|v| v.as_bool()) != Some(true)
}

#[test]
fn admin_delete_against_the_stdio_fleet_removes_the_item_and_the_accept_does_not_succeed() {
    let ran = run(&["run", "--target", "targets/mcpsim-stdio.toml", "12-item-deleted-after-the-form", "--transcript"]);
    assert_eq!(ran.status, 0, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("admin delete note-7: the target file's [admin] delete command exited 0"), "{}", ran.stdout);
    // The server's own deletions only: the probe's count before is lowered by the admin's one.
    assert!(ran.stdout.contains("effects: the probe read 3 before and 3 after"), "{}", ran.stdout);
    let answers = answers(&ran.stdout);
    let too_late = answers.last().expect("the accept's answer");
    assert!(!succeeded(too_late), "the accept on a deleted item succeeded: {too_late}");
    assert_eq!(too_late.pointer("/error/data/reason").and_then(|v| v.as_str()), Some("note_gone"), "{too_late}");
}

#[test]
fn the_sqlite_lock_lesson_passes_on_the_stdio_fleet_and_the_locked_accept_changes_nothing() {
    let ran = run(&["run", "--target", "targets/mcpsim-stdio.toml", "13-store-cut-between-claim-and-effect", "--transcript"]);
    assert_eq!(ran.status, 0, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("store write lock taken at request 2"), "{}", ran.stdout);
    assert!(ran.stdout.contains("store reachable again"), "{}", ran.stdout);
    let answers = answers(&ran.stdout);
    let (cut, retry) = (&answers[answers.len() - 2], &answers[answers.len() - 1]);
    // Under the lock the claim cannot start: the accept is refused as the store being unavailable, nothing
    // happened, and the retry (the lock released) is the one execution.
    assert_eq!(cut.pointer("/error/data/reason").and_then(|v| v.as_str()), Some("store_unavailable"), "{cut}");
    assert!(succeeded(retry), "{retry}");
    assert!(ran.stdout.contains("effects: the probe read 4 before and 3 after"), "{}", ran.stdout);
}

#[test]
fn a_target_without_the_tables_skips_the_lessons_naming_the_key() {
    let dir = scratch("no-tables");
    let text = std::fs::read_to_string(repo().join("targets/mcpsim-stdio.toml")).unwrap();
    let without = text.split("\n# The store mcpsim can lock").next().unwrap().to_string();
    let file = dir.join("bare.toml");
    std::fs::write(&file, without).unwrap();
    let file = file.to_str().unwrap();
    let ran = run(&["run", "--target", file, "12-item-deleted-after-the-form", "13-store-cut-between-claim-and-effect"]);
    // Every scenario skipped: nothing was judged.
    assert_eq!(ran.status, 3, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("it needs {{item}}, which the target file does not give ([admin] item)"), "{}", ran.stdout);
    assert!(ran.stdout.contains("(a store mcpsim can cut or lock), which the target file does not give ([store])"), "{}", ran.stdout);
    let with_item_only = std::fs::read_to_string(file).unwrap() + "\n[admin]\nitem = \"note-7\"\n";
    std::fs::write(file, with_item_only).unwrap();
    let ran = run(&["run", "--target", file, "12-item-deleted-after-the-form"]);
    assert!(ran.stdout.contains("which the target file does not give ([admin] delete)"), "{}", ran.stdout);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn typos_in_the_store_and_admin_tables_are_refused_with_the_file_and_the_line() {
    let dir = scratch("typos");
    let text = std::fs::read_to_string(repo().join("targets/mcpsim-stdio.toml")).unwrap();
    for (typo, key, line_of) in [
        (text.replace("path = \"{data_dir}/notes.db\"", "paht = \"{data_dir}/notes.db\""), "paht", "paht ="),
        (text.replace("item = \"note-7\"", "itme = \"note-7\""), "itme", "itme ="),
        (text.replace("delete = [\"python3\"", "delet = [\"python3\""), "delet", "delet ="),
    ] {
        let file = dir.join("typo.toml");
        std::fs::write(&file, &typo).unwrap();
        let line = typo.lines().position(|l| l.starts_with(line_of)).unwrap() + 1;
        let ran = run(&["run", "--target", file.to_str().unwrap()]);
        assert_eq!(ran.status, 2, "{}\n{}", ran.stdout, ran.stderr);
        let said = format!("{}{}", ran.stdout, ran.stderr);
        assert!(said.contains(&format!("{}: ", file.display())), "{said}");
        assert!(said.contains(&format!("line {line}")), "{key}: {said}");
        assert!(said.contains(&format!("unknown field `{key}`")), "{said}");
    }
    let file = dir.join("kind.toml");
    std::fs::write(&file, text.replace("kind = \"sqlite\"", "kind = \"postgres\"")).unwrap();
    let ran = run(&["run", "--target", file.to_str().unwrap()]);
    assert_eq!(ran.status, 2, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stderr.contains("needs exactly one of upstream"), "{}", ran.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The proxy ports a run's `--transcript` names ("store proxy on 127.0.0.1:PORT").
fn proxy_ports(stdout: &str) -> Vec<u16> {
    stdout
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("store proxy on 127.0.0.1:"))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .collect()
}

#[test]
#[ignore = "needs PostgreSQL: .ci/postgres.sh"]
fn a_cut_at_every_statement_of_the_accept_leaves_at_most_one_deletion_and_an_honest_retry() {
    assert!(std::env::var(POSTGRES).is_ok(), "{POSTGRES} is not set: eval \"$(bash .ci/postgres.sh start)\"");
    let dir = scratch("postgres");
    let lesson = std::fs::read_to_string(repo().join("targets/scenarios/13-store-cut-between-claim-and-effect.sim")).unwrap();
    let (mut before_commit, mut after_commit) = (0, 0);
    for statements in 0..=6 {
        let file = dir.join(format!("cut-after-{statements}.sim"));
        std::fs::write(&file, lesson.replace("store cut after 2 statements", &format!("store cut after {statements} statements"))).unwrap();
        let ran = run(&["run", "--target", "targets/mcpsim-postgres.toml", file.to_str().unwrap(), "--transcript", "--reruns", "0"]);
        let said = format!("cut after {statements}:\n{}\n{}", ran.stdout, ran.stderr);
        let answers = answers(&ran.stdout);
        let (cut, retry) = (&answers[answers.len() - 2], &answers[answers.len() - 1]);
        // The accept is answered either way; exactly one of it and the retry succeeds, and the probe sees one
        // deletion: the claim and the delete happened together, once, or not at all before the retry.
        assert_eq!([cut, retry].iter().filter(|a| succeeded(a)).count(), 1, "{said}");
        assert!(ran.stdout.contains("effects: the probe read 4 before and 3 after"), "{said}");
        if succeeded(cut) {
            after_commit += 1;
            assert!(retry.get("error").is_some() || retry.pointer("/result/isError") == Some(&true.into()), "{said}");
        } else {
            before_commit += 1;
            assert_eq!(cut.pointer("/error/data/reason").and_then(|v| v.as_str()), Some("store_unavailable"), "{said}");
        }
        let fired = ran.stdout.contains("connection(s) were cut before the next one");
        let never = ran.stdout.contains("never fired");
        assert!(fired != never, "a cut either happened or is reported as never fired: {said}");
        assert_eq!(ran.status, if never { 1 } else { 0 }, "{said}");
        for port in proxy_ports(&ran.stdout) {
            assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err(), "proxy port {port} still listens: {said}");
        }
    }
    // The cut fell inside the accept's transaction at least once (the lesson's point), and the count ran past the
    // accept at least once (reported as never fired, the accept then the one execution).
    assert!(before_commit >= 1 && after_commit >= 1, "{before_commit} cut before the commit, {after_commit} after");
    let _ = std::fs::remove_dir_all(&dir);
}
