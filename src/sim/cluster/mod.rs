//! The cluster: the actors, the network, the scheduler, the running tasks, and the loop that delivers one
//! envelope at a time. It stands on the engine's ground floor (`sim::engine`: clock, randomness, messages,
//! network, scheduler, fault plans) and on the actors (`sim::actors`), and imports nothing from the
//! interpreter (`play`) or the scenario parser.
//!
//! One job per file: `delivery` the loop (one envelope, one task polled) and the dispatch to the receiving
//! actor; `incarnation` instances started, crashed, restarted and reconfigured, every server built through
//! `assembly`; `client` what a client sends, and its retries and failover; `faults` planned faults and
//! crash triggers applied; `recording` the history and the transcript written. This file builds the world
//! and answers lookups.
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

use crate::framework::ports::Note;
use crate::oracle::grants::Grants;
use crate::oracle::history::{Attempt, History, OperationId};
use crate::policy::authorization::Authorizations;
use crate::policy::state::KeyRing;
use crate::scenario::model::{Moment, BACKEND_ACTOR_SUFFIX};
use crate::sim::actors::gateway::GatewayWorld;
use crate::sim::actors::gateway_mutants::GatewayVariant;
use crate::sim::actors::instance::{Instance, ServiceFactory};
use crate::sim::actors::legacy_mutants::{EraVariant, LegacyMemory};
use crate::sim::actors::{ExchangeHandle, StoreClient, TaskFuture};
use crate::sim::engine::clock::VirtualClock;
use crate::sim::engine::faults::{Fault, StoreName};
use crate::sim::engine::message::{ActorId, StoreCall, TaskId};
use crate::sim::engine::network::{Network, NetworkFull, Ready};
use crate::sim::engine::random::{self, Stream};
use crate::sim::engine::scheduler::{DecisionLog, Divergence, Scheduler};
use crate::sim::engine::sorted::SortedMap;
use crate::sim::render::transcript::Transcript;
use crate::stores::memory::{MemoryNoteStore, MemoryReplayStore, ReplayLimits};
use crate::stores::out_of_band::MemoryOutOfBandStore;
use client::{Client, SentRequest};
use std::collections::BTreeMap;
use std::sync::Arc;

mod admin;
mod client;
mod delivery;
mod faults;
mod incarnation;
mod recording;

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
    /// page ([`crate::framework::Service::page`]), not its MCP pipeline.
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

/// A gateway backend as an actor of the cluster.
struct BackendActor {
    actor: ActorId,
    /// Exports its ledger held when the history last looked (new ones become effects).
    exports_seen: usize,
}

pub struct Cluster {
    seed: u64,
    roles: Vec<Role>,
    names: Vec<String>,
    /// Each instance's configuration and current incarnation (every per-instance fact, in one struct).
    instances: Vec<Instance>,
    /// Each client actor (by client index), with what it keeps between requests.
    clients: Vec<Client>,
    exchange: ExchangeHandle,
    /// By id (a new task's is the largest). Boxed: a task is a few hundred bytes, taken out and put back on
    /// every poll, and a removal shifts the entries after it.
    tasks: SortedMap<TaskId, Box<Task>>,
    /// The envelopes the scheduler may pick, worked out before each delivery into this one buffer.
    ready: Vec<Ready>,
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
    /// The backends of the gateway world as actors, in its order.
    backends: Vec<BackendActor>,
    era_variant: EraVariant,
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
        // Backend actors exist only when a gateway does, so notes-only transcripts are unchanged.
        let gateway_world = setup
            .instances
            .iter()
            .any(|i| i.gateway)
            .then(|| GatewayWorld::demo(&exchange, note_store_actor, &setup.authorizations, setup.gateway_variant));
        let mut backends = Vec::new();
        for (index, backend) in gateway_world.iter().flat_map(|world| world.backends.iter()).enumerate() {
            backends.push(BackendActor { actor: roles.len(), exports_seen: 0 });
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
                .chain(backends.iter().map(|backend| backend.actor))
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
                is_gateway: i.gateway,
                eras_both: i.eras_both && !i.gateway,
                gateway: None,
                service: None,
                nonces: None,
                legacy: None,
                legacy_memory: LegacyMemory::default(),
            })
            .collect();
        let clients = setup.clients.into_iter().map(|setup| Client { setup, session: None }).collect();
        let initial_pins = gateway_world
            .iter()
            .flat_map(|world| crate::servers::gateway::ports::PinSource::pins(world.pins.as_ref()).pins.clone())
            .map(|(name, pin)| (name, pin.descriptor))
            .collect();
        let history = History::starting_with(setup.grants, setup.notes, initial_pins);
        let mut cluster = Cluster {
            seed: setup.seed,
            roles,
            names,
            instances,
            clients,
            exchange,
            tasks: SortedMap::new(),
            ready: Vec::new(),
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
            backends,
            era_variant: setup.era_variant,
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

    pub(super) fn client_actor(&self, index: usize) -> ActorId {
        self.admin_actor + 1 + index
    }

    /// Whether client `index` is a 2025-11-25 client.
    pub(crate) fn is_legacy_client(&self, index: usize) -> bool {
        self.clients[index].setup.legacy.is_some()
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

    /// The operation `id` repeats another (a scenario's `retry NAME -> I`).
    pub(crate) fn mark_attempt(&mut self, id: OperationId, attempt: Attempt) {
        self.history.mark_attempt(id, attempt);
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

    pub fn advance(&mut self, duration_ms: u64) {
        self.clock.advance_by(duration_ms);
        self.event(None, format!("clock advanced by {duration_ms}ms"));
    }
}
