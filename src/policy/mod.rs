//! Policy layer: pure decisions with no I/O — containment, authorization, state sealing.
//!
//! Knows the wire types; knows nothing of stores, handlers, transports or the simulator.

pub mod authorization;
pub mod containment;
pub mod origin;
pub mod state;
