//! The delivery loop: one envelope chosen by the scheduler, delivered to its receiver, and the one task that
//! starts or resumes there polled once ([`Cluster::deliver_next`]); what the receiving actor does with it
//! (`dispatch`); and a finished task's result turned into the next envelope.

use super::faults::envelope_label;
use super::recording::client_operation;
use super::{Cause, Cluster, ReplyTo, Role, SimError, Task, STEP_DELIVERIES_MAX};
use crate::eras::is_legacy_http;
use crate::framework::ports::StoreError;
use crate::oracle::history::{EffectKind, Outcome};
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
        let ready = self.network.ready(next);
        if ready.is_empty() {
            return Ok(false);
        }
        let chosen = self.scheduler.choose(&ready)?;
        self.decisions.decisions.push(Decision { options: ready.len() as u32, chosen: chosen as u32 });
        let id = ready[chosen].envelope;
        if !self.planned_faults.is_empty() && self.fire_envelope_fault(next, id)? {
            return Ok(true);
        }
        self.clock.advance_to(ready[chosen].deliver_at_ms);
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
                in_flight: ready.len(),
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
                let browser = matches!(self.roles[from], Role::Client(client) if self.clients[client].browser);
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
                let answer = match &self.clients[client].legacy {
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
                    self.legacy_sessions[client] = Some(session);
                }
                let at_ms = self.clock.elapsed_ms();
                let transient = if self.history.clients_retry { super::client::transient(&value) } else { None };
                self.history.operations[operation.0].outcome = Outcome::Answered { value, at_ms, delivery: self.deliveries };
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
