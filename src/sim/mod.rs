//! The deterministic cluster simulator: one world a scenario is played in. `ARCHITECTURE.md` is the map.
//!
//! * [`engine`]: virtual time, seeded randomness, the network, the scheduler, faults, and the cluster loop.
//! * [`actors`]: instances (the unchanged servers), the note and replay stores, gateway backends, the admin.
//! * [`explore`]: many seeds, exhaustive orders, the mutant zoo, shrinking and reproducers.
//! * [`render`]: transcripts (text, JSON Lines, Mermaid) and mcp-trace exports.
//! * [`runner`]: a scenario played on a cluster, then judged.
//! * [`library`]: the scenario library, embedded so `mcpsim run` works anywhere.
//!
//! Nothing in this module reads the wall clock or lets a hash map's order reach output.

pub mod actors;
pub mod engine;
pub mod explore;
pub mod library;
pub mod render;
pub mod runner;
pub mod world;
