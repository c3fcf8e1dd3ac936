//! `mcpsim seed`: load a deployment's notes into a shared store (SQLite or PostgreSQL), creating or migrating
//! its schema first. Idempotent: running it again restores the seeded notes exactly and reports that nothing
//! changed. Consumed confirmations (nonces) are never touched.

use crate::cli::serve::STORE_VARIABLE;
use crate::config::Deployment;
use crate::stores::spec::SeedError;
use crate::stores::{seed, StoreSpec};
use std::path::PathBuf;
use std::process::ExitCode;

/// Invalid arguments or configuration: `EXIT_USAGE`; the store could not be opened or written: `EXIT_FAILED`.
use super::common::{EXIT_FAILED, EXIT_USAGE};

const AFTER_HELP: &str = "\
Examples:
    mcpsim seed --store sqlite:./fleet.db                          # the embedded demo's seven notes
    mcpsim seed --store sqlite:./fleet.db --config deployment.toml # the [[notes]] of a deployment
    MCPSIM_STORE=postgres://mcpsim:secret@db.internal/mcpsim mcpsim seed --config deployment.toml

Each seeded note is inserted, or restored to exactly its configured title, URI and body; afterwards the
seeded notes list first, in the file's order, and any other notes in the store are kept after them.
Running it again changes nothing and says so. Servers may be running meanwhile: the seed is one transaction.

Exit status: 0 when the notes are in the store; 1 if the store could not be opened or written;
2 for invalid arguments or configuration.";

/// Load a deployment's notes into a shared store (idempotent).
#[derive(Debug, clap::Args)]
#[command(after_long_help = AFTER_HELP, after_help = "Run `mcpsim seed --help` for examples.")]
pub struct SeedArgs {
    /// The store to load: sqlite:PATH | postgres:URL.
    ///
    /// Created (with its schema) if it does not exist yet. Also read from MCPSIM_STORE, which keeps a
    /// database password out of the process list. `memory` cannot be seeded: it lives inside one
    /// `mcpsim serve` process, which loads it from its --config at start.
    #[arg(long, value_name = "SPEC", env = STORE_VARIABLE, hide_env_values = true, value_parser = crate::cli::serve::StoreSpecParser)]
    pub store: StoreSpec,

    /// Deployment file (TOML) whose `[[notes]]` to load [default: the embedded demo].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

pub fn run(args: SeedArgs) -> ExitCode {
    match seed_store(&args) {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err((message, exit_code)) => {
            eprintln!("mcpsim seed: {message}");
            ExitCode::from(exit_code)
        }
    }
}

fn seed_store(args: &SeedArgs) -> Result<String, (String, u8)> {
    let (deployment, source) = match &args.config {
        None => (Deployment::demo(), "the embedded demo".to_string()),
        Some(path) => {
            let deployment = Deployment::load(path)
                .map_err(|error| (format!("{error}. Fix the file, or omit --config to seed the embedded demo."), EXIT_USAGE))?;
            (deployment, path.display().to_string())
        }
    };
    let notes = deployment.notes();
    if notes.is_empty() {
        return Err((format!("{source} has no [[notes]]: nothing to seed"), EXIT_USAGE));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| (format!("cannot start the async runtime: {error}"), EXIT_FAILED))?;
    let report = runtime.block_on(seed(&args.store, &notes)).map_err(|error| match error {
        SeedError::MemoryIsPerProcess => (error.to_string(), EXIT_USAGE),
        SeedError::Store(error) => (error.to_string(), EXIT_FAILED),
    })?;
    Ok(format!("seeded {} with the {} notes of {source}: {report}", args.store, notes.len()))
}
