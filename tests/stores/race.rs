//! Separate OS processes racing on one store. The parent re-runs this test binary as K children (the ignored
//! `race::child` test), each opening the store itself; every round it creates a note and tells all children at
//! once to accept a confirmation for it. Odd rounds share one nonce (the replay guarantee: one deletion, the
//! rest `AlreadyClaimed`); even rounds give each child its own nonce (the note guarantee: one deletion, the
//! rest `NoteGone` with nothing consumed). Afterwards the database must agree with the answers.

use crate::contract::{claim, deleted_record, note, revision_in, workspace, Opened, FAR_FUTURE_MS};
use mcpsim::testing::ClaimAndDelete;
use mcpsim::testing::ReplayLimits;
use mcpsim::testing::SystemClock;
use mcpsim::testing::{open, StoreSpec};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// The store spec the children open (it may carry a password, so it travels in the environment, not argv).
pub const SPEC_VARIABLE: &str = "MCPSIM_RACE_SPEC";
/// For PostgreSQL: the database inside the server named by the spec.
pub const DATABASE_VARIABLE: &str = "MCPSIM_RACE_DATABASE";
/// Marks the protocol in the child's output (the harness may print `test race::child ... ` before it, same line).
const MARK: &str = "<race> ";
/// Longest wait for one child's answer; a stuck child fails the test instead of hanging it.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

#[tokio::test]
#[ignore = "not a test: a child the process-race tests start, with the store in its environment"]
async fn child() {
    // Run any other way (`--include-ignored`), it has nothing to do: it fails rather than pass having done nothing.
    let Ok(spec_text) = std::env::var(SPEC_VARIABLE) else {
        panic!("race::child runs only as a child of the process-race tests ({SPEC_VARIABLE} is unset); run those instead");
    };
    let mut spec: StoreSpec = spec_text.parse().expect("the parent passes a valid spec");
    if let (Ok(database), StoreSpec::Postgres(target)) = (std::env::var(DATABASE_VARIABLE), &spec) {
        spec = StoreSpec::Postgres(target.with_database(&database));
    }
    let stores = open(&spec, Arc::new(SystemClock), ReplayLimits::default()).await.expect("the child opens the store");
    println!("{MARK}ready");
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await.expect("read a command") {
        // "round <n> <same|distinct> <child index>"
        let words: Vec<&str> = line.split_whitespace().collect();
        let [_, round, mode, index] = words[..] else { panic!("unexpected command {line:?}") };
        let note_id = format!("race-{round}");
        let nonce = if mode == "same" { format!("race-{round}") } else { format!("race-{round}-{index}") };
        // The revision a form would have bound (the directory store's file identity; empty for the databases).
        let revision = revision_in(&stores, &note_id).await;
        let claim = claim(&nonce, FAR_FUTURE_MS, deleted_record(&note_id));
        let outcome = stores.replay.claim_and_delete(claim, &note_id, &revision, &workspace()).await;
        let answer = match outcome {
            Ok(ClaimAndDelete::Deleted(_)) => "deleted".to_string(),
            Ok(ClaimAndDelete::NoteGone) => "gone".to_string(),
            Ok(ClaimAndDelete::NoteOutsideWorkspace) => "outside".to_string(),
            Ok(ClaimAndDelete::Full) => "full".to_string(),
            Ok(ClaimAndDelete::Expired) => "expired".to_string(),
            Ok(ClaimAndDelete::AlreadyClaimed { record }) => format!("claimed {}", record.to_json()),
            Err(error) => format!("error {error}"),
        };
        println!("{MARK}{round} {answer}");
    }
}

struct Racer {
    process: Child,
    /// Dropped (closed) to tell the child to finish.
    input: Option<ChildStdin>,
    output: Lines<BufReader<ChildStdout>>,
}

impl Racer {
    async fn next_answer(&mut self) -> String {
        loop {
            let line = tokio::time::timeout(ANSWER_TIMEOUT, self.output.next_line())
                .await
                .expect("a child answered in time")
                .expect("read a child's output")
                .expect("a child exited early (its stderr is above)");
            if let Some((_, answer)) = line.split_once(MARK) {
                return answer.to_string();
            }
        }
    }
}

/// How a store serializes claims of one nonce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Losers {
    /// A loser waits for the winner's commit (the databases) and hears `deleted`.
    SeeTheRecord,
    /// A loser arriving while the winner's claim is pending hears `in_progress` (the directory store, like the
    /// memory store); one arriving later hears `deleted`.
    MaySeeInProgress,
}

/// Runs `rounds` rounds with `processes` children on the store `parent` has open (with `environment` telling the
/// children how to open it), and checks every answer and the database afterwards.
pub async fn processes_race(parent: &Opened, environment: &[(&str, String)], processes: usize, rounds: usize) {
    processes_race_with(parent, environment, processes, rounds, Losers::SeeTheRecord).await
}

/// [`processes_race`], saying what a losing claimant of one nonce may hear.
pub async fn processes_race_with(parent: &Opened, environment: &[(&str, String)], processes: usize, rounds: usize, losers: Losers) {
    let executable = std::env::current_exe().expect("the test binary's path");
    let mut racers = Vec::new();
    for _ in 0..processes {
        let mut process = Command::new(&executable)
            .args(["race::child", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
            .envs(environment.iter().map(|(name, value)| (*name, value.as_str())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start a child process");
        let input = process.stdin.take().unwrap();
        let output = BufReader::new(process.stdout.take().unwrap()).lines();
        racers.push(Racer { process, input: Some(input), output });
    }
    for racer in &mut racers {
        assert_eq!(racer.next_answer().await, "ready");
    }
    let admin = &parent.stores.admin;
    let nonces_before = admin.nonce_count().await.unwrap();
    let mut winners = Vec::new();
    for round in 0..rounds {
        let note_id = format!("race-{round}");
        admin.upsert(note(&note_id, &format!("file:///w/{note_id}.md"))).await.unwrap();
        let mode = if round % 2 == 0 { "same" } else { "distinct" };
        // Write to every child before reading any answer, so the claims overlap.
        for (index, racer) in racers.iter_mut().enumerate() {
            let input = racer.input.as_mut().unwrap();
            input.write_all(format!("round {round} {mode} {index}\n").as_bytes()).await.unwrap();
            input.flush().await.unwrap();
        }
        let mut answers = Vec::new();
        for racer in &mut racers {
            let answer = racer.next_answer().await;
            let rest = answer.strip_prefix(&format!("{round} ")).unwrap_or_else(|| panic!("round {round}: out of step: {answer}"));
            answers.push(rest.to_string());
        }
        let deleted: Vec<usize> = answers.iter().enumerate().filter(|(_, a)| *a == "deleted").map(|(i, _)| i).collect();
        assert_eq!(deleted.len(), 1, "round {round} ({mode}): exactly one deletion, got {answers:?}");
        let expected_loss = if mode == "same" { format!("claimed {}", deleted_record(&note_id).to_json()) } else { "gone".to_string() };
        let pending = format!("claimed {}", mcpsim::testing::ClaimRecord::InProgress.to_json());
        for (index, answer) in answers.iter().enumerate().filter(|(i, _)| *i != deleted[0]) {
            if losers == Losers::MaySeeInProgress && mode == "same" && answer == &pending {
                continue;
            }
            assert_eq!(answer, &expected_loss, "round {round} ({mode}): child {index}");
        }
        let winner_nonce = if mode == "same" { note_id.clone() } else { format!("{note_id}-{}", deleted[0]) };
        winners.push((note_id, winner_nonce));
    }
    for racer in &mut racers {
        drop(racer.input.take());
        let status = tokio::time::timeout(ANSWER_TIMEOUT, racer.process.wait()).await.expect("a child exits").unwrap();
        assert!(status.success(), "a child failed: {status}");
    }
    // The database agrees: every race note is gone, exactly one nonce per round is held, each with its record.
    let remaining: Vec<String> = admin.list().await.unwrap().into_iter().map(|n| n.id).filter(|id| id.starts_with("race-")).collect();
    assert!(remaining.is_empty(), "race notes left behind: {remaining:?}");
    assert_eq!(admin.nonce_count().await.unwrap(), nonces_before + rounds as u64);
    for (note_id, nonce) in winners {
        assert_eq!(admin.nonce_record(&nonce).await.unwrap(), Some(deleted_record(&note_id)), "nonce {nonce}");
    }
}
