//! The `mcpsim` command line: wiring only. Each subcommand lives in its own module.

pub mod demo;
pub mod serve;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Deterministic cluster simulator for stateless MCP 2026-07-28 servers, and the reference servers it simulates.
#[derive(Debug, Parser)]
#[command(name = "mcpsim", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Walk the lesson exchange (discover, tools/list, round 1, accept) against the embedded demo and print every message.
    Demo(demo::DemoArgs),
    /// Run the notes server for real, over stdio or streamable HTTP.
    Serve(serve::ServeArgs),
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Demo(args) => demo::run(args),
        Command::Serve(args) => serve::run(args),
    }
}
