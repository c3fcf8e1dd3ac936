//! Stores: implementations of the handler ports. In memory (also inside the simulator's store actors), in one
//! SQLite file (a fleet on one machine) and in PostgreSQL (a fleet across machines), chosen by a [`StoreSpec`].
//! `system` holds the real clock and nonce source, `deterministic` a hand-set clock and seeded nonces for
//! byte-stable output.
//!
//! The database stores match the memory store's semantics exactly; `tests/stores` runs one contract against all three.

pub mod admin;
pub mod database;
pub mod deterministic;
#[cfg(unix)]
pub mod dir;
pub mod feed;
pub mod gateway;
pub mod memory;
pub mod out_of_band;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod spec;
#[cfg(feature = "sqlite")]
pub mod sqlite;
pub mod system;

pub use admin::{SeedReport, StoreAdmin};
#[cfg(feature = "cli")]
pub use spec::seed;
pub use spec::{open, StoreSpec, Stores};
