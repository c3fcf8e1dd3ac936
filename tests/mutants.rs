//! The mutant zoo is caught: every unsafe variant breaks a safety property within a bounded number of
//! seeds on the scenario that exposes it, and again on a library scenario written for another lesson
//! (`also_caught_by`), while the real server breaks none on exactly the same seeds. Both halves are asserted
//! together: that is the evidence the checks can fail, and that the properties (not one tailored scenario)
//! are what catch each mistake. A liveness mutant is run with faults on (clients retry), where the real
//! server must stay live too. The table in `docs/exploring.md` is this test's output, kept in step by it.

use mcpsim::testing::explore;
use mcpsim::testing::library;
use mcpsim::testing::mutants::{self, Mutant, MUTANTS};
use mcpsim::testing::runner::{self, FailureKind, RunOptions};
use mcpsim::testing::GatewayVariant;
use mcpsim::FaultKind;
use mcpsim::Property;
use mcpsim::Scenario;
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

/// Runs `mutant` and the real server on seeds 1, 2, … of `scenario` (all `SEEDS_MAX` of them, or up to the
/// first catch), asserting the real server clean on every seed run; returns the first seed that caught the
/// mutant and the properties it broke there.
fn hunt(mutant: &Mutant, scenario: &Scenario, every_seed: bool) -> Option<(u64, BTreeSet<Property>)> {
    let mut caught = None;
    for seed in 1..=SEEDS_MAX {
        let faults = mutant.liveness.then(|| explore::fault_plan(scenario, seed, &FaultKind::ALL));
        let options = RunOptions {
            record_transcript: false,
            faults,
            check_statelessness: !mutant.liveness,
            check_determinism: true,
            ..RunOptions::seeded(seed)
        };
        let real = runner::run(scenario, &options);
        assert!(broken(&real).is_empty(), "the real server broke {:?} on {} seed {seed}", broken(&real), scenario.name);
        if mutant.is_gateway() {
            assert!(real.failures.is_empty(), "the real gateway failed {:?} on {} seed {seed}", real.failures, scenario.name);
        }
        let report = runner::run(scenario, &options.with_server(&mutant.server()));
        let properties = broken(&report);
        let hit = if mutant.liveness { properties == BTreeSet::from([Property::Liveness]) } else { !properties.is_empty() };
        if hit && caught.is_none() {
            caught = Some((seed, properties));
            if !every_seed {
                break;
            }
        }
    }
    caught
}

#[test]
fn every_mutant_is_caught_and_the_real_server_is_clean_on_the_same_seeds() {
    for mutant in MUTANTS {
        let caught = hunt(mutant, &mutant.scenario(), true);
        assert!(caught.is_some(), "mutant {} survived {SEEDS_MAX} seeds of {}", mutant.name, mutant.exposed_by);
    }
}

const MATRIX_BEGIN: &str = "<!-- mutant matrix: written by tests/mutants.rs -->\n";
const MATRIX_END: &str = "<!-- end of mutant matrix -->";

/// Every mutant is caught by a property again in a library scenario written for another lesson; the table
/// of both catches is `docs/exploring.md`'s (`MCPSIM_UPDATE_DOCS=1` rewrites it there).
#[test]
fn every_mutant_is_caught_by_a_property_in_a_scenario_written_for_another_lesson() {
    let mut table =
        String::from("| mutant | exposed by | property (first seed) | also caught by | property (first seed) |\n|---|---|---|---|---|\n");
    // A mutant that iterates a randomly seeded hash map is caught at a seed, and by properties, that vary
    // from one process to the next: the table says so rather than print a number that would not repeat.
    let run_to_run = BTreeSet::from([Property::Determinism, Property::Statelessness]);
    let cell = |mutant: &Mutant, caught: Option<(u64, BTreeSet<Property>)>| match caught {
        Some((_, properties)) if mutant.name == "hash-ordered-candidates" && properties.is_subset(&run_to_run) => {
            "determinism or statelessness (varies from run to run)".to_string()
        }
        Some((seed, properties)) => {
            let names: Vec<&str> = properties.iter().map(|p| p.as_str()).collect();
            format!("{} ({seed})", names.join(", "))
        }
        None => "SURVIVED".to_string(),
    };
    let mut survivors = Vec::new();
    for mutant in MUTANTS {
        assert_ne!(mutant.also_caught_by, mutant.exposed_by, "{}", mutant.name);
        assert!(
            library::SCENARIOS.iter().any(|(file, _)| *file == mutant.also_caught_by),
            "{} is not a library scenario",
            mutant.also_caught_by
        );
        let own = hunt(mutant, &mutant.scenario(), false);
        let elsewhere = hunt(mutant, &mcpsim::library(mutant.also_caught_by).expect("a library scenario parses"), false);
        if elsewhere.is_none() {
            survivors.push(mutant.name);
        }
        let faults = if mutant.liveness { " `--faults all`" } else { "" };
        table += &format!(
            "| `{}` | `{}`{faults} | {} | `{}`{faults} | {} |\n",
            mutant.name,
            mutant.exposed_by.trim_end_matches(".sim"),
            cell(mutant, own),
            mutant.also_caught_by.trim_end_matches(".sim"),
            cell(mutant, elsewhere)
        );
    }
    assert!(survivors.is_empty(), "not caught by a property in their also_caught_by scenario: {survivors:?}");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/exploring.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let start = doc.find(MATRIX_BEGIN).expect("docs/exploring.md holds the mutant matrix markers") + MATRIX_BEGIN.len();
    let end = doc[start..].find(MATRIX_END).expect("the matrix's end marker") + start;
    if std::env::var_os("MCPSIM_UPDATE_DOCS").is_some() {
        std::fs::write(&path, format!("{}{table}{}", &doc[..start], &doc[end..])).unwrap();
    } else {
        assert_eq!(&doc[start..end], table, "docs/exploring.md's mutant matrix is stale: rerun with MCPSIM_UPDATE_DOCS=1");
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
        assert!(mutant.is_gateway());
        assert_eq!(mutant.server().gateway_variant, variant);
    }
    assert_eq!(mutants::find("delete-then-claim").unwrap().server().gateway_variant, GatewayVariant::Real);
}
