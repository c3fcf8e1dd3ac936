//! The third [`World`]: a target's processes. mcpsim is their only client and their network: it routes each
//! scenario instance to a process of the fleet (the seed's mapping), puts a `parallel` block's items on the
//! wire in the seed's order, kills (SIGKILL) and restarts processes for `crash` / `restart`, and records every
//! exchange. Its decisions are logged; what the servers do inside (their timing, their stores) is not its to
//! decide, and reports say so.

use super::faults::{FaultAction, FaultEvent, FaultPlan, RetryOn, Trigger, RETRIES_MAX, RETRY_BACKOFF_MAX_MS, RETRY_BACKOFF_MS};
use super::file::StoreKind;
use super::fleet::{Fleet, FleetError, Flight};
use super::store_proxy::Outage;
use crate::framework::ports::Note;
use crate::oracle::history::{Attempt, History, NoResponse, OperationId, Sent};
use crate::play::world::{Annotation, ArmedFault, Consumed, Item, NotPlayed, Outgoing, Refused, Unobservable, World};
use crate::scenario::model::{AdminAction, Moment, Scenario, TriggerSpec};
use crate::servers::gateway::backends::ExportRecord;
use crate::sim::engine::random::{below, stream, Stream};
use rand_chacha::ChaCha8Rng;
use serde_json::Value;
use std::collections::BTreeMap;
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
    /// Events armed by the scenario's statements (`drop answer …`, `duplicate …`, `hold …`), not fired yet,
    /// each with the fleet instance a `duplicate … onto J` copies to.
    armed: Vec<(FaultEvent, Option<usize>)>,
    /// Requests held back, in the order they were held.
    held: Vec<Held>,
    /// Requests put on the wire so far (first attempts, retries and copies alike): a drawn trigger's count.
    requests: usize,
    /// Every fault that fired: the event, the number of the request it fired on, and where (`NAME → tK`).
    pub fired: Vec<(FaultEvent, usize, String)>,
    /// Armed `crash I before I receives OP` events (also in `armed`): they kill with nothing written.
    crash_before: Vec<FaultEvent>,
    /// Requests written to a paused instance (fleet instance, operation, flight): their answers are read when
    /// it is continued (the late commit).
    paused_ops: Vec<(usize, OperationId, Flight)>,
    /// A drawn pause's instance, and the later requests still to go out before it is continued.
    resume_after: BTreeMap<usize, usize>,
    /// A drawn crash's instance, and the later requests still to go out before it is restarted.
    restart_after: BTreeMap<usize, usize>,
    /// Store faults: a `store cut` armed by its statement, and the one under way.
    store: StoreFaults,
    /// Items `admin delete` removed: the effect probe's `before` is lowered by as many, so the judge counts
    /// only what the server did.
    pub admin_deleted: usize,
    /// Armed `roll I to STAGE after I receives OP`, by scenario instance: the stage its armed crash restarts it in.
    roll_pending: BTreeMap<usize, String>,
}

/// The store faults of a play.
#[derive(Default)]
struct StoreFaults {
    /// `store cut after N statements [for D]`, waiting for the next request.
    armed: Option<(u32, Option<u64>)>,
    /// The cut or lock under way.
    active: Option<ActiveStoreFault>,
    /// Cuts disarmed without firing, as the decision log says them.
    never_fired: Vec<String>,
}

struct ActiveStoreFault {
    kind: StoreKind,
    after_statements: u32,
    /// `None`: until the next step.
    outage_ms: Option<u64>,
    /// The proxy's cuts and statements before this one was armed, to see it happen.
    cuts_before: u32,
    statements_before: u64,
    /// The request it was armed at.
    request: usize,
    /// Whether the cut was seen (and logged); a lock is in place at once.
    fired: bool,
    /// A drawn plan's (not a scenario's statement).
    drawn: bool,
}

/// What the fault dispatcher made of one request about to go on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Delivery {
    /// Written and answered as without faults.
    Plain,
    /// Written; its whole answer read, then discarded (`fault`: the decision line).
    Discard { fault: String, retry: RetryOn },
    /// Written, and the client stops waiting right away (HTTP: the connection closed before any answer byte).
    Close { fault: String, retry: RetryOn },
    /// Written, and a copy (same bytes, same id) to fleet instance `to` before either answer is read.
    Copy { to: usize },
    /// Not written now: after `overtaken_by` later requests went out (`usize::MAX`: at `release`), or at the
    /// end of the play.
    Hold { overtaken_by: usize, fault: String },
    /// The instance stopped, then the request written (it sits unread in its pipe or socket); its answer read
    /// once the instance is continued: after `resumed_after` later requests (`usize::MAX`: at `resume`), or at
    /// the end of the play.
    Pause { resumed_after: usize, retry: RetryOn },
    /// The request written, then the instance SIGKILLed before its answer is read (`before`: killed with
    /// nothing written); restarted after `restarted_after` later requests (`usize::MAX`: by `restart`, or
    /// before the probe).
    Crash { before: bool, restarted_after: usize, retry: RetryOn, fault: String },
}

/// The seed's order of the fleet's `instances` (scenario instance `k` goes to `permutation[k % len]` when
/// spread), and the scheduler stream drawn from after it.
fn routing_permutation(seed: u64, instances: usize) -> (Vec<usize>, ChaCha8Rng) {
    let mut rng = stream(seed, Stream::Scheduler);
    let mut permutation: Vec<usize> = (0..instances).collect();
    for i in (1..permutation.len()).rev() {
        let j = below(&mut rng, i as u64 + 1) as usize;
        permutation.swap(i, j);
    }
    (permutation, rng)
}

/// The stage each fleet instance starts in when `scenario` is played spread under `seed` (`instance I stage
/// NAME`): the first scenario instance mapped to a fleet instance decides.
pub fn starting_stages(scenario: &Scenario, seed: u64, instances: usize) -> BTreeMap<usize, String> {
    let (permutation, _) = routing_permutation(seed, instances);
    let mut stages = BTreeMap::new();
    for (k, instance) in scenario.cluster.instances.iter().enumerate() {
        if let Some(stage) = &instance.stage {
            stages.entry(permutation[k % permutation.len()]).or_insert_with(|| stage.clone());
        }
    }
    stages
}

/// One request to put on the wire: to fleet instance `to`, as `principal`; `attempt` when it repeats another.
struct Wire {
    to: usize,
    principal: String,
    outgoing: Outgoing,
    attempt: Option<Attempt>,
}

/// A held request, already in the history (pending).
struct Held {
    id: OperationId,
    wire: Wire,
    /// Later requests still to go out before it does (`usize::MAX`: until `release`).
    remaining: usize,
}

impl<'f, 't> TargetWorld<'f, 't> {
    /// `plan`: the faults of this play (`FaultPlan::default()` for none); each fires on the request its
    /// trigger names, and is written in the decisions when it does.
    pub fn new(scenario: &'f Scenario, fleet: &'f mut Fleet<'t>, seed: u64, routing: Routing, plan: FaultPlan) -> TargetWorld<'f, 't> {
        let (permutation, rng) = routing_permutation(seed, fleet.len());
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
        let mut history = History::default();
        if !plan.events.is_empty() {
            // A drawn plan's clients retry what a fault left unanswered, as real clients do.
            history.clients_now_retry();
        }
        TargetWorld {
            scenario,
            fleet,
            routing,
            permutation,
            rng,
            history,
            decisions,
            transcript: Vec::new(),
            plan: plan.events.into_iter().map(|event| (event, false)).collect(),
            armed: Vec::new(),
            held: Vec::new(),
            requests: 0,
            fired: Vec::new(),
            store: StoreFaults::default(),
            admin_deleted: 0,
            crash_before: Vec::new(),
            paused_ops: Vec::new(),
            resume_after: BTreeMap::new(),
            restart_after: BTreeMap::new(),
            roll_pending: BTreeMap::new(),
        }
    }

    /// Says which stage each instance declared with `instance I stage NAME` started in (the fleet was started in
    /// them), then restarts those declared with `instance I clock ±DURATION` under that clock (libfaketime,
    /// keeping their stage). The reference play (every instance on one process) cannot honour either: it plays on true
    /// time and the file's command, and says so ([`World::global_caveat`]).
    pub fn start_skewed(&mut self) -> Result<(), FleetError> {
        if self.routing == Routing::One {
            return Ok(());
        }
        // The fleet was started in the declared stages ([`starting_stages`], the first instance mapped to each
        // fleet instance deciding): said here, with any instance that shares a process in another stage.
        let mut said = Vec::new();
        for (k, instance) in self.scenario.cluster.instances.iter().enumerate() {
            let (Some(stage), to) = (&instance.stage, self.route(k)) else { continue };
            let running = self.fleet.stage_of(to).unwrap_or_default().to_string();
            if running != *stage {
                let line = format!(
                    "{} shares {} with an instance in another stage: it runs in that one's",
                    instance.name,
                    Fleet::instance_name(to)
                );
                self.decisions.push(line);
            } else if !said.contains(&to) {
                said.push(to);
                self.decisions.push(format!(
                    "{} starts in stage {} on {}",
                    instance.name,
                    self.fleet.stage_shown(stage),
                    Fleet::instance_name(to)
                ));
            }
        }
        let mut clocks: BTreeMap<usize, (i64, String)> = BTreeMap::new();
        for (k, instance) in self.scenario.cluster.instances.iter().enumerate() {
            let to = self.route(k);
            match clocks.get(&to) {
                Some((offset, _)) if *offset != instance.clock_offset_ms => self.decisions.push(format!(
                    "{} shares {} with an instance whose clock differs: it runs with that one's",
                    instance.name,
                    Fleet::instance_name(to)
                )),
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

    /// Stops fleet instance `to` (its cgroup leaf frozen, or SIGSTOP to its group), saying how.
    fn pause_instance(&mut self, to: usize) -> Result<(), String> {
        let how = self.fleet.pause(to).map_err(|lost| lost.message)?;
        let line = format!("paused {} ({})", Fleet::instance_name(to), how.describe());
        self.decisions.push(line.clone());
        self.transcript.push(format!("  {line}"));
        Ok(())
    }

    /// SIGCONT (or thaw) to fleet instance `to`, then the answers it owes read and recorded: the late commit.
    fn continue_instance(&mut self, to: usize, when: &str) {
        self.resume_after.remove(&to);
        if self.fleet.resume(to) {
            self.decisions.push(format!("resumed {} {when}", Fleet::instance_name(to)));
            self.transcript.push(format!("  resumed {} {when}", Fleet::instance_name(to)));
        }
        let (owed, others): (Vec<_>, Vec<_>) = std::mem::take(&mut self.paused_ops).into_iter().partition(|(at, _, _)| *at == to);
        self.paused_ops = others;
        for (_, id, flight) in owed {
            let answer = self.fleet.read(flight);
            if answer.is_ok() {
                self.transcript.push(format!("  {} answers late, after the pause:", Fleet::instance_name(to)));
            }
            self.record_answer(id, to, answer.map_err(|lost| lost.message));
        }
    }

    /// A drawn pause or crash whose count of later requests ran out: the instance continued or restarted.
    fn heal_due(&mut self) {
        let due: Vec<usize> = self.resume_after.iter().filter(|(_, left)| **left == 0).map(|(&to, _)| to).collect();
        for to in due {
            self.continue_instance(to, "after its later requests went out");
        }
        let due: Vec<usize> = self.restart_after.iter().filter(|(_, left)| **left == 0).map(|(&to, _)| to).collect();
        for to in due {
            self.restart_after.remove(&to);
            let line = match self.fleet.restart(to) {
                Ok(()) => format!("restarted {} after its later requests went out", Fleet::instance_name(to)),
                // As an orchestrator does, it is tried again (after the next request; before the probe at the latest).
                Err(error) => {
                    self.restart_after.insert(to, 1);
                    format!("could not restart {} (tried again after the next request): {error}", Fleet::instance_name(to))
                }
            };
            self.decisions.push(line.clone());
            self.transcript.push(format!("  {line}"));
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
                let armed = self.armed.iter().position(|(event, _)| match &event.trigger {
                    Trigger::Next { instance, method: wanted } => {
                        *instance == outgoing.instance && wanted.as_ref().is_none_or(|m| method.as_deref() == Some(m.as_str()))
                    }
                    Trigger::Request { .. } => false,
                });
                match armed {
                    Some(at) => {
                        let (event, onto) = self.armed.remove(at);
                        return self.fired_on(event, number, &name_of(outgoing, &method), to, onto);
                    }
                    None => return Delivery::Plain,
                }
            }
        };
        self.fired_on(event, number, &name_of(outgoing, &method), to, None)
    }

    /// Before requests go on the wire: an armed `store cut` fires on the first of them.
    fn before_wire(&mut self) {
        let first = self.requests + 1;
        if let Some((after_statements, outage_ms)) = self.store.armed.take() {
            if let Err(why) = self.fire_store_cut_at(after_statements, outage_ms, first, false) {
                self.decisions.push(format!("store cut not carried out: {}", why.reason()));
            }
        }
    }

    /// After an exchange: a cut the proxy carried out is logged once; a cut the request was answered without
    /// is disarmed (it would otherwise fall on a later request) and reported as never fired.
    fn after_wire(&mut self) {
        let Some(active) = self.store.active.as_mut().filter(|a| a.kind == StoreKind::Postgres && !a.fired) else { return };
        let Some(counts) = self.fleet.store_counts() else { return };
        if counts.cuts > active.cuts_before {
            active.fired = true;
            let outage = match active.outage_ms {
                Some(ms) => format!("for {ms} ms"),
                None => "until the next step".into(),
            };
            let line = format!(
                "store cut: {} statement(s) reached the database after request {}, then {} connection(s) were cut before the next one; \
                 new connections refused {outage}",
                active.after_statements, active.request, counts.connections_cut
            );
            self.decisions.push(line.clone());
            self.transcript.push(format!("  {line}"));
        } else {
            let line = format!(
                "store cut after {} statement(s), armed at request {}: never fired (the request was answered after {} statement(s)); disarmed",
                active.after_statements,
                active.request,
                counts.statements - active.statements_before
            );
            let drawn = active.drawn;
            self.store.active = None;
            if drawn {
                // The drawn event did not get to cut anything: the coverage must not count it as fired.
                if let Some(at) = self.fired.iter().rposition(|(event, _, _)| matches!(event.action, FaultAction::StoreCut { .. })) {
                    self.fired.remove(at);
                }
                self.decisions.push(format!("fault not applied: {line}"));
            } else {
                self.store.never_fired.push(line.clone());
            }
            self.fleet.store_heal();
            self.transcript.push(format!("  {line}"));
        }
    }

    /// A drawn plan's store cut (the dispatcher's `FaultAction::StoreCut` arm), fired at the request being put
    /// on the wire: see [`TargetWorld::fire_store_cut_at`].
    pub fn fire_store_cut(&mut self, after_statements: u32, outage_ms: Option<u64>) -> Result<(), Refused> {
        let request = self.requests.max(1);
        self.fire_store_cut_at(after_statements, outage_ms, request, true)
    }

    /// PostgreSQL: arms the proxy (`after_statements` more statements, then every connection cut, new ones
    /// refused for `outage_ms`, or until the next step). SQLite: the write lock is held instead, from now, for
    /// the window. Without `[store]`: refused, naming the table.
    /// `drawn`: a drawn plan's cut, which (like every drawn event) is coverage when it does not happen, where a
    /// scenario's `store cut` that does not is a failure.
    fn fire_store_cut_at(&mut self, after_statements: u32, outage_ms: Option<u64>, request: usize, drawn: bool) -> Result<(), Refused> {
        let kind = self.fleet.store_kind().map_err(Refused::Unsupported)?;
        let outage = match outage_ms {
            Some(ms) => format!("for {ms} ms"),
            None => "until the next step".into(),
        };
        let (cuts_before, statements_before) = self.fleet.store_counts().map_or((0, 0), |c| (c.cuts, c.statements));
        let line = match kind {
            StoreKind::Postgres => {
                let window = outage_ms.map_or(Outage::UntilHealed, |ms| Outage::For(std::time::Duration::from_millis(ms)));
                self.fleet.store_cut(after_statements, window).map_err(Refused::Failed)?;
                format!(
                    "store cut armed at request {request}: {after_statements} more statement(s) reach the database, then every \
                     connection is cut and new ones refused {outage} (which of the server's operations that falls in is its own timing)"
                )
            }
            StoreKind::Sqlite => {
                let window = outage_ms.unwrap_or(crate::scenario::parser::STORE_OUTAGE_MS_MAX);
                self.fleet.store_lock(std::time::Duration::from_millis(window)).map_err(Refused::Failed)?;
                format!(
                    "store write lock taken at request {request} (a SQLite file has no connection mcpsim sees, so the lock stands for \
                     the cut; {after_statements} statement(s) not counted), held {outage}"
                )
            }
        };
        self.decisions.push(line.clone());
        self.transcript.push(format!("  {line}"));
        self.store.active = Some(ActiveStoreFault {
            kind,
            after_statements,
            outage_ms,
            cuts_before,
            statements_before,
            request,
            fired: kind == StoreKind::Sqlite,
            drawn,
        });
        Ok(())
    }

    /// A new step: an outage "until the next step" that has happened ends now.
    fn next_step(&mut self) {
        if self.store.active.as_ref().is_some_and(|a| a.fired && a.outage_ms.is_none()) {
            self.store.active = None;
            self.fleet.store_heal();
            self.decisions.push("store reachable again (the step after the cut)".into());
            self.transcript.push("  store reachable again".into());
        }
    }

    /// The end of the play: every outage ends (the effect probe needs the store); a cut armed and never
    /// carried out is reported. `Some`: what never fired.
    pub fn end_store_faults(&mut self) -> Option<String> {
        let mut never = std::mem::take(&mut self.store.never_fired);
        if let Some((after, _)) = self.store.armed.take() {
            never.push(format!("store cut after {after} statement(s): armed, never fired (no request followed it)"));
        }
        if self.store.active.take().is_some() || !never.is_empty() {
            self.fleet.store_heal();
        }
        self.decisions.extend(never.iter().cloned());
        (!never.is_empty()).then(|| never.join("; "))
    }

    /// Writes that `event` fired on request `number` (`name`, to fleet instance `to`), and fires it.
    fn fired_on(&mut self, event: FaultEvent, number: usize, name: &str, to: usize, onto: Option<usize>) -> Delivery {
        let place = format!("{name} → {}", Fleet::instance_name(to));
        let line = format!("{event} — request {number} ({place})");
        self.decisions.push(format!("fault fired: {line}"));
        self.transcript.push(format!("  fault fired: {line}"));
        self.fired.push((event.clone(), number, place));
        self.fire(&event, line, to, onto)
    }

    /// The dispatcher's one arm per action: what the fault does to this request (to fleet instance `to`;
    /// `onto`: the instance a scenario's `duplicate … onto J` names). `line`: the fault's decision line.
    fn fire(&mut self, event: &FaultEvent, line: String, to: usize, onto: Option<usize>) -> Delivery {
        let refusal = match &event.action {
            FaultAction::LoseAnswer { close_connection: false, retry } => return Delivery::Discard { fault: line, retry: *retry },
            FaultAction::LoseAnswer { close_connection: true, retry } => return Delivery::Close { fault: line, retry: *retry },
            FaultAction::Duplicate { other } => {
                let copy_to = match (onto, other) {
                    (Some(onto), _) => onto,
                    (None, true) => self.next_live(to),
                    (None, false) => to,
                };
                return Delivery::Copy { to: copy_to };
            }
            FaultAction::Hold { overtaken_by } => return Delivery::Hold { overtaken_by: *overtaken_by, fault: line },
            FaultAction::Pause { resumed_after, retry } => return self.fire_pause(*resumed_after, *retry),
            FaultAction::Crash { restarted_after, retry } => return self.fire_crash(event, line, *restarted_after, *retry),
            FaultAction::ClockSkew { instance, offset_ms } => match self.start_skewed_now(*instance, *offset_ms) {
                Ok(()) => return Delivery::Plain,
                Err(why) => format!("fault not applied: {why}; the request goes out as usual"),
            },
            FaultAction::StoreCut { after_statements, outage_ms } => match self.fire_store_cut(*after_statements, Some(*outage_ms)) {
                Ok(()) => return Delivery::Plain,
                Err(why) => format!("fault not applied: {}; the request goes out as usual", why.reason()),
            },
        };
        self.decisions.push(refusal.clone());
        self.transcript.push(format!("  {refusal}"));
        Delivery::Plain
    }

    /// `pause`'s arm of the dispatcher (the request to a paused instance is written after the pause).
    fn fire_pause(&mut self, resumed_after: usize, retry: RetryOn) -> Delivery {
        Delivery::Pause { resumed_after, retry }
    }

    /// `crash`'s arm of the dispatcher: a `crash I before I receives OP` kills with nothing written.
    fn fire_crash(&mut self, event: &FaultEvent, fault: String, restarted_after: usize, retry: RetryOn) -> Delivery {
        let before = match self.crash_before.iter().position(|e| e == event) {
            Some(at) => {
                self.crash_before.remove(at);
                true
            }
            None => false,
        };
        Delivery::Crash { before, restarted_after, retry, fault }
    }

    /// A drawn clock skew: fleet instance `instance` restarted under libfaketime, its clock `offset_ms` off.
    fn start_skewed_now(&mut self, instance: usize, offset_ms: i64) -> Result<(), String> {
        if instance >= self.fleet.len() {
            return Err(format!("the fleet has no instance t{}", instance + 1));
        }
        let line = self.fleet.start_with_clock(instance, offset_ms).map_err(|error| error.to_string())?;
        self.decisions.push(line.clone());
        self.transcript.push(format!("  {line}"));
        Ok(())
    }

    /// The live fleet instance after `to` in the play's routing order (cyclically): where a client fails over
    /// to; `to` itself when it is the only one up.
    fn next_live(&self, to: usize) -> usize {
        let at = self.permutation.iter().position(|&i| i == to).unwrap_or(0);
        let count = self.permutation.len();
        (1..count).map(|step| self.permutation[(at + step) % count]).find(|&i| !self.fleet.is_down(i)).unwrap_or(to)
    }

    /// Puts `wires` on the wire in order, each as the dispatcher says, then reads the answers awaited (in the
    /// same order), releases the held requests whose time came, and retries what a drawn fault lost. The
    /// operations of `wires`, in order.
    fn put(&mut self, wires: Vec<Wire>) -> Vec<OperationId> {
        let mut flights = Vec::new();
        let mut ids = Vec::new();
        // Requests a fault left without their answer, for the client's retry: (operation, retry, where, wire).
        let mut lost: Vec<(OperationId, RetryOn, usize, Outgoing, String)> = Vec::new();
        // Requests no fault touched, should their answer not come all the same (an instance a fault paused or
        // killed, a timeout): under a drawn plan their client retries them too.
        let mut unfaulted: BTreeMap<OperationId, (Outgoing, String)> = BTreeMap::new();
        self.before_wire();
        for wire in wires {
            let delivery = self.dispatch(&wire.outgoing, wire.to);
            let id = self.record_sent(&wire);
            ids.push(id);
            for held in &mut self.held {
                if held.remaining != usize::MAX {
                    held.remaining = held.remaining.saturating_sub(1);
                }
            }
            for left in self.resume_after.values_mut().chain(self.restart_after.values_mut()) {
                *left = left.saturating_sub(1);
            }
            match delivery {
                Delivery::Pause { resumed_after, retry } => {
                    let flight = match self.pause_instance(wire.to) {
                        Ok(()) => {
                            let flight = self.fleet.write(wire.to, &wire.principal, &wire.outgoing);
                            self.fleet.let_writes_land();
                            flight
                        }
                        // Down (killed): written nowhere, lost as any request to a down instance.
                        Err(_) => self.fleet.write(wire.to, &wire.principal, &wire.outgoing),
                    };
                    self.paused_ops.push((wire.to, id, flight));
                    if resumed_after != usize::MAX {
                        self.resume_after.insert(wire.to, resumed_after);
                    }
                    if retry != RetryOn::Scenario {
                        // The client stops waiting for the paused instance and tries again.
                        lost.push((id, retry, wire.to, wire.outgoing.clone(), wire.principal.clone()));
                    }
                }
                Delivery::Crash { before, restarted_after, retry, fault } => {
                    let target = Fleet::instance_name(wire.to);
                    let why = if before {
                        self.fleet.crash(wire.to);
                        format!("{target} was killed (SIGKILL) before the request was written")
                    } else {
                        self.fleet.kill_after_write(wire.to, &wire.principal, &wire.outgoing).message
                    };
                    self.decisions.push(format!("killed {target} (SIGKILL)"));
                    self.transcript.push(format!("  {target} gave no answer: {why}"));
                    if let Some(stage) = self.roll_pending.remove(&wire.outgoing.instance) {
                        let line = match self.fleet.set_stage(wire.to, &stage) {
                            Ok(()) => format!("rolling {target} to stage {}: it starts in it", self.fleet.stage_shown(&stage)),
                            Err(error) => format!("roll not applied: {error}"),
                        };
                        self.decisions.push(line.clone());
                        self.transcript.push(format!("  {line}"));
                    }
                    self.history.lost_to_fault(id, fault);
                    if restarted_after != usize::MAX {
                        self.restart_after.insert(wire.to, restarted_after);
                    }
                    lost.push((id, retry, wire.to, wire.outgoing.clone(), wire.principal.clone()));
                }
                Delivery::Plain => {
                    flights.push((id, wire.to, self.fleet.write(wire.to, &wire.principal, &wire.outgoing), None));
                    unfaulted.insert(id, (wire.outgoing.clone(), wire.principal.clone()));
                }
                Delivery::Discard { fault, retry } => {
                    let flight = self.fleet.write(wire.to, &wire.principal, &wire.outgoing);
                    lost.push((id, retry, wire.to, wire.outgoing.clone(), wire.principal.clone()));
                    flights.push((id, wire.to, flight, Some(fault)));
                }
                Delivery::Close { fault, retry } => {
                    let target = Fleet::instance_name(wire.to);
                    match self.fleet.write_and_close(wire.to, &wire.principal, &wire.outgoing) {
                        Ok(()) => {
                            self.transcript.push(format!("  {target}: the request written, the client stopped waiting (its answer lost)"))
                        }
                        Err(why) => self.transcript.push(format!("  {target} gave no answer: {}", why.message)),
                    }
                    self.history.lost_to_fault(id, fault);
                    lost.push((id, retry, wire.to, wire.outgoing, wire.principal));
                }
                Delivery::Copy { to } => {
                    flights.push((id, wire.to, self.fleet.write(wire.to, &wire.principal, &wire.outgoing), None));
                    unfaulted.insert(id, (wire.outgoing.clone(), wire.principal.clone()));
                    // The copy is a request on the wire too (counted, never itself faulted).
                    self.requests += 1;
                    let instance = self.instance_label(wire.outgoing.instance, to);
                    let copy = self.history.attempt(Attempt::Duplicate { of: id }, instance, 0);
                    let target = Fleet::instance_name(to);
                    self.transcript
                        .push(format!("→ {target} (a copy, by the network): {}", String::from_utf8_lossy(&wire.outgoing.bytes())));
                    flights.push((copy, to, self.fleet.write(to, &wire.principal, &wire.outgoing), None));
                }
                Delivery::Hold { overtaken_by, fault } => {
                    self.transcript.push(format!("  {}: held back, not written ({fault})", Fleet::instance_name(wire.to)));
                    self.held.push(Held { id, wire, remaining: overtaken_by });
                }
            }
        }
        for (id, to, flight, discard) in flights {
            let answer = self.fleet.read(flight);
            match discard {
                Some(fault) => {
                    let target = Fleet::instance_name(to);
                    match answer {
                        Ok(Some(value)) => self.transcript.push(format!("  {target} answered (discarded, the answer lost): {value}")),
                        Ok(None) => self.transcript.push(format!("  {target} answered nothing (a notification)")),
                        Err(why) => self.transcript.push(format!("  {target} gave no answer: {}", why.message)),
                    }
                    self.history.lost_to_fault(id, fault);
                }
                None => {
                    // No answer, or one that says to try again (a store outage, a claim still in progress): under
                    // a drawn plan its client retries, as a real client does.
                    let again = wants_retry(&answer);
                    self.record_answer(id, to, answer.map_err(|lost| lost.message));
                    if let (true, true, Some((outgoing, principal))) = (again, self.history.clients_retry(), unfaulted.remove(&id)) {
                        lost.push((id, RetryOn::Other, to, outgoing, principal));
                    }
                }
            }
        }
        self.after_wire();
        self.release_held(|held| held.remaining == 0, "its later requests went out");
        // A drawn hold lets the requests put on the wire with it overtake it, never its client's next step: a
        // client waits for an answer before it goes on (a scenario's `hold` waits for its `release`).
        self.release_held(|held| held.remaining != usize::MAX, "the requests sent with it went out first, and its client waits for it");
        self.heal_due();
        for (id, retry, to, outgoing, principal) in lost {
            self.retry_lost(id, retry, to, outgoing, principal);
        }
        ids
    }

    /// Writes the held requests that are `due` and records their answers (`why`: for the decision log);
    /// their operations.
    fn release_held(&mut self, due: impl Fn(&Held) -> bool, why: &str) -> Vec<OperationId> {
        let released: Vec<Held>;
        (released, self.held) = std::mem::take(&mut self.held).into_iter().partition(due);
        let mut flights = Vec::new();
        for held in released {
            let target = Fleet::instance_name(held.wire.to);
            self.decisions.push(format!("released the held request {} to {target} ({why})", held.id.0 + 1));
            self.transcript.push(format!("→ {target} (released, held since): {}", String::from_utf8_lossy(&held.wire.outgoing.bytes())));
            let flight = self.fleet.write(held.wire.to, &held.wire.principal, &held.wire.outgoing);
            flights.push((held.id, held.wire.to, flight, held.wire.outgoing, held.wire.principal));
        }
        let mut ids = Vec::new();
        let mut again = Vec::new();
        for (id, to, flight, outgoing, principal) in flights {
            let answer = self.fleet.read(flight);
            if self.history.clients_retry() && wants_retry(&answer) {
                again.push((id, to, outgoing, principal));
            }
            self.record_answer(id, to, answer.map_err(|lost| lost.message));
            ids.push(id);
        }
        for (id, to, outgoing, principal) in again {
            self.retry_lost(id, RetryOn::Other, to, outgoing, principal);
        }
        ids
    }

    /// A drawn fault left `id` (sent to fleet instance `to`) without its answer: its client sends the same
    /// request again with a fresh id, where `retry` says, up to [`RETRIES_MAX`] times in all.
    fn retry_lost(&mut self, id: OperationId, retry: RetryOn, to: usize, outgoing: Outgoing, principal: String) {
        if retry == RetryOn::Scenario {
            return;
        }
        let first = self.history.first_attempt(id);
        let number = self.history.attempts_of(first).len() as u32;
        if number > RETRIES_MAX {
            self.decisions.push(format!("the client of request {} gives up after {RETRIES_MAX} retries", first.0 + 1));
            return;
        }
        // A client that finds the instance down or not answering (paused) goes to the next one, as a client
        // behind a load balancer does: a retry never waits on an instance that cannot answer.
        let reachable = |world: &Self, i: usize| !world.fleet.is_down(i) && !world.fleet.paused().contains(&i);
        let again = match retry {
            RetryOn::Same | RetryOn::Scenario if reachable(self, to) => to,
            _ => {
                let at = self.permutation.iter().position(|&i| i == to).unwrap_or(0);
                let count = self.permutation.len();
                (1..count).map(|step| self.permutation[(at + step) % count]).find(|&i| reachable(self, i)).unwrap_or(to)
            }
        };
        // A fresh JSON-RPC id, as a client gives each request it sends; unique in the play.
        let fresh = RETRY_ID_BASE + self.requests as u64;
        let outgoing = with_id(outgoing, fresh);
        // The client backs off before it tries again (longer each time), so a short outage can end meanwhile.
        let backoff_ms = (RETRY_BACKOFF_MS * u64::from(number)).min(RETRY_BACKOFF_MAX_MS);
        self.decisions.push(format!(
            "the client retries request {} on {} with id {fresh} after {backoff_ms} ms (retry {number} of at most {RETRIES_MAX})",
            first.0 + 1,
            Fleet::instance_name(again)
        ));
        std::thread::sleep(std::time::Duration::from_millis(backoff_ms));
        self.put(vec![Wire { to: again, principal, outgoing, attempt: Some(Attempt::Retry { of: first, number }) }]);
    }

    /// Ends the play's faults: every paused instance continued, every held request released (and said so). Called once the scenario is over,
    /// before the effect probe.
    pub fn finish(&mut self) {
        // Every pause ends: continued, its owed answers read (the late commit), before the probe.
        let mut owing: Vec<usize> = self.fleet.paused();
        owing.extend(self.paused_ops.iter().map(|(to, _, _)| *to));
        owing.sort_unstable();
        owing.dedup();
        for to in owing {
            self.continue_instance(to, "at the end of the play");
        }
        if !self.held.is_empty() {
            self.decisions
                .push(format!("{} held request(s) never released by the scenario: released at the end of the play", self.held.len()));
            self.release_held(|_| true, "the play ended");
        }
    }

    /// Drawn events that never fired (the play sent fewer requests than they wait for) and armed ones never
    /// met: reported, never silently passed.
    pub fn unfired(&self) -> Vec<FaultEvent> {
        let armed = self.armed.iter().map(|(event, _)| event.clone());
        self.plan.iter().filter(|(_, fired)| !fired).map(|(event, _)| event.clone()).chain(armed).collect()
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

    /// The scenario's instance and the process that took it, so a report (and a trace) names both.
    /// With a stage: `i1@t2[k1]` (the judge reads which stage took each round from it).
    fn instance_label(&self, instance: usize, to: usize) -> String {
        let name = &self.scenario.cluster.instances[instance].name;
        match self.fleet.stage_of(to) {
            Some(stage) => format!("{name}@{}[{stage}]", Fleet::instance_name(to)),
            None => format!("{name}@{}", Fleet::instance_name(to)),
        }
    }

    /// A request goes on the wire: a new operation (a first attempt, or the retry `wire.attempt` says).
    fn record_sent(&mut self, wire: &Wire) -> OperationId {
        let client = &self.scenario.cluster.clients[wire.outgoing.client];
        let target = Fleet::instance_name(wire.to);
        let sent = Sent::of_text(&wire.outgoing, &client.name, &client.principal, self.instance_label(wire.outgoing.instance, wire.to));
        let id = match wire.attempt {
            Some(attempt) => self.history.attempt_sent(attempt, Sent { name: None, ..sent }),
            None => self.history.request(sent),
        };
        let what = if wire.attempt.is_some() { " (a retry)" } else { "" };
        self.transcript.push(format!("→ {target} {}{what}: {}", client.name, String::from_utf8_lossy(&wire.outgoing.bytes())));
        id
    }

    /// What came back for `id` from fleet instance `to`.
    fn record_answer(&mut self, id: OperationId, to: usize, answer: Result<Option<Value>, String>) {
        let target = Fleet::instance_name(to);
        let client = self.history.operations()[id.0].client.clone();
        match answer {
            Ok(Some(value)) => {
                self.transcript.push(format!("← {target} {client}: {value}"));
                // Each exchange is its own delivery, at no simulated time.
                self.history.answer(id, Arc::new(value), 0, id.0 + 1);
            }
            Ok(None) => {
                self.transcript.push(format!("  {target} answered nothing (a notification)"));
                self.history.no_response(id, NoResponse::Notification);
            }
            Err(why) => {
                self.transcript.push(format!("  {target} gave no answer: {why}"));
                self.history.lost(id, why);
            }
        }
    }

    fn wire(&self, outgoing: Outgoing) -> Wire {
        Wire { to: self.route(outgoing.instance), principal: self.principal(outgoing.client), outgoing, attempt: None }
    }
}

/// First JSON-RPC id of the retries a target world's clients send (clients count their own from 1).
const RETRY_ID_BASE: u64 = 1_000_000;

/// `outgoing` with its JSON-RPC id replaced by `id` (bytes that are no JSON object are sent again as they were).
fn with_id(outgoing: Outgoing, id: u64) -> Outgoing {
    let value = outgoing.value.clone().or_else(|| serde_json::from_slice::<Value>(&outgoing.bytes()).ok());
    match value {
        Some(Value::Object(mut object)) => {
            object.insert("id".into(), Value::from(id));
            Outgoing { value: Some(Value::Object(object)), raw: None, ..outgoing }
        }
        _ => outgoing,
    }
}

/// How a decision line names a request: its `as NAME`, else its method.
fn name_of(outgoing: &Outgoing, method: &Option<String>) -> String {
    outgoing.name.clone().unwrap_or_else(|| method.clone().unwrap_or_else(|| "a request".into()))
}

impl World for TargetWorld<'_, '_> {
    fn label(&self) -> &'static str {
        "against the target"
    }

    fn send(&mut self, outgoing: Outgoing) -> Result<OperationId, Refused> {
        let wire = self.wire(outgoing);
        Ok(self.put(vec![wire]).pop().expect("one operation per send"))
    }

    fn parallel(&mut self, items: Vec<Item>) -> Result<Vec<Result<OperationId, Refused>>, Refused> {
        let mut sends = Vec::new();
        for item in items {
            match item {
                Item::Send(outgoing) => sends.push(outgoing),
                Item::Browse(_) => return Err(Refused::Unsupported(crate::play::world::NO_BROWSER.into())),
                Item::Admin(_) => {
                    return Err(Refused::Unsupported(
                        "an admin change runs between steps against a target, not inside a parallel block".into(),
                    ))
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
        let wires: Vec<Wire> = order.iter().map(|&i| self.wire(sends[i].clone())).collect();
        let ids = self.put(wires);
        let mut by_item: Vec<Option<OperationId>> = vec![None; sends.len()];
        for (&i, id) in order.iter().zip(ids) {
            by_item[i] = Some(id);
        }
        Ok(by_item.into_iter().map(|id| Ok(id.expect("every item was sent"))).collect())
    }

    fn arm(&mut self, instance: usize, method: &str, fault: &ArmedFault) -> Result<(), Refused> {
        let (action, onto) = match fault {
            ArmedFault::DropAnswer { closing } => (FaultAction::LoseAnswer { close_connection: *closing, retry: RetryOn::Scenario }, None),
            ArmedFault::Duplicate { onto } => (FaultAction::Duplicate { other: onto.is_some() }, onto.map(|j| self.route(j))),
            ArmedFault::Hold => (FaultAction::Hold { overtaken_by: usize::MAX }, None),
        };
        let event = FaultEvent { trigger: Trigger::Next { instance, method: Some(method.to_string()) }, action };
        self.decisions.push(format!("fault armed: {event}"));
        self.armed.push((event, onto));
        Ok(())
    }

    fn release(&mut self, instance: usize) -> Result<Vec<OperationId>, Refused> {
        let ids = self.release_held(|held| held.wire.outgoing.instance == instance, "the scenario released it");
        if ids.is_empty() {
            let name = &self.scenario.cluster.instances[instance].name;
            return Err(Refused::Failed(format!("no request to {name} is held (a `hold OP to {name}` that fired comes first)")));
        }
        Ok(ids)
    }

    fn retry(&mut self, of: OperationId, number: u32, outgoing: Outgoing) -> Result<OperationId, Refused> {
        let wire = Wire { attempt: Some(Attempt::Retry { of, number }), ..self.wire(outgoing) };
        Ok(self.put(vec![wire]).pop().expect("one operation per retry"))
    }

    fn mark_attempt(&mut self, id: OperationId, attempt: Attempt) {
        self.history.mark_attempt(id, attempt);
    }

    fn expectations_judged(&self) -> Result<(), NotPlayed> {
        if self.plan.is_empty() {
            Ok(())
        } else {
            Err(NotPlayed::UnderFaults)
        }
    }

    fn admin(&mut self, action: &AdminAction) -> Result<(), Refused> {
        let (key, values): (&'static str, Vec<(&'static str, &str)>) = match action {
            AdminAction::DeleteNote { note_id } => ("delete", vec![("id", note_id)]),
            AdminAction::MoveNote { note_id, uri } => ("move", vec![("id", note_id), ("uri", uri)]),
            AdminAction::RenameNote { note_id, title } => ("rename", vec![("id", note_id), ("title", title)]),
            _ => {
                return Err(Refused::Unsupported("a target runs only admin delete, move and rename (the [admin] table's commands)".into()))
            }
        };
        match self.fleet.admin(key, &values) {
            Ok(Some(shown)) => {
                if key == "delete" {
                    self.admin_deleted += 1;
                }
                // The command itself (with the run's paths) is in the fleet's events; the decision stays the same
                // from run to run.
                let id = values.first().map_or("", |(_, id)| id);
                self.decisions.push(format!("admin {key} {id}: the target file's [admin] {key} command exited 0"));
                self.transcript.push(format!("  admin {key} {id}: ran `{shown}`"));
                Ok(())
            }
            Ok(None) => Err(Refused::Unsupported(format!("the target file has no [admin] {key} command"))),
            Err(error) => Err(Refused::Failed(error.to_string())),
        }
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
            if trigger.moment == Moment::Before {
                self.crash_before.push(event.clone());
            }
            self.decisions.push(format!("fault armed: {event}"));
            self.armed.push((event, None));
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
                self.decisions.push(format!("fault armed: {event}"));
                self.armed.push((event, None));
                Ok(())
            }
            None => {
                let to = self.route(instance);
                self.pause_instance(to).map_err(Refused::Failed)
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

    fn stages(&self) -> Result<(), NotPlayed> {
        Ok(())
    }

    fn roll(&mut self, instances: &[usize], stage: &str, trigger: Option<&TriggerSpec>) -> Result<(), Refused> {
        if self.routing == Routing::One {
            return Err(Refused::Unsupported(
                "the reference play runs every instance on one process: rolling it would roll them all, so it plays without the roll"
                    .into(),
            ));
        }
        if let Some(trigger) = trigger {
            let receiver = self.scenario.cluster.instances.iter().position(|i| i.name == trigger.receiver);
            let [instance] = instances else {
                return Err(Refused::Unsupported("a roll armed on a request rolls the one instance that receives it".into()));
            };
            if receiver != Some(*instance) {
                return Err(Refused::Unsupported(
                    "against a target, a roll is armed on a request the rolled instance itself receives (`roll I to STAGE after I receives METHOD`)".into(),
                ));
            }
            if !self.fleet.has_stage(stage) {
                return Err(Refused::Failed(format!("the target file has no [stages.{stage}]")));
            }
            // A deploy that does not drain: the process killed right after the request is written (as `crash … after`),
            // and started again at once, in the stage.
            let event = FaultEvent {
                trigger: Trigger::Next { instance: *instance, method: Some(trigger.label.clone()) },
                action: FaultAction::Crash { restarted_after: 0, retry: RetryOn::Scenario },
            };
            self.decisions.push(format!("roll armed: {} to stage {stage} ({event})", self.scenario.cluster.instances[*instance].name));
            self.roll_pending.insert(*instance, stage.to_string());
            self.armed.push((event, None));
            return Ok(());
        }
        let mut done = Vec::new();
        for &instance in instances {
            let to = self.route(instance);
            if done.contains(&to) {
                continue;
            }
            done.push(to);
            let line = self.fleet.roll(to, stage).map_err(|error| Refused::Failed(error.to_string()))?;
            self.decisions.push(line.clone());
            self.transcript.push(format!("  {line}"));
        }
        Ok(())
    }

    fn rotate(&mut self, _instances: &[usize], _key_id: &str, _secret: Vec<u8>) -> Result<(), Refused> {
        Err(Refused::Unsupported(
            "a target's keys are its own: give the target file its rotation as [stages.NAME] and roll instances to them (`roll I to NAME`)"
                .into(),
        ))
    }

    fn retire(&mut self, _instances: &[usize], _key_id: &str) -> Result<(), Refused> {
        Err(Refused::Unsupported(
            "a target's keys are its own: give the target file its rotation as [stages.NAME] and roll instances to them (`roll I to NAME`)"
                .into(),
        ))
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

    fn store_cut(&mut self, after_statements: u32, outage_ms: Option<u64>) -> Result<(), Refused> {
        self.fleet.store_kind().map_err(Refused::Unsupported)?;
        self.store.armed = Some((after_statements, outage_ms));
        self.decisions
            .push(format!("store cut after {after_statements} statement(s) armed: it fires on the next request any instance receives"));
        Ok(())
    }

    fn store_lock(&mut self, window_ms: u64) -> Result<(), Refused> {
        match self.fleet.store_kind().map_err(Refused::Unsupported)? {
            StoreKind::Sqlite => {
                self.fleet.store_lock(std::time::Duration::from_millis(window_ms)).map_err(Refused::Failed)?;
                self.decisions.push(format!("store write lock held for {window_ms} ms from now (BEGIN IMMEDIATE)"));
                self.transcript.push(format!("  store write lock held for {window_ms} ms"));
                Ok(())
            }
            StoreKind::Postgres => Err(Refused::Unsupported(
                "a PostgreSQL store is cut through mcpsim's proxy (`store cut after N statements`), not locked".into(),
            )),
        }
    }

    fn global_caveat(&self) -> Option<String> {
        let skewed = self.scenario.cluster.instances.iter().any(|i| i.clock_offset_ms != 0);
        let staged = self.scenario.cluster.instances.iter().any(|i| i.stage.is_some());
        match (self.routing == Routing::One, skewed, staged) {
            (true, true, _) => {
                Some("the reference play runs every instance on one process, on true time: it cannot honour per-instance clocks".into())
            }
            (true, false, true) => {
                Some("the reference play runs every instance on one process, in the file's own command: it cannot honour stages".into())
            }
            _ => None,
        }
    }

    fn annotate(&mut self, annotation: Annotation) {
        if matches!(annotation, Annotation::Step { .. }) {
            self.next_step();
        }
        match annotation {
            Annotation::Step { line, text, .. } => self.transcript.push(format!("line {line}: {text}")),
            Annotation::Substep { line, text } => self.transcript.push(format!("line {line}:   {text}")),
            Annotation::Check { .. } | Annotation::Note { .. } => {}
        }
    }
}

/// Whether a client retries after this answer under a drawn plan: none came, or one that says to try again (a
/// store outage, a claim still in progress).
fn wants_retry(answer: &Result<Option<Value>, super::fleet::Lost>) -> bool {
    match answer {
        Err(_) => true,
        Ok(Some(value)) => matches!(super::judge::said(value), super::judge::Said::Transient(_)),
        Ok(None) => false,
    }
}

#[cfg(test)]
mod tests {
    use crate::oracle::history::{Attempt, OperationId};
    use crate::target::faults::{FaultAction, FaultEvent, FaultKind, FaultPlan, RetryOn, Trigger};
    use crate::target::world::Routing;
    use crate::target::{embedded, load_source, planted_target, play_once, PlayedOnce, RunError, ScenarioSource};

    /// A lesson written here, as a target scenario source.
    fn lesson(name: &str, text: &str) -> ScenarioSource {
        ScenarioSource { shown: format!("{name}.sim"), argument: name.into(), name: name.into(), text: text.into(), step: None }
    }

    const ROUND1: &str =
        "principal {{principal}} workspaces \"file:///notes\"\ninstance i1\ninstance i2\nclient user principal {{principal}}\n\
        send user -> i1 tools/call {\"name\": \"{{tool}}\", \"arguments\": {{arguments}}} as round1\n";

    #[test]
    fn a_roll_armed_on_a_request_restarts_its_receiver_in_the_stage_and_wrong_rolls_are_refused() {
        let (dir, target) = planted_target("armed-roll", "[stages.again]\nenv = { PLANTED = \"\" }\nabout = \"the same server\"\n");
        // A stage the file lacks: skipped before any process starts, naming the table.
        let missing = load_source(&target, &lesson("missing", &format!("{ROUND1}roll i2 to nope\n"))).unwrap_err();
        assert!(matches!(&missing, RunError::NeedsKey { what, key: "[stages.NAME]", .. } if what.contains("stage nope")), "{missing}");
        // Armed on the request i2 receives: i2 killed once its accept is written, started again in the stage.
        let text = format!("{ROUND1}roll i2 to again after i2 receives tools/call\nanswer user -> i2 accept {{{{accept}}}} as lost\n");
        let scenario = load_source(&target, &lesson("armed", &text)).unwrap();
        let played = play_once(&target, &scenario, 1, Routing::Spread, FaultPlan::default(), "mcpsim", &dir).unwrap();
        assert!(played.play.failures.is_empty(), "{:?}", played.play.failures);
        assert!(played.decisions.iter().any(|d| d.starts_with("roll armed: i2 to stage again")), "{:?}", played.decisions);
        assert!(played.decisions.iter().any(|d| d.contains("to stage again (the same server): it starts in it")), "{:?}", played.decisions);
        assert!(played.events.iter().any(|e| e.contains(" in stage again for alice")), "{:?}", played.events);
        assert!(played.history.lost_to(OperationId(1)).is_some(), "{:?}", played.transcript);
        // Armed on a request another instance receives: not done, the step skipped saying why, nothing armed.
        let text = format!("{ROUND1}roll i1 to again after i2 receives tools/call\n");
        let scenario = load_source(&target, &lesson("elsewhere", &text)).unwrap();
        let played = play_once(&target, &scenario, 1, Routing::Spread, FaultPlan::default(), "mcpsim", &dir).unwrap();
        let roll = played.play.steps.iter().find(|s| s.text.starts_with("roll")).expect("the roll's record");
        assert!(
            matches!(&roll.outcome, crate::play::StepOutcome::Skipped(why) if why.contains("a roll is armed on a request the rolled instance itself receives")),
            "{:?}",
            roll.outcome
        );
        assert!(!played.decisions.iter().any(|d| d.starts_with("roll armed")), "{:?}", played.decisions);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Plays `01-retry-lands-elsewhere` on the planted notes server (correct, three stdio instances) under a
    /// plan of one event at request 2 (the accept).
    fn play_with(name: &str, action: FaultAction) -> PlayedOnce {
        let (dir, target) = planted_target(&format!("drawn-{name}"), "");
        let scenario = load_source(&target, &embedded("01-retry-lands-elsewhere").unwrap()).unwrap();
        let event = FaultEvent { trigger: Trigger::Request { number: 2 }, action };
        let plan = FaultPlan { kinds: vec![event.action.kind()], events: vec![event] };
        let played = play_once(&target, &scenario, 1, Routing::Spread, plan, "mcpsim", &dir).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        played
    }

    #[test]
    fn a_drawn_pause_lets_the_retry_go_elsewhere_then_continues_the_instance_and_records_its_late_answer() {
        let played = play_with("pause", FaultAction::Pause { resumed_after: 1, retry: RetryOn::Other });
        assert_eq!(played.fired.len(), 1, "{:?}", played.decisions);
        assert_eq!(played.fired[0].0.action.kind(), FaultKind::Pause);
        let paused = played.decisions.iter().position(|d| d.starts_with("paused t")).expect("paused");
        let resumed = played.decisions.iter().position(|d| d.contains("after its later requests went out")).expect("resumed");
        assert!(paused < resumed, "{:?}", played.decisions);
        let history = &played.history;
        let accept = OperationId(1);
        let retries: Vec<_> = history.attempts().iter().filter(|(_, a)| **a == Attempt::Retry { of: accept, number: 1 }).collect();
        assert_eq!(retries.len(), 1, "{:?}", history.attempts());
        assert!(history.operations()[retries[0].0 .0].response().is_some(), "{:?}", played.transcript);
        // The paused accept answered once continued: the late commit is recorded, not lost.
        assert!(history.operations()[1].response().is_some(), "{:?}", played.transcript);
        assert_eq!(played.effects.as_ref().map(|(b, a)| b - a).unwrap(), 1, "one deletion");
    }

    #[test]
    fn a_drawn_crash_after_the_write_loses_the_request_retries_elsewhere_and_restarts_the_instance() {
        let played = play_with("crash", FaultAction::Crash { restarted_after: 1, retry: RetryOn::Other });
        assert_eq!(played.fired.len(), 1, "{:?}", played.decisions);
        let history = &played.history;
        let accept = OperationId(1);
        assert!(history.lost_to(accept).is_some_and(|f| f.starts_with("at request 2: its instance killed")), "{:?}", played.decisions);
        assert!(played.decisions.iter().any(|d| d.starts_with("killed t")), "{:?}", played.decisions);
        assert!(
            played.decisions.iter().any(|d| d.starts_with("restarted t") && d.contains("after its later requests")),
            "{:?}",
            played.decisions
        );
        let retries: Vec<_> = history.attempts().iter().filter(|(_, a)| **a == Attempt::Retry { of: accept, number: 1 }).collect();
        assert_eq!(retries.len(), 1, "{:?}", history.attempts());
        let effects = played.effects.as_ref().map(|(b, a)| b - a).unwrap();
        assert!(effects <= 1, "at most one deletion: {effects}");
    }
}
