//! The third [`World`]: a target's processes. mcpsim is their only client and their network: it routes each
//! scenario instance to a process of the fleet (the seed's mapping), puts a `parallel` block's items on the
//! wire in the seed's order, kills (SIGKILL) and restarts processes for `crash` / `restart`, and records every
//! exchange. Its decisions are logged; what the servers do inside (their timing, their stores) is not its to
//! decide, and reports say so.

use super::file::StoreKind;
use super::fleet::Fleet;
use super::store_proxy::Outage;
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
    /// Store faults: a `store cut` armed by its statement, and the one under way.
    store: StoreFaults,
    /// Items `admin delete` removed: the effect probe's `before` is lowered by as many, so the judge counts
    /// only what the server did.
    pub admin_deleted: usize,
}

/// The store faults of a play.
#[derive(Default)]
struct StoreFaults {
    /// Requests put on the wire so far (the number a fault fires at).
    requests: usize,
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
            store: StoreFaults::default(),
            admin_deleted: 0,
        }
    }

    /// Before `count` requests go on the wire: an armed `store cut` fires on the first of them.
    fn before_wire(&mut self, count: usize) {
        let first = self.store.requests + 1;
        self.store.requests += count;
        if let Some((after_statements, outage_ms)) = self.store.armed.take() {
            if let Err(why) = self.fire_store_cut_at(after_statements, outage_ms, first) {
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
            self.store.active = None;
            self.store.never_fired.push(line.clone());
            self.fleet.store_heal();
            self.transcript.push(format!("  {line}"));
        }
    }

    /// A drawn plan's store cut (the dispatcher's `FaultAction::StoreCut` arm), fired at the request being put
    /// on the wire: see [`TargetWorld::fire_store_cut_at`].
    // Called by the fault dispatcher of drawn plans (issue 37's `FaultAction::StoreCut` arm).
    #[allow(dead_code)]
    pub fn fire_store_cut(&mut self, after_statements: u32, outage_ms: Option<u64>) -> Result<(), Refused> {
        let request = self.store.requests.max(1);
        self.fire_store_cut_at(after_statements, outage_ms, request)
    }

    /// PostgreSQL: arms the proxy (`after_statements` more statements, then every connection cut, new ones
    /// refused for `outage_ms`, or until the next step). SQLite: the write lock is held instead, from now, for
    /// the window. Without `[store]`: refused, naming the table.
    fn fire_store_cut_at(&mut self, after_statements: u32, outage_ms: Option<u64>, request: usize) -> Result<(), Refused> {
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
        self.before_wire(1);
        let answer = self.fleet.exchange_all(&[(to, principal, outgoing.clone())]).pop().expect("one answer per send");
        self.after_wire();
        Ok(self.record(&outgoing, to, answer.map_err(|lost| lost.message)))
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
        let batch: Vec<(usize, String, Outgoing)> =
            order.iter().map(|&i| (self.route(sends[i].instance), self.principal(sends[i].client), sends[i].clone())).collect();
        self.before_wire(batch.len());
        let answers = self.fleet.exchange_all(&batch);
        self.after_wire();
        let mut by_item: Vec<Option<OperationId>> = vec![None; sends.len()];
        for (&i, ((to, _, outgoing), answer)) in order.iter().zip(batch.iter().zip(answers)) {
            by_item[i] = Some(self.record(outgoing, *to, answer.map_err(|lost| lost.message)));
        }
        Ok(by_item.into_iter().map(|id| Ok(id.expect("every item was sent"))).collect())
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
