//! `mcpsim attack --target FILE`: the MRTR attack battery against a fleet of someone's server.

use crate::target::attack::{self, Verdict, ATTACKS};
use crate::target::file::Target;
use std::path::PathBuf;
use std::process::ExitCode;

use super::common::{EXIT_FAILED, EXIT_UNJUDGED, EXIT_USAGE};

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Each attack runs on a fresh fleet started as the target file says (docs/targets.md) and is judged from the
answers and the effect probe alone. A finding names the clause it breaks (SPEC-… ids of the spec digest, or
mcpsim's own refusal property) and prints every message that reproduces it, with the instance it went to.
Everything the target starts is contained (a cgroup of the run, or the MCPSIM_TARGET_RUN environment marker),
killed and counted at the end, also after Ctrl-C or a SIGKILL of mcpsim (docs/targets.md).

Exit status: 0 when every attack held (or did not apply); 1 on a finding; 2 for a target file that cannot be
read, an unknown attack name or an unsafe TMPDIR; 3 when an attack could not be judged (its honest flow did
not work), or processes of the target (or its work directory) were left at the end.

Examples:
  mcpsim attack --target targets/mcpsim-stdio.toml                        # the whole battery: exit 0
  mcpsim attack --target targets/mcpsim-http.toml --only header-body-mismatch
  mcpsim attack --target targets/broken-own-memory-store.toml --only replay-concurrent   # a finding
  mcpsim attack --target targets/mcpsim-stdio.toml --seed 7 --race-tries 10   # other instances, more races")]
pub struct AttackArgs {
    /// The target file (TOML) describing the server under test.
    #[arg(long, value_name = "FILE")]
    pub target: PathBuf,
    /// Run only these attacks (repeatable, or comma-separated).
    #[arg(long, value_name = "NAME", value_delimiter = ',')]
    pub only: Vec<String>,
    /// The seed each attack draws its instances from: which one mints the state, which ones it goes to next
    /// (logged with its messages).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// How many times a race attack (replay-concurrent) is tried, each on a fresh fleet whose instances have
    /// each answered a request first; the report says how many tries found it.
    #[arg(long, value_name = "N", default_value_t = attack::RACE_TRIES_DEFAULT as u64,
          value_parser = clap::value_parser!(u64).range(1..=attack::RACE_TRIES_MAX as u64))]
    pub race_tries: u64,
}

pub fn run(args: AttackArgs) -> ExitCode {
    let target = match Target::load(&args.target) {
        Ok(target) => target,
        Err(error) => {
            eprintln!("mcpsim attack: {error}\n  (docs/targets.md describes every key; targets/ has examples)");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let names: Vec<&str> = ATTACKS.iter().map(|a| a.name).collect();
    if let Some(unknown) = args.only.iter().find(|o| !names.contains(&o.as_str())) {
        eprintln!("mcpsim attack: there is no attack {unknown:?}; the battery: {}", names.join(", "));
        return ExitCode::from(EXIT_USAGE);
    }
    let mcpsim = match std::env::current_exe() {
        Ok(path) => path.display().to_string(),
        Err(error) => {
            eprintln!("mcpsim attack: cannot find the mcpsim binary for {{mcpsim}}: {error}");
            return ExitCode::from(EXIT_UNJUDGED);
        }
    };
    let run = match super::target::TargetRun::begin("attack") {
        Ok(run) => run,
        Err(status) => return status,
    };
    let found = crate::target::preflight(&target, &mcpsim, run.work_dir());
    if let Some(stopped) = super::target::after_preflight("attack", &args.target, found, false) {
        return stopped;
    }
    let options = attack::BatteryOptions { seed: args.seed, race_tries: args.race_tries as usize };
    let result = attack::run_battery(&target, &args.only, options, &mcpsim, run.work_dir());
    // Processes counted still running make the run unjudged, but never hide what the battery found: the
    // report is printed either way, and a finding still exits as one.
    let left_running = run.end();
    match result {
        Ok(reports) => {
            print!("{}", attack::render(&target, &reports, options));
            if reports.iter().any(|r| matches!(r.verdict, Verdict::Broken(_))) {
                ExitCode::from(EXIT_FAILED)
            } else if left_running || reports.iter().any(|r| matches!(r.verdict, Verdict::Inconclusive(_))) {
                ExitCode::from(EXIT_UNJUDGED)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(error) => {
            eprintln!("mcpsim attack: the fleet could not be started: {}", crate::target::shown(&error.to_string()));
            ExitCode::from(EXIT_UNJUDGED)
        }
    }
}
