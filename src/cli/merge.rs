//! `mcpsim merge RESULTS…`: the results files of the shards of one exploration (`explore --shard I/N
//! --results FILE`) added up into what one unsharded run would have printed, with the same exit status.

use super::common::{EXIT_FAILED, EXIT_HELD, EXIT_NOT_LIVE, EXIT_UNJUDGED, EXIT_USAGE};
use super::explore::{self as explore_cli, Explored, Found, MutantRow, Report, Totals};
use crate::sim::actors::instance::notes_server_factory;
use crate::sim::engine::faults::FaultKind;
use crate::sim::explore::coverage::Coverage;
use crate::sim::explore::exhaustive::Breaks;
use crate::sim::explore::mutants::{self, MUTANTS};
use crate::sim::explore::results::{self, BuildIdentity, Finding, Record, RunIdentity, Summary, Verdict};
use crate::sim::explore::{self, Exploration, SeedOutcome};
use crate::sim::render::transcript::Format;
use crate::sim::runner::ServerUnderTest;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
What it checks before adding anything up: every record of one run must come from one build (version, git
commit and dirty, rustc, Cargo.lock) and one run (scenario text, server, faults, world, seeds, mode); when
they differ it names the files and what differs in each and merges nothing, unless --allow-mixed (then every
summary says so). Then the shards: which of 1..N are present, missing, or in two files (counted once), and
that each ran the seeds its I/N gives. A line that is not a record is listed as FILE:LINE and what is wrong;
every other line is still merged.

What it prints: the totals in explore's words (the same lines one unsharded run prints), the first failing run
per scenario and property (the smallest seed, then the fewest deliveries) with the command that repeats it,
and the merged coverage, naming the faults turned on that never fired in any shard. --all-mutants shards
print the zoo's table. --report DIR writes explore's HTML page of the merged run, re-running the first
failing seed (and each outcome class's example) in-process, after checking the scenario still has the text
the shards explored.

Exit status: as one unsharded run (0 all held; 1 a safety property or an expectation failed; 3 the simulator
crashed; 4 only liveness broke under faults); 2 a file cannot be read, or builds or options are mixed
without --allow-mixed; 3 also when the merge is incomplete (a shard missing or in two differing files, a
shard that ran other seeds, a malformed line) unless a failure makes it 1.

Examples:
  mcpsim explore 04-accepts-race-for-one-note --seeds 4000 --shard 1/2 --results shard-1.jsonl
  mcpsim explore 04-accepts-race-for-one-note --seeds 4000 --shard 2/2 --results shard-2.jsonl
  mcpsim merge shard-1.jsonl shard-2.jsonl --report report/
  mcpsim merge results/*.jsonl --coverage-json coverage.json
  mcpsim merge old.jsonl new.jsonl --allow-mixed   # shards of two builds, said on every summary")]
pub struct MergeArgs {
    /// Results files written by `mcpsim explore --results` (one per shard).
    #[arg(required = true, value_name = "RESULTS")]
    pub files: Vec<PathBuf>,
    /// Write the exploration's HTML report of the merged run into DIR (as `explore --report`).
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,
    /// Write the merged coverage as JSON to FILE (the bytes `explore --coverage-json` writes for one run).
    #[arg(long, value_name = "FILE")]
    pub coverage_json: Option<PathBuf>,
    /// Merge records of different builds or options anyway (each summary then says so).
    #[arg(long)]
    pub allow_mixed: bool,
    /// Keep the first failing run per scenario, server, verdict and property in a seed ledger in DIR, one file
    /// each (docs/swarm.md); `explore --ledger DIR` replays them first.
    #[arg(long, value_name = "DIR")]
    pub ledger: Option<PathBuf>,
    /// With --ledger: most seeds kept per scenario and server (the least fresh dropped first).
    #[arg(long, value_name = "M", default_value_t = crate::sim::explore::ledger::MAX_DEFAULT as u64, requires = "ledger",
          value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub ledger_max: u64,
}

fn usage(message: &str) -> ExitCode {
    eprintln!("mcpsim merge: {message}");
    ExitCode::from(EXIT_USAGE)
}

/// A record and the file it came from.
struct Read {
    file: String,
    record: Record,
}

pub fn run(args: MergeArgs) -> ExitCode {
    let mut read = Vec::new();
    let mut malformed = Vec::new();
    let mut seen = BTreeSet::new();
    for path in &args.files {
        if !seen.insert(std::fs::canonicalize(path).unwrap_or_else(|_| path.clone())) {
            println!("{} is named twice: read once", path.display());
            continue;
        }
        let (records, errors) = match results::read(path) {
            Ok(parsed) => parsed,
            Err(error) => return usage(&format!("cannot read {}: {error}", path.display())),
        };
        let file = path.display().to_string();
        read.extend(records.into_iter().map(|record| Read { file: file.clone(), record }));
        malformed.extend(errors);
    }
    // Every problem that leaves the merge incomplete (exit 3 unless something failed).
    let mut incomplete: Vec<String> = malformed.iter().map(|e| format!("malformed line, not merged: {e}")).collect();
    if read.is_empty() {
        for line in &incomplete {
            println!("{line}");
        }
        println!("nothing to merge: no record in {}", args.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", "));
        return ExitCode::from(if incomplete.is_empty() { EXIT_USAGE } else { EXIT_UNJUDGED });
    }
    let mixed = mixed(&read);
    if !mixed.is_empty() {
        for line in &mixed {
            eprintln!("mcpsim merge: {line}");
        }
        if !args.allow_mixed {
            eprintln!("mcpsim merge: merge the shards of one build and one run, or pass --allow-mixed");
            return ExitCode::from(EXIT_USAGE);
        }
    }
    let note = if mixed.is_empty() { "" } else { " (merged with --allow-mixed: builds or options differ)" };
    // One run per options digest, in the order first read.
    let mut runs: Vec<(RunIdentity, Vec<&Read>)> = Vec::new();
    for item in &read {
        match runs.iter_mut().find(|(run, _)| run.options_digest == item.record.run.options_digest) {
            Some((_, items)) => items.push(item),
            None => runs.push((item.record.run.clone(), vec![item])),
        }
    }
    if (args.report.is_some() || args.coverage_json.is_some()) && runs.len() > 1 {
        return usage("--report and --coverage-json need the records of one run (these files hold several)");
    }
    let mut codes = Vec::new();
    for (number, (run, items)) in runs.iter().enumerate() {
        if number > 0 {
            println!();
        }
        let items = shards_checked(run, items, &mut incomplete);
        let code = if run.mode == "all-mutants" {
            if args.report.is_some() || args.coverage_json.is_some() {
                return usage("--report and --coverage-json are not for --all-mutants results");
            }
            merge_mutants(run, &items, note)
        } else {
            match merge_seeds(run, &items, note, &args, &mut incomplete) {
                Ok(code) => code,
                Err(code) => return code,
            }
        };
        codes.push(code);
    }
    if let Some(dir) = &args.ledger {
        println!();
        let records: Vec<Record> = read.iter().map(|item| item.record.clone()).collect();
        if !super::ledger::record(dir, &records, usize::try_from(args.ledger_max).unwrap_or(usize::MAX)) {
            incomplete.push(format!("the ledger {} could not be written", dir.display()));
        }
    }
    if !incomplete.is_empty() {
        println!("\nNOT merged completely:");
        for line in &incomplete {
            println!("  {line}");
        }
    }
    let worst = worst(&codes);
    let code = if worst != EXIT_FAILED && !incomplete.is_empty() { EXIT_UNJUDGED } else { worst };
    ExitCode::from(code)
}

/// What differs between the files' builds and runs: one line per field that differs, naming each file's value.
fn mixed(read: &[Read]) -> Vec<String> {
    let mut lines = Vec::new();
    let mut builds: Vec<(&BuildIdentity, BTreeSet<&str>)> = Vec::new();
    for item in read {
        match builds.iter_mut().find(|(build, _)| **build == item.record.build) {
            Some((_, files)) => {
                files.insert(&item.file);
            }
            None => builds.push((&item.record.build, BTreeSet::from([item.file.as_str()]))),
        }
    }
    if builds.len() > 1 {
        let said: Vec<String> = builds.iter().map(|(build, files)| format!("{} from {}", join(files), build.short())).collect();
        lines.push(format!("the records come from {} builds: {}", builds.len(), said.join(", ")));
        let fields: [Field<BuildIdentity>; 5] = [
            ("version", |b| b.version.clone()),
            ("commit", |b| b.commit.clone().unwrap_or_else(|| "unknown".into())),
            ("dirty", |b| b.dirty.map_or("unknown".into(), |d| d.to_string())),
            ("rustc", |b| b.rustc.clone().unwrap_or_else(|| "unknown".into())),
            ("lockfile", |b| b.lockfile.clone()),
        ];
        lines.extend(differing(&fields, &builds));
    }
    let mut runs: Vec<(&RunIdentity, BTreeSet<&str>)> = Vec::new();
    for item in read {
        let run = &item.record.run;
        match runs.iter_mut().find(|(r, _)| r.options_digest == run.options_digest && r.scenario_digest == run.scenario_digest) {
            Some((_, files)) => {
                files.insert(&item.file);
            }
            None => runs.push((run, BTreeSet::from([item.file.as_str()]))),
        }
    }
    if runs.len() > 1 {
        lines.push(format!("the records are of {} different runs (options or scenario text differ):", runs.len()));
        let fields: [Field<RunIdentity>; 7] = [
            ("scenario", |r| r.scenario.clone()),
            ("scenario text", |r| r.scenario_digest[..r.scenario_digest.len().min(19)].to_string()),
            ("server", |r| r.server.clone()),
            ("faults", |r| if r.faults.is_empty() { "none".into() } else { r.faults.join(",") }),
            ("world", |r| r.world.clone()),
            ("seeds", |r| format!("{}..{}", r.seeds.first, r.seeds.last)),
            ("mode", |r| r.mode.clone()),
        ];
        lines.extend(differing(&fields, &runs));
    }
    lines
}

/// A field of a build or run identity: its name, and its value in words.
type Field<T> = (&'static str, fn(&T) -> String);

/// For each field whose value differs between the groups: `FIELD: files VALUE; files VALUE`.
fn differing<T>(fields: &[Field<T>], groups: &[(&T, BTreeSet<&str>)]) -> Vec<String> {
    let mut lines = Vec::new();
    for (name, value) in fields {
        let values: BTreeSet<String> = groups.iter().map(|(item, _)| value(item)).collect();
        if values.len() > 1 {
            let each: Vec<String> = groups.iter().map(|(item, files)| format!("{} {}", join(files), value(item))).collect();
            lines.push(format!("  {name} differs: {}", each.join("; ")));
        }
    }
    lines
}

fn join(files: &BTreeSet<&str>) -> String {
    files.iter().copied().collect::<Vec<_>>().join(", ")
}

/// Checks the run's shards: all of 1..N present, none in two files, each with the seeds (or zoo rows) its I/N
/// gives. Returns the records to merge: a shard found again in a later file is counted once (the first file's).
fn shards_checked<'a>(run: &RunIdentity, items: &[&'a Read], incomplete: &mut Vec<String>) -> Vec<&'a Read> {
    // Each file's shards of this run (a file normally holds one).
    let mut shards_of_file: BTreeMap<&str, BTreeSet<(u64, u64)>> = BTreeMap::new();
    let mut order: Vec<&str> = Vec::new();
    for item in items {
        if !order.contains(&item.file.as_str()) {
            order.push(&item.file);
        }
        if let results::Body::Summary(summary) = &item.record.body {
            shards_of_file.entry(&item.file).or_default().insert((summary.shard.index, summary.shard.count));
        }
    }
    let counts: BTreeSet<u64> = shards_of_file.values().flatten().map(|(_, count)| *count).collect();
    if counts.len() > 1 {
        incomplete.push(format!("the files cut the run into different numbers of shards: {counts:?}"));
    }
    let count = counts.iter().copied().max().unwrap_or(1);
    let mut owner: BTreeMap<u64, &str> = BTreeMap::new();
    let mut dropped: BTreeSet<&str> = BTreeSet::new();
    for file in &order {
        let Some(shards) = shards_of_file.get(file) else {
            incomplete.push(format!("{file}: findings of {} without its summary", run.scenario));
            continue;
        };
        if let Some((index, _)) = shards.iter().find(|(index, _)| owner.contains_key(index)) {
            let first = owner[index];
            let same = |f: &str| -> Vec<&Record> { items.iter().filter(|i| i.file == f).map(|i| &i.record).collect() };
            let differ = same(first).iter().map(|r| (&r.body, &r.build)).ne(same(file).iter().map(|r| (&r.body, &r.build)));
            let what = format!("shard {index}/{count} is in {first} and in {file}: counted once, from {first}");
            if differ {
                incomplete.push(format!("{what}, and the two differ"));
            } else {
                println!("{what} (the same records)");
            }
            dropped.insert(file);
            continue;
        }
        for (index, _) in shards {
            owner.insert(*index, file);
        }
    }
    let missing: Vec<String> = (1..=count).filter(|index| !owner.contains_key(index)).map(|index| format!("{index}/{count}")).collect();
    if !missing.is_empty() {
        incomplete.push(format!("missing shards of {} ({} of {count}): {}", run.scenario, missing.len(), missing.join(", ")));
    }
    let whole = run.seeds.first..=run.seeds.last;
    for item in items.iter().filter(|i| !dropped.contains(i.file.as_str())) {
        let results::Body::Summary(summary) = &item.record.body else { continue };
        if run.mode != "seeds" {
            continue;
        }
        let expected = explore::shard(&whole, summary.shard.index, summary.shard.count);
        let ran = summary.seeds_run.map(|s| s.first..=s.last);
        if ran != expected {
            let said = |r: Option<std::ops::RangeInclusive<u64>>| r.map_or("none".to_string(), |r| format!("{}..{}", r.start(), r.end()));
            incomplete.push(format!(
                "{}: shard {}/{} ran seeds {}, not {} (its slice of {}..{})",
                item.file,
                summary.shard.index,
                summary.shard.count,
                said(ran),
                said(expected),
                run.seeds.first,
                run.seeds.last
            ));
        }
    }
    items.iter().filter(|i| !dropped.contains(i.file.as_str())).copied().collect()
}

/// The summaries and findings of one (scenario, server), added up.
#[derive(Default)]
struct Merged {
    totals: Totals,
    /// Every property broken, as `Property` ranks them (the order explore prints them in).
    properties: BTreeSet<(usize, String)>,
    failing_by_property: BTreeMap<String, u64>,
    findings: Vec<Finding>,
    coverage: Option<Coverage>,
    /// Shards whose coverage was not collected, or not readable.
    coverage_missing: bool,
    shards: u64,
}

impl Merged {
    fn add_summary(&mut self, summary: &Summary, file: &str, incomplete: &mut Vec<String>) {
        let t = &mut self.totals;
        t.schedules += summary.schedules;
        t.deliveries += summary.deliveries;
        t.unsafe_runs += summary.unsafe_runs;
        t.not_live_runs += summary.not_live_runs;
        t.expectation_runs += summary.expectation_runs;
        t.crashed_runs += summary.crashed_runs;
        self.shards += 1;
        for name in &summary.properties_broken {
            let rank = crate::oracle::check::Property::named(name).map_or(usize::MAX, |p| p as usize);
            self.properties.insert((rank, name.clone()));
        }
        for (name, runs) in &summary.failing_runs_by_property {
            *self.failing_by_property.entry(name.clone()).or_default() += runs;
            if name == crate::oracle::check::Property::Liveness.as_str() {
                t.liveness_runs += runs;
            }
        }
        match summary.coverage.as_ref().map(Coverage::from_mergeable_json) {
            Some(Ok(coverage)) => match self.coverage.as_mut() {
                Some(merged) => merged.merge(coverage),
                None => self.coverage = Some(coverage),
            },
            Some(Err(error)) => {
                incomplete.push(format!("{file}: the coverage of shard {}/{}: {error}", summary.shard.index, summary.shard.count));
                self.coverage_missing = true;
            }
            None => self.coverage_missing = true,
        }
    }

    /// The totals with their first failing seeds (the lowest per verdict; explore's firsts).
    fn finish(&mut self) {
        self.findings.sort_by_key(|f| (f.seed, f.deliveries));
        self.findings.dedup_by_key(|f| f.seed);
        let lowest = |verdicts: &[Verdict]| self.findings.iter().find(|f| verdicts.contains(&f.verdict));
        let t = &mut self.totals;
        t.properties_broken = self.properties.iter().map(|(_, name)| name.clone()).collect();
        t.first_unsafe = lowest(&[Verdict::Unsafe]).map(|f| (f.seed, f.failures.clone()));
        t.first_not_live = lowest(&[Verdict::NotLive, Verdict::Expectations]).map(|f| (f.seed, f.failures.clone()));
        t.first_crash = lowest(&[Verdict::Crashed]).map(|f| (f.seed, f.failures.join("\n")));
    }
}

/// Adds up each (scenario, server) of `items`, in the order first read.
fn merge_groups(items: &[&Read], incomplete: &mut Vec<String>) -> Vec<((String, String), Merged)> {
    let mut groups: Vec<((String, String), Merged)> = Vec::new();
    let mut group = |scenario: &str, server: &str| -> usize {
        match groups.iter().position(|((s, v), _)| s == scenario && v == server) {
            Some(at) => at,
            None => {
                groups.push(((scenario.to_string(), server.to_string()), Merged::default()));
                groups.len() - 1
            }
        }
    };
    let mut placed = Vec::new();
    for item in items {
        match &item.record.body {
            results::Body::Summary(summary) => placed.push((group(&summary.scenario, &summary.server), item)),
            results::Body::Finding(finding) => placed.push((group(&finding.scenario, &finding.server), item)),
        }
    }
    for (at, item) in placed {
        match &item.record.body {
            results::Body::Summary(summary) => groups[at].1.add_summary(summary, &item.file, incomplete),
            results::Body::Finding(finding) => groups[at].1.findings.push(finding.clone()),
        }
    }
    for (_, merged) in groups.iter_mut() {
        merged.finish();
    }
    groups
}

/// The server as the summary names it, and the mutant's name.
fn server_words(label: &str) -> (String, Option<&str>) {
    match label.strip_prefix("mutant:") {
        Some(mutant) => (format!("mutant {mutant}"), Some(mutant)),
        None => ("the real server".to_string(), None),
    }
}

/// A seeds run: explore's summary of the merged totals, the first failing run per property, the coverage.
fn merge_seeds(run: &RunIdentity, items: &[&Read], note: &str, args: &MergeArgs, incomplete: &mut Vec<String>) -> Result<u8, ExitCode> {
    let faults = FaultKind::parse_list(&run.faults).map_err(|e| usage(&e))?;
    let mut codes = Vec::new();
    let groups = merge_groups(items, incomplete);
    for ((scenario, server), merged) in &groups {
        let (server_name, mutant) = server_words(server);
        println!("merged {} shard(s) of {scenario} against {server_name}{note}", merged.shards);
        let explored = Explored { scenario, argument: &run.argument, server: &server_name, mutant, faults: &faults };
        codes.push(explore_cli::summarize(&explored, run.seeds.first, run.seeds.last, &merged.totals));
        if let (Some(coverage), false) = (&merged.coverage, merged.coverage_missing) {
            explore_cli::print_outcome_classes(coverage, &run.argument, &crate::sim::runner::reproduce_flags(false, &faults, mutant));
        }
        first_failing_runs(merged);
        match (&merged.coverage, merged.coverage_missing) {
            (Some(coverage), false) => {
                println!(
                    "\ncoverage: {} runs, {} distinct delivery orders, {} distinct end states",
                    coverage.runs,
                    coverage.delivery_orders.len(),
                    coverage.end_states.len()
                );
                let never: Vec<&str> = coverage.faults_never_fired().iter().map(|k| k.as_str()).collect();
                if !never.is_empty() {
                    println!("  faults turned on that never fired in any shard: {}", never.join(", "));
                }
                if let Some(path) = &args.coverage_json {
                    if !explore_cli::write_coverage_json("merge", path, coverage, scenario, &server_name, (run.seeds.first, run.seeds.last))
                    {
                        return Err(ExitCode::from(EXIT_USAGE));
                    }
                }
                if let Some(folder) = &args.report {
                    report(run, folder, &server_name, mutant, &faults, merged, coverage);
                }
            }
            _ => {
                println!("\ncoverage: not collected in every shard (not merged)");
                if args.coverage_json.is_some() || args.report.is_some() {
                    incomplete.push("no coverage to write (--coverage-json, --report): some shard did not collect it".into());
                }
            }
        }
    }
    Ok(worst(&codes))
}

/// The most serious status: a failure, then not judged, then liveness, then held.
fn worst(codes: &[u8]) -> u8 {
    [EXIT_FAILED, EXIT_UNJUDGED, EXIT_NOT_LIVE].into_iter().find(|status| codes.contains(status)).unwrap_or(EXIT_HELD)
}

/// The first failing run per property (and per verdict without one), with the command that repeats it.
fn first_failing_runs(merged: &Merged) {
    let mut firsts: BTreeMap<(usize, String), &Finding> = BTreeMap::new();
    for finding in &merged.findings {
        let mut keys: Vec<(usize, String)> = finding
            .properties
            .iter()
            .map(|name| (crate::oracle::check::Property::named(name).map_or(usize::MAX, |p| p as usize), name.clone()))
            .collect();
        if keys.is_empty() {
            keys.push((usize::MAX, finding.verdict.as_str().to_string()));
        }
        for key in keys {
            // Findings are sorted by seed, then deliveries: the first seen is the first failing run.
            firsts.entry(key).or_insert(finding);
        }
    }
    if firsts.is_empty() {
        return;
    }
    println!("\nfirst failing run per property (of {} failing seeds kept):", merged.findings.len());
    for ((_, name), finding) in &firsts {
        let runs = merged.failing_by_property.get(name).map(|n| format!(", {n} failing runs")).unwrap_or_default();
        println!("  {name}: seed {} ({} deliveries{runs}): {}", finding.seed, finding.deliveries, finding.reproduce);
    }
}

/// `--report DIR`: explore's page of the merged run. Its example runs and the shrunk counterexample are run
/// again in-process, so the scenario must still have the text the shards explored.
fn report(
    run: &RunIdentity,
    folder: &Path,
    server_name: &str,
    mutant: Option<&str>,
    faults: &[FaultKind],
    merged: &Merged,
    coverage: &Coverage,
) {
    let (scenario, text) = match explore_cli::load_scenario(&run.argument) {
        Ok(loaded) => loaded,
        Err(error) => {
            println!("report: not written: cannot load {} to re-run its seeds: {error}", run.argument);
            return;
        }
    };
    if results::digest(text.as_bytes()) != run.scenario_digest {
        println!("report: not written: {} no longer has the text the shards explored (its digest differs)", run.argument);
        return;
    }
    let server: ServerUnderTest = match mutant {
        None => ServerUnderTest::from(&notes_server_factory()),
        Some(name) => match mutants::find(name) {
            Some(mutant) => mutant.server(),
            None => {
                println!("report: not written: this build has no mutant {name:?}");
                return;
            }
        },
    };
    let t = &merged.totals;
    let exploration = Exploration {
        schedules: t.schedules,
        deliveries: t.deliveries,
        unsafe_runs: t.unsafe_runs,
        not_live_runs: t.not_live_runs,
        expectation_runs: t.expectation_runs,
        crashed_runs: t.crashed_runs,
        ..Exploration::default()
    };
    let mut shrunk = None;
    if let Some(seed) = t.first_unsafe.as_ref().or(t.first_not_live.as_ref()).map(|(seed, _)| *seed) {
        match explore::run_seed_with(&scenario, &server, seed, faults).1 {
            SeedOutcome::Unsafe(failures) | SeedOutcome::NotLive(failures) => {
                if let Some(breaks) = Breaks::of(&failures) {
                    let plan = (!faults.is_empty()).then(|| explore::fault_plan(&scenario, seed, faults));
                    let found = Found { mutant, seed, faults: plan.as_deref(), breaks };
                    let save = folder.join(format!("counterexample-{}-seed{seed}.json", scenario.name));
                    if let Err(error) = std::fs::create_dir_all(folder) {
                        println!("report: not written: cannot create {}: {error}", folder.display());
                        return;
                    }
                    shrunk = explore_cli::counterexample(&scenario, &text, &found, Some(&save), Format::Jsonl);
                }
            }
            _ => println!("report: seed {seed} did not fail when run again here (a nondeterministic run?)"),
        }
    }
    let flags = crate::sim::runner::reproduce_flags(false, faults, mutant);
    let report = Report {
        folder,
        scenario: &scenario,
        argument: &run.argument,
        server: &server,
        server_name,
        faults,
        flags: &flags,
        seeds: (run.seeds.first, run.seeds.last),
    };
    match explore_cli::write_report(&report, &exploration, coverage, shrunk.as_ref()) {
        Ok(()) => println!("report written to {}", folder.join("index.html").display()),
        Err(error) => println!("report: not written into {}: {error}", folder.display()),
    }
}

/// `--all-mutants` shards: the zoo's table, each row from its mutant's summary and the real server's after it.
fn merge_mutants(run: &RunIdentity, items: &[&Read], note: &str) -> u8 {
    let mut rows: Vec<(usize, MutantRow<'_>)> = Vec::new();
    // The records of one file in order: a mutant's summary, then the real server's on the same seeds.
    let mut pending: Option<(&Summary, &str)> = None;
    let findings: Vec<&Finding> = items
        .iter()
        .filter_map(|i| match &i.record.body {
            results::Body::Finding(finding) => Some(finding),
            _ => None,
        })
        .collect();
    for item in items {
        let results::Body::Summary(summary) = &item.record.body else { continue };
        match (summary.server.strip_prefix("mutant:"), pending.take()) {
            (Some(_), _) => pending = Some((summary, &item.file)),
            (None, Some((mutant_summary, file))) if file == item.file && mutant_summary.scenario == summary.scenario => {
                let name = &mutant_summary.server["mutant:".len()..];
                let Some(at) = MUTANTS.iter().position(|m| m.name == name) else {
                    println!("{file}: no mutant {name:?} in this build's zoo: its row is left out");
                    continue;
                };
                let mutant = &MUTANTS[at];
                let verdicts: &[Verdict] =
                    if mutant.liveness { &[Verdict::Unsafe, Verdict::NotLive, Verdict::Expectations] } else { &[Verdict::Unsafe] };
                let found = findings
                    .iter()
                    .filter(|f| f.server == mutant_summary.server && f.scenario == summary.scenario && verdicts.contains(&f.verdict))
                    .min_by_key(|f| f.seed)
                    .map(|f| (f.seed, f.failures.clone()));
                let mut real = Merged::default();
                let mut ignored = Vec::new();
                real.add_summary(summary, file, &mut ignored);
                real.finish();
                rows.push((at, MutantRow { mutant, seeds: run.seeds.last, found, real: real.totals }));
            }
            (None, _) => println!("{}: a real-server summary of {} without its mutant's before it: left out", item.file, summary.scenario),
        }
    }
    rows.sort_by_key(|(at, _)| *at);
    println!("merged the zoo's table from {} row(s) of {}{note}", rows.len(), MUTANTS.len());
    let rows: Vec<MutantRow<'_>> = rows.into_iter().map(|(_, row)| row).collect();
    explore_cli::print_mutant_table(&rows)
}
