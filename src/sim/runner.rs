//! The runner: builds a cluster from a scenario's declarations and executes its steps, checking every
//! expectation and, at the end, every safety property.
//!
//! Sequential steps run the network until it is quiet before the next step starts, so they never race;
//! only a `parallel` block puts several messages in flight at once for the scheduler to interleave.

use super::world::{Routing, SimWorld};
use crate::config::Deployment;
use crate::framework::ports::Note;
use crate::oracle::check::statelessness::{self, Pairing};
use crate::oracle::check::{self, Property, Violation};
use crate::oracle::grants::Grants;
use crate::oracle::history::History;
use crate::oracle::outcome::{Extent, Masks};
use crate::play;
use crate::policy::authorization::Authorizations;
use crate::policy::state::{derived_key_secret, KeyRing, DEFAULT_STATE_TTL_MS};
use crate::scenario::model::{Action, Scenario};
use crate::sim::actors::gateway_mutants::GatewayVariant;
use crate::sim::actors::instance::{notes_server_factory, ServiceFactory};
use crate::sim::actors::legacy_mutants::EraVariant;
use crate::sim::cluster::{ClientSetup, Cluster, ClusterSetup, InstanceSetup};
use crate::sim::engine::faults::Fault;
use crate::sim::engine::network::{LATENCY_MS_MAX_DEFAULT, LATENCY_MS_MIN_DEFAULT};
use crate::sim::engine::scheduler::{DecisionLog, Random, Replay, Scheduler, Scripted};
use crate::sim::render::transcript::{Entry, Transcript};
use crate::stores::memory::{MemoryNoteStore, ReplayLimits};
use serde_json::Value;
use std::sync::Arc;

pub use crate::play::{Failure, FailureKind};

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
pub struct CustomScheduler(pub Arc<dyn Fn() -> Box<dyn Scheduler> + Send + Sync>);

impl std::fmt::Debug for CustomScheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CustomScheduler")
    }
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
    /// What `eras both` instances run (the real 2025-11-25 adapter unless a test substitutes a broken one).
    pub era_variant: EraVariant,
    /// Faults on (clients retry what gets lost, liveness is judged) with this plan; `None` for a run without
    /// faults (an exploration with `--faults` draws a plan per seed; a replay repeats the recorded one).
    pub faults: Option<Vec<Fault>>,
    /// Also run the same seed a second time and require the same bytes everywhere (`GUARANTEES.md` §4.6).
    pub check_determinism: bool,
    /// The name of the zoo mutant `factory` and `gateway_variant` build, if they build one: the transcript's
    /// header says so, so nobody reads a mutant's failure as the real server's.
    pub mutant: Option<&'static str>,
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
            era_variant: EraVariant::Real,
            faults: None,
            check_determinism: false,
            mutant: None,
        }
    }

    /// These options with `server` running in the instances (and named in the transcript if it is a mutant).
    pub fn with_server(self, server: &ServerUnderTest) -> RunOptions {
        RunOptions {
            factory: server.factory.clone(),
            gateway_variant: server.gateway_variant,
            era_variant: server.era_variant,
            mutant: server.mutant,
            ..self
        }
    }
}

/// What the simulated instances run: the notes service each instance builds and the gateway variant the
/// gateway instances run. Exploration takes one, so a mutant of either kind is explored the same way.
#[derive(Clone)]
pub struct ServerUnderTest {
    pub factory: ServiceFactory,
    pub gateway_variant: GatewayVariant,
    /// The adapter `eras both` instances run.
    pub era_variant: EraVariant,
    /// The zoo mutant's name, when this is one.
    pub mutant: Option<&'static str>,
}

impl From<&ServiceFactory> for ServerUnderTest {
    /// A notes service alongside the real gateway.
    fn from(factory: &ServiceFactory) -> ServerUnderTest {
        ServerUnderTest { factory: factory.clone(), gateway_variant: GatewayVariant::Real, era_variant: EraVariant::Real, mutant: None }
    }
}

impl From<&ServerUnderTest> for ServerUnderTest {
    fn from(server: &ServerUnderTest) -> ServerUnderTest {
        server.clone()
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

/// A scenario made ready to be run many times (a run's re-runs, an exploration's seeds): the cluster its
/// declarations describe — grants, key rings, the notes and their index — is worked out once, and every
/// execution starts from a copy with its own seed, server and recording.
pub struct Prepared<'s> {
    scenario: &'s Scenario,
    cluster: ClusterSetup,
}

impl<'s> Prepared<'s> {
    pub fn new(scenario: &'s Scenario) -> Prepared<'s> {
        Prepared { scenario, cluster: declared_cluster(scenario) }
    }

    pub fn scenario(&self) -> &'s Scenario {
        self.scenario
    }

    /// The cluster an execution with `options` starts from.
    fn cluster(&self, options: &RunOptions) -> ClusterSetup {
        ClusterSetup {
            seed: options.seed,
            record_transcript: options.record_transcript,
            factory: options.factory.clone(),
            gateway_variant: options.gateway_variant,
            era_variant: options.era_variant,
            ..self.cluster.clone()
        }
    }
}

/// What `mcpsim run FILE --seed N` needs besides the file and the seed to repeat a run (or `mcpsim explore` an
/// exploration): ` --scheduler scripted`, ` --faults all|a,b`, ` --mutant NAME`, in that order. Every reproduce
/// line mcpsim prints (a failing run, an exploration's counterexample, a failing embedded run) is built here.
pub fn reproduce_flags(scripted: bool, faults: &[crate::sim::engine::faults::FaultKind], mutant: Option<&str>) -> String {
    use crate::sim::engine::faults::FaultKind;
    let mut flags = String::new();
    if scripted {
        flags.push_str(" --scheduler scripted");
    }
    if faults == FaultKind::ALL {
        flags.push_str(" --faults all");
    } else if !faults.is_empty() {
        let kinds: Vec<&str> = faults.iter().map(|k| k.as_str()).collect();
        flags.push_str(&format!(" --faults {}", kinds.join(",")));
    }
    if let Some(mutant) = mutant {
        flags.push_str(&format!(" --mutant {mutant}"));
    }
    flags
}

/// Runs a scenario once.
pub fn run(scenario: &Scenario, options: &RunOptions) -> RunReport {
    run_prepared(&Prepared::new(scenario), options)
}

/// Runs a prepared scenario once: [`run`] without working out its cluster again.
pub fn run_prepared(prepared: &Prepared<'_>, options: &RunOptions) -> RunReport {
    let scenario = prepared.scenario;
    let mut outcome = execute(prepared, options, Routing::AsWritten, Judge::Expectations);
    let (statelessness, differences) =
        if options.check_statelessness { compare_rerouted(prepared, options, &outcome) } else { (Statelessness::NotChecked, Vec::new()) };
    let mut violations = check::check_properties(&outcome.history);
    // Only a kept transcript shows the line (the judged list is worked out for nothing otherwise).
    if violations.is_empty() && outcome.transcript.recording {
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
    if options.check_determinism {
        let again = execute(prepared, &RunOptions { check_determinism: false, ..options.clone() }, Routing::AsWritten, Judge::HistoryOnly);
        if let Some(difference) = first_difference(&outcome.history, &again.history) {
            violations.push(Violation { property: Property::Determinism, message: format!("the same seed ran twice and {difference}") });
        }
    }
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

/// The cluster a scenario declares, as `options` run it (live mode reads its notes).
#[cfg(feature = "http")]
pub(crate) fn cluster_setup(scenario: &Scenario, options: &RunOptions) -> ClusterSetup {
    Prepared::new(scenario).cluster(options)
}

/// The cluster the declarations describe; its seed, server and recording are placeholders that
/// [`Prepared::cluster`] sets for each execution.
fn declared_cluster(scenario: &Scenario) -> ClusterSetup {
    let options = RunOptions::seeded(0);
    let spec = &scenario.cluster;
    let demo = spec.use_demo.then(Deployment::demo);
    let mut authorizations = demo.as_ref().and_then(|d| d.authorizations().ok()).unwrap_or_else(Authorizations::new);
    // The oracle's own copy, from the same declarations, as written: it judges with its own URI model.
    let mut grants = Grants::default();
    for (principal, config) in demo.iter().flat_map(|d| d.principals.iter()) {
        for workspace in &config.workspaces {
            grants.grant(principal, workspace);
        }
    }
    for principal in &spec.principals {
        for workspace in &principal.workspaces {
            // The parser checked every URI.
            let _ = authorizations.grant(&principal.name, workspace);
            grants.grant(&principal.name, workspace);
        }
    }
    let mut notes: Vec<Note> = demo.as_ref().map(Deployment::notes).unwrap_or_default();
    for note in &spec.notes {
        let note = Note {
            id: note.id.clone(),
            title: note.title.clone(),
            uri: note.uri.clone(),
            body: note.body.clone(),
            revision: String::new(),
        };
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
                eras_both: instance.eras_both,
            }
        })
        .collect();
    let clients = spec
        .clients
        .iter()
        .map(|c| ClientSetup { name: c.name.clone(), principal: c.principal.clone(), browser: c.browser, legacy: c.legacy.clone() })
        .collect();
    let defaults = ReplayLimits::default();
    let (latency_ms_min, latency_ms_max) = spec.latency_ms.unwrap_or((LATENCY_MS_MIN_DEFAULT, LATENCY_MS_MAX_DEFAULT));
    ClusterSetup {
        scenario: scenario.name.clone(),
        seed: options.seed,
        instances,
        clients,
        authorizations: Arc::new(authorizations),
        grants: Arc::new(grants),
        note_store: Arc::new(MemoryNoteStore::new(notes.clone())),
        notes: Arc::new(notes),
        state_ttl_ms: spec.state_ttl_ms.or(demo.as_ref().map(|d| d.state_ttl_secs * 1000)).unwrap_or(DEFAULT_STATE_TTL_MS),
        replay_limits: match spec.replay_capacity {
            None => ReplayLimits { retention_grace_ms: spec.replay_grace_ms.unwrap_or(defaults.retention_grace_ms), ..defaults },
            Some(capacity) => ReplayLimits {
                capacity,
                principal_capacity: spec.replay_principal_capacity.unwrap_or(capacity),
                retention_grace_ms: spec.replay_grace_ms.unwrap_or(defaults.retention_grace_ms),
            },
        },
        latency_ms_min,
        latency_ms_max,
        record_transcript: options.record_transcript,
        factory: options.factory.clone(),
        gateway_variant: options.gateway_variant,
        era_variant: options.era_variant,
    }
}

/// What an execution's play judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Judge {
    /// The scenario's expectations (the run a report is about).
    Expectations,
    /// Nothing: a re-run compared with the first by its history and final stores alone (the rerouted
    /// statelessness run, the determinism run), whose expectations nobody reads.
    HistoryOnly,
}

fn execute(prepared: &Prepared<'_>, options: &RunOptions, routing: Routing, judge: Judge) -> Execution {
    let scenario = prepared.scenario;
    let mut cluster = Cluster::new(prepared.cluster(options), scheduler(&options.scheduler, options.seed));
    if let Some(faults) = &options.faults {
        cluster.enable_faults(faults);
    }
    for warning in &scenario.warnings {
        cluster.transcript_mut().push(Entry::Note { text: format!("warning: {warning}") });
    }
    let mut world = SimWorld::new(cluster, routing);
    if judge == Judge::HistoryOnly {
        world = world.without_expectations("a re-run compared by its answers and stores only");
    }
    let played = play::play(scenario, &mut world);
    let cluster = world.cluster;
    let final_notes = cluster.note_store().listing().iter().map(|n| n.id.clone()).collect();
    let final_consumed = cluster.replay_store().consumed_count();
    let deliveries = cluster.deliveries();
    let (mut transcript, history, decisions) = cluster.into_parts();
    // What ran, when it is not the real servers without faults: the header names it.
    transcript.mutant = options.mutant.map(str::to_string);
    transcript.summary = if transcript.recording { scenario.summary.clone() } else { Vec::new() };
    transcript.faults = options.faults.as_ref().filter(|_| transcript.recording).map(|plan| {
        let instance = |index: usize| scenario.cluster.instances.get(index).map_or_else(|| format!("instance {index}"), |i| i.name.clone());
        plan.iter().map(|fault| fault.describe(&instance)).collect()
    });
    Execution {
        transcript,
        history,
        decisions,
        failures: played.failures,
        deliveries,
        expectations: played.judged,
        final_notes,
        final_consumed,
    }
}

/// Statelessness: re-run the same interleaving (the original run's decision log) with the requests rotated
/// over the live instances of the same configuration, so the rounds of a flow, sequential or racing in a
/// `parallel` block, are served by different instances. Every answer (with `requestState` tokens masked, as
/// they carry per-instance nonces) and the final stores must be the same. A stateless server gives the
/// rerouted run nothing to tell apart: it even makes the same store calls in the same order, so the recorded
/// decisions fit it; a run that stops fitting them is itself a difference.
fn compare_rerouted(prepared: &Prepared<'_>, options: &RunOptions, original: &Execution) -> (Statelessness, Vec<String>) {
    let scenario = prepared.scenario;
    let quiet = RunOptions {
        record_transcript: false,
        check_statelessness: false,
        check_determinism: false,
        scheduler: SchedulerChoice::Replay(original.decisions.clone()),
        ..options.clone()
    };
    let pinned = crash_pinned(scenario);
    let pinned_names: Vec<&str> = pinned.iter().map(|&index| scenario.cluster.instances[index].name.as_str()).collect();
    let shifted = execute(prepared, &quiet, Routing::Shifted { pinned }, Judge::HistoryOnly);
    // Every answer, with what differs by design (sealed states, out-of-band page URLs) masked, byte for byte:
    // the simulator's own servers must answer alike wherever they run.
    let compared = statelessness::compare(&original.history, &shifted.history, &Pairing::Operations, &Masks::by_design(), Extent::Answer);
    let (before, after) = (original.history.operations(), shifted.history.operations());
    let rerouted = compared.rerouted;
    if rerouted == 0 {
        let mut why = String::from("no request has another live instance of the same configuration to go to");
        if !pinned_names.is_empty() {
            why += &format!(" (a crash trigger names {}, so it keeps its requests)", pinned_names.join(" and "));
        }
        return (Statelessness::NotApplicable(why), Vec::new());
    }
    let mut differences: Vec<String> = compared
        .differences
        .iter()
        .map(|difference| {
            let line = scenario.steps[difference.step].line;
            let moved = match &difference.moved {
                Some((from, to)) => format!(" (rerouted from {from} to {to})"),
                None => String::new(),
            };
            format!("line {line}{moved}: {}", difference.described(" became "))
        })
        .collect();
    let stopped = |execution: &Execution| execution.failures.iter().find(|f| f.kind == FailureKind::Simulation).map(|f| f.message.clone());
    if let (None, Some(why)) = (stopped(original), stopped(&shifted)) {
        differences.push(format!("the rerouted run did not follow the same course: {why}"));
    } else if before.len() != after.len() {
        differences.push(format!("the rerouted run made {} requests, the original {}", after.len(), before.len()));
    }
    if original.final_notes != shifted.final_notes || original.final_consumed != shifted.final_consumed {
        differences.push(format!(
            "the stores ended differently: notes {:?} / {} consumed, versus {:?} / {} consumed",
            original.final_notes, original.final_consumed, shifted.final_notes, shifted.final_consumed
        ));
    }
    if !differences.is_empty() {
        (Statelessness::Violated, differences)
    } else if compared.compared == 0 {
        (Statelessness::NotApplicable("no request was answered, so no answer could be compared".into()), differences)
    } else {
        (Statelessness::Held { rerouted, compared: compared.compared }, differences)
    }
}

/// The instances a crash trigger names (the one that crashes, and the receiver if it is an instance): the
/// rerouted run leaves them where the scenario put them.
fn crash_pinned(scenario: &Scenario) -> std::collections::BTreeSet<usize> {
    let index = |name: &str| scenario.cluster.instances.iter().position(|instance| instance.name == name);
    scenario
        .steps
        .iter()
        .filter_map(|step| match &step.action {
            Action::Crash { instance, trigger: Some(trigger) } => {
                Some([index(instance), index(&trigger.receiver), trigger.sender.as_deref().and_then(index)])
            }
            _ => None,
        })
        .flatten()
        .flatten()
        .collect()
}

/// Where two runs of the same seed first differ: a request or answer (byte for byte), or an effect.
fn first_difference(a: &History, b: &History) -> Option<String> {
    let bytes = |op: &crate::oracle::history::Operation| {
        let request = op.request_exact.clone().or_else(|| op.request_value.as_ref().map(|v| v.to_string())).unwrap_or_default();
        let response = op.response().map(Value::to_string).unwrap_or_else(|| op.describe());
        (request, response)
    };
    for (index, (x, y)) in a.operations().iter().zip(b.operations()).enumerate() {
        let ((request_x, response_x), (request_y, response_y)) = (bytes(x), bytes(y));
        if request_x != request_y {
            return Some(format!(
                "request {} ({}'s) differed: {} then {}",
                index + 1,
                x.client,
                preview_text(&request_x),
                preview_text(&request_y)
            ));
        }
        if response_x != response_y {
            let (before, after) = differing_parts(&response_x, &response_y);
            return Some(format!("the answer to request {} ({}'s to {}) differed: {before} then {after}", index + 1, x.client, x.instance));
        }
    }
    if a.operations().len() != b.operations().len() {
        return Some(format!("made {} requests, then {}", a.operations().len(), b.operations().len()));
    }
    let effects = |h: &History| h.effects().iter().map(|e| format!("{:?}", e.kind)).collect::<Vec<_>>();
    (effects(a) != effects(b)).then(|| "the stores' effects differed".to_string())
}

/// The two texts from a little before where they first differ.
fn differing_parts(a: &str, b: &str) -> (String, String) {
    let common = a.char_indices().zip(b.chars()).find(|((_, x), y)| x != y).map_or(a.len().min(b.len()), |((i, _), _)| i);
    let start = a[..common].char_indices().rev().nth(24).map_or(0, |(i, _)| i);
    let excerpt = |text: &str| format!("…{}", preview_text(&text[start..]));
    (excerpt(a), excerpt(b))
}

fn preview_text(text: &str) -> String {
    const SHOWN: usize = 100;
    match text.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}
