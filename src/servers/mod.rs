//! The servers mcpsim ships, each in its own room, all written against [`crate::framework`]:
//!
//! * [`notes`]: the stateless notes server and its destructive, confirmed `notes_delete`;
//! * [`gateway`]: the security gateway in front of backend servers (its notes and issues backends included);
//! * [`fixture`]: the conformance fixture, an "everything server" for the official conformance suite.
//!
//! Nothing here knows where it runs: [`crate::assembly`] builds each of them over the ports it is given.

pub mod fixture;
pub mod gateway;
pub mod notes;
