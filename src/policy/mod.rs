//! Policy layer: pure decisions with no I/O — containment, authorization, state sealing, descriptor pins and
//! the descriptor scanner.
//!
//! Knows the wire types; knows nothing of stores, handlers, transports or the simulator.

pub mod authorization;
pub mod containment;
// Host/Origin rules of the HTTP transport and `serve` (the `cli` feature).
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub mod origin;
pub mod pinning;
pub mod scanner;
pub mod state;
