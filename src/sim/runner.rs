//! The runner: builds a cluster from a scenario's declarations and executes its steps, checking every
//! expectation and, at the end, every safety property.
//!
//! Sequential steps run the network until it is quiet before the next step starts, so they never race;
//! only a `parallel` block puts several messages in flight at once for the scheduler to interleave.

use super::actors::client::{raw_message, scenario_answer};
use super::actors::gateway_mutants::GatewayVariant;
use super::actors::instance::{notes_server_factory, ServiceFactory};
use super::check::{self, Observed, Property, Violation};
use super::cluster::{ClientSetup, Cluster, ClusterSetup, CrashTrigger, InstanceSetup, SimError};
use super::faults::Fault;
use super::history::History;
use super::message::OperationId;
use super::network::{LATENCY_MS_MAX_DEFAULT, LATENCY_MS_MIN_DEFAULT};
use super::scenario::model::{Action, ParallelAction, Request, Scenario, Send};
use super::scenario::parser::derived_key_secret;
use super::scheduler::{DecisionLog, Random, Replay, Scheduler, Scripted};
use super::transcript::{Entry, Transcript};
use crate::config::Deployment;
use crate::handlers::notes::DEFAULT_STATE_TTL_MS;
use crate::handlers::ports::Note;
use crate::policy::authorization::Authorizations;
use crate::policy::state::KeyRing;
use crate::stores::memory::ReplayLimits;
use crate::wire::headers::RoutingHeaders;
use serde_json::Value;
use std::collections::BTreeMap;

/// `headers {"Mcp-Method": …}` as routing headers: only the three routing headers, each a string (header
/// names compare case-insensitively, as in HTTP).
fn routing_headers(value: &Value) -> Result<RoutingHeaders, String> {
    let Value::Object(fields) = value else { return Err("headers must be a JSON object of header names to strings".into()) };
    let mut headers = RoutingHeaders::default();
    for (name, field) in fields {
        let text = field.as_str().ok_or_else(|| format!("header {name} must be a string"))?.to_string();
        match name.to_ascii_lowercase().as_str() {
            "mcp-protocol-version" => headers.protocol_version = Some(text),
            "mcp-method" => headers.method = Some(text),
            "mcp-name" => headers.name = Some(text),
            _ => return Err(format!("header {name} is not a routing header (MCP-Protocol-Version, Mcp-Method, Mcp-Name)")),
        }
    }
    Ok(headers)
}

/// Which scheduler drives a run.
#[derive(Debug, Clone)]
pub enum SchedulerChoice {
    /// Seeded uniform choice among envelopes in flight (the default).
    Random,
    /// Earliest arrival first: the network's own order.
    Scripted,
    /// Repeat a recorded decision log.
    Replay(DecisionLog),
    /// A scheduler built by the caller for each execution (exhaustive exploration drives the choices).
    Custom(CustomScheduler),
}

/// Builds a fresh scheduler for each execution of a run (the statelessness re-run gets its own).
#[derive(Clone)]
pub struct CustomScheduler(pub std::sync::Arc<dyn Fn() -> Box<dyn Scheduler> + std::marker::Send + Sync>);

impl std::fmt::Debug for CustomScheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CustomScheduler")
    }
}

/// Where each sequential request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Routing {
    /// To the instance the scenario names.
    AsWritten,
    /// Rotated among the live instances of identical configuration, so that consecutive rounds of one
    /// flow land on different instances (the statelessness check).
    Shifted,
}

#[derive(Clone)]
pub struct RunOptions {
    pub seed: u64,
    pub scheduler: SchedulerChoice,
    /// Keep a transcript (off in benchmarks).
    pub record_transcript: bool,
    /// Also run the statelessness comparison (a second run with requests re-routed).
    pub check_statelessness: bool,
    /// Builds each instance's service (the real notes server unless a test substitutes one).
    pub factory: ServiceFactory,
    /// What gateway instances run (the real gateway unless a test substitutes a broken variant).
    pub gateway_variant: GatewayVariant,
    /// Faults on (clients retry what gets lost, liveness is judged) with this plan; `None` for a run without
    /// faults (an exploration with `--faults` draws a plan per seed; a replay repeats the recorded one).
    pub faults: Option<Vec<Fault>>,
}

impl RunOptions {
    pub fn seeded(seed: u64) -> RunOptions {
        RunOptions {
            seed,
            scheduler: SchedulerChoice::Random,
            record_transcript: true,
            check_statelessness: true,
            factory: notes_server_factory(),
            gateway_variant: GatewayVariant::Real,
            faults: None,
        }
    }
}

/// What the simulated instances run: the notes service each instance builds and the gateway variant the
/// gateway instances run. Exploration takes one, so a mutant of either kind is explored the same way.
#[derive(Clone)]
pub struct ServerUnderTest {
    pub factory: ServiceFactory,
    pub gateway_variant: GatewayVariant,
}

impl From<&ServiceFactory> for ServerUnderTest {
    /// A notes service alongside the real gateway.
    fn from(factory: &ServiceFactory) -> ServerUnderTest {
        ServerUnderTest { factory: factory.clone(), gateway_variant: GatewayVariant::Real }
    }
}

impl From<&ServerUnderTest> for ServerUnderTest {
    fn from(server: &ServerUnderTest) -> ServerUnderTest {
        server.clone()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailureKind {
    /// An `expect` did not hold.
    Expectation,
    /// A safety property was violated.
    Property(Property),
    /// A step could not be carried out (an unresolvable reference, no form to answer).
    Step,
    /// The simulation itself stopped (a runaway, a full network, a replay that diverged, a stuck task): the
    /// rest of the run never happened, so nothing after it was checked.
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

/// How the statelessness comparison went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Statelessness {
    NotChecked,
    /// Why the comparison does not apply to this scenario.
    NotApplicable(String),
    /// Every compared answer was the same with `rerouted` requests sent elsewhere.
    Held {
        rerouted: usize,
        compared: usize,
    },
    Violated,
}

pub struct RunReport {
    pub scenario: String,
    pub seed: u64,
    pub transcript: Transcript,
    pub history: History,
    pub decisions: DecisionLog,
    pub failures: Vec<Failure>,
    pub deliveries: usize,
    pub expectations: usize,
    pub statelessness: Statelessness,
}

impl RunReport {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Runs a scenario once.
pub fn run(scenario: &Scenario, options: &RunOptions) -> RunReport {
    let mut outcome = execute(scenario, options, Routing::AsWritten);
    let (statelessness, differences) =
        if options.check_statelessness { compare_rerouted(scenario, options, &outcome) } else { (Statelessness::NotChecked, Vec::new()) };
    let mut violations = check::check_properties(&outcome.history);
    if violations.is_empty() {
        let names: Vec<&str> = check::judged(&outcome.history).into_iter().map(Property::as_str).collect();
        let text = format!("properties held: {}", names.join(", "));
        outcome.transcript.push(Entry::Check { line: 0, text, failure: None });
    }
    match &statelessness {
        Statelessness::Held { rerouted, compared } => {
            let text = format!(
                "statelessness held: {rerouted} request(s) rerouted to another instance of the same configuration, {compared} answer(s) compared"
            );
            outcome.transcript.push(Entry::Check { line: 0, text, failure: None });
        }
        Statelessness::NotApplicable(why) => outcome.transcript.push(Entry::Note { text: format!("statelessness not compared: {why}") }),
        Statelessness::NotChecked | Statelessness::Violated => {}
    }
    violations.extend(differences.into_iter().map(|message| Violation { property: Property::Statelessness, message }));
    for Violation { property, message } in violations {
        let text = format!("property {}", property.as_str());
        outcome.transcript.push(Entry::Check { line: 0, text, failure: Some(message.clone()) });
        outcome.failures.push(Failure { kind: FailureKind::Property(property), line: 0, statement: String::new(), message });
    }
    RunReport {
        scenario: scenario.name.clone(),
        seed: options.seed,
        transcript: outcome.transcript,
        history: outcome.history,
        decisions: outcome.decisions,
        failures: outcome.failures,
        deliveries: outcome.deliveries,
        expectations: outcome.expectations,
        statelessness,
    }
}

/// The raw result of executing the steps once.
struct Execution {
    transcript: Transcript,
    history: History,
    decisions: DecisionLog,
    failures: Vec<Failure>,
    deliveries: usize,
    expectations: usize,
    /// For each sequential request step (by step index): its operation and whether it was rerouted.
    sequential: Vec<(usize, OperationId, bool)>,
    has_parallel: bool,
    final_notes: Vec<String>,
    final_consumed: usize,
}

fn scheduler(choice: &SchedulerChoice, seed: u64) -> Box<dyn Scheduler> {
    match choice {
        SchedulerChoice::Random => Box::new(Random::new(seed)),
        SchedulerChoice::Scripted => Box::new(Scripted),
        SchedulerChoice::Replay(log) => Box::new(Replay::new(log.clone())),
        SchedulerChoice::Custom(build) => (build.0)(),
    }
}

/// The cluster a scenario declares.
pub fn cluster_setup(scenario: &Scenario, options: &RunOptions) -> ClusterSetup {
    let spec = &scenario.cluster;
    let demo = spec.use_demo.then(Deployment::demo);
    let mut authorizations = demo.as_ref().and_then(|d| d.authorizations().ok()).unwrap_or_else(Authorizations::new);
    for principal in &spec.principals {
        for workspace in &principal.workspaces {
            // The parser checked every URI.
            let _ = authorizations.grant(&principal.name, workspace);
        }
    }
    let mut notes: Vec<Note> = demo.as_ref().map(Deployment::notes).unwrap_or_default();
    for note in &spec.notes {
        let note = Note { id: note.id.clone(), title: note.title.clone(), uri: note.uri.clone(), body: note.body.clone() };
        match notes.iter_mut().find(|n| n.id == note.id) {
            Some(existing) => *existing = note,
            None => notes.push(note),
        }
    }
    let keys: Vec<(String, Vec<u8>)> = if spec.keys.is_empty() {
        vec![("k1".to_string(), derived_key_secret("k1"))]
    } else {
        spec.keys.iter().map(|k| (k.id.clone(), k.secret.clone())).collect()
    };
    let secret = |id: &str| keys.iter().find(|(k, _)| k == id).map(|(_, s)| s.clone()).expect("the parser checked key names");
    let instances = spec
        .instances
        .iter()
        .map(|instance| {
            let ids: Vec<String> = if instance.keys.is_empty() { vec![keys[0].0.clone()] } else { instance.keys.clone() };
            let mut ring = KeyRing::new(&ids[0], secret(&ids[0])).expect("the parser checked keys");
            for id in &ids[1..] {
                ring.add_verify_only(id, secret(id)).expect("the parser checked keys");
            }
            InstanceSetup {
                name: instance.name.clone(),
                key_ring: ring,
                clock_offset_ms: instance.clock_offset_ms,
                gateway: instance.gateway,
            }
        })
        .collect();
    let clients = spec
        .clients
        .iter()
        .map(|c| ClientSetup { name: c.name.clone(), principal: c.principal.clone(), capabilities: c.capabilities.clone() })
        .collect();
    let defaults = ReplayLimits::default();
    let (latency_ms_min, latency_ms_max) = spec.latency_ms.unwrap_or((LATENCY_MS_MIN_DEFAULT, LATENCY_MS_MAX_DEFAULT));
    ClusterSetup {
        scenario: scenario.name.clone(),
        seed: options.seed,
        instances,
        clients,
        authorizations,
        notes,
        state_ttl_ms: spec.state_ttl_ms.or(demo.as_ref().map(|d| d.state_ttl_secs * 1000)).unwrap_or(DEFAULT_STATE_TTL_MS),
        replay_limits: ReplayLimits {
            capacity: spec.replay_capacity.unwrap_or(defaults.capacity),
            retention_grace_ms: spec.replay_grace_ms.unwrap_or(defaults.retention_grace_ms),
        },
        latency_ms_min,
        latency_ms_max,
        record_transcript: options.record_transcript,
        factory: options.factory.clone(),
        gateway_variant: options.gateway_variant,
    }
}

struct Runner<'a> {
    scenario: &'a Scenario,
    cluster: Cluster,
    lets: BTreeMap<String, Value>,
    answers: BTreeMap<String, OperationId>,
    failures: Vec<Failure>,
    expectations: usize,
    routing: Routing,
    sequential: Vec<(usize, OperationId, bool)>,
    step_number: usize,
}

fn execute(scenario: &Scenario, options: &RunOptions, routing: Routing) -> Execution {
    let mut cluster = Cluster::new(cluster_setup(scenario, options), scheduler(&options.scheduler, options.seed));
    if let Some(faults) = &options.faults {
        cluster.enable_faults(faults);
    }
    let mut runner = Runner {
        scenario,
        cluster,
        lets: BTreeMap::new(),
        answers: BTreeMap::new(),
        failures: Vec::new(),
        expectations: 0,
        routing,
        sequential: Vec::new(),
        step_number: 0,
    };
    for (index, step) in scenario.steps.iter().enumerate() {
        if let Err(error) = runner.step(index, &step.action, step.line, &step.text) {
            let stopped = matches!(error, StepError::Simulation(_));
            runner.failures.push(Failure {
                kind: if stopped { FailureKind::Simulation } else { FailureKind::Step },
                line: step.line,
                statement: step.text.clone(),
                message: error.to_string(),
            });
            if stopped {
                // The cluster is in no state to continue.
                break;
            }
        }
    }
    let final_notes = runner.cluster.note_store().snapshot().into_iter().map(|n| n.id).collect();
    let final_consumed = runner.cluster.replay_store().consumed().len();
    let has_parallel = scenario.steps.iter().any(|s| matches!(s.action, Action::Parallel(_)));
    let deliveries = runner.cluster.deliveries();
    let exports = runner.cluster.gateway_world().map(|world| world.exports()).unwrap_or_default();
    let Runner { cluster, failures, expectations, sequential, .. } = runner;
    let (transcript, mut history, decisions) = cluster.into_parts();
    history.exports = exports;
    Execution { transcript, history, decisions, failures, deliveries, expectations, sequential, has_parallel, final_notes, final_consumed }
}

/// A message ready to send: from which client, the exact bytes, the value they encode (if JSON).
struct Built {
    client: usize,
    bytes: Vec<u8>,
    value: Option<Value>,
    notification: bool,
    headers: Option<RoutingHeaders>,
}

#[derive(Debug, thiserror::Error)]
enum StepError {
    #[error("{0}")]
    Scenario(String),
    #[error("the simulation stopped: {0}")]
    Simulation(#[from] SimError),
}

impl From<String> for StepError {
    fn from(message: String) -> StepError {
        StepError::Scenario(message)
    }
}

impl Runner<'_> {
    fn instance_index(&self, name: &str) -> usize {
        self.cluster.instances().iter().position(|i| i.name == name).expect("the parser checked instance names")
    }

    fn client_index(&self, name: &str) -> usize {
        self.cluster.clients().iter().position(|c| c.name == name).expect("the parser checked client names")
    }

    fn lookup(&self, name: &str) -> Result<&Value, String> {
        if let Some(value) = self.lets.get(name) {
            return Ok(value);
        }
        let id = self.answers.get(name).ok_or_else(|| format!("${name} is not bound"))?;
        // What the client learned, if it had to retry.
        let operation = self.cluster.history().settled(*id);
        operation.response().ok_or_else(|| format!("${name} has no response ({})", check::describe(operation)))
    }

    fn header(&mut self, line: usize, text: &str) {
        self.step_number += 1;
        let number = self.step_number;
        self.cluster.transcript_mut().push(Entry::Step { number, line, text: text.to_string() });
    }

    fn step(&mut self, index: usize, action: &Action, line: usize, text: &str) -> Result<(), StepError> {
        match action {
            Action::Let { name, value } => {
                let value = value.resolve(&|n| self.lookup(n))?;
                self.lets.insert(name.clone(), value);
            }
            // Faults on (clients retry): a retry may take a flow another way than the scenario wrote, so
            // expectations are shown but not judged; the properties are.
            Action::Expect(_) if self.cluster.history().clients_retry => {
                self.cluster.transcript_mut().push(Entry::Note { text: format!("not judged under faults: {text}") });
            }
            Action::Expect(expectation) => {
                self.expectations += 1;
                let lookup = |n: &str| self.lookup(n);
                let exports = self.cluster.gateway_world().map(|world| world.exports()).unwrap_or_default();
                let observed = Observed {
                    history: self.cluster.history(),
                    answers: &self.answers,
                    notes: self.cluster.note_store(),
                    replay: self.cluster.replay_store(),
                    exports: &exports,
                    lookup: &lookup,
                };
                let result = check::evaluate(expectation, &observed);
                if let Err(message) = &result {
                    self.failures.push(Failure { kind: FailureKind::Expectation, line, statement: text.into(), message: message.clone() });
                }
                self.cluster.transcript_mut().push(Entry::Check { line, text: text.into(), failure: result.err() });
            }
            Action::Send(send) => {
                self.header(line, text);
                let (operation, rerouted) = self.send(send, index, self.routing)?;
                self.cluster.run_until_quiet()?;
                self.sequential.push((index, operation, rerouted));
            }
            Action::Parallel(items) => {
                self.header(line, text);
                for item in items {
                    self.cluster.transcript_mut().push(Entry::Substep { line: item.line, text: item.text.clone() });
                }
                // Resolve everything first (answers use each client's last form as of the block's start),
                // then put it all in flight at once.
                let mut prepared = Vec::new();
                for item in items {
                    match &item.item {
                        ParallelAction::Send(send) => {
                            let built = self.build(send)?;
                            prepared.push((Some((send, built)), None));
                        }
                        ParallelAction::Admin(action) => prepared.push((None, Some(action))),
                    }
                }
                for (send, admin) in prepared {
                    if let Some((send, built)) = send {
                        let instance = self.instance_index(&send.instance);
                        let Built { client, bytes, value, notification, headers } = built;
                        let operation =
                            self.cluster.send(client, instance, bytes, value, notification, index, send.name.clone(), headers)?;
                        if let Some(name) = &send.name {
                            self.answers.insert(name.clone(), operation);
                        }
                    }
                    if let Some(action) = admin {
                        self.cluster.admin(action)?;
                    }
                }
                self.cluster.run_until_quiet()?;
            }
            Action::Admin(action) => {
                self.header(line, text);
                self.cluster.admin(action)?;
                self.cluster.run_until_quiet()?;
            }
            Action::Advance { duration_ms } => {
                self.header(line, text);
                self.cluster.advance(*duration_ms);
            }
            Action::Crash { instance, trigger } => {
                self.header(line, text);
                let index = self.instance_index(instance);
                match trigger {
                    None => self.cluster.crash(index),
                    Some(trigger) => {
                        let receiver = self.cluster.actor(&trigger.receiver).expect("the parser checked the receiver");
                        self.cluster.arm(CrashTrigger { instance: index, moment: trigger.moment, receiver, label: trigger.label.clone() });
                    }
                }
            }
            Action::Restart { instance } => {
                self.header(line, text);
                let index = self.instance_index(instance);
                self.cluster.restart(index);
            }
            Action::Rotate { instances, key } => {
                self.header(line, text);
                let indexes: Vec<usize> = instances.iter().map(|i| self.instance_index(i)).collect();
                let secret = self.key_secret(key);
                self.cluster.rotate(&indexes, key, secret)?;
            }
            Action::Retire { key, instances } => {
                self.header(line, text);
                let indexes: Vec<usize> = instances.iter().map(|i| self.instance_index(i)).collect();
                self.cluster.retire(&indexes, key)?;
            }
        }
        Ok(())
    }

    fn key_secret(&self, id: &str) -> Vec<u8> {
        self.scenario.cluster.keys.iter().find(|k| k.id == id).map(|k| k.secret.clone()).unwrap_or_else(|| derived_key_secret(id))
    }

    /// The message a step sends, built from its template (answers from the form they answer).
    fn build(&mut self, send: &Send) -> Result<Built, String> {
        let client = self.client_index(&send.client);
        let lookup = |n: &str| self.lookup(n);
        let headers = send.headers.as_ref().map(|h| h.resolve(&lookup)).transpose()?.map(|h| routing_headers(&h)).transpose()?;
        let (method, params, notification) = match &send.request {
            Request::Call { method, params, notification } => (method.clone(), params.resolve(&lookup)?, *notification),
            Request::Raw { message } => {
                let (bytes, _, notification) = raw_message(&message.resolve(&lookup)?);
                // No value: the cluster parses the bytes and keeps them verbatim if they are not canonical.
                return Ok(Built { client, bytes, value: None, notification, headers });
            }
            Request::Answer(answer) => {
                let form = match &answer.form {
                    Some(name) => *self.answers.get(name).ok_or_else(|| format!("no answer is named {name}"))?,
                    None => self.cluster.clients()[client]
                        .last_form
                        .ok_or_else(|| format!("{} has not been shown a form yet; say which with `for NAME`", send.client))?,
                };
                let (method, params) = scenario_answer(answer, self.cluster.history().settled(form), &lookup)?;
                (method, params, false)
            }
        };
        let (bytes, value) = self.cluster.client_mut(client).request(&method, params, notification)?;
        Ok(Built { client, bytes, value: Some(value), notification, headers })
    }

    fn send(&mut self, send: &Send, step: usize, routing: Routing) -> Result<(OperationId, bool), StepError> {
        let Built { client, bytes, value, notification, headers } = self.build(send)?;
        let written = self.instance_index(&send.instance);
        let target = match routing {
            Routing::AsWritten => written,
            Routing::Shifted => self.equivalent_instance(written, self.sequential.len() + 1),
        };
        let operation = self.cluster.send(client, target, bytes, value, notification, step, send.name.clone(), headers)?;
        if let Some(name) = &send.name {
            self.answers.insert(name.clone(), operation);
        }
        Ok((operation, target != written))
    }

    /// Among the live instances configured like `index` (itself included, in instance order), the one
    /// `steps` places after it, cyclically. With the request's position as `steps`, consecutive requests
    /// written for one instance are spread over its equivalents.
    fn equivalent_instance(&self, index: usize, steps: usize) -> usize {
        let instances = self.cluster.instances();
        if !instances[index].up {
            return index;
        }
        let class: Vec<usize> =
            (0..instances.len()).filter(|&other| instances[other].up && instances[other].same_configuration(&instances[index])).collect();
        let position = class.iter().position(|&member| member == index).unwrap_or(0);
        class[(position + steps) % class.len()]
    }
}

/// Statelessness: re-run with the sequential requests rotated over the live instances of the same
/// configuration (so the rounds of a flow are served by different instances); the answers (with `requestState` tokens masked, as they carry per-instance nonces) and,
/// when nothing ran in parallel, the final store contents must be the same.
fn compare_rerouted(scenario: &Scenario, options: &RunOptions, original: &Execution) -> (Statelessness, Vec<String>) {
    let triggered = scenario.steps.iter().any(|s| matches!(&s.action, Action::Crash { trigger: Some(_), .. }));
    if triggered {
        let why = "a crash trigger names the instance that must receive the request".into();
        return (Statelessness::NotApplicable(why), Vec::new());
    }
    let quiet = RunOptions { record_transcript: false, check_statelessness: false, ..options.clone() };
    let shifted = execute(scenario, &quiet, Routing::Shifted);
    let rerouted = shifted.sequential.iter().filter(|(_, _, moved)| *moved).count();
    if rerouted == 0 {
        let why = "no request has another live instance of the same configuration to go to".into();
        return (Statelessness::NotApplicable(why), Vec::new());
    }
    let first_parallel = scenario.steps.iter().position(|s| matches!(s.action, Action::Parallel(_))).unwrap_or(scenario.steps.len());
    let mut compared = 0;
    let mut differences = Vec::new();
    for ((step, a, _), (_, b, moved)) in original.sequential.iter().zip(&shifted.sequential) {
        if *step > first_parallel {
            break;
        }
        compared += 1;
        let left = masked(original.history.operations[a.0].response());
        let right = masked(shifted.history.operations[b.0].response());
        if left != right {
            let line = scenario.steps[*step].line;
            let moved = if *moved { format!(" (rerouted to {})", shifted.history.operations[b.0].instance) } else { String::new() };
            differences.push(format!("line {line}{moved}: {} became {}", show(&left), show(&right)));
        }
    }
    if !original.has_parallel && (original.final_notes != shifted.final_notes || original.final_consumed != shifted.final_consumed) {
        differences.push(format!(
            "the stores ended differently: notes {:?} / {} consumed, versus {:?} / {} consumed",
            original.final_notes, original.final_consumed, shifted.final_notes, shifted.final_consumed
        ));
    }
    if differences.is_empty() {
        (Statelessness::Held { rerouted, compared }, differences)
    } else {
        (Statelessness::Violated, differences)
    }
}

fn masked(response: Option<&Value>) -> Option<Value> {
    fn mask(value: &Value) -> Value {
        match value {
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| {
                        if k == "requestState" && v.is_string() {
                            (k.clone(), Value::String("<state>".into()))
                        } else {
                            (k.clone(), mask(v))
                        }
                    })
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.iter().map(mask).collect()),
            other => other.clone(),
        }
    }
    response.map(mask)
}

fn show(value: &Option<Value>) -> String {
    match value {
        Some(value) => super::scenario::template::preview(value),
        None => "no response".into(),
    }
}
