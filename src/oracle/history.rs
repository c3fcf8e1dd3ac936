//! What happened in a run, as the checker needs it: every client operation (invoked → answered / no
//! answer) and every effect the stores committed, each attributed to the client operation that caused it.
//!
//! Attribution follows the tasks: a store call made while handling a request inherits that request's
//! operation, and the replay store's nested call to the note store inherits the nonce being claimed.
//!
//! Against real processes, an operation a fault left without its answer is recorded lost with the fault's
//! decision-log line ([`History::lost_to`]): it may have happened. A scenario's `retry NAME -> I` and a drawn
//! plan's automatic retries are [`Attempt::Retry`] of the first attempt, with their own request (a fresh id).

use super::grants::Grants;
use crate::framework::ports::Note;
use crate::wire::headers::RoutingHeaders;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// One client request (or notification) as the history knows it; index into the run's operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OperationId(pub usize);

/// One request (or notification) a client puts on the wire, as the interpreter built it: what a world sends
/// and what its history's [`Operation`] records.
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// The sending client, by its position among the scenario's clients.
    pub client: usize,
    /// The instance the scenario sends it to, by its position among the scenario's instances.
    pub instance: usize,
    /// The exact bytes a scenario wrote (a raw step's), when they are given; `None` when a client built the
    /// message, whose bytes are then `value`'s compact serialization ([`Outgoing::bytes`]).
    pub raw: Option<Vec<u8>>,
    /// What the bytes encode, when the client built them (a raw step's bytes are the world's to parse).
    pub value: Option<Value>,
    pub notification: bool,
    /// The HTTP routing headers sent with it: the ones a conforming client derives from the message, or the
    /// scenario's own (`headers {…}`).
    pub headers: RoutingHeaders,
    /// Whether the scenario wrote `headers` itself (then transcripts say what was sent).
    pub headers_written: bool,
    /// Index of the scenario step that sends it.
    pub step: usize,
    /// `as NAME`.
    pub name: Option<String>,
}

impl Outgoing {
    /// The exact bytes to put on the wire: the raw ones, or the compact serialization of the built value (a
    /// world that needs the text makes it here; the simulator's notes instances read the value itself).
    pub fn bytes(&self) -> std::borrow::Cow<'_, [u8]> {
        crate::wire::canonical::exact_or_compact(self.raw.as_deref(), self.value.as_ref())
    }

    /// What a history keeps of this message, for a world that sends its text: the JSON it is (the built value,
    /// or its bytes parsed), that text, and the text again when it is not the value's compact serialization
    /// (an operation's `request_exact`: the bytes verbatim).
    // Only the worlds over HTTP and processes (live, target) send text; the simulator sends the value.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn recorded(&self) -> (Option<Value>, String, Option<String>) {
        let bytes = self.bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        // Parsed from the bytes, not from their lossy text: bytes that are not UTF-8 are no JSON.
        let value = self.value.clone().or_else(|| serde_json::from_slice::<Value>(&bytes).ok());
        let exact = match (&self.raw, &value) {
            // A built message's bytes are its value's compact serialization.
            (None, Some(_)) => None,
            (_, Some(value)) if serde_json::to_string(value).ok().as_deref() == Some(text.as_str()) => None,
            _ => Some(text.clone()),
        };
        (value, text, exact)
    }
}

/// A run's record. Its fields are read through accessors and written only by the recorder below
/// (`History::request`, `attempt`, `answer`, `no_response`, `effect`, …): every world (the simulated cluster, a live fleet, a target's processes) records
/// through them, so no world writes a history its own way.
#[derive(Debug, Clone, Default)]
pub struct History {
    operations: Vec<Operation>,
    effects: Vec<Effect>,
    /// Who could use which workspace at the start (the oracle's own model); `Effect::Revoked` entries narrow it.
    initial_grants: Arc<Grants>,
    /// The notes the world started with (what a response may show is judged against every note known).
    initial_notes: Arc<Vec<Note>>,
    /// A gateway's approved descriptors at the start, by qualified tool name (`Effect::Approved` adds to them).
    initial_pins: BTreeMap<String, Value>,
    /// Operations that are not a client's first attempt: its retries, and copies the network made. Every
    /// other operation is a first attempt.
    attempts: BTreeMap<OperationId, Attempt>,
    /// Whether clients retried lost requests (faults on): only then can every request be expected to get an
    /// answer, which the liveness property judges.
    clients_retry: bool,
    /// First attempts whose client found no live instance of the kind to retry on (the scenario stopped them
    /// all for good): liveness promises nothing for them.
    stranded: BTreeSet<OperationId>,
    /// Operations a fault of a target's play left without their answer (a lost answer, a held request
    /// never answered), with the fault's decision-log line: the judge's "may have happened" names its cause.
    lost_to_fault: BTreeMap<OperationId, String>,
    /// Why a lost operation got no answer, when its world said (a target's: the timeout, the crash, the fault).
    lost_why: BTreeMap<OperationId, String>,
}

/// A request (or notification) as a world records it when it goes on the wire: [`History::request`] makes
/// it an [`Operation`], pending until [`History::answer`] or [`History::no_response`].
#[derive(Debug, Clone)]
pub struct Sent {
    pub client: String,
    pub principal: String,
    pub instance: String,
    /// Index of the scenario step that sent it.
    pub step: usize,
    /// The name the scenario gave its answer (`as NAME`), if any.
    pub name: Option<String>,
    /// The request as a JSON value (absent when the bytes sent were not JSON).
    pub request_value: Option<Arc<Value>>,
    /// The exact text sent, kept only when it is not the compact serialization of `request_value`.
    pub request_exact: Option<String>,
    pub notification: bool,
    pub sent_at_ms: u64,
}

impl Sent {
    /// What a world that sends text (a live fleet, a target's processes) records of `outgoing`, sent by
    /// `client` acting as `principal` to `instance`, at no simulated time.
    // Only the worlds over HTTP and processes (live, target) send text; the simulator sends the value.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn of_text(outgoing: &Outgoing, client: &str, principal: &str, instance: String) -> Sent {
        let (value, _, request_exact) = outgoing.recorded();
        Sent {
            client: client.to_string(),
            principal: principal.to_string(),
            instance,
            step: outgoing.step,
            name: outgoing.name.clone(),
            request_value: value.map(Arc::new),
            request_exact,
            notification: outgoing.notification,
            sent_at_ms: 0,
        }
    }
}

/// How an operation relates to the client request it repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// The client sent the request of `of` again (same bytes, same state); `number` counts from 1.
    Retry { of: OperationId, number: u32 },
    /// The network delivered a copy of `of`'s request; the client never sees its answer.
    Duplicate { of: OperationId },
}

impl History {
    /// An empty history of a world that starts with these grants, notes and approved descriptors.
    pub(crate) fn starting_with(grants: Arc<Grants>, notes: Arc<Vec<Note>>, pins: BTreeMap<String, Value>) -> History {
        History { initial_grants: grants, initial_notes: notes, initial_pins: pins, ..History::default() }
    }

    // The recorder: the only writers of a history.

    /// A client's request (or notification) went on the wire: a new operation, pending.
    pub(crate) fn request(&mut self, sent: Sent) -> OperationId {
        let id = OperationId(self.operations.len());
        self.operations.push(Operation { id, sent, outcome: Outcome::Pending });
        id
    }

    /// The request of `of` went on the wire again, to `instance` (a client's retry or the network's copy): a
    /// new operation, pending, with the same request.
    pub(crate) fn attempt(&mut self, attempt: Attempt, instance: String, sent_at_ms: u64) -> OperationId {
        let (Attempt::Retry { of, .. } | Attempt::Duplicate { of }) = attempt;
        let id = OperationId(self.operations.len());
        let sent = Sent { instance, name: None, sent_at_ms, ..self.operations[of.0].sent.clone() };
        self.operations.push(Operation { id, sent, outcome: Outcome::Pending });
        self.attempts.insert(id, attempt);
        id
    }

    /// [`History::attempt`] with its own request (a retry with a fresh JSON-RPC id sends other bytes than its
    /// first attempt): a new operation, pending.
    // Only the worlds over HTTP and processes (live, target) lose answers to faults of their own.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn attempt_sent(&mut self, attempt: Attempt, sent: Sent) -> OperationId {
        let id = OperationId(self.operations.len());
        self.operations.push(Operation { id, sent, outcome: Outcome::Pending });
        self.attempts.insert(id, attempt);
        id
    }

    /// The operation `id`, already recorded as a request, repeats another (`attempt`): a retry a scenario
    /// wrote (`retry NAME -> I`), sent by its world as any request is.
    pub(crate) fn mark_attempt(&mut self, id: OperationId, attempt: Attempt) {
        self.attempts.insert(id, attempt);
    }

    /// No answer to `id` will reach its client because of a fault (`fault`, its decision-log line): lost,
    /// and why.
    // Only the worlds over HTTP and processes (live, target) lose answers to faults of their own.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn lost_to_fault(&mut self, id: OperationId, fault: String) {
        self.lost(id, format!("a fault: {fault}"));
        self.lost_to_fault.insert(id, fault);
    }

    /// The answer to `id` arrived at `at_ms`, brought by delivery number `delivery`.
    pub(crate) fn answer(&mut self, id: OperationId, value: Arc<Value>, at_ms: u64, delivery: usize) {
        self.operations[id.0].outcome = Outcome::Answered { value, at_ms, delivery };
    }

    /// No answer to `id` will come: it was a notification, or it was lost (its outcome is unknown to its client).
    pub(crate) fn no_response(&mut self, id: OperationId, why: NoResponse) {
        self.operations[id.0].outcome = Outcome::NoResponse(why);
    }

    /// No answer to `id` will come, and `why` (a fault, a crash, a timeout): [`NoResponse::Lost`], with the
    /// reason a report shows beside the operation that may have happened.
    // Only the worlds over HTTP and processes (live, target) lose answers to faults of their own.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn lost(&mut self, id: OperationId, why: String) {
        self.no_response(id, NoResponse::Lost);
        self.lost_why.insert(id, why);
    }

    /// An effect a store, a backend or the admin committed.
    pub(crate) fn effect(&mut self, effect: Effect) {
        self.effects.push(effect);
    }

    /// From now on clients retry what gets lost (faults are on).
    pub(crate) fn clients_now_retry(&mut self) {
        self.clients_retry = true;
    }

    /// The client of the first attempt `first` found no live instance to retry on.
    pub(crate) fn strand(&mut self, first: OperationId) {
        self.stranded.insert(first);
    }

    /// The history as it stood after delivery `delivery`: later effects left out, later answers pending, and no
    /// liveness judged (it is judged at the end of a run only).
    pub fn until(&self, delivery: usize) -> History {
        let mut prefix = self.clone();
        prefix.clients_retry = false;
        prefix.effects.retain(|effect| effect.delivery <= delivery);
        for op in &mut prefix.operations {
            if matches!(op.outcome, Outcome::Answered { delivery: answered, .. } if answered > delivery) {
                op.outcome = Outcome::Pending;
            }
        }
        prefix
    }

    /// A copy with its effects edited by `edit`: a forged history, for tests that show a property catches one.
    pub fn with_effects_edited(&self, edit: impl FnOnce(&mut Vec<Effect>)) -> History {
        let mut forged = self.clone();
        edit(&mut forged.effects);
        forged
    }

    // Reading.

    /// Every operation, by id.
    pub fn operations(&self) -> &[Operation] {
        &self.operations
    }

    /// Every effect, in the order they were committed.
    pub fn effects(&self) -> &[Effect] {
        &self.effects
    }

    pub fn initial_grants(&self) -> &Arc<Grants> {
        &self.initial_grants
    }

    pub fn initial_notes(&self) -> &Arc<Vec<Note>> {
        &self.initial_notes
    }

    pub fn initial_pins(&self) -> &BTreeMap<String, Value> {
        &self.initial_pins
    }

    /// The operations that are not a first attempt, and what they repeat.
    pub fn attempts(&self) -> &BTreeMap<OperationId, Attempt> {
        &self.attempts
    }

    pub fn clients_retry(&self) -> bool {
        self.clients_retry
    }

    pub fn stranded(&self) -> &BTreeSet<OperationId> {
        &self.stranded
    }

    /// The fault that left `id` without its answer, as its decision-log line (`None`: no fault did).
    pub fn lost_to(&self, id: OperationId) -> Option<&str> {
        self.lost_to_fault.get(&id).map(String::as_str)
    }

    /// Why the lost operation `id` got no answer, when its world said.
    pub fn lost_why(&self, id: OperationId) -> Option<&str> {
        self.lost_why.get(&id).map(String::as_str)
    }

    /// The first attempt of the request `id` repeats (itself if it is one).
    pub(crate) fn first_attempt(&self, id: OperationId) -> OperationId {
        match self.attempts.get(&id) {
            Some(Attempt::Retry { of, .. } | Attempt::Duplicate { of }) => *of,
            None => id,
        }
    }

    pub(crate) fn is_duplicate(&self, id: OperationId) -> bool {
        matches!(self.attempts.get(&id), Some(Attempt::Duplicate { .. }))
    }

    /// The client's attempts at the request `first` (itself, then its retries in order; no network copies).
    pub(crate) fn attempts_of(&self, first: OperationId) -> Vec<OperationId> {
        let retries = self.attempts.iter().filter_map(|(id, attempt)| match attempt {
            Attempt::Retry { of, .. } if *of == first => Some(*id),
            _ => None,
        });
        std::iter::once(first).chain(retries).collect()
    }

    /// What the client finally learned of the request `first`: its last attempt that was answered.
    pub fn settled(&self, first: OperationId) -> &Operation {
        let attempts = self.attempts_of(first);
        let answered = attempts.iter().rev().find(|id| self.operations[id.0].response().is_some());
        &self.operations[answered.unwrap_or(&first).0]
    }
}

/// One operation: what was sent (its fields are read through it: `operation.client`, `operation.step`, …)
/// and what came of it.
#[derive(Debug, Clone)]
pub struct Operation {
    pub id: OperationId,
    pub sent: Sent,
    pub outcome: Outcome,
}

impl std::ops::Deref for Operation {
    type Target = Sent;

    fn deref(&self) -> &Sent {
        &self.sent
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Still in flight.
    Pending,
    /// `delivery` is the sequence number of the delivery that brought the response.
    Answered { value: Arc<Value>, at_ms: u64, delivery: usize },
    /// Nothing came back: a notification (never answered), or a request lost to a crash.
    NoResponse(NoResponse),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoResponse {
    Notification,
    Lost,
}

impl Operation {
    pub fn response(&self) -> Option<&Value> {
        match &self.outcome {
            Outcome::Answered { value, .. } => Some(value),
            _ => None,
        }
    }

    /// `params` of the request, when it was a JSON object.
    pub fn params(&self) -> Option<&Value> {
        self.request_value.as_deref()?.get("params")
    }
}

#[derive(Debug, Clone)]
pub struct Effect {
    pub at_ms: u64,
    /// Deliveries made when it happened: an effect during delivery `d` has `d`; a configuration change
    /// made between steps has the number of the last delivery before it.
    pub delivery: usize,
    /// The client operation that caused it; `None` for the admin.
    pub operation: Option<OperationId>,
    pub kind: EffectKind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum EffectKind {
    /// The note store listed these notes (a read of everything it returned).
    NotesListed { notes: Arc<Vec<Note>> },
    /// The note store deleted this note, on behalf of a claim of `nonce` (if any).
    NoteDeleted { note: Note, nonce: Option<String> },
    /// The replay store consumed `nonce` with this record.
    NonceConsumed { nonce: String, record: Value },
    /// The admin changed a note (`existed` says whether it was there).
    AdminChanged { description: String, existed: bool },
    /// The admin revoked a principal's workspace.
    Revoked { principal: String, workspace: String },
    /// A backend exported notes somewhere: an externally visible effect like a deletion.
    Exported(Export),
    /// A gateway called `tool` on backend `backend`, which published `descriptor` for it at that moment.
    BackendCalled { backend: String, tool: String, descriptor: Option<Value> },
    /// The operator approved `tool` (qualified) as `descriptor`.
    Approved { tool: String, descriptor: Value },
    /// A server asked a legacy (2025-11-25) client `request` inside the operation's open call, and the client
    /// answered `answer` (both JSON-RPC messages, as they travelled).
    ClientAsked { request: Value, answer: Value },
}

/// One export, as the backend recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    pub export_id: String,
    /// The idempotency key the gateway passed (the confirmation's nonce).
    pub key: String,
    pub principal: String,
    pub destination: String,
    pub note_ids: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outgoing(raw: Option<&[u8]>, value: Option<Value>) -> Outgoing {
        Outgoing {
            client: 0,
            instance: 0,
            raw: raw.map(<[u8]>::to_vec),
            value,
            notification: false,
            headers: RoutingHeaders::default(),
            headers_written: false,
            step: 0,
            name: None,
        }
    }

    #[test]
    fn a_message_is_recorded_verbatim_only_when_its_text_is_not_the_compact_form() {
        let built = serde_json::json!({"id": 1, "method": "x"});
        assert_eq!(outgoing(None, Some(built.clone())).recorded(), (Some(built.clone()), r#"{"id":1,"method":"x"}"#.into(), None));
        let compact: &[u8] = br#"{"id":1,"method":"x"}"#;
        assert_eq!(outgoing(Some(compact), None).recorded(), (Some(built.clone()), r#"{"id":1,"method":"x"}"#.into(), None));
        let spaced: &[u8] = br#"{ "method": "x", "id": 1 }"#;
        let text = String::from_utf8_lossy(spaced).into_owned();
        assert_eq!(outgoing(Some(spaced), None).recorded(), (Some(built), text.clone(), Some(text)));
        // Not UTF-8: no JSON, though its lossy text (a replacement character in quotes) would parse.
        let (value, text, exact) = outgoing(Some(b"\"\xff\""), None).recorded();
        assert_eq!(value, None);
        assert_eq!(exact, Some(text));
    }
}
