//! The mutant zoo is caught: every unsafe variant breaks a safety property within a bounded number of
//! seeds on the scenario that exposes it, while the real server breaks none on exactly the same seeds.
//! Both halves are asserted together: that is the evidence the checks can fail. The gateway mutants break
//! no notes property; they are caught by an expectation of their gateway scenario, which the real gateway
//! passes on every one of the same seeds. A liveness mutant is run with faults on (clients retry), where the
//! real server must stay live too.

use mcpsim::oracle::check::Property;
use mcpsim::sim::actors::gateway_mutants::GatewayVariant;
use mcpsim::sim::engine::faults::FaultKind;
use mcpsim::sim::explore;
use mcpsim::sim::explore::mutants::{self, MUTANTS};
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
            let faults = mutant.liveness.then(|| explore::fault_plan(&scenario, seed, &FaultKind::ALL));
            let check_statelessness = !mutant.liveness;
            let real = runner::run(
                &scenario,
                &RunOptions {
                    record_transcript: false,
                    faults: faults.clone(),
                    check_statelessness,
                    check_determinism: true,
                    ..RunOptions::seeded(seed)
                },
            );
            assert!(broken(&real).is_empty(), "the real server broke {:?} on {} seed {seed}", broken(&real), mutant.exposed_by);
            if mutant.caught_by_expectation() {
                assert!(real.failures.is_empty(), "the real gateway failed {:?} on {} seed {seed}", real.failures, mutant.exposed_by);
            }
            let server = mutant.server();
            let options = RunOptions {
                record_transcript: false,
                factory: server.factory,
                gateway_variant: server.gateway_variant,
                faults,
                check_statelessness,
                check_determinism: true,
                ..RunOptions::seeded(seed)
            };
            let report = runner::run(&scenario, &options);
            let caught = if mutant.caught_by_expectation() {
                report.failures.iter().any(|failure| failure.kind == FailureKind::Expectation)
            } else if mutant.liveness {
                broken(&report) == BTreeSet::from([Property::Liveness])
            } else {
                !broken(&report).is_empty()
            };
            if caught_at.is_none() && caught {
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
    assert!(MUTANTS.len() >= 16);
    for mutant in MUTANTS {
        assert!(mutants::find(mutant.name).is_some());
        assert!(mutant.mistake.ends_with('.'), "{}", mutant.name);
    }
}

#[test]
fn every_gateway_variant_is_in_the_zoo_under_its_own_name() {
    for variant in GatewayVariant::MUTANTS {
        let mutant = mutants::find(variant.name()).unwrap_or_else(|| panic!("{} is not in the zoo", variant.name()));
        assert!(mutant.caught_by_expectation());
        assert_eq!(mutant.server().gateway_variant, variant);
    }
    assert_eq!(mutants::find("delete-then-claim").unwrap().server().gateway_variant, GatewayVariant::Real);
}
