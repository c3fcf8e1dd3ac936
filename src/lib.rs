//! mcpsim: a deterministic, actor-based cluster simulator for stateless MCP 2026-07-28 servers, and the
//! reference servers it simulates, runnable for real. `ARCHITECTURE.md` is the map.

pub mod assembly;
pub mod cli;
pub mod config;
pub mod framework;
pub mod live;
pub mod oracle;
pub mod play;
pub mod policy;
pub mod scenario;
pub mod servers;
pub mod sim;
pub mod stores;
pub mod transport;
pub mod wire;
