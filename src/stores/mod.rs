//! Stores: implementations of the handler ports. In memory (also inside the simulator's store actors) and in one
//! SQLite file (a fleet on one machine).

pub mod admin;
pub mod database;
pub mod feed;
pub mod memory;
pub mod sqlite;
pub mod system;

pub use admin::{SeedReport, StoreAdmin};
