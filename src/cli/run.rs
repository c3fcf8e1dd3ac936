//! `mcpsim run`: run scenario files against the simulated cluster, check every expectation and safety
//! property, print transcripts and a summary table.

use super::common::{self, EXIT_FAILED, EXIT_USAGE};
use crate::scenario::{self, Scenario};
use crate::sim::actors::instance::notes_server_factory;
use crate::sim::engine::faults::FaultKind;
use crate::sim::explore::{self, mutants};
use crate::sim::library;
use crate::sim::render::html::{self, RunInput};
use crate::sim::render::mcp_trace;
use crate::sim::render::transcript::Format;
use crate::sim::runner::{self, RunOptions, RunReport, SchedulerChoice, ServerUnderTest};
use crate::stores::StoreSpec;
use std::collections::BTreeSet;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Most seeds one invocation runs per scenario.
pub const SEEDS_MAX: u64 = 1_000_000;
/// The scenario file extension.
pub(crate) const EXTENSION: &str = "sim";

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Exit status: 0 when every expectation and safety property held; 1 when any failed (each failure names the
step, shows expected against actual, and prints the command that reproduces it); 2 when a scenario could not
be read or parsed.

Examples:
  mcpsim run                                   # the scenario library, one seed each
  mcpsim run scenarios/ --seeds 100            # every scenario under 100 interleavings
  mcpsim run scenarios/04-accepts-race-for-one-note.sim --seed 7 --format mermaid
  mcpsim run --live http://127.0.0.1:8080/mcp,http://127.0.0.1:8081/mcp \\
    scenarios/02-retry-lands-on-another-instance.sim
  mcpsim run scenarios/01-lesson-exchange-on-one-instance.sim --format mcp-trace > trace.jsonl
                                               # then: mcp-trace-validator validate trace.jsonl
  mcpsim run scenarios/62-legacy-confirmation-races-a-modern-one.sim --format mcp-trace \\
    --trace-client desk > desk.jsonl
                                               # one client's session (here the legacy one)
  mcpsim run scenarios/04-accepts-race-for-one-note.sim --format html > run.html
                                               # one page, opened from disk: timeline, inspector, checks
  mcpsim run scenarios/ --html-out report/     # a page per scenario and report/index.html
  mcpsim run --target targets/mcpsim-stdio.toml  # the target scenarios against 3 processes of any MCP server
  mcpsim run --target targets/mcpsim-http.toml 02-accepts-race --format mcp-trace > trace.jsonl
  mcpsim run --target targets/mcpsim-stdio.toml 02-accepts-race --seed 3 \\
    --faults lost-answer,duplicate
                                               # faults drawn from the seed against the target's processes
  mcpsim run --target targets/mcpsim-stdio.toml 02-accepts-race --seed 3 --fault-plan plan.json
                                               # one given plan (explore --target --faults prints it)
  mcpsim run --target targets/mcpsim-http.toml 14-rotation-mid-confirmation
                                               # once per step of the file's [rotation] recipe

With --live the scenarios are played against a running fleet (`mcpsim serve --http … --instances N`) and each
step's outcome is compared with the simulator's for the same seed. Steps that need the servers' store, clock,
processes or keys (advance, crash, restart, rotate, retire, admin revoke) are reported SKIPPED; answers after
such a step are shown but not compared. Each scenario changes the fleet's store: with --reseed SPEC (the fleet's
own --store) it is re-seeded with each scenario's notes before the scenario, `admin delete|move|rename` steps are
made in it, and the scenario's store expectations (note, notes count, consumed, nonce of) are read from it;
without it those steps are skipped, those expectations are reported not evaluated, and the store must be
re-seeded by hand (`mcpsim seed`) between scenarios.

  mcpsim run --live http://127.0.0.1:8080/mcp,http://127.0.0.1:8081/mcp \\
    --reseed sqlite:./fleet.db scenarios/")]
pub struct RunArgs {
    /// Scenario files (.sim) or folders of them. Default: ./scenarios, or the embedded library if there is none.
    pub paths: Vec<PathBuf>,
    /// The first seed. Same scenario + same seed = byte-identical transcript.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// How many consecutive seeds to run per scenario (each one a different interleaving of parallel blocks).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=SEEDS_MAX))]
    pub seeds: u64,
    /// Print each scenario's transcript in this format (printed by default when one scenario is run: compact
    /// on a terminal, text otherwise).
    #[arg(long, value_enum)]
    pub format: Option<FormatArg>,
    /// Write each scenario's transcript to its own file in DIR (NAME.txt, .jsonl, .mmd or .trace.jsonl, by
    /// --format; default text) instead of printing it: one Mermaid diagram or trace per file.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["live", "html_out"])]
    pub out: Option<PathBuf>,
    /// Write one HTML page per scenario into DIR (the failing seed's run, else the first seed's), and
    /// DIR/index.html linking them; the summary table is still printed.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["live", "format"])]
    pub html_out: Option<PathBuf>,
    /// Which scheduler picks the next delivery: seeded random (explores) or scripted (network order).
    #[arg(long, value_enum, default_value_t = SchedulerArg::Random)]
    pub scheduler: SchedulerArg,
    /// Play the scenarios against a running fleet instead, over HTTP: one URL per scenario instance, in
    /// declaration order (e.g. --live http://127.0.0.1:8080/mcp,http://127.0.0.1:8081/mcp). See `mcpsim run --help`.
    #[arg(long, value_name = "URL[,URL…]", value_delimiter = ',', value_parser = common::parse_url, conflicts_with_all = ["seeds", "format", "scheduler"])]
    pub live: Vec<String>,
    /// With --live: the bearer token of a principal, as PRINCIPAL=TOKEN (repeatable) [default: the demo's
    /// demo-alice and demo-bob].
    #[arg(long, value_name = "PRINCIPAL=TOKEN", value_parser = common::parse_token, requires = "live")]
    pub token: Vec<(String, String)>,
    /// Turn faults on, drawn from each seed as `mcpsim explore --faults` draws them (kinds, comma-separated,
    /// or `all`; `mcpsim explore --help` lists them): the transcript shows every fault and every retry.
    /// Expectations are shown but not judged; the properties, liveness included, are. With --target the kinds
    /// are a target's (lost-answer, duplicate, hold, pause, crash, clock-skew, store-cut; docs/targets.md).
    #[arg(long, value_name = "LIST", value_delimiter = ',', conflicts_with = "live")]
    pub faults: Vec<String>,
    /// With --target: play exactly this fault plan (a file, or the JSON itself, as `explore --target --faults`
    /// prints it in its reproduce command) instead of drawing one from the seed.
    #[arg(long, value_name = "FILE|JSON", requires = "target", conflicts_with = "faults")]
    pub fault_plan: Option<String>,
    /// With --live: the fleet's store (sqlite:PATH | postgres:URL, as given to its `serve --store`). Before each
    /// scenario it is re-seeded with exactly the scenario's notes (other notes removed; consumed confirmations
    /// kept), and the scenario's store expectations are evaluated against it. For test fleets only: it deletes
    /// notes. Also read from MCPSIM_RESEED_STORE (keeps a database password out of the process list).
    #[arg(long, value_name = "SPEC", requires = "live", env = "MCPSIM_RESEED_STORE", hide_env_values = true, value_parser = crate::cli::serve::StoreSpecParser)]
    pub reseed: Option<StoreSpec>,
    /// Run a mutant of the zoo instead of the real servers (`mcpsim mutants` lists them): its transcript
    /// shows how the checker catches it. The reproduce line names it.
    #[arg(long, value_name = "NAME", conflicts_with = "live")]
    pub mutant: Option<String>,
    /// Play the target scenarios (default: the ones built in, also named alone as 04-cancel-then-accept; or .sim
    /// files) against a fleet of any MCP server, as the target file (TOML) describes it: mcpsim starts its
    /// processes, is their only client and network, and judges the properties from what it observes. A preflight
    /// (tools/list, one round 1, one probe read) first refuses a wrong tool, input_key or [effects] (exit 2); a run
    /// whose every scenario was skipped exits 3. Everything the target starts is contained (a cgroup of the run, or the
    /// MCPSIM_TARGET_RUN environment marker; MCPSIM_TARGET_CONTAINMENT=marker forces the latter), killed and
    /// counted at the end, also after Ctrl-C or a SIGKILL of mcpsim. A lesson naming {{stage_before}} or
    /// {{stage_after}} is played once per step of the file's [rotation] recipe. See docs/targets.md.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["live", "out", "html_out", "mutant", "scheduler"])]
    pub target: Option<PathBuf>,
    /// With --target: how many times a failing scenario is played again from its decision log (the servers'
    /// own timing is not mcpsim's, so the report says how often it reproduced).
    #[arg(long, value_name = "N", default_value_t = 3, requires = "target")]
    pub reruns: usize,
    /// With --target: print every scenario's transcript and processes (failing ones are always printed).
    #[arg(long, requires = "target")]
    pub transcript: bool,
    /// With --format mcp-trace: only this client's messages, one session per trace. The validator judges a
    /// trace as one session; a scenario whose clients speak two eras is exported once per client.
    #[arg(long, value_name = "CLIENT", conflicts_with_all = ["live", "target", "html_out"])]
    pub trace_client: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FormatArg {
    /// Column-aligned, every message whole (requestState tokens and note bodies abbreviated): the snapshot
    /// format, and the default when stdout is not a terminal.
    Text,
    /// For reading in a terminal (the default there): the scenario's lesson on top, _meta shown once per
    /// sender, long strings and lists shortened, lines wrapped at 120 columns.
    Compact,
    /// One JSON object per line, every message exact.
    Jsonl,
    /// A Mermaid sequence diagram.
    Mermaid,
    /// The client↔instance messages as an mcp-trace-validator trace (JSON Lines); one scenario at a time.
    McpTrace,
    /// One self-contained HTML page: the timeline, a message inspector, the checks where they were judged;
    /// one scenario at a time (--html-out DIR for several).
    Html,
}

impl FormatArg {
    /// The transcript format, or `None` for HTML (a page of the whole run, not a transcript rendering).
    fn transcript(self) -> Option<Format> {
        match self {
            FormatArg::Text => Some(Format::Text),
            FormatArg::Compact => Some(Format::Compact),
            FormatArg::Jsonl => Some(Format::Jsonl),
            FormatArg::Mermaid => Some(Format::Mermaid),
            FormatArg::McpTrace => Some(Format::McpTrace),
            FormatArg::Html => None,
        }
    }
}

/// The format of one transcript (`explore --format`, `replay --format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TranscriptFormat {
    /// Every message whole: the snapshot format (the default when stdout is not a terminal).
    Text,
    /// For reading in a terminal (the default there).
    Compact,
    /// One JSON object per line, every message exact.
    Jsonl,
    /// A Mermaid sequence diagram.
    Mermaid,
    /// The client↔instance messages as an mcp-trace-validator trace.
    McpTrace,
}

impl TranscriptFormat {
    /// `format` if given, else compact on a terminal and text otherwise.
    pub(crate) fn or_default(format: Option<TranscriptFormat>) -> Format {
        match format {
            Some(TranscriptFormat::Text) => Format::Text,
            Some(TranscriptFormat::Compact) => Format::Compact,
            Some(TranscriptFormat::Jsonl) => Format::Jsonl,
            Some(TranscriptFormat::Mermaid) => Format::Mermaid,
            Some(TranscriptFormat::McpTrace) => Format::McpTrace,
            None => readable_default(),
        }
    }
}

/// How a transcript is printed when no format was asked for: compact on a terminal, the full text otherwise
/// (so pipes, files and tests get the snapshot format's bytes).
pub(crate) fn readable_default() -> Format {
    if std::io::stdout().is_terminal() {
        Format::Compact
    } else {
        Format::Text
    }
}

/// The file extension of a transcript written in `format`.
pub(crate) fn extension(format: Format) -> &'static str {
    match format {
        Format::Text | Format::Compact => "txt",
        Format::Jsonl => "jsonl",
        Format::Mermaid => "mmd",
        Format::McpTrace => "trace.jsonl",
    }
}

/// The `--format` value naming `format`.
pub(crate) fn format_name(format: Format) -> &'static str {
    match format {
        Format::Text => "text",
        Format::Compact => "compact",
        Format::Jsonl => "jsonl",
        Format::Mermaid => "mermaid",
        Format::McpTrace => "mcp-trace",
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SchedulerArg {
    Random,
    Scripted,
}

/// A scenario to run, and the path to print in reproductions.
pub(crate) struct Loaded {
    pub(crate) scenario: Scenario,
    pub(crate) path: String,
}

/// One scenario's result over all its seeds.
struct Summary {
    name: String,
    path: String,
    seeds: u64,
    messages: usize,
    interleavings: usize,
    failed: Option<RunReport>,
    /// The first seed's run, kept when a page is written of a scenario that did not fail.
    first: Option<RunReport>,
}

/// What is printed or written besides the table.
#[derive(Clone, Copy)]
struct Output {
    format: Option<Format>,
    /// An HTML page is made of each scenario (`--format html`, `--html-out`).
    pages: bool,
}

/// `mcpsim run` on the simulator (`--target` and `--live` are dispatched by `cli::main`).
pub fn run(args: RunArgs) -> ExitCode {
    let mut unreadable = Vec::new();
    let loaded = load(&args.paths, &mut unreadable);
    // One scenario named (a file or a library name): its transcript is printed without asking.
    let single = args.paths.len() == 1 && !args.paths[0].is_dir() && loaded.len() == 1;
    let html = args.format == Some(FormatArg::Html);
    if html && args.out.is_some() {
        eprintln!("mcpsim run: --out DIR writes transcripts; for a folder of HTML pages use --html-out DIR");
        return ExitCode::from(EXIT_USAGE);
    }
    let format = match (&args.out, args.format) {
        (Some(_), format) => Some(format.and_then(FormatArg::transcript).unwrap_or(Format::Text)),
        (None, Some(format)) => format.transcript(),
        (None, None) => (single && args.html_out.is_none()).then(readable_default),
    };
    // Machine-readable transcripts and pages keep stdout to themselves; the table goes to stderr.
    let table_to_stderr = args.out.is_none() && (html || matches!(format, Some(Format::Jsonl | Format::Mermaid | Format::McpTrace)));
    // A trace or a diagram is one document: two scenarios' in one stream would not be one.
    if args.out.is_none() && loaded.len() > 1 {
        let one = match format {
            Some(Format::McpTrace) => Some(("trace", "mcp-trace", "trace.jsonl")),
            Some(Format::Mermaid) => Some(("diagram", "mermaid", "diagram.mmd")),
            _ => None,
        };
        if let Some((what, name, file)) = one {
            eprintln!(
                "mcpsim run: --format {name} writes one {what} per scenario: name one (mcpsim run scenarios/01-lesson-exchange-on-one-instance.sim --format {name} > {file}), or pass --out DIR for one file each"
            );
            return ExitCode::from(EXIT_USAGE);
        }
    }
    if let Some(client) = &args.trace_client {
        if format != Some(Format::McpTrace) {
            eprintln!("mcpsim run: --trace-client {client} selects one client's messages of a trace: add --format mcp-trace");
            return ExitCode::from(EXIT_USAGE);
        }
        for item in &loaded {
            let clients: Vec<&str> = item.scenario.cluster.clients.iter().filter(|c| !c.browser).map(|c| c.name.as_str()).collect();
            if !clients.contains(&client.as_str()) {
                eprintln!(
                    "mcpsim run: {} declares no client {client:?}; its clients: {}",
                    item.path,
                    if clients.is_empty() { "none".to_string() } else { clients.join(", ") }
                );
                return ExitCode::from(EXIT_USAGE);
            }
        }
    }
    if let Some(dir) = &args.out {
        if let Err(error) = std::fs::create_dir_all(dir) {
            eprintln!("mcpsim run: --out {}: cannot create the folder: {error}", dir.display());
            return ExitCode::from(EXIT_USAGE);
        }
    }
    if html && loaded.len() > 1 {
        eprintln!("mcpsim run: --format html writes one scenario's page; name one file, or write a folder of pages with --html-out DIR");
        return ExitCode::from(EXIT_USAGE);
    }
    let faults = match FaultKind::parse_list(&args.faults) {
        Ok(kinds) => kinds,
        Err(message) => {
            eprintln!("mcpsim run: {message}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let server = match args.mutant.as_deref() {
        None => ServerUnderTest::from(&notes_server_factory()),
        Some(name) => match mutants::find(name) {
            Some(mutant) => mutant.server(),
            None => {
                let names: Vec<&str> = mutants::MUTANTS.iter().map(|m| m.name).collect();
                eprintln!(
                    "mcpsim run: no mutant is named {name:?}; the zoo: {} (`mcpsim mutants` says what each one gets wrong)",
                    names.join(", ")
                );
                return ExitCode::from(EXIT_USAGE);
            }
        },
    };
    // What the reproduction needs besides the file and the seed.
    let flags = runner::reproduce_flags(matches!(args.scheduler, SchedulerArg::Scripted), &faults, args.mutant.as_deref());
    let output = Output { format, pages: html || args.html_out.is_some() };
    let mut stdout = std::io::stdout().lock();
    let mut summaries = Vec::new();
    let mut written = Vec::new();
    for item in &loaded {
        let summary = match &args.out {
            None => run_seeds(item, &args, &faults, &server, output, &mut stdout),
            Some(dir) => {
                let format = format.unwrap_or(Format::Text);
                let mut transcript = Vec::new();
                let summary = run_seeds(item, &args, &faults, &server, output, &mut transcript);
                let path = dir.join(format!("{}.{}", item.scenario.name, extension(format)));
                if let Err(error) = std::fs::write(&path, transcript) {
                    eprintln!("mcpsim run: cannot write {}: {error}", path.display());
                    return ExitCode::from(EXIT_USAGE);
                }
                written.push(path);
                summary
            }
        };
        summaries.push(summary);
    }
    let page = |summary: &Summary, item: &Loaded, up: Option<(&str, &str)>| {
        summary.failed.as_ref().or(summary.first.as_ref()).map(|report| {
            let reproduce = format!("mcpsim run {} --seed {}{flags}", summary.path, report.seed);
            let server = args.mutant.as_ref().map(|m| format!("mutant {m}")).unwrap_or_else(|| "the real server".into());
            let input =
                RunInput { report, scenario: &item.scenario, reproduce: &reproduce, server: &server, faults_on: &faults, up, note: None };
            html::run_page(&input)
        })
    };
    if html {
        if let Some(text) = summaries.first().zip(loaded.first()).and_then(|(summary, item)| page(summary, item, None)) {
            let _ = stdout.write_all(text.as_bytes());
        }
    }
    if let Some(folder) = &args.html_out {
        if let Err(error) = write_pages(folder, &summaries, &loaded, &unreadable, &page) {
            eprintln!("mcpsim run: cannot write the pages into {}: {error}", folder.display());
            return ExitCode::from(EXIT_USAGE);
        }
    }
    let mut table = render_table(&summaries, &unreadable, &flags);
    if let (Some(dir), Some(first)) = (&args.out, written.first()) {
        let name = first.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let more = if written.len() > 1 { format!(" and {} more", written.len() - 1) } else { String::new() };
        table.push_str(&format!("transcripts written to {}: {name}{more}\n", dir.display()));
    }
    if table_to_stderr {
        eprint!("{table}");
    } else {
        let _ = write!(stdout, "{table}");
    }
    let _ = stdout.flush();
    if !unreadable.is_empty() {
        ExitCode::from(EXIT_USAGE)
    } else if summaries.iter().any(|s| s.failed.is_some()) {
        ExitCode::from(EXIT_FAILED)
    } else {
        ExitCode::SUCCESS
    }
}

/// The page of a scenario's run, linking up to the given page.
type PageOf<'a> = dyn Fn(&Summary, &Loaded, Option<(&str, &str)>) -> Option<String> + 'a;

/// A folder of pages: one per scenario (a name used twice gets a numbered page), and an index of them.
fn write_pages(folder: &Path, summaries: &[Summary], loaded: &[Loaded], unreadable: &[String], page: &PageOf<'_>) -> std::io::Result<()> {
    std::fs::create_dir_all(folder)?;
    let mut rows = Vec::new();
    let mut taken = BTreeSet::new();
    for (summary, item) in summaries.iter().zip(loaded) {
        let mut file = format!("{}.html", summary.name);
        let mut copy = 1;
        while !taken.insert(file.clone()) {
            copy += 1;
            file = format!("{}-{copy}.html", summary.name);
        }
        if let Some(text) = page(summary, item, Some(("index.html", "all scenarios"))) {
            std::fs::write(folder.join(&file), text)?;
        }
        rows.push(html::IndexRow {
            scenario: summary.name.clone(),
            lesson: item.scenario.lesson_line(),
            href: file,
            seeds: summary.seeds,
            messages: summary.messages,
            interleavings: summary.interleavings,
            result: summary.failed.as_ref().map_or_else(|| "ok".to_string(), |report| format!("FAIL (seed {})", report.seed)),
            failed: summary.failed.is_some(),
        });
    }
    std::fs::write(folder.join("index.html"), html::index_page("mcpsim run", &rows, unreadable))
}

fn run_seeds(
    item: &Loaded,
    args: &RunArgs,
    faults: &[FaultKind],
    server: &ServerUnderTest,
    output: Output,
    out: &mut impl Write,
) -> Summary {
    let mut messages = 0;
    let mut orders = BTreeSet::new();
    let mut failed = None;
    let mut first = None;
    let last_seed = args.seed.saturating_add(args.seeds - 1);
    // The scenario's cluster is worked out once for every seed.
    let prepared = runner::Prepared::new(&item.scenario);
    for seed in args.seed..=last_seed {
        let mut options = seed_options(&item.scenario, seed, server, faults, args.scheduler);
        options.record_transcript = output.format.is_some() || output.pages || seed == args.seed;
        let report = runner::run_prepared(&prepared, &options);
        messages += report.deliveries;
        orders.insert(report.decisions.choices().map(|d| (d.options, d.chosen)).collect::<Vec<_>>());
        if !report.passed() {
            failed = Some(report);
            break;
        }
        if first.is_none() {
            first = Some(report);
        }
    }
    if let Some(format) = output.format {
        // The failing run is the one worth reading; otherwise the first seed's.
        if let Some(report) = failed.as_ref().or(first.as_ref()) {
            let rendered = match (format, &args.trace_client) {
                (Format::McpTrace, Some(client)) => mcp_trace::render_client(&report.transcript, client)
                    .expect("the client was checked against the scenario's declarations"),
                _ => report.transcript.render(format),
            };
            let _ = write!(out, "{rendered}");
            if matches!(format, Format::Text | Format::Compact) {
                let _ = writeln!(out);
            }
        }
    }
    Summary {
        name: item.scenario.name.clone(),
        path: item.path.clone(),
        seeds: failed.as_ref().map_or(args.seeds, |f| f.seed - args.seed + 1),
        messages,
        interleavings: orders.len(),
        first: if output.pages && failed.is_none() { first } else { None },
        failed,
    }
}

/// The options `mcpsim run` runs `seed` with (the transcript recorded).
fn seed_options(scenario: &Scenario, seed: u64, server: &ServerUnderTest, faults: &[FaultKind], scheduler: SchedulerArg) -> RunOptions {
    let mut options = RunOptions { check_determinism: true, ..RunOptions::seeded(seed).with_server(server) };
    options.scheduler = match scheduler {
        SchedulerArg::Random => SchedulerChoice::Random,
        SchedulerArg::Scripted => SchedulerChoice::Scripted,
    };
    if !faults.is_empty() {
        options.faults = Some(explore::fault_plan(scenario, seed, faults));
        options.check_statelessness = false;
    }
    options
}

/// The bytes `mcpsim run SCENARIO --seed SEED --format jsonl [--faults …] [--mutant …]` prints on stdout for
/// one scenario: the same options and the same renderer, in this process (`explore --check-determinism`
/// compares them with another process's).
pub(crate) fn jsonl_transcript(scenario: &Scenario, seed: u64, server: &ServerUnderTest, faults: &[FaultKind]) -> String {
    let report = runner::run(scenario, &seed_options(scenario, seed, server, faults, SchedulerArg::Random));
    report.transcript.render(Format::Jsonl)
}

pub(crate) fn load(paths: &[PathBuf], unreadable: &mut Vec<String>) -> Vec<Loaded> {
    if paths.is_empty() {
        let default = Path::new("scenarios");
        if default.is_dir() {
            return load(&[default.to_path_buf()], unreadable);
        }
        // No ./scenarios here: run the library built into the binary.
        eprintln!("(no ./scenarios folder here: running the {} scenarios built into mcpsim)", library::SCENARIOS.len());
        return library::SCENARIOS.iter().filter_map(|(file, text)| parse(&format!("<embedded>/{file}"), file, text, unreadable)).collect();
    }
    let mut files = Vec::new();
    let mut embedded = Vec::new();
    for path in paths {
        if path.is_dir() {
            match scenario_files(path) {
                Ok(found) if found.is_empty() => unreadable.push(format!("{}: no .{EXTENSION} files in this folder", path.display())),
                Ok(found) => files.extend(found),
                Err(error) => unreadable.push(format!("{}: cannot list the folder: {error}", path.display())),
            }
        } else if path.is_file() {
            files.push(path.clone());
        } else {
            // Not a file here: a scenario of the library (or the zoo), as `mcpsim explore` accepts them.
            let name = path.to_string_lossy();
            match mutants::embedded(&name) {
                Some((file, text)) => {
                    if let Some(item) = parse(file, file, text, unreadable) {
                        embedded.push(item);
                    }
                }
                None => unreadable.push(not_found(&name)),
            }
        }
    }
    let mut loaded = Vec::new();
    for file in files {
        let shown = file.display().to_string();
        match std::fs::read_to_string(&file) {
            Ok(text) => {
                let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| shown.clone());
                if let Some(item) = parse(&shown, &name, &text, unreadable) {
                    loaded.push(item);
                }
            }
            Err(error) => unreadable.push(format!("{shown}: cannot read: {error}")),
        }
    }
    loaded.extend(embedded);
    loaded
}

/// `mcpsim scenarios`: every library and zoo scenario, each a situation with the guarantee it shows (the first
/// line of its opening comment), the course's lessons marked.
pub(crate) fn list_scenarios() -> ExitCode {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "The scenario library: each one a situation, with the guarantee it shows. To learn them in order,");
    let _ = writeln!(out, "take the course (mcpsim course): L1-L9 below mark the scenarios its lessons run.\n");
    let entries: Vec<(&str, &str)> = library::SCENARIOS.iter().chain(mutants::ZOO_SCENARIOS.iter()).copied().collect();
    let width = entries.iter().map(|(file, _)| file.trim_end_matches(".sim").len()).max().unwrap_or(0);
    for (file, text) in entries {
        let name = file.trim_end_matches(".sim");
        let lesson = text
            .lines()
            .filter_map(|line| line.strip_prefix('#'))
            .map(str::trim)
            .find(|line| !line.is_empty())
            .unwrap_or("")
            .trim_start_matches("Guarantee taught:")
            .trim();
        let mark = match crate::cli::course::lesson_of_scenario(name) {
            Some(course) => format!("L{}", course.number),
            None => String::new(),
        };
        let _ = writeln!(out, "{}", common::hanging(&format!("{mark:<3}{name:<width$}  "), lesson));
    }
    let _ = writeln!(out, "\nRun one: mcpsim run NAME   Explore one: mcpsim explore NAME --seeds 1000");
    let _ = writeln!(out, "(names work in place of paths)");
    ExitCode::SUCCESS
}

/// "No such scenario", with the closest library name and where to find the rest.
pub(crate) fn not_found(name: &str) -> String {
    let stem = name.trim_end_matches(".sim");
    let closest = library::SCENARIOS
        .iter()
        .chain(mutants::ZOO_SCENARIOS.iter())
        .map(|(file, _)| file.trim_end_matches(".sim"))
        .map(|candidate| (strsim::levenshtein(stem, candidate), candidate))
        .min();
    let hint = match closest {
        Some((distance, candidate)) if distance <= stem.len().max(4) / 2 => format!("; did you mean {candidate}?"),
        _ => String::new(),
    };
    format!("{name}: no such file, and no library scenario has that name{hint} (`mcpsim scenarios` lists the library)")
}

fn parse(path: &str, file_name: &str, text: &str, unreadable: &mut Vec<String>) -> Option<Loaded> {
    let name = file_name.strip_suffix(&format!(".{EXTENSION}")).unwrap_or(file_name);
    match scenario::parse(path, name, text) {
        Ok(scenario) => Some(Loaded { scenario, path: path.to_string() }),
        Err(error) => {
            unreadable.push(error.to_string());
            None
        }
    }
}

/// The `.sim` files under `folder` (recursively), sorted.
fn scenario_files(folder: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut pending = vec![folder.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == EXTENSION) {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}

fn render_table(summaries: &[Summary], unreadable: &[String], flags: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    // Within 100 columns: the numbers and a result as long as "FAIL (seed 1000000)" take 52, so a longer name
    // wraps (at its hyphens) onto lines of its own.
    let width = summaries.iter().map(|s| s.name.len()).max().unwrap_or(8).clamp(8, common::COLUMNS_MAX - 52);
    let _ = writeln!(out, "{:<width$}  {:>6}  {:>9}  {:>13}  result", "scenario", "seeds", "messages", "interleavings");
    for summary in summaries {
        let result = match &summary.failed {
            None => "ok".to_string(),
            Some(report) => format!("FAIL (seed {})", report.seed),
        };
        let name = common::wrap(&summary.name, width);
        let _ =
            writeln!(out, "{:<width$}  {:>6}  {:>9}  {:>13}  {result}", name[0], summary.seeds, summary.messages, summary.interleavings);
        for rest in &name[1..] {
            let _ = writeln!(out, "  {rest}");
        }
    }
    let failed: Vec<&Summary> = summaries.iter().filter(|s| s.failed.is_some()).collect();
    for summary in &failed {
        let report = summary.failed.as_ref().expect("filtered");
        let _ = writeln!(out, "\nFAIL {} (seed {})", summary.path, report.seed);
        for failure in &report.failures {
            let _ = writeln!(out, "  {}", failure.to_string().replace('\n', "\n  "));
        }
        let _ = writeln!(out, "  reproduce: mcpsim run {} --seed {}{flags} --format text", summary.path, report.seed);
    }
    for problem in unreadable {
        let _ = writeln!(out, "\nerror: {problem}");
    }
    let passed = summaries.len() - failed.len();
    let _ = writeln!(
        out,
        "\n{passed} of {} scenario(s) passed{}",
        summaries.len(),
        if unreadable.is_empty() { String::new() } else { format!("; {} could not be read", unreadable.len()) }
    );
    out
}
