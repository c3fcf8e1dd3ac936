//! The `mcpsim` command line: wiring only. Each subcommand lives in its own module.

pub mod attack;
pub(crate) mod common;
pub mod course;
pub mod course_check;
pub mod demo;
pub(crate) mod determinism;
pub mod explore;
pub mod gateway_lab;
pub mod import;
pub mod keygen;
pub(crate) mod ledger;
pub mod live;
pub mod merge;
pub mod pins;
pub mod record;
pub mod run;
pub mod sandbox;
pub mod seed;
pub mod serve;
pub mod target;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Deterministic cluster simulator for stateless MCP 2026-07-28 servers, and the reference servers it simulates.
#[derive(Debug, Parser)]
#[command(name = "mcpsim", version, about, long_about = None, propagate_version = true, after_help = common::EXIT_TABLE)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Walk the MCP lesson exchange on two instances of the embedded demo, printing every message.
    ///
    /// server/discover → tools/list → notes_delete round 1 on i1 (a form and a signed requestState, decoded)
    /// → the user picks note-7 → round 2 on i2, a fresh id, deletes it → resources/list without note-7 →
    /// round 2 replayed on i1 (state_consumed). Runs in-process with a fixed key, clock and nonces, so the
    /// output is the same on every run. Exits 0 only if every step got the expected outcome.
    Demo(demo::DemoArgs),
    /// The course on the statelessness guarantee: the lessons in order, or one lesson's page.
    ///
    /// Nine lessons (one instance, the retry elsewhere, the crash, the race, decline and cancel, expiry and
    /// skew, the delete after the form, the replay store full, lost answers), each a question, a scenario to
    /// run, where to look in its HTML report, the mutant that breaks it, and an exercise (docs/course/).
    Course(course::CourseArgs),
    /// Run the notes server for real, over stdio or streamable HTTP, alone or as a fleet of instances.
    Serve(serve::ServeArgs),
    /// Review and approve the gateway's descriptor pins (quarantined tools stay hidden and refused until approved).
    #[command(subcommand_required = true)]
    Pins(pins::PinsArgs),
    /// Run scenarios against the deterministic simulated cluster, checking every expectation and safety property.
    Run(run::RunArgs),
    /// Load a deployment's notes into a shared store (sqlite:PATH or postgres:URL); idempotent.
    Seed(seed::SeedArgs),
    /// Make a new signing key for a fleet's shared key file (`serve --key-file`).
    Keygen(keygen::KeygenArgs),
    /// Explore one scenario under many seeds (interleavings), against the real server or a mutant.
    Explore(explore::ExploreArgs),
    /// Add up the results files of an exploration's shards (`explore --shard I/N --results FILE`) into what one
    /// run would have printed, refusing mixed builds or options; optionally its HTML report.
    Merge(merge::MergeArgs),
    /// List the mutant zoo: deliberately unsafe servers the checker must catch (simulator only).
    #[command(after_help = "\
Examples:
  mcpsim mutants                                                         # each mutant, its mistake, its scenario
  mcpsim explore zoo-move-races-the-accept --seeds 100 --mutant recheck-then-delete   # catch one, shrunk
  mcpsim run 05-accepts-race-for-different-candidates --mutant delete-then-claim      # read how it breaks
  mcpsim explore --all-mutants                                           # every one caught, the real server clean")]
    Mutants,
    /// Attack a fleet of any MCP server (a target file) with the MRTR battery: replays, tampering, another principal, …
    Attack(attack::AttackArgs),
    /// Bring your own gateway: malicious backends behind its replicas, its defences judged from both edges.
    GatewayLab(gateway_lab::GatewayLabArgs),
    /// (internal) What `run`/`explore`/`attack --target` start beside themselves: when its stdin ends (mcpsim
    /// gone, however it ended), kills every process of the target and removes the work directory.
    #[command(hide = true)]
    TargetWatchdog(target::WatchdogArgs),
    /// Replay a counterexample written by `mcpsim explore`, byte for byte.
    Replay(explore::ReplayArgs),
    /// Turn a recorded trace (mcp-trace JSON Lines) into a .sim scenario that replays it in every world.
    Import(import::ImportArgs),
    /// List the scenario library (and the zoo's scenarios): each a situation, with the guarantee it shows.
    ///
    /// Any name listed can be given to `mcpsim run` and `mcpsim explore` instead of a file path.
    #[command(after_help = "\
Examples:
  mcpsim scenarios                                    # the names, each with the guarantee it teaches
  mcpsim run 02-retry-lands-on-another-instance       # one of them: its transcript, then the table
  mcpsim explore 04-accepts-race-for-one-note --seeds 1000")]
    Scenarios,
    /// Record a real client's traffic with a real server as an mcp-trace file (HTTP proxy or stdio wrapper).
    Record(record::RecordArgs),
}

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            // Help and version exit 0; every usage error is 2, in every command (`common::EXIT_TABLE`).
            return match error.exit_code() {
                0 => ExitCode::SUCCESS,
                _ => ExitCode::from(common::EXIT_USAGE),
            };
        }
    };
    if matches!(
        cli.command,
        Command::Run(_)
            | Command::Explore(_)
            | Command::Merge(_)
            | Command::Mutants
            | Command::Replay(_)
            | Command::Pins(_)
            | Command::Scenarios
            | Command::Course(_)
    ) {
        end_quietly_on_closed_pipe();
    }
    match cli.command {
        Command::Demo(args) => demo::run(args),
        Command::Course(args) => course::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Pins(args) => pins::run(args),
        // `run` plays on one of three worlds: the target's processes, a live fleet, or the simulator.
        Command::Run(args) => match &args.target {
            Some(file) => target::run(&args, file),
            None if !args.live.is_empty() => live::run(&args),
            None => run::run(args),
        },
        Command::Seed(args) => seed::run(args),
        Command::Keygen(args) => keygen::run(args),
        Command::Explore(args) => explore::run(args),
        Command::Merge(args) => merge::run(args),
        Command::Mutants => explore::list_mutants(),
        Command::Replay(args) => explore::replay(args),
        Command::Attack(args) => attack::run(args),
        Command::GatewayLab(args) => gateway_lab::run(args),
        Command::TargetWatchdog(args) => target::watchdog(args),
        Command::Scenarios => run::list_scenarios(),
        Command::Record(args) => record::run(args),
        Command::Import(args) => import::run(args),
    }
}

/// For commands that only print: `mcpsim explore … | head` should end quietly when `head` closes the pipe, as
/// Unix tools do, instead of panicking on the next print. (Rust ignores SIGPIPE by default; servers keep that,
/// since a peer closing its socket must not kill them.)
fn end_quietly_on_closed_pipe() {
    // SAFETY: restoring the default disposition of SIGPIPE before any thread is started touches no memory.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// The `mcpsim …` lines under "Examples:" in `help`, each as its words up to a pipe, redirection, `&&` or
    /// comment (continuation lines joined).
    fn examples(help: &str) -> Vec<Vec<String>> {
        let mut lines = Vec::new();
        let mut in_examples = false;
        let mut pending = String::new();
        for line in help.lines() {
            if line.trim_end().ends_with("Examples:") {
                in_examples = true;
                continue;
            }
            if in_examples && !line.starts_with(' ') && !line.is_empty() {
                in_examples = false;
            }
            let text = line.trim();
            if !(in_examples && (text.starts_with("mcpsim ") || !pending.is_empty())) {
                continue;
            }
            let text = text.split(" #").next().unwrap_or("").trim_end();
            match text.strip_suffix('\\') {
                Some(start) => pending.push_str(start),
                None => {
                    pending.push_str(text);
                    lines.push(std::mem::take(&mut pending));
                }
            }
        }
        lines
            .iter()
            .map(|line| line.split_whitespace().take_while(|w| !matches!(*w, "|" | ">" | "&&" | "&")).map(str::to_string).collect())
            .collect()
    }

    #[test]
    fn every_subcommand_shows_examples_and_every_example_parses() {
        let command = Cli::command();
        let mut checked = Vec::new();
        // Every subcommand, and every subcommand of a group (pins review, pins approve).
        let mut subcommands: Vec<clap::Command> = Vec::new();
        // (Hidden ones are internal, e.g. `target-watchdog`, which mcpsim starts itself.)
        for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
            subcommands.push(sub.clone());
            subcommands.extend(sub.get_subcommands().filter(|inner| !inner.is_hide_set()).cloned());
        }
        for mut sub in subcommands {
            let name = sub.get_name().to_string();
            let help = sub.render_long_help().to_string();
            let found = examples(&help);
            assert!(!found.is_empty(), "`mcpsim {name} --help` shows no example:\n{help}");
            for words in found {
                if let Err(error) = Cli::try_parse_from(&words) {
                    panic!("the example `{}` in `mcpsim {name} --help` does not parse:\n{error}", words.join(" "));
                }
                checked.push(words[1].clone());
            }
        }
        for name in [
            "demo",
            "course",
            "serve",
            "pins",
            "run",
            "seed",
            "keygen",
            "explore",
            "merge",
            "mutants",
            "replay",
            "scenarios",
            "record",
            "import",
        ] {
            assert!(checked.iter().any(|checked| checked == name), "no example of `mcpsim {name}` was checked: {checked:?}");
        }
        assert!(checked.len() >= 30, "only {} examples found", checked.len());
    }
}
