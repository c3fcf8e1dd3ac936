//! What the cluster writes down: the history the oracle judges (client operations and the effects the
//! stores, backends and admin committed, each attributed to the client operation that caused it) and the
//! transcript (deliveries, drops, events and faults, kept only when the execution records one).

use super::{Cluster, Task};
use crate::framework::ports::{ClaimAndDelete, ClaimOutcome, GuardedDelete};
use crate::oracle::history::{Effect, EffectKind, Export, NoResponse, OperationId, Outcome};
use crate::sim::engine::faults::Fault;
use crate::sim::engine::message::{ActorId, Payload, StoreCall, StoreReturn};
use crate::sim::engine::network::Envelope;
use crate::sim::render::transcript::{Body, Entry, Kind, Message};
use serde_json::Value;

impl Cluster {
    /// An effect of `operation` (or of nobody's, for the admin's), now, at the current delivery.
    pub(super) fn record_effect(&mut self, operation: Option<OperationId>, kind: EffectKind) {
        let at_ms = self.clock.elapsed_ms();
        self.history.effect(Effect { at_ms, delivery: self.deliveries, operation, kind });
    }

    /// Once the network is quiet: every request still pending got no answer (a notification never gets one),
    /// and its client says so unless it already retried it or it was the network's copy.
    pub(super) fn record_unanswered(&mut self) {
        for index in 0..self.history.operations().len() {
            if self.history.operations()[index].outcome != Outcome::Pending {
                continue;
            }
            let id = OperationId(index);
            let retried = self.history.attempts_of(self.history.first_attempt(id)).last() != Some(&id);
            let why = if self.history.operations()[index].notification { NoResponse::Notification } else { NoResponse::Lost };
            self.history.no_response(id, why);
            if retried || self.history.is_duplicate(id) {
                // The client already said it retried; a copy's answer was never awaited.
                continue;
            }
            let client = self.actor(&self.history.operations()[index].client);
            let text = match why {
                NoResponse::Notification => "no response: it was a notification".to_string(),
                NoResponse::Lost => {
                    let request = self.history.operations()[index].request_value.as_ref().and_then(|v| v.get("id")).cloned();
                    format!("no response to request id {} (lost: the outcome is unknown to this client)", request.unwrap_or(Value::Null))
                }
            };
            self.event(client, text);
        }
    }

    /// A line of the transcript about `actor` (or the world).
    pub(super) fn event(&mut self, actor: Option<ActorId>, text: String) {
        if self.transcript.recording {
            let time_ms = self.clock.elapsed_ms();
            self.transcript.push(Entry::Event { time_ms, actor, text });
        }
    }

    /// A planned fault fired before delivery `delivery`: the decision log keeps it (a replay fires it again).
    pub(super) fn record_fault(&mut self, fault: &Fault, delivery: usize) {
        let fired = fault.fired_at(delivery);
        if self.transcript.recording {
            let text = format!("fault: {}", fired.describe(&|i| self.instances[i].name.clone()));
            let time_ms = self.clock.elapsed_ms();
            self.transcript.push(Entry::Fault { time_ms, fault: fired.clone(), text });
        }
        self.decisions.faults.push(fired);
    }

    /// The envelope as the transcript shows it. A request is shown from the history, which already holds
    /// what its bytes encode (parsing them again would only cost time).
    pub(super) fn message_of(&self, envelope: &Envelope) -> Message {
        if let Payload::Request { operation, .. } = &envelope.payload {
            let operation = &self.history.operations()[operation.0];
            if let Some(value) = &operation.request_value {
                let kind = if value.is_object() && value.get("id").is_none() && value.get("page").is_none() {
                    Kind::Notify
                } else {
                    Kind::Request
                };
                return Message { kind, body: Body::Json(value.clone()), exact: operation.request_exact.clone() };
            }
        }
        Message::from_payload(&envelope.payload)
    }

    /// The client operation an envelope belongs to: its own request or response, or the request whose handling
    /// made the store or backend call (or awaits the return). Only transcripts need it (the HTML report groups
    /// each confirmation's messages by it); the history attributes effects the same way.
    pub(super) fn cause_of(&self, envelope: &Envelope) -> Option<OperationId> {
        match &envelope.payload {
            Payload::Request { operation, .. } | Payload::Response { operation, .. } => Some(*operation),
            Payload::Call(_) => envelope.from_task.and_then(|task| self.tasks.get(&task)).and_then(|t| t.cause.operation),
            Payload::Return { .. } => envelope.to_task.and_then(|task| self.tasks.get(&task)).and_then(|t| t.cause.operation),
        }
    }

    /// An envelope that will never be delivered, and why.
    pub(super) fn record_drop(&mut self, envelope: &Envelope, reason: String) {
        if self.transcript.recording {
            let entry = Entry::Dropped {
                time_ms: self.clock.elapsed_ms(),
                from: envelope.from,
                to: envelope.to,
                message: self.message_of(envelope),
                reason,
                cause: self.cause_of(envelope),
            };
            self.transcript.push(entry);
        }
    }

    /// Exports a backend made while one of its tasks ran: effects of the request that task serves.
    pub(super) fn record_exports(&mut self, backend: usize, operation: Option<OperationId>) {
        let Some(ledger) = self.gateway_world.as_ref().and_then(|world| world.backends[backend].ledger.clone()) else { return };
        let exports = ledger.exports();
        for record in exports.iter().skip(self.backends[backend].exports_seen) {
            let export = Export {
                export_id: record.export_id.clone(),
                key: record.key.clone(),
                principal: record.principal.clone(),
                destination: record.destination.clone(),
                note_ids: record.note_ids.clone(),
            };
            self.record_effect(operation, EffectKind::Exported(export));
        }
        self.backends[backend].exports_seen = exports.len();
    }

    /// What a store call changed or showed, as its return leaves the store: an effect of the operation it serves.
    pub(super) fn record_effects(&mut self, task: &Task, value: &StoreReturn) {
        let operation = task.cause.operation;
        let kind = match (&task.call, value) {
            (Some(StoreCall::ListNotes), StoreReturn::Notes(notes)) => Some(EffectKind::NotesListed { notes: notes.clone() }),
            (Some(StoreCall::DeleteIfInside { .. }), StoreReturn::Guarded(GuardedDelete::Deleted(note))) => {
                Some(EffectKind::NoteDeleted { note: note.clone(), nonce: task.cause.nonce.clone() })
            }
            (Some(StoreCall::Claim { claim }), StoreReturn::Claimed(ClaimOutcome::Claimed))
            | (Some(StoreCall::ClaimAndDelete { claim, .. }), StoreReturn::ClaimedAndDeleted(ClaimAndDelete::Deleted(_))) => {
                Some(EffectKind::NonceConsumed { nonce: claim.nonce.clone(), record: claim.record.to_json() })
            }
            (
                Some(
                    call @ (StoreCall::AdminDelete { .. }
                    | StoreCall::AdminMove { .. }
                    | StoreCall::AdminRename { .. }
                    | StoreCall::AdminSwap { .. }),
                ),
                StoreReturn::AdminDone { existed },
            ) => Some(EffectKind::AdminChanged { description: format!("{} {}", call.label(), call.to_json()), existed: *existed }),
            _ => None,
        };
        if let Some(kind) = kind {
            self.record_effect(operation, kind);
        }
    }
}

/// The client operation a request or response envelope belongs to.
pub(super) fn client_operation(envelope: &Envelope) -> Option<OperationId> {
    match &envelope.payload {
        Payload::Request { operation, .. } | Payload::Response { operation, .. } => Some(*operation),
        _ => None,
    }
}
