//! Stateless handlers: the protocol and security logic, written once.
//!
//! Handlers see bytes in and bytes out plus the ports in [`ports`] (stores, clock, nonces). They never see a
//! socket, a channel, a thread or the wall clock, and they keep no per-client state between requests: the same
//! code runs inside the simulator's instance actors and behind the real stdio and HTTP transports.

pub mod backends;
pub mod fixture;
pub mod gateway;
pub mod notes;
pub mod pipeline;
pub mod ports;
pub mod refusals;

pub use pipeline::{handle_exchange, handle_message, Exchange, NotificationFeed, Reply, RequestContext, Service, ServiceResponse};
