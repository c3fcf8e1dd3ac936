//! The third [`World`]: a target's processes. mcpsim is their only client and their network: it routes each
//! scenario instance to a process of the fleet (the seed's mapping), puts a `parallel` block's items on the
//! wire in the seed's order, kills (SIGKILL) and restarts processes for `crash` / `restart`, and records every
//! exchange. Its decisions are logged; what the servers do inside (their timing, their stores) is not its to
//! decide, and reports say so.

use super::faults::{FaultAction, FaultEvent, FaultPlan, Trigger};
use super::fleet::Fleet;
use crate::framework::ports::Note;
use crate::oracle::history::{History, NoResponse, OperationId, Sent};
use crate::play::world::{Annotation, Consumed, Item, Outgoing, Refused, Unobservable, World};
use crate::scenario::model::{AdminAction, Scenario, TriggerSpec};
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
    /// The drawn (or given) plan's events, each with whether it fired.
    plan: Vec<(FaultEvent, bool)>,
    /// Events armed by the scenario's statements (`drop answer …`, `duplicate …`, `hold …`), not fired yet.
    armed: Vec<FaultEvent>,
    /// Requests put on the wire so far (first attempts, retries and copies alike): a drawn trigger's count.
    requests: usize,
    /// Every fault that fired: the event, the number of the request it fired on, and where (`NAME → tK`).
    pub fired: Vec<(FaultEvent, usize, String)>,
}

/// What the fault dispatcher made of one request about to go on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Delivery {
    /// Written and answered as without faults.
    Plain,
}

impl<'f, 't> TargetWorld<'f, 't> {
    /// `plan`: the faults of this play (`FaultPlan::default()` for none); each fires on the request its
    /// trigger names, and is written in the decisions when it does.
    pub fn new(scenario: &'f Scenario, fleet: &'f mut Fleet<'t>, seed: u64, routing: Routing, plan: FaultPlan) -> TargetWorld<'f, 't> {
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
        for event in &plan.events {
            decisions.push(format!("fault planned: {event}"));
        }
        TargetWorld {
            scenario,
            fleet,
            routing,
            permutation,
            rng,
            history: History::default(),
            decisions,
            transcript: Vec::new(),
            plan: plan.events.into_iter().map(|event| (event, false)).collect(),
            armed: Vec::new(),
            requests: 0,
            fired: Vec::new(),
        }
    }

    /// Counts one request going on the wire (scenario instance `instance`, to fleet instance `to`) and fires
    /// the fault whose trigger it meets, if one does: a drawn event at its request number (or the first
    /// request after it a fault applies to: not a notification), else the oldest armed event for this instance
    /// and method. One fault per request; another that matches waits for the next.
    fn dispatch(&mut self, outgoing: &Outgoing, to: usize) -> Delivery {
        self.requests += 1;
        let number = self.requests;
        if outgoing.notification {
            return Delivery::Plain;
        }
        let method = outgoing
            .value
            .clone()
            .or_else(|| serde_json::from_slice::<Value>(&outgoing.bytes()).ok())
            .and_then(|v| v.get("method").and_then(Value::as_str).map(str::to_string));
        let drawn =
            self.plan.iter().position(|(event, fired)| !fired && matches!(event.trigger, Trigger::Request { number: at } if at <= number));
        let event = match drawn {
            Some(at) => {
                self.plan[at].1 = true;
                self.plan[at].0.clone()
            }
            None => {
                let armed = self.armed.iter().position(|event| match &event.trigger {
                    Trigger::Next { instance, method: wanted } => {
                        *instance == outgoing.instance && wanted.as_ref().is_none_or(|m| method.as_deref() == Some(m.as_str()))
                    }
                    Trigger::Request { .. } => false,
                });
                match armed {
                    Some(at) => self.armed.remove(at),
                    None => return Delivery::Plain,
                }
            }
        };
        let name = outgoing.name.clone().unwrap_or_else(|| method.clone().unwrap_or_else(|| "a request".into()));
        let place = format!("{name} → {}", Fleet::instance_name(to));
        self.decisions.push(format!("fault fired: {event} — request {number} ({place})"));
        self.fired.push((event.clone(), number, place));
        self.fire(&event, to)
    }

    /// The dispatcher's one arm per action: what the fault does to this request (to fleet instance `to`).
    fn fire(&mut self, event: &FaultEvent, to: usize) -> Delivery {
        let _ = to;
        let not_built = |what: &str| format!("fault not applied: {what} against a target is not built yet; the request goes out as usual");
        let refusal = match &event.action {
            FaultAction::LoseAnswer { .. } => not_built("a lost answer"),
            FaultAction::Duplicate { .. } => not_built("a duplicate"),
            FaultAction::Hold { .. } => not_built("a held request"),
            FaultAction::Pause { .. } => not_built("a pause (SIGSTOP)"),
            FaultAction::Crash { .. } => not_built("a crash between delivery and answer"),
            FaultAction::ClockSkew { .. } => not_built("a clock skew"),
            FaultAction::StoreCut { .. } => not_built("a store cut"),
        };
        self.decisions.push(refusal.clone());
        self.transcript.push(format!("  {refusal}"));
        Delivery::Plain
    }

    /// Drawn events that never fired (the play sent fewer requests than they wait for) and armed ones never
    /// met: reported, never silently passed.
    pub fn unfired(&self) -> Vec<FaultEvent> {
        self.plan.iter().filter(|(_, fired)| !fired).map(|(event, _)| event.clone()).chain(self.armed.iter().cloned()).collect()
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

impl World for TargetWorld<'_, '_> {
    fn label(&self) -> &'static str {
        "against the target"
    }

    fn send(&mut self, outgoing: Outgoing) -> Result<OperationId, Refused> {
        let to = self.route(outgoing.instance);
        let principal = self.principal(outgoing.client);
        let Delivery::Plain = self.dispatch(&outgoing, to);
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
        let batch: Vec<(usize, String, Outgoing)> =
            order.iter().map(|&i| (self.route(sends[i].instance), self.principal(sends[i].client), sends[i].clone())).collect();
        for (to, _, outgoing) in &batch {
            let Delivery::Plain = self.dispatch(outgoing, *to);
        }
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
        if trigger.is_some() {
            return Err(Refused::Unsupported("a crash at a precise store operation needs the simulator's network".into()));
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

    fn annotate(&mut self, annotation: Annotation) {
        match annotation {
            Annotation::Step { line, text, .. } => self.transcript.push(format!("line {line}: {text}")),
            Annotation::Substep { line, text } => self.transcript.push(format!("line {line}:   {text}")),
            Annotation::Check { .. } | Annotation::Note { .. } => {}
        }
    }
}
