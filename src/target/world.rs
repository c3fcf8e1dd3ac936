//! The third [`World`]: a target's processes. mcpsim is their only client and their network: it routes each
//! scenario instance to a process of the fleet (the seed's mapping), puts a `parallel` block's items on the
//! wire in the seed's order, kills (SIGKILL) and restarts processes for `crash` / `restart`, and records every
//! exchange. Its decisions are logged; what the servers do inside (their timing, their stores) is not its to
//! decide, and reports say so.

use super::faults::{FaultAction, FaultEvent, RetryOn, Trigger};
use super::fleet::{Fleet, FleetError, Pending};
use crate::framework::ports::Note;
use crate::oracle::history::{History, NoResponse, OperationId, Sent};
use crate::play::world::{Annotation, Consumed, Item, Outgoing, Refused, Unobservable, World};
use crate::scenario::model::{AdminAction, Moment, Scenario, TriggerSpec};
use crate::servers::gateway::backends::ExportRecord;
use crate::sim::engine::random::{below, stream, Stream};
use rand_chacha::ChaCha8Rng;
use serde_json::Value;
use std::sync::Arc;

/// Longest `advance` a target world carries out, by waiting on the wall clock.
pub const ADVANCE_MS_MAX: u64 = 10_000;

/// How scenario instances reach the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routing {
    /// Scenario instance `k` goes to fleet instance `permutation[k mod N]`, the permutation drawn from the seed.
    Spread,
    /// Every request goes to one fleet instance (the first live one of the permutation): the reference play that
    /// statelessness is judged against.
    One,
}

pub struct TargetWorld<'f, 't> {
    scenario: &'f Scenario,
    fleet: &'f mut Fleet<'t>,
    routing: Routing,
    permutation: Vec<usize>,
    rng: ChaCha8Rng,
    history: History,
    /// mcpsim's own choices, in order: what a re-run replays.
    pub decisions: Vec<String>,
    /// Every message, with the fleet instance that took it.
    pub transcript: Vec<String>,
    /// Faults armed by scenario statements (`pause I after I receives OP`, `crash I after I receives OP`), not
    /// yet fired.
    armed: Vec<Armed>,
    /// Requests written to a paused instance, their answers read when it is resumed (or the play ends).
    pending: Vec<(usize, OperationId, Pending)>,
    /// Requests put on the wire so far (the `N` of `request N`).
    requests: usize,
    /// Every fault fired: the event, the request it fired on, and where (`NAME → tK`).
    pub fired: Vec<(FaultEvent, usize, String)>,
    /// The step being played, from [`World::annotate`]: `(line, statement)`.
    step: (usize, String),
}

/// A fault a scenario statement armed.
struct Armed {
    event: FaultEvent,
    /// `crash I before I receives OP`: nothing is written.
    before: bool,
    /// The arming statement, for "armed, never fired".
    line: usize,
    statement: String,
}

impl<'f, 't> TargetWorld<'f, 't> {
    pub fn new(scenario: &'f Scenario, fleet: &'f mut Fleet<'t>, seed: u64, routing: Routing) -> TargetWorld<'f, 't> {
        let mut rng = stream(seed, Stream::Scheduler);
        let mut permutation: Vec<usize> = (0..fleet.len()).collect();
        for i in (1..permutation.len()).rev() {
            let j = below(&mut rng, i as u64 + 1) as usize;
            permutation.swap(i, j);
        }
        let mut decisions = Vec::new();
        let mapping: Vec<String> = scenario
            .cluster
            .instances
            .iter()
            .enumerate()
            .map(|(k, i)| {
                let to = match routing {
                    Routing::Spread => permutation[k % permutation.len()],
                    Routing::One => permutation[0],
                };
                format!("{} → {}", i.name, Fleet::instance_name(to))
            })
            .collect();
        decisions.push(format!("route {}", mapping.join(", ")));
        TargetWorld {
            scenario,
            fleet,
            routing,
            permutation,
            rng,
            history: History::default(),
            decisions,
            transcript: Vec::new(),
            armed: Vec::new(),
            pending: Vec::new(),
            requests: 0,
            fired: Vec::new(),
            step: (0, String::new()),
        }
    }

    /// Starts the fleet instances that scenario instances declared with `instance I clock ±DURATION` map to
    /// under that clock (libfaketime). The reference play (every instance on one process) cannot honour
    /// per-instance clocks: it plays on true time and says so ([`World::global_caveat`]).
    pub fn start_skewed(&mut self) -> Result<(), FleetError> {
        if self.routing == Routing::One {
            return Ok(());
        }
        let mut clocks: std::collections::BTreeMap<usize, (i64, String)> = std::collections::BTreeMap::new();
        for (k, instance) in self.scenario.cluster.instances.iter().enumerate() {
            let to = self.route(k);
            match clocks.get(&to) {
                Some((offset, _)) if *offset != instance.clock_offset_ms => {
                    // Two scenario instances with different clocks on one process: the first one's holds.
                    self.decisions.push(format!(
                        "{} shares {} with an instance whose clock differs: it runs with that one's",
                        instance.name,
                        Fleet::instance_name(to)
                    ));
                }
                Some(_) => {}
                None => {
                    clocks.insert(to, (instance.clock_offset_ms, instance.name.clone()));
                }
            }
        }
        for (to, (offset_ms, name)) in clocks {
            if offset_ms != 0 {
                let line = self.fleet.start_with_clock(to, offset_ms)?;
                self.decisions.push(format!("{name}'s clock {offset_ms:+} ms: {line}"));
            }
        }
        Ok(())
    }

    /// Ends the play's process faults: every paused instance continued and its owed answers read and recorded
    /// (the late commit), every armed fault that never fired returned as a failure of the play (never silently
    /// passed).
    pub fn end_faults(&mut self) -> Vec<crate::play::Failure> {
        for index in self.fleet.paused() {
            self.continue_instance(index, "at the end of the play");
        }
        std::mem::take(&mut self.armed)
            .into_iter()
            .map(|armed| {
                self.decisions.push(format!("line {}: armed, never fired: {}", armed.line, armed.event));
                crate::play::Failure {
                    kind: crate::play::FailureKind::Step,
                    line: armed.line,
                    statement: armed.statement,
                    message: format!("armed, never fired: {}", armed.event),
                }
            })
            .collect()
    }

    fn method(outgoing: &Outgoing) -> Option<String> {
        outgoing.value.as_ref().and_then(|v| v.get("method")).and_then(Value::as_str).map(str::to_string)
    }

    /// The armed fault the request fires, taken off the armed list.
    fn armed_for(&mut self, outgoing: &Outgoing) -> Option<Armed> {
        let method = TargetWorld::method(outgoing);
        let at = self.armed.iter().position(|armed| match &armed.event.trigger {
            Trigger::Next { instance, method: wanted } => {
                *instance == outgoing.instance && wanted.as_ref().is_none_or(|w| Some(w) == method.as_ref())
            }
            Trigger::Request { number } => *number == self.requests,
        })?;
        Some(self.armed.remove(at))
    }

    fn log_fired(&mut self, event: &FaultEvent, outgoing: &Outgoing, to: usize) {
        let name = outgoing.name.clone().unwrap_or_else(|| format!("request {}", self.requests));
        let at = format!("{name} → {}", Fleet::instance_name(to));
        self.decisions.push(format!("fault fired: {event} — request {} ({at})", self.requests));
        self.fired.push((event.clone(), self.requests, at));
    }

    /// `pause I after I receives OP` fired: the instance stopped, then the request written to it (it sits unread
    /// in its pipe or socket: whatever the server does with it, it does once resumed — the late commit); its
    /// operation stays without an answer until then.
    fn fire_pause(&mut self, event: &FaultEvent, outgoing: &Outgoing, to: usize) -> OperationId {
        self.log_fired(event, outgoing, to);
        let principal = self.principal(outgoing.client);
        let how = self.fleet.pause(to);
        let pending = match how {
            Ok(how) => {
                self.decisions.push(format!("paused {} ({})", Fleet::instance_name(to), how.describe()));
                self.transcript.push(format!("  paused {} ({})", Fleet::instance_name(to), how.describe()));
                self.fleet.write_only(to, &principal, outgoing)
            }
            Err(lost) => Pending::Lost(lost),
        };
        let id = self.request_only(outgoing, to);
        self.pending.push((to, id, pending));
        id
    }

    /// `crash I after I receives OP` fired: the request written, then SIGKILL before its answer is read (or,
    /// `before`, the instance killed with nothing written); the operation is lost.
    fn fire_crash(&mut self, event: &FaultEvent, before: bool, outgoing: &Outgoing, to: usize) -> OperationId {
        self.log_fired(event, outgoing, to);
        let principal = self.principal(outgoing.client);
        let lost = if before {
            self.fleet.crash(to);
            format!("{} was killed (SIGKILL) before the request was written", Fleet::instance_name(to))
        } else {
            self.fleet.kill_after_write(to, &principal, outgoing).message
        };
        self.decisions.push(format!("killed {} (SIGKILL)", Fleet::instance_name(to)));
        self.record(outgoing, to, Err(lost))
    }

    /// Records a request whose answer is read later ([`TargetWorld::answered`]).
    fn request_only(&mut self, outgoing: &Outgoing, to: usize) -> OperationId {
        let client = &self.scenario.cluster.clients[outgoing.client];
        let target = Fleet::instance_name(to);
        let instance = format!("{}@{target}", self.scenario.cluster.instances[outgoing.instance].name);
        let id = self.history.request(Sent::of_text(outgoing, &client.name, &client.principal, instance));
        self.transcript.push(format!("→ {target} {}: {}", client.name, String::from_utf8_lossy(&outgoing.bytes())));
        id
    }

    /// The answer of a request recorded by [`TargetWorld::request_only`].
    fn answered(&mut self, id: OperationId, to: usize, answer: Result<Option<Value>, String>) {
        let target = Fleet::instance_name(to);
        let client = self.history.operations().iter().find(|op| op.id == id).map(|op| op.client.clone()).unwrap_or_default();
        match answer {
            Ok(Some(value)) => {
                self.transcript.push(format!("← {target} {client} (late, after the pause): {value}"));
                let at = self.history.operations().len();
                self.history.answer(id, Arc::new(value), 0, at + 1);
            }
            Ok(None) => {
                self.transcript.push(format!("  {target} answered nothing (a notification)"));
                self.history.no_response(id, NoResponse::Notification);
            }
            Err(why) => {
                self.transcript.push(format!("  {target} gave no answer after the pause: {why}"));
                self.history.no_response(id, NoResponse::Lost);
            }
        }
    }

    /// SIGCONT (or thaw) to instance `to`, then the answers it owes read and recorded.
    fn continue_instance(&mut self, to: usize, when: &str) {
        if self.fleet.resume(to) {
            self.decisions.push(format!("resumed {} {when}", Fleet::instance_name(to)));
            self.transcript.push(format!("  resumed {} {when}", Fleet::instance_name(to)));
        }
        let (owed, others): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending).into_iter().partition(|(at, _, _)| *at == to);
        self.pending = others;
        for (_, id, pending) in owed {
            let answer = self.fleet.collect(pending).map_err(|lost| lost.message);
            self.answered(id, to, answer);
        }
    }

    pub fn into_history(self) -> History {
        self.history
    }

    fn route(&self, instance: usize) -> usize {
        match self.routing {
            Routing::Spread => self.permutation[instance % self.permutation.len()],
            // The first live instance: the reference play keeps going on one process at a time.
            Routing::One => self.permutation.iter().copied().find(|&i| !self.fleet.is_down(i)).unwrap_or(self.permutation[0]),
        }
    }

    fn principal(&self, client: usize) -> String {
        self.scenario.cluster.clients[client].principal.clone()
    }

    fn record(&mut self, outgoing: &Outgoing, to: usize, answer: Result<Option<Value>, String>) -> OperationId {
        let client = &self.scenario.cluster.clients[outgoing.client];
        let target = Fleet::instance_name(to);
        // The scenario's instance and the process that took it, so a report (and a trace) names both.
        let instance = format!("{}@{target}", self.scenario.cluster.instances[outgoing.instance].name);
        let id = self.history.request(Sent::of_text(outgoing, &client.name, &client.principal, instance));
        self.transcript.push(format!("→ {target} {}: {}", client.name, String::from_utf8_lossy(&outgoing.bytes())));
        match answer {
            Ok(Some(value)) => {
                self.transcript.push(format!("← {target} {}: {value}", client.name));
                // Each exchange is its own delivery, at no simulated time.
                self.history.answer(id, Arc::new(value), 0, id.0 + 1);
            }
            Ok(None) => {
                self.transcript.push(format!("  {target} answered nothing (a notification)"));
                self.history.no_response(id, NoResponse::Notification);
            }
            Err(why) => {
                self.transcript.push(format!("  {target} gave no answer: {why}"));
                self.history.no_response(id, NoResponse::Lost);
            }
        }
        id
    }
}

impl TargetWorld<'_, '_> {
    fn arm(&mut self, event: FaultEvent, before: bool, instance: usize, label: &str) {
        let (line, statement) = self.current_step();
        self.decisions.push(format!(
            "line {line}: armed on the next {label} to {} ({}): {event}",
            self.scenario.cluster.instances[instance].name,
            Fleet::instance_name(self.route(instance))
        ));
        self.armed.push(Armed { event, before, line, statement });
    }

    /// The step being played (the last one annotated), as `(line, statement)`.
    fn current_step(&self) -> (usize, String) {
        self.step.clone()
    }
}

impl World for TargetWorld<'_, '_> {
    fn label(&self) -> &'static str {
        "against the target"
    }

    fn send(&mut self, outgoing: Outgoing) -> Result<OperationId, Refused> {
        let to = self.route(outgoing.instance);
        self.requests += 1;
        if let Some(armed) = self.armed_for(&outgoing) {
            return Ok(match armed.event.action {
                FaultAction::Pause { .. } => self.fire_pause(&armed.event, &outgoing, to),
                _ => self.fire_crash(&armed.event, armed.before, &outgoing, to),
            });
        }
        let principal = self.principal(outgoing.client);
        let answer = self.fleet.exchange_all(&[(to, principal, outgoing.clone())]).pop().expect("one answer per send");
        Ok(self.record(&outgoing, to, answer.map_err(|lost| lost.message)))
    }

    fn parallel(&mut self, items: Vec<Item>) -> Result<Vec<Result<OperationId, Refused>>, Refused> {
        let mut sends = Vec::new();
        for item in items {
            match item {
                Item::Send(outgoing) => sends.push(outgoing),
                Item::Browse(_) => return Err(Refused::Unsupported(crate::play::world::NO_BROWSER.into())),
                Item::Admin(_) => {
                    return Err(Refused::Unsupported("a target's store is its own: mcpsim makes no admin change in it".into()))
                }
            }
        }
        // The seed's order: a shuffle of the items, written one after another before any answer is read.
        let mut order: Vec<usize> = (0..sends.len()).collect();
        for i in (1..order.len()).rev() {
            let j = below(&mut self.rng, i as u64 + 1) as usize;
            order.swap(i, j);
        }
        let names: Vec<String> = order.iter().map(|&i| sends[i].name.clone().unwrap_or_else(|| format!("item {}", i + 1))).collect();
        let line = self.scenario.steps.get(sends.first().map(|s| s.step).unwrap_or(0)).map(|s| s.line).unwrap_or(0);
        self.decisions.push(format!("line {line}: parallel released in the order {}", names.join(", ")));
        self.requests += sends.len();
        let batch: Vec<(usize, String, Outgoing)> =
            order.iter().map(|&i| (self.route(sends[i].instance), self.principal(sends[i].client), sends[i].clone())).collect();
        let answers = self.fleet.exchange_all(&batch);
        let mut by_item: Vec<Option<OperationId>> = vec![None; sends.len()];
        for (&i, ((to, _, outgoing), answer)) in order.iter().zip(batch.iter().zip(answers)) {
            by_item[i] = Some(self.record(outgoing, *to, answer.map_err(|lost| lost.message)));
        }
        Ok(by_item.into_iter().map(|id| Ok(id.expect("every item was sent"))).collect())
    }

    fn admin(&mut self, _action: &AdminAction) -> Result<(), Refused> {
        Err(Refused::Unsupported("a target's store is its own: mcpsim makes no admin change in it".into()))
    }

    fn advance(&mut self, duration_ms: u64) -> Result<(), Refused> {
        if duration_ms > ADVANCE_MS_MAX {
            return Err(Refused::Unsupported(format!(
                "a target runs on the wall clock; mcpsim waits at most {ADVANCE_MS_MAX} ms for an advance"
            )));
        }
        self.decisions.push(format!("waited {duration_ms} ms on the wall clock"));
        std::thread::sleep(std::time::Duration::from_millis(duration_ms));
        Ok(())
    }

    fn crash(&mut self, instance: usize, trigger: Option<&TriggerSpec>) -> Result<(), Refused> {
        if let Some(trigger) = trigger {
            let receiver = self.scenario.cluster.instances.iter().position(|i| i.name == trigger.receiver);
            if receiver != Some(instance) || trigger.sender.is_some() {
                return Err(Refused::Unsupported(
                    "against a target, a crash is armed on a request the instance itself receives (`crash I after I receives \
                     METHOD`); a crash at a store operation or another actor's message needs the simulator's network"
                        .into(),
                ));
            }
            let event = FaultEvent {
                trigger: Trigger::Next { instance, method: Some(trigger.label.clone()) },
                action: FaultAction::Crash { restarted_after: usize::MAX, retry: RetryOn::Scenario },
            };
            self.arm(event, trigger.moment == Moment::Before, instance, &trigger.label);
            return Ok(());
        }
        let to = self.route(instance);
        self.fleet.crash(to);
        self.decisions.push(format!("killed {} (SIGKILL)", Fleet::instance_name(to)));
        self.transcript.push(format!("  killed {} (SIGKILL)", Fleet::instance_name(to)));
        Ok(())
    }

    fn restart(&mut self, instance: usize) -> Result<(), Refused> {
        let to = match self.routing {
            Routing::Spread => self.route(instance),
            Routing::One => match self.permutation.iter().copied().find(|&i| self.fleet.is_down(i)) {
                Some(down) => down,
                None => return Ok(()),
            },
        };
        self.fleet.restart(to).map_err(|error| Refused::Failed(error.to_string()))?;
        self.decisions.push(format!("restarted {}", Fleet::instance_name(to)));
        self.transcript.push(format!("  restarted {}", Fleet::instance_name(to)));
        Ok(())
    }

    fn pause(&mut self, instance: usize, trigger: Option<&TriggerSpec>) -> Result<(), Refused> {
        if self.routing == Routing::One {
            // Every scenario instance is this one process: stopping it would stop the retry meant to go elsewhere.
            return Err(Refused::Unsupported(
                "the reference play runs every instance on one process: pausing it would stop them all, so it plays without the pause"
                    .into(),
            ));
        }
        match trigger {
            Some(trigger) => {
                let receiver = self.scenario.cluster.instances.iter().position(|i| i.name == trigger.receiver);
                if receiver != Some(instance) {
                    return Err(Refused::Unsupported(
                        "against a target, a pause is armed on a request the paused instance itself receives (`pause I after I receives METHOD`)".into(),
                    ));
                }
                let event = FaultEvent {
                    trigger: Trigger::Next { instance, method: Some(trigger.label.clone()) },
                    action: FaultAction::Pause { resumed_after: usize::MAX, retry: RetryOn::Scenario },
                };
                self.arm(event, false, instance, &trigger.label);
                Ok(())
            }
            None => {
                let to = self.route(instance);
                let how = self.fleet.pause(to).map_err(|lost| Refused::Failed(lost.message))?;
                self.decisions.push(format!("paused {} ({})", Fleet::instance_name(to), how.describe()));
                self.transcript.push(format!("  paused {} ({})", Fleet::instance_name(to), how.describe()));
                Ok(())
            }
        }
    }

    fn resume(&mut self, instance: usize) -> Result<(), Refused> {
        if self.routing == Routing::One {
            return Err(Refused::Unsupported("the reference play made no pause to end".into()));
        }
        let to = self.route(instance);
        if !self.fleet.is_paused(to) {
            // An armed pause that has not fired stays armed, and is reported at the end if it never does.
            return Err(Refused::Failed(format!("{} is not paused (no pause of it fired)", Fleet::instance_name(to))));
        }
        self.continue_instance(to, "by the scenario");
        Ok(())
    }

    fn rotate(&mut self, _instances: &[usize], _key_id: &str, _secret: Vec<u8>) -> Result<(), Refused> {
        Err(Refused::Unsupported("a target's keys are its own".into()))
    }

    fn retire(&mut self, _instances: &[usize], _key_id: &str) -> Result<(), Refused> {
        Err(Refused::Unsupported("a target's keys are its own".into()))
    }

    fn history(&self) -> &History {
        &self.history
    }

    fn notes(&self) -> Result<Arc<Vec<Note>>, Unobservable> {
        Err(Unobservable::TargetStore)
    }

    fn consumed(&self) -> Result<Consumed<'_>, Unobservable> {
        Err(Unobservable::TargetReplayStore)
    }

    fn nonce_record(&self, _nonce: &str) -> Result<Option<Value>, Unobservable> {
        Err(Unobservable::TargetReplayStore)
    }

    fn exports(&self) -> Result<Vec<ExportRecord>, Unobservable> {
        Err(Unobservable::TargetExports)
    }

    fn global_caveat(&self) -> Option<String> {
        let skewed = self.scenario.cluster.instances.iter().any(|i| i.clock_offset_ms != 0);
        (self.routing == Routing::One && skewed).then(|| {
            "the reference play runs every instance on one process, on true time: it cannot honour per-instance clocks".to_string()
        })
    }

    fn annotate(&mut self, annotation: Annotation) {
        match annotation {
            Annotation::Step { line, text, .. } => {
                self.step = (line, text.clone());
                self.transcript.push(format!("line {line}: {text}"))
            }
            Annotation::Substep { line, text } => self.transcript.push(format!("line {line}:   {text}")),
            Annotation::Check { .. } | Annotation::Note { .. } => {}
        }
    }
}
