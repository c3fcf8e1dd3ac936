//! The gateway scenarios can fail: each deliberately broken gateway variant (built around the unchanged
//! gateway, see `sim::actors::gateway_mutants`) is caught by the scenario that teaches the defence it lacks,
//! at the expectation that states that defence — while the real gateway passes the same runs, and a
//! variant is not caught by scenarios about defences it keeps. (That each is also caught by a property is
//! `tests/mutants.rs`'s table.)

use mcpsim::testing::runner::{self, FailureKind, RunOptions};
use mcpsim::testing::GatewayVariant;
use mcpsim::{testing::scenario, Scenario};
use std::path::Path;

const SEEDS: u64 = 20;

fn load(file: &str) -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    scenario::parse(file, file, &text).unwrap()
}

/// `(line, statement)` of the expectations that failed in any of the first `SEEDS` runs.
fn failed_expectations(scenario: &Scenario, variant: GatewayVariant) -> Vec<(usize, String)> {
    let mut failed = Vec::new();
    for seed in 1..=SEEDS {
        let options = RunOptions { gateway_variant: variant, record_transcript: false, ..RunOptions::seeded(seed) };
        let report = runner::run(scenario, &options);
        for failure in report.failures.iter().filter(|f| f.kind == FailureKind::Expectation) {
            if !failed.iter().any(|(line, _)| *line == failure.line) {
                failed.push((failure.line, failure.statement.clone()));
            }
        }
    }
    failed
}

fn caught_by(variant: GatewayVariant, file: &str, statement: &str) {
    let scenario = load(file);
    assert!(failed_expectations(&scenario, GatewayVariant::Real).is_empty(), "the real gateway passes {file}");
    let failed = failed_expectations(&scenario, variant);
    assert!(failed.iter().any(|(_, text)| text == statement), "{} should fail `{statement}` in {file}; failed: {failed:?}", variant.name());
}

#[test]
fn description_only_pins_miss_the_schema_rug_pull() {
    caught_by(
        GatewayVariant::DescriptionOnlyPins,
        "41-gateway-rug-pull-between-two-listings.sim",
        "expect second_listing result.tools.2 absent",
    );
    caught_by(GatewayVariant::DescriptionOnlyPins, "41-gateway-rug-pull-between-two-listings.sim", "expect exports count 0");
}

#[test]
fn routing_by_header_after_authorizing_the_body_runs_the_header_tool() {
    caught_by(GatewayVariant::RoutesByHeader, "43-gateway-header-body-confusion.sim", "expect confused error -32020");
}

#[test]
fn first_listed_backend_wins_resolves_a_bare_name() {
    caught_by(GatewayVariant::FirstListedBackendWins, "42-gateway-shadowed-search.sim", "expect bare error -32602 unknown_tool");
}

#[test]
fn exporting_on_a_decline_is_caught_where_the_decline_is_stated() {
    caught_by(GatewayVariant::ExportsOnDecline, "51-gateway-decline-ends-the-export-on-every-instance.sim", "expect exports count 0");
}

#[test]
fn a_backend_deaf_to_revocation_still_finds_the_revoked_notes() {
    caught_by(
        GatewayVariant::RevokeIgnoringBackend,
        "52-gateway-revocation-reaches-the-backends.sim",
        "expect after result.structuredContent.results = []",
    );
}

#[test]
fn each_mutant_keeps_the_defences_it_does_not_break() {
    // A description-only gateway still refuses a poisoned description (the scanner), and no mutant changes
    // confirmation: two gateways racing one export still export once.
    for variant in GatewayVariant::MUTANTS {
        for file in ["40-gateway-poisoned-description.sim", "47-gateways-race-one-export-confirmation.sim"] {
            let failed = failed_expectations(&load(file), variant);
            assert!(failed.is_empty(), "{} unexpectedly fails {file}: {failed:?}", variant.name());
        }
    }
}
