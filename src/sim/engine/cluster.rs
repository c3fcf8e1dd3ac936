//! The cluster: the actors, the network, the scheduler, the running tasks, and the loop that delivers one
//! envelope at a time.
//!
//! # Execution model
//!
//! Nothing runs on its own. [`Cluster::deliver_next`] asks the scheduler for one envelope in flight,
//! moves the virtual clock to its arrival time and hands it to the receiver. If that starts work (a
//! request reaching an instance, a call reaching a store) a task is created; if it completes work (a store
//! return) the waiting task is resumed. The cluster then polls exactly that one task, once, with a no-op
//! waker, until it either finishes (its reply becomes an envelope) or blocks on a store call (the call
//! becomes an envelope). So exactly one actor runs per delivery, every new envelope is numbered in a
//! deterministic order, and no async runtime's wake-up order ever reaches a transcript.
//!
//! A crash drops the instance's tasks and every envelope to or from it; a restart builds a new incarnation
//! from the factory. The stores are separate actors and keep running: a crash of an instance after its
//! claim-and-delete reached the replay store loses only the answer.

use crate::assembly::NotesPorts;
use crate::config::server_info;
use crate::eras::session::SessionLimits;
use crate::eras::{is_legacy_http, LegacyAdapter};
use crate::framework::ports::{ClaimAndDelete, ClaimOutcome, GuardedDelete, Note};
use crate::framework::Service;
use crate::oracle::grants::Grants;
use crate::oracle::history::{Attempt, Effect, EffectKind, Export, History, NoResponse, Operation, Outcome};
use crate::play::world::Outgoing;
use crate::policy::authorization::Authorizations;
use crate::policy::containment::FileUri;
use crate::policy::state::KeyRing;
use crate::scenario::model::{AdminAction, Moment, BACKEND_ACTOR_SUFFIX};
use crate::scenario::parser::derived_key_secret;
use crate::scenario::template::at;
use crate::servers::notes::NotesConfig;
use crate::sim::actors::admin::store_call;
use crate::sim::actors::backend;
use crate::sim::actors::gateway::{self, GatewayWorld};
use crate::sim::actors::gateway_mutants::GatewayVariant;
use crate::sim::actors::instance::{handle_page, handle_request, incarnation_nonces, Instance, InstanceParts, ServiceFactory};
use crate::sim::actors::legacy::{self, CurrentService};
use crate::sim::actors::legacy_mutants::{self, EraVariant, LegacyMemory};
use crate::sim::actors::{note_store, replay_store, ExchangeHandle, StoreClient, TaskFuture, TaskOutput};
use crate::sim::engine::clock::VirtualClock;
use crate::sim::engine::faults::{Fault, StoreName, RETRIES_MAX, RETRY_TIMEOUT_MS};
use crate::sim::engine::message::{ActorId, OperationId, Payload, RequestBody, StoreCall, StoreReturn, TaskId};
use crate::sim::engine::network::{Envelope, Hold, Network, NetworkFull};
use crate::sim::engine::random::{self, Stream};
use crate::sim::engine::scheduler::{Decision, DecisionLog, Divergence, Scheduler};
use crate::sim::render::transcript::{Body, Entry, Kind, Message, Transcript};
use crate::stores::deterministic::SeededNonces;
use crate::stores::memory::{MemoryNoteStore, MemoryReplayStore, ReplayLimits};
use crate::stores::out_of_band::MemoryOutOfBandStore;
use crate::wire::errors::Reason;
use crate::wire::headers::RoutingHeaders;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// Most deliveries one `run_until_quiet` may make before the run is declared a runaway.
pub(crate) const STEP_DELIVERIES_MAX: usize = 10_000;

pub use crate::scenario::model::{ADMIN, NOTE_STORE, REPLAY_STORE};

#[derive(Clone)]
pub struct InstanceSetup {
    pub name: String,
    pub key_ring: KeyRing,
    pub clock_offset_ms: i64,
    /// A gateway instance (in front of the backend actors) rather than a notes instance.
    pub gateway: bool,
    /// Also serves 2025-11-25 clients, through the legacy adapter (`eras both`).
    pub eras_both: bool,
}

/// A client as the cluster knows it: an actor acting for a principal (what it sends is the interpreter's).
#[derive(Clone)]
pub struct ClientSetup {
    pub name: String,
    pub principal: String,
    /// A browser actor signed in as `principal` on the out-of-band page: its requests go to the instance's
    /// page ([`Service::page`]), not its MCP pipeline.
    pub browser: bool,
    /// A 2025-11-25 client: how it answers what a server asks it inside a call.
    pub legacy: Option<crate::scenario::model::LegacyClientSpec>,
}

/// The base URL of the out-of-band page in the simulator (every instance serves it, as every process of a
/// fleet behind one name would).
pub const SIM_PAGE_BASE: &str = "https://notes.example";

/// Everything needed to build a cluster. A run builds it once and each execution (the run, its rerouted
/// re-run, an exploration's next seed) starts from a copy.
#[derive(Clone)]
pub struct ClusterSetup {
    pub scenario: String,
    pub seed: u64,
    pub instances: Vec<InstanceSetup>,
    pub clients: Vec<ClientSetup>,
    pub authorizations: Arc<Authorizations>,
    /// The same grants in the oracle's own model, for the history.
    pub grants: Arc<Grants>,
    pub notes: Arc<Vec<Note>>,
    /// `notes` in a note store, indexed: each cluster starts from a copy (indexing means parsing every URI).
    pub note_store: Arc<MemoryNoteStore>,
    pub state_ttl_ms: u64,
    pub replay_limits: ReplayLimits,
    pub latency_ms_min: u64,
    pub latency_ms_max: u64,
    /// Off in benchmarks: nothing is rendered or kept, only counted.
    pub record_transcript: bool,
    pub factory: ServiceFactory,
    /// What gateway instances run (the real gateway unless a test substitutes a broken variant).
    pub gateway_variant: GatewayVariant,
    /// What `eras both` instances run (the real adapter unless a test substitutes a broken variant).
    pub era_variant: EraVariant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Instance(usize),
    NoteStore,
    ReplayStore,
    Admin,
    Client(usize),
    /// A gateway backend (index into the gateway world's backends).
    Backend(usize),
}

/// Where a finished task's result goes.
#[derive(Debug, Clone, Copy)]
enum ReplyTo {
    Client { actor: ActorId, operation: OperationId },
    Caller { actor: ActorId, task: Option<TaskId> },
}

/// Which client operation (and which nonce) a piece of work is on behalf of.
#[derive(Debug, Clone, Default)]
struct Cause {
    operation: Option<OperationId>,
    nonce: Option<String>,
}

struct Task {
    actor: ActorId,
    cause: Cause,
    reply_to: ReplyTo,
    /// The store call a store task serves (for effects and labels).
    call: Option<StoreCall>,
    future: TaskFuture,
}

/// "Crash `instance` before/after `receiver` receives `label`": fires once, at the first matching delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CrashTrigger {
    pub instance: usize,
    pub moment: Moment,
    pub receiver: ActorId,
    /// A store operation (`claim_and_delete`) or a JSON-RPC method (`tools/call`).
    pub label: String,
    /// Only a message from this actor fires it (`from SENDER`); any sender if `None`.
    pub sender: Option<ActorId>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    #[error("more than {STEP_DELIVERIES_MAX} deliveries without the network going quiet: the scenario runs away")]
    Runaway,
    #[error(transparent)]
    NetworkFull(#[from] NetworkFull),
    #[error(transparent)]
    Divergence(#[from] Divergence),
    #[error("task {task} on {actor} blocked without sending anything: it would never resume")]
    Stuck { task: u64, actor: String },
}

pub struct Cluster {
    seed: u64,
    roles: Vec<Role>,
    names: Vec<String>,
    instances: Vec<Instance>,
    clients: Vec<ClientSetup>,
    exchange: ExchangeHandle,
    /// Boxed: a task is a few hundred bytes, and a task is taken out and put back on every poll.
    tasks: BTreeMap<TaskId, Box<Task>>,
    next_task: u64,
    network: Network,
    scheduler: Box<dyn Scheduler>,
    decisions: DecisionLog,
    clock: VirtualClock,
    notes: Arc<MemoryNoteStore>,
    replay: Arc<MemoryReplayStore>,
    /// The out-of-band flows, kept by the replay-store actor.
    flows: Arc<MemoryOutOfBandStore>,
    authorizations: Arc<Authorizations>,
    state_ttl_ms: u64,
    factory: ServiceFactory,
    triggers: Vec<CrashTrigger>,
    /// Faults planned by delivery number and not fired yet (exploration's fault plans), in plan order.
    planned_faults: Vec<Fault>,
    /// Stores answering late since a slow-store fault fired: which, and by how much.
    slow_stores: Vec<(StoreName, u64)>,
    /// Stores in an outage (a store-unavailable fault, or a scenario's `store … unavailable`): which, and
    /// how many more calls each refuses.
    outages: Vec<(StoreName, u32)>,
    /// What each first attempt sent, kept while clients retry (a retry sends the same bytes again).
    requests: BTreeMap<OperationId, SentRequest>,
    history: History,
    transcript: Transcript,
    deliveries: usize,
    note_store_actor: ActorId,
    replay_store_actor: ActorId,
    admin_actor: ActorId,
    /// Present when the scenario declares a gateway: the backends and what gateway instances share.
    gateway_world: Option<GatewayWorld>,
    /// Which instances are gateways (by instance index).
    is_gateway: Vec<bool>,
    /// The actor of each backend of the gateway world, in its order.
    backend_actors: Vec<ActorId>,
    /// Exports each backend's ledger held when the history last looked (new ones become effects).
    exports_seen: Vec<usize>,
    /// Which instances serve both eras (by instance index).
    eras_both: Vec<bool>,
    /// Each `eras both` instance's legacy adapter of its current incarnation, and the service it reaches.
    legacy: Vec<Option<(Arc<LegacyAdapter>, CurrentService)>>,
    era_variant: EraVariant,
    /// A broken adapter's memory, per instance incarnation (unused by the real one).
    legacy_memory: Vec<LegacyMemory>,
    /// The `Mcp-Session-Id` each legacy client holds (the last one an `initialize` gave it), by client.
    legacy_sessions: Vec<Option<String>>,
}

/// A client request as sent, to send again.
#[derive(Debug, Clone)]
struct SentRequest {
    client: usize,
    body: RequestBody,
    headers: Option<RoutingHeaders>,
}

impl Cluster {
    pub fn new(setup: ClusterSetup, scheduler: Box<dyn Scheduler>) -> Cluster {
        let instance_count = setup.instances.len();
        let note_store_actor = instance_count;
        let replay_store_actor = instance_count + 1;
        let admin_actor = instance_count + 2;
        let mut roles: Vec<Role> = (0..instance_count).map(Role::Instance).collect();
        let mut names: Vec<String> = setup.instances.iter().map(|i| i.name.clone()).collect();
        roles.extend([Role::NoteStore, Role::ReplayStore, Role::Admin]);
        names.extend([NOTE_STORE.to_string(), REPLAY_STORE.to_string(), ADMIN.to_string()]);
        for (index, client) in setup.clients.iter().enumerate() {
            roles.push(Role::Client(index));
            names.push(client.name.clone());
        }
        let exchange = ExchangeHandle::default();
        let is_gateway: Vec<bool> = setup.instances.iter().map(|i| i.gateway).collect();
        let eras_both: Vec<bool> = setup.instances.iter().map(|i| i.eras_both && !i.gateway).collect();
        // Backend actors exist only when a gateway does, so notes-only transcripts are unchanged.
        let gateway_world = is_gateway
            .iter()
            .any(|&g| g)
            .then(|| GatewayWorld::demo(&exchange, note_store_actor, &setup.authorizations, setup.gateway_variant));
        let mut backend_actors = Vec::new();
        for (index, backend) in gateway_world.iter().flat_map(|world| world.backends.iter()).enumerate() {
            backend_actors.push(roles.len());
            roles.push(Role::Backend(index));
            names.push(format!("{}{BACKEND_ACTOR_SUFFIX}", backend.id));
        }
        let clock = VirtualClock::new();
        let notes = Arc::new(MemoryNoteStore::clone(&setup.note_store));
        let replay = Arc::new(MemoryReplayStore::new(
            Arc::new(StoreClient::new(exchange.clone(), note_store_actor)),
            Arc::new(clock.with_offset(0)),
            setup.replay_limits,
        ));
        let network =
            Network::new(roles.len(), setup.latency_ms_min, setup.latency_ms_max, &mut random::stream(setup.seed, Stream::Latency));
        let transcript = Transcript {
            scenario: setup.scenario,
            seed: setup.seed,
            scheduler: scheduler.name().into(),
            actors: names.clone(),
            // Clients, then the admin, then the instances, then the backends and stores: requests flow left to right.
            diagram_order: (admin_actor + 1..admin_actor + 1 + setup.clients.len())
                .chain([admin_actor])
                .chain(0..instance_count)
                .chain(backend_actors.iter().copied())
                .chain([note_store_actor, replay_store_actor])
                .collect(),
            recording: setup.record_transcript,
            entries: Vec::new(),
            mutant: None,
            faults: None,
            summary: Vec::new(),
        };
        let instances = setup
            .instances
            .into_iter()
            .enumerate()
            .map(|(index, i)| Instance {
                name: i.name,
                index: index as u16,
                key_ring: i.key_ring,
                clock_offset_ms: i.clock_offset_ms,
                incarnation: 0,
                up: true,
                gateway: None,
                service: None,
                nonces: None,
            })
            .collect();
        let clients = setup.clients;
        let legacy_sessions = vec![None; clients.len()];
        let initial_pins = gateway_world
            .iter()
            .flat_map(|world| crate::servers::gateway::ports::PinSource::pins(world.pins.as_ref()).pins.clone())
            .map(|(name, pin)| (name, pin.descriptor))
            .collect();
        let history = History { initial_grants: setup.grants, initial_notes: setup.notes, initial_pins, ..History::default() };
        let mut cluster = Cluster {
            seed: setup.seed,
            roles,
            names,
            instances,
            clients,
            exchange,
            tasks: BTreeMap::new(),
            next_task: 1,
            network,
            scheduler,
            decisions: DecisionLog::default(),
            clock,
            notes,
            replay,
            flows: Arc::new(MemoryOutOfBandStore::default()),
            authorizations: setup.authorizations,
            state_ttl_ms: setup.state_ttl_ms,
            factory: setup.factory,
            triggers: Vec::new(),
            planned_faults: Vec::new(),
            slow_stores: Vec::new(),
            outages: Vec::new(),
            requests: BTreeMap::new(),
            history,
            transcript,
            deliveries: 0,
            note_store_actor,
            replay_store_actor,
            admin_actor,
            gateway_world,
            is_gateway,
            exports_seen: vec![0; backend_actors.len()],
            backend_actors,
            legacy: vec![None; eras_both.len()],
            era_variant: setup.era_variant,
            legacy_memory: vec![LegacyMemory::default(); eras_both.len()],
            eras_both,
            legacy_sessions,
        };
        for index in 0..instance_count {
            cluster.start_incarnation(index);
        }
        cluster
    }

    // ----- lookups -----

    pub fn actor(&self, name: &str) -> Option<ActorId> {
        self.names.iter().position(|n| n == name)
    }

    pub(crate) fn instance_actor(&self, index: usize) -> ActorId {
        index
    }

    pub fn instances(&self) -> &[Instance] {
        &self.instances
    }

    fn client_actor(&self, index: usize) -> ActorId {
        self.admin_actor + 1 + index
    }

    /// Whether client `index` is a 2025-11-25 client.
    pub(crate) fn is_legacy_client(&self, index: usize) -> bool {
        self.clients[index].legacy.is_some()
    }

    pub fn note_store(&self) -> &MemoryNoteStore {
        &self.notes
    }

    pub(crate) fn replay_store(&self) -> &MemoryReplayStore {
        &self.replay
    }

    /// The gateway backends and shared gateway stores, when the scenario declares a gateway.
    pub fn gateway_world(&self) -> Option<&GatewayWorld> {
        self.gateway_world.as_ref()
    }

    pub fn history(&self) -> &History {
        &self.history
    }

    /// Whether this execution records a transcript.
    pub(crate) fn recording(&self) -> bool {
        self.transcript.recording
    }

    pub(crate) fn transcript_mut(&mut self) -> &mut Transcript {
        &mut self.transcript
    }

    pub fn into_parts(self) -> (Transcript, History, DecisionLog) {
        (self.transcript, self.history, self.decisions)
    }

    pub fn deliveries(&self) -> usize {
        self.deliveries
    }

    // ----- instances: incarnations and configuration -----

    fn start_incarnation(&mut self, index: usize) {
        let instance = &mut self.instances[index];
        instance.nonces = Some(Arc::new(incarnation_nonces(self.seed, instance.index, instance.incarnation)));
        let (instance_index, incarnation, offset) = (instance.index, instance.incarnation, instance.clock_offset_ms);
        self.legacy[index] = self.eras_both[index].then(|| {
            // One adapter per incarnation: its sessions die with the process, as a real server's do.
            let current = CurrentService::default();
            let sessions = SeededNonces::from_rng(random::stream(self.seed, Stream::Sessions { instance: instance_index, incarnation }));
            let adapter = LegacyAdapter::new(
                Arc::new(current.clone()),
                SessionLimits::default(),
                Arc::new(self.clock.with_offset(offset)),
                Arc::new(sessions),
            );
            (Arc::new(adapter), current)
        });
        self.legacy_memory[index] = LegacyMemory::default();
        self.rebuild_service(index);
    }

    /// Builds the instance's service from its current configuration, keeping its nonce stream.
    fn rebuild_service(&mut self, index: usize) {
        let instance = &self.instances[index];
        let Some(nonces) = instance.nonces.clone() else { return };
        if let (true, Some(world)) = (self.is_gateway[index], &self.gateway_world) {
            let gateway = world.gateway(
                &instance.name,
                instance.key_ring.clone(),
                self.state_ttl_ms,
                &self.exchange,
                &self.backend_actors,
                Arc::new(StoreClient::new(self.exchange.clone(), self.replay_store_actor)),
                Arc::new(self.clock.with_offset(instance.clock_offset_ms)),
                nonces,
            );
            self.instances[index].service = Some(Arc::new(gateway.clone()));
            self.instances[index].gateway = Some(gateway);
            return;
        }
        let config = NotesConfig {
            server_info: server_info(),
            authorizations: self.authorizations.clone(),
            key_ring: instance.key_ring.clone(),
            state_ttl_ms: self.state_ttl_ms,
        };
        let config = Arc::new(config);
        let out_of_band = self.clients.iter().any(|client| client.browser).then(|| crate::servers::notes::OutOfBand {
            store: Arc::new(StoreClient::new(self.exchange.clone(), self.replay_store_actor)),
            page_base: SIM_PAGE_BASE.to_string(),
        });
        let notes = Arc::new(StoreClient::new(self.exchange.clone(), self.note_store_actor));
        let replay = Arc::new(StoreClient::new(self.exchange.clone(), self.replay_store_actor));
        let clock = Arc::new(self.clock.with_offset(instance.clock_offset_ms));
        let parts = InstanceParts {
            config: config.clone(),
            notes: notes.clone(),
            replay: replay.clone(),
            clock: clock.clone(),
            nonces: nonces.clone(),
            out_of_band: out_of_band.clone(),
        };
        let service: Arc<dyn Service> = (self.factory)(parts);
        let mut service = service;
        if let Some((_, current)) = &self.legacy[index] {
            let memory = &self.legacy_memory[index];
            let ports = NotesPorts { notes, replay, clock, nonces, out_of_band };
            let server = crate::assembly::notes_server(config, ports);
            current.set(legacy_mutants::adapter_service(self.era_variant, memory, service.clone(), server));
            service = legacy_mutants::modern_service(self.era_variant, memory, service);
        }
        self.instances[index].service = Some(service);
    }

    fn event(&mut self, actor: Option<ActorId>, text: String) {
        if self.transcript.recording {
            let time_ms = self.clock.elapsed_ms();
            self.transcript.push(Entry::Event { time_ms, actor, text });
        }
    }

    /// Stops an instance: its tasks are dropped, and every envelope to or from it is lost.
    pub fn crash(&mut self, index: usize) {
        self.crash_then(index, false)
    }

    fn crash_then(&mut self, index: usize, restart: bool) {
        let actor = self.instance_actor(index);
        if !self.instances[index].up {
            self.event(Some(actor), "crash: already down".into());
            return;
        }
        self.instances[index].up = false;
        self.instances[index].service = None;
        self.instances[index].gateway = None;
        self.instances[index].nonces = None;
        self.legacy[index] = None;
        let dropped: Vec<TaskId> = self.tasks.iter().filter(|(_, t)| t.actor == actor).map(|(id, _)| *id).collect();
        let mut lost = Vec::new();
        for task in &dropped {
            if let Some(Task { reply_to: ReplyTo::Client { operation, .. }, .. }) = self.tasks.remove(task).map(|task| *task) {
                lost.push(operation);
            }
        }
        self.exchange.forget(&dropped);
        let work = match dropped.len() {
            0 => "no work in progress".to_string(),
            1 => "1 request in progress lost".to_string(),
            n => format!("{n} requests in progress lost"),
        };
        self.event(Some(actor), format!("crash ({work})"));
        for envelope in self.network.remove_touching(actor) {
            let reason = format!("{} crashed", self.names[actor]);
            self.record_drop(&envelope, reason);
            lost.extend(client_operation(&envelope));
        }
        if restart {
            self.restart(index);
        }
        for operation in lost {
            self.lost(operation, "no answer (the instance crashed)");
        }
    }

    /// Starts a new incarnation from the same configuration (instances are stateless: nothing to recover).
    pub fn restart(&mut self, index: usize) {
        let actor = self.instance_actor(index);
        if self.instances[index].up {
            self.event(Some(actor), "restart: already up".into());
            return;
        }
        self.instances[index].up = true;
        self.instances[index].incarnation += 1;
        self.start_incarnation(index);
        let incarnation = self.instances[index].incarnation;
        self.event(Some(actor), format!("restart (incarnation {incarnation}, fresh nonce stream)"));
    }

    /// An outage: `store` refuses its next `calls` calls as unavailable (a scenario's `store … unavailable`).
    pub(crate) fn outage(&mut self, store: StoreName, calls: u32) {
        let actor = self.actor(if store == StoreName::Notes { NOTE_STORE } else { REPLAY_STORE });
        self.event(actor, format!("outage: refuses its next {calls} call(s) as unavailable"));
        self.outages.push((store, calls));
    }

    pub(crate) fn arm(&mut self, trigger: CrashTrigger) {
        let from = trigger.sender.map(|sender| format!(" from {}", self.names[sender])).unwrap_or_default();
        let text = format!(
            "armed: crash {} {} {} receives {}{from}",
            self.instances[trigger.instance].name,
            if trigger.moment == Moment::Before { "before" } else { "after" },
            self.names[trigger.receiver],
            trigger.label
        );
        self.event(None, text);
        self.triggers.push(trigger);
    }

    /// Makes `key_id` the signing key of these instances; their previous keys still verify.
    pub fn rotate(&mut self, indexes: &[usize], key_id: &str, key: Vec<u8>) -> Result<(), String> {
        for &index in indexes {
            self.instances[index].key_ring.rotate(key_id, key.clone()).map_err(|e| format!("{}: {e}", self.instances[index].name))?;
            self.rebuild_service(index);
            let ids: Vec<&str> = self.instances[index].key_ring.key_ids().collect();
            let text = format!("keys rotated: signs with {key_id}, verifies {}", ids.join(" "));
            self.event(Some(index), text);
        }
        Ok(())
    }

    /// Forgets `key_id` on these instances: states it signed fail closed there.
    pub fn retire(&mut self, indexes: &[usize], key_id: &str) -> Result<(), String> {
        for &index in indexes {
            self.instances[index].key_ring.retire(key_id).map_err(|e| format!("{}: {e}", self.instances[index].name))?;
            self.rebuild_service(index);
            let ids: Vec<&str> = self.instances[index].key_ring.key_ids().collect();
            let text = format!("key {key_id} retired: verifies {}", ids.join(" "));
            self.event(Some(index), text);
        }
        Ok(())
    }

    pub fn advance(&mut self, duration_ms: u64) {
        self.clock.advance_by(duration_ms);
        self.event(None, format!("clock advanced by {duration_ms}ms"));
    }

    // ----- clients and admin -----

    /// A client's request reaches the network, addressed to `instance` (where the scenario sent it, or where
    /// a rerouted run sends it instead). `outgoing.value` is what the bytes encode, when the client built them
    /// (it is parsed from the bytes otherwise). Returns the operation that tracks the answer.
    pub fn send(&mut self, outgoing: Outgoing, instance: usize) -> Result<OperationId, SimError> {
        let Outgoing { client, raw, value, notification, headers, headers_written, step, name, .. } = outgoing;
        let headers = Some(headers);
        let id = OperationId(self.history.operations.len());
        let principal = self.clients[client].principal.clone();
        // A client-built value is what the bytes encode; anything else is parsed, and kept verbatim if odd (the
        // instance then reads those bytes, as a server would; the value is the history's).
        let (body, request_value, request_exact) = match (raw, value) {
            (None, Some(value)) => {
                let value = Arc::new(value);
                (RequestBody::compact(value.clone()), Some(value), None)
            }
            (Some(bytes), Some(value)) => {
                let value = Arc::new(value);
                (RequestBody::exact(bytes, Some(value.clone())), Some(value), None)
            }
            (raw, None) => {
                let bytes = raw.unwrap_or_default();
                let parsed: Option<Value> = serde_json::from_slice(&bytes).ok();
                let canonical = parsed.as_ref().is_some_and(|v| serde_json::to_vec(v).is_ok_and(|c| c == bytes));
                match parsed.map(Arc::new) {
                    Some(value) if canonical => (RequestBody::compact(value.clone()), Some(value), None),
                    parsed => {
                        let exact = String::from_utf8_lossy(&bytes).into_owned();
                        (RequestBody::exact(bytes, None), parsed, Some(exact))
                    }
                }
            }
        };
        if self.history.clients_retry {
            let sent = SentRequest { client, body: body.clone(), headers: headers.clone() };
            self.requests.insert(id, sent);
        }
        let now_ms = self.clock.elapsed_ms();
        self.history.operations.push(Operation {
            id,
            client: self.clients[client].name.clone(),
            principal: principal.clone(),
            instance: self.instances[instance].name.clone(),
            step,
            name,
            request_exact,
            request_value,
            notification,
            sent_at_ms: now_ms,
            outcome: Outcome::Pending,
        });
        let from = self.client_actor(client);
        // Every request carries the routing headers an HTTP client sends; the ones a scenario wrote itself
        // (a header attack) are worth a line.
        if let (true, Some(headers)) = (headers_written, &headers) {
            let shown = |value: &Option<String>| value.as_deref().map_or("(absent)".to_string(), |v| format!("{v:?}"));
            let text = format!(
                "sends routing headers MCP-Protocol-Version: {}, Mcp-Method: {}, Mcp-Name: {}",
                shown(&headers.protocol_version),
                shown(&headers.method),
                shown(&headers.name)
            );
            self.event(Some(from), text);
        }
        let session = self.legacy_sessions[client].clone();
        let payload = Payload::Request { operation: id, principal, body, headers, session };
        self.network.send(from, self.instance_actor(instance), now_ms, None, None, payload)?;
        Ok(id)
    }

    /// An admin action: note changes are messages to the note store; a revocation applies at once.
    pub fn admin(&mut self, action: &AdminAction) -> Result<(), String> {
        if let AdminAction::Approve { tool } = action {
            let now_ms = crate::framework::ports::Clock::now_ms(&self.clock);
            let world = self.gateway_world.as_ref().ok_or("admin approve needs a gateway: declare `gateway NAME`")?;
            let (digest, descriptor) = world.approve(tool, now_ms)?;
            let at_ms = self.clock.elapsed_ms();
            let kind = EffectKind::Approved { tool: tool.clone(), descriptor };
            self.history.effects.push(Effect { at_ms, delivery: self.deliveries, operation: None, kind });
            let shown: String = digest.chars().take(crate::sim::engine::message::DIGEST_CHARS_SHOWN).collect();
            self.event(Some(self.admin_actor), format!("approved {tool}: pinned to its current descriptor {shown}"));
            return Ok(());
        }
        if let (AdminAction::Descriptor { backend, .. }, Some(call)) = (action, store_call(action)) {
            let index = self.gateway_world.as_ref().and_then(|w| w.backends.iter().position(|b| &b.id == backend));
            let index = index.ok_or_else(|| format!("no gateway backend {backend} (declare `gateway NAME` to have backends)"))?;
            let now_ms = self.clock.elapsed_ms();
            self.network
                .send(self.admin_actor, self.backend_actors[index], now_ms, None, None, Payload::Call(call))
                .map_err(|e| e.to_string())?;
            return Ok(());
        }
        if let Some(call) = store_call(action) {
            let now_ms = self.clock.elapsed_ms();
            self.network
                .send(self.admin_actor, self.note_store_actor, now_ms, None, None, Payload::Call(call))
                .map_err(|e| e.to_string())?;
            return Ok(());
        }
        if let AdminAction::Revoke { principal, workspace } = action {
            let root = FileUri::parse(workspace).map_err(|e| format!("cannot revoke {workspace:?}: {e}"))?;
            Arc::make_mut(&mut self.authorizations).revoke(principal, &root);
            if let Some(world) = self.gateway_world.as_mut() {
                world.reauthorize(&self.exchange, self.note_store_actor, &self.authorizations);
            }
            for index in 0..self.instances.len() {
                self.rebuild_service(index);
            }
            let at_ms = self.clock.elapsed_ms();
            self.history.effects.push(Effect {
                at_ms,
                delivery: self.deliveries,
                operation: None,
                kind: EffectKind::Revoked { principal: principal.clone(), workspace: workspace.clone() },
            });
            self.event(Some(self.admin_actor), format!("revoked {principal}'s workspace {root} on every instance"));
        }
        Ok(())
    }

    // ----- the delivery loop -----

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
        for index in 0..self.history.operations.len() {
            if self.history.operations[index].outcome != Outcome::Pending {
                continue;
            }
            let id = OperationId(index);
            let retried = self.history.attempts_of(self.history.first_attempt(id)).last() != Some(&id);
            let operation = &mut self.history.operations[index];
            let why = if operation.notification { NoResponse::Notification } else { NoResponse::Lost };
            operation.outcome = Outcome::NoResponse(why);
            if retried || self.history.is_duplicate(id) {
                // The client already said it retried; a copy's answer was never awaited.
                continue;
            }
            let client = self.actor(&self.history.operations[index].client);
            let text = match why {
                NoResponse::Notification => "no response: it was a notification".to_string(),
                NoResponse::Lost => {
                    let request = self.history.operations[index].request_value.as_ref().and_then(|v| v.get("id")).cloned();
                    format!("no response to request id {} (lost: the outcome is unknown to this client)", request.unwrap_or(Value::Null))
                }
            };
            self.event(client, text);
        }
        Ok(())
    }

    /// Turns faults on: clients retry what gets lost from now on, and `faults` fire at their delivery
    /// points (a clock skew at once). Faults naming an instance that does not exist are ignored.
    pub(crate) fn enable_faults(&mut self, faults: &[Fault]) {
        self.history.clients_retry = true;
        let count = self.instances.len();
        for fault in faults {
            match fault {
                Fault::Crash { instance, .. } | Fault::Duplicate { instance, .. } | Fault::ClockSkew { instance, .. }
                    if *instance >= count => {}
                Fault::ClockSkew { instance, offset_ms } => {
                    self.record_fault(fault, 0);
                    self.instances[*instance].clock_offset_ms += offset_ms;
                    self.rebuild_service(*instance);
                }
                _ => self.planned_faults.push(fault.clone()),
            }
        }
    }

    fn record_fault(&mut self, fault: &Fault, delivery: usize) {
        let fired = fault.fired_at(delivery);
        if self.transcript.recording {
            let text = format!("fault: {}", fired.describe(&|i| self.instances[i].name.clone()));
            let time_ms = self.clock.elapsed_ms();
            self.transcript.push(Entry::Fault { time_ms, fault: fired.clone(), text });
        }
        self.decisions.faults.push(fired);
    }

    /// Fires the faults due before delivery `next` that do not depend on which envelope is chosen.
    fn fire_point_faults(&mut self, next: usize) {
        let due = |f: &Fault| {
            matches!(f, Fault::Crash { .. } | Fault::RotateKey { .. } | Fault::SlowStore { .. } | Fault::StoreUnavailable { .. })
                && f.at() <= next
        };
        while let Some(position) = self.planned_faults.iter().position(due) {
            let fault = self.planned_faults.remove(position);
            self.record_fault(&fault, next);
            match fault {
                Fault::Crash { instance, .. } => {
                    if self.instances[instance].up {
                        self.crash_then(instance, true);
                    } else {
                        self.event(Some(instance), "crash: already down (stays down)".into());
                    }
                }
                Fault::RotateKey { key_id, .. } => {
                    let every: Vec<usize> = (0..self.instances.len()).collect();
                    if let Err(why) = self.rotate(&every, &key_id, derived_key_secret(&key_id)) {
                        self.event(None, format!("the rotation did not happen: {why}"));
                    }
                }
                Fault::SlowStore { store, delay_ms, .. } => self.slow_stores.push((store, delay_ms)),
                Fault::StoreUnavailable { store, calls, .. } => self.outages.push((store, calls)),
                _ => {}
            }
        }
    }

    /// Fires the first fault due at delivery `next` that applies to the chosen envelope. Returns true when
    /// the envelope is not delivered now (dropped, or held back).
    fn fire_envelope_fault(&mut self, next: usize, id: u64) -> Result<bool, SimError> {
        let Some(envelope) = self.network.get(id) else { return Ok(false) };
        let between_client_and_instance = matches!(envelope.payload, Payload::Request { .. } | Payload::Response { .. });
        let request = matches!(envelope.payload, Payload::Request { .. }) && matches!(self.roles[envelope.to], Role::Instance(_));
        let applies = |fault: &Fault| {
            fault.at() <= next
                && match fault {
                    Fault::Drop { .. } => between_client_and_instance,
                    Fault::Duplicate { .. } => request,
                    Fault::Delay { .. } => true,
                    _ => false,
                }
        };
        let Some(position) = self.planned_faults.iter().position(applies) else { return Ok(false) };
        let fault = self.planned_faults.remove(position);
        self.record_fault(&fault, next);
        match fault {
            Fault::Drop { .. } => {
                let envelope = self.network.take(id).expect("the chosen envelope is in flight");
                self.record_drop(&envelope, "fault: lost on the network".into());
                if let Some(operation) = client_operation(&envelope) {
                    self.lost(operation, "no answer (lost on the network)");
                }
                Ok(true)
            }
            Fault::Delay { delay_ms, overtaken_by, .. } => {
                self.network.hold(id, delay_ms, Hold::UntilDelivery(next + overtaken_by));
                Ok(true)
            }
            Fault::Duplicate { instance, .. } => {
                let Some(Envelope { payload: Payload::Request { operation, .. }, to, .. }) = self.network.get(id).cloned() else {
                    return Ok(false);
                };
                let Role::Instance(original) = self.roles[to] else { return Ok(false) };
                let target = if self.is_gateway[instance] == self.is_gateway[original] { instance } else { original };
                if let Some(sent) = self.sent_request(operation) {
                    self.send_attempt(sent, target, Attempt::Duplicate { of: self.history.first_attempt(operation) })?;
                }
                Ok(false)
            }
            _ => Ok(false),
        }
    }

    /// What the request of `operation` sent, from its first attempt.
    fn sent_request(&self, operation: OperationId) -> Option<SentRequest> {
        self.requests.get(&self.history.first_attempt(operation)).cloned()
    }

    /// Sends a request again: a client's retry or the network's copy. Returns the envelope's id.
    fn send_attempt(&mut self, sent: SentRequest, instance: usize, attempt: Attempt) -> Result<u64, SimError> {
        let first = match attempt {
            Attempt::Retry { of, .. } | Attempt::Duplicate { of } => of,
        };
        let id = OperationId(self.history.operations.len());
        let now_ms = self.clock.elapsed_ms();
        let original = &self.history.operations[first.0];
        let operation = Operation {
            id,
            instance: self.instances[instance].name.clone(),
            name: None,
            sent_at_ms: now_ms,
            outcome: Outcome::Pending,
            ..original.clone()
        };
        self.history.operations.push(operation);
        self.history.attempts.insert(id, attempt);
        let principal = self.clients[sent.client].principal.clone();
        let from = self.client_actor(sent.client);
        let session = self.legacy_sessions[sent.client].clone();
        let payload = Payload::Request { operation: id, principal, body: sent.body, headers: sent.headers, session };
        Ok(self.network.send(from, self.instance_actor(instance), now_ms, None, None, payload)?)
    }

    /// An attempt of a client request will never be answered. If clients retry, this is the latest
    /// attempt and the budget allows, the client sends the same request again to the next instance.
    fn lost(&mut self, operation: OperationId, why: &str) {
        if !self.history.clients_retry || self.history.is_duplicate(operation) || self.history.operations[operation.0].notification {
            return;
        }
        let first = self.history.first_attempt(operation);
        if self.history.attempts_of(first).last() != Some(&operation) {
            return;
        }
        self.retry(first, operation, why);
    }

    fn retry(&mut self, first: OperationId, failed: OperationId, why: &str) {
        let number = self.history.attempts_of(first).len() as u32;
        let client = self.actor(&self.history.operations[first.0].client);
        let request_id = self.history.operations[first.0].request_value.as_ref().and_then(|v| v.get("id")).cloned().unwrap_or(Value::Null);
        if number > RETRIES_MAX {
            self.event(client, format!("{why} for request id {request_id}: gives up after {RETRIES_MAX} retries"));
            return;
        }
        let Some(sent) = self.sent_request(first) else { return };
        let failed_instance = self.instances.iter().position(|i| i.name == self.history.operations[failed.0].instance).unwrap_or(0);
        let target = self.next_instance_like(failed_instance);
        if !self.instances[target].up {
            // Every instance of its kind is down for good (a scenario's crash without restart): not a fault
            // that stops, so there is nothing to wait for.
            self.event(client, format!("{why} for request id {request_id}: no live instance to retry on; gives up"));
            self.history.stranded.insert(first);
            return;
        }
        let text = format!(
            "{why} for request id {request_id}: retries it on {} after {RETRY_TIMEOUT_MS}ms (retry {number} of at most {RETRIES_MAX})",
            self.instances[target].name
        );
        self.event(client, text);
        match self.send_attempt(sent, target, Attempt::Retry { of: first, number }) {
            Ok(envelope) => self.network.hold(envelope, RETRY_TIMEOUT_MS, Hold::UntilQuiet),
            Err(error) => self.event(client, format!("the retry could not be sent: {error}")),
        }
    }

    /// Where a client fails over to: the live instance after `index` (cyclically) of the same deployment — the
    /// same kind and the same keys — as a load balancer in front of one deployment would pick; `index` itself
    /// when it is the only one. An instance deliberately given other keys is never a retry target; clocks
    /// may differ (skew is a fault of its own).
    fn next_instance_like(&self, index: usize) -> usize {
        let count = self.instances.len();
        let alike = |other: usize| {
            self.is_gateway[other] == self.is_gateway[index] && self.instances[other].key_ring == self.instances[index].key_ring
        };
        (1..=count).map(|step| (index + step) % count).find(|&other| self.instances[other].up && alike(other)).unwrap_or(index)
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

    fn fire_triggers(&mut self, moment: Moment, envelope: u64) {
        let Some(found) = self.network.get(envelope) else { return };
        let (receiver, sender, label) = (found.to, found.from, envelope_label(found));
        self.fire_matching(moment, receiver, sender, &label);
    }

    fn fire_matching(&mut self, moment: Moment, receiver: ActorId, sender: ActorId, label: &str) {
        let position = self
            .triggers
            .iter()
            .position(|t| t.moment == moment && t.receiver == receiver && t.label == label && t.sender.is_none_or(|s| s == sender));
        if let Some(position) = position {
            let trigger = self.triggers.remove(position);
            let when = if moment == Moment::Before { "before" } else { "after" };
            self.event(
                None,
                format!("trigger: {} {label} reaches {}: crash {}", when, self.names[receiver], self.instances[trigger.instance].name),
            );
            self.crash(trigger.instance);
        }
    }

    /// The envelope as the transcript shows it. A request is shown from the history, which already holds
    /// what its bytes encode (parsing them again would only cost time).
    fn message_of(&self, envelope: &Envelope) -> Message {
        if let Payload::Request { operation, .. } = &envelope.payload {
            let operation = &self.history.operations[operation.0];
            if let Some(value) = &operation.request_value {
                let kind = if value.is_object() && value.get("id").is_none() && value.get("page").is_none() {
                    Kind::Notify
                } else {
                    Kind::Request
                };
                return Message { kind, body: Body::Json(value.clone()), exact: operation.request_exact.clone() };
            }
        }
        Message::from_payload(&envelope.payload)
    }

    /// The client operation an envelope belongs to: its own request or response, or the request whose handling
    /// made the store or backend call (or awaits the return). Only transcripts need it (the HTML report groups
    /// each confirmation's messages by it); the history attributes effects the same way.
    fn cause_of(&self, envelope: &Envelope) -> Option<OperationId> {
        match &envelope.payload {
            Payload::Request { operation, .. } | Payload::Response { operation, .. } => Some(*operation),
            Payload::Call(_) => envelope.from_task.and_then(|task| self.tasks.get(&task)).and_then(|t| t.cause.operation),
            Payload::Return { .. } => envelope.to_task.and_then(|task| self.tasks.get(&task)).and_then(|t| t.cause.operation),
        }
    }

    fn record_drop(&mut self, envelope: &Envelope, reason: String) {
        if self.transcript.recording {
            let entry = Entry::Dropped {
                time_ms: self.clock.elapsed_ms(),
                from: envelope.from,
                to: envelope.to,
                message: self.message_of(envelope),
                reason,
                cause: self.cause_of(envelope),
            };
            self.transcript.push(entry);
        }
    }

    fn dispatch(&mut self, envelope: Envelope) -> Result<(), SimError> {
        let Envelope { from, to, from_task, to_task, payload, .. } = envelope;
        match (self.roles[to], payload) {
            (Role::Instance(index), Payload::Request { operation, principal, body, headers, session }) => {
                let Some(service) = self.instances[index].service.clone() else { return Ok(()) };
                let cause = Cause { operation: Some(operation), nonce: None };
                let reply_to = ReplyTo::Client { actor: from, operation };
                let browser = matches!(self.roles[from], Role::Client(client) if self.clients[client].browser);
                let protocol_version = headers.as_ref().and_then(|h| h.protocol_version.as_deref());
                if let Some((adapter, _)) = &self.legacy[index] {
                    let bytes = body.bytes();
                    if is_legacy_http(protocol_version, session.as_deref(), &bytes) {
                        // A dual-era instance sends a legacy request to its adapter, as `serve --eras both` does.
                        let memory = (self.era_variant != EraVariant::Real).then(|| self.legacy_memory[index].clone());
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
                    let at_ms = self.clock.elapsed_ms();
                    self.history.effects.push(Effect { at_ms, delivery: self.deliveries, operation: cause.operation, kind });
                }
                self.spawn(to, cause, ReplyTo::Caller { actor: from, task: from_task }, Some(call.clone()), backend::serve(actor, call))
            }
            (Role::Client(client), Payload::Call(StoreCall::AskClient { request })) => {
                let cause = from_task.and_then(|task| self.tasks.get(&task)).map(|t| t.cause.clone()).unwrap_or_default();
                let answer = match &self.clients[client].legacy {
                    Some(spec) => legacy::answer(spec, &request),
                    None => {
                        json!({ "jsonrpc": "2.0", "id": request.get("id"), "error": { "code": -32601, "message": "not a legacy client" } })
                    }
                };
                let at_ms = self.clock.elapsed_ms();
                let kind = EffectKind::ClientAsked { request: request.clone(), answer: answer.clone() };
                self.history.effects.push(Effect { at_ms, delivery: self.deliveries, operation: cause.operation, kind });
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
                let transient = if self.history.clients_retry { transient(&value) } else { None };
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
                        Box::pin(
                            async move { TaskOutput::Return(StoreReturn::Failed(crate::framework::ports::StoreError::Unavailable(why))) },
                        );
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

    /// Exports a backend made while one of its tasks ran: effects of the request that task serves.
    fn record_exports(&mut self, backend: usize, operation: Option<OperationId>) {
        let Some(ledger) = self.gateway_world.as_ref().and_then(|world| world.backends[backend].ledger.clone()) else { return };
        let exports = ledger.exports();
        let at_ms = self.clock.elapsed_ms();
        for record in exports.iter().skip(self.exports_seen[backend]) {
            let export = Export {
                export_id: record.export_id.clone(),
                key: record.key.clone(),
                principal: record.principal.clone(),
                destination: record.destination.clone(),
                note_ids: record.note_ids.clone(),
            };
            self.history.effects.push(Effect { at_ms, delivery: self.deliveries, operation, kind: EffectKind::Exported(export) });
        }
        self.exports_seen[backend] = exports.len();
    }

    fn record_effects(&mut self, task: &Task, value: &StoreReturn) {
        let at_ms = self.clock.elapsed_ms();
        let operation = task.cause.operation;
        let kind = match (&task.call, value) {
            (Some(StoreCall::ListNotes), StoreReturn::Notes(notes)) => Some(EffectKind::NotesListed { notes: notes.clone() }),
            (Some(StoreCall::DeleteIfInside { .. }), StoreReturn::Guarded(GuardedDelete::Deleted(note))) => {
                Some(EffectKind::NoteDeleted { note: note.clone(), nonce: task.cause.nonce.clone() })
            }
            (Some(StoreCall::Claim { claim }), StoreReturn::Claimed(ClaimOutcome::Claimed))
            | (Some(StoreCall::ClaimAndDelete { claim, .. }), StoreReturn::ClaimedAndDeleted(ClaimAndDelete::Deleted(_))) => {
                Some(EffectKind::NonceConsumed { nonce: claim.nonce.clone(), record: claim.record.to_json() })
            }
            (
                Some(
                    call @ (StoreCall::AdminDelete { .. }
                    | StoreCall::AdminMove { .. }
                    | StoreCall::AdminRename { .. }
                    | StoreCall::AdminSwap { .. }),
                ),
                StoreReturn::AdminDone { existed },
            ) => Some(EffectKind::AdminChanged { description: format!("{} {}", call.label(), call.to_json()), existed: *existed }),
            _ => None,
        };
        if let Some(kind) = kind {
            self.history.effects.push(Effect { at_ms, delivery: self.deliveries, operation, kind });
        }
    }
}

/// The client operation a request or response envelope belongs to.
fn client_operation(envelope: &Envelope) -> Option<OperationId> {
    match &envelope.payload {
        Payload::Request { operation, .. } | Payload::Response { operation, .. } => Some(*operation),
        _ => None,
    }
}

/// Whether an answer says the confirmation's claim is still pending (a retry will learn how it ended).
/// An answer a retrying client asks again after: the claim is still pending, or a store was unavailable
/// (nothing was changed; the same request may succeed once it is back).
fn transient(response: &Value) -> Option<&'static str> {
    match at(response, &["error", "data", "reason"]).and_then(Value::as_str) {
        Some(reason) if reason == Reason::ClaimInProgress.as_str() => Some("answered \"in progress\""),
        Some(reason) if reason == Reason::StoreUnavailable.as_str() => Some("answered \"store unavailable\""),
        _ => None,
    }
}

/// The name a crash trigger matches: the store operation, or the JSON-RPC method of a request.
fn envelope_label(envelope: &Envelope) -> String {
    match &envelope.payload {
        Payload::Call(call) => call.label().to_string(),
        Payload::Return { call, .. } => format!("return of {call}"),
        Payload::Request { body, .. } => body.method().unwrap_or_default(),
        Payload::Response { .. } => "response".to_string(),
    }
}
