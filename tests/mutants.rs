//! The mutant zoo is caught: every unsafe variant breaks a safety property within a bounded number of
//! seeds on the scenario that exposes it, while the real server breaks none on exactly the same seeds.
//! Both halves are asserted together: that is the evidence the checks can fail.

use mcpsim::sim::check::Property;
use mcpsim::sim::mutants::{self, MUTANTS};
use mcpsim::sim::runner::{self, FailureKind, RunOptions};
use std::collections::BTreeSet;

/// Seeds tried per mutant; each must be caught within them.
const SEEDS_MAX: u64 = 30;

fn broken(report: &runner::RunReport) -> BTreeSet<Property> {
    report
        .failures
        .iter()
        .filter_map(|failure| match failure.kind {
            FailureKind::Property(property) => Some(property),
            _ => None,
        })
        .collect()
}

#[test]
fn every_mutant_is_caught_and_the_real_server_is_clean_on_the_same_seeds() {
    for mutant in MUTANTS {
        let scenario = mutant.scenario();
        let mut caught_at = None;
        for seed in 1..=SEEDS_MAX {
            let real = runner::run(&scenario, &RunOptions { record_transcript: false, ..RunOptions::seeded(seed) });
            assert!(broken(&real).is_empty(), "the real server broke {:?} on {} seed {seed}", broken(&real), mutant.exposed_by);
            let options = RunOptions { record_transcript: false, factory: mutant.factory(), ..RunOptions::seeded(seed) };
            if caught_at.is_none() && !broken(&runner::run(&scenario, &options)).is_empty() {
                caught_at = Some(seed);
            }
        }
        assert!(caught_at.is_some(), "mutant {} survived {SEEDS_MAX} seeds of {}", mutant.name, mutant.exposed_by);
    }
}

#[test]
fn mutant_names_are_unique_and_findable() {
    let names: BTreeSet<&str> = MUTANTS.iter().map(|m| m.name).collect();
    assert_eq!(names.len(), MUTANTS.len());
    assert!(MUTANTS.len() >= 13);
    for mutant in MUTANTS {
        assert!(mutants::find(mutant.name).is_some());
        assert!(mutant.mistake.ends_with('.'), "{}", mutant.name);
    }
}
