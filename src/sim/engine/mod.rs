//! The engine of the simulator: virtual time ([`clock`]), seeded randomness ([`random`]), what travels
//! ([`message`]) and the envelopes in flight ([`network`]), who is delivered next ([`scheduler`]), seeded
//! faults ([`faults`]), and the loop that delivers one envelope and runs one actor ([`cluster`]).

pub mod clock;
pub mod cluster;
pub mod faults;
pub mod message;
pub mod network;
pub mod random;
pub mod scheduler;
