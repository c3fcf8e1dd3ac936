//! `mcpsim run --target FILE [SCENARIOS]`: the target scenarios played against a fleet of someone's server.

use super::common::{EXIT_FAILED, EXIT_HELD, EXIT_NOT_LIVE, EXIT_UNJUDGED, EXIT_USAGE};
use super::run::{FormatArg, RunArgs, SEEDS_MAX};
use crate::oracle::check::Property;
use crate::target::explore::{self, Coverage};
use crate::target::faults::{FaultKind, FaultPlan};
use crate::target::file::Target;
use crate::target::{self, contain, process, shown};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

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

/// A run of target processes, begun by `run --target`, `explore --target` and `attack` alike: containment,
/// work directory, watchdog and Ctrl-C handler. [`TargetRun::end`] ends it once; dropped without that (an
/// early return, a panic unwinding), it is ended then, quietly.
pub(crate) struct TargetRun {
    command: &'static str,
    work_dir: PathBuf,
    ended: bool,
}

impl TargetRun {
    /// Begins the run, or prints why it cannot and returns the exit status: an unsafe `TMPDIR` (the work
    /// directory's parent) is the user's to fix (2), anything else leaves the run unjudged (3).
    pub(crate) fn begin(command: &'static str) -> Result<TargetRun, ExitCode> {
        if let Err(why) = contain::check_temp_dir(&std::env::temp_dir()) {
            eprintln!("mcpsim {command}: {why}");
            return Err(ExitCode::from(EXIT_USAGE));
        }
        process::install_interrupt_handler();
        match contain::begin() {
            Ok(run) => Ok(TargetRun { command, work_dir: run.work_dir.clone(), ended: false }),
            Err(why) => {
                eprintln!("mcpsim {command}: {why}");
                Err(ExitCode::from(EXIT_UNJUDGED))
            }
        }
    }

    pub(crate) fn work_dir(&self) -> &Path {
        &self.work_dir
    }

    /// Ends the run: kills and counts what is left, removes the work directory; says so on stderr unless
    /// nothing was left. Returns whether anything was.
    pub(crate) fn end(mut self) -> bool {
        self.ended = true;
        let swept = contain::finish();
        if swept.left > 0 || swept.dir_left {
            eprintln!("mcpsim {}: {}", self.command, contain::describe(&swept));
            return true;
        }
        false
    }
}

impl Drop for TargetRun {
    fn drop(&mut self) {
        if !self.ended {
            contain::finish();
        }
    }
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
    // Faults: drawn per seed (--faults KINDS), or one plan as given (--fault-plan), or none.
    let kinds = match FaultKind::parse_list(&args.faults) {
        Ok(kinds) => kinds,
        Err(message) => {
            eprintln!("mcpsim run: {message}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let given = match args.fault_plan.as_deref().map(|plan| explore::read_fault_plan(plan, target.file.instances)) {
        None => None,
        Some(Ok(plan)) => Some(plan),
        Some(Err(message)) => {
            eprintln!("mcpsim run: {}", shown(&message));
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let files = match target::scenario_sources(&args.paths) {
        // A rotation lesson is played once per step of the target's recipe.
        Ok(files) if !files.is_empty() => target::per_rotation_step(&target, files),
        Ok(_) => {
            eprintln!(
                "mcpsim run: no .sim files in {}; the target scenarios are built in (run --target F without scenarios plays them)",
                args.paths[0].display()
            );
            return ExitCode::from(EXIT_USAGE);
        }
        Err(error) => {
            eprintln!("mcpsim run: {}", shown(&error.to_string()));
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
    let run = match TargetRun::begin("run") {
        Ok(run) => run,
        Err(status) => return status,
    };
    // One tools/list, one round 1, one probe read before any scenario: a wrong tool name, input key or probe
    // stops the run here, in one error, instead of as a page of misleading failures.
    if let Some(stopped) = after_preflight("run", file, target::preflight(&target, &mcpsim, run.work_dir()), trace) {
        return stopped;
    }
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
    let mut failing: Vec<(String, u64, FaultPlan)> = Vec::new();
    let seeds = args.seed..args.seed.saturating_add(args.seeds.clamp(1, SEEDS_MAX));
    let runs: Vec<(&target::ScenarioSource, u64)> = files.iter().flat_map(|source| seeds.clone().map(move |seed| (source, seed))).collect();
    let (mut played, mut skipped) = (0usize, 0usize);
    for (source, seed) in runs {
        let scenario = match target::load_source(&target, source) {
            Ok(scenario) => scenario,
            Err(error) => {
                if seed != args.seed {
                    continue;
                }
                skipped += 1;
                say(&format!("# SKIPPED: {}\n\n", shown(&error.to_string())));
                rows.push((shown(&source.name), "SKIPPED".to_string()));
                continue;
            }
        };
        played += 1;
        let plan = match &given {
            Some(plan) => plan.clone(),
            None => FaultPlan::draw(seed, &kinds, explore::requests_window(&scenario), target.file.instances),
        };
        match target::run_scenario(&target, &scenario, seed, &plan, args.reruns.min(RERUNS_MAX), &mcpsim, run.work_dir()) {
            Ok(report) => {
                let text = target::render(&target, &report, single || args.transcript || !report.passed());
                if trace {
                    print!("{}", target::mcp_trace(&target, &report.spread));
                }
                say(&format!("{text}\n"));
                let verdict = if let (true, Err(why)) = (report.passed(), &report.spread.effects) {
                    // Effects unobserved turn the effect checks off: that is not a pass.
                    status = status.max(EXIT_UNJUDGED);
                    format!("NOT JUDGED (effects not observed: {})", shown(&why.to_string()))
                } else if report.passed() {
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
                    failing.push((shown(&source.argument), seed, plan));
                }
            }
            Err(error) => {
                let error = shown(&error.to_string());
                say(&format!("# {}: ERROR: {error}\n\n", shown(&scenario.name)));
                rows.push((shown(&scenario.name), format!("ERROR: {error}")));
                status = EXIT_UNJUDGED;
            }
        }
    }
    if run.end() {
        status = EXIT_UNJUDGED;
    }
    if played == 0 && skipped > 0 {
        // Nothing was judged: a run of skipped scenarios is not a pass.
        status = status.max(EXIT_UNJUDGED);
        rows.push(("every scenario was skipped: nothing was judged".into(), "NOT JUDGED".into()));
    }
    let mut summary = String::new();
    let (name, instances, transport) = (&target.file.name, target.file.instances, target.file.transport.as_str());
    let _ = writeln!(summary, "target {} ({}), {instances} instance(s) over {transport}:", shown(name), shown(&file.display().to_string()));
    if !target.file.differ_by_design.is_empty() {
        let _ = writeln!(summary, "  masked as differing by design: {}", shown(&target.file.differ_by_design.join(", ")));
    }
    for (name, verdict) in &rows {
        let _ = writeln!(summary, "  {name:<56} {verdict}");
    }
    for (path, seed, plan) in &failing {
        let plan = if plan.kinds.is_empty() && plan.events.is_empty() {
            String::new()
        } else {
            format!(" {}", explore::fault_plan_argument(plan))
        };
        let _ = writeln!(summary, "reproduce: mcpsim run --target {} {path} --seed {seed}{plan}", shown(&file.display().to_string()));
    }
    say(&summary);
    ExitCode::from(status)
}

/// `mcpsim explore --target FILE SCENARIO --seeds N [--faults KINDS]`: the scenario under each seed's routing,
/// release order and (with faults) drawn fault plan; every failing seed is listed with the properties it broke.
/// The first failure is shrunk to the fewest fault events that still break the same properties, played again
/// `reruns` times from its decision log and plan, and printed with the one command that repeats it. With faults,
/// every seed's plan and fired faults are printed, then the coverage.
pub fn explore(file: &Path, name: &str, seeds: std::ops::RangeInclusive<u64>, kinds: &[FaultKind], reruns: usize) -> ExitCode {
    let target = match Target::load(file) {
        Ok(target) => target,
        Err(error) => {
            eprintln!("mcpsim explore: {error}\n  (docs/targets.md describes every key; targets/ has examples)");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let source = match target::scenario_sources(&[PathBuf::from(name)]) {
        Ok(mut sources) if sources.len() == 1 => sources.remove(0),
        Ok(_) => {
            eprintln!("mcpsim explore: {name}: name one target scenario (a .sim file, or a built-in name)");
            return ExitCode::from(EXIT_USAGE);
        }
        Err(error) => {
            eprintln!("mcpsim explore: {}", shown(&error.to_string()));
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let scenario = match target::load_source(&target, &source) {
        Ok(scenario) => scenario,
        Err(error) => {
            eprintln!("mcpsim explore: {error}\n  (a target scenario is a .sim file, or a built-in name such as 02-accepts-race)");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let Ok(mcpsim) = std::env::current_exe().map(|p| p.display().to_string()) else {
        eprintln!("mcpsim explore: cannot find the mcpsim binary for {{mcpsim}}");
        return ExitCode::from(EXIT_UNJUDGED);
    };
    let run = match TargetRun::begin("explore") {
        Ok(run) => run,
        Err(status) => return status,
    };
    if let Some(stopped) = after_preflight("explore", file, target::preflight(&target, &mcpsim, run.work_dir()), false) {
        return stopped;
    }
    let faulty = !kinds.is_empty();
    let window = explore::requests_window(&scenario);
    if faulty {
        println!("faults drawn per seed, at requests 1 to {window} (the requests the scenario sends):");
        for kind in kinds {
            println!("  {}: {}", kind.as_str(), kind.meaning());
        }
    }
    let (first, last) = (*seeds.start(), *seeds.end());
    let mut failing: Vec<(u64, FaultPlan, Vec<Property>)> = Vec::new();
    let mut broken: std::collections::BTreeMap<&'static str, usize> = std::collections::BTreeMap::new();
    let mut coverage = Coverage::new(kinds);
    let mut error = None;
    for seed in seeds {
        let plan = FaultPlan::draw(seed, kinds, window, target.file.instances);
        match target::run_scenario(&target, &scenario, seed, &plan, 0, &mcpsim, run.work_dir()) {
            Ok(report) => {
                coverage.add(&plan, &explore::fired_in(&report.spread.decisions, &report.spread.fired));
                if report.passed() {
                    if faulty {
                        println!("seed {seed}: held");
                    }
                } else {
                    for property in report.properties() {
                        *broken.entry(property.as_str()).or_default() += 1;
                    }
                    let what: Vec<&str> = report.properties().into_iter().map(Property::as_str).collect();
                    let what = if what.is_empty() { "expectations".to_string() } else { what.join(", ") };
                    if faulty {
                        println!("seed {seed}: FAIL ({what})");
                    } else {
                        println!("seed {seed}: FAIL ({what}): {}", shown(&report.spread.decisions.join("; ")));
                    }
                    failing.push((seed, plan, report.properties()));
                }
                if faulty {
                    // The play's decisions: its routing, the plan drawn, each fault as it fired.
                    for decision in &report.spread.decisions {
                        println!("  {}", shown(decision));
                    }
                }
            }
            Err(why) => {
                error = Some(format!("seed {seed}: {why}"));
                break;
            }
        }
    }
    // The first failure, shrunk and re-run (while the fleet's processes can still be started).
    let mut shrunk = None;
    if error.is_none() {
        if let Some((seed, plan, wanted)) = failing.first().filter(|_| faulty) {
            let shrinking = explore::shrink(plan, wanted, explore::SHRINK_PLAYS_MAX, |candidate| {
                let (_, findings, failures) = target::play_judged(&target, &scenario, *seed, candidate, &mcpsim, run.work_dir())?;
                Ok::<_, target::RunError>(target::verdict_of(&findings, &failures))
            });
            // Each re-run a fresh play of the shrunk plan, judged: how often the same properties broke again.
            let rerun = shrinking.and_then(|small| {
                let mut again = 0;
                for _ in 0..reruns {
                    let (_, findings, failures) = target::play_judged(&target, &scenario, *seed, &small.plan, &mcpsim, run.work_dir())?;
                    again += usize::from(explore::same_failure(wanted, &target::verdict_of(&findings, &failures)));
                }
                Ok((small, again))
            });
            match rerun {
                Ok(done) => shrunk = Some((*seed, done)),
                Err(why) => error = Some(format!("shrinking seed {seed}: {why}")),
            }
        }
    }
    let left = run.end();
    let runs = last - first + 1;
    println!(
        "explored {} against {} ({}): seeds {first}..={last}",
        shown(&scenario.name),
        shown(&target.file.name),
        shown(&file.display().to_string())
    );
    if faulty {
        print!("{}", coverage.render());
    }
    if let Some(error) = error {
        println!("stopped: {}", shown(&error));
        return ExitCode::from(EXIT_UNJUDGED);
    }
    if left {
        return ExitCode::from(EXIT_UNJUDGED);
    }
    let file_shown = shown(&file.display().to_string());
    if failing.is_empty() {
        let never = coverage.never_fired();
        if !never.is_empty() {
            let names: Vec<&str> = never.iter().map(|(k, _)| k.as_str()).collect();
            println!(
                "every one of {runs} seed(s) held, but not under {}: it never fired (above), so nothing was judged under it",
                names.join(", ")
            );
            return ExitCode::from(EXIT_UNJUDGED);
        }
        println!("every one of {runs} seed(s) held (the servers' own timing is not mcpsim's: a clean run is evidence, not proof)");
        return ExitCode::from(EXIT_HELD);
    }
    let properties: Vec<String> = broken.iter().map(|(p, n)| format!("{p} in {n}")).collect();
    println!(
        "{} of {runs} seed(s) failed: {}",
        failing.len(),
        if properties.is_empty() { "expectations only".into() } else { properties.join(", ") }
    );
    let only_liveness = failing.iter().all(|(_, _, p)| p == &[Property::Liveness]);
    let status = if only_liveness { EXIT_NOT_LIVE } else { EXIT_FAILED };
    let Some((seed, (small, again))) = shrunk else {
        println!(
            "reproduce: mcpsim run --target {file_shown} {} --seed {} --reruns 5   # played again from its decision log, with how often it reproduced",
            shown(&source.argument),
            failing[0].0
        );
        return ExitCode::from(status);
    };
    let bound = if small.bounded { format!(" (stopped at {} plays)", explore::SHRINK_PLAYS_MAX) } else { String::new() };
    println!(
        "seed {seed} shrunk from {} fault event(s) to {} in {} play(s){bound}{}",
        small.from,
        small.plan.events.len(),
        small.plays,
        if small.plan.events.is_empty() { ": it fails with no fault at all" } else { ":" }
    );
    for event in &small.plan.events {
        println!("  {}", shown(&event.to_string()));
    }
    if reruns > 0 {
        println!("reproduced {again} of {reruns} re-run(s) from its seed's decisions and the shrunk fault plan");
    }
    println!(
        "reproduce: mcpsim run --target {file_shown} {} --seed {seed} {}",
        shown(&source.argument),
        explore::fault_plan_argument(&small.plan)
    );
    ExitCode::from(status)
}

/// What the preflight found: `None` to go on (it held, or it could not be done: then the scenarios or attacks
/// run and report what they could not reach, which is never a pass), or the exit of a run it stopped because
/// the target file is wrong (2), saying why in one error.
pub(crate) fn after_preflight(command: &str, file: &Path, found: Result<String, target::Preflight>, to_stderr: bool) -> Option<ExitCode> {
    match found {
        Ok(line) if to_stderr => eprintln!("{}", shown(&line)),
        Ok(line) => println!("{}", shown(&line)),
        Err(target::Preflight::TargetFile(why)) => {
            eprintln!(
                "mcpsim {command}: {}: {}\n  (checked before any scenario; docs/targets.md describes every key)",
                shown(&file.display().to_string()),
                shown(&why)
            );
            return Some(ExitCode::from(EXIT_USAGE));
        }
        Err(target::Preflight::Unjudged(why)) => {
            eprintln!("mcpsim {command}: {}: the preflight could not be done: {}", shown(&file.display().to_string()), shown(&why));
        }
    }
    None
}
