//! The deterministic cluster simulator: one world a scenario is played in. `ARCHITECTURE.md` is the map.
//!
//! Floors, lowest first (each imports only from the floors below it):
//!
//! * [`engine`]: the ground floor: virtual time, seeded randomness, messages, the network, the scheduler,
//!   seeded fault plans. Beside it, [`render::transcript`], the record a run keeps (it imports only the engine).
//! * [`actors`]: instances (the unchanged servers), the note and replay stores, gateway backends, the admin.
//! * [`cluster`]: the actors on the network: the delivery loop, incarnations, the clients' retries, faults
//!   applied, the history and transcript recorded.
//! * [`world`] (the cluster as the interpreter's `World`) and [`runner`] (a scenario played on a cluster,
//!   then judged).
//! * [`explore`]: many seeds, exhaustive orders, the mutant zoo, shrinking and reproducers; and the rest of
//!   [`render`]: compact text, mcp-trace exports and HTML reports of runs and explorations.
//! * [`library`]: the scenario library, embedded so `mcpsim run` works anywhere.
//!
//! Nothing in this module reads the wall clock or lets a hash map's order reach output.

pub mod actors;
pub mod cluster;
pub mod engine;
pub mod explore;
pub mod library;
pub mod render;
pub mod runner;
pub mod world;
