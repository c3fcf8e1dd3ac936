//! mcpsim: a deterministic, actor-based cluster simulator for stateless MCP 2026-07-28 servers, and the
//! reference servers it simulates, runnable for real.
//!
//! # Layout
//!
//! Layers, lowest first. A module only imports from layers below it (see ARCHITECTURE.md).
//!
//! 1. [`wire`]: JSON-RPC envelope, `_meta`, routing headers, error codes and reasons, canonical JSON.
//! 2. [`policy`]: pure decisions: path-segment containment, principal → workspaces, `requestState` sealing.
//! 3. [`handlers`]: the stateless servers, written once against the store/clock ports in [`handlers::ports`].
//! 4. [`stores`]: implementations of those ports (in memory, SQLite, PostgreSQL; real clock and nonces).
//! 5. [`config`]: deployments (principals, tokens, workspaces, notes, keys) and the embedded demo;
//!    [`gateway_config`]: gateway deployments (backends, access policy, pins) and the embedded gateway demo.
//! 6. [`sim`]: the deterministic cluster simulator: actors, network, scheduler, scenarios, transcripts.
//! 7. [`transport`]: stdio and streamable HTTP adapters around the handlers.
//! 8. [`cli`]: the `mcpsim` command line.

pub mod cli;
pub mod config;
pub mod gateway_config;
pub mod handlers;
pub mod policy;
pub mod sim;
pub mod stores;
pub mod transport;
pub mod wire;
