//! `mcpsim demo` (being written).
use std::process::ExitCode;
#[derive(Debug, clap::Args)]
pub struct DemoArgs {}
pub fn run(_args: DemoArgs) -> ExitCode {
    ExitCode::FAILURE
}
