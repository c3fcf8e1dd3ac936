//! The scheduler decides which envelope in flight is delivered next. It is the only source of interleaving.
//!
//! Three implementations of one trait: [`Scripted`] follows the network's own order (earliest arrival, then
//! send order), [`Random`] picks uniformly with a seeded ChaCha8 stream, and [`Replay`] repeats a recorded
//! [`DecisionLog`]. The cluster records every decision, whichever scheduler made it, so any run can be replayed.

use crate::sim::engine::faults::Fault;
use crate::sim::engine::network::Ready;
use crate::sim::engine::random::{self, Stream};
use rand_chacha::ChaCha8Rng;

pub trait Scheduler: Send {
    /// Short name for transcripts and reports.
    fn name(&self) -> &'static str;

    /// Picks one of `ready` (never empty, in send order) and returns its index.
    fn choose(&mut self, ready: &[Ready]) -> Result<usize, Divergence>;
}

/// One scheduling decision: how many envelopes were in flight and which (by position in send order) went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Decision {
    pub options: u32,
    pub chosen: u32,
}

/// Every decision of a run, in order, and every fault that fired (at the delivery where it fired): all a
/// replay needs besides the scenario and the seed.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DecisionLog {
    pub decisions: Vec<Decision>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<Fault>,
}

impl DecisionLog {
    /// Decisions that were real choices (more than one envelope in flight).
    pub fn choices(&self) -> impl Iterator<Item = &Decision> {
        self.decisions.iter().filter(|d| d.options > 1)
    }
}

/// A replayed log no longer matches the run (the scenario or the code changed since it was recorded).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("replay diverged at decision {position}: the log expected {expected} envelope(s) in flight, the run has {actual}")]
pub struct Divergence {
    pub position: usize,
    pub expected: u32,
    pub actual: u32,
}

/// The network's own order: the envelope that arrives first (ties: the one sent first). No exploration.
#[derive(Debug, Clone, Copy, Default)]
pub struct Scripted;

impl Scheduler for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }

    fn choose(&mut self, ready: &[Ready]) -> Result<usize, Divergence> {
        let earliest = ready.iter().enumerate().min_by_key(|(_, r)| (r.deliver_at_ms, r.envelope));
        Ok(earliest.map(|(index, _)| index).unwrap_or(0))
    }
}

/// Uniform choice among everything in flight, from the seed's scheduler stream.
pub struct Random {
    rng: ChaCha8Rng,
}

impl Random {
    pub fn new(seed: u64) -> Random {
        Random { rng: random::stream(seed, Stream::Scheduler) }
    }
}

impl Scheduler for Random {
    fn name(&self) -> &'static str {
        "random"
    }

    fn choose(&mut self, ready: &[Ready]) -> Result<usize, Divergence> {
        if ready.len() == 1 {
            // No choice to make: draw nothing, so sequential steps never consume randomness.
            return Ok(0);
        }
        Ok(random::below(&mut self.rng, ready.len() as u64) as usize)
    }
}

/// Repeats a recorded log exactly; a mismatch in the number of options is reported, never guessed at.
pub struct Replay {
    log: DecisionLog,
    position: usize,
}

impl Replay {
    pub fn new(log: DecisionLog) -> Replay {
        Replay { log, position: 0 }
    }
}

impl Scheduler for Replay {
    fn name(&self) -> &'static str {
        "replay"
    }

    fn choose(&mut self, ready: &[Ready]) -> Result<usize, Divergence> {
        let actual = ready.len() as u32;
        let position = self.position;
        let decision = self.log.decisions.get(position).copied();
        self.position += 1;
        match decision {
            Some(decision) if decision.options == actual && decision.chosen < actual => Ok(decision.chosen as usize),
            Some(decision) => Err(Divergence { position, expected: decision.options, actual }),
            None => Err(Divergence { position, expected: 0, actual }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(deliver_at: &[u64]) -> Vec<Ready> {
        deliver_at.iter().enumerate().map(|(i, t)| Ready { envelope: i as u64 + 1, from: 0, to: 1, deliver_at_ms: *t }).collect()
    }

    #[test]
    fn scripted_delivers_the_earliest_arrival_then_the_first_sent() {
        assert_eq!(Scripted.choose(&ready(&[9, 3, 5])), Ok(1));
        assert_eq!(Scripted.choose(&ready(&[4, 4, 4])), Ok(0));
    }

    #[test]
    fn random_is_seeded_and_explores_every_option() {
        let options = ready(&[1, 1, 1]);
        let draws = |seed| {
            let mut scheduler = Random::new(seed);
            (0..50).map(|_| scheduler.choose(&options).unwrap()).collect::<Vec<_>>()
        };
        assert_eq!(draws(5), draws(5));
        assert_ne!(draws(5), draws(6));
        let all = draws(5);
        assert!((0..3).all(|i| all.contains(&i)));
    }

    #[test]
    fn replay_repeats_and_reports_divergence() {
        let log = DecisionLog { decisions: vec![Decision { options: 3, chosen: 2 }, Decision { options: 2, chosen: 0 }], faults: vec![] };
        let mut replay = Replay::new(log);
        assert_eq!(replay.choose(&ready(&[1, 1, 1])), Ok(2));
        assert_eq!(replay.choose(&ready(&[1, 1, 1])), Err(Divergence { position: 1, expected: 2, actual: 3 }));
        assert_eq!(replay.choose(&ready(&[1])), Err(Divergence { position: 2, expected: 0, actual: 1 }));
    }
}
