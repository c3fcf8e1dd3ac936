//! The oracle: what happened in a run ([`history`]: every client operation and every effect), and the
//! judgement of it ([`check`]: the safety properties of `GUARANTEES.md`, from the history alone).
//!
//! World-neutral: the simulator records a history, and so would any other world a scenario is played in.

pub mod check;
pub mod history;
