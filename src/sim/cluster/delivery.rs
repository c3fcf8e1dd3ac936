//! The delivery loop: one envelope chosen by the scheduler, delivered to its receiver, and the one task that
//! starts or resumes there polled once ([`Cluster::deliver_next`]); what the receiving actor does with it
//! (`dispatch`); and a finished task's result turned into the next envelope.

use super::faults::envelope_label;
use super::recording::client_operation;
use super::{Cause, Cluster, ReplyTo, Role, SimError, Task, STEP_DELIVERIES_MAX};
use crate::eras::is_legacy_http;
use crate::framework::ports::StoreError;
use crate::oracle::history::EffectKind;
use crate::scenario::model::Moment;
use crate::sim::actors::instance::{handle_page, handle_request};
use crate::sim::actors::legacy::{self};
use crate::sim::actors::legacy_mutants::EraVariant;
use crate::sim::actors::{backend, gateway, note_store, replay_store, TaskFuture, TaskOutput};
use crate::sim::engine::faults::StoreName;
use crate::sim::engine::message::{ActorId, Payload, StoreCall, StoreReturn, TaskId};
use crate::sim::engine::network::{Envelope, Hold};
use crate::sim::engine::scheduler::Decision;
use crate::sim::render::transcript::{Entry, Message};
use crate::wire::errors::{RpcError, METHOD_NOT_FOUND};
use crate::wire::jsonrpc::{into_error_response, RequestId};
use serde_json::Value;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

impl Cluster {
    /// Delivers until nothing is in flight. Requests that got no answer are then marked as such.
    pub(crate) fn run_until_quiet(&mut self) -> Result<(), SimError> {
        let mut delivered = 0;
        while !self.network.is_empty() {
            if delivered >= STEP_DELIVERIES_MAX {
                return Err(SimError::Runaway);
            }
            self.deliver_next()?;
            delivered += 1;
        }
        self.record_unanswered();
        Ok(())
    }

    /// Delivers one envelope chosen by the scheduler. Returns false when nothing is in flight.
    pub fn deliver_next(&mut self) -> Result<bool, SimError> {
        let next = self.deliveries + 1;
        if !self.planned_faults.is_empty() && !self.network.is_empty() {
            self.fire_point_faults(next);
        }
        // One buffer for every delivery's choice (taken out while the scheduler reads it, then put back).
        let mut ready = std::mem::take(&mut self.ready);
        self.network.ready_into(next, &mut ready);
        let choice = if ready.is_empty() { Ok(None) } else { self.scheduler.choose(&ready).map(Some) };
        let picked = choice.map(|chosen| chosen.map(|chosen| (chosen, ready[chosen], ready.len())));
        self.ready = ready;
        let Some((chosen, picked, in_flight)) = picked? else {
            return Ok(false);
        };
        self.decisions.decisions.push(Decision { options: in_flight as u32, chosen: chosen as u32 });
        let id = picked.envelope;
        if !self.planned_faults.is_empty() && self.fire_envelope_fault(next, id)? {
            return Ok(true);
        }
        self.clock.advance_to(picked.deliver_at_ms);
        if !self.triggers.is_empty() {
            self.fire_triggers(Moment::Before, id);
        }
        let Some(envelope) = self.network.take(id) else {
            // A trigger's crash took it.
            return Ok(true);
        };
        let (receiver, sender) = (envelope.to, envelope.from);
        if let Role::Instance(index) = self.roles[receiver] {
            if !self.instances[index].up {
                let reason = format!("{} is down", self.names[receiver]);
                self.record_drop(&envelope, reason);
                if let Some(operation) = client_operation(&envelope) {
                    self.lost(operation, "no answer (the instance is down)");
                }
                return Ok(true);
            }
        }
        let label = if self.triggers.is_empty() { None } else { Some(envelope_label(&envelope)) };
        self.deliveries += 1;
        if self.transcript.recording {
            let entry = Entry::Delivery {
                seq: self.deliveries,
                time_ms: self.clock.elapsed_ms(),
                from: envelope.from,
                to: envelope.to,
                message: self.message_of(&envelope),
                cause: self.cause_of(&envelope),
                in_flight,
            };
            self.transcript.push(entry);
        }
        self.dispatch(envelope)?;
        if let Some(label) = label {
            self.fire_matching(Moment::After, receiver, sender, &label);
        }
        Ok(true)
    }

    /// What the receiver does with a delivered envelope: a request or a call starts a task, a return resumes
    /// the task awaiting it, a response is the client's answer.
    fn dispatch(&mut self, envelope: Envelope) -> Result<(), SimError> {
        let Envelope { from, to, from_task, to_task, payload, .. } = envelope;
        match (self.roles[to], payload) {
            (Role::Instance(index), Payload::Request { operation, principal, body, headers, session }) => {
                let Some(service) = self.instances[index].service.clone() else { return Ok(()) };
                let cause = Cause { operation: Some(operation), nonce: None };
                let reply_to = ReplyTo::Client { actor: from, operation };
                let browser = matches!(self.roles[from], Role::Client(client) if self.clients[client].setup.browser);
                let protocol_version = headers.as_ref().and_then(|h| h.protocol_version.as_deref());
                if let Some((adapter, _)) = &self.instances[index].legacy {
                    let bytes = body.bytes();
                    if is_legacy_http(protocol_version, session.as_deref(), &bytes) {
                        // A dual-era instance sends a legacy request to its adapter, as `serve --eras both` does.
                        let memory = (self.era_variant != EraVariant::Real).then(|| self.instances[index].legacy_memory.clone());
                        let bytes = bytes.into_owned();
                        let task = legacy::handle_request(adapter.clone(), self.exchange.clone(), from, principal, bytes, session, memory);
                        return self.spawn(to, cause, reply_to, None, task);
                    }
                }
                let task = match (self.instances[index].gateway.clone(), &self.gateway_world) {
                    _ if browser => handle_page(service, principal, body.bytes().into_owned()),
                    (Some(gateway), Some(world)) => gateway::handle_request(world, gateway, principal, body.bytes().into_owned(), headers),
                    _ => handle_request(service, principal, body, headers),
                };
                self.spawn(to, cause, reply_to, None, task)
            }
            (Role::Backend(index), Payload::Call(call)) => {
                let cause = from_task.and_then(|task| self.tasks.get(&task)).map(|t| t.cause.clone()).unwrap_or_default();
                let Some(actor) = self.gateway_world.as_ref().map(|world| world.backends[index].clone()) else { return Ok(()) };
                if let StoreCall::CallTool { tool, .. } = &call {
                    // What the backend publishes for the tool as the call reaches it: the oracle compares it with what
                    // was approved.
                    let descriptor =
                        actor.descriptors.current().iter().find(|d| d.get("name").and_then(Value::as_str) == Some(tool)).cloned();
                    let kind = EffectKind::BackendCalled { backend: actor.id.clone(), tool: tool.clone(), descriptor };
                    self.record_effect(cause.operation, kind);
                }
                self.spawn(to, cause, ReplyTo::Caller { actor: from, task: from_task }, Some(call.clone()), backend::serve(actor, call))
            }
            (Role::Client(client), Payload::Call(StoreCall::AskClient { request })) => {
                let cause = from_task.and_then(|task| self.tasks.get(&task)).map(|t| t.cause.clone()).unwrap_or_default();
                let answer = match &self.clients[client].setup.legacy {
                    Some(spec) => legacy::answer(spec, &request),
                    None => {
                        let id = request.get("id").and_then(RequestId::from_json);
                        into_error_response(id.as_ref(), RpcError::new(METHOD_NOT_FOUND, "not a legacy client"))
                    }
                };
                self.record_effect(cause.operation, EffectKind::ClientAsked { request: request.clone(), answer: answer.clone() });
                let call = StoreCall::AskClient { request };
                let task: TaskFuture = Box::pin(async move { TaskOutput::Return(StoreReturn::ClientAnswer(answer)) });
                self.spawn(to, cause, ReplyTo::Caller { actor: from, task: from_task }, Some(call), task)
            }
            (Role::Client(client), Payload::Response { operation, value, session }) => {
                if let Some(session) = session {
                    // The client keeps the Mcp-Session-Id and sends it with everything that follows, wherever.
                    self.clients[client].session = Some(session);
                }
                let at_ms = self.clock.elapsed_ms();
                let transient = if self.history.clients_retry() { super::client::transient(&value) } else { None };
                self.history.answer(operation, value, at_ms, self.deliveries);
                if let Some(why) = transient {
                    // The confirmation's claim is still pending somewhere, or a store was down: ask again later
                    // to learn how it ended.
                    self.lost(operation, why);
                }
                Ok(())
            }
            (role @ (Role::NoteStore | Role::ReplayStore), Payload::Call(call)) => {
                let mut cause = from_task.and_then(|task| self.tasks.get(&task)).map(|t| t.cause.clone()).unwrap_or_default();
                if let Some(nonce) = call.nonce() {
                    cause.nonce = Some(nonce.to_string());
                }
                let store = if role == Role::NoteStore { StoreName::Notes } else { StoreName::Replay };
                if let Some(outage) = self.outages.iter_mut().find(|(name, calls)| *name == store && *calls > 0) {
                    // An outage: the call is refused before the store does anything it asks.
                    outage.1 -= 1;
                    self.outages.retain(|(_, calls)| *calls > 0);
                    self.event(Some(to), format!("unavailable: refuses {}", call.label()));
                    let why = format!("an outage of the {}", store.describe());
                    let refused: TaskFuture =
                        Box::pin(async move { TaskOutput::Return(StoreReturn::Failed(StoreError::Unavailable(why))) });
                    return self.spawn(to, cause, ReplyTo::Caller { actor: from, task: from_task }, Some(call), refused);
                }
                let future = match role {
                    Role::NoteStore => note_store::serve(self.notes.clone(), call.clone()),
                    _ => replay_store::serve(self.replay.clone(), self.flows.clone(), call.clone()),
                };
                self.spawn(to, cause, ReplyTo::Caller { actor: from, task: from_task }, Some(call), future)
            }
            (_, Payload::Return { value, .. }) => match to_task {
                Some(task) if self.tasks.contains_key(&task) => {
                    self.exchange.put_return(task, value);
                    self.poll(task)
                }
                // The admin waits for nothing; a crashed caller's returns were dropped with it.
                _ => Ok(()),
            },
            (_, payload) => {
                // Cannot happen with the actors we build; say so in the transcript rather than panic.
                let text = format!("ignored a misaddressed {} envelope", Message::from_payload(&payload).kind.as_str());
                self.event(Some(to), text);
                Ok(())
            }
        }
    }

    /// A new task on `actor`, polled at once.
    fn spawn(
        &mut self,
        actor: ActorId,
        cause: Cause,
        reply_to: ReplyTo,
        call: Option<StoreCall>,
        future: TaskFuture,
    ) -> Result<(), SimError> {
        let id = TaskId(self.next_task);
        self.next_task += 1;
        self.tasks.insert(id, Box::new(Task { actor, cause, reply_to, call, future }));
        self.poll(id)
    }

    /// Polls one task once; turns its store call or its result into an envelope.
    fn poll(&mut self, id: TaskId) -> Result<(), SimError> {
        let Some(mut task) = self.tasks.remove(&id) else { return Ok(()) };
        self.exchange.set_current(Some(id));
        let polled = task.future.as_mut().poll(&mut Context::from_waker(Waker::noop()));
        self.exchange.set_current(None);
        let outgoing = self.exchange.take_outbox();
        let now_ms = self.clock.elapsed_ms();
        if let Some(world) = self.gateway_world.as_mut() {
            for line in world.new_audit_lines() {
                self.event(Some(task.actor), line);
            }
        }
        if let Role::Backend(backend) = self.roles[task.actor] {
            self.record_exports(backend, task.cause.operation);
        }
        let sent_anything = !outgoing.is_empty();
        for call in outgoing {
            self.network.send(task.actor, call.to, now_ms, Some(call.from_task), None, Payload::Call(call.call))?;
        }
        match polled {
            Poll::Pending if sent_anything => {
                self.tasks.insert(id, task);
                Ok(())
            }
            Poll::Pending => Err(SimError::Stuck { task: id.0, actor: self.names[task.actor].clone() }),
            Poll::Ready(output) => self.finish(*task, output),
        }
    }

    fn finish(&mut self, task: Task, output: TaskOutput) -> Result<(), SimError> {
        let now_ms = self.clock.elapsed_ms();
        match (task.reply_to, output) {
            (ReplyTo::Client { actor, operation }, TaskOutput::Reply(reply)) => match reply.response {
                Some(response) => {
                    let payload = Payload::Response { operation, value: Arc::new(response), session: None };
                    self.network.send(task.actor, actor, now_ms, None, None, payload)?;
                }
                None => {
                    let text = format!("answers nothing (a notification; HTTP {})", reply.http_status);
                    self.event(Some(task.actor), text);
                }
            },
            (ReplyTo::Client { actor, operation }, TaskOutput::Legacy(reply)) => {
                if let Some(session) = &reply.session_id {
                    self.event(Some(task.actor), format!("opens a legacy session (Mcp-Session-Id {session})"));
                }
                match reply.response {
                    Some(response) => {
                        if reply.http_status != 200 {
                            self.event(Some(task.actor), format!("answers with HTTP {}", reply.http_status));
                        }
                        let payload = Payload::Response { operation, value: Arc::new(response), session: reply.session_id };
                        self.network.send(task.actor, actor, now_ms, None, None, payload)?;
                    }
                    None => self.event(Some(task.actor), format!("answers nothing (HTTP {})", reply.http_status)),
                }
            }
            (ReplyTo::Caller { actor, task: caller }, TaskOutput::Return(value)) => {
                let label = task.call.as_ref().map_or("?", StoreCall::label);
                self.record_effects(&task, &value);
                let id = self.network.send(task.actor, actor, now_ms, None, caller, Payload::Return { call: label, value })?;
                let store = match self.roles[task.actor] {
                    Role::NoteStore => Some(StoreName::Notes),
                    Role::ReplayStore => Some(StoreName::Replay),
                    _ => None,
                };
                let slow = self.slow_stores.iter().filter(|(s, _)| Some(*s) == store).map(|(_, delay_ms)| *delay_ms).max();
                if let Some(delay_ms) = slow {
                    // One other delivery may overtake the late answer (it must, if anything else is in flight).
                    self.network.hold(id, delay_ms, Hold::UntilDelivery(self.deliveries + 2));
                }
            }
            (_, output) => {
                let text = format!("task finished with an output its caller cannot take: {output:?}");
                self.event(Some(task.actor), text);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! The loop driven directly: a cluster of the demo deployment, requests built by hand, and every assertion
    //! made on what the cluster recorded (its history, its transcript, its decision log).

    use super::super::{ClientSetup, ClusterSetup, CrashTrigger, InstanceSetup};
    use super::*;
    use crate::config::Deployment;
    use crate::oracle::grants::Grants;
    use crate::oracle::history::{Attempt, NoResponse, OperationId, Outcome, Outgoing};
    use crate::policy::state::{derived_key_secret, KeyRing};
    use crate::sim::actors::gateway_mutants::GatewayVariant;
    use crate::sim::actors::instance::notes_server_factory;
    use crate::sim::engine::faults::{Fault, RETRY_TIMEOUT_MS};
    use crate::sim::engine::network::Ready;
    use crate::sim::engine::scheduler::{Divergence, Scheduler, Scripted};
    use crate::sim::render::transcript::Body;
    use crate::stores::memory::{MemoryNoteStore, ReplayLimits};
    use crate::wire::headers::RoutingHeaders;
    use crate::wire::meta::{KEY_CLIENT_CAPABILITIES, KEY_CLIENT_INFO, KEY_PROTOCOL_VERSION};
    use crate::wire::PROTOCOL_VERSION;
    use serde_json::json;

    const WORKSPACE: &str = "file:///Users/alice/Documents/Notes";

    /// Always the first envelope in flight (in send order), or always the last.
    struct Pick {
        last: bool,
    }

    impl Scheduler for Pick {
        fn name(&self) -> &'static str {
            "pick"
        }

        fn choose(&mut self, ready: &[Ready]) -> Result<usize, Divergence> {
            Ok(if self.last { ready.len() - 1 } else { 0 })
        }
    }

    /// The demo deployment on `count` instances of one key (i1, i2, …) and the client alice, recording.
    fn cluster(count: usize, scheduler: Box<dyn Scheduler>) -> Cluster {
        let demo = Deployment::demo();
        let mut grants = Grants::default();
        for (principal, config) in &demo.principals {
            for workspace in &config.workspaces {
                grants.grant(principal, workspace);
            }
        }
        let key_ring = KeyRing::new("k1", derived_key_secret("k1")).expect("a derived key is valid");
        let instances = (1..=count)
            .map(|n| InstanceSetup {
                name: format!("i{n}"),
                key_ring: key_ring.clone(),
                clock_offset_ms: 0,
                gateway: false,
                eras_both: false,
            })
            .collect();
        let notes = demo.notes();
        let setup = ClusterSetup {
            scenario: "unit".into(),
            seed: 7,
            instances,
            clients: vec![ClientSetup { name: "alice".into(), principal: "alice".into(), browser: false, legacy: None }],
            authorizations: Arc::new(demo.authorizations().expect("the demo is valid")),
            grants: Arc::new(grants),
            note_store: Arc::new(MemoryNoteStore::new(notes.clone())),
            notes: Arc::new(notes),
            state_ttl_ms: 60_000,
            replay_limits: ReplayLimits::default(),
            latency_ms_min: 1,
            latency_ms_max: 10,
            record_transcript: true,
            factory: notes_server_factory(),
            gateway_variant: GatewayVariant::Real,
            era_variant: EraVariant::Real,
        };
        Cluster::new(setup, scheduler)
    }

    /// A request alice builds, as a conforming client does (its `_meta`, the routing headers it derives).
    fn request(id: u64, method: &str, mut params: Value) -> Outgoing {
        params["_meta"] = json!({
            KEY_PROTOCOL_VERSION: PROTOCOL_VERSION,
            KEY_CLIENT_CAPABILITIES: { "elicitation": { "form": {} } },
            KEY_CLIENT_INFO: { "name": "alice", "version": "1.0.0" },
        });
        let value = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        Outgoing {
            client: 0,
            instance: 0,
            raw: None,
            headers: RoutingHeaders::for_message(&value),
            value: Some(value),
            notification: false,
            headers_written: false,
            step: 0,
            name: None,
        }
    }

    fn delete_round(id: u64) -> Outgoing {
        request(id, "tools/call", json!({ "name": "notes_delete", "arguments": { "workspaceUri": WORKSPACE, "title": "TPS report" } }))
    }

    /// The confirmation of `note` answering the form of operation `round` (its state echoed).
    fn confirm(cluster: &Cluster, round: OperationId, id: u64, note: &str) -> Outgoing {
        let form = answer(cluster, round).expect("the first round was answered");
        let state = form.pointer("/result/requestState").cloned().expect("the first round asks for input");
        let mut outgoing = delete_round(id);
        let params = &mut outgoing.value.as_mut().expect("built")["params"];
        params["requestState"] = state;
        params["inputResponses"] = json!({ "delete_choice": { "action": "accept", "content": { "note_id": note, "confirm": true } } });
        outgoing.headers = RoutingHeaders::for_message(outgoing.value.as_ref().expect("built"));
        outgoing
    }

    fn answer(cluster: &Cluster, operation: OperationId) -> Option<Value> {
        match &cluster.history.operations()[operation.0].outcome {
            Outcome::Answered { value, .. } => Some(Value::clone(value)),
            _ => None,
        }
    }

    /// Every delivery of the transcript as `seq from -> to kind label` (a JSON-RPC message's label is its
    /// method or `id N`, a store call's its operation).
    fn deliveries(cluster: &Cluster) -> Vec<String> {
        cluster
            .transcript
            .entries
            .iter()
            .filter_map(|entry| match entry {
                Entry::Delivery { seq, from, to, message, .. } => {
                    Some(format!("{seq} {} -> {} {} {}", cluster.names[*from], cluster.names[*to], message.kind.as_str(), label(message)))
                }
                _ => None,
            })
            .collect()
    }

    fn label(message: &Message) -> String {
        match &message.body {
            Body::Json(value) => match value.get("method").and_then(Value::as_str) {
                Some(method) => method.to_string(),
                None => format!("id {}", value.get("id").unwrap_or(&Value::Null)),
            },
            Body::Call(call) => call.label().to_string(),
            Body::Return { call, .. } => call.to_string(),
        }
    }

    /// Every drop of the transcript as `from -x to kind label: reason`.
    fn drops(cluster: &Cluster) -> Vec<String> {
        cluster
            .transcript
            .entries
            .iter()
            .filter_map(|entry| match entry {
                Entry::Dropped { from, to, message, reason, .. } => Some(format!(
                    "{} -x {} {} {}: {reason}",
                    cluster.names[*from],
                    cluster.names[*to],
                    message.kind.as_str(),
                    label(message)
                )),
                _ => None,
            })
            .collect()
    }

    fn delivery_time(cluster: &Cluster, wanted: usize) -> u64 {
        cluster
            .transcript
            .entries
            .iter()
            .find_map(|entry| match entry {
                Entry::Delivery { seq, time_ms, .. } if *seq == wanted => Some(*time_ms),
                _ => None,
            })
            .expect("that delivery happened")
    }

    fn effects_of(cluster: &Cluster, operation: OperationId) -> Vec<&'static str> {
        let name = |kind: &EffectKind| match kind {
            EffectKind::NotesListed { .. } => "notes listed",
            EffectKind::NonceConsumed { .. } => "nonce consumed",
            EffectKind::NoteDeleted { .. } => "note deleted",
            _ => "other",
        };
        cluster.history.effects().iter().filter(|effect| effect.operation == Some(operation)).map(|effect| name(&effect.kind)).collect()
    }

    fn note_present(cluster: &Cluster, id: &str) -> bool {
        cluster.note_store().listing().iter().any(|note| note.id == id)
    }

    #[test]
    fn each_envelope_is_delivered_exactly_once_and_the_answer_recorded_at_its_delivery() {
        let mut cluster = cluster(1, Box::new(Scripted));
        let operation = cluster.send(delete_round(1), 0).unwrap();
        cluster.run_until_quiet().unwrap();
        assert_eq!(
            deliveries(&cluster),
            [
                "1 alice -> i1 request tools/call",
                "2 i1 -> notes call list_notes",
                "3 notes -> i1 return list_notes",
                "4 i1 -> alice response id 1"
            ]
        );
        assert!(cluster.network.is_empty() && cluster.tasks.is_empty(), "nothing left in flight or running");
        assert_eq!(cluster.deliveries(), 4);
        assert_eq!(cluster.decisions.decisions.len(), 4, "one scheduling decision per delivery");
        let Outcome::Answered { value, delivery, .. } = &cluster.history.operations()[operation.0].outcome else {
            panic!("the request was answered: {:?}", cluster.history.operations()[operation.0].outcome)
        };
        assert_eq!(*delivery, 4, "answered when the response reached alice");
        assert_eq!(value.pointer("/result/resultType"), Some(&json!("input_required")));
        assert_eq!(effects_of(&cluster, operation), ["notes listed"], "the store's listing is the request's effect");
    }

    #[test]
    fn the_schedulers_choice_is_the_envelope_delivered() {
        for (last, first_to) in [(false, "i1"), (true, "i2")] {
            let mut cluster = cluster(2, Box::new(Pick { last }));
            cluster.send(request(1, "tools/list", json!({})), 0).unwrap();
            cluster.send(request(2, "tools/list", json!({})), 1).unwrap();
            assert!(cluster.deliver_next().unwrap());
            let expected = if last { "1 alice -> i2 request tools/list" } else { "1 alice -> i1 request tools/list" };
            assert_eq!(deliveries(&cluster), [expected], "the scheduler picking {}", if last { "last" } else { "first" });
            assert_eq!(cluster.decisions.decisions, [Decision { options: 2, chosen: u32::from(last) }]);
            cluster.run_until_quiet().unwrap();
            assert!(deliveries(&cluster)[0].contains(first_to));
            assert!(answer(&cluster, OperationId(0)).is_some() && answer(&cluster, OperationId(1)).is_some());
        }
    }

    #[test]
    fn a_duplicate_fault_delivers_the_request_twice_and_records_the_copy() {
        let mut cluster = cluster(2, Box::new(Scripted));
        cluster.enable_faults(&[Fault::Duplicate { at: 1, instance: 1 }]);
        let original = cluster.send(request(1, "tools/list", json!({})), 0).unwrap();
        cluster.run_until_quiet().unwrap();
        let requests: Vec<String> = deliveries(&cluster)
            .iter()
            .filter(|d| d.contains(" request "))
            .filter_map(|d| Some(d.split_once(' ')?.1.to_string()))
            .collect();
        assert_eq!(requests, ["alice -> i1 request tools/list", "alice -> i2 request tools/list"]);
        assert_eq!(cluster.history.operations().len(), 2, "the copy is an operation of its own");
        assert_eq!(cluster.history.attempts().get(&OperationId(1)), Some(&Attempt::Duplicate { of: original }));
        assert!(answer(&cluster, original).is_some() && answer(&cluster, OperationId(1)).is_some(), "both copies answered");
        assert_eq!(cluster.decisions.faults, [Fault::Duplicate { at: 1, instance: 1 }], "the fault is in the decision log");
    }

    #[test]
    fn a_delayed_envelope_is_overtaken_and_arrives_later() {
        let mut cluster = cluster(2, Box::new(Pick { last: false }));
        cluster.enable_faults(&[Fault::Delay { at: 1, delay_ms: 500, overtaken_by: 1 }]);
        cluster.send(request(1, "tools/list", json!({})), 0).unwrap();
        cluster.send(request(2, "tools/list", json!({})), 1).unwrap();
        cluster.run_until_quiet().unwrap();
        let shown = deliveries(&cluster);
        assert_eq!(shown[0], "1 alice -> i2 request tools/list", "the held request to i1 is overtaken");
        assert_eq!(shown[1], "2 alice -> i1 request tools/list", "and released at the next delivery");
        assert!(delivery_time(&cluster, 2) >= 500, "it arrives 500ms late: at {}ms", delivery_time(&cluster, 2));
        assert!(answer(&cluster, OperationId(0)).is_some() && answer(&cluster, OperationId(1)).is_some(), "nothing was lost");
    }

    #[test]
    fn a_lost_request_is_retried_on_the_next_instance_only_once_the_network_is_quiet() {
        let mut cluster = cluster(2, Box::new(Scripted));
        cluster.enable_faults(&[Fault::Drop { at: 1 }]);
        let lost = cluster.send(request(1, "tools/list", json!({})), 0).unwrap();
        cluster.run_until_quiet().unwrap();
        assert_eq!(drops(&cluster), ["alice -x i1 request tools/list: fault: lost on the network"]);
        assert_eq!(deliveries(&cluster), ["1 alice -> i2 request tools/list", "2 i2 -> alice response id 1"]);
        assert!(delivery_time(&cluster, 1) >= RETRY_TIMEOUT_MS, "the retry waits for the client's timeout");
        assert_eq!(cluster.history.operations()[lost.0].outcome, Outcome::NoResponse(NoResponse::Lost));
        assert_eq!(cluster.history.attempts().get(&OperationId(1)), Some(&Attempt::Retry { of: lost, number: 1 }));
        assert!(answer(&cluster, OperationId(1)).is_some(), "the retry is answered");
    }

    #[test]
    fn a_crash_after_the_claim_reached_the_store_loses_only_the_answer() {
        let mut cluster = cluster(2, Box::new(Scripted));
        let round = cluster.send(delete_round(1), 0).unwrap();
        cluster.run_until_quiet().unwrap();
        let replay = cluster.replay_store_actor;
        cluster.arm(CrashTrigger { instance: 0, moment: Moment::After, receiver: replay, label: "claim_and_delete".into(), sender: None });
        let confirmation = cluster.send(confirm(&cluster, round, 2, "note-7"), 0).unwrap();
        cluster.run_until_quiet().unwrap();
        let claims: Vec<String> = deliveries(&cluster).into_iter().filter(|d| d.contains("call claim_and_delete")).collect();
        assert_eq!(claims.len(), 1, "the claim reached the store once: {claims:?}");
        assert_eq!(drops(&cluster), ["replay -x i1 return claim_and_delete: i1 is down"], "only the answer is lost");
        assert!(!note_present(&cluster, "note-7"), "the store deleted the note");
        // The note store answers the re-check inside the claim first, then the claim returns.
        assert_eq!(effects_of(&cluster, confirmation), ["note deleted", "nonce consumed"], "both effects are the confirmation's");
        assert_eq!(cluster.history.operations()[confirmation.0].outcome, Outcome::NoResponse(NoResponse::Lost));
        assert!(!cluster.instances()[0].up, "the trigger crashed i1, which stays down");
    }

    #[test]
    fn a_crash_before_the_claim_reached_the_store_drops_the_claim_and_changes_nothing() {
        let mut cluster = cluster(2, Box::new(Scripted));
        let round = cluster.send(delete_round(1), 0).unwrap();
        cluster.run_until_quiet().unwrap();
        let replay = cluster.replay_store_actor;
        cluster.arm(CrashTrigger { instance: 0, moment: Moment::Before, receiver: replay, label: "claim_and_delete".into(), sender: None });
        let confirmation = cluster.send(confirm(&cluster, round, 2, "note-7"), 0).unwrap();
        cluster.run_until_quiet().unwrap();
        assert_eq!(drops(&cluster), ["i1 -x replay call claim_and_delete: i1 crashed"]);
        assert!(!deliveries(&cluster).iter().any(|d| d.contains("claim_and_delete")), "the claim was never delivered");
        assert!(note_present(&cluster, "note-7"), "nothing was deleted");
        assert_eq!(effects_of(&cluster, confirmation), Vec::<&str>::new());
        assert_eq!(cluster.replay_store().consumed_count(), 0);
        // The same confirmation on i2 completes it: the state was never used.
        let retry = cluster.send(confirm(&cluster, round, 3, "note-7"), 1).unwrap();
        cluster.run_until_quiet().unwrap();
        assert_eq!(answer(&cluster, retry).and_then(|v| v.pointer("/result/structuredContent/deleted").cloned()), Some(json!(true)));
        assert!(!note_present(&cluster, "note-7"));
    }

    #[test]
    fn a_return_to_a_crashed_incarnations_task_resumes_nothing_in_the_next_incarnation() {
        let mut cluster = cluster(1, Box::new(Scripted));
        let round = cluster.send(delete_round(1), 0).unwrap();
        cluster.run_until_quiet().unwrap();
        let replay = cluster.replay_store_actor;
        cluster.arm(CrashTrigger { instance: 0, moment: Moment::After, receiver: replay, label: "claim_and_delete".into(), sender: None });
        let confirmation = cluster.send(confirm(&cluster, round, 2, "note-7"), 0).unwrap();
        while cluster.instances()[0].up {
            assert!(cluster.deliver_next().unwrap(), "the trigger fires before the network is quiet");
        }
        // The store is still working on the claim for incarnation 0; incarnation 1 starts meanwhile.
        cluster.restart(0);
        assert_eq!(cluster.instances()[0].incarnation, 1);
        cluster.run_until_quiet().unwrap();
        let shown = deliveries(&cluster);
        let last = shown.last().expect("deliveries happened");
        assert!(last.ends_with("replay -> i1 return claim_and_delete"), "the return reaches i1 again: {shown:?}");
        assert!(drops(&cluster).is_empty(), "i1 is up, so nothing is dropped");
        assert!(cluster.tasks.is_empty(), "no task of the new incarnation was resumed or left waiting");
        assert!(!shown.iter().any(|d| d.ends_with("i1 -> alice response id 2")), "nobody answers the confirmation");
        assert_eq!(cluster.history.operations()[confirmation.0].outcome, Outcome::NoResponse(NoResponse::Lost));
        assert!(!note_present(&cluster, "note-7"), "the store finished the delete");
        // The new incarnation serves: the same confirmation learns it was used.
        let retry = cluster.send(confirm(&cluster, round, 3, "note-7"), 0).unwrap();
        cluster.run_until_quiet().unwrap();
        assert_eq!(answer(&cluster, retry).and_then(|v| v.pointer("/error/data/reason").cloned()), Some(json!("state_consumed")));
    }
}
