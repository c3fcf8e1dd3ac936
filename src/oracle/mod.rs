//! The oracle: what happened in a run ([`history`]: every client operation and every effect), and the
//! judgement of it ([`check`]: the properties of `GUARANTEES.md` §4, one file each, from the history alone).
//!
//! The oracle shares no code with the servers it judges. It reads the wire in its own words ([`reading`]),
//! decides what lies inside what with its own model of `file` URIs ([`uri`], tested against the servers'
//! policy so that a disagreement is a finding), and knows who may use which workspace from its own copy of the
//! grants ([`grants`]). World-neutral: the simulator records a history, and so does any other world.

pub mod check;
pub mod grants;
pub mod history;
pub mod outcome;
pub mod reading;
pub mod uri;
