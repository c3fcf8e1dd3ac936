//! Wire layer: the bytes of MCP 2026-07-28 as plain types and pure functions.
//!
//! Nothing here knows about stores, keys, sockets or the simulator. Every function is total: any input
//! (hostile, truncated, deeply nested, huge) yields a value or a typed error, never a panic.

pub mod canonical;
pub mod errors;
pub mod headers;
pub mod jsonrpc;
pub mod meta;
pub mod result;

pub use errors::{Reason, RpcError};
pub use jsonrpc::{Incoming, RequestId};

/// The one protocol revision this crate speaks.
pub(crate) const PROTOCOL_VERSION: &str = "2026-07-28";
