//! mcpsim: a deterministic, actor-based cluster simulator for stateless MCP 2026-07-28 servers, and the
//! reference servers it simulates, runnable for real. `ARCHITECTURE.md` is the map of the code;
//! `GUARANTEES.md` states what is checked.
//!
//! # Embedding
//!
//! Run a scenario from your own `cargo test`, as turmoil and madsim users do. A failing run names each failing
//! step and prints the one command that repeats it byte for byte.
//!
//! ```
//! let scenario = mcpsim::parse("tests/retry-elsewhere.sim", r#"
//! ## Any instance can finish any retry: round 2 lands on i2, which never saw round 1.
//! use demo
//! instance i1
//! instance i2
//! client alice principal alice
//! send alice -> i1 tools/call {"name": "notes_delete", "arguments": {"workspaceUri": "file:///Users/alice/Documents/Notes", "title": "TPS report"}} as round1
//! expect round1 input_required
//! answer alice -> i2 accept {"note_id": "note-7", "confirm": true} as round2
//! expect round2 result.structuredContent.noteId = "note-7"
//! expect note note-7 absent
//! "#).unwrap();
//! mcpsim::run(&scenario, &mcpsim::Options::seed(7)).assert_passed();
//!
//! // Every interleaving of a library race, with every fault on: the real servers hold.
//! let race = mcpsim::library("04-accepts-race-for-one-note").unwrap();
//! mcpsim::explore(&race, &mcpsim::Options::default().faults(&mcpsim::FaultKind::ALL), 1..=50, 1).assert_clean();
//!
//! // A mutant of the zoo (a replay store per instance) is caught, with the command that shows how.
//! let race = mcpsim::library("05-accepts-race-for-different-candidates").unwrap();
//! let caught = mcpsim::explore(&race, &mcpsim::Options::default().mutant("replay-per-instance"), 1..=200, 1);
//! let (seed, command) = caught.first_failure().expect("the checker catches it");
//! assert_eq!(command, format!("mcpsim run 05-accepts-race-for-different-candidates.sim --seed {seed} --mutant replay-per-instance"));
//! ```
//!
//! With `default-features = false` this builds the simulator and the servers alone: no SQLite, PostgreSQL,
//! HTTP stack or command line.
//!
//! # Layout
//!
//! The modules are the layers of `ARCHITECTURE.md`, lowest first; a module only imports from layers below it.
//! They are private to the crate: the items re-exported here are the library's interface. The project's own
//! tests, benchmarks and examples reach below it through `testing`, hidden and promised to nobody.

mod embed;

pub use embed::{explore, library, load, parse, run, Explored, LoadError, Options, Report, Scheduler};
pub use oracle::check::Property;
pub use play::{Failure, FailureKind};
pub use scenario::{ParseError, Scenario};
pub use sim::engine::faults::FaultKind;
pub use sim::render::transcript::Format;

/// What the project's tests, benchmarks and examples name below the facade (not the library's interface).
#[doc(hidden)]
pub mod testing;

/// The `mcpsim` command's entry point, for `src/main.rs` (not the library's interface).
#[cfg(feature = "cli")]
#[doc(hidden)]
pub use cli::main;

// One module per layer, lowest first (the blank lines keep rustfmt from sorting them).
mod wire;

mod policy;

mod framework;

mod eras;

mod servers;

mod stores;

mod config;

mod assembly;

mod scenario;

mod oracle;

mod play;

mod sim;

#[cfg(feature = "cli")]
mod import;

#[cfg(feature = "http")]
mod live;

#[cfg(feature = "cli")]
mod target;

#[cfg(feature = "cli")]
mod record;

#[cfg(feature = "cli")]
mod transport;

#[cfg(feature = "cli")]
mod cli;
