//! `mcpsim explore` and `mcpsim mutants`: one scenario under many interleavings, optionally against a
//! deliberately unsafe server from the mutant zoo.

use super::run::{extension, format_name, TranscriptFormat};
use crate::oracle::check::Property;
use crate::scenario::{self, Scenario};
use crate::sim::actors::instance::notes_server_factory;
use crate::sim::engine::faults::{Fault, FaultKind, RETRIES_MAX};
use crate::sim::explore::coverage::Coverage;
use crate::sim::explore::determinism::CHECK_SEEDS_MAX;
use crate::sim::explore::exhaustive::Breaks;
use crate::sim::explore::exhaustive::{explore_exhaustively, EXHAUSTIVE_EXECUTIONS_MAX};
use crate::sim::explore::mutants::{self, MUTANTS};
use crate::sim::explore::reproducer::Reproducer;
use crate::sim::explore::results::{self, Body, Finding, Record, RunIdentity, Seeds, Shard, Summary};
use crate::sim::explore::{self, Exploration, Failing, SeedOutcome, EXPLORE_SEEDS_MAX, JOBS_MAX};
use crate::sim::render::html::{self, CounterexampleLink, ExampleRun, ExplorationInput, RunInput};
use crate::sim::render::transcript::Format;
use crate::sim::runner::{Failure, FailureKind, RunReport, ServerUnderTest};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::common::{EXIT_FAILED, EXIT_HELD, EXIT_NOT_LIVE, EXIT_UNJUDGED, EXIT_USAGE};

/// Seeds `--all-mutants` tries per mutant before declaring it survived.
pub(crate) const ALL_MUTANTS_SEEDS_DEFAULT: u64 = 200;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Exit status (as in every command): 0 every run held; 1 a safety property or, without faults, one of the
scenario's own expectations failed in some run; 2 usage error (unknown scenario, mutant or fault, bad seed
range); 3 the simulator itself crashed; 4 nothing unsafe happened, but with --faults the liveness property
broke (a request never answered, a confirmation never settled).

Faults (--faults crash,drop,... or --faults all), each drawn per seed and recorded in the decision log:
  crash       an instance crashes and restarts at once, at any delivery point (even between claim and answer)
  drop        a request or response between a client and an instance is lost
  duplicate   a client's request is delivered twice, to the same or another instance
  delay       a message is held back: it arrives later, after other messages overtook it
  slow-store  the note or replay store answers late, behind other traffic
  clock-skew  an instance's clock runs ahead or behind, within the replay store's grace period
  rotate-key  every instance starts signing with a new key mid-flow (old states still verify)
With faults on, clients retry a lost request (and one answered \"in progress\") with the same bytes on the
next instance of the same deployment, after a timeout; the properties are judged, liveness included, and expectations are not
(a retry may take the flow another way than the scenario wrote).

SCENARIO is a .sim file, or the name of a library scenario (`04-accepts-race-for-one-note`) or of a zoo
scenario (`zoo-move-races-the-accept`; see `mcpsim mutants`).

Examples:
  mcpsim explore 04-accepts-race-for-one-note --seeds 10000 --jobs 2
  mcpsim explore 05-accepts-race-for-different-candidates --mutant delete-then-claim
  mcpsim explore 04-accepts-race-for-one-note --seeds 1000 --faults all --report report/ --coverage-json coverage.json
  mcpsim explore 04-accepts-race-for-one-note --seeds 1000 --check-determinism --ledger ledger/
                                               # swarm scale, ledgers, determinism across processes: docs/swarm.md
  mcpsim explore --all-mutants
  mcpsim explore imported.sim --perturb                   # a recording (`mcpsim import`) varied as a fleet would
  mcpsim explore --target targets/broken-own-memory-store.toml 02-accepts-race --seeds 5   # a target fleet, per seed
  mcpsim explore --target targets/mcpsim-stdio.toml 02-accepts-race --faults lost-answer,duplicate,hold --seeds 20
  mcpsim explore 04-accepts-race-for-one-note --seeds 4000 --shard 2/3 --results shard-2.jsonl
  mcpsim explore --all-mutants --seeds 50 --shard 1/4 --results mutants-1.jsonl

Shards (--shard I/N, 1 <= I <= N <= 10000): the seed range is cut into N contiguous slices, the
first L % N of L / N + 1 seeds, the others of L / N (--seeds 9 --shard 2/3 runs seeds 4..=6: seeds
stay those of the whole run); with --all-mutants the zoo's rows are cut the same way. A slice may be
empty: the shard then explores nothing, says so, and exits 0. N shards explore exactly what one run
would; `mcpsim merge` adds them up. With --target, --shard cuts the seeds too (no --results there).
Not with --exhaustive.

Results (--results FILE.jsonl, written whole at the end, replacing FILE): one JSON object per line,
keys sorted; every line has `record` (summary or finding), `format: 1`, `build` (version, git
commit and dirty, rustc -V, sha256 of Cargo.lock: what build.rs saw) and `run` (scenario,
scenarioDigest, argument, server, faults, world, seeds of the whole run, optionsDigest, mode: the
same for every shard of one swarm).
  summary   shard {index, count}, seedsRun, scenario, server, schedules, deliveries, unsafeRuns,
            notLiveRuns, expectationRuns, crashedRuns, propertiesBroken, failingRunsByProperty,
            coverage (exact, mergeable; collected whenever --results is given, which costs the
            transcript of every run; null in --all-mutants rows)
  finding   scenario, server, seed, verdict (unsafe, not_live, expectations, crashed), properties,
            deliveries, faultPlan, failures (as printed), reproduce (the one command)
The summary counts every run; findings are the lowest failing seeds, up to --results-max-findings
per verdict and property. --all-mutants writes per row the mutant's summary (the seeds searched up
to its first failure), then the real server's on the same seeds, then their findings.

Against a target (--target FILE) the faults are a real fleet's, drawn per seed (each kind on with even odds,
one or two events at request numbers within the scenario's requests) and played on fresh processes:
  lost-answer  the request is processed, its answer discarded (or the connection closed first); the client
               retries with a fresh id on the same or another instance
  duplicate    one request written to two instances, or twice to one, before either answer is read
  hold         a request held back while later ones go out, then released
  pause        the instance stopped (SIGSTOP) once it has the request, continued (SIGCONT) later
  crash        the instance killed (SIGKILL) once it has the request, restarted later
  clock-skew   an instance started under a shifted clock (libfaketime), ahead or behind
  store-cut    the store's connections cut (PostgreSQL through mcpsim's proxy) or a SQLite write lock held
Every plan and every fault that fired is printed; a failure is shrunk to the fewest fault events that still
break the same property, played again --reruns times from its decision log and plan, and printed with the one
command that repeats it (run --target … --fault-plan '<json>'). The coverage says which kinds fired where; a
kind turned on that never fired is listed with why, and a run that held otherwise exits 3 (not judged).")]
pub struct ExploreArgs {
    /// The scenario to explore (not needed with --all-mutants).
    pub scenario: Option<String>,
    /// Vary the scenario file as a fleet would, in the simulator: each later request on each other instance
    /// (every answer judged), each two consecutive requests raced (the properties judged, over --seeds,
    /// default 20); the first failing variant is shrunk to the fewest requests and saved as a .sim (--save,
    /// default perturbed-NAME.sim), its transcript beside it with --format. For `mcpsim import`'s scenarios.
    #[arg(long, conflicts_with_all = ["target", "mutant", "exhaustive", "all_mutants", "faults", "report", "results", "shard", "ledger"])]
    pub perturb: bool,
    /// Run seeds 1..=N, each a different interleaving of the scenario's parallel blocks.
    #[arg(long, conflicts_with = "seed_range")]
    pub seeds: Option<u64>,
    /// Run the seeds A..B (inclusive).
    #[arg(long, value_name = "A..B")]
    pub seed_range: Option<String>,
    /// Explore against a fleet of any MCP server instead, as a target file describes it (docs/targets.md): each
    /// seed is another routing of instances and release order of races, played on fresh processes. The scenario
    /// is a target scenario (a file, or a name in targets/scenarios/) [default --seeds: 20].
    #[arg(long, value_name = "FILE", conflicts_with_all = ["mutant", "exhaustive", "save", "report", "coverage_json", "all_mutants", "format"])]
    pub target: Option<PathBuf>,
    /// With --target: how many times the shrunk failure is played again from its decision log and fault plan
    /// (the servers' own timing is not mcpsim's, so the report says how often it reproduced).
    #[arg(long, value_name = "N", default_value_t = 3, requires = "target")]
    pub reruns: usize,
    /// Run against a deliberately unsafe server from the zoo (`mcpsim mutants` lists them).
    #[arg(long, value_name = "NAME")]
    pub mutant: Option<String>,
    /// Visit every distinct delivery order of the scenario's parallel blocks instead of random seeds
    /// (deliveries to different receivers commute, so orders differing only by those are visited once).
    /// One thread, no faults: --jobs does not apply.
    #[arg(long, conflicts_with_all = ["seeds", "seed_range", "faults"])]
    pub exhaustive: bool,
    /// Faults drawn from each seed (comma-separated kinds, or `all`; listed below). Clients retry what
    /// gets lost, and liveness is judged as well as safety.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub faults: Vec<String>,
    /// Where to write the reproducer of a violation (default: counterexample-SCENARIO-seedN.json).
    #[arg(long, value_name = "FILE")]
    pub save: Option<PathBuf>,
    /// Threads to spread the seeds over; the answer is the same for any number.
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
    /// Write an HTML report into DIR: DIR/index.html (outcome classes with an example run each, the shrunk
    /// counterexample, coverage: faults fired, refusal reasons and outcomes reached, distinct delivery
    /// orders and end states, steps raced) and the pages it links to.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["exhaustive", "all_mutants"])]
    pub report: Option<PathBuf>,
    /// Write the coverage as JSON to FILE (for CI to gate on: e.g. `faultsNeverFired` must be empty).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["exhaustive", "all_mutants"])]
    pub coverage_json: Option<PathBuf>,
    /// Run every mutant against the scenario that exposes it and print a table (each with the faults it
    /// needs: none, or all of them for a mutant that breaks only liveness).
    #[arg(long, conflicts_with_all = ["scenario", "mutant", "faults"])]
    pub all_mutants: bool,
    /// The format of the minimal counterexample's transcript: text and compact are printed (default: compact on
    /// a terminal, text otherwise); jsonl, mermaid and mcp-trace are written beside the reproducer
    /// (counterexample-SCENARIO-seedN.mmd, …) and named. (--report DIR writes its HTML page.)
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<TranscriptFormat>,
    /// Explore only the I-th of N contiguous, near-equal slices of the seeds (of the zoo with --all-mutants),
    /// so N machines together explore exactly what one run would (see below; `mcpsim merge` adds them up).
    #[arg(long, value_name = "I/N", conflicts_with = "exhaustive")]
    pub shard: Option<String>,
    /// Write what was explored as JSON Lines to FILE (a summary, and a record per failing seed kept, each
    /// keyed by this build and the run's options; see below), for `mcpsim merge`.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["exhaustive", "target"])]
    pub results: Option<PathBuf>,
    /// With --results: the lowest failing seeds written per verdict and property (the counts count all).
    #[arg(long, value_name = "K", default_value_t = results::MAX_FINDINGS_DEFAULT, requires = "results")]
    pub results_max_findings: usize,
    /// Run K seeds of the range (default 8: evenly spaced, and the first failing seed) again in another
    /// process (`mcpsim run SCENARIO --seed N --format jsonl …`) and compare the transcripts byte for byte: a
    /// difference is a finding (exit 1) printed with the seed and the first differing line. MCPSIM_DETERMINISM_CHILD
    /// names another program to run instead (another build's mcpsim: two builds should agree); docs/swarm.md.
    #[arg(long, value_name = "K", num_args = 0..=1, require_equals = true, default_missing_value = "8",
          value_parser = clap::value_parser!(u64).range(1..=CHECK_SEEDS_MAX),
          conflicts_with_all = ["target", "exhaustive", "all_mutants"])]
    pub check_determinism: Option<u64>,
    /// A seed ledger (`merge --ledger DIR` writes it; docs/swarm.md): first replay every failing seed it
    /// recorded for this scenario, server and faults, printing each one's verdict now (a seed failing again is a
    /// finding), then explore the range. A seed that passes counts one more build in a row.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["target", "exhaustive", "all_mutants"])]
    pub ledger: Option<PathBuf>,
    /// With --ledger: retire a recorded seed (remove its file) once it has passed on K builds in a row.
    #[arg(long, value_name = "K", default_value_t = crate::sim::explore::ledger::KEEP_DEFAULT, requires = "ledger",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub ledger_keep: u64,
}

/// Most shards a run can be cut into.
pub(crate) const SHARDS_MAX: u64 = 10_000;

/// `--shard I/N`, read strictly: two decimal numbers, 1 <= I <= N <= [`SHARDS_MAX`].
pub(crate) fn parse_shard(text: &str) -> Result<Shard, String> {
    let number = |part: &str| -> Option<u64> {
        (!part.is_empty() && part.len() <= 5 && part.bytes().all(|b| b.is_ascii_digit())).then(|| part.parse().ok()).flatten()
    };
    let parsed = text.split_once('/').and_then(|(i, n)| Some((number(i)?, number(n)?)));
    match parsed {
        Some((index, count)) if 1 <= index && index <= count && count <= SHARDS_MAX => Ok(Shard { index, count }),
        _ => Err(format!("--shard needs I/N with 1 <= I <= N <= {SHARDS_MAX} (e.g. 2/3), not {text:?}")),
    }
}

/// The server as a results record names it: `real` or `mutant:NAME`.
pub(crate) fn server_label(mutant: Option<&str>) -> String {
    mutant.map(|m| format!("mutant:{m}")).unwrap_or_else(|| "real".into())
}

/// A results summary of what `exploration` found on `seeds_run` (None: an empty shard).
pub(crate) fn summary_record(
    shard: Shard,
    seeds_run: Option<Seeds>,
    scenario: &str,
    server: &str,
    exploration: &Exploration,
    coverage: Option<&Coverage>,
) -> Body {
    Body::Summary(Summary {
        shard,
        seeds_run,
        scenario: scenario.to_string(),
        server: server.to_string(),
        schedules: exploration.schedules,
        deliveries: exploration.deliveries,
        unsafe_runs: exploration.unsafe_runs,
        not_live_runs: exploration.not_live_runs,
        expectation_runs: exploration.expectation_runs,
        crashed_runs: exploration.crashed_runs,
        properties_broken: exploration.properties_broken.iter().map(|p| p.as_str().to_string()).collect(),
        failing_runs_by_property: exploration.failing_runs_by_property.iter().map(|(p, n)| (p.as_str().to_string(), *n)).collect(),
        coverage: coverage.map(Coverage::to_mergeable_json),
    })
}

/// A results finding of one failing seed, with the command that runs it again.
fn finding_record(scenario: &Scenario, argument: &str, mutant: Option<&str>, faults: &[FaultKind], failing: &Failing) -> Body {
    let seed = failing.seed;
    let flags = crate::sim::runner::reproduce_flags(false, faults, mutant);
    let plan = (!faults.is_empty()).then(|| serde_json::to_value(explore::fault_plan(scenario, seed, faults)).expect("a plan serializes"));
    let mut failures: Vec<String> = failing.failures.iter().map(ToString::to_string).collect();
    failures.extend(failing.crash.clone());
    Body::Finding(Finding {
        scenario: scenario.name.clone(),
        server: server_label(mutant),
        seed,
        verdict: failing.verdict,
        properties: failing.properties().iter().map(|p| p.as_str().to_string()).collect(),
        deliveries: failing.deliveries,
        fault_plan: plan,
        failures,
        reproduce: format!("mcpsim explore {argument} --seed-range {seed}..{seed}{flags}"),
    })
}

/// Writes the records to `--results`; false (after saying why) when it cannot.
fn write_results(path: &Path, run: &RunIdentity, bodies: Vec<Body>) -> bool {
    let records: Vec<Record> = bodies.into_iter().map(|body| Record::new(run, body)).collect();
    match results::write(path, &records) {
        Ok(()) => {
            println!("results written to {} ({} records)", path.display(), records.len());
            true
        }
        Err(error) => {
            eprintln!("mcpsim explore: cannot write the results to {}: {error}", path.display());
            false
        }
    }
}

/// `mcpsim mutants`: the zoo, one sentence per mistake.
pub(crate) fn list_mutants() -> ExitCode {
    let width = MUTANTS.iter().map(|m| m.name.len()).max().unwrap_or(0);
    println!("The mutant zoo: unsafe variants of single rules, simulator-only (`mcpsim explore --mutant NAME`).\n");
    for mutant in MUTANTS {
        println!("{:width$}  {}", mutant.name, mutant.mistake);
        let faults = if mutant.liveness { " --faults all (it breaks only liveness)" } else { "" };
        println!("{:width$}  exposed by: {}{faults}", "", mutant.exposed_by);
    }
    ExitCode::SUCCESS
}

fn usage(message: &str) -> ExitCode {
    eprintln!("mcpsim explore: {message}");
    ExitCode::from(EXIT_USAGE)
}

/// The scenario and its text (a reproducer carries the text).
pub(crate) fn load_scenario(name: &str) -> Result<(Scenario, String), String> {
    let path = Path::new(name);
    if path.is_file() {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {name}: {e}"))?;
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or(name);
        let scenario = scenario::parse(name, stem, &text).map_err(|e| e.to_string())?;
        return Ok((scenario, text));
    }
    match (mutants::scenario_named(name), mutants::embedded(name)) {
        (Some(scenario), Some((_, text))) => Ok((scenario, text.to_string())),
        _ => Err(super::run::not_found(name)),
    }
}

fn parse_range(text: &str) -> Result<RangeInclusive<u64>, String> {
    let (a, b) = text.split_once("..").ok_or("--seed-range needs A..B, e.g. 1..1000")?;
    let a: u64 = a.trim().parse().map_err(|_| format!("{a:?} is not a seed"))?;
    let b: u64 = b.trim().parse().map_err(|_| format!("{b:?} is not a seed"))?;
    if a > b || b - a >= EXPLORE_SEEDS_MAX {
        return Err(format!("--seed-range must have A <= B and at most {EXPLORE_SEEDS_MAX} seeds"));
    }
    Ok(a..=b)
}

fn progress_bar(total: u64) -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} schedules  {per_sec}  {msg}").expect("a valid template").progress_chars("=> "),
    );
    Some(bar)
}

/// The first property a run broke, in the order it found them, or else its first failed expectation, read
/// from its failures as printed (`property P violated: …`, `line N: …`): how `--all-mutants` names what a
/// mutant broke, and how `merge` names it again from a results file.
pub(crate) fn first_property(failures: &[String]) -> String {
    let property = failures.iter().find_map(|f| f.strip_prefix("property ")?.split_once(" violated: ").map(|(p, _)| p.to_string()));
    let expectation = || {
        failures.iter().find_map(|f| {
            let (head, rest) = f.split_once('\n').unwrap_or((f, ""));
            let line = head.strip_prefix("line ")?.split_once(':')?.0;
            (!rest.starts_with("    the step could not run: ")).then(|| format!("expectation, line {line}"))
        })
    };
    property.or_else(expectation).unwrap_or_else(|| "-".into())
}

pub fn run(args: ExploreArgs) -> ExitCode {
    if args.jobs == 0 || args.jobs > JOBS_MAX {
        return usage(&format!("--jobs must be between 1 and {JOBS_MAX}"));
    }
    let shard = match args.shard.as_deref().map(parse_shard).transpose() {
        Ok(shard) => shard,
        Err(message) => return usage(&message),
    };
    if args.results_max_findings == 0 {
        return usage("--results-max-findings must be at least 1 (merge names each property's first failing seed)");
    }
    let results = args.results.as_deref().map(|path| (path, args.results_max_findings));
    if args.all_mutants {
        let seeds = args.seeds.unwrap_or(ALL_MUTANTS_SEEDS_DEFAULT).clamp(1, EXPLORE_SEEDS_MAX);
        return all_mutants(seeds, args.jobs, shard, results);
    }
    let Some(name) = args.scenario.as_deref() else {
        return usage("name a scenario to explore (or use --all-mutants)");
    };
    if args.perturb {
        let seeds: Vec<u64> = match (&args.seed_range, args.seeds) {
            (Some(range), _) => match parse_range(range) {
                Ok(range) => range.collect(),
                Err(message) => return usage(&message),
            },
            (None, Some(0)) => return usage("--seeds must be at least 1"),
            (None, n) => (1..=n.unwrap_or(20).min(EXPLORE_SEEDS_MAX)).collect(),
        };
        let format = args.format.map(|f| TranscriptFormat::or_default(Some(f)));
        return super::import::perturb_command(name, &seeds, args.save.as_deref(), format);
    }
    if let Some(file) = &args.target {
        let seeds = match (&args.seed_range, args.seeds) {
            (Some(range), _) => match parse_range(range) {
                Ok(range) => range,
                Err(message) => return usage(&message),
            },
            (None, Some(0)) => return usage("--seeds must be at least 1"),
            (None, Some(n)) if n > super::common::EXPLORE_TARGET_SEEDS_MAX => {
                return usage(&format!(
                    "--seeds is at most {} with --target (every seed starts fresh processes)",
                    super::common::EXPLORE_TARGET_SEEDS_MAX
                ))
            }
            (None, n) => 1..=n.unwrap_or(20),
        };
        let kinds = match crate::target::faults::FaultKind::parse_list(&args.faults) {
            Ok(kinds) => kinds,
            Err(message) => return usage(&message),
        };
        let Some(seeds) = seeds_of_shard(shard, &seeds) else {
            return empty_shard(shard.expect("only a shard is empty"), &seeds);
        };
        return super::target::explore(file, name, seeds, &kinds, args.reruns.min(super::target::RERUNS_MAX));
    }
    let (scenario, text) = match load_scenario(name) {
        Ok(loaded) => loaded,
        Err(message) => return usage(&message),
    };
    let seeds = match (&args.seed_range, args.seeds) {
        (Some(range), _) => match parse_range(range) {
            Ok(range) => range,
            Err(message) => return usage(&message),
        },
        (None, Some(0)) => return usage("--seeds must be at least 1"),
        (None, Some(n)) if n > EXPLORE_SEEDS_MAX => return usage(&format!("--seeds is at most {EXPLORE_SEEDS_MAX}")),
        (None, n) => 1..=n.unwrap_or(1000),
    };
    let server: ServerUnderTest = match args.mutant.as_deref() {
        None => ServerUnderTest::from(&notes_server_factory()),
        Some(mutant) => match mutants::find(mutant) {
            Some(mutant) => mutant.server(),
            None => return usage(&format!("no mutant is named {mutant:?}; `mcpsim mutants` lists them")),
        },
    };
    let faults = match FaultKind::parse_list(&args.faults) {
        Ok(kinds) => kinds,
        Err(message) => return usage(&message),
    };
    if args.exhaustive {
        return exhaustive(&scenario, name, args.mutant.as_deref(), &server);
    }
    let fault_names: Vec<&str> = faults.iter().map(|k| k.as_str()).collect();
    let whole = Seeds { first: *seeds.start(), last: *seeds.end() };
    let label = server_label(args.mutant.as_deref());
    let identity = RunIdentity::new(&scenario.name, &text, name, &label, &fault_names, "simulator", whole, "seeds");
    let shard_of = shard.unwrap_or(Shard { index: 1, count: 1 });
    let seeds = match seeds_of_shard(shard, &seeds) {
        Some(part) => part,
        None => {
            let code = empty_shard(shard_of, &seeds);
            if let Some((path, _)) = results {
                let coverage = Coverage::new(&faults);
                let body = summary_record(shard_of, None, &scenario.name, &label, &Exploration::default(), Some(&coverage));
                if !write_results(path, &identity, vec![body]) {
                    return ExitCode::from(EXIT_USAGE);
                }
            }
            return code;
        }
    };
    let replayed = match &args.ledger {
        Some(dir) => super::ledger::replay_first(dir, (&scenario, &text), &server, &label, &faults, args.ledger_keep),
        None => EXIT_HELD,
    };
    let total = seeds.end() - seeds.start() + 1;
    let bar = progress_bar(total);
    let on_progress = |done: u64, violations: u64| {
        if let Some(bar) = &bar {
            bar.set_position(done);
            bar.set_message(format!("{violations} failing"));
        }
    };
    let (first_seed, last_seed) = (*seeds.start(), *seeds.end());
    let range = seeds.clone();
    let covered = args.report.is_some() || args.coverage_json.is_some() || results.is_some();
    let keep = results.map_or(0, |(_, keep)| keep);
    let (exploration, coverage) = explore::explore_keeping(&scenario, &server, seeds, args.jobs, &faults, &on_progress, covered, keep);
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let server_name = args.mutant.as_deref().map(|m| format!("mutant {m}")).unwrap_or_else(|| "the real server".into());
    let run = Explored { scenario: &scenario.name, argument: name, server: &server_name, mutant: args.mutant.as_deref(), faults: &faults };
    let mut code = ExitCode::from(summarize(&run, first_seed, last_seed, &Totals::of(&exploration)));
    if replayed != EXIT_HELD {
        let status = super::ledger::worse(super::common::status_of(code), replayed);
        println!("\n(the ledger's recorded seeds failed again: see above; exit status {status})");
        code = ExitCode::from(status);
    }
    let first = exploration.first_unsafe.as_ref().or(exploration.first_not_live.as_ref());
    let mut shrunk = None;
    if let Some((seed, failures)) = first {
        // A property broken, or else (a run that broke none) its first failed expectation: either way a
        // shrunk reproducer.
        if let Some(breaks) = Breaks::of(failures) {
            let plan = (!faults.is_empty()).then(|| explore::fault_plan(&scenario, *seed, &faults));
            let format = TranscriptFormat::or_default(args.format);
            let found = Found { mutant: args.mutant.as_deref(), seed: *seed, faults: plan.as_deref(), breaks };
            shrunk = counterexample(&scenario, &text, &found, args.save.as_deref(), format);
        }
    }
    let mut nondeterministic = Vec::new();
    if let Some(k) = args.check_determinism {
        let explored = super::determinism::Explored {
            argument: name,
            scenario: &scenario,
            server: &server,
            mutant: args.mutant.as_deref(),
            label: &label,
            faults: &faults,
        };
        let failing = first.map(|(seed, _)| *seed).or(exploration.first_crash.as_ref().map(|(seed, _)| *seed));
        let disagreements;
        (code, disagreements) = super::determinism::check_and_report(&explored, &range, k, failing, code);
        nondeterministic = disagreements.iter().map(|d| super::determinism::finding(&explored, d)).collect();
    }
    let flags = crate::sim::runner::reproduce_flags(false, &faults, args.mutant.as_deref());
    if let Some((path, _)) = results {
        let seeds_run = Some(Seeds { first: first_seed, last: last_seed });
        let mut bodies = vec![summary_record(shard_of, seeds_run, &scenario.name, &label, &exploration, coverage.as_ref())];
        for failing in exploration.failing_seeds() {
            bodies.push(finding_record(&scenario, name, args.mutant.as_deref(), &faults, failing));
        }
        bodies.extend(nondeterministic.into_iter().map(Body::Finding));
        if !write_results(path, &identity, bodies) {
            return ExitCode::from(EXIT_USAGE);
        }
    }
    if let (Some(path), Some(coverage)) = (&args.coverage_json, &coverage) {
        if !write_coverage_json("explore", path, coverage, &scenario.name, &server_name, (first_seed, last_seed)) {
            return ExitCode::from(EXIT_USAGE);
        }
    }
    if let (Some(folder), Some(coverage)) = (&args.report, &coverage) {
        let report = Report {
            folder,
            scenario: &scenario,
            argument: name,
            server: &server,
            server_name: &server_name,
            faults: &faults,
            flags: &flags,
            seeds: (first_seed, last_seed),
        };
        match write_report(&report, &exploration, coverage, shrunk.as_ref()) {
            Ok(()) => println!("report written to {}", folder.join("index.html").display()),
            Err(error) => {
                eprintln!("mcpsim explore: cannot write the report into {}: {error}", folder.display());
                return ExitCode::from(EXIT_USAGE);
            }
        }
    }
    code
}

/// Writes the coverage as `--coverage-json` does (with the scenario, server and seeds); false after saying
/// why when it cannot.
pub(crate) fn write_coverage_json(
    command: &str,
    path: &Path,
    coverage: &Coverage,
    scenario: &str,
    server: &str,
    seeds: (u64, u64),
) -> bool {
    let mut json = coverage.to_json();
    if let Some(object) = json.as_object_mut() {
        object.insert("scenario".into(), scenario.into());
        object.insert("server".into(), server.into());
        object.insert("firstSeed".into(), seeds.0.into());
        object.insert("lastSeed".into(), seeds.1.into());
    }
    let text = serde_json::to_string_pretty(&json).expect("JSON serializes") + "\n";
    if let Err(error) = std::fs::write(path, text) {
        eprintln!("mcpsim {command}: cannot write {}: {error}", path.display());
        return false;
    }
    println!("coverage written to {}", path.display());
    true
}

/// The seeds this run explores: all of `seeds`, or with `--shard` its slice (said in a line). None: the slice is
/// empty.
fn seeds_of_shard(shard: Option<Shard>, seeds: &RangeInclusive<u64>) -> Option<RangeInclusive<u64>> {
    let Some(shard) = shard else { return Some(seeds.clone()) };
    let part = explore::shard(seeds, shard.index, shard.count)?;
    let (index, count) = (shard.index, shard.count);
    println!("shard {index}/{count}: seeds {}..{} of {}..{}", part.start(), part.end(), seeds.start(), seeds.end());
    Some(part)
}

/// An empty shard: said, and held (it explored nothing, so nothing failed).
fn empty_shard(shard: Shard, seeds: &RangeInclusive<u64>) -> ExitCode {
    let count = seeds.end() - seeds.start() + 1;
    println!(
        "shard {}/{} of seeds {}..{} is empty ({count} seeds in {} shards): nothing to explore",
        shard.index,
        shard.count,
        seeds.start(),
        seeds.end(),
        shard.count
    );
    ExitCode::from(EXIT_HELD)
}

/// Most outcome classes whose example run gets a page of its own in a report (the most frequent first).
const EXAMPLE_PAGES_MAX: usize = 24;

/// What a report is written of, besides the exploration's results.
pub(crate) struct Report<'a> {
    pub folder: &'a Path,
    pub scenario: &'a Scenario,
    pub argument: &'a str,
    pub server: &'a ServerUnderTest,
    pub server_name: &'a str,
    pub faults: &'a [FaultKind],
    /// `--mutant …` and `--faults …` as the commands that reproduce need them.
    pub flags: &'a str,
    pub seeds: (u64, u64),
}

/// DIR/index.html, a page per example run under DIR/runs/, and DIR/counterexample.html.
pub(crate) fn write_report(
    report: &Report<'_>,
    exploration: &Exploration,
    coverage: &Coverage,
    shrunk: Option<&Shrunk>,
) -> std::io::Result<()> {
    let runs = report.folder.join("runs");
    std::fs::create_dir_all(&runs)?;
    let mut examples = Vec::new();
    for (_, class) in coverage.classes_by_frequency().into_iter().take(EXAMPLE_PAGES_MAX) {
        let seed = class.example_seed;
        let run = explore::run_report(report.scenario, report.server, seed, report.faults);
        let reproduce = format!("mcpsim run {} --seed {seed}{}", report.argument, report.flags);
        let input = RunInput {
            report: &run,
            scenario: report.scenario,
            reproduce: &reproduce,
            server: report.server_name,
            faults_on: report.faults,
            up: Some(("../index.html", "the exploration")),
            note: None,
        };
        let file = format!("seed-{seed}.html");
        std::fs::write(runs.join(&file), html::run_page(&input))?;
        examples.push(ExampleRun { seed, href: format!("runs/{file}") });
    }
    let counterexample = match shrunk {
        Some(shrunk) => {
            let replay = format!("mcpsim replay {}", shrunk.path.display());
            let input = RunInput {
                report: &shrunk.report,
                scenario: report.scenario,
                reproduce: &replay,
                server: report.server_name,
                faults_on: report.faults,
                up: Some(("index.html", "the exploration")),
                note: Some(&shrunk.summary),
            };
            std::fs::write(report.folder.join("counterexample.html"), html::run_page(&input))?;
            Some(CounterexampleLink { href: "counterexample.html".into(), summary: shrunk.summary.clone(), replay })
        }
        None => None,
    };
    let (first_seed, last_seed) = report.seeds;
    // No --jobs: the answer is the same for any number, and so is the report.
    let reproduce = format!(
        "mcpsim explore {} --seed-range {first_seed}..{last_seed}{} --report {}",
        report.argument,
        report.flags,
        report.folder.display()
    );
    let input = ExplorationInput {
        scenario: &report.scenario.name,
        server: report.server_name,
        faults_on: report.faults,
        first_seed,
        last_seed,
        exploration,
        coverage,
        examples: &examples,
        counterexample,
        reproduce: &reproduce,
    };
    std::fs::write(report.folder.join("index.html"), html::exploration_page(&input))
}

/// A shrunk counterexample, replayed: its run, what it is, and where its reproducer was written.
pub(crate) struct Shrunk {
    report: RunReport,
    summary: String,
    path: PathBuf,
}

/// What was explored, for the summary.
pub(crate) struct Explored<'a> {
    pub scenario: &'a str,
    /// The scenario as the user named it (for the reproduction command).
    pub argument: &'a str,
    pub server: &'a str,
    pub mutant: Option<&'a str>,
    pub faults: &'a [FaultKind],
}

/// What the summary prints of an exploration: its counts and first failing seeds, with the failures as
/// printed. Made from an [`Exploration`] by `explore`, and from results files by `merge`, so both say the same.
#[derive(Debug, Clone, Default)]
pub(crate) struct Totals {
    pub schedules: u64,
    pub deliveries: u64,
    pub unsafe_runs: u64,
    pub not_live_runs: u64,
    pub expectation_runs: u64,
    pub crashed_runs: u64,
    /// Names, in the oracle's order (`Property`'s), as the summary prints them.
    pub properties_broken: Vec<String>,
    pub first_unsafe: Option<(u64, Vec<String>)>,
    pub first_not_live: Option<(u64, Vec<String>)>,
    pub first_crash: Option<(u64, String)>,
}

impl Totals {
    pub(crate) fn of(exploration: &Exploration) -> Totals {
        let texts = |(seed, failures): &(u64, Vec<Failure>)| (*seed, failures.iter().map(ToString::to_string).collect());
        let properties_broken = exploration.properties_broken.iter().map(|p| p.as_str().to_string()).collect();
        Totals {
            schedules: exploration.schedules,
            deliveries: exploration.deliveries,
            unsafe_runs: exploration.unsafe_runs,
            not_live_runs: exploration.not_live_runs,
            expectation_runs: exploration.expectation_runs,
            crashed_runs: exploration.crashed_runs,
            properties_broken,
            first_unsafe: exploration.first_unsafe.as_ref().map(texts),
            first_not_live: exploration.first_not_live.as_ref().map(texts),
            first_crash: exploration.first_crash.clone(),
        }
    }
}

/// The first violating run: what ran, under which seed and faults, and what it broke.
pub(crate) struct Found<'a> {
    pub mutant: Option<&'a str>,
    pub seed: u64,
    pub faults: Option<&'a [Fault]>,
    pub breaks: Breaks,
}

/// Shrinks the first violating run, prints its transcript (or writes it, in a machine-readable `format`) and
/// writes the reproducer; returns the replayed run.
pub(crate) fn counterexample(scenario: &Scenario, text: &str, found: &Found<'_>, save: Option<&Path>, format: Format) -> Option<Shrunk> {
    let Found { mutant, seed, faults, breaks } = *found;
    let Some(reproducer) = Reproducer::shrunk(scenario, text, mutant, seed, faults, breaks) else {
        println!("\n(the violation needs the statelessness re-run; no single-run counterexample to shrink)");
        return None;
    };
    let report = match reproducer.replay() {
        Ok(report) => report,
        Err(message) => {
            println!("\n(the shrunk counterexample could not be replayed: {message})");
            return None;
        }
    };
    let default_path = format!("counterexample-{}-seed{seed}.json", scenario.name);
    let path = save.map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from(default_path));
    let nondefault = reproducer.choices.iter().filter(|c| **c != 0).count();
    let instance = |index: usize| scenario.cluster.instances.get(index).map_or_else(|| format!("instance {index}"), |i| i.name.clone());
    let faults = match (reproducer.faults_on, reproducer.decisions.faults.as_slice()) {
        (false, _) => "no faults".to_string(),
        (true, []) => "faults on (clients retry) but none needed".to_string(),
        (true, fired) => fired.iter().map(|fault| fault.describe(&instance)).collect::<Vec<_>>().join("; "),
    };
    let summary = format!(
        "minimal counterexample: {}; seed {seed}, {} branching choice(s), {nondefault} of them not the first envelope in flight; {faults}",
        breaks.describe(),
        reproducer.choices.len()
    );
    println!("\n{summary}");
    if matches!(format, Format::Text | Format::Compact) {
        print!("{}", report.transcript.render(format));
    } else {
        let transcript = path.with_extension(extension(format));
        match std::fs::write(&transcript, report.transcript.render(format)) {
            Ok(()) => println!("its transcript ({}): {}", format_name(format), transcript.display()),
            Err(error) => println!("could not write the transcript to {}: {error}", transcript.display()),
        }
    }
    match std::fs::write(&path, reproducer.to_json()) {
        Ok(()) => println!("reproduce byte for byte: mcpsim replay {}", path.display()),
        Err(error) => println!("could not write the reproducer to {}: {error}", path.display()),
    }
    Some(Shrunk { report, summary, path })
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Exit status (as in every command): 0 the run held; 1 it broke a safety property or an expectation; \
2 the file cannot be used; 4 it broke only liveness.

The first line says what is replayed: the scenario, the seed, and whether it ran against a MUTANT of the zoo
(a deliberately unsafe server) or the real one, with which faults. The transcript's header says it too.

Examples:
  mcpsim explore zoo-move-races-the-accept --seeds 100 --mutant recheck-then-delete   # writes the file below
  mcpsim replay counterexample-zoo-move-races-the-accept-seed7.json
  mcpsim replay counterexample-zoo-move-races-the-accept-seed7.json --format mermaid > counterexample.mmd")]
pub struct ReplayArgs {
    /// A reproducer written by `mcpsim explore` (JSON: scenario text, mutant, seed, decision log).
    pub file: PathBuf,
    /// The transcript's format (default: compact on a terminal, text otherwise). With jsonl, mermaid or
    /// mcp-trace, stdout carries the transcript alone and the verdict goes to stderr.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<TranscriptFormat>,
}

/// `mcpsim replay FILE`: the recorded schedule again, its transcript and what it broke.
pub fn replay(args: ReplayArgs) -> ExitCode {
    let text = match std::fs::read_to_string(&args.file) {
        Ok(text) => text,
        Err(error) => return usage_of("replay", &format!("cannot read {}: {error}", args.file.display())),
    };
    let reproducer = match Reproducer::from_json(&text) {
        Ok(reproducer) => reproducer,
        Err(error) => return usage_of("replay", &error.to_string()),
    };
    let report = match reproducer.replay() {
        Ok(report) => report,
        Err(error) => return usage_of("replay", &error.to_string()),
    };
    let format = TranscriptFormat::or_default(args.format);
    let readable = matches!(format, Format::Text | Format::Compact);
    // The verdict shares stdout with a readable transcript; a machine-readable one keeps stdout to itself.
    let say = |line: String| if readable { println!("{line}") } else { eprintln!("{line}") };
    let against = match &reproducer.mutant {
        Some(mutant) => format!("MUTANT {mutant} (a deliberately unsafe server from the zoo, not the real one)"),
        None => "the real server".to_string(),
    };
    let faults = match (reproducer.faults_on, reproducer.decisions.faults.len()) {
        (false, _) => "no faults".to_string(),
        (true, 0) => "faults on (clients retry), none needed".to_string(),
        (true, n) => format!("faults on: {n} recorded in the file (listed in the header)"),
    };
    say(format!(
        "replaying {}: {} seed {} against {against}; {faults}; recorded as breaking {}",
        args.file.display(),
        reproducer.scenario_name,
        reproducer.seed,
        reproducer.breaks
    ));
    print!("{}", report.transcript.render(format));
    if report.failures.is_empty() {
        say("the run held".into());
        return ExitCode::from(EXIT_HELD);
    }
    for failure in &report.failures {
        say(failure.to_string());
    }
    let only_liveness = report.failures.iter().all(|f| f.kind == FailureKind::Property(Property::Liveness));
    ExitCode::from(if only_liveness { EXIT_NOT_LIVE } else { EXIT_FAILED })
}

fn usage_of(command: &str, message: &str) -> ExitCode {
    eprintln!("mcpsim {command}: {message}");
    ExitCode::from(EXIT_USAGE)
}

pub(crate) fn summarize(run: &Explored<'_>, first_seed: u64, last_seed: u64, exploration: &Totals) -> u8 {
    let Explored { scenario, argument, server, mutant, faults } = *run;
    let faulty = !faults.is_empty();
    let kinds: Vec<&str> = faults.iter().map(|k| k.as_str()).collect();
    let with = if faulty { format!(", faults {}", kinds.join(",")) } else { String::new() };
    println!("explored {scenario} against {server}: seeds {first_seed}..{last_seed}{with}");
    println!("  schedules              {}", exploration.schedules);
    println!("  deliveries             {}", exploration.deliveries);
    println!("  broke safety           {}", exploration.unsafe_runs);
    if faulty {
        println!("  broke liveness         {}", exploration.not_live_runs);
    } else {
        // Every run with a failed expectation, those that broke safety too: the count agrees with what is listed.
        let overlap = exploration.expectation_runs.saturating_sub(exploration.not_live_runs);
        let also = if overlap > 0 { format!("  ({overlap} of them broke safety too)") } else { String::new() };
        println!("  expectations failed    {}{also}", exploration.expectation_runs);
    }
    println!("  simulator crashed      {}", exploration.crashed_runs);
    let mutant_flag = crate::sim::runner::reproduce_flags(false, faults, mutant);
    if let Some((seed, message)) = &exploration.first_crash {
        println!("\nthe simulator crashed on seed {seed}: {message}");
        println!("  reproduce: mcpsim explore {argument} --seed-range {seed}..{seed}{mutant_flag}");
        return EXIT_UNJUDGED;
    }
    if let Some((seed, failures)) = &exploration.first_unsafe {
        println!("\nSAFETY VIOLATED ({}); first at seed {seed}:", exploration.properties_broken.join(", "));
        for failure in failures {
            println!("  {}", failure.replace('\n', "\n  "));
        }
        println!("  reproduce: mcpsim explore {argument} --seed-range {seed}..{seed}{mutant_flag}");
        if mutant.is_none() {
            println!("  transcript: mcpsim run {argument} --seed {seed}{}", crate::sim::runner::reproduce_flags(false, faults, None));
        }
        return EXIT_FAILED;
    }
    if let Some((seed, failures)) = &exploration.first_not_live {
        let what = if faulty { "LIVENESS FAILED" } else { "EXPECTATIONS FAILED" };
        println!("\n{what} (no safety property broke); first at seed {seed}:");
        for failure in failures {
            println!("  {}", failure.replace('\n', "\n  "));
        }
        println!("  reproduce: mcpsim explore {argument} --seed-range {seed}..{seed}{mutant_flag}");
        return if faulty { EXIT_NOT_LIVE } else { EXIT_FAILED };
    }
    if faulty {
        println!("\nall held in every schedule: every safety property, and liveness with clients retrying up to {RETRIES_MAX} times");
    } else {
        println!("\nall held in every schedule: every safety property, and every expectation of the scenario");
    }
    EXIT_HELD
}

fn exhaustive(scenario: &Scenario, argument: &str, mutant: Option<&str>, server: &ServerUnderTest) -> ExitCode {
    let found = explore_exhaustively(scenario, server);
    let server = mutant.map(|m| format!("mutant {m}")).unwrap_or_else(|| "the real server".into());
    println!("explored every delivery order of {} against {server}", scenario.name);
    println!("  schedules visited      {}", found.schedules);
    println!("  executions             {}", found.executions);
    println!("  distinct end states    {}", found.end_states);
    println!("  broke a property       {}", found.unsafe_runs);
    println!("  expectations failed    {}", found.expectation_runs);
    if found.truncated {
        println!("  (stopped after {EXHAUSTIVE_EXECUTIONS_MAX} executions: the search is incomplete)");
    }
    let mutant_flag = crate::sim::runner::reproduce_flags(false, &[], mutant);
    if let Some((choices, failures)) = &found.first_unsafe {
        println!("\nSAFETY VIOLATED; first schedule found (choices at branching points: {choices:?}):");
        for failure in failures {
            println!("  {}", failure.to_string().replace('\n', "\n  "));
        }
        println!("  search it again: mcpsim explore {argument} --exhaustive{mutant_flag}");
        return ExitCode::from(EXIT_FAILED);
    }
    if let Some((choices, failures)) = &found.first_expectation {
        println!("\nEXPECTATIONS FAILED (no safety property broke); first schedule {choices:?}:");
        for failure in failures {
            println!("  {}", failure.to_string().replace('\n', "\n  "));
        }
        return ExitCode::from(EXIT_FAILED);
    }
    println!("\nall held in every schedule");
    ExitCode::from(EXIT_HELD)
}

/// A row of the `--all-mutants` table: the mutant, its scenario, the seed of its first failure (None: it
/// survived `seeds`), what it broke, and the real server's counts on the same seeds. Made by `explore` from the
/// runs and by `merge` from results files, so both print the same table.
pub(crate) struct MutantRow<'a> {
    pub mutant: &'a mutants::Mutant,
    pub seeds: u64,
    /// The first failing seed and its failures as printed.
    pub found: Option<(u64, Vec<String>)>,
    pub real: Totals,
}

impl MutantRow<'_> {
    /// The row's cells, and whether it counts as caught with the real server clean.
    fn cells(&self) -> ([String; 5], bool) {
        let (mutant, real) = (self.mutant, &self.real);
        let strict = mutant.is_gateway() || mutant.liveness;
        let real_clean = real.unsafe_runs == 0 && real.crashed_runs == 0 && (!strict || real.not_live_runs == 0);
        let (to_first, property) = match &self.found {
            Some((seed, failures)) => (seed.to_string(), first_property(failures)),
            None => (format!("not in {}", self.seeds), "SURVIVED".into()),
        };
        let clean = match (real_clean, strict) {
            (true, _) => "clean".to_string(),
            (false, false) => format!("{} violating", real.unsafe_runs),
            (false, true) => format!("{} violating, {} not live", real.unsafe_runs, real.not_live_runs),
        };
        let exposed_by = mutant.exposed_by.trim_end_matches(".sim").to_string() + if mutant.liveness { " --faults all" } else { "" };
        ([mutant.name.to_string(), exposed_by, to_first, property, clean], self.found.is_some() && real_clean)
    }
}

/// The faults a mutant is explored with by `--all-mutants`: none, or all for a mutant that breaks only liveness.
pub(crate) fn mutant_faults(mutant: &mutants::Mutant) -> &'static [FaultKind] {
    if mutant.liveness {
        &FaultKind::ALL
    } else {
        &[]
    }
}

/// One row per mutant: the scenario that exposes it, schedules to its first violation, the property broken,
/// and whether the real server is clean on the same seeds (for a gateway scenario, whose expectations state
/// each defence, the real gateway must also fail none of them). With `shard`, only its slice of the zoo's rows;
/// with `results`, each row's mutant search and real-server run written as summaries and findings.
fn all_mutants(seeds: u64, jobs: usize, shard: Option<Shard>, results: Option<(&Path, usize)>) -> ExitCode {
    let shard_of = shard.unwrap_or(Shard { index: 1, count: 1 });
    let rows_of_shard = explore::slice(MUTANTS.len() as u64, shard_of.index, shard_of.count);
    if shard.is_some() {
        println!(
            "shard {}/{}: rows {}..{} of the zoo's {}",
            shard_of.index,
            shard_of.count,
            rows_of_shard.start + 1,
            rows_of_shard.end,
            MUTANTS.len()
        );
    }
    let keep = results.map_or(1, |(_, keep)| keep);
    let mut rows = Vec::new();
    let mut bodies = Vec::new();
    for mutant in &MUTANTS[rows_of_shard.start as usize..rows_of_shard.end as usize] {
        let scenario = mutant.scenario();
        // A liveness mutant is explored with faults on: only there do clients retry and liveness count.
        let faults = mutant_faults(mutant);
        let server = mutant.server();
        // Seeds in order until the first failure (a safety property; for a liveness mutant, liveness too).
        let mut searched = Exploration::keeping(keep);
        let mut found = None;
        for seed in 1..=seeds {
            let (deliveries, outcome) = explore::run_seed_with(&scenario, &server, seed, faults);
            let hit = match &outcome {
                SeedOutcome::Unsafe(failures) => Some(failures.clone()),
                SeedOutcome::NotLive(failures) if mutant.liveness => Some(failures.clone()),
                _ => None,
            };
            searched.add(seed, deliveries, outcome);
            if let Some(failures) = hit {
                found = Some((seed, failures.iter().map(ToString::to_string).collect::<Vec<String>>()));
                break;
            }
        }
        let last = found.as_ref().map(|(seed, _)| *seed).unwrap_or(seeds);
        let (real, _) = explore::explore_keeping(
            &scenario,
            &ServerUnderTest::from(&notes_server_factory()),
            1..=last,
            jobs,
            faults,
            &|_, _| {},
            false,
            keep,
        );
        let argument = mutant.exposed_by.trim_end_matches(".sim");
        let seeds_run = Some(Seeds { first: 1, last });
        bodies.push(summary_record(shard_of, seeds_run, &scenario.name, &server_label(Some(mutant.name)), &searched, None));
        bodies.push(summary_record(shard_of, seeds_run, &scenario.name, "real", &real, None));
        for failing in searched.failing_seeds() {
            bodies.push(finding_record(&scenario, argument, Some(mutant.name), faults, failing));
        }
        for failing in real.failing_seeds() {
            bodies.push(finding_record(&scenario, argument, None, faults, failing));
        }
        rows.push(MutantRow { mutant, seeds, found, real: Totals::of(&real) });
    }
    let code = ExitCode::from(print_mutant_table(&rows));
    if let Some((path, _)) = results {
        let zoo: String =
            MUTANTS.iter().map(|m| format!("{}\n{}\n", m.name, mutants::embedded(m.exposed_by).map_or("", |(_, text)| text))).collect();
        let identity = RunIdentity::new("*", &zoo, "*", "zoo", &[], "simulator", Seeds { first: 1, last: seeds }, "all-mutants");
        if !write_results(path, &identity, bodies) {
            return ExitCode::from(EXIT_USAGE);
        }
    }
    code
}

/// The `--all-mutants` table and its closing line; held only if every row's mutant was caught with the real
/// server clean.
pub(crate) fn print_mutant_table(rows: &[MutantRow<'_>]) -> u8 {
    let mut all_caught = true;
    let mut cells = Vec::new();
    for row in rows {
        let (row_cells, caught) = row.cells();
        all_caught &= caught;
        cells.push(row_cells);
    }
    let header = ["mutant", "exposed by", "schedules to first violation", "property broken", "real server, same seeds"];
    let mut widths = header.map(str::len);
    for row in &cells {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let line = |cells: [&str; 5]| {
        let padded: Vec<String> = cells.iter().zip(widths).map(|(cell, width)| format!("{cell:width$}")).collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(header);
    for row in &cells {
        line([&row[0], &row[1], &row[2], &row[3], &row[4]]);
    }
    if all_caught {
        println!("\nevery mutant caught; the real server broke nothing on the same seeds");
        EXIT_HELD
    } else {
        println!("\nNOT every mutant was caught with the real server clean (see the table)");
        EXIT_FAILED
    }
}
