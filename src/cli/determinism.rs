//! `mcpsim explore --check-determinism[=K]`: K seeds of the range run again in another process (`mcpsim run
//! SCENARIO --seed N --format jsonl …`, the same binary unless `MCPSIM_DETERMINISM_CHILD` names another) and
//! their transcripts compared byte for byte with this process's. Which seeds and where bytes differ are
//! `sim::explore::determinism`'s; this module spawns, waits (bounded) and reports.

use super::common::{EXIT_FAILED, EXIT_HELD, EXIT_NOT_LIVE, EXIT_UNJUDGED};
use crate::scenario::Scenario;
use crate::sim::engine::faults::FaultKind;
use crate::sim::explore::determinism::{self, Difference};
use crate::sim::explore::results::{Finding, Verdict};
use crate::sim::runner::ServerUnderTest;
use std::io::Read;
use std::ops::RangeInclusive;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::Duration;

/// The program run as the other process instead of this binary: another build's `mcpsim`, to check that two
/// builds agree on every transcript (a change that claims to be a refactor), or anything that prints what
/// `mcpsim run … --format jsonl` prints.
pub(crate) const CHILD_ENV: &str = "MCPSIM_DETERMINISM_CHILD";
/// Seconds one other process may take before it is killed and the check reported not made (default 300).
pub(crate) const TIMEOUT_ENV: &str = "MCPSIM_DETERMINISM_TIMEOUT";
const TIMEOUT_DEFAULT_SECS: u64 = 300;
/// How often a running child is looked at.
const POLL: Duration = Duration::from_millis(10);

/// What was explored, as the other process is told it.
pub(crate) struct Explored<'a> {
    /// The SCENARIO argument as given (a file or a library name).
    pub argument: &'a str,
    pub scenario: &'a Scenario,
    pub server: &'a ServerUnderTest,
    pub mutant: Option<&'a str>,
    /// The server as results name it (`real`, `mutant:NAME`).
    pub label: &'a str,
    pub faults: &'a [FaultKind],
}

/// A seed whose two transcripts differ.
pub(crate) struct Disagreement {
    pub seed: u64,
    pub difference: Difference,
}

/// The results record of a disagreement (`"verdict": "nondeterministic"`).
pub(crate) fn finding(explored: &Explored<'_>, disagreement: &Disagreement) -> Finding {
    let seed = disagreement.seed;
    let flags = crate::sim::runner::reproduce_flags(false, explored.faults, explored.mutant);
    let plan = (!explored.faults.is_empty()).then(|| {
        serde_json::to_value(crate::sim::explore::fault_plan(explored.scenario, seed, explored.faults)).expect("a plan serializes")
    });
    Finding {
        scenario: explored.scenario.name.clone(),
        server: explored.label.to_string(),
        seed,
        verdict: Verdict::Nondeterministic,
        properties: Vec::new(),
        deliveries: 0,
        fault_plan: plan,
        failures: vec![format!(
            "seed {seed} ran differently in another process; {}",
            disagreement.difference.describe("this process", "the other")
        )],
        reproduce: format!("mcpsim run {} --seed {seed} --format jsonl{flags}", explored.argument),
    }
}

/// Runs the check on `k` seeds of `seeds` (the first failing seed among them), prints what it found and
/// returns the exploration's exit status `code` raised by it: a disagreement is a finding (1, unless the
/// simulator crashed: 3), a check that could not be made leaves the run not judged (3) if it had held.
pub(crate) fn check_and_report(
    explored: &Explored<'_>,
    seeds: &RangeInclusive<u64>,
    k: u64,
    failing: Option<u64>,
    code: ExitCode,
) -> (ExitCode, Vec<Disagreement>) {
    let (code, disagreements) = check_and_report_status(explored, seeds, k, failing, super::common::status_of(code));
    (ExitCode::from(code), disagreements)
}

fn check_and_report_status(
    explored: &Explored<'_>,
    seeds: &RangeInclusive<u64>,
    k: u64,
    failing: Option<u64>,
    code: u8,
) -> (u8, Vec<Disagreement>) {
    let sample = determinism::sample(seeds, k, failing);
    let program = child_program();
    let shown: Vec<String> = sample.iter().map(u64::to_string).collect();
    println!(
        "\ndeterminism across processes: {} seed(s) ({}) run again by {} and compared byte for byte",
        sample.len(),
        shown.join(", "),
        program.display()
    );
    match check(explored, &program, &sample) {
        Ok(disagreements) if disagreements.is_empty() => {
            println!("  every transcript the same bytes in both processes");
            (code, disagreements)
        }
        Ok(disagreements) => {
            let flags = crate::sim::runner::reproduce_flags(false, explored.faults, explored.mutant);
            for Disagreement { seed, difference } in &disagreements {
                println!(
                    "\nNONDETERMINISTIC: seed {seed} ran differently in another process; {}",
                    difference.describe("this process", "the other")
                );
                println!(
                    "  reproduce: mcpsim run {} --seed {seed} --format jsonl{flags}   (twice, in two processes, and compare)",
                    explored.argument
                );
            }
            let raised = if code == EXIT_UNJUDGED { code } else { EXIT_FAILED };
            (raised, disagreements)
        }
        Err(message) => {
            println!("  NOT CHECKED: {message}");
            let raised = if matches!(code, EXIT_HELD | EXIT_NOT_LIVE) { EXIT_UNJUDGED } else { code };
            (raised, Vec::new())
        }
    }
}

fn child_program() -> std::path::PathBuf {
    match std::env::var_os(CHILD_ENV) {
        Some(program) if !program.is_empty() => program.into(),
        _ => std::env::current_exe().unwrap_or_else(|_| "mcpsim".into()),
    }
}

fn timeout() -> Result<Duration, String> {
    match std::env::var(TIMEOUT_ENV) {
        Err(_) => Ok(Duration::from_secs(TIMEOUT_DEFAULT_SECS)),
        Ok(text) => match text.trim().parse::<f64>() {
            Ok(secs) if secs > 0.0 && secs <= 86_400.0 => Ok(Duration::from_secs_f64(secs)),
            _ => Err(format!("{TIMEOUT_ENV}={text:?} is not a number of seconds between 0 and 86400")),
        },
    }
}

/// Each seed's transcript in this process and in a process of `program`: the seeds whose bytes differ, or why
/// the other process could not be asked.
fn check(explored: &Explored<'_>, program: &std::path::Path, seeds: &[u64]) -> Result<Vec<Disagreement>, String> {
    let timeout = timeout()?;
    let mut disagreements = Vec::new();
    for &seed in seeds {
        let args = child_args(explored, seed);
        let theirs = run_child(program, &args, timeout).map_err(|e| format!("{} {}: {e}", program.display(), args.join(" ")))?;
        let ours = super::run::jsonl_transcript(explored.scenario, seed, explored.server, explored.faults);
        if let Some(difference) = determinism::first_difference(ours.as_bytes(), &theirs) {
            disagreements.push(Disagreement { seed, difference });
        }
    }
    Ok(disagreements)
}

/// `run SCENARIO --seed N --format jsonl [--faults K,…] [--mutant NAME]`.
fn child_args(explored: &Explored<'_>, seed: u64) -> Vec<String> {
    let mut args = vec!["run".into(), explored.argument.into(), "--seed".into(), seed.to_string(), "--format".into(), "jsonl".into()];
    if !explored.faults.is_empty() {
        let kinds: Vec<&str> = explored.faults.iter().map(|k| k.as_str()).collect();
        args.extend(["--faults".into(), kinds.join(",")]);
    }
    if let Some(mutant) = explored.mutant {
        args.extend(["--mutant".into(), mutant.into()]);
    }
    args
}

/// The child's stdout, when it ended within `timeout` with `run`'s status for a run judged (0 held, 1 failed);
/// else what went wrong, with the end of its stderr. A child past its time is killed.
fn run_child(program: &std::path::Path, args: &[String], timeout: Duration) -> Result<Vec<u8>, String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start it: {e}"))?;
    let stdout = reader(&mut child, true);
    let stderr = reader(&mut child, false);
    let mut waited = Duration::ZERO;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if waited >= timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("it did not end within {} s ({TIMEOUT_ENV}); killed", timeout.as_secs_f64()));
            }
            Ok(None) => {
                std::thread::sleep(POLL);
                waited += POLL;
            }
            Err(error) => return Err(format!("cannot wait for it: {error}")),
        }
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    match status.code() {
        Some(0 | 1) => Ok(stdout),
        _ => {
            let text = String::from_utf8_lossy(&stderr);
            let tail: Vec<&str> = text.lines().rev().take(5).collect::<Vec<_>>().into_iter().rev().collect();
            Err(format!("it ended with {status}: {}", tail.join(" / ")))
        }
    }
}

/// A thread reading the child's stdout (or stderr) to its end, so a full pipe never stops the child.
fn reader(child: &mut Child, stdout: bool) -> std::thread::JoinHandle<Vec<u8>> {
    let pipe: Option<Box<dyn Read + Send>> =
        if stdout { child.stdout.take().map(|p| Box::new(p) as _) } else { child.stderr.take().map(|p| Box::new(p) as _) };
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        bytes
    })
}
