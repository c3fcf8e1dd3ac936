//! Gateway instances: the unchanged security gateway (`handlers::gateway`) as instances of the cluster.
//!
//! A gateway instance is an instance like the notes ones (its own key ring, clock offset and nonce stream;
//! stateless, so a crash loses only work in progress) whose service is a [`Gateway`] called through
//! [`Gateway::handle`], exactly as the HTTP transport calls it, routing headers included. Its ports:
//!
//! * backends: a [`BackendClient`] per backend actor (every listing and forwarded call is a message);
//! * replay store: the **same replay-store actor** the notes instances use (a `StoreClient`), so every gateway
//!   instance shares one nonce ledger and two gateways racing one confirmation meet there;
//! * pins, rate-limit counters and the audit log: one in-memory instance of each (`stores::gateway`) shared
//!   by every gateway instance; audit records become transcript events as they are appended.
//!
//! The deployment is the embedded demo gateway (`src/config/gateway_demo.toml`: backends `issues`, `notes`,
//! `notes_mirror`; its policy) with the embedded pins (`notes.*` and `issues.search` reviewed, the mirror not).

use super::backend::{BackendActor, BackendClient};
use super::gateway_mutants::{self, DescriptionOnlyPins, GatewayVariant};
use super::{ExchangeHandle, StoreClient, TaskFuture, TaskOutput};
use crate::assembly::{self, BuiltBackend};
use crate::config::gateway::{default_pins, in_process_endpoint, GatewayFile};
use crate::framework::ports::{Clock, NonceSource, NoteStore, ReplayStore};
use crate::policy::authorization::Authorizations;
use crate::policy::pinning::{qualify, Approval, PublisherEvidence};
use crate::policy::state::KeyRing;
use crate::servers::gateway::backends::NotesBackend;
use crate::servers::gateway::ports::{Backend, LocalBackend};
use crate::servers::gateway::{BackendHandle, Gateway, GatewayPorts};
use crate::sim::engine::message::ActorId;
use crate::stores::gateway::{MemoryAuditSink, MemoryExportLedger, MemoryRateLimiter, SharedPins};
use crate::wire::headers::RoutingHeaders;
use serde_json::{json, Value};
use std::sync::Arc;

/// The audit key of simulated gateways: fixed, so audit digests are the same in every run.
const SIM_AUDIT_KEY: &[u8; 32] = b"mcpsim-simulated-gateway-audit!!";
/// Who approves descriptors in a simulation (`admin approve`).
pub(crate) const SIM_APPROVER: &str = "admin (simulated operator)";

/// Everything the gateway instances of one cluster share.
pub struct GatewayWorld {
    pub file: GatewayFile,
    /// Backend actors, in backend-id order.
    pub backends: Vec<Arc<BackendActor>>,
    pub pins: Arc<SharedPins>,
    pub rate_limiter: Arc<MemoryRateLimiter>,
    pub audit: Arc<MemoryAuditSink>,
    /// Audit records already shown in the transcript.
    pub audit_shown: usize,
    /// The real gateway, or a deliberately broken variant (tests of the scenarios themselves).
    pub variant: GatewayVariant,
}

impl GatewayWorld {
    /// The demo gateway's backends over the cluster's note store (`notes` is the note-store actor).
    pub fn demo(exchange: &ExchangeHandle, note_store: ActorId, authorizations: &Authorizations, variant: GatewayVariant) -> GatewayWorld {
        let file = GatewayFile::demo();
        let mut backends = Vec::new();
        for (id, config) in &file.backends {
            let ledger = Arc::new(MemoryExportLedger::default());
            let notes: Arc<dyn NoteStore> = Arc::new(StoreClient::new(exchange.clone(), note_store));
            let built = assembly::backend(&file, config, authorizations, notes, ledger.clone());
            let ledger = matches!(built, BuiltBackend::Notes(_)).then_some(ledger);
            backends.push(Arc::new(BackendActor { id: id.clone(), server: built.local_port(), descriptors: built.descriptors(), ledger }));
        }
        GatewayWorld {
            file,
            backends,
            pins: Arc::new(SharedPins::new(default_pins())),
            rate_limiter: Arc::new(MemoryRateLimiter::default()),
            audit: Arc::new(MemoryAuditSink::default()),
            audit_shown: 0,
            variant,
        }
    }

    /// A revocation reaches every actor holding authorizations: each notes backend is rebuilt with the new
    /// grants over the same ledger, note store and descriptors (what it published stays what it publishes).
    /// A variant that forgets to is the zoo's revoke-ignoring backend.
    pub fn reauthorize(&mut self, exchange: &ExchangeHandle, note_store: ActorId, authorizations: &Authorizations) {
        if self.variant == GatewayVariant::RevokeIgnoringBackend {
            return;
        }
        for backend in &mut self.backends {
            let (Some(config), Some(ledger)) = (self.file.backends.get(&backend.id), backend.ledger.clone()) else { continue };
            let notes: Arc<dyn NoteStore> = Arc::new(StoreClient::new(exchange.clone(), note_store));
            let BuiltBackend::Notes(server) = assembly::backend(&self.file, config, authorizations, notes, ledger.clone()) else {
                continue;
            };
            let server = Arc::new(NotesBackend { descriptors: backend.descriptors.clone(), ..(*server).clone() });
            let port = LocalBackend::with_live_listing(server.clone(), server);
            *backend = Arc::new(BackendActor {
                id: backend.id.clone(),
                server: port,
                descriptors: backend.descriptors.clone(),
                ledger: Some(ledger),
            });
        }
    }

    pub fn backend(&self, id: &str) -> Option<&Arc<BackendActor>> {
        self.backends.iter().find(|b| b.id == id)
    }

    /// One gateway incarnation. The `i`th of `backend_actors` is the actor of `self.backends[i]`.
    #[allow(clippy::too_many_arguments)] // Each is one of the instance's own ports or settings.
    pub fn gateway(
        &self,
        instance: &str,
        key_ring: KeyRing,
        state_ttl_ms: u64,
        exchange: &ExchangeHandle,
        backend_actors: impl Iterator<Item = ActorId>,
        replay: Arc<dyn ReplayStore>,
        clock: Arc<dyn Clock>,
        nonces: Arc<dyn NonceSource>,
    ) -> Gateway {
        let handles = self
            .backends
            .iter()
            .zip(backend_actors)
            .map(|(backend, actor)| {
                let port: Arc<dyn Backend> = Arc::new(BackendClient { client: StoreClient::new(exchange.clone(), actor) });
                BackendHandle { id: backend.id.clone(), endpoint: in_process_endpoint(&backend.id), port }
            })
            .collect();
        let pins: Arc<dyn crate::servers::gateway::ports::PinSource> = match self.variant {
            GatewayVariant::DescriptionOnlyPins => {
                Arc::new(DescriptionOnlyPins { pins: self.pins.clone(), backends: self.backends.clone() })
            }
            _ => self.pins.clone(),
        };
        let ports = GatewayPorts { pins, replay, rate_limiter: self.rate_limiter.clone(), audit: self.audit.clone(), clock, nonces };
        assembly::gateway(&self.file, instance, key_ring, state_ttl_ms, SIM_AUDIT_KEY.to_vec(), handles, ports)
            .expect("the embedded demo gateway is valid")
    }

    /// The operator reviews and re-pins `backend.tool` to what the backend publishes right now. Returns the
    /// new digest and the descriptor approved, or why nothing was pinned.
    pub fn approve(&self, qualified: &str, now_ms: u64) -> Result<(String, Value), ApproveError> {
        let (backend_id, tool) =
            crate::policy::pinning::split_qualified(qualified).ok_or_else(|| ApproveError::NotQualified(qualified.to_string()))?;
        let backend = self.backend(backend_id).ok_or_else(|| ApproveError::NoBackend(backend_id.to_string()))?;
        let descriptors = backend.descriptors.current();
        let descriptor = descriptors
            .iter()
            .find(|d| d.get("name").and_then(Value::as_str) == Some(tool))
            .ok_or_else(|| ApproveError::NoTool { backend: backend_id.to_string(), tool: tool.to_string() })?;
        let info = self.file.backends[backend_id].server_info();
        let approval = Approval {
            publisher: PublisherEvidence {
                backend: backend_id.to_string(),
                endpoint: in_process_endpoint(backend_id),
                server_name: info.name,
                server_version: info.version,
            },
            approved_at_ms: now_ms,
            approved_by: SIM_APPROVER.into(),
            acknowledged_findings: Vec::new(),
        };
        let mut pins = crate::servers::gateway::ports::PinSource::pins(self.pins.as_ref()).as_ref().clone();
        let digest = pins.approve(&qualify(backend_id, tool), descriptor, approval)?.digest.clone();
        self.pins.replace(pins);
        Ok((digest, descriptor.clone()))
    }

    /// Audit records appended since the last call, as transcript lines (the fields a reader needs; the
    /// argument digests are omitted as noise).
    pub(crate) fn new_audit_lines(&mut self) -> Vec<String> {
        if self.audit.len() == self.audit_shown {
            return Vec::new();
        }
        let records = self.audit.records();
        let lines = records[self.audit_shown..].iter().map(audit_line).collect();
        self.audit_shown = records.len();
        lines
    }

    /// Exports recorded by every notes backend, in backend order.
    pub fn exports(&self) -> Vec<crate::servers::gateway::backends::ExportRecord> {
        self.backends.iter().filter_map(|b| b.ledger.as_ref()).flat_map(|ledger| ledger.exports()).collect()
    }
}

fn audit_line(record: &Value) -> String {
    let field = |key: &str| record.get(key).cloned().unwrap_or(Value::Null);
    let digest = record.get("descriptorDigest").and_then(Value::as_str).map(|d| d.chars().take(12).collect::<String>());
    let summary = json!({
        "approvedBy": field("approvedBy"),
        "decision": field("decision"),
        "descriptor": digest,
        "executionBegan": field("executionBegan"),
        "principal": field("principal"),
        "reason": field("reason"),
        "redriven": field("redriven"),
        "stage": field("stage"),
        "target": field("target"),
    });
    format!("audit {summary}")
}

/// The task that handles one request on a gateway instance: [`Gateway::handle`], as the HTTP transport calls it
/// (through the variant's front when the world runs a broken variant).
pub(crate) fn handle_request(
    world: &GatewayWorld,
    gateway: Gateway,
    principal: String,
    bytes: Vec<u8>,
    headers: Option<RoutingHeaders>,
) -> TaskFuture {
    let variant = world.variant;
    if variant == GatewayVariant::Real {
        return Box::pin(async move { TaskOutput::Reply(gateway.handle(&principal, &bytes, headers.as_ref()).await) });
    }
    let backends = world.backends.clone();
    Box::pin(
        async move { TaskOutput::Reply(gateway_mutants::handle(variant, &gateway, &backends, &principal, &bytes, headers.as_ref()).await) },
    )
}

/// Why `admin approve` pinned nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApproveError {
    #[error("{0:?} is not a qualified tool name backend.tool")]
    NotQualified(String),
    #[error("no backend {0}")]
    NoBackend(String),
    #[error("backend {backend} publishes no tool {tool}")]
    NoTool { backend: String, tool: String },
    #[error(transparent)]
    Pin(#[from] crate::policy::pinning::PinFileError),
}
