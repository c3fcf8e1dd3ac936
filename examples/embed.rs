//! Embedding mcpsim in a test suite of your own: run a scenario, explore it, read the report.
//!
//! ```sh
//! cargo run --example embed                 # the library scenario 02, then 500 faulty schedules of 04
//! cargo run --example embed -- my.sim       # your own scenario file
//! ```

use std::process::ExitCode;

fn main() -> ExitCode {
    let scenario = match std::env::args().nth(1) {
        Some(path) => mcpsim::load(&path),
        None => mcpsim::library("02-retry-lands-on-another-instance"),
    };
    let scenario = match scenario {
        Ok(scenario) => scenario,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::from(2);
        }
    };
    let report = mcpsim::run(&scenario, &mcpsim::Options::seed(1));
    println!("{}", report.transcript());
    if !report.passed() {
        for failure in report.failures() {
            eprintln!("{failure}");
        }
        eprintln!("reproduce: {}", report.reproduce());
        return ExitCode::from(1);
    }
    let race = mcpsim::library("04-accepts-race-for-one-note").expect("a library scenario");
    let explored = mcpsim::explore(&race, &mcpsim::Options::default().faults(&mcpsim::FaultKind::ALL), 1..=500, 2);
    let e = &explored.exploration;
    println!(
        "{}: {} schedules with every fault on, {} deliveries, {} unsafe, {} not live",
        race.name, e.schedules, e.deliveries, e.unsafe_runs, e.not_live_runs
    );
    match explored.first_failure() {
        None => ExitCode::SUCCESS,
        Some((seed, command)) => {
            eprintln!("seed {seed} failed; reproduce: {command}");
            ExitCode::from(1)
        }
    }
}
