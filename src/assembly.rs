//! The one place a server is put together: each server of ours, from its configuration, over the ports it is
//! given.
//!
//! Real processes hand it real stores (memory, SQLite, PostgreSQL), the wall clock and OS nonces; the
//! simulator hands it message-passing store clients, a virtual clock and seeded nonces. What comes out is the
//! same server either way, which is why a simulated instance answers as a real one does.

use crate::config::gateway::{gateway_server_info, in_process_endpoint, BackendConfig, BackendKind, GatewayFile};
use crate::config::{ConfigError, Deployment};
use crate::framework::ports::{ChangeFeed, Clock, NonceSource, NoteStore, ReplayStore};
use crate::framework::Service;
use crate::policy::authorization::Authorizations;
use crate::policy::pinning::PinFile;
use crate::policy::state::KeyRing;
use crate::servers::fixture::{ConformanceFixture, FixtureConfig};
use crate::servers::gateway::backends::{ExportLedger, IssuesBackend, LiveDescriptors, NotesBackend, NotesBackendConfig};
use crate::servers::gateway::ports::RateLimiter;
use crate::servers::gateway::ports::{AuditSink, LiveListing, LocalBackend};
use crate::servers::gateway::{BackendHandle, Gateway, GatewayConfig, GatewayPorts};
use crate::servers::notes::{NotesConfig, NotesPorts, NotesServer};
use crate::stores::feed::MemoryChangeFeed;
use crate::stores::gateway::{GatewayStores, MemoryExportLedger, MemoryRateLimiter, SharedPins};
use crate::stores::memory::{MemoryNoteStore, MemoryReplayStore, ReplayLimits};
use crate::stores::system::{random_key, OsNonces, SystemClock};
use crate::stores::Stores;
use std::collections::BTreeMap;
use std::sync::Arc;

// ----- the notes server -----

/// A notes server of `config` over `ports`.
pub fn notes_server(config: Arc<NotesConfig>, ports: NotesPorts) -> NotesServer {
    NotesServer { config, ports }
}

/// The notes server a real process runs, over opened `stores` (in memory, or shared with other processes
/// through SQLite or PostgreSQL), signing with `key_ring`, with the wall clock and OS nonces. Every instance of
/// a fleet is one of these; instances that share `stores` and `key_ring` finish each other's confirmations.
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub fn real_notes_server(
    deployment: &Deployment,
    key_ring: KeyRing,
    stores: &Stores,
    state_ttl_secs: Option<u64>,
) -> Result<NotesServer, ConfigError> {
    let config = deployment.notes_config(key_ring, state_ttl_secs)?;
    let ports = NotesPorts {
        notes: stores.notes.clone(),
        replay: stores.replay.clone(),
        clock: Arc::new(SystemClock),
        nonces: Arc::new(OsNonces),
        out_of_band: None,
    };
    Ok(notes_server(Arc::new(config), ports))
}

/// One notes server per nonce source, all over the same in-memory note store and replay store, the same key
/// ring and clock: the instances of a fleet, as the simulator and `serve --instances` build them, sharing
/// only the stores (`demo` shows round 1 on one and round 2 on another). Returns the note store too, so the
/// caller can inspect the notes.
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub fn in_memory_notes_fleet(
    deployment: &Deployment,
    key_ring: KeyRing,
    state_ttl_secs: Option<u64>,
    clock: Arc<dyn Clock>,
    nonces: Vec<Arc<dyn NonceSource>>,
) -> Result<(Vec<NotesServer>, Arc<MemoryNoteStore>), ConfigError> {
    let notes = Arc::new(MemoryNoteStore::new(deployment.notes()));
    let replay: Arc<MemoryReplayStore> = Arc::new(MemoryReplayStore::new(notes.clone(), clock.clone(), ReplayLimits::default()));
    let config = Arc::new(deployment.notes_config(key_ring, state_ttl_secs)?);
    let servers = nonces
        .into_iter()
        .map(|nonces| {
            let ports = NotesPorts { notes: notes.clone(), replay: replay.clone(), clock: clock.clone(), nonces, out_of_band: None };
            notes_server(config.clone(), ports)
        })
        .collect();
    Ok((servers, notes))
}

/// The embedded demo over fresh in-memory stores with a random key, for tests of the transports.
#[cfg(test)]
pub fn demo_notes_server() -> NotesServer {
    let demo = Deployment::demo();
    let stores = Stores::in_memory(demo.notes(), Arc::new(SystemClock), ReplayLimits::default());
    real_notes_server(&demo, demo.key_ring_or_random().expect("the demo is valid"), &stores, None).expect("the demo is valid")
}

// ----- the conformance fixture -----

/// The conformance fixture over the given key ring, clock, nonces and change feed.
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub fn conformance_fixture(
    key_ring: KeyRing,
    state_ttl_secs: Option<u64>,
    clock: Arc<dyn Clock>,
    nonces: Arc<dyn NonceSource>,
    changes: Arc<dyn ChangeFeed>,
) -> ConformanceFixture {
    let mut config = FixtureConfig::new(key_ring);
    if let Some(secs) = state_ttl_secs {
        config.state_ttl_ms = secs.saturating_mul(1000);
    }
    ConformanceFixture { config: Arc::new(config), clock, nonces, changes }
}

/// The conformance fixture a real process runs: a random key of this process, the wall clock, OS nonces and
/// an in-process change feed (list-changed announcements reach this process's subscribers only).
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub fn real_conformance_fixture(state_ttl_secs: Option<u64>) -> ConformanceFixture {
    let key_ring = KeyRing::new("local", random_key()).expect("a random 32-byte key is valid");
    conformance_fixture(key_ring, state_ttl_secs, Arc::new(SystemClock), Arc::new(OsNonces), Arc::new(MemoryChangeFeed::new()))
}

// ----- the gateway and its backends -----

/// A backend server as built: the notes backend (with its export ledger) or the issues backend.
pub enum BuiltBackend {
    Notes(Arc<NotesBackend>),
    Issues(Arc<IssuesBackend>),
}

impl BuiltBackend {
    /// As a service, to call in process or to run as an actor.
    pub fn service(&self) -> Arc<dyn Service> {
        match self {
            BuiltBackend::Notes(server) => server.clone(),
            BuiltBackend::Issues(server) => server.clone(),
        }
    }

    /// The descriptors it publishes right now (what a rug pull changes).
    pub fn descriptors(&self) -> Arc<LiveDescriptors> {
        match self {
            BuiltBackend::Notes(server) => server.descriptors.clone(),
            BuiltBackend::Issues(server) => server.descriptors.clone(),
        }
    }

    /// The gateway's in-process port to it.
    pub(crate) fn local_port(&self) -> LocalBackend {
        let live: Arc<dyn LiveListing> = match self {
            BuiltBackend::Notes(server) => server.clone(),
            BuiltBackend::Issues(server) => server.clone(),
        };
        LocalBackend::with_live_listing(self.service(), live)
    }
}

/// The backend `config` of `file` describes, publishing its configured descriptors. A notes backend reads
/// `notes` for the principals' `authorizations` and records exports in `ledger`; an issues backend serves the
/// file's issues.
pub fn backend(
    file: &GatewayFile,
    config: &BackendConfig,
    authorizations: &Authorizations,
    notes: Arc<dyn NoteStore>,
    ledger: Arc<dyn ExportLedger>,
) -> BuiltBackend {
    let built = match config.kind {
        BackendKind::Notes => {
            let backend_config = NotesBackendConfig {
                server_info: config.server_info(),
                authorizations: authorizations.clone(),
                destinations: config.destinations.clone(),
            };
            BuiltBackend::Notes(Arc::new(NotesBackend::new(backend_config, notes, ledger)))
        }
        BackendKind::Issues => BuiltBackend::Issues(Arc::new(IssuesBackend::new(config.server_info(), file.issues.clone()))),
    };
    built.descriptors().replace_all(config.descriptors());
    built
}

/// One gateway instance of `file` in front of `backends`, over `ports`.
pub fn gateway(
    file: &GatewayFile,
    instance: &str,
    key_ring: KeyRing,
    state_ttl_ms: u64,
    audit_key: Vec<u8>,
    backends: Vec<BackendHandle>,
    ports: GatewayPorts,
) -> Result<Gateway, ConfigError> {
    let config = GatewayConfig {
        server_info: gateway_server_info(),
        instance: instance.to_string(),
        policy: file.policy.clone(),
        key_ring,
        state_ttl_ms,
        audit_key,
    };
    Gateway::new(config, backends, ports).map_err(|error| ConfigError::Invalid(error.to_string()))
}

/// What an in-process gateway world needs from its surroundings.
pub struct WorldOptions {
    pub instance: String,
    pub clock: Arc<dyn Clock>,
    pub nonces: Arc<dyn NonceSource>,
    pub key_ring: KeyRing,
    pub audit_key: Vec<u8>,
    pub audit: Arc<dyn AuditSink>,
    pub pins: PinFile,
    /// Bounds of the in-memory replay store (a shared store was opened with its own).
    pub replay_limits: ReplayLimits,
}

/// A running gateway over in-memory stores, with handles on everything a test, an operator or an adversary
/// may want to reach behind the gateway's back.
pub struct GatewayWorld {
    pub gateway: Gateway,
    pub notes: Arc<MemoryNoteStore>,
    pub replay: Arc<MemoryReplayStore>,
    pub rate_limiter: Arc<MemoryRateLimiter>,
    pub pins: Arc<SharedPins>,
    /// Notes backends by id, each with its own export ledger (its archive).
    pub notes_backends: BTreeMap<String, (Arc<NotesBackend>, Arc<MemoryExportLedger>)>,
    pub issues_backends: BTreeMap<String, Arc<IssuesBackend>>,
}

/// Wires `file`'s backends, in-memory stores seeded from `deployment`, and one gateway instance.
pub fn gateway_world(file: &GatewayFile, deployment: &Deployment, options: WorldOptions) -> Result<GatewayWorld, ConfigError> {
    let notes = Arc::new(MemoryNoteStore::new(deployment.notes()));
    let replay = Arc::new(MemoryReplayStore::new(notes.clone(), options.clock.clone(), options.replay_limits));
    let rate_limiter = Arc::new(MemoryRateLimiter::default());
    let pins = Arc::new(SharedPins::new(options.pins.clone()));
    let mut ledgers = BTreeMap::new();
    let mut ledger = |id: &str| -> Arc<dyn ExportLedger> {
        let ledger = Arc::new(MemoryExportLedger::default());
        ledgers.insert(id.to_string(), ledger.clone());
        ledger
    };
    let stores =
        (notes.clone() as Arc<dyn NoteStore>, replay.clone() as Arc<dyn ReplayStore>, rate_limiter.clone() as Arc<dyn RateLimiter>);
    let (gateway, built) = gateway_over(file, deployment, options, pins.clone(), stores, &mut ledger, Vec::new())?;
    let mut notes_backends = BTreeMap::new();
    let mut issues_backends = BTreeMap::new();
    for (id, backend) in built {
        match backend {
            BuiltBackend::Notes(server) => {
                let ledger = ledgers.remove(&id).expect("every notes backend was given a ledger");
                notes_backends.insert(id, (server, ledger));
            }
            BuiltBackend::Issues(server) => {
                issues_backends.insert(id, server);
            }
        }
    }
    Ok(GatewayWorld { gateway, notes, replay, rate_limiter, pins, notes_backends, issues_backends })
}

/// One gateway instance of `file` and its backends over `stores` (notes, replay ledger, rate counters),
/// each notes backend recording its exports in the ledger `ledger` gives for its id.
fn gateway_over(
    file: &GatewayFile,
    deployment: &Deployment,
    options: WorldOptions,
    pins: Arc<SharedPins>,
    stores: (Arc<dyn NoteStore>, Arc<dyn ReplayStore>, Arc<dyn RateLimiter>),
    ledger: &mut dyn FnMut(&str) -> Arc<dyn ExportLedger>,
    remote: Vec<BackendHandle>,
) -> Result<(Gateway, Vec<(String, BuiltBackend)>), ConfigError> {
    let authorizations = deployment.authorizations()?;
    let (notes, replay, rate_limiter) = stores;
    let mut handles = Vec::new();
    let mut built = Vec::new();
    for (id, config) in &file.backends {
        let backend = backend(file, config, &authorizations, notes.clone(), ledger(id));
        handles.push(BackendHandle { id: id.clone(), endpoint: in_process_endpoint(id), port: Arc::new(backend.local_port()) });
        built.push((id.clone(), backend));
    }
    handles.extend(remote);
    let ports = GatewayPorts { pins, replay, rate_limiter, audit: options.audit, clock: options.clock, nonces: options.nonces };
    let state_ttl_ms = file.state_ttl_secs.saturating_mul(1000);
    let gateway = gateway(file, &options.instance, options.key_ring, state_ttl_ms, options.audit_key, handles, ports)?;
    Ok((gateway, built))
}

/// The gateway a real process runs: the deployment's notes and principals, this gateway file's backends and
/// policy, the wall clock, OS nonces, the deployment's keys (or a random key of this process), a random audit
/// key, and the given pins (shared, so an operator's reload replaces them) and audit sink. `state_ttl_secs`
/// overrides the file's `state_ttl_secs`. `remote`
/// holds the ports of the file's `[remote.ID]` backends (the caller reaches them: this layer knows no socket).
///
/// With `shared` (a SQLite or PostgreSQL store), the notes, the replay ledger, the rate counters and the export
/// ledgers are the database's, shared with every other gateway process pointed at it; without, they are this
/// process's own, in memory.
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
#[allow(clippy::too_many_arguments)] // Each is one of the process's own settings or ports.
pub fn real_gateway(
    file: &GatewayFile,
    deployment: &Deployment,
    pins: Arc<SharedPins>,
    audit: Arc<dyn AuditSink>,
    state_ttl_secs: Option<u64>,
    replay_limits: ReplayLimits,
    shared: Option<&GatewayStores>,
    remote: Vec<BackendHandle>,
) -> Result<Gateway, ConfigError> {
    let mut file = file.clone();
    if let Some(secs) = state_ttl_secs {
        file.state_ttl_secs = secs;
    }
    let options = WorldOptions {
        instance: "gateway".into(),
        clock: Arc::new(SystemClock),
        nonces: Arc::new(OsNonces),
        key_ring: deployment.key_ring_or_random()?,
        audit_key: random_key(),
        audit,
        pins: crate::servers::gateway::ports::PinSource::pins(pins.as_ref()).as_ref().clone(),
        replay_limits,
    };
    match shared {
        None => {
            let notes: Arc<dyn NoteStore> = Arc::new(MemoryNoteStore::new(deployment.notes()));
            let replay = Arc::new(MemoryReplayStore::new(notes.clone(), options.clock.clone(), options.replay_limits));
            let ports = (notes, replay as Arc<dyn ReplayStore>, Arc::new(MemoryRateLimiter::default()) as Arc<dyn RateLimiter>);
            let mut ledger = |_: &str| Arc::new(MemoryExportLedger::default()) as Arc<dyn ExportLedger>;
            gateway_over(&file, deployment, options, pins, ports, &mut ledger, remote).map(|(gateway, _)| gateway)
        }
        Some(stores) => {
            let ports = (stores.notes.clone(), stores.replay.clone(), stores.rate_limiter.clone());
            let mut ledger = |id: &str| (stores.ledger)(id);
            gateway_over(&file, deployment, options, pins, ports, &mut ledger, remote).map(|(gateway, _)| gateway)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn built_servers_use_the_stores_they_are_given() {
        let server = demo_notes_server();
        assert_eq!(server.ports.notes.list_notes().await.unwrap().len(), 7);
        let (fleet, notes) = in_memory_notes_fleet(
            &Deployment::demo(),
            KeyRing::new("k", random_key()).unwrap(),
            None,
            Arc::new(SystemClock),
            vec![Arc::new(OsNonces), Arc::new(OsNonces)],
        )
        .unwrap();
        assert_eq!(notes.snapshot().len(), 7);
        assert_eq!(fleet.len(), 2);
        // One store behind both instances: what one deletes, the other no longer finds.
        let note = notes.snapshot().into_iter().find(|note| note.id == "note-7").unwrap();
        let everywhere = crate::policy::containment::FileUri::parse("file:///").unwrap();
        notes.delete_if_inside(&note.id, &note.revision, &everywhere).await.unwrap();
        assert_eq!(fleet[1].ports.notes.list_notes().await.unwrap().len(), 6);
    }
}
