//! `--ledger DIR` of `mcpsim explore` (replay every recorded failing seed of this scenario, server and faults
//! first) and of `mcpsim merge` (record the merge's first failing runs). The files and their rules are
//! `sim::explore::ledger`'s; this module prints and decides the exit status.

use super::common::{EXIT_FAILED, EXIT_HELD, EXIT_NOT_LIVE, EXIT_UNJUDGED, EXIT_USAGE};
use crate::scenario::Scenario;
use crate::sim::engine::faults::FaultKind;
use crate::sim::explore::ledger::{self, Entry};
use crate::sim::explore::results::{self, BuildIdentity, Record, Verdict};
use crate::sim::explore::{self, SeedOutcome};
use crate::sim::runner::ServerUnderTest;
use std::path::Path;

/// The worse of two exit statuses: a crash (not judged) first, then a finding, then liveness alone.
pub(crate) fn worse(a: u8, b: u8) -> u8 {
    let rank = |code: u8| match code {
        EXIT_USAGE => 4,
        EXIT_UNJUDGED => 3,
        EXIT_FAILED => 2,
        EXIT_NOT_LIVE => 1,
        _ => 0,
    };
    if rank(b) > rank(a) {
        b
    } else {
        a
    }
}

/// Replays every seed the ledger under `dir` recorded for this scenario, server (`label`: `real`, `mutant:NAME`)
/// and faults, printing each one's
/// verdict now, and writes back what it learnt (a seed that passed counts one more build; after `keep` builds in
/// a row it is retired). Returns the status the replays alone earn: a recorded seed failing again is a finding.
pub(crate) fn replay_first(
    dir: &Path,
    (scenario, text): (&Scenario, &str),
    server: &ServerUnderTest,
    label: &str,
    faults: &[FaultKind],
    keep: u64,
) -> u8 {
    let (entries, errors) = match ledger::load(dir) {
        Ok(loaded) => loaded,
        Err(error) => {
            println!("ledger: cannot read {}: {error}; no recorded seed replayed", dir.display());
            return EXIT_UNJUDGED;
        }
    };
    let mut status = EXIT_HELD;
    for error in &errors {
        println!("ledger: skipped {error}");
        status = EXIT_UNJUDGED;
    }
    let mut kinds: Vec<String> = faults.iter().map(|k| k.as_str().to_string()).collect();
    kinds.sort();
    let folder_freshness = entries.iter().map(|e| e.freshness).max().unwrap_or(0) + 1;
    let mine: Vec<Entry> = entries
        .into_iter()
        .filter(|e| {
            let finding = e.finding();
            finding.scenario == scenario.name
                && finding.server == label
                && e.record.run.faults == kinds
                && e.record.run.world == "simulator"
        })
        .collect();
    let with = if kinds.is_empty() { String::new() } else { format!(" with faults {}", kinds.join(",")) };
    println!(
        "ledger: replaying {} recorded failing seed(s) first ({} against {label}{with}, from {})",
        mine.len(),
        scenario.name,
        dir.display()
    );
    let build = BuildIdentity::current();
    let digest = results::digest(text.as_bytes());
    for entry in mine {
        let finding = entry.finding().clone();
        let path = entry.path();
        let (_, outcome) = explore::run_seed_with(scenario, server, finding.seed, faults);
        let verdict = explore::verdict_of(&outcome);
        let recorded = match finding.properties.as_slice() {
            [] => finding.verdict.as_str().to_string(),
            properties => format!("{} ({})", finding.verdict.as_str(), properties.join(", ")),
        };
        let changed = if entry.record.run.scenario_digest == digest { "" } else { "; the scenario's text changed since" };
        let origin = format!("recorded {recorded}, first seen {}, seen by {} build(s){changed}", entry.first_seen.short(), entry.count);
        let failed = verdict.is_some();
        let now = match (&outcome, verdict) {
            (_, None) => "passes now".to_string(),
            (SeedOutcome::Unsafe(failures) | SeedOutcome::NotLive(failures), Some(verdict)) => {
                let names = explore::broken_property_names(failures);
                let what = if names.is_empty() { String::new() } else { format!(" ({})", names.join(", ")) };
                format!("FAILS AGAIN: {}{what}", verdict.as_str())
            }
            (SeedOutcome::Crashed(message), _) => format!("FAILS AGAIN: the simulator crashed: {message}"),
            (SeedOutcome::Held, Some(_)) => unreachable!("a held run has no verdict"),
        };
        println!("  seed {} ({origin}): {now}", finding.seed);
        if failed {
            if let SeedOutcome::Unsafe(failures) | SeedOutcome::NotLive(failures) = &outcome {
                for failure in failures {
                    println!("    {}", failure.to_string().replace('\n', "\n    "));
                }
            }
            println!("    reproduce: {}", finding.reproduce);
            status = worse(status, status_of_verdict(verdict, !faults.is_empty()));
        }
        let after = ledger::replayed(entry, failed, &build, keep, folder_freshness);
        match &after {
            Some(entry) if !failed => println!("    passed on {} build(s) in a row (retired after {keep})", entry.passed_since),
            None => println!("    retired: passed on {keep} builds in a row; {} removed", path.display()),
            Some(_) => {}
        }
        if let Err(error) = ledger::store(dir, &path, after.as_ref()) {
            println!("    ledger: cannot write {}: {error}", dir.join(&path).display());
            status = worse(status, EXIT_UNJUDGED);
        }
    }
    println!();
    status
}

fn status_of_verdict(verdict: Option<Verdict>, faulty: bool) -> u8 {
    match verdict {
        None => EXIT_HELD,
        Some(Verdict::Crashed) => EXIT_UNJUDGED,
        Some(Verdict::NotLive) if faulty => EXIT_NOT_LIVE,
        Some(_) => EXIT_FAILED,
    }
}

/// `merge --ledger DIR`: records the first failing runs of the merged `records` and says what changed.
/// Returns false when the ledger could not be written.
pub(crate) fn record(dir: &Path, records: &[Record], max: usize) -> bool {
    match ledger::record(dir, records, max) {
        Ok((changes, errors)) => {
            for error in errors {
                println!("ledger: left alone {error}");
            }
            println!(
                "ledger {}: {} seed(s) added, {} seen again, {} dropped for fresher ones",
                dir.display(),
                changes.added.len(),
                changes.updated.len(),
                changes.dropped.len()
            );
            for path in &changes.added {
                println!("  added {}", path.display());
            }
            for path in &changes.dropped {
                println!("  dropped {}", path.display());
            }
            true
        }
        Err(error) => {
            eprintln!("mcpsim merge: cannot write the ledger {}: {error}", dir.display());
            false
        }
    }
}
