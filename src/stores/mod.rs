//! Stores: implementations of the handler ports. In memory here; databases later.
//!
//! The simulator wraps these same in-memory stores inside its store actors.

pub mod feed;
pub mod memory;
pub mod system;
