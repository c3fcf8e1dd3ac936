//! `mcpsim import TRACE`: a recorded trace made a scenario (`src/import/`), and `mcpsim explore FILE
//! --perturb`, which varies it as a fleet would and shrinks what fails (`import::perturb`).

use super::common::{EXIT_FAILED, EXIT_HELD, EXIT_USAGE};
use crate::import::{self, perturb};
use crate::sim::render::transcript::Format;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Reads mcp-trace JSON Lines (what mcp-trace-capture 0.6.0 and `mcpsim record` write, and `mcpsim run
--format mcp-trace`) and writes a .sim scenario: each request as `send`, each round that answers a form as
`answer … for NAME` (found by the requestState it echoes, never by JSON-RPC id), each answer as `expect`
lines. The scenario runs in the simulator, on a live fleet and against a target. What could not be mapped
is listed at the top with its trace line. A malformed or truncated trace is refused with FILE:LINE.

Exit status: 0 the scenario was written; 2 the trace could not be read (FILE:LINE says why) or a usage error.

Examples:
  mcpsim import tests/traces/capture-http-notes-delete.jsonl --principal alice --out imported.sim
  mcpsim run imported.sim                                 # the simulator: the recorded answers hold
  mcpsim run --target targets/mcpsim-stdio.toml imported.sim   # real processes, same answers
  mcpsim import tests/traces/capture-http-notes-delete.jsonl --principal alice --own-keys \\
      --out broken.sim
  mcpsim explore broken.sim --perturb                     # round 2 on another instance fails: shrunk, saved
  mcpsim import trace.jsonl --principal '<redacted:3f9c2a1b7d4e>=alice' \\
      --mask result.structuredContent.at

docs/importing.md says what maps to what.")]
pub struct ImportArgs {
    /// The trace (JSON Lines, one event per line).
    pub trace: PathBuf,
    /// Write the scenario to FILE (default: standard output).
    #[arg(long, value_name = "FILE.sim")]
    pub out: Option<PathBuf>,
    /// The scenario's name in its header (default: the trace's file stem).
    #[arg(long)]
    pub name: Option<String>,
    /// The principal of the clients nothing in the trace identifies (`P`), or of the client whose credential
    /// (an `authorization` value or its redacted marker) contains MARKER (`MARKER=P`); repeatable.
    #[arg(long, value_name = "P|MARKER=P")]
    pub principal: Vec<String>,
    /// Instances to declare (1 to 16): every request goes to i1 unless --spread; perturbation moves them.
    #[arg(long, default_value_t = 2)]
    pub instances: usize,
    /// Send each round that answers a form to the instance after the one that showed the form.
    #[arg(long)]
    pub spread: bool,
    /// Give each instance a signing key of its own (a fleet without a shared key: a broken deployment, as
    /// `mcpsim serve` without --key-file is); default: one key every instance holds.
    #[arg(long)]
    pub own_keys: bool,
    /// A value that differs by design, expected present rather than equal: a dot path from the answer's
    /// root (`result.structuredContent.at`, `*` for any member or item); repeatable. Always masked: every
    /// requestState, an out-of-band page URL, result._meta.
    #[arg(long, value_name = "PATH")]
    pub mask: Vec<String>,
}

pub fn run(args: ImportArgs) -> ExitCode {
    let usage = |message: String| {
        eprintln!("mcpsim import: {message}");
        ExitCode::from(EXIT_USAGE)
    };
    if !(1..=import::INSTANCES_MAX).contains(&args.instances) {
        return usage(format!("--instances must be between 1 and {}", import::INSTANCES_MAX));
    }
    let source = args.trace.display().to_string();
    let bytes = match std::fs::read(&args.trace) {
        Ok(bytes) => bytes,
        Err(error) => return usage(format!("cannot read {source}: {error}")),
    };
    if bytes.len() > import::trace::TRACE_BYTES_MAX {
        return usage(format!("{source}: {} bytes; at most {} are read", bytes.len(), import::trace::TRACE_BYTES_MAX));
    }
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(error) => {
            let line = error.as_bytes()[..error.utf8_error().valid_up_to()].iter().filter(|&&b| b == b'\n').count() + 1;
            return usage(format!("{source}:{line}: not UTF-8 text (a trace is JSON Lines)"));
        }
    };
    let mut options = import::Options {
        source: source.clone(),
        instances: args.instances,
        spread: args.spread,
        own_keys: args.own_keys,
        ..Default::default()
    };
    for given in &args.principal {
        match given.rsplit_once('=') {
            Some((marker, principal)) if !marker.is_empty() && !principal.is_empty() => {
                options.principal_of.push((marker.to_string(), principal.to_string()));
            }
            Some(_) => return usage(format!("--principal {given:?}: write P or MARKER=P")),
            None => options.principal = Some(given.clone()),
        }
    }
    for path in &args.mask {
        if path.is_empty() || path.split('.').any(str::is_empty) {
            return usage(format!("--mask {path:?}: a dot path from the answer's root, e.g. result.structuredContent.at"));
        }
    }
    options.masks = args.mask.clone();
    let mut imported = match import::import(&text, &options) {
        Ok(imported) => imported,
        Err(error) => {
            eprintln!("mcpsim import: {error}");
            eprintln!("  (a trace is mcp-trace JSON Lines: one {{\"seq\",\"direction\",\"transport\",\"kind\",…}} event per line)");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let name = args.name.clone().unwrap_or_else(|| args.trace.file_stem().and_then(|s| s.to_str()).unwrap_or("imported").to_string());
    imported.text = format!("# {name}\n{}", imported.text);
    // What was written must parse: the import's own check, before anyone runs it.
    if let Err(error) = crate::scenario::parse("imported.sim", &name, &imported.text) {
        eprintln!("mcpsim import: the scenario written from {source} does not parse ({error}); this is a bug in mcpsim import");
        return ExitCode::from(EXIT_FAILED);
    }
    match &args.out {
        Some(path) => {
            if let Err(error) = std::fs::write(path, &imported.text) {
                return usage(format!("cannot write {}: {error}", path.display()));
            }
            eprintln!(
                "imported {source}: {} step(s), {} round(s) answering a form, {} thing(s) not mapped (listed at the top) -> {}",
                imported.steps,
                imported.rounds,
                imported.unmapped.len(),
                path.display()
            );
            for client in &imported.clients {
                eprintln!("  client {client}");
            }
            eprintln!("next: mcpsim run {}", path.display());
        }
        None => print!("{}", imported.text),
    }
    ExitCode::from(EXIT_HELD)
}

/// `mcpsim explore FILE --perturb`: the variants of FILE on `seeds`; a failing one shrunk and saved as a
/// `.sim` (`save`, default `perturbed-NAME.sim`), with its transcript in `format` beside it when asked.
/// Failures of a perturbed run printed (the first is the drift; the rest usually follow from it).
const FAILURES_SHOWN: usize = 2;

pub fn perturb_command(name: &str, seeds: &[u64], save: Option<&Path>, format: Option<Format>) -> ExitCode {
    let path = Path::new(name);
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) => {
            eprintln!(
                "mcpsim explore --perturb: cannot read {name}: {error} (--perturb takes a .sim file, e.g. one `mcpsim import` wrote)"
            );
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("scenario").to_string();
    println!(
        "perturbing {name}: each later request on each other instance (1 seed), each two consecutive requests raced ({} seeds)",
        seeds.len()
    );
    match perturb::perturb(name, &stem, &text, seeds) {
        Err(error) => {
            eprintln!("mcpsim explore --perturb: {error}");
            ExitCode::from(EXIT_USAGE)
        }
        Ok(perturb::Outcome::FailsVerbatim(failures)) => {
            println!("{name} fails as written, before any perturbation:");
            for failure in failures {
                println!("  {failure}");
            }
            ExitCode::from(EXIT_FAILED)
        }
        Ok(perturb::Outcome::Held { variants, skipped, plays }) => {
            println!(
                "held: {variants} variant(s), {plays} play(s) ({skipped} race(s) skipped: a round cannot race the form it answers); \
                 every answer as recorded wherever each round landed, no property broken"
            );
            ExitCode::from(EXIT_HELD)
        }
        Ok(perturb::Outcome::Found { finding, variants_played }) => {
            println!("FAILS after {variants_played} variant(s): {}", finding.changes.join(", "));
            for failure in finding.failures.iter().take(FAILURES_SHOWN) {
                println!("  {}", failure.replace('\n', "\n  "));
            }
            if finding.failures.len() > FAILURES_SHOWN {
                println!("  … and {} more (mcpsim run the saved file shows them all)", finding.failures.len() - FAILURES_SHOWN);
            }
            println!(
                "shrunk to {} request(s) on seed {} (removed: {})",
                finding.requests_left,
                finding.seed,
                if finding.removed.is_empty() { "none".to_string() } else { finding.removed.join(", ") }
            );
            let out = save.map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from(format!("perturbed-{stem}.sim")));
            let text =
                format!("# The shrunk failure of `mcpsim explore {name} --perturb`: {}.\n{}", finding.changes.join(", "), finding.text);
            if let Err(error) = std::fs::write(&out, text) {
                eprintln!("mcpsim explore --perturb: cannot write {}: {error}", out.display());
                return ExitCode::from(EXIT_USAGE);
            }
            println!("saved: {} (mcpsim run {} --seed {} replays it; --target/--live too)", out.display(), out.display(), finding.seed);
            if let Some(format) = format {
                let body = finding.report.transcript.render(format);
                let beside = out.with_extension(super::run::extension(format));
                if let Err(error) = std::fs::write(&beside, body) {
                    eprintln!("mcpsim explore --perturb: cannot write {}: {error}", beside.display());
                    return ExitCode::from(EXIT_USAGE);
                }
                println!("its transcript: {}", beside.display());
            }
            ExitCode::from(EXIT_FAILED)
        }
    }
}
