//! The ground floor of the simulator: virtual time ([`clock`]), seeded randomness ([`random`]), what travels
//! ([`message`]) and the envelopes in flight ([`network`]), who is delivered next ([`scheduler`]), seeded
//! fault plans ([`faults`]), and the few-entry maps kept by key ([`sorted`]). Nothing here knows an actor or
//! a server; the cluster that runs them is [`crate::sim::cluster`], two floors up.

pub mod clock;
pub mod faults;
pub mod message;
pub mod network;
pub mod random;
pub mod scheduler;
pub(crate) mod sorted;
