//! The request framework every server of ours is written against: the pipeline that takes raw bytes to a
//! service in the spec's order ([`pipeline`]), the ports through which a server reaches the world
//! ([`ports`]: stores, clock, nonces, change feeds), and the refusals every confirming server words alike
//! ([`refusals`]).
//!
//! A server sees bytes in and bytes out plus these ports. It never sees a socket, a channel, a thread or the
//! wall clock, and keeps no per-client state between requests: the same code runs inside the simulator's
//! instance actors and behind the real stdio and HTTP transports. The servers themselves are in
//! [`crate::servers`].

pub mod out_of_band;
pub mod pipeline;
pub mod ports;
pub mod refusals;

pub use pipeline::{handle_decoded_exchange, handle_exchange, handle_message, Exchange, Reply, RequestContext, Service};
