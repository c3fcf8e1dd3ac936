//! The deterministic cluster simulator.
//!
//! # Module map
//!
//! * [`clock`]: virtual time, the only time (with per-instance skew).
//! * [`random`]: seeded ChaCha8 streams, one per purpose.
//! * [`message`] and [`network`]: what travels, and the envelopes in flight with per-link latency.
//! * [`scheduler`]: which envelope is delivered next (scripted, seeded random, replayed log).
//! * [`actors`]: instances (the unchanged handlers), the note and replay stores, clients, the admin.
//! * [`faults`]: crashes, drops, duplicates, delays, slow stores, clock skew and key rotation, drawn from
//!   the seed and recorded in the decision log; clients retry what a fault lost.
//! * [`cluster`]: the engine: delivers one envelope at a time and runs the receiving actor until it blocks.
//! * [`history`]: client operations and store effects, for the checker.
//! * [`scenario`]: the scenario language: model and parser.
//! * [`runner`]: wires a scenario into a cluster and runs its steps.
//! * [`check`]: expectations and the safety properties every run must keep.
//! * [`transcript`]: text, JSON Lines and Mermaid renderings of a run.
//! * [`mcp_trace`]: a run's client traffic in the independent trace validator's format.
//! * [`library`]: the scenario library, embedded so `mcpsim run` works anywhere.
//!
//! Handlers are identical here and in the real servers: an instance runs `handle_message` over a
//! `NotesServer` whose ports are message-passing clients of the store actors. Nothing in this module reads
//! the wall clock or lets a hash map's order reach output.

pub mod actors;
pub mod check;
pub mod clock;
pub mod cluster;
pub mod exhaustive;
pub mod explore;
pub mod faults;
pub mod history;
pub mod library;
pub mod mcp_trace;
pub mod message;
pub mod mutants;
pub mod network;
pub mod random;
pub mod reproducer;
pub mod runner;
pub mod scenario;
pub mod scheduler;
pub mod transcript;
