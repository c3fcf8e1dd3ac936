//! Live scenarios: the same scenario files, played over HTTP against a running fleet, with a parity report
//! against the simulator.
//!
//! Scenario instances map to URLs in declaration order; each client authenticates with its principal's bearer
//! token and every message is a conforming POST (`Content-Type`, `Accept`, `MCP-Protocol-Version`,
//! `Mcp-Method`, `Mcp-Name`). Messages are built exactly as the simulator builds them (its client, its
//! templates, its form answers), and answer expectations are judged by the simulator's own checker.
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

use crate::config::Deployment;
use crate::handlers::notes::DEFAULT_STATE_TTL_MS;
use crate::handlers::ports::Note;
use crate::sim::actors::admin::AdminAction;
use crate::sim::actors::client::{raw_message, scenario_answer, Client};
use crate::sim::check::{self, Observed};
use crate::sim::history::{History, NoResponse, Operation, Outcome};
use crate::sim::message::OperationId;
use crate::sim::runner::{self, RunOptions};
use crate::sim::scenario::model::{Action, AnswerAction, AnswerCheck, Expectation, ParallelAction, Request, Scenario, Send, Targets};
use crate::sim::scenario::template::{at, Template};
use crate::stores::admin::reseed;
use crate::stores::memory::{MemoryNoteStore, MemoryReplayStore, ReplayLimits};
use crate::stores::system::SystemClock;
use crate::stores::{StoreSpec, Stores};
use crate::wire::headers::named_target_field;
use crate::wire::meta::KEY_PROTOCOL_VERSION;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// How long one live request may take before it counts as a transport failure.
pub const LIVE_REQUEST_TIMEOUT_MS: u64 = 10_000;
/// Most simulator seeds tried to find an interleaving of a scenario's races like the live one.
pub const PARITY_SEEDS_MAX: u64 = 64;
/// Largest response body read from a live server.
pub const LIVE_RESPONSE_BYTES_MAX: usize = 4 * 1024 * 1024;

/// The fleet a scenario is played against.
#[derive(Debug, Clone)]
pub struct LiveFleet {
    /// `http://HOST:PORT/mcp`, one per scenario instance, in declaration order.
    pub urls: Vec<String>,
    /// Principal → bearer token.
    pub tokens: BTreeMap<String, String>,
}

impl LiveFleet {
    /// The embedded demo's tokens (`demo-alice`, `demo-bob`), overridden by `tokens` (principal → token).
    pub fn with_demo_tokens(urls: Vec<String>, tokens: BTreeMap<String, String>) -> LiveFleet {
        let mut all: BTreeMap<String, String> =
            Deployment::demo().tokens().into_iter().map(|(token, principal)| (principal, token)).collect();
        all.extend(tokens);
        LiveFleet { urls, tokens: all }
    }
}

/// How one step went live, next to the simulator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Both sides gave the same outcome.
    Match,
    /// They differ, and the difference counts.
    Mismatch,
    /// Shown, not judged, for this reason.
    NotCompared(String),
    /// Not performed live, for this reason.
    Skipped(String),
}

#[derive(Debug, Clone)]
pub struct ParityRow {
    pub line: usize,
    pub statement: String,
    pub simulator: String,
    pub live: String,
    pub verdict: Verdict,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExpectationResult {
    Held,
    Failed(String),
    NotEvaluated(String),
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
}

impl LiveReport {
    pub fn count(&self, wanted: fn(&Verdict) -> bool) -> usize {
        self.rows.iter().filter(|row| wanted(&row.verdict)).count()
    }

    pub fn expectations_failed(&self) -> usize {
        self.expectations.iter().filter(|(_, _, r)| matches!(r, ExpectationResult::Failed(_))).count()
    }

    pub fn passed(&self) -> bool {
        self.errors.is_empty() && self.expectations_failed() == 0 && self.count(|v| *v == Verdict::Mismatch) == 0
    }
}

/// Scenario problems found before anything is sent.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error(
        "{scenario} declares {instances} instance(s) ({names}) but --live names {urls} URL(s); pass one URL per instance, in declaration order"
    )]
    TooFewUrls { scenario: String, instances: usize, names: String, urls: usize },
    #[error("{scenario}: client {client} acts as principal {principal}, which has no bearer token; pass --token {principal}=TOKEN")]
    NoToken { scenario: String, client: String, principal: String },
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
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

/// A message ready to send: the exact bytes, the JSON they encode, whether it is a notification, and the
/// scenario's own `headers {…}` (when absent, the conforming routing headers are derived from the message).
#[derive(Debug, Clone)]
struct Message {
    bytes: Vec<u8>,
    value: Option<Value>,
    notification: bool,
    headers: Option<serde_json::Map<String, Value>>,
}

/// One live operation: what was sent and what came back.
struct LiveOperation {
    operation: Operation,
    /// Why its answer is shown but not judged (and expectations on it not evaluated).
    not_compared: Option<String>,
}

/// Plays `scenario` against `fleet` and compares each step with the simulator run of the same `seed`.
///
/// With `store` (the fleet's own), the store is first re-seeded with exactly the scenario's starting notes, and
/// store expectations are evaluated against it.
pub async fn run_live(scenario: &Scenario, fleet: &LiveFleet, seed: u64, store: Option<&LiveStore>) -> Result<LiveReport, LiveError> {
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
        if !fleet.tokens.contains_key(&client.principal) {
            return Err(LiveError::NoToken {
                scenario: scenario.name.clone(),
                client: client.name.clone(),
                principal: client.principal.clone(),
            });
        }
    }
    let http = reqwest::Client::builder()
        .timeout(Duration::from_millis(LIVE_REQUEST_TIMEOUT_MS))
        .build()
        .map_err(|e| LiveError::Client(e.to_string()))?;
    // The simulator's answers for the same scenario: under `seed`, and under the next seeds too, so that a live
    // race can be matched with an interleaving the simulator also produces (without parallel blocks every seed
    // answers alike, and one run is enough).
    let has_parallel = scenario.steps.iter().any(|s| matches!(s.action, Action::Parallel(_)));
    let seeds = if has_parallel { PARITY_SEEDS_MAX } else { 1 };
    let quiet = |seed| RunOptions { record_transcript: false, check_statelessness: false, ..RunOptions::seeded(seed) };
    let simulated = runner::run(scenario, &quiet(seed));
    let mut runs = vec![(seed, simulated.history)];
    for offset in 1..seeds {
        let other = seed.wrapping_add(offset);
        runs.push((other, runner::run(scenario, &quiet(other)).history));
    }
    let mut store_notes = Vec::new();
    let scenario_store = match store {
        None => None,
        Some(store) => {
            let failed = |reason: String| LiveError::Reseed { scenario: scenario.name.clone(), store: store.spec.to_string(), reason };
            // The notes the simulator starts from: the demo's (with `use demo`) and the scenario's own.
            let notes = runner::cluster_setup(scenario, &quiet(seed)).notes;
            let report = reseed(&*store.stores.admin, &notes).await.map_err(|e| failed(e.to_string()))?;
            let nonces_before = store.stores.admin.nonce_count().await.map_err(|e| failed(e.to_string()))?;
            store_notes.push(format!(
                "re-seeded {} with the scenario's {} note(s): {report}; the {nonces_before} nonce(s) consumed before stay consumed",
                store.spec,
                notes.len()
            ));
            Some(ScenarioStore { store, nonces_before })
        }
    };
    let mut player = Player::new(scenario, fleet, http, scenario_store);
    player.play(&runs).await;
    let mapping = instances.iter().zip(&fleet.urls).map(|(i, url)| (i.name.clone(), url.clone())).collect();
    Ok(LiveReport {
        scenario: scenario.name.clone(),
        seed,
        mapping,
        configuration_notes: player.global_mismatch.iter().chain(player.instance_mismatch.values()).cloned().collect(),
        store_notes,
        simulator_notes: simulated
            .failures
            .iter()
            .map(|f| format!("the simulator run fails too (line {}): {}", f.line, f.message.replace('\n', " ")))
            .chain(player.interleaving_notes)
            .collect(),
        rows: player.rows,
        expectations: player.expectations,
        errors: player.errors,
    })
}

struct Player<'a> {
    scenario: &'a Scenario,
    fleet: &'a LiveFleet,
    http: reqwest::Client,
    clients: Vec<Client>,
    lets: BTreeMap<String, Value>,
    operations: Vec<LiveOperation>,
    answers: BTreeMap<String, OperationId>,
    /// Named answers whose request was skipped, and why.
    skipped_answers: BTreeMap<String, String>,
    /// The first skipped step that changes what later answers may be.
    diverged_since: Option<String>,
    /// Instances a plain `crash` took down in the scenario (until `restart`).
    down: BTreeSet<String>,
    /// Instances declared differently from the fleet (one shared key ring, the wall clock).
    instance_mismatch: BTreeMap<String, String>,
    /// Scenario-wide declarations a fleet does not share.
    global_mismatch: Vec<String>,
    rows: Vec<ParityRow>,
    expectations: Vec<(usize, String, ExpectationResult)>,
    errors: Vec<String>,
    /// Races that went live as the simulator's did under another seed.
    interleaving_notes: Vec<String>,
    /// Stand-ins for `Observed`'s simulator stores: answer expectations never read them.
    empty_notes: Arc<MemoryNoteStore>,
    empty_replay: MemoryReplayStore,
    /// The fleet's store, when live mode has it.
    store: Option<ScenarioStore<'a>>,
}

impl<'a> Player<'a> {
    fn new(scenario: &'a Scenario, fleet: &'a LiveFleet, http: reqwest::Client, store: Option<ScenarioStore<'a>>) -> Player<'a> {
        let spec = &scenario.cluster;
        let clients = spec.clients.iter().map(|c| Client::new(&c.name, &c.principal, c.capabilities.clone())).collect();
        let empty_notes = Arc::new(MemoryNoteStore::new(Vec::<Note>::new()));
        let empty_replay = MemoryReplayStore::new(empty_notes.clone(), Arc::new(SystemClock), ReplayLimits::default());
        let mut player = Player {
            scenario,
            fleet,
            http,
            clients,
            lets: BTreeMap::new(),
            operations: Vec::new(),
            answers: BTreeMap::new(),
            skipped_answers: BTreeMap::new(),
            diverged_since: None,
            down: BTreeSet::new(),
            instance_mismatch: BTreeMap::new(),
            global_mismatch: Vec::new(),
            rows: Vec::new(),
            expectations: Vec::new(),
            errors: Vec::new(),
            interleaving_notes: Vec::new(),
            empty_notes,
            empty_replay,
            store,
        };
        player.find_configuration_mismatches();
        player
    }

    /// A fleet is instances sharing one key ring, one wall clock and one store seeded with the deployment.
    /// The first instance's keys stand for the fleet's ring; any instance declared otherwise diverges.
    fn find_configuration_mismatches(&mut self) {
        let spec = &self.scenario.cluster;
        let reference_keys = spec.instances.first().map(|i| i.keys.clone()).unwrap_or_default();
        for instance in &spec.instances {
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
            if !why.is_empty() {
                self.instance_mismatch.insert(instance.name.clone(), format!("{} declares {}", instance.name, why.join(" and ")));
            }
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

    fn url_of(&self, instance: &str) -> &str {
        let index = self.scenario.cluster.instances.iter().position(|i| i.name == instance).expect("the parser checked instance names");
        &self.fleet.urls[index]
    }

    fn client_index(&self, name: &str) -> usize {
        self.scenario.cluster.clients.iter().position(|c| c.name == name).expect("the parser checked client names")
    }

    fn lookup(&self, name: &str) -> Result<&Value, String> {
        if let Some(value) = self.lets.get(name) {
            return Ok(value);
        }
        if let Some(why) = self.skipped_answers.get(name) {
            return Err(format!("${name} was not sent live ({why})"));
        }
        let id = self.answers.get(name).ok_or_else(|| format!("${name} is not bound"))?;
        let operation = &self.operations[id.0].operation;
        operation.response().ok_or_else(|| format!("${name} has no response ({})", check::describe(operation)))
    }

    /// Why a request to `instance` is shown but not judged, if it is.
    fn not_compared_reason(&self, instance: &str) -> Option<String> {
        if let Some(why) = &self.diverged_since {
            return Some(format!("after {why}"));
        }
        if let Some(why) = self.global_mismatch.first() {
            return Some(format!("configuration: {why}"));
        }
        self.instance_mismatch.get(instance).map(|why| format!("configuration: {why}"))
    }

    fn skip(&mut self, line: usize, text: &str, why: &str, diverges: bool) {
        self.rows.push(ParityRow {
            line,
            statement: text.to_string(),
            simulator: "(performed)".into(),
            live: "SKIPPED".into(),
            verdict: Verdict::Skipped(why.to_string()),
        });
        if diverges && self.diverged_since.is_none() {
            self.diverged_since = Some(format!("skipped line {line} ({text})"));
        }
    }

    async fn play(&mut self, runs: &[(u64, History)]) {
        // The simulator runs still consistent with every race seen live so far; the first one is compared.
        let mut candidates: Vec<usize> = (0..runs.len()).collect();
        for (index, step) in self.scenario.steps.iter().enumerate() {
            let (line, text) = (step.line, step.text.as_str());
            match &step.action {
                Action::Let { name, value } => match self.skipped_dependency(std::iter::once(value), None) {
                    // A value built from a skipped answer is as unavailable as the answer.
                    Some(why) => {
                        self.skipped_answers.insert(name.clone(), why);
                    }
                    None => match value.resolve(&|n| self.lookup(n)) {
                        Ok(value) => {
                            self.lets.insert(name.clone(), value);
                        }
                        Err(why) => self.errors.push(format!("line {line}: {text}: {why}")),
                    },
                },
                Action::Send(send) => self.sequential(index, line, text, send, &runs[candidates[0]].1).await,
                Action::Parallel(items) => {
                    let sends: Vec<&Send> = items
                        .iter()
                        .filter_map(|item| if let ParallelAction::Send(send) = &item.item { Some(send) } else { None })
                        .collect();
                    let has_admin = sends.len() < items.len();
                    if has_admin {
                        // The admin change races the clients in the simulator; live it cannot happen at all.
                        self.skip(line, text, "its admin change races the clients, which live mode cannot arrange", true);
                        for send in sends {
                            self.skip_answer(send, "its parallel block contains an admin change");
                        }
                    } else {
                        self.parallel(index, line, text, &sends, runs, &mut candidates).await;
                    }
                }
                Action::Admin(AdminAction::Revoke { .. }) => {
                    self.skip(line, text, "a revocation changes the servers' configuration (edit --config and restart them)", true)
                }
                Action::Admin(
                    action @ (AdminAction::DeleteNote { .. } | AdminAction::MoveNote { .. } | AdminAction::RenameNote { .. }),
                ) if self.store.is_some() => self.admin_on_store(line, text, action).await,
                Action::Admin(AdminAction::DeleteNote { .. } | AdminAction::MoveNote { .. } | AdminAction::RenameNote { .. }) => {
                    self.skip(line, text, "admin changes need the store; pass --reseed SPEC (the fleet's --store) to make them live", true)
                }
                Action::Admin(_) => self.skip(line, text, "this admin change needs the simulator's gateway world", true),
                Action::Advance { .. } => self.skip(line, text, "the fleet runs on the wall clock, which cannot be advanced", true),
                Action::Crash { instance, trigger: None } => {
                    self.down.insert(instance.clone());
                    self.skip(
                        line,
                        text,
                        &format!("live mode does not stop processes; requests to {instance} are skipped until `restart`"),
                        false,
                    );
                }
                Action::Crash { trigger: Some(_), .. } => {
                    self.skip(line, text, "a crash at a precise store operation needs the simulator's network", true)
                }
                Action::Restart { instance } => {
                    self.down.remove(instance);
                    self.skip(line, text, &format!("the live {instance} was never stopped"), false);
                }
                Action::Rotate { .. } | Action::Retire { .. } => {
                    self.skip(line, text, "key rotation needs the servers' key ring (restart them with a new --key-file)", true)
                }
                Action::Expect(expectation) => {
                    let result = self.evaluate(expectation).await;
                    self.expectations.push((line, text.to_string(), result));
                }
            }
        }
    }

    /// Why `send` cannot be sent live: its instance is down in the scenario, or it is built from a skipped answer.
    fn unsendable(&self, send: &Send) -> Option<String> {
        if self.down.contains(&send.instance) {
            return Some(format!("{} is crashed at this point of the scenario, but the live one is up", send.instance));
        }
        let mut templates: Vec<&Template> = send.headers.as_deref().into_iter().collect();
        let mut form = None;
        match &send.request {
            Request::Call { params, .. } => templates.push(params),
            Request::Raw { message } => templates.push(message),
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

    /// The reason, if any of these templates (or the named form) refers to an answer that was not sent live.
    fn skipped_dependency<'t>(&self, templates: impl Iterator<Item = &'t Template>, form: Option<&String>) -> Option<String> {
        let mut names: Vec<&String> = form.into_iter().collect();
        let references: Vec<_> = templates.flat_map(Template::references).collect();
        names.extend(references.iter().map(|r| &r.name));
        names
            .into_iter()
            .find_map(|name| self.skipped_answers.get(name).map(|why| format!("it uses {name}, which was not sent live ({why})")))
    }

    fn skip_answer(&mut self, send: &Send, why: &str) {
        if let Some(name) = &send.name {
            self.skipped_answers.insert(name.clone(), why.to_string());
        }
    }

    async fn sequential(&mut self, index: usize, line: usize, text: &str, send: &Send, simulated: &History) {
        if let Some(why) = self.unsendable(send) {
            self.skip_answer(send, &why);
            self.rows.push(ParityRow {
                line,
                statement: text.into(),
                simulator: simulated_outcomes(simulated, index).join("; "),
                live: "SKIPPED".into(),
                verdict: Verdict::Skipped(why),
            });
            return;
        }
        let message = match self.build(send) {
            Ok(message) => message,
            Err(why) => {
                let simulator = simulated_outcomes(simulated, index).join("; ");
                self.unbuildable(line, text, send, Some(simulator), why);
                return;
            }
        };
        let operation = match self.perform(index, send, message).await {
            Ok(id) => id,
            Err(why) => {
                self.skip_answer(send, &why);
                self.errors.push(format!("line {line}: {text}: {why}"));
                return;
            }
        };
        let live = vec![outcome_of(&self.operations[operation.0].operation)];
        let reason = self.operations[operation.0].not_compared.clone();
        self.push_row(line, text, simulated_outcomes(simulated, index), live, reason);
    }

    async fn parallel(
        &mut self,
        index: usize,
        line: usize,
        text: &str,
        sends: &[&Send],
        runs: &[(u64, History)],
        candidates: &mut Vec<usize>,
    ) {
        // A race with one runner missing is another race: the whole block is skipped.
        if let Some(why) = sends.iter().find_map(|send| self.unsendable(send)) {
            self.skip(line, text, &why, true);
            for send in sends {
                self.skip_answer(send, &format!("its parallel block was skipped: {why}"));
            }
            return;
        }
        // Built first (answers use each client's last form as of the block's start), then sent at once.
        let mut built = Vec::new();
        let mut reason = None;
        for send in sends {
            match self.build(send) {
                Ok(message) => built.push((*send, message)),
                Err(why) => {
                    let excuse = self.unbuildable(line, text, send, None, why);
                    reason = reason.or(excuse);
                }
            }
        }
        let mut flights = Vec::new();
        for (send, message) in &built {
            let (http, url) = (self.http.clone(), self.url_of(&send.instance).to_string());
            let token = self.token_of(&send.client).to_string();
            let message = message.clone();
            flights.push(tokio::spawn(async move { post(&http, &url, &token, &message).await }));
        }
        let mut live = Vec::new();
        for ((send, message), flight) in built.into_iter().zip(flights) {
            let outcome = match flight.await {
                Ok(result) => result,
                Err(join) => Err(format!("the request task failed: {join}")),
            };
            match outcome {
                Ok(outcome) => {
                    let id = self.record(index, send, message, outcome);
                    live.push(outcome_of(&self.operations[id.0].operation));
                    reason = reason.or_else(|| self.operations[id.0].not_compared.clone());
                }
                Err(why) => {
                    self.skip_answer(send, &why);
                    self.errors.push(format!("line {line}: {text}: {why}"));
                }
            }
        }
        // A race may be won by either side: the block is compared as a set of outcomes, with any interleaving
        // the simulator produces under the seeds tried; later steps are compared with a run that raced alike.
        live.sort();
        let sorted = |run: usize| {
            let mut outcomes = simulated_outcomes(&runs[run].1, index);
            outcomes.sort();
            outcomes
        };
        let alike: Vec<usize> = candidates.iter().copied().filter(|&run| sorted(run) == live).collect();
        if let Some(&first) = alike.first() {
            if first != candidates[0] {
                self.interleaving_notes.push(format!(
                    "line {line}: the live race went as the simulator's under seed {} (later steps are compared with that run)",
                    runs[first].0
                ));
            }
            *candidates = alike;
        }
        let simulator = sorted(candidates[0]);
        self.push_row(line, text, simulator, live, reason);
    }

    fn push_row(&mut self, line: usize, text: &str, simulator: Vec<String>, live: Vec<String>, reason: Option<String>) {
        let verdict = match reason {
            _ if simulator == live => Verdict::Match,
            Some(why) => {
                // A request that went differently live may have changed the store (a misconfigured instance
                // that deleted what the simulator's refused): nothing after it can be judged either.
                if self.diverged_since.is_none() {
                    self.diverged_since = Some(format!("line {line} ({text}), which went differently live"));
                }
                Verdict::NotCompared(why)
            }
            None => Verdict::Mismatch,
        };
        self.rows.push(ParityRow { line, statement: text.into(), simulator: simulator.join("; "), live: live.join("; "), verdict });
    }

    fn token_of(&self, client: &str) -> &str {
        let principal = &self.scenario.cluster.clients[self.client_index(client)].principal;
        self.fleet.tokens.get(principal).map(String::as_str).expect("checked before the run")
    }

    /// A step that cannot be built from the live answers: not compared if those answers were not comparable
    /// (a form the simulator showed and the fleet did not), an error otherwise.
    /// Returns the excuse, if there is one. In a parallel block (`simulator` None) the block's row says it.
    fn unbuildable(&mut self, line: usize, text: &str, send: &Send, simulator: Option<String>, why: String) -> Option<String> {
        self.skip_answer(send, &why);
        let excuse = self.excuse(send);
        match (&excuse, simulator) {
            (Some(reason), Some(simulator)) => {
                let live = format!("(not sent: {why})");
                let verdict = Verdict::NotCompared(reason.clone());
                self.rows.push(ParityRow { line, statement: text.into(), simulator, live, verdict });
            }
            (Some(_), None) => {}
            (None, _) => self.errors.push(format!("line {line}: {text}: {why}")),
        }
        excuse
    }

    /// Why `send`, or an answer it is built from, is not comparable, if it is.
    fn excuse(&self, send: &Send) -> Option<String> {
        if let Some(why) = self.not_compared_reason(&send.instance) {
            return Some(why);
        }
        let mut used: Vec<OperationId> = Vec::new();
        if let Request::Answer(answer) = &send.request {
            match &answer.form {
                Some(name) => used.extend(self.answers.get(name).copied()),
                None => used.extend(self.clients[self.client_index(&send.client)].last_form),
            }
        }
        used.into_iter().find_map(|id| self.operations[id.0].not_compared.clone())
    }

    async fn perform(&mut self, index: usize, send: &Send, message: Message) -> Result<OperationId, String> {
        let url = self.url_of(&send.instance).to_string();
        let token = self.token_of(&send.client).to_string();
        let outcome = post(&self.http, &url, &token, &message).await?;
        Ok(self.record(index, send, message, outcome))
    }

    fn record(&mut self, index: usize, send: &Send, message: Message, response: Option<Value>) -> OperationId {
        let Message { bytes, value, notification, .. } = message;
        let id = OperationId(self.operations.len());
        let client = &self.scenario.cluster.clients[self.client_index(&send.client)];
        let exact = String::from_utf8_lossy(&bytes).into_owned();
        let request_exact = match &value {
            Some(value) if serde_json::to_string(value).ok().as_deref() == Some(exact.as_str()) => None,
            _ => Some(exact),
        };
        let outcome = match response {
            Some(value) => Outcome::Answered { value: Arc::new(value), at_ms: 0, delivery: id.0 + 1 },
            None => Outcome::NoResponse(NoResponse::Notification),
        };
        let operation = Operation {
            id,
            client: client.name.clone(),
            principal: client.principal.clone(),
            instance: send.instance.clone(),
            step: index,
            name: send.name.clone(),
            request_value: value.map(Arc::new),
            request_exact,
            notification,
            sent_at_ms: 0,
            outcome,
        };
        if let Some(name) = &send.name {
            self.answers.insert(name.clone(), id);
            self.skipped_answers.remove(name);
        }
        // Form answers: the client remembers its last form, as the simulator's does.
        if operation.response().and_then(|r| at(r, &["result", "resultType"])).and_then(Value::as_str) == Some("input_required") {
            let client = self.client_index(&send.client);
            self.clients[client].last_form = Some(id);
        }
        let not_compared = self.not_compared_reason(&send.instance);
        self.operations.push(LiveOperation { operation, not_compared });
        id
    }

    /// The message a step sends: exact bytes, the JSON they encode, whether it is a notification.
    fn build(&mut self, send: &Send) -> Result<Message, String> {
        let client = self.client_index(&send.client);
        let lookup = |n: &str| self.lookup(n);
        let headers = match send.headers.as_deref().map(|h| h.resolve(&lookup)).transpose()? {
            Some(Value::Object(fields)) => Some(fields),
            Some(_) => return Err("headers must be a JSON object of header names to strings".into()),
            None => None,
        };
        let (method, params, notification) = match &send.request {
            Request::Call { method, params, notification } => (method.clone(), params.resolve(&lookup)?, *notification),
            Request::Raw { message } => {
                let (bytes, parsed, notification) = raw_message(&message.resolve(&lookup)?);
                return Ok(Message { bytes, value: parsed, notification, headers });
            }
            Request::Answer(answer) => {
                let form = match &answer.form {
                    Some(name) => {
                        if let Some(why) = self.skipped_answers.get(name) {
                            return Err(format!("the form {name} was not shown live ({why})"));
                        }
                        *self.answers.get(name).ok_or_else(|| format!("no answer is named {name}"))?
                    }
                    None => self.clients[client]
                        .last_form
                        .ok_or_else(|| format!("{} has not been shown a form live; say which with `for NAME`", send.client))?,
                };
                let (method, params) = scenario_answer(answer, &self.operations[form.0].operation, &lookup)?;
                (method, params, false)
            }
        };
        let (bytes, value) = self.clients[client].request(&method, params, notification)?;
        Ok(Message { bytes, value: Some(value), notification, headers })
    }

    async fn evaluate(&self, expectation: &Expectation) -> ExpectationResult {
        let (names, templates): (Vec<&String>, Vec<&Template>) = match expectation {
            Expectation::Answer { targets, check } => {
                let names = match targets {
                    Targets::One(name) => vec![name],
                    Targets::ExactlyOne(names) | Targets::Each(names) => names.iter().collect(),
                };
                let templates = match check {
                    AnswerCheck::Equals { value, .. } => vec![value],
                    _ => Vec::new(),
                };
                (names, templates)
            }
            Expectation::ExportsCount(_) => {
                return ExpectationResult::NotEvaluated(
                    "exports are recorded inside the gateway's backends, which live mode cannot read".into(),
                )
            }
            store_expectation => return self.evaluate_on_store(store_expectation).await,
        };
        let referenced: Vec<&String> = templates.iter().flat_map(|t| t.references()).map(|r| &r.name).collect();
        for name in names.iter().copied().chain(referenced) {
            if let Some(why) = self.skipped_answers.get(name) {
                return ExpectationResult::NotEvaluated(format!("{name} was not sent live ({why})"));
            }
            if let Some(why) = self.answers.get(name).and_then(|id| self.operations[id.0].not_compared.as_ref()) {
                return ExpectationResult::NotEvaluated(format!("{name} is not comparable ({why})"));
            }
        }
        let history = History { operations: self.operations.iter().map(|o| o.operation.clone()).collect(), ..History::default() };
        let lookup = |n: &str| self.lookup(n);
        let observed = Observed {
            history: &history,
            answers: &self.answers,
            notes: &self.empty_notes,
            replay: &self.empty_replay,
            exports: &[],
            lookup: &lookup,
        };
        match check::evaluate(expectation, &observed) {
            Ok(()) => ExpectationResult::Held,
            Err(why) => ExpectationResult::Failed(why),
        }
    }
}

impl Player<'_> {
    /// Why the live store may hold something else than the simulator's at this point, if it may.
    fn store_divergence(&self) -> Option<String> {
        if let Some(why) = &self.diverged_since {
            return Some(format!("after {why}"));
        }
        if let Some(why) = self.global_mismatch.first() {
            return Some(format!("configuration: {why}"));
        }
        // A request whose answer was not judged may have changed the store differently live.
        self.operations.iter().find_map(|o| o.not_compared.as_ref()).map(|why| format!("a request before it was not compared ({why})"))
    }

    /// An admin change to a note, made in the fleet's store behind the servers' backs, as the simulator's
    /// admin makes it in its store.
    async fn admin_on_store(&mut self, line: usize, text: &str, action: &AdminAction) {
        let Some(ScenarioStore { store, .. }) = &self.store else { return };
        let (admin, spec) = (store.stores.admin.clone(), store.spec.to_string());
        let (note_id, done) = match action {
            AdminAction::DeleteNote { note_id } => (note_id, admin.remove(note_id).await),
            AdminAction::MoveNote { note_id, uri } => (note_id, admin.move_to(note_id, uri).await),
            AdminAction::RenameNote { note_id, title } => (note_id, admin.rename(note_id, title).await),
            _ => return,
        };
        let (live, verdict) = match done {
            Ok(true) => match self.store_divergence() {
                Some(why) => ("done".to_string(), Verdict::NotCompared(why)),
                None => ("done".to_string(), Verdict::Match),
            },
            Ok(false) => {
                let why = format!("the store held no note {note_id}");
                if self.diverged_since.is_none() {
                    self.diverged_since = Some(format!("line {line} ({text}): {why}"));
                }
                (format!("no note {note_id}"), Verdict::NotCompared(why))
            }
            Err(error) => {
                self.errors.push(format!("line {line}: {text}: the store {spec} failed: {error}"));
                if self.diverged_since.is_none() {
                    self.diverged_since = Some(format!("line {line} ({text}) failed"));
                }
                ("store failed".to_string(), Verdict::NotCompared("the store failed".into()))
            }
        };
        self.rows.push(ParityRow { line, statement: text.to_string(), simulator: "(performed)".into(), live, verdict });
    }

    /// A store expectation (`note`, `notes count`, `consumed`, `nonce of`), read from the fleet's store.
    async fn evaluate_on_store(&self, expectation: &Expectation) -> ExpectationResult {
        let Some(ScenarioStore { store, nonces_before }) = &self.store else {
            return ExpectationResult::NotEvaluated(
                "it reads the store; pass --reseed SPEC (the fleet's --store) to re-seed it and evaluate this".into(),
            );
        };
        if let Some(why) = self.store_divergence() {
            return ExpectationResult::NotEvaluated(format!("the store may differ from the simulator's: {why}"));
        }
        if let Expectation::Nonce { answer, .. } = expectation {
            if let Some(why) = self.skipped_answers.get(answer) {
                return ExpectationResult::NotEvaluated(format!("{answer} was not sent live ({why})"));
            }
        }
        let admin = &store.stores.admin;
        let unreadable = |error: crate::handlers::ports::StoreError| format!("cannot read the store {}: {error}", store.spec);
        let checked: Result<(), String> = async {
            match expectation {
                Expectation::NotePresent { id, present } => check::note_present(&admin.list().await.map_err(unreadable)?, id, *present),
                Expectation::NotesCount(expected) => check::notes_count(&admin.list().await.map_err(unreadable)?, *expected),
                Expectation::ConsumedCount(expected) => {
                    let now = admin.nonce_count().await.map_err(unreadable)?;
                    let consumed = usize::try_from(now.saturating_sub(*nonces_before)).unwrap_or(usize::MAX);
                    check::consumed_count(consumed, *expected, &format!("{now} held now, {nonces_before} when the scenario started"))
                }
                Expectation::Nonce { answer, record } => {
                    let history =
                        History { operations: self.operations.iter().map(|o| o.operation.clone()).collect(), ..History::default() };
                    let nonce = check::nonce_of(answer, &self.answers, &history)?;
                    let lookup = |n: &str| self.lookup(n);
                    let expected = record.as_ref().map(|t| t.resolve(&lookup)).transpose()?;
                    let actual = admin.nonce_record(&nonce).await.map_err(unreadable)?;
                    check::nonce_record(answer, expected.as_ref(), actual.as_ref())
                }
                // Routed elsewhere by `evaluate`; never judged here.
                Expectation::Answer { .. } | Expectation::ExportsCount(_) => Ok(()),
            }
        }
        .await;
        match checked {
            Ok(()) => ExpectationResult::Held,
            Err(why) => ExpectationResult::Failed(why),
        }
    }
}

/// The simulator's outcomes for the requests step `index` sent, in send order.
fn simulated_outcomes(history: &History, index: usize) -> Vec<String> {
    let outcomes: Vec<String> = history.operations.iter().filter(|op| op.step == index).map(outcome_of).collect();
    if outcomes.is_empty() {
        // The step could not run in the simulator either (its failure is listed as a note).
        return vec!["(not sent)".into()];
    }
    outcomes
}

/// What parity compares: `resultType` (and `structuredContent`), or the error code and reason, or no response.
pub fn outcome_of(operation: &Operation) -> String {
    match &operation.outcome {
        Outcome::Pending => "pending".into(),
        Outcome::NoResponse(_) => "no response".into(),
        Outcome::Answered { value, .. } => outcome_of_response(value),
    }
}

fn outcome_of_response(value: &Value) -> String {
    if let Some(result) = value.get("result") {
        let result_type = result.get("resultType").and_then(Value::as_str).unwrap_or("(no resultType)");
        return match result.get("structuredContent") {
            Some(content) => format!("{result_type} {content}"),
            None => result_type.to_string(),
        };
    }
    let code = at(value, &["error", "code"]).map(Value::to_string).unwrap_or_else(|| "?".into());
    match at(value, &["error", "data", "reason"]).and_then(Value::as_str) {
        Some(reason) => format!("error {code} {reason}"),
        None => format!("error {code}"),
    }
}

/// One conforming POST. `Ok(None)`: answered 202 with no body (a notification). `Err`: the exchange failed
/// at the transport (refused connection, timeout, a body that is not a JSON-RPC message).
async fn post(http: &reqwest::Client, url: &str, token: &str, message: &Message) -> Result<Option<Value>, String> {
    let Message { bytes, value, notification, headers } = message;
    let notification = *notification;
    let mut request = http
        .post(url)
        .header("Authorization", format!("Bearer {token}"))
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream");
    if let Some(headers) = headers {
        // The scenario's own routing headers, exactly (as the simulator passes them to the pipeline).
        for (name, field) in headers {
            let text = field.as_str().ok_or_else(|| format!("header {name} must be a string"))?;
            request = request.header(name.as_str(), text);
        }
    } else if let Some(value) = value {
        if let Some(version) = at(value, &["params", "_meta", KEY_PROTOCOL_VERSION]).and_then(Value::as_str) {
            request = request.header("MCP-Protocol-Version", version);
        }
        if let Some(method) = value.get("method").and_then(Value::as_str) {
            request = request.header("Mcp-Method", method);
            let target = named_target_field(method).and_then(|field| at(value, &["params", field])).and_then(Value::as_str);
            if let Some(target) = target {
                request = request.header("Mcp-Name", target);
            }
        }
    }
    let response = request.body(bytes.clone()).send().await.map_err(|e| {
        let hint = if e.is_connect() { "; is the fleet running there? (mcpsim serve --http ADDR --instances N)" } else { "" };
        format!("POST {url} failed: {}{hint}", with_causes(&e))
    })?;
    let status = response.status().as_u16();
    let streamed = response.headers().get("content-type").and_then(|v| v.to_str().ok()).is_some_and(|v| v.starts_with("text/event-stream"));
    let body = response.bytes().await.map_err(|e| format!("reading the answer from {url} failed: {e}"))?;
    if body.len() > LIVE_RESPONSE_BYTES_MAX {
        return Err(format!("{url} answered {} bytes, more than {LIVE_RESPONSE_BYTES_MAX}", body.len()));
    }
    if status == 202 && body.is_empty() {
        return Ok(None);
    }
    // An SSE answer ends with the response as its last `data:` event.
    let text = String::from_utf8_lossy(&body);
    let json = if streamed {
        text.lines().filter_map(|l| l.strip_prefix("data:")).next_back().map(str::trim).unwrap_or("").to_string()
    } else {
        text.into_owned()
    };
    match serde_json::from_str::<Value>(&json) {
        Ok(value) => Ok(Some(value)),
        Err(_) if notification => Ok(None),
        Err(e) => {
            Err(format!("{url} answered HTTP {status} with a body that is not JSON ({e}): {}", json.chars().take(200).collect::<String>()))
        }
    }
}

/// An error and its causes, one after another (reqwest's own message names only the outermost).
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    // Bounded: an error chain is short, but nothing guarantees it.
    for _ in 0..8 {
        let Some(next) = cause else { break };
        text.push_str(&format!(": {next}"));
        cause = next.source();
    }
    text
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
    let held = report.expectations.iter().filter(|(_, _, r)| *r == ExpectationResult::Held).count();
    let not_evaluated = report.expectations.iter().filter(|(_, _, r)| matches!(r, ExpectationResult::NotEvaluated(_))).count();
    format!(
        "{}: steps {matched} match, {differ} differ, {not_compared} not compared, {skipped} skipped; expectations {held} held, {} failed, {not_evaluated} not evaluated; {} error(s)",
        if report.passed() { "PASS" } else { "FAIL" },
        report.expectations_failed(),
        report.errors.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn outcomes_name_result_types_codes_and_reasons() {
        assert_eq!(outcome_of_response(&json!({"result": {"resultType": "input_required", "requestState": "s1"}})), "input_required");
        assert_eq!(
            outcome_of_response(&json!({"result": {"resultType": "complete", "structuredContent": {"deleted": true}}})),
            "complete {\"deleted\":true}"
        );
        assert_eq!(
            outcome_of_response(&json!({"error": {"code": -32602, "data": {"reason": "state_consumed"}}})),
            "error -32602 state_consumed"
        );
        assert_eq!(outcome_of_response(&json!({"error": {"code": -32601}})), "error -32601");
    }

    #[tokio::test]
    async fn more_instances_than_urls_is_refused_before_anything_is_sent() {
        let text = "use demo\ninstance i1\ninstance i2\nclient alice principal alice\n";
        let scenario = crate::sim::scenario::parse("x.sim", "x", text).unwrap();
        let fleet = LiveFleet::with_demo_tokens(vec!["http://127.0.0.1:9/mcp".into()], BTreeMap::new());
        let error = run_live(&scenario, &fleet, 1, None).await.expect_err("refused");
        assert!(error.to_string().contains("declares 2 instance(s) (i1, i2) but --live names 1 URL(s)"), "{error}");
        let text = "use demo\ninstance i1\nprincipal carol workspaces \"file:///c\"\nclient carol principal carol\n";
        let scenario = crate::sim::scenario::parse("y.sim", "y", text).unwrap();
        let error = run_live(&scenario, &fleet, 1, None).await.expect_err("refused");
        assert!(error.to_string().contains("--token carol=TOKEN"), "{error}");
    }
}
