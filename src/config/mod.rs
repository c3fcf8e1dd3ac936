//! Configuration, in one place: what a deployment is ([`deployment`]: principals, tokens, workspaces, notes,
//! keys, the state TTL; the embedded demo `demo.toml`) and what a gateway deployment adds ([`gateway`]:
//! backends, the access policy, pins; the embedded `gateway_demo.toml` and `gateway_pins.json`).
//!
//! Configuration only describes; [`crate::assembly`] builds servers from it.

pub mod deployment;
pub mod gateway;

pub use deployment::*;
