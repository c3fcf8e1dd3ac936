//! `mcpsim run --target FILE [SCENARIOS]`: the target scenarios played against a fleet of someone's server.

use super::common::{EXIT_FAILED, EXIT_HELD, EXIT_UNJUDGED, EXIT_USAGE};
use super::run::{FormatArg, RunArgs, SEEDS_MAX};
use crate::oracle::check::Property;
use crate::target::file::Target;
use crate::target::{self, contain, process, shown};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Where the scenarios for targets are, when none are named.
pub(crate) const TARGET_SCENARIOS: &str = "targets/scenarios";
/// Most re-runs of a failure.
pub(crate) const RERUNS_MAX: usize = 100;

/// `mcpsim target-watchdog` (hidden): see [`contain::watchdog`].
#[derive(Debug, clap::Args)]
pub struct WatchdogArgs {
    #[arg(long)]
    token: String,
    #[arg(long)]
    work_dir: PathBuf,
    #[arg(long)]
    cgroup: Option<PathBuf>,
}

pub fn watchdog(args: WatchdogArgs) -> ExitCode {
    contain::watchdog(&args.token, args.cgroup.as_deref(), &args.work_dir)
}

/// Begins a run of target processes (containment, work directory, watchdog, Ctrl-C handler): its work
/// directory, or the error to print.
pub(crate) fn begin(command: &str) -> Result<PathBuf, String> {
    process::install_interrupt_handler();
    contain::begin().map(|run| run.work_dir.clone()).map_err(|why| format!("mcpsim {command}: {why}"))
}

/// Ends the run: kills and counts what is left, removes the work directory; says so on stderr unless nothing
/// was left. Returns whether anything was.
pub(crate) fn end(command: &str) -> bool {
    let swept = contain::finish();
    if swept.left > 0 || swept.dir_left {
        eprintln!("mcpsim {command}: {}", contain::describe(&swept));
        return true;
    }
    false
}

pub fn run(args: &RunArgs, file: &Path) -> ExitCode {
    let trace = match args.format {
        None | Some(FormatArg::Text) => false,
        Some(FormatArg::McpTrace) => true,
        Some(_) => {
            eprintln!("mcpsim run: with --target, --format is text (the report) or mcp-trace (the spread play's traffic; one scenario)");
            return ExitCode::from(EXIT_USAGE);
        }
    };
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
    if trace && files.len() != 1 {
        eprintln!("mcpsim run: --format mcp-trace writes one scenario's trace; name one .sim file");
        return ExitCode::from(EXIT_USAGE);
    }
    let mcpsim = match std::env::current_exe() {
        Ok(path) => path.display().to_string(),
        Err(error) => {
            eprintln!("mcpsim run: cannot find the mcpsim binary for {{mcpsim}}: {error}");
            return ExitCode::from(EXIT_UNJUDGED);
        }
    };
    let work_dir = match begin("run") {
        Ok(dir) => dir,
        Err(why) => {
            eprintln!("{why}");
            return ExitCode::from(EXIT_UNJUDGED);
        }
    };
    let _guard = contain::Guard;
    let single = files.len() == 1;
    // With a trace on stdout, everything else goes to stderr.
    let say = |text: &str| {
        if trace {
            eprint!("{text}");
        } else {
            print!("{text}");
        }
    };
    let mut rows = Vec::new();
    let mut status = EXIT_HELD;
    let mut failing: Vec<(String, u64)> = Vec::new();
    let seeds = args.seed..args.seed.saturating_add(args.seeds.clamp(1, SEEDS_MAX));
    let runs: Vec<(&PathBuf, u64)> = files.iter().flat_map(|path| seeds.clone().map(move |seed| (path, seed))).collect();
    for (path, seed) in runs {
        let scenario = match target::load_scenario(&target, path) {
            Ok(scenario) => scenario,
            Err(error) => {
                if seed != args.seed {
                    continue;
                }
                say(&format!("# {}: SKIPPED: {}\n\n", shown(&path.display().to_string()), shown(&error)));
                rows.push((shown(&path.display().to_string()), "SKIPPED".to_string()));
                continue;
            }
        };
        match target::run_scenario(&target, &scenario, seed, args.reruns.min(RERUNS_MAX), &mcpsim, &work_dir) {
            Ok(report) => {
                let text = target::render(&target, &report, single || args.transcript || !report.passed());
                if trace {
                    print!("{}", target::mcp_trace(&target, &report.spread));
                }
                say(&format!("{text}\n"));
                let verdict = if report.passed() {
                    "PASS".to_string()
                } else {
                    status = status.max(EXIT_FAILED);
                    let what: Vec<&str> = report.properties().into_iter().map(Property::as_str).collect();
                    let what = if what.is_empty() { "expectations".to_string() } else { what.join(", ") };
                    let reproduced = report.reproduced.map(|(a, n)| format!(", reproduced {a}/{n}")).unwrap_or_default();
                    format!("FAIL ({what}{reproduced})")
                };
                rows.push((format!("{} seed {seed}", shown(&scenario.name)), verdict));
                if !report.passed() {
                    failing.push((shown(&path.display().to_string()), seed));
                }
            }
            Err(error) => {
                say(&format!("# {}: ERROR: {}\n\n", shown(&scenario.name), shown(&error)));
                rows.push((shown(&scenario.name), format!("ERROR: {}", shown(&error))));
                status = EXIT_UNJUDGED;
            }
        }
    }
    if end("run") {
        status = EXIT_UNJUDGED;
    }
    let mut summary = String::new();
    let (name, instances, transport) = (&target.file.name, target.file.instances, target.file.transport.as_str());
    let _ = writeln!(summary, "target {} ({}), {instances} instance(s) over {transport}:", shown(name), shown(&file.display().to_string()));
    for (name, verdict) in &rows {
        let _ = writeln!(summary, "  {name:<56} {verdict}");
    }
    for (path, seed) in &failing {
        let _ = writeln!(summary, "reproduce: mcpsim run --target {} {path} --seed {seed}", shown(&file.display().to_string()));
    }
    say(&summary);
    ExitCode::from(status)
}

/// `mcpsim explore --target FILE SCENARIO --seeds N`: the scenario under each seed's routing and release
/// order; every failing seed is listed with the properties it broke, and the first one's reproduction.
pub fn explore(file: &Path, name: &str, seeds: std::ops::RangeInclusive<u64>) -> ExitCode {
    let target = match Target::load(file) {
        Ok(target) => target,
        Err(error) => {
            eprintln!("mcpsim explore: {error}\n  (docs/targets.md describes every key; targets/ has examples)");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let path = PathBuf::from(name);
    let path = if path.exists() { path } else { Path::new(TARGET_SCENARIOS).join(format!("{name}.sim")) };
    let scenario = match target::load_scenario(&target, &path) {
        Ok(scenario) => scenario,
        Err(error) => {
            eprintln!("mcpsim explore: {error}\n  (a target scenario is a .sim file, or a name in {TARGET_SCENARIOS}/)");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let Ok(mcpsim) = std::env::current_exe().map(|p| p.display().to_string()) else {
        eprintln!("mcpsim explore: cannot find the mcpsim binary for {{mcpsim}}");
        return ExitCode::from(EXIT_UNJUDGED);
    };
    let work_dir = match begin("explore") {
        Ok(dir) => dir,
        Err(why) => {
            eprintln!("{why}");
            return ExitCode::from(EXIT_UNJUDGED);
        }
    };
    let _guard = contain::Guard;
    let (first, last) = (*seeds.start(), *seeds.end());
    let mut failing: Vec<(u64, String)> = Vec::new();
    let mut broken: std::collections::BTreeMap<&'static str, usize> = std::collections::BTreeMap::new();
    let mut error = None;
    for seed in seeds {
        match target::run_scenario(&target, &scenario, seed, 0, &mcpsim, &work_dir) {
            Ok(report) if report.passed() => {}
            Ok(report) => {
                for property in report.properties() {
                    *broken.entry(property.as_str()).or_default() += 1;
                }
                let what: Vec<&str> = report.properties().into_iter().map(Property::as_str).collect();
                let what = if what.is_empty() { "expectations".to_string() } else { what.join(", ") };
                println!("seed {seed}: FAIL ({what}): {}", shown(&report.spread.decisions.join("; ")));
                failing.push((seed, what));
            }
            Err(why) => {
                error = Some(format!("seed {seed}: {why}"));
                break;
            }
        }
    }
    let left = end("explore");
    let runs = last - first + 1;
    println!(
        "explored {} against {} ({}): seeds {first}..={last}",
        shown(&scenario.name),
        shown(&target.file.name),
        shown(&file.display().to_string())
    );
    if let Some(error) = error {
        println!("stopped: {}", shown(&error));
        return ExitCode::from(EXIT_UNJUDGED);
    }
    if left {
        return ExitCode::from(EXIT_UNJUDGED);
    }
    if failing.is_empty() {
        println!("every one of {runs} seed(s) held (the servers' own timing is not mcpsim's: a clean run is evidence, not proof)");
        return ExitCode::from(EXIT_HELD);
    }
    let properties: Vec<String> = broken.iter().map(|(p, n)| format!("{p} in {n}")).collect();
    println!(
        "{} of {runs} seed(s) failed: {}",
        failing.len(),
        if properties.is_empty() { "expectations only".into() } else { properties.join(", ") }
    );
    println!(
        "reproduce: mcpsim run --target {} {} --seed {} --reruns 5   # played again from its decision log, with how often it reproduced",
        shown(&file.display().to_string()),
        shown(&path.display().to_string()),
        failing[0].0
    );
    ExitCode::from(EXIT_FAILED)
}
