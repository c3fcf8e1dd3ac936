//! Faults applied to the running cluster: a fault plan's faults fired at their delivery points (crashes,
//! key rotations, slow stores and outages before a delivery; drops, delays and duplicates of the chosen
//! envelope), a scenario's store outages, and crash triggers armed on a message reaching an actor. The plans
//! themselves are the engine's (`sim::engine::faults`, seeded and pure).

use super::recording::client_operation;
use super::{Cluster, CrashTrigger, Role, SimError};
use crate::oracle::history::Attempt;
use crate::policy::state::derived_key_secret;
use crate::scenario::model::{Moment, NOTE_STORE, REPLAY_STORE};
use crate::sim::engine::faults::{Fault, StoreName};
use crate::sim::engine::message::{ActorId, Payload};
use crate::sim::engine::network::{Envelope, Hold};

impl Cluster {
    /// An outage: `store` refuses its next `calls` calls as unavailable (a scenario's `store … unavailable`).
    pub(crate) fn outage(&mut self, store: StoreName, calls: u32) {
        let actor = self.actor(if store == StoreName::Notes { NOTE_STORE } else { REPLAY_STORE });
        self.event(actor, format!("outage: refuses its next {calls} call(s) as unavailable"));
        self.outages.push((store, calls));
    }

    pub(crate) fn arm(&mut self, trigger: CrashTrigger) {
        let from = trigger.sender.map(|sender| format!(" from {}", self.names[sender])).unwrap_or_default();
        let text = format!(
            "armed: crash {} {} {} receives {}{from}",
            self.instances[trigger.instance].name,
            if trigger.moment == Moment::Before { "before" } else { "after" },
            self.names[trigger.receiver],
            trigger.label
        );
        self.event(None, text);
        self.triggers.push(trigger);
    }

    /// Turns faults on: clients retry what gets lost from now on, and `faults` fire at their delivery
    /// points (a clock skew at once). Faults naming an instance that does not exist are ignored.
    pub(crate) fn enable_faults(&mut self, faults: &[Fault]) {
        self.history.clients_now_retry();
        let count = self.instances.len();
        for fault in faults {
            match fault {
                Fault::Crash { instance, .. } | Fault::Duplicate { instance, .. } | Fault::ClockSkew { instance, .. }
                    if *instance >= count => {}
                Fault::ClockSkew { instance, offset_ms } => {
                    self.record_fault(fault, 0);
                    self.instances[*instance].clock_offset_ms += offset_ms;
                    self.rebuild_service(*instance);
                }
                _ => self.planned_faults.push(fault.clone()),
            }
        }
    }

    /// Fires the faults due before delivery `next` that do not depend on which envelope is chosen.
    pub(super) fn fire_point_faults(&mut self, next: usize) {
        let due = |f: &Fault| {
            matches!(f, Fault::Crash { .. } | Fault::RotateKey { .. } | Fault::SlowStore { .. } | Fault::StoreUnavailable { .. })
                && f.at() <= next
        };
        while let Some(position) = self.planned_faults.iter().position(due) {
            let fault = self.planned_faults.remove(position);
            self.record_fault(&fault, next);
            match fault {
                Fault::Crash { instance, .. } => {
                    if self.instances[instance].up {
                        self.crash_then(instance, true);
                    } else {
                        self.event(Some(instance), "crash: already down (stays down)".into());
                    }
                }
                Fault::RotateKey { key_id, .. } => {
                    let every: Vec<usize> = (0..self.instances.len()).collect();
                    if let Err(why) = self.rotate(&every, &key_id, derived_key_secret(&key_id)) {
                        self.event(None, format!("the rotation did not happen: {why}"));
                    }
                }
                Fault::SlowStore { store, delay_ms, .. } => self.slow_stores.push((store, delay_ms)),
                Fault::StoreUnavailable { store, calls, .. } => self.outages.push((store, calls)),
                _ => {}
            }
        }
    }

    /// Fires the first fault due at delivery `next` that applies to the chosen envelope. Returns true when
    /// the envelope is not delivered now (dropped, or held back).
    pub(super) fn fire_envelope_fault(&mut self, next: usize, id: u64) -> Result<bool, SimError> {
        let Some(envelope) = self.network.get(id) else { return Ok(false) };
        let between_client_and_instance = matches!(envelope.payload, Payload::Request { .. } | Payload::Response { .. });
        let request = matches!(envelope.payload, Payload::Request { .. }) && matches!(self.roles[envelope.to], Role::Instance(_));
        let applies = |fault: &Fault| {
            fault.at() <= next
                && match fault {
                    Fault::Drop { .. } => between_client_and_instance,
                    Fault::Duplicate { .. } => request,
                    Fault::Delay { .. } => true,
                    _ => false,
                }
        };
        let Some(position) = self.planned_faults.iter().position(applies) else { return Ok(false) };
        let fault = self.planned_faults.remove(position);
        self.record_fault(&fault, next);
        match fault {
            Fault::Drop { .. } => {
                let envelope = self.network.take(id).expect("the chosen envelope is in flight");
                self.record_drop(&envelope, "fault: lost on the network".into());
                if let Some(operation) = client_operation(&envelope) {
                    self.lost(operation, "no answer (lost on the network)");
                }
                Ok(true)
            }
            Fault::Delay { delay_ms, overtaken_by, .. } => {
                self.network.hold(id, delay_ms, Hold::UntilDelivery(next + overtaken_by));
                Ok(true)
            }
            Fault::Duplicate { instance, .. } => {
                let Some(Envelope { payload: Payload::Request { operation, .. }, to, .. }) = self.network.get(id).cloned() else {
                    return Ok(false);
                };
                let Role::Instance(original) = self.roles[to] else { return Ok(false) };
                let target = if self.instances[instance].is_gateway == self.instances[original].is_gateway { instance } else { original };
                if let Some(sent) = self.sent_request(operation) {
                    self.send_attempt(sent, target, Attempt::Duplicate { of: self.history.first_attempt(operation) })?;
                }
                Ok(false)
            }
            _ => Ok(false),
        }
    }

    /// Fires the trigger of `moment` that matches the envelope `envelope` (still in flight), if one does.
    pub(super) fn fire_triggers(&mut self, moment: Moment, envelope: u64) {
        let Some(found) = self.network.get(envelope) else { return };
        let (receiver, sender, label) = (found.to, found.from, envelope_label(found));
        self.fire_matching(moment, receiver, sender, &label);
    }

    /// Fires the first armed trigger of `moment` for `label` reaching `receiver` from `sender`: its crash.
    pub(super) fn fire_matching(&mut self, moment: Moment, receiver: ActorId, sender: ActorId, label: &str) {
        let position = self
            .triggers
            .iter()
            .position(|t| t.moment == moment && t.receiver == receiver && t.label == label && t.sender.is_none_or(|s| s == sender));
        if let Some(position) = position {
            let trigger = self.triggers.remove(position);
            let when = if moment == Moment::Before { "before" } else { "after" };
            self.event(
                None,
                format!("trigger: {} {label} reaches {}: crash {}", when, self.names[receiver], self.instances[trigger.instance].name),
            );
            self.crash(trigger.instance);
        }
    }
}

/// The name a crash trigger matches: the store operation, or the JSON-RPC method of a request.
pub(super) fn envelope_label(envelope: &Envelope) -> String {
    match &envelope.payload {
        Payload::Call(call) => call.label().to_string(),
        Payload::Return { call, .. } => format!("return of {call}"),
        Payload::Request { body, .. } => body.method().unwrap_or_default(),
        Payload::Response { .. } => "response".to_string(),
    }
}
