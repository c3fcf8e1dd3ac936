//! The scenario interpreter: the one walk over a scenario's statements, in any [`World`].
//!
//! It resolves templates, builds every message as a conforming client would (its `_meta`, the HTTP routing
//! headers its body implies, the answer to the form it was shown), asks the world to carry out each step,
//! and judges each expectation against what the world recorded. What a world cannot do is reported here, in
//! one place, as SKIPPED with the world's reason; what depends on a skipped step (a named answer, the store
//! after an unperformed change) is then shown but not judged, never silently passed.
//!
//! * [`world`]: the trait a world implements, and what travels through it.
//! * [`client`]: the scenario's clients: request building, raw messages, form answers.
//! * [`expect`]: expectations, judged from the history and the world's observations.
//! * [`parity`]: two plays of one scenario compared step by step (a live fleet against the simulator).

pub mod client;
pub mod expect;
// Live mode (`http`) and targets compare their plays with the simulator's.
#[cfg_attr(not(feature = "http"), allow(dead_code))]
pub mod parity;
pub mod world;

use self::client::{raw_message, scenario_answer, BuildError, Client};
use self::expect::ExpectationResult;
use self::world::{Annotation, ArmedFault, Item, NotPlayed, Outgoing, Refused, World};
use crate::oracle::check::Property;
use crate::oracle::history::{OperationId, Outcome};
use crate::policy::state::derived_key_secret;
use crate::scenario::model::{Action, AnswerAction, MessageFault, ParallelAction, Request, Scenario, Send};
use crate::scenario::template::{at, ResolveError, Template};
use crate::wire::headers::RoutingHeaders;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailureKind {
    /// An `expect` did not hold.
    Expectation,
    /// A safety property was violated.
    Property(Property),
    /// A step could not be carried out (an unresolvable reference, no form to answer, a request the world
    /// could not deliver).
    Step,
    /// The world itself stopped (a runaway, a full network, a replay that diverged, a stuck task): the rest
    /// of the run never happened, so nothing after it was checked.
    Simulation,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub kind: FailureKind,
    /// Source line of the step (0 for end-of-run property checks).
    pub line: usize,
    /// The statement as written.
    pub statement: String,
    pub message: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            FailureKind::Property(property) => write!(f, "property {} violated: {}", property.as_str(), self.message),
            FailureKind::Expectation => write!(f, "line {}: {}\n    {}", self.line, self.statement, self.message),
            FailureKind::Step => write!(f, "line {}: {}\n    the step could not run: {}", self.line, self.statement, self.message),
            FailureKind::Simulation => write!(f, "line {}: {}\n    {}", self.line, self.statement, self.message),
        }
    }
}

/// How one step went in the world.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepOutcome {
    /// Carried out; the requests it sent (in send order). `excuse`: why some of its messages could not even
    /// be built, when that is explained by an earlier answer that was not comparable.
    Performed { operations: Vec<OperationId>, excuse: Option<String> },
    /// Not carried out, for this reason (the world cannot, or the step depends on one that was skipped).
    Skipped(String),
    /// Carried out, but the world was not as the scenario assumed.
    Differs(String),
    /// Its message could not be built (`why`), because of an earlier answer that was not comparable (`excuse`).
    NotSent { why: String, excuse: String },
    /// Attempted and failed; listed among the failures.
    Failed(String),
}

// Read by the parity report of live mode (`http`) and of targets (`cli`).
/// One statement that acts (lets and expectations are not steps).
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "http"), allow(dead_code))]
pub struct StepRecord {
    /// Index among the scenario's statements.
    pub index: usize,
    pub line: usize,
    pub text: String,
    pub outcome: StepOutcome,
}

/// One expectation, as judged.
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "http"), allow(dead_code))]
pub struct ExpectationRecord {
    pub index: usize,
    pub line: usize,
    pub text: String,
    pub result: ExpectationResult,
    /// The named answers it read, and their operations.
    pub reads: Vec<(String, OperationId)>,
    /// Whether it reads the store.
    pub reads_store: bool,
}

/// Everything one play of a scenario produced.
#[derive(Debug, Clone, Default)]
pub struct Play {
    pub steps: Vec<StepRecord>,
    pub expectations: Vec<ExpectationRecord>,
    /// Expectation failures, steps that could not run, and a world that stopped, in the order they happened.
    pub failures: Vec<Failure>,
    /// `as NAME` → the operation that sent it.
    pub answers: BTreeMap<String, OperationId>,
    /// Operations whose answers may legitimately differ from the scenario's intent, and why.
    pub caveats: BTreeMap<OperationId, String>,
    /// Expectations judged (held or failed).
    pub judged: usize,
    /// Expectations shown but not judged because faults were on (in the simulator: those not marked `always`).
    pub unjudged_under_faults: usize,
    /// The world stopped before the end.
    pub stopped: bool,
    /// The first statement after which the world may differ from the scenario's intent (a step it could
    /// not perform, or one that found the world otherwise), and why.
    pub diverged: Option<(usize, String)>,
}

/// Plays `scenario` in `world`: every statement once, in order.
pub fn play(scenario: &Scenario, world: &mut dyn World) -> Play {
    let clients = scenario
        .cluster
        .clients
        .iter()
        .map(|c| {
            let mut client = Client::new(&c.name, c.capabilities.clone());
            client.legacy = c.legacy.is_some();
            // An impersonator sends its victim's `_meta` byte for byte: the victim's clientInfo, built as the
            // victim's client builds it, and the capabilities the parser copied.
            if let Some(victim) = &c.impersonates {
                client.copy_meta_of(&Client::new(victim, c.capabilities.clone()));
            }
            client
        })
        .collect();
    let mut interpreter = Interpreter {
        scenario,
        world,
        clients,
        lets: BTreeMap::new(),
        skipped: BTreeMap::new(),
        down: BTreeSet::new(),
        diverged_since: None,
        step_number: 0,
        play: Play::default(),
    };
    for (index, statement) in scenario.steps.iter().enumerate() {
        interpreter.statement(index, &statement.action, statement.line, &statement.text);
        if interpreter.play.stopped {
            break;
        }
    }
    let unjudged = interpreter.play.unjudged_under_faults;
    if unjudged > 0 {
        let why = match interpreter.world.expectations_judged() {
            Err(NotPlayed::UnderFaultsUnlessMarked) => {
                "not marked `always`, and a retry may take a flow another way than the scenario wrote"
            }
            _ => "a target's expectations are shown, not judged, under faults",
        };
        let text = format!("{unjudged} expectation(s) not judged under faults: {why} (docs/exploring.md#expectations-under-faults)");
        interpreter.annotate(|| Annotation::Note { text });
    }
    interpreter.play
}

struct Interpreter<'a, 'w> {
    scenario: &'a Scenario,
    world: &'w mut dyn World,
    clients: Vec<Client>,
    lets: BTreeMap<String, Value>,
    /// Named answers (and lets built from them) whose request was not sent, and why.
    skipped: BTreeMap<String, String>,
    /// Instances a `crash` took down in the scenario that the world could not stop (until `restart`).
    down: BTreeSet<usize>,
    /// The first step after which the world may differ from the scenario's intent.
    diverged_since: Option<String>,
    step_number: usize,
    play: Play,
}

impl Interpreter<'_, '_> {
    fn instance_index(&self, name: &str) -> usize {
        self.scenario.cluster.instances.iter().position(|i| i.name == name).expect("the parser checked instance names")
    }

    fn client_index(&self, name: &str) -> usize {
        self.scenario.cluster.clients.iter().position(|c| c.name == name).expect("the parser checked client names")
    }

    fn lookup(&self, name: &str) -> Result<&Value, ResolveError> {
        if let Some(value) = self.lets.get(name) {
            return Ok(value);
        }
        if let Some(why) = self.skipped.get(name) {
            return Err(ResolveError::NotSent { name: name.to_string(), world: self.world.label().to_string(), why: why.clone() });
        }
        let id = self.play.answers.get(name).ok_or_else(|| ResolveError::Unbound { name: name.to_string() })?;
        // What the client learned, if it had to retry.
        let operation = self.world.history().settled(*id);
        operation.response().ok_or_else(|| ResolveError::NoResponse { name: name.to_string(), outcome: operation.describe() })
    }

    fn fail(&mut self, kind: FailureKind, line: usize, text: &str, message: String) {
        self.play.failures.push(Failure { kind, line, statement: text.to_string(), message });
    }

    fn record(&mut self, index: usize, line: usize, text: &str, outcome: StepOutcome) {
        self.play.steps.push(StepRecord { index, line, text: text.to_string(), outcome });
    }

    fn diverge(&mut self, index: usize, why: String) {
        if self.diverged_since.is_none() {
            self.play.diverged = Some((index, why.clone()));
            self.diverged_since = Some(why);
        }
    }

    /// Tells the world's transcript `annotation`, built only if the world keeps one.
    fn annotate(&mut self, annotation: impl FnOnce() -> Annotation) {
        if self.world.annotating() {
            self.world.annotate(annotation());
        }
    }

    fn header(&mut self, line: usize, text: &str) {
        self.step_number += 1;
        let number = self.step_number;
        self.annotate(|| Annotation::Step { number, line, text: text.to_string() });
    }

    /// A refusal that is no step of its own: the world stopped (end of the play), or the step failed.
    fn refused(&mut self, index: usize, line: usize, text: &str, refused: Refused) {
        match refused {
            Refused::Stopped(why) => {
                self.fail(FailureKind::Simulation, line, text, why.clone());
                self.record(index, line, text, StepOutcome::Failed(why));
                self.play.stopped = true;
            }
            Refused::Unsupported(why) => {
                self.diverge(index, format!("skipped line {line} ({text})"));
                self.record(index, line, text, StepOutcome::Skipped(why));
            }
            Refused::Differs(why) => {
                self.diverge(index, format!("line {line} ({text}): {why}"));
                self.record(index, line, text, StepOutcome::Differs(why));
            }
            Refused::Failed(why) => {
                self.diverge(index, format!("line {line} ({text}) failed"));
                self.fail(FailureKind::Step, line, text, why.clone());
                self.record(index, line, text, StepOutcome::Failed(why));
            }
        }
    }

    fn performed(&mut self, index: usize, line: usize, text: &str, result: Result<(), Refused>) {
        match result {
            Ok(()) => self.record(index, line, text, StepOutcome::Performed { operations: Vec::new(), excuse: None }),
            Err(refused) => self.refused(index, line, text, refused),
        }
    }

    fn statement(&mut self, index: usize, action: &Action, line: usize, text: &str) {
        match action {
            Action::Let { name, value } => match self.skipped_dependency(std::iter::once(value), None) {
                // A value built from a skipped answer is as unavailable as the answer.
                Some(why) => {
                    self.skipped.insert(name.clone(), why);
                }
                None => match value.resolve(&|n| self.lookup(n)) {
                    Ok(value) => {
                        self.lets.insert(name.clone(), value);
                    }
                    Err(why) => self.fail(FailureKind::Step, line, text, why.to_string()),
                },
            },
            Action::Expect(expectation) => {
                match self.world.expectations_judged() {
                    Ok(()) => {}
                    Err(NotPlayed::UnderFaultsUnlessMarked) if expectation.always() => {}
                    Err(why) => {
                        if matches!(why, NotPlayed::UnderFaults | NotPlayed::UnderFaultsUnlessMarked) {
                            self.play.unjudged_under_faults += 1;
                        }
                        self.annotate(|| Annotation::Note { text: format!("{why}: {text}") });
                        return;
                    }
                }
                let record = self.evaluate(index, line, text, expectation);
                match &record.result {
                    ExpectationResult::Held => {
                        self.play.judged += 1;
                        self.annotate(|| Annotation::Check { line, text: text.into(), failure: None });
                    }
                    ExpectationResult::HeldVacuously(why) => {
                        self.play.judged += 1;
                        let text =
                            format!("{text} (its condition did not hold: {})", why.trim_start_matches("the condition did not hold: "));
                        self.annotate(|| Annotation::Check { line, text, failure: None });
                    }
                    ExpectationResult::Failed(why) => {
                        self.play.judged += 1;
                        self.fail(FailureKind::Expectation, line, text, why.clone());
                        self.annotate(|| Annotation::Check { line, text: text.into(), failure: Some(why.clone()) });
                    }
                    ExpectationResult::NotEvaluated(why) => {
                        self.annotate(|| Annotation::Note { text: format!("not evaluated: {text}: {why}") });
                    }
                }
                self.play.expectations.push(record);
            }
            Action::Send(send) => {
                self.header(line, text);
                self.sequential(index, line, text, send);
            }
            Action::Parallel(items) => {
                self.header(line, text);
                for item in items {
                    self.annotate(|| Annotation::Substep { line: item.line, text: item.text.clone() });
                }
                self.parallel(index, line, text, items);
            }
            Action::Admin(action) => {
                self.header(line, text);
                let result = self.world.admin(action);
                self.performed(index, line, text, result);
            }
            Action::Advance { duration_ms } => {
                self.header(line, text);
                let result = self.world.advance(*duration_ms);
                self.performed(index, line, text, result);
            }
            Action::Crash { instance, trigger } => {
                self.header(line, text);
                let position = self.instance_index(instance);
                match (self.world.crash(position, trigger.as_ref()), trigger) {
                    // A world that cannot stop a process: the scenario's later requests to it are not sent (the
                    // real one would answer them), which changes nothing else.
                    (Err(Refused::Unsupported(why)), None) => {
                        self.down.insert(position);
                        self.record(index, line, text, StepOutcome::Skipped(why));
                    }
                    (result, _) => self.performed(index, line, text, result),
                }
            }
            Action::Restart { instance } => {
                self.header(line, text);
                let position = self.instance_index(instance);
                match self.world.restart(position) {
                    Err(Refused::Unsupported(why)) => {
                        self.down.remove(&position);
                        self.record(index, line, text, StepOutcome::Skipped(why));
                    }
                    result => self.performed(index, line, text, result),
                }
            }
            Action::Pause { instance, trigger } => {
                self.header(line, text);
                let position = self.instance_index(instance);
                let result = self.world.pause(position, trigger.as_ref());
                self.performed(index, line, text, result);
            }
            Action::Resume { instance } => {
                self.header(line, text);
                let position = self.instance_index(instance);
                let result = self.world.resume(position);
                self.performed(index, line, text, result);
            }
            Action::Rotate { instances, key } => {
                self.header(line, text);
                let positions: Vec<usize> = instances.iter().map(|i| self.instance_index(i)).collect();
                let result = self.world.rotate(&positions, key, self.key_secret(key));
                self.performed(index, line, text, result);
            }
            Action::Roll { instances, stage, trigger } => {
                self.header(line, text);
                let positions: Vec<usize> = instances.iter().map(|i| self.instance_index(i)).collect();
                let result = self.world.roll(&positions, stage, trigger.as_ref());
                self.performed(index, line, text, result);
            }
            Action::Retire { key, instances } => {
                self.header(line, text);
                let positions: Vec<usize> = instances.iter().map(|i| self.instance_index(i)).collect();
                let result = self.world.retire(&positions, key);
                self.performed(index, line, text, result);
            }
            Action::StoreUnavailable { store, calls } => {
                self.header(line, text);
                let result = self.world.store_unavailable(store, *calls);
                self.performed(index, line, text, result);
            }
            Action::StoreCut { after_statements, outage_ms } => {
                self.header(line, text);
                let result = self.world.store_cut(*after_statements, *outage_ms);
                self.performed(index, line, text, result);
            }
            Action::StoreLock { window_ms } => {
                self.header(line, text);
                let result = self.world.store_lock(*window_ms);
                self.performed(index, line, text, result);
            }
            Action::Arm { instance, method, fault } => {
                self.header(line, text);
                let fault = match fault {
                    MessageFault::DropAnswer { closing } => ArmedFault::DropAnswer { closing: *closing },
                    MessageFault::Duplicate { onto } => ArmedFault::Duplicate { onto: onto.as_deref().map(|i| self.instance_index(i)) },
                    MessageFault::Hold => ArmedFault::Hold,
                };
                let result = self.world.arm(self.instance_index(instance), method, &fault);
                self.performed(index, line, text, result);
            }
            Action::Release { instance } => {
                self.header(line, text);
                let before = self.world.history().operations().len();
                match self.world.release(self.instance_index(instance)) {
                    Ok(operations) => {
                        self.learn_forms(before);
                        self.record(index, line, text, StepOutcome::Performed { operations, excuse: None });
                    }
                    Err(refused) => self.refused(index, line, text, refused),
                }
            }
            Action::Retry { of, instance, name } => {
                self.header(line, text);
                self.retry(index, line, text, of, instance, name.as_deref());
            }
        }
    }

    /// `retry NAME -> I [as NAME2]`: the request of `NAME`'s operation again, with a fresh id from its client,
    /// to `I`, recorded as a retry of it.
    fn retry(&mut self, index: usize, line: usize, text: &str, of: &str, instance: &str, name: Option<&str>) {
        let unsendable = if let Some(why) = self.skipped.get(of) {
            Some(format!("{of} was not sent: {why}"))
        } else if self.down.contains(&self.instance_index(instance)) {
            Some(format!("{instance} is crashed at this point of the scenario, but the {} one is up", self.world.label()))
        } else {
            None
        };
        if let Some(why) = unsendable {
            if let Some(name) = name {
                self.skipped.insert(name.to_string(), why.clone());
            }
            return self.record(index, line, text, StepOutcome::Skipped(why));
        }
        let Some(&first) = self.play.answers.get(of) else {
            return self.fail(FailureKind::Step, line, text, format!("no request was sent as {of}"));
        };
        let history = self.world.history();
        let first = history.first_attempt(first);
        let number = history.attempts_of(first).len() as u32;
        let operation = &history.operations()[first.0];
        let (request, notification, client) = (operation.request_value.clone(), operation.notification, operation.client.clone());
        let Some(Value::Object(mut request)) = request.map(|v| (*v).clone()) else {
            let why = format!("{of}'s request is no JSON object: a retry with a fresh id cannot be built from it");
            return self.refused(index, line, text, Refused::Failed(why));
        };
        let client = self.client_index(&client);
        if !notification {
            request.insert("id".into(), self.clients[client].fresh_id().into());
        }
        let value = Value::Object(request);
        let outgoing = Outgoing {
            client,
            instance: self.instance_index(instance),
            headers: RoutingHeaders::for_message(&value),
            raw: None,
            value: Some(value),
            notification,
            headers_written: false,
            step: index,
            name: name.map(str::to_string),
        };
        let before = self.world.history().operations().len();
        match self.world.retry(first, number, outgoing) {
            Ok(operation) => {
                if let Some(name) = name {
                    self.play.answers.insert(name.to_string(), operation);
                    self.skipped.remove(name);
                }
                self.note_caveat(operation);
                self.learn_forms(before);
                self.record(index, line, text, StepOutcome::Performed { operations: vec![operation], excuse: None });
            }
            Err(refused) => {
                if let Some(name) = name {
                    self.skipped.insert(name.to_string(), refused.reason().to_string());
                }
                let refused = match refused {
                    Refused::Stopped(why) => Refused::Stopped(why),
                    other => Refused::Failed(other.reason().to_string()),
                };
                self.refused(index, line, text, refused);
            }
        }
    }

    fn key_secret(&self, id: &str) -> Vec<u8> {
        self.scenario.cluster.keys.iter().find(|k| k.id == id).map(|k| k.secret.clone()).unwrap_or_else(|| derived_key_secret(id))
    }

    fn sequential(&mut self, index: usize, line: usize, text: &str, send: &Send) {
        if let Some(why) = self.unsendable(send) {
            self.skip_answer(send, &why);
            self.record(index, line, text, StepOutcome::Skipped(why));
            return;
        }
        let outgoing = match self.build(index, send) {
            Ok(outgoing) => outgoing,
            Err(why) => return self.unbuildable(index, line, text, send, why.to_string()),
        };
        let before = self.world.history().operations().len();
        let browse = matches!(send.request, Request::Page { .. });
        let result = if browse { self.world.browse(outgoing) } else { self.world.send(outgoing) };
        match result {
            Ok(operation) => {
                self.sent(send, operation);
                self.learn_forms(before);
                self.record(index, line, text, StepOutcome::Performed { operations: vec![operation], excuse: None });
            }
            Err(refused) => {
                self.skip_answer(send, refused.reason());
                // A request the world could not deliver is a failure of the step, whatever the world calls it;
                // a page the world has no browser for is skipped, saying why.
                let refused = match refused {
                    Refused::Stopped(why) => Refused::Stopped(why),
                    Refused::Unsupported(why) if browse => Refused::Unsupported(why),
                    other => Refused::Failed(other.reason().to_string()),
                };
                self.refused(index, line, text, refused);
            }
        }
    }

    fn parallel(&mut self, index: usize, line: usize, text: &str, items: &[crate::scenario::model::ParallelItem]) {
        let sends: Vec<&Send> =
            items.iter().filter_map(|item| if let ParallelAction::Send(send) = &item.item { Some(send) } else { None }).collect();
        // A race with one runner missing is another race: the whole block is skipped.
        if let Some(why) = sends.iter().find_map(|send| self.unsendable(send)) {
            for send in &sends {
                self.skip_answer(send, &format!("its parallel block was skipped: {why}"));
            }
            return self.refused(index, line, text, Refused::Unsupported(why));
        }
        // Built first (answers use each client's last form as of the block's start), then sent at once.
        let mut built = Vec::new();
        let mut excuse = None;
        for item in items {
            match &item.item {
                ParallelAction::Send(send) => match self.build(index, send) {
                    Ok(outgoing) if matches!(send.request, Request::Page { .. }) => built.push(Item::Browse(outgoing)),
                    Ok(outgoing) => built.push(Item::Send(outgoing)),
                    Err(why) => {
                        let why = why.to_string();
                        self.skip_answer(send, &why);
                        match self.excuse(send) {
                            Some(reason) => excuse = excuse.or(Some(reason)),
                            None => {
                                for send in &sends {
                                    self.skip_answer(send, &format!("its parallel block could not be built: {why}"));
                                }
                                self.fail(FailureKind::Step, line, text, why.clone());
                                return self.record(index, line, text, StepOutcome::Failed(why));
                            }
                        }
                    }
                },
                ParallelAction::Admin(action) => built.push(Item::Admin(action.clone())),
            }
        }
        let sent_sends: Vec<Option<String>> =
            built.iter().filter_map(|item| if let Item::Send(o) | Item::Browse(o) = item { Some(o.name.clone()) } else { None }).collect();
        let before = self.world.history().operations().len();
        match self.world.parallel(built) {
            Err(refused) => {
                for send in &sends {
                    self.skip_answer(send, &format!("its parallel block was skipped: {}", refused.reason()));
                }
                self.refused(index, line, text, refused);
            }
            Ok(results) => {
                let mut operations = Vec::new();
                for (name, result) in sent_sends.into_iter().zip(results) {
                    match result {
                        Ok(operation) => {
                            if let Some(name) = &name {
                                self.play.answers.insert(name.clone(), operation);
                                self.skipped.remove(name);
                            }
                            self.note_caveat(operation);
                            operations.push(operation);
                        }
                        Err(refused) => {
                            let why = refused.reason().to_string();
                            if let Some(name) = &name {
                                self.skipped.insert(name.clone(), why.clone());
                            }
                            self.fail(FailureKind::Step, line, text, why);
                        }
                    }
                }
                self.learn_forms(before);
                let excuse = excuse.or_else(|| operations.iter().find_map(|op| self.play.caveats.get(op).cloned()));
                self.record(index, line, text, StepOutcome::Performed { operations, excuse });
            }
        }
    }

    /// A request went out and settled: its name now refers to it.
    fn sent(&mut self, send: &Send, operation: OperationId) {
        if let Some(name) = &send.name {
            self.play.answers.insert(name.clone(), operation);
            self.skipped.remove(name);
        }
        self.note_caveat(operation);
    }

    /// Why the operation's answer may differ from the scenario's intent, if it may.
    fn note_caveat(&mut self, operation: OperationId) {
        let instance = self.world.history().operations()[operation.0].instance.clone();
        let position = self.scenario.cluster.instances.iter().position(|i| i.name == instance);
        if let Some(why) = self.caveat_of(position) {
            self.play.caveats.insert(operation, why);
        }
    }

    fn caveat_of(&self, instance: Option<usize>) -> Option<String> {
        if let Some(why) = &self.diverged_since {
            return Some(format!("after {why}"));
        }
        self.world.global_caveat().or_else(|| instance.and_then(|i| self.world.caveat(i))).map(|why| format!("configuration: {why}"))
    }

    /// Each client remembers the last form it was shown (in the order the answers arrived).
    fn learn_forms(&mut self, from: usize) {
        let history = self.world.history();
        let mut forms: Vec<(usize, usize, OperationId)> = Vec::new();
        for operation in &history.operations()[from..] {
            if history.is_duplicate(operation.id) {
                continue;
            }
            let asks =
                operation.response().and_then(|r| at(r, &["result", "resultType"])).and_then(Value::as_str) == Some("input_required");
            if let (true, Outcome::Answered { delivery, .. }) = (asks, &operation.outcome) {
                let client = self.scenario.cluster.clients.iter().position(|c| c.name == operation.client);
                if let Some(client) = client {
                    forms.push((*delivery, client, operation.id));
                }
            }
        }
        forms.sort();
        for (_, client, operation) in forms {
            self.clients[client].last_form = Some(operation);
        }
    }

    /// Why `send` cannot be sent: its instance is down in the scenario, or it is built from a skipped answer.
    fn unsendable(&self, send: &Send) -> Option<String> {
        if self.down.contains(&self.instance_index(&send.instance)) {
            return Some(format!("{} is crashed at this point of the scenario, but the {} one is up", send.instance, self.world.label()));
        }
        if let Some(stage) = &self.scenario.cluster.instances[self.instance_index(&send.instance)].stage {
            if let Err(why) = self.world.stages() {
                return Some(format!("{} runs in stage {stage}: {why}", send.instance));
            }
        }
        if self.clients[self.client_index(&send.client)].legacy {
            if let Err(why) = self.world.legacy_clients() {
                return Some(format!("{} is a 2025-11-25 client: {why}", send.client));
            }
        }
        let mut templates: Vec<&Template> = send.headers.as_deref().into_iter().collect();
        let mut form = None;
        match &send.request {
            Request::Call { params, .. } => templates.push(params),
            Request::Raw { message } => templates.push(message),
            Request::Page { url, .. } => templates.push(url),
            Request::Answer(answer) => {
                if let AnswerAction::Accept(Some(content)) = &answer.action {
                    templates.push(content);
                }
                templates.extend(answer.arguments.iter().chain(answer.state.iter()));
                form = answer.form.as_ref();
            }
        }
        self.skipped_dependency(templates.into_iter(), form)
    }

    /// The reason, if any of these templates (or the named form) refers to an answer that was not sent.
    fn skipped_dependency<'t>(&self, templates: impl Iterator<Item = &'t Template>, form: Option<&String>) -> Option<String> {
        let mut names: Vec<&String> = form.into_iter().collect();
        let references: Vec<_> = templates.flat_map(Template::references).collect();
        names.extend(references.iter().map(|r| &r.name));
        names
            .into_iter()
            .find_map(|name| self.skipped.get(name).map(|why| format!("it uses {name}, which was not sent {} ({why})", self.world.label())))
    }

    fn skip_answer(&mut self, send: &Send, why: &str) {
        if let Some(name) = &send.name {
            self.skipped.insert(name.clone(), why.to_string());
        }
    }

    /// A message that could not be built: not sent, for a reason an earlier incomparable answer explains, or
    /// a failure of the step.
    fn unbuildable(&mut self, index: usize, line: usize, text: &str, send: &Send, why: String) {
        self.skip_answer(send, &why);
        match self.excuse(send) {
            Some(excuse) => self.record(index, line, text, StepOutcome::NotSent { why, excuse }),
            None => {
                self.fail(FailureKind::Step, line, text, why.clone());
                self.record(index, line, text, StepOutcome::Failed(why));
            }
        }
    }

    /// Why `send`, or the form it answers, is not comparable, if it is.
    fn excuse(&self, send: &Send) -> Option<String> {
        if let Some(why) = self.caveat_of(Some(self.instance_index(&send.instance))) {
            return Some(why);
        }
        let form = match &send.request {
            Request::Answer(answer) => match &answer.form {
                Some(name) => self.play.answers.get(name).copied(),
                None => self.clients[self.client_index(&send.client)].last_form,
            },
            _ => None,
        };
        form.and_then(|id| self.play.caveats.get(&id).cloned())
    }

    /// The message a step sends, built from its template (answers from the form they answer).
    fn build(&mut self, index: usize, send: &Send) -> Result<Outgoing, BuildError> {
        let client = self.client_index(&send.client);
        let instance = self.instance_index(&send.instance);
        let lookup = |n: &str| self.lookup(n);
        let written = send.headers.as_ref().map(|h| h.resolve(&lookup)).transpose()?.map(|h| written_headers(&h)).transpose()?;
        let (method, params, notification) = match &send.request {
            Request::Call { method, params, notification } => (method.clone(), params.resolve(&lookup)?, *notification),
            Request::Raw { message } => {
                let (bytes, parsed, notification) = raw_message(&message.resolve(&lookup)?);
                let headers_written = written.is_some();
                let headers = written.unwrap_or_else(|| parsed.as_ref().map(RoutingHeaders::for_message).unwrap_or_default());
                // No value: the world parses the bytes and keeps them verbatim if they are not canonical.
                return Ok(Outgoing {
                    client,
                    instance,
                    raw: Some(bytes),
                    value: None,
                    notification,
                    headers,
                    headers_written,
                    step: index,
                    name: send.name.clone(),
                });
            }
            Request::Page { action, url, appended } => {
                let url = match url.resolve(&lookup)? {
                    Value::String(url) => url,
                    other => return Err(BuildError::UrlNotAString(other.to_string())),
                };
                let url = format!("{url}{}", appended.as_deref().unwrap_or(""));
                let value = serde_json::json!({ "page": action.as_str(), "url": url });
                return Ok(Outgoing {
                    client,
                    instance,
                    raw: None,
                    value: Some(value),
                    notification: false,
                    headers: RoutingHeaders::default(),
                    headers_written: false,
                    step: index,
                    name: send.name.clone(),
                });
            }
            Request::Answer(_) if self.clients[client].legacy => {
                return Err(BuildError::LegacyAnswer { client: send.client.clone() });
            }
            Request::Answer(answer) => {
                let form = match &answer.form {
                    Some(name) => {
                        if let Some(why) = self.skipped.get(name) {
                            let world = self.world.label().to_string();
                            return Err(BuildError::FormNotShown { name: name.clone(), world, why: why.clone() });
                        }
                        *self.play.answers.get(name).ok_or_else(|| BuildError::NoAnswerNamed { name: name.clone() })?
                    }
                    None => self.clients[client].last_form.ok_or_else(|| BuildError::NoFormYet { client: send.client.clone() })?,
                };
                let (method, params) = scenario_answer(answer, self.world.history().settled(form), &lookup)?;
                (method, params, false)
            }
        };
        let value = self.clients[client].request(&method, params, notification)?;
        let headers_written = written.is_some();
        let headers = written.unwrap_or_else(|| RoutingHeaders::for_message(&value));
        Ok(Outgoing {
            client,
            instance,
            raw: None,
            value: Some(value),
            notification,
            headers,
            headers_written,
            step: index,
            name: send.name.clone(),
        })
    }

    /// Why the store may hold something other than what the scenario expects at this point, if it may.
    fn store_divergence(&self) -> Option<String> {
        if let Some(why) = &self.diverged_since {
            return Some(format!("after {why}"));
        }
        if let Some(why) = self.world.global_caveat() {
            return Some(format!("configuration: {why}"));
        }
        // A request whose answer was not judged may have changed the store differently.
        self.play.caveats.values().next().map(|why| format!("a request before it was not compared ({why})"))
    }

    fn evaluate(&self, index: usize, line: usize, text: &str, expectation: &crate::scenario::model::Expectation) -> ExpectationRecord {
        let (result, reads, reads_store) = expect::judge(
            expectation,
            &expect::Context {
                history: self.world.history(),
                answers: &self.play.answers,
                skipped: &self.skipped,
                caveats: &self.play.caveats,
                store_divergence: self.store_divergence(),
                world: &*self.world,
                lookup: &|n: &str| self.lookup(n),
            },
        );
        ExpectationRecord { index, line, text: text.to_string(), result, reads, reads_store }
    }
}

/// `headers {"Mcp-Method": …}` as routing headers: only the three routing headers, each a string (header
/// names compare case-insensitively, as in HTTP).
fn written_headers(value: &Value) -> Result<RoutingHeaders, BuildError> {
    let Value::Object(fields) = value else { return Err(BuildError::HeadersNotAnObject) };
    let mut headers = RoutingHeaders::default();
    for (name, field) in fields {
        let text = field.as_str().ok_or_else(|| BuildError::HeaderNotAString { name: name.clone() })?.to_string();
        match name.to_ascii_lowercase().as_str() {
            "mcp-protocol-version" => headers.protocol_version = Some(text),
            "mcp-method" => headers.method = Some(text),
            "mcp-name" => headers.name = Some(text),
            _ => return Err(BuildError::NotARoutingHeader { name: name.clone() }),
        }
    }
    Ok(headers)
}
