//! The simulated network: envelopes in flight, and per-link latency drawn from the seed.
//!
//! Nothing is delivered until the scheduler picks it. An envelope's `deliver_at_ms` (send time + the link's
//! latency) is the earliest it can arrive; the scheduler may pick any envelope in flight, so a later one can
//! overtake an earlier one (that is reordering, and the overtaken message simply arrives later). Delivering
//! moves the virtual clock to at least `deliver_at_ms`.

use crate::sim::engine::message::{ActorId, Payload, TaskId};
use crate::sim::engine::random;
use crate::sim::engine::sorted::SortedMap;
use rand_chacha::ChaCha8Rng;

/// Most envelopes in flight at once. A scenario that exceeds it is a runaway: the run stops with an error.
pub(crate) const IN_FLIGHT_MAX: usize = 4_096;

/// Default bounds of a link's one-way latency.
pub(crate) const LATENCY_MS_MIN_DEFAULT: u64 = 1;
pub(crate) const LATENCY_MS_MAX_DEFAULT: u64 = 10;

#[derive(Debug, Clone)]
pub(crate) struct Envelope {
    /// Assigned in send order; unique within a run.
    pub id: u64,
    pub from: ActorId,
    pub to: ActorId,
    pub deliver_at_ms: u64,
    /// The task that sent it (store calls); its reply goes back to this task.
    pub from_task: Option<TaskId>,
    /// The task waiting for it (store returns).
    pub to_task: Option<TaskId>,
    pub payload: Payload,
    /// Whether the scheduler may pick it yet (faults and client retries hold envelopes back).
    pub hold: Hold,
}

/// When a held-back envelope becomes eligible for delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Hold {
    /// Eligible now.
    Free,
    /// Eligible from this delivery number on, or earlier if nothing else is eligible.
    UntilDelivery(usize),
    /// Eligible only when nothing else is in flight (a client's retry after its timeout).
    UntilQuiet,
}

/// What the scheduler sees of an envelope in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ready {
    pub envelope: u64,
    pub from: ActorId,
    pub to: ActorId,
    pub deliver_at_ms: u64,
}

#[derive(Debug, Clone, Copy, thiserror::Error, PartialEq, Eq)]
#[error("more than {IN_FLIGHT_MAX} envelopes in flight: the scenario runs away")]
pub struct NetworkFull;

pub(crate) struct Network {
    /// By id: a new envelope's id is the largest, so sending appends. Boxed: an envelope is a few hundred
    /// bytes, and a removal shifts the entries after it (a runaway scenario has thousands in flight).
    in_flight: SortedMap<u64, Box<Envelope>>,
    next_id: u64,
    actor_count: usize,
    /// One-way latency of the link `from → to`, at `from * actor_count + to`.
    latency_ms: Vec<u64>,
}

impl Network {
    /// Draws every link's latency (in link order, so the draw does not depend on traffic) from `rng`.
    pub fn new(actor_count: usize, latency_ms_min: u64, latency_ms_max: u64, rng: &mut ChaCha8Rng) -> Network {
        let span = latency_ms_max.saturating_sub(latency_ms_min).saturating_add(1);
        let latency_ms = (0..actor_count * actor_count).map(|_| latency_ms_min + random::below(rng, span)).collect();
        Network { in_flight: SortedMap::new(), next_id: 1, actor_count, latency_ms }
    }

    pub(crate) fn latency_ms(&self, from: ActorId, to: ActorId) -> u64 {
        self.latency_ms[from * self.actor_count + to]
    }

    pub fn send(
        &mut self,
        from: ActorId,
        to: ActorId,
        now_ms: u64,
        from_task: Option<TaskId>,
        to_task: Option<TaskId>,
        payload: Payload,
    ) -> Result<u64, NetworkFull> {
        if self.in_flight.len() >= IN_FLIGHT_MAX {
            return Err(NetworkFull);
        }
        let id = self.next_id;
        self.next_id += 1;
        let deliver_at_ms = now_ms.saturating_add(self.latency_ms(from, to));
        let hold = Hold::Free;
        self.in_flight.insert(id, Box::new(Envelope { id, from, to, deliver_at_ms, from_task, to_task, payload, hold }));
        Ok(id)
    }

    /// Holds an envelope in flight back: it arrives `delay_ms` later and is eligible only as `hold` says.
    pub(crate) fn hold(&mut self, id: u64, delay_ms: u64, hold: Hold) {
        if let Some(envelope) = self.in_flight.get_mut(&id) {
            envelope.deliver_at_ms = envelope.deliver_at_ms.saturating_add(delay_ms);
            envelope.hold = hold;
        }
    }

    /// The envelopes the scheduler may pick for delivery number `next_delivery`, in id (send) order: the
    /// free ones and those whose hold has ended; if there are none, those still held for some deliveries;
    /// only if there are none of those either, those held until the network is quiet.
    #[cfg(test)]
    pub fn ready(&self, next_delivery: usize) -> Vec<Ready> {
        let mut ready = Vec::new();
        self.ready_into(next_delivery, &mut ready);
        ready
    }

    /// [`Network::ready`] into `ready` (emptied first), so the cluster reuses one buffer for every delivery.
    pub fn ready_into(&self, next_delivery: usize, ready: &mut Vec<Ready>) {
        let class = |e: &Envelope| match e.hold {
            Hold::Free => 0,
            Hold::UntilDelivery(from) if from <= next_delivery => 0,
            Hold::UntilDelivery(_) => 1,
            Hold::UntilQuiet => 2,
        };
        // One pass (the cluster asks before every delivery): a lower class found drops what was kept so far.
        let mut eligible = u8::MAX;
        ready.clear();
        for envelope in self.in_flight.values() {
            let class = class(envelope);
            if class < eligible {
                eligible = class;
                ready.clear();
            }
            if class == eligible {
                ready.push(Ready { envelope: envelope.id, from: envelope.from, to: envelope.to, deliver_at_ms: envelope.deliver_at_ms });
            }
        }
    }

    pub fn take(&mut self, id: u64) -> Option<Envelope> {
        self.in_flight.remove(&id).map(|envelope| *envelope)
    }

    pub fn get(&self, id: u64) -> Option<&Envelope> {
        self.in_flight.get(&id).map(|envelope| &**envelope)
    }

    /// Removes and returns (in id order) every envelope to or from `actor`.
    pub(crate) fn remove_touching(&mut self, actor: ActorId) -> Vec<Envelope> {
        let ids: Vec<u64> = self.in_flight.values().filter(|e| e.from == actor || e.to == actor).map(|e| e.id).collect();
        ids.into_iter().filter_map(|id| self.take(id)).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.in_flight.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::engine::random::{stream, Stream};

    #[test]
    fn latency_is_per_link_within_bounds_and_seeded() {
        let a = Network::new(4, 3, 7, &mut stream(9, Stream::Latency));
        let b = Network::new(4, 3, 7, &mut stream(9, Stream::Latency));
        for from in 0..4 {
            for to in 0..4 {
                assert!((3..=7).contains(&a.latency_ms(from, to)));
                assert_eq!(a.latency_ms(from, to), b.latency_ms(from, to));
            }
        }
    }

    #[test]
    fn envelopes_are_numbered_in_send_order_and_removed_by_actor() {
        let mut network = Network::new(3, 1, 1, &mut stream(1, Stream::Latency));
        let payload =
            || Payload::Return { call: "admin_delete", value: crate::sim::engine::message::StoreReturn::AdminDone { existed: true } };
        assert_eq!(network.send(0, 1, 10, None, None, payload()), Ok(1));
        assert_eq!(network.send(1, 2, 10, None, None, payload()), Ok(2));
        assert_eq!(network.send(2, 0, 10, None, None, payload()), Ok(3));
        assert_eq!(network.get(1).map(|e| e.deliver_at_ms), Some(11));
        let removed: Vec<u64> = network.remove_touching(1).iter().map(|e| e.id).collect();
        assert_eq!(removed, [1, 2]);
        assert_eq!(network.ready(1).iter().map(|r| r.envelope).collect::<Vec<_>>(), [3]);
    }

    #[test]
    fn held_envelopes_wait_for_their_delivery_or_for_quiet() {
        let mut network = Network::new(2, 1, 1, &mut stream(1, Stream::Latency));
        let payload =
            || Payload::Return { call: "admin_delete", value: crate::sim::engine::message::StoreReturn::AdminDone { existed: true } };
        for _ in 0..3 {
            network.send(0, 1, 0, None, None, payload()).unwrap();
        }
        network.hold(1, 50, Hold::UntilDelivery(4));
        network.hold(2, 0, Hold::UntilQuiet);
        let ids = |network: &Network, next| network.ready(next).iter().map(|r| r.envelope).collect::<Vec<_>>();
        assert_eq!(ids(&network, 2), [3], "held envelopes wait while a free one is in flight");
        assert_eq!(ids(&network, 4), [1, 3], "a hold until delivery 4 ends at delivery 4");
        assert_eq!(network.get(1).map(|e| e.deliver_at_ms), Some(51), "a delay moves the arrival");
        network.take(3);
        assert_eq!(ids(&network, 2), [1], "with nothing free, a delivery hold ends early");
        network.take(1);
        assert_eq!(ids(&network, 2), [2], "a retry waits until nothing else is in flight");
    }
}
