//! `mcpsim run --target FILE [SCENARIOS]`: the target scenarios played against a fleet of someone's server.

use super::run::RunArgs;
use crate::target::file::Target;
use crate::target::{self, process};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Exit status when a property or an expectation failed.
const EXIT_FAILED: u8 = 1;
/// Exit status for a target file or scenario that cannot be read.
const EXIT_USAGE: u8 = 2;
/// Exit status when the fleet could not be started or reached at all.
const EXIT_HARNESS: u8 = 3;
/// Where the scenarios for targets are, when none are named.
pub(crate) const TARGET_SCENARIOS: &str = "targets/scenarios";
/// Most re-runs of a failure.
pub(crate) const RERUNS_MAX: usize = 100;

pub fn run(args: &RunArgs, file: &Path) -> ExitCode {
    let target = match Target::load(file) {
        Ok(target) => target,
        Err(error) => {
            eprintln!("mcpsim run: {error}\n  (docs/targets.md describes every key; targets/ has examples)");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let paths = if args.paths.is_empty() { vec![PathBuf::from(TARGET_SCENARIOS)] } else { args.paths.clone() };
    let files = match target::scenario_files(&paths) {
        Ok(files) if !files.is_empty() => files,
        Ok(_) => {
            eprintln!("mcpsim run: no .sim files in {}; target scenarios are in {TARGET_SCENARIOS}/", paths[0].display());
            return ExitCode::from(EXIT_USAGE);
        }
        Err(error) => {
            eprintln!("mcpsim run: {error}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let mcpsim = match std::env::current_exe() {
        Ok(path) => path.display().to_string(),
        Err(error) => {
            eprintln!("mcpsim run: cannot find the mcpsim binary for {{mcpsim}}: {error}");
            return ExitCode::from(EXIT_HARNESS);
        }
    };
    process::install_interrupt_handler();
    let work_dir = std::env::temp_dir().join(format!("mcpsim-target-{}", std::process::id()));
    let single = files.len() == 1;
    let mut rows = Vec::new();
    let mut status = 0u8;
    for path in &files {
        let scenario = match target::load_scenario(&target, path) {
            Ok(scenario) => scenario,
            Err(error) => {
                println!("# {}: SKIPPED: {error}\n", path.display());
                rows.push((path.display().to_string(), "SKIPPED".to_string()));
                continue;
            }
        };
        match target::run_scenario(&target, &scenario, args.seed, args.reruns.min(RERUNS_MAX), &mcpsim, &work_dir) {
            Ok(report) => {
                print!("{}", target::render(&target, &report, single || args.transcript || !report.passed()));
                println!();
                let verdict = if report.passed() {
                    "PASS".to_string()
                } else {
                    status = status.max(EXIT_FAILED);
                    let what = report.properties();
                    let what = if what.is_empty() { "expectations".to_string() } else { what.join(", ") };
                    let reproduced = report.reproduced.map(|(a, n)| format!(", reproduced {a}/{n}")).unwrap_or_default();
                    format!("FAIL ({what}{reproduced})")
                };
                rows.push((scenario.name.clone(), verdict));
            }
            Err(error) => {
                println!("# {}: ERROR: {error}\n", scenario.name);
                rows.push((scenario.name.clone(), format!("ERROR: {error}")));
                status = EXIT_HARNESS;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&work_dir);
    println!(
        "target {} ({}), {} instance(s) over {}, seed {}:",
        target.file.name,
        file.display(),
        target.file.instances,
        target.file.transport.as_str(),
        args.seed
    );
    for (name, verdict) in &rows {
        println!("  {name:<48} {verdict}");
    }
    if status != 0 {
        println!(
            "reproduce: mcpsim run --target {} {} --seed {}",
            file.display(),
            paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" "),
            args.seed
        );
    }
    ExitCode::from(status)
}
