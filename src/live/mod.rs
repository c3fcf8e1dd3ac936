//! Live scenarios: the same scenario files, played over HTTP against a running fleet, with a parity report
//! against the simulator.
//!
//! Scenario instances map to URLs in declaration order; each client authenticates with its principal's bearer
//! token and every message is a conforming POST (`Content-Type`, `Accept`, `MCP-Protocol-Version`,
//! `Mcp-Method`, `Mcp-Name`). Messages are built exactly as the simulator builds them (its client, its
//! templates, its form answers): the scenario interpreter (`crate::play`) walks the statements for both worlds,
//! and the parity judge (`crate::play::parity`) compares them.
//!
//! A `parallel` block is compared as a set of outcomes against every interleaving the simulator produces under
//! [`PARITY_SEEDS_MAX`] consecutive seeds; later steps are compared with a run that raced the way the fleet did.
//!
//! What cannot be done from outside a fleet is never silently passed:
//! * **Skipped steps**: `admin …` (note changes are made in the store when live mode has it), `advance`, crash
//!   triggers, `rotate`, `retire` (they need the store, the clock or the key ring of the servers). A plain `crash I` marks `I` down until `restart I`: requests the
//!   scenario sends to it meanwhile are skipped (the live instance is still up, so they would be answered).
//! * **Not compared**: once a step that changes the world has been skipped (or a request that was not
//!   comparable went differently live), later answers may legitimately differ from the simulator's; they are
//!   shown, not judged. The same holds for requests to an instance
//!   whose declared configuration (keys, clock offset) differs from the fleet's one shared key ring and wall
//!   clock, and for every request of a scenario that declares its own store bounds, notes or principals.
//! * **Not evaluated**: expectations on the stores (`note`, `notes count`, `consumed`, `nonce of`) unless live
//!   mode was given the fleet's store ([`LiveStore`], `--reseed SPEC`), and even then once anything that may
//!   change the store went unjudged; answer expectations that refer to an answer that was skipped or not compared.
//!
//! With the fleet's store, each scenario starts from its own notes (the simulator's starting notes, seeded and
//! nothing else), and its store expectations are read from the real store: notes as they are, consumed nonces
//! counted from the scenario's start (consumed confirmations are never erased, so earlier runs stay replay-safe).

pub mod http_client;

use self::http_client::{HttpClient, PostError};
use crate::config::Deployment;
use crate::framework::ports::{Note, StoreError};
use crate::oracle::history::{Attempt, History, NoResponse, OperationId, Sent};
use crate::play::parity;
use crate::play::world::{ArmedFault, Consumed, Item, Outgoing, Refused, Unobservable, World};
use crate::play::{self, FailureKind};
use crate::policy::state::DEFAULT_STATE_TTL_MS;
use crate::scenario::model::{Action, AdminAction, Scenario, TriggerSpec};
use crate::servers::gateway::backends::ExportRecord;
use crate::sim::runner::{self, RunOptions};
use crate::stores::admin::reseed;
use crate::stores::{StoreSpec, Stores};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub use crate::play::expect::ExpectationResult;
pub use crate::play::parity::{ParityRow, Verdict};

/// How long one live request may take before it counts as a transport failure.
pub(crate) const LIVE_REQUEST_TIMEOUT_MS: u64 = 10_000;
/// Most simulator seeds tried to find an interleaving of a scenario's races like the live one.
pub const PARITY_SEEDS_MAX: u64 = 64;
/// Largest response body read from a live server.
pub(crate) const LIVE_RESPONSE_BYTES_MAX: usize = 4 * 1024 * 1024;

/// The fleet a scenario is played against.
#[derive(Debug, Clone)]
pub(crate) struct LiveFleet {
    /// `http://HOST:PORT/mcp`, one per scenario instance, in declaration order.
    pub urls: Vec<String>,
    /// Principal → bearer token.
    pub tokens: BTreeMap<String, String>,
}

impl LiveFleet {
    /// The embedded demo's tokens (`demo-alice`, `demo-bob`), overridden by `tokens` (principal → token).
    pub(crate) fn with_demo_tokens(urls: Vec<String>, tokens: BTreeMap<String, String>) -> LiveFleet {
        let mut all: BTreeMap<String, String> =
            Deployment::demo().tokens().into_iter().map(|(token, principal)| (principal, token)).collect();
        all.extend(tokens);
        LiveFleet { urls, tokens: all }
    }
}

#[derive(Debug, Clone)]
pub struct LiveReport {
    pub scenario: String,
    pub seed: u64,
    /// Instance name → URL.
    pub mapping: Vec<(String, String)>,
    /// Where the scenario's declared configuration differs from what a fleet is.
    pub configuration_notes: Vec<String>,
    /// What was done to the fleet's store before the scenario (with `--reseed`).
    pub store_notes: Vec<String>,
    pub rows: Vec<ParityRow>,
    pub expectations: Vec<(usize, String, ExpectationResult)>,
    /// About the simulator side (a scenario that fails in the simulator compares against a failing run).
    pub simulator_notes: Vec<String>,
    /// Steps that could not be carried out at all (a reference to a skipped answer, a transport failure).
    pub errors: Vec<String>,
    /// Request steps whose live answer was compared with the simulator's (matched or differed): a scenario
    /// that compared none is not comparable, however many of its answers were shown.
    pub requests_compared: usize,
    /// Nothing answered at a URL any more: the scenario stopped there, and so should a run of several.
    pub fleet_unreachable: Option<String>,
}

impl LiveReport {
    pub fn count(&self, wanted: fn(&Verdict) -> bool) -> usize {
        self.rows.iter().filter(|row| wanted(&row.verdict)).count()
    }

    pub(crate) fn expectations_failed(&self) -> usize {
        self.expectations.iter().filter(|(_, _, r)| matches!(r, ExpectationResult::Failed(_))).count()
    }

    pub fn passed(&self) -> bool {
        self.errors.is_empty() && self.expectations_failed() == 0 && self.count(|v| *v == Verdict::Mismatch) == 0
    }

    /// Why a scenario that passed compared no request at all (`None` when it compared some, or failed): the
    /// first configuration mismatch, or the first reason a request was not compared or skipped.
    pub fn not_comparable(&self) -> Option<String> {
        if !self.passed() || self.requests_compared > 0 {
            return None;
        }
        let why = self.configuration_notes.first().cloned().or_else(|| {
            self.rows.iter().find_map(|row| match &row.verdict {
                Verdict::NotCompared(why) | Verdict::Skipped(why) => Some(format!("line {}: {why}", row.line)),
                Verdict::Match | Verdict::Mismatch => None,
            })
        });
        Some(why.unwrap_or_else(|| "it sends no request".into()))
    }
}

/// Scenario problems found before anything is sent.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LiveError {
    #[error(
        "{scenario} declares {instances} instance(s) ({names}) but --live names {urls} URL(s); pass one URL per instance, in declaration order"
    )]
    TooFewUrls { scenario: String, instances: usize, names: String, urls: usize },
    #[error("{scenario}: client {client} acts as principal {principal}, which has no bearer token; pass --token {principal}=TOKEN")]
    NoToken { scenario: String, client: String, principal: String },
    #[error("{scenario}: cannot re-seed the store {store}: {reason}")]
    Reseed { scenario: String, store: String, reason: String },
}

/// The fleet's own store, opened by live mode (`--reseed SPEC`): re-seeded with each scenario's notes before
/// it runs, and read to evaluate its store expectations.
#[derive(Clone)]
pub struct LiveStore {
    pub spec: StoreSpec,
    pub stores: Stores,
}

/// The store of one scenario's run: where it is, and the nonces it held when the scenario started.
struct ScenarioStore<'a> {
    store: &'a LiveStore,
    nonces_before: u64,
}

/// Plays `scenario` against `fleet` and compares each step with the simulator run of the same `seed`. Requests
/// and store reads run on `runtime` (the store must have been opened on it).
///
/// With `store` (the fleet's own), the store is first re-seeded with exactly the scenario's starting notes, and
/// store expectations are evaluated against it.
pub(crate) fn run_live(
    scenario: &Scenario,
    fleet: &LiveFleet,
    seed: u64,
    store: Option<&LiveStore>,
    runtime: &tokio::runtime::Runtime,
) -> Result<LiveReport, LiveError> {
    let instances = &scenario.cluster.instances;
    if instances.len() > fleet.urls.len() {
        let names: Vec<&str> = instances.iter().map(|i| i.name.as_str()).collect();
        return Err(LiveError::TooFewUrls {
            scenario: scenario.name.clone(),
            instances: instances.len(),
            names: names.join(", "),
            urls: fleet.urls.len(),
        });
    }
    for client in &scenario.cluster.clients {
        let declared_here = scenario.cluster.principals.iter().any(|p| p.name == client.principal);
        if !fleet.tokens.contains_key(&client.principal) && declared_here {
            // A principal the scenario itself declares is not one the fleet's deployment holds: nothing of
            // this scenario can be compared, which is a finding about the scenario, not a failure.
            let why = format!(
                "it declares principal {0}, and no bearer token was given for it (pass --token {0}=TOKEN if the fleet's deployment holds {0})",
                client.principal
            );
            return Ok(LiveReport {
                scenario: scenario.name.clone(),
                seed,
                mapping: Vec::new(),
                configuration_notes: vec![why],
                store_notes: Vec::new(),
                rows: Vec::new(),
                expectations: Vec::new(),
                simulator_notes: Vec::new(),
                errors: Vec::new(),
                requests_compared: 0,
                fleet_unreachable: None,
            });
        }
        if !fleet.tokens.contains_key(&client.principal) {
            return Err(LiveError::NoToken {
                scenario: scenario.name.clone(),
                client: client.name.clone(),
                principal: client.principal.clone(),
            });
        }
    }
    let http = HttpClient::new(Duration::from_millis(LIVE_REQUEST_TIMEOUT_MS), LIVE_RESPONSE_BYTES_MAX);
    // The simulator's answers for the same scenario: under `seed`, and under the next seeds too, so that a live
    // race can be matched with an interleaving the simulator also produces (without parallel blocks every seed
    // answers alike, and one run is enough).
    let has_parallel = scenario.steps.iter().any(|s| matches!(s.action, Action::Parallel(_)));
    let seeds = if has_parallel { PARITY_SEEDS_MAX } else { 1 };
    let quiet = |seed| RunOptions { record_transcript: false, check_statelessness: false, ..RunOptions::seeded(seed) };
    let prepared = runner::Prepared::new(scenario);
    let simulated = runner::run_prepared(&prepared, &quiet(seed));
    let mut runs = vec![(seed, simulated.history)];
    for offset in 1..seeds {
        let other = seed.wrapping_add(offset);
        runs.push((other, runner::run_prepared(&prepared, &quiet(other)).history));
    }
    let mut store_notes = Vec::new();
    let scenario_store = match store {
        None => None,
        Some(store) => {
            let failed = |reason: String| LiveError::Reseed { scenario: scenario.name.clone(), store: store.spec.to_string(), reason };
            // The notes the simulator starts from: the demo's (with `use demo`) and the scenario's own.
            let notes = runner::cluster_setup(scenario, &quiet(seed)).notes;
            let report = runtime.block_on(reseed(&*store.stores.admin, &notes)).map_err(|e| failed(e.to_string()))?;
            let nonces_before = runtime.block_on(store.stores.admin.nonce_count()).map_err(|e| failed(e.to_string()))?;
            store_notes.push(format!(
                "re-seeded {} with the scenario's {} note(s): {report}; the {nonces_before} nonce(s) consumed before stay consumed",
                store.spec,
                notes.len()
            ));
            Some(ScenarioStore { store, nonces_before })
        }
    };
    let mut world = LiveWorld::new(scenario, fleet, http, runtime, scenario_store);
    let mut played = play::play(scenario, &mut world);
    // A hold never released goes out at the end; an armed fault never met is a failure, never a pass.
    let all: Vec<usize> = (0..world.held.len()).collect();
    if !all.is_empty() {
        world.release_held(&all);
        played.failures.push(play::Failure {
            kind: FailureKind::Step,
            line: 0,
            statement: "hold".into(),
            message: format!("{} held request(s) never released by the scenario: released at the end of the play", all.len()),
        });
    }
    for (instance, method, fault) in std::mem::take(&mut world.armed) {
        played.failures.push(play::Failure {
            kind: FailureKind::Step,
            line: 0,
            statement: format!("{fault:?}"),
            message: format!("armed, never fired: no {method} went to {} after it", scenario.cluster.instances[instance].name),
        });
    }
    let compared = parity::compare(scenario, &played, &world.history, &runs, world.global_mismatch.first().map(String::as_str));
    let mapping = instances.iter().zip(&fleet.urls).map(|(i, url)| (i.name.clone(), url.clone())).collect();
    // The lines of request steps: only their rows compare an answer (an admin step's row says it was done).
    let request_lines: std::collections::BTreeSet<usize> =
        scenario.steps.iter().filter(|s| matches!(s.action, Action::Send(_) | Action::Parallel(_))).map(|s| s.line).collect();
    let requests_compared = compared
        .rows
        .iter()
        .filter(|row| request_lines.contains(&row.line) && matches!(row.verdict, Verdict::Match | Verdict::Mismatch))
        .count();
    Ok(LiveReport {
        scenario: scenario.name.clone(),
        seed,
        mapping,
        configuration_notes: world.global_mismatch.iter().chain(world.instance_mismatch.values()).cloned().collect(),
        store_notes,
        simulator_notes: simulated
            .failures
            .iter()
            .map(|f| format!("the simulator run fails too (line {}): {}", f.line, f.message.replace('\n', " ")))
            .chain(compared.interleaving_notes)
            .collect(),
        rows: compared.rows,
        expectations: compared.expectations,
        errors: played
            .failures
            .iter()
            .filter(|f| f.kind != FailureKind::Expectation)
            .map(|f| format!("line {}: {}: {}", f.line, f.statement, f.message))
            .collect(),
        requests_compared,
        fleet_unreachable: world.unreachable,
    })
}

/// A running fleet over HTTP as a [`World`]: mcpsim is one more client of it. What needs the servers'
/// processes, clock, key ring or (without `--reseed`) store is refused with the reason.
struct LiveWorld<'a> {
    scenario: &'a Scenario,
    fleet: &'a LiveFleet,
    http: HttpClient,
    runtime: &'a tokio::runtime::Runtime,
    history: History,
    /// Instances declared differently from the fleet (one shared key ring, the wall clock).
    instance_mismatch: BTreeMap<usize, String>,
    /// Scenario-wide declarations a fleet does not share.
    global_mismatch: Vec<String>,
    /// The fleet's store, when live mode has it.
    store: Option<ScenarioStore<'a>>,
    /// The first exchange to which nothing answered: the play stops there.
    unreachable: Option<String>,
    /// Faults the scenario armed (`drop answer …`, `duplicate …`, `hold …`): instance, method, fault.
    armed: Vec<(usize, String, ArmedFault)>,
    /// Requests held back (recorded, pending), until `release` or the end of the play.
    held: Vec<(OperationId, Outgoing)>,
}

impl<'a> LiveWorld<'a> {
    fn new(
        scenario: &'a Scenario,
        fleet: &'a LiveFleet,
        http: HttpClient,
        runtime: &'a tokio::runtime::Runtime,
        store: Option<ScenarioStore<'a>>,
    ) -> LiveWorld<'a> {
        let mut world = LiveWorld {
            scenario,
            fleet,
            http,
            runtime,
            history: History::default(),
            armed: Vec::new(),
            held: Vec::new(),
            instance_mismatch: BTreeMap::new(),
            global_mismatch: Vec::new(),
            store,
            unreachable: None,
        };
        world.find_configuration_mismatches();
        world
    }

    /// A fleet is instances sharing one key ring, one wall clock and one store seeded with the deployment.
    /// The first instance's keys stand for the fleet's ring; any instance declared otherwise diverges.
    fn find_configuration_mismatches(&mut self) {
        let spec = &self.scenario.cluster;
        let reference_keys = spec.instances.first().map(|i| i.keys.clone()).unwrap_or_default();
        for (index, instance) in spec.instances.iter().enumerate() {
            let mut why = Vec::new();
            if instance.keys != reference_keys {
                why.push(format!("keys {} (the fleet shares one key ring)", instance.keys.join(" ")));
            }
            if instance.gateway {
                why.push("a gateway (its backends' state is the simulator's; live parity for gateways is not established)".into());
            }
            if instance.clock_offset_ms != 0 {
                why.push(format!("clock offset {} ms (the fleet runs on the wall clock)", instance.clock_offset_ms));
            }
            let mut mismatch = (!why.is_empty()).then(|| format!("{} declares {}", instance.name, why.join(" and ")));
            if spec.clients.iter().any(|client| client.browser) {
                let browsers = format!(
                    "{} serves the scenario's browser actors, which only the simulator has (tests/url_mode_browser.rs drives a real page)",
                    instance.name
                );
                mismatch = Some(mismatch.map_or(browsers.clone(), |m| format!("{m}; {browsers}")));
            }
            if let Some(mismatch) = mismatch {
                self.instance_mismatch.insert(index, mismatch);
            }
        }
        if spec.clients.iter().any(|client| client.browser) {
            self.global_mismatch.push("the scenario has browser actors, which only the simulator has: its flows go otherwise live".into());
        }
        let legacy: Vec<&str> = spec.clients.iter().filter(|c| c.legacy.is_some()).map(|c| c.name.as_str()).collect();
        if !legacy.is_empty() {
            self.global_mismatch.push(format!(
                "the scenario declares 2025-11-25 client(s) {}: live runs do not play legacy sessions (the simulator does; tests/eras.rs drives the real binary)",
                legacy.join(", ")
            ));
        }
        if !spec.use_demo {
            self.global_mismatch.push("the scenario does not `use demo`: the fleet holds whatever it was seeded with".into());
        }
        if !spec.notes.is_empty() && self.store.is_none() {
            self.global_mismatch
                .push("the scenario declares its own notes; the fleet holds what it was seeded with (pass --reseed to seed them)".into());
        }
        if !spec.principals.is_empty() {
            self.global_mismatch.push("the scenario declares its own principals; the fleet has its deployment's".into());
        }
        if spec.replay_capacity.is_some() || spec.replay_grace_ms.is_some() {
            self.global_mismatch.push("the scenario declares replay-store bounds; the fleet's store has its own".into());
        }
        let demo_ttl_ms = Deployment::demo().state_ttl_secs * 1000;
        if spec.state_ttl_ms.is_some_and(|ttl| ttl != demo_ttl_ms && ttl != DEFAULT_STATE_TTL_MS) {
            self.global_mismatch.push("the scenario declares a state TTL other than the fleet's default".into());
        }
    }

    fn url_of(&self, instance: usize) -> String {
        self.fleet.urls[instance].clone()
    }

    fn token_of(&self, client: usize) -> String {
        let principal = &self.scenario.cluster.clients[client].principal;
        self.fleet.tokens.get(principal).cloned().expect("checked before the run")
    }

    /// Records what was sent and what came back.
    fn record(&mut self, outgoing: &Outgoing, response: Option<Value>) -> OperationId {
        let client = &self.scenario.cluster.clients[outgoing.client];
        let instance = self.scenario.cluster.instances[outgoing.instance].name.clone();
        let id = self.history.request(Sent::of_text(outgoing, &client.name, &client.principal, instance));
        match response {
            // Each exchange is its own delivery, at no simulated time.
            Some(value) => self.history.answer(id, Arc::new(value), 0, id.0 + 1),
            None => self.history.no_response(id, NoResponse::Notification),
        }
        id
    }

    /// The request went on the wire: a new operation, pending.
    fn record_sent(&mut self, outgoing: &Outgoing, instance: usize) -> OperationId {
        let client = &self.scenario.cluster.clients[outgoing.client];
        let instance = self.scenario.cluster.instances[instance].name.clone();
        self.history.request(Sent::of_text(outgoing, &client.name, &client.principal, instance))
    }

    fn record_answer(&mut self, id: OperationId, answer: Result<Option<Value>, PostError>) {
        match answer {
            Ok(Some(value)) => self.history.answer(id, Arc::new(value), 0, id.0 + 1),
            Ok(None) => self.history.no_response(id, NoResponse::Notification),
            Err(_) => self.history.no_response(id, NoResponse::Lost),
        }
    }

    /// The fault armed for this request (its instance and method), taken off the armed list, if one is.
    fn armed_for(&mut self, outgoing: &Outgoing) -> Option<ArmedFault> {
        let value = outgoing.value.clone().or_else(|| serde_json::from_slice::<Value>(&outgoing.bytes()).ok());
        let method = value.as_ref().and_then(|v| v.get("method")).and_then(Value::as_str).map(str::to_string);
        let at = self.armed.iter().position(|(instance, wanted, _)| {
            !outgoing.notification && *instance == outgoing.instance && method.as_ref() == Some(wanted)
        })?;
        Some(self.armed.remove(at).2)
    }

    /// `send` under an armed fault: a lost answer, a copy, or a held request (mcpsim is the fleet's client,
    /// so these are its to make).
    fn send_faulted(&mut self, outgoing: Outgoing, fault: ArmedFault) -> Result<OperationId, Refused> {
        let (url, token) = (self.url_of(outgoing.instance), self.token_of(outgoing.client));
        match fault {
            ArmedFault::DropAnswer { closing: false } => {
                let answer = self.runtime.block_on(post(&self.http, &url, &token, &outgoing));
                if let Err(error) = &answer {
                    if error.unreachable {
                        return Err(self.refusal(error.clone()));
                    }
                }
                let id = self.record_sent(&outgoing, outgoing.instance);
                self.history.lost_to_fault(id, "its answer lost (read and discarded); the scenario retries".into());
                Ok(id)
            }
            ArmedFault::DropAnswer { closing: true } => {
                let written = self.runtime.block_on(post_and_close(&self.http, &url, &token, &outgoing));
                if let Err(error) = written {
                    return Err(self.refusal(error));
                }
                let id = self.record_sent(&outgoing, outgoing.instance);
                self.history.lost_to_fault(id, "its answer lost (the connection closed before reading it); the scenario retries".into());
                Ok(id)
            }
            ArmedFault::Duplicate { onto } => {
                let to = onto.unwrap_or(outgoing.instance);
                let copy_url = self.url_of(to);
                let (http, first) = (self.http.clone(), outgoing.clone());
                let (url_one, token_one) = (url.clone(), token.clone());
                let one = self.runtime.spawn(async move { post(&http, &url_one, &token_one, &first).await });
                let (http, copy) = (self.http.clone(), outgoing.clone());
                let two = self.runtime.spawn(async move { post(&http, &copy_url, &token, &copy).await });
                let joined = |result: Result<Result<Option<Value>, PostError>, tokio::task::JoinError>| match result {
                    Ok(answer) => answer,
                    Err(join) => Err(PostError::from(format!("the request task failed: {join}"))),
                };
                let (first, second) = (joined(self.runtime.block_on(one)), joined(self.runtime.block_on(two)));
                if let Err(error) = &first {
                    if error.unreachable {
                        return Err(self.refusal(error.clone()));
                    }
                }
                let id = self.record_sent(&outgoing, outgoing.instance);
                self.record_answer(id, first);
                let copy = self.history.attempt(Attempt::Duplicate { of: id }, self.scenario.cluster.instances[to].name.clone(), 0);
                self.record_answer(copy, second);
                Ok(id)
            }
            ArmedFault::Hold => {
                let id = self.record_sent(&outgoing, outgoing.instance);
                self.held.push((id, outgoing));
                Ok(id)
            }
        }
    }

    /// Writes the held requests at `indices` (of `self.held`) and records their answers.
    fn release_held(&mut self, indices: &[usize]) -> Vec<OperationId> {
        let mut released = Vec::new();
        for (at, held) in std::mem::take(&mut self.held).into_iter().enumerate() {
            if indices.contains(&at) {
                released.push(held);
            } else {
                self.held.push(held);
            }
        }
        let mut ids = Vec::new();
        for (id, outgoing) in released {
            let (url, token) = (self.url_of(outgoing.instance), self.token_of(outgoing.client));
            let answer = self.runtime.block_on(post(&self.http, &url, &token, &outgoing));
            self.record_answer(id, answer);
            ids.push(id);
        }
        ids
    }

    /// A failed exchange as a refusal: one to which nothing answered stops the play (every later request of
    /// the scenario would fail the same way), any other fails its step.
    fn refusal(&mut self, error: PostError) -> Refused {
        if !error.unreachable {
            return Refused::Failed(error.message);
        }
        self.unreachable.get_or_insert_with(|| error.message.clone());
        Refused::Stopped(format!("{}: nothing answers there, so the rest of the scenario is not played", error.message))
    }

    fn store(&self) -> Result<&ScenarioStore<'a>, Unobservable> {
        self.store.as_ref().ok_or(Unobservable::NoStore)
    }
}

fn unreadable(spec: &StoreSpec) -> impl Fn(StoreError) -> Unobservable + '_ {
    move |error| Unobservable::Unreadable { spec: spec.to_string(), error }
}

impl World for LiveWorld<'_> {
    fn label(&self) -> &'static str {
        "live"
    }

    fn send(&mut self, outgoing: Outgoing) -> Result<OperationId, Refused> {
        if let Some(fault) = self.armed_for(&outgoing) {
            return self.send_faulted(outgoing, fault);
        }
        let (url, token) = (self.url_of(outgoing.instance), self.token_of(outgoing.client));
        let response = self.runtime.block_on(post(&self.http, &url, &token, &outgoing)).map_err(|e| self.refusal(e))?;
        Ok(self.record(&outgoing, response))
    }

    fn parallel(&mut self, items: Vec<Item>) -> Result<Vec<Result<OperationId, Refused>>, Refused> {
        let mut sends = Vec::new();
        for item in items {
            match item {
                Item::Send(outgoing) => sends.push(outgoing),
                Item::Browse(_) => return Err(Refused::Unsupported(play::world::NO_BROWSER.into())),
                // The admin change races the clients in the simulator; live it cannot happen at all.
                Item::Admin(_) => {
                    return Err(Refused::Unsupported("its admin change races the clients, which live mode cannot arrange".into()))
                }
            }
        }
        let mut flights = Vec::new();
        for outgoing in &sends {
            let (http, url, token, outgoing) =
                (self.http.clone(), self.url_of(outgoing.instance), self.token_of(outgoing.client), outgoing.clone());
            flights.push(self.runtime.spawn(async move { post(&http, &url, &token, &outgoing).await }));
        }
        let mut answers = Vec::new();
        for flight in flights {
            answers.push(match self.runtime.block_on(flight) {
                Ok(result) => result,
                Err(join) => Err(PostError::from(format!("the request task failed: {join}"))),
            });
        }
        // Nothing answering at all stops the play, as a lone request would.
        if let Some(Err(error)) = answers.iter().find(|answer| matches!(answer, Err(e) if e.unreachable)) {
            return Err(self.refusal(error.clone()));
        }
        let mut results = Vec::new();
        for (outgoing, answer) in sends.iter().zip(answers) {
            results.push(match answer {
                Ok(response) => Ok(self.record(outgoing, response)),
                Err(error) => Err(self.refusal(error)),
            });
        }
        Ok(results)
    }

    fn admin(&mut self, action: &AdminAction) -> Result<(), Refused> {
        let note_change = matches!(
            action,
            AdminAction::DeleteNote { .. } | AdminAction::MoveNote { .. } | AdminAction::RenameNote { .. } | AdminAction::SwapNote { .. }
        );
        match (action, &self.store) {
            (AdminAction::Revoke { .. }, _) => {
                Err(Refused::Unsupported("a revocation changes the servers' configuration (edit --config and restart them)".into()))
            }
            (AdminAction::SwapNote { .. }, Some(ScenarioStore { store, .. })) if !store.stores.admin.keeps_revisions() => {
                Err(Refused::Unsupported(format!(
                    "{} keeps no revisions, so a note cannot be swapped for another copy (a dir: store can)",
                    store.spec
                )))
            }
            (_, None) if note_change => {
                Err(Refused::Unsupported("admin changes need the store; pass --reseed SPEC (the fleet's --store) to make them live".into()))
            }
            (_, Some(ScenarioStore { store, .. })) if note_change => {
                // Made in the fleet's store behind the servers' backs, as the simulator's admin makes it in its store.
                let admin = store.stores.admin.clone();
                let (note_id, done) = match action {
                    AdminAction::DeleteNote { note_id } => (note_id, self.runtime.block_on(admin.remove(note_id))),
                    AdminAction::MoveNote { note_id, uri } => (note_id, self.runtime.block_on(admin.move_to(note_id, uri))),
                    AdminAction::RenameNote { note_id, title } => (note_id, self.runtime.block_on(admin.rename(note_id, title))),
                    AdminAction::SwapNote { note_id } => (note_id, self.runtime.block_on(admin.swap(note_id))),
                    _ => unreachable!("a note change"),
                };
                match done {
                    Ok(true) => Ok(()),
                    Ok(false) => Err(Refused::Differs(format!("the store held no note {note_id}"))),
                    Err(error) => Err(Refused::Failed(format!("the store {} failed: {error}", store.spec))),
                }
            }
            _ => Err(Refused::Unsupported("this admin change needs the simulator's gateway world".into())),
        }
    }

    fn advance(&mut self, _duration_ms: u64) -> Result<(), Refused> {
        Err(Refused::Unsupported("the fleet runs on the wall clock, which cannot be advanced".into()))
    }

    fn crash(&mut self, instance: usize, trigger: Option<&TriggerSpec>) -> Result<(), Refused> {
        let name = &self.scenario.cluster.instances[instance].name;
        Err(Refused::Unsupported(match trigger {
            None => format!("live mode does not stop processes; requests to {name} are skipped until `restart`"),
            Some(_) => "a crash at a precise store operation needs the simulator's network".into(),
        }))
    }

    fn restart(&mut self, instance: usize) -> Result<(), Refused> {
        Err(Refused::Unsupported(format!("the live {} was never stopped", self.scenario.cluster.instances[instance].name)))
    }

    fn rotate(&mut self, _instances: &[usize], _key_id: &str, _secret: Vec<u8>) -> Result<(), Refused> {
        Err(Refused::Unsupported("key rotation needs the servers' key ring (restart them with a new --key-file)".into()))
    }

    fn retire(&mut self, _instances: &[usize], _key_id: &str) -> Result<(), Refused> {
        Err(Refused::Unsupported("key rotation needs the servers' key ring (restart them with a new --key-file)".into()))
    }

    fn mark_attempt(&mut self, id: OperationId, attempt: Attempt) {
        self.history.mark_attempt(id, attempt);
    }

    /// Armed faults fire on the scenario's `send` steps (a `parallel` block's requests go out unfaulted).
    fn arm(&mut self, instance: usize, method: &str, fault: &ArmedFault) -> Result<(), Refused> {
        self.armed.push((instance, method.to_string(), fault.clone()));
        Ok(())
    }

    fn release(&mut self, instance: usize) -> Result<Vec<OperationId>, Refused> {
        let due: Vec<usize> = (0..self.held.len()).filter(|&i| self.held[i].1.instance == instance).collect();
        if due.is_empty() {
            let name = &self.scenario.cluster.instances[instance].name;
            return Err(Refused::Failed(format!("no request to {name} is held (a `hold OP to {name}` that fired comes first)")));
        }
        Ok(self.release_held(&due))
    }

    fn history(&self) -> &History {
        &self.history
    }

    fn notes(&self) -> Result<Arc<Vec<Note>>, Unobservable> {
        let ScenarioStore { store, .. } = self.store()?;
        self.runtime.block_on(store.stores.admin.list()).map(Arc::new).map_err(unreadable(&store.spec))
    }

    fn consumed(&self) -> Result<Consumed<'_>, Unobservable> {
        let ScenarioStore { store, nonces_before } = self.store()?;
        let now = self.runtime.block_on(store.stores.admin.nonce_count()).map_err(unreadable(&store.spec))?;
        let count = usize::try_from(now.saturating_sub(*nonces_before)).unwrap_or(usize::MAX);
        let listing = format!("{now} held now, {nonces_before} when the scenario started");
        Ok(Consumed { count, listing: Box::new(move || listing) })
    }

    fn nonce_record(&self, nonce: &str) -> Result<Option<Value>, Unobservable> {
        let ScenarioStore { store, .. } = self.store()?;
        self.runtime
            .block_on(store.stores.admin.nonce_record(nonce))
            .map(|record| record.map(|r| r.to_json()))
            .map_err(unreadable(&store.spec))
    }

    fn exports(&self) -> Result<Vec<ExportRecord>, Unobservable> {
        Err(Unobservable::LiveExports)
    }

    fn global_caveat(&self) -> Option<String> {
        self.global_mismatch.first().cloned()
    }

    fn caveat(&self, instance: usize) -> Option<String> {
        self.instance_mismatch.get(&instance).cloned()
    }
}

/// One conforming POST of `outgoing` with its routing headers. `Ok(None)`: answered 202 with no body (a
/// notification). `Err`: the exchange failed at the transport (refused connection, timeout, a body that is
/// not a JSON-RPC message).
/// The JSON-RPC response in an SSE body: the data of its last message event that is a response (an `id` with a
/// `result` or an `error`), else of its last message event; the events as `sse-stream` parses them.
async fn sse_response(body: bytes::Bytes) -> String {
    let mut events = std::pin::pin!(sse_stream::SseStream::new(http_body_util::Full::new(body)));
    let mut last = None;
    let mut response = None;
    while let Some(Ok(event)) = std::future::poll_fn(|cx| futures_core::Stream::poll_next(events.as_mut(), cx)).await {
        let Some(data) = event.data else { continue };
        let is_response = serde_json::from_str::<Value>(&data)
            .is_ok_and(|value| value.get("id").is_some() && (value.get("result").is_some() || value.get("error").is_some()));
        if is_response {
            response = Some(data.clone());
        }
        last = Some(data);
    }
    response.or(last).unwrap_or_default()
}

pub(crate) async fn post(http: &HttpClient, url: &str, token: &str, outgoing: &Outgoing) -> Result<Option<Value>, PostError> {
    let authorization = format!("Bearer {token}");
    let mut headers = vec![
        ("Authorization", authorization.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    headers.extend(outgoing.headers.pairs());
    let answer = http.post(url, &headers, outgoing.bytes().into_owned()).await?;
    if answer.status == 202 && answer.body.is_empty() {
        return Ok(None);
    }
    let streamed = answer.content_type.as_deref().is_some_and(|v| v.starts_with("text/event-stream"));
    let json = if streamed { sse_response(answer.body.clone()).await } else { String::from_utf8_lossy(&answer.body).into_owned() };
    match serde_json::from_str::<Value>(&json) {
        Ok(value) => Ok(Some(value)),
        Err(_) if outgoing.notification => Ok(None),
        Err(e) => Err(PostError::from(format!(
            "{url} answered HTTP {} with a body that is not JSON ({e}): {}",
            answer.status,
            json.chars().take(200).collect::<String>()
        ))),
    }
}

/// [`post`]'s request, on a connection closed right after it is written: the answer is never read.
pub(crate) async fn post_and_close(http: &HttpClient, url: &str, token: &str, outgoing: &Outgoing) -> Result<(), PostError> {
    let authorization = format!("Bearer {token}");
    let mut headers = vec![
        ("Authorization", authorization.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    headers.extend(outgoing.headers.pairs());
    http.post_and_close(url, &headers, &outgoing.bytes()).await
}

/// The report as text: the mapping, configuration notes, the parity table, expectations, a summary line.
pub fn render(report: &LiveReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let mapping: Vec<String> = report.mapping.iter().map(|(name, url)| format!("{name}={url}")).collect();
    let _ = writeln!(out, "# mcpsim live: {}  seed {}  {}", report.scenario, report.seed, mapping.join("  "));
    for note in &report.store_notes {
        let _ = writeln!(out, "store: {note}");
    }
    for note in &report.configuration_notes {
        let _ = writeln!(out, "configuration mismatch: {note}");
    }
    for note in &report.simulator_notes {
        let _ = writeln!(out, "note: {note}");
    }
    let cell = |text: &str, width: usize| -> String {
        if text.chars().count() <= width {
            format!("{text:<width$}")
        } else {
            format!("{}…", text.chars().take(width - 1).collect::<String>())
        }
    };
    let _ = writeln!(out, "{:>5}  {}  {}  {}  match", "line", cell("step", 44), cell("simulator", 40), cell("live", 40));
    for row in &report.rows {
        let verdict = match &row.verdict {
            Verdict::Match => "yes".to_string(),
            Verdict::Mismatch => "NO".to_string(),
            Verdict::NotCompared(why) => format!("not compared: {why}"),
            Verdict::Skipped(why) => format!("SKIPPED: {why}"),
        };
        let _ = writeln!(
            out,
            "{:>5}  {}  {}  {}  {verdict}",
            row.line,
            cell(&row.statement, 44),
            cell(&row.simulator, 40),
            cell(&row.live, 40)
        );
    }
    for row in report.rows.iter().filter(|r| matches!(r.verdict, Verdict::Mismatch)) {
        let _ = writeln!(out, "  line {} differs:\n    simulator: {}\n    live:      {}", row.line, row.simulator, row.live);
    }
    for (line, text, result) in &report.expectations {
        let _ = match result {
            ExpectationResult::Held => writeln!(out, "   ok    line {line}: {text}"),
            ExpectationResult::HeldVacuously(why) => writeln!(out, "   ok    line {line}: {text} ({why})"),
            ExpectationResult::Failed(why) => writeln!(out, "   FAIL  line {line}: {text}: {why}"),
            ExpectationResult::NotEvaluated(why) => writeln!(out, "   --    line {line}: {text}: not evaluated: {why}"),
        };
    }
    for error in &report.errors {
        let _ = writeln!(out, "   ERROR {error}");
    }
    let _ = writeln!(out, "{}", summary(report));
    out
}

/// One line: steps compared, matched, differing, not compared, skipped; expectations held, failed, not evaluated.
pub fn summary(report: &LiveReport) -> String {
    let matched = report.count(|v| *v == Verdict::Match);
    let differ = report.count(|v| *v == Verdict::Mismatch);
    let not_compared = report.count(|v| matches!(v, Verdict::NotCompared(_)));
    let skipped = report.count(|v| matches!(v, Verdict::Skipped(_)));
    let held = report.expectations.iter().filter(|(_, _, r)| r.held()).count();
    let not_evaluated = report.expectations.iter().filter(|(_, _, r)| matches!(r, ExpectationResult::NotEvaluated(_))).count();
    // A scenario that compared no request passed nothing: it says so instead of PASS.
    let verdict = match (report.passed(), report.not_comparable()) {
        (true, None) => "PASS".to_string(),
        (true, Some(why)) => format!("NOT COMPARABLE (no request was compared: {why})"),
        (false, _) => "FAIL".to_string(),
    };
    format!(
        "{verdict}: steps {matched} match, {differ} differ, {not_compared} not compared, {skipped} skipped; expectations {held} held, {} failed, {not_evaluated} not evaluated; {} error(s)",
        report.expectations_failed(),
        report.errors.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sse(body: &'static str) -> String {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(sse_response(bytes::Bytes::from_static(body.as_bytes())))
    }

    #[test]
    fn an_sse_answer_is_its_response_event_whole() {
        // A notification first, then the response split over two `data:` lines (joined with a newline, which JSON
        // reads as whitespace), CRLF line ends and a comment: the old last-`data:`-line reading got `"id":7}`.
        let body = ": keep-alive\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\r\n\r\n\
                    data: {\"jsonrpc\":\"2.0\",\"result\":{\"ok\":true},\r\ndata: \"id\":7}\r\n\r\n";
        let value: Value = serde_json::from_str(&sse(body)).unwrap();
        assert_eq!(value, json!({"jsonrpc": "2.0", "result": {"ok": true}, "id": 7}));
        // A response is preferred to a notification sent after it; with no response, the last event is read.
        let after = "data: {\"id\":1,\"error\":{\"code\":-32601}}\n\ndata: {\"method\":\"notifications/message\"}\n\n";
        assert_eq!(serde_json::from_str::<Value>(&sse(after)).unwrap(), json!({"id": 1, "error": {"code": -32601}}));
        assert_eq!(sse("data: {\"method\":\"x\"}\n\n"), "{\"method\":\"x\"}");
        assert_eq!(sse(""), "");
    }

    #[test]
    fn more_instances_than_urls_is_refused_before_anything_is_sent() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let text = "use demo\ninstance i1\ninstance i2\nclient alice principal alice\n";
        let scenario = crate::scenario::parse("x.sim", "x", text).unwrap();
        let fleet = LiveFleet::with_demo_tokens(vec!["http://127.0.0.1:9/mcp".into()], BTreeMap::new());
        let error = run_live(&scenario, &fleet, 1, None, &runtime).expect_err("refused");
        assert!(error.to_string().contains("declares 2 instance(s) (i1, i2) but --live names 1 URL(s)"), "{error}");
        let text = "use demo\ninstance i1\nprincipal carol workspaces \"file:///c\"\nclient carol principal carol\n";
        let scenario = crate::scenario::parse("y.sim", "y", text).unwrap();
        // A principal the scenario declares itself, with no token: not comparable, said why, nothing sent.
        let report = run_live(&scenario, &fleet, 1, None, &runtime).expect("a report");
        assert_eq!(report.requests_compared, 0);
        assert!(report.configuration_notes[0].contains("--token carol=TOKEN"), "{:?}", report.configuration_notes);
        // A principal of the fleet's own deployment (the demo's) is the fleet's: its token is needed, and the
        // error says so.
        let text = "use demo\ninstance i1\nclient alice principal alice\n";
        let scenario = crate::scenario::parse("z.sim", "z", text).unwrap();
        let tokenless = LiveFleet { urls: fleet.urls.clone(), tokens: BTreeMap::new() };
        let error = run_live(&scenario, &tokenless, 1, None, &runtime).expect_err("refused");
        assert!(error.to_string().contains("--token alice=TOKEN"), "{error}");
    }
}
