//! A server instance: the unchanged notes server behind the unchanged request pipeline.
//!
//! An instance owns configuration only (its key ring and clock offset; the authorizations and the state
//! TTL are the deployment's). Everything else it needs comes through ports: the stores as [`StoreClient`](super::StoreClient)s,
//! a skewed view of the virtual clock, and a nonce stream of its own. A crash drops its tasks; a restart
//! builds a new incarnation from the same configuration, with a fresh nonce stream.

use super::legacy::CurrentService;
use super::legacy_mutants::LegacyMemory;
use super::{TaskFuture, TaskOutput};
use crate::assembly;
use crate::eras::LegacyAdapter;
use crate::framework::{handle_decoded_exchange, handle_exchange, Service};
use crate::policy::state::KeyRing;
use crate::servers::notes::{NotesConfig, NotesPorts, NotesServer};
use crate::sim::engine::message::RequestBody;
use crate::sim::engine::random::{self, Stream};
use crate::stores::deterministic::SeededNonces;
use std::sync::Arc;

/// Nonces of one instance incarnation: its own ChaCha stream of the run's seed.
pub(crate) fn incarnation_nonces(seed: u64, instance: u16, incarnation: u16) -> SeededNonces {
    SeededNonces::from_rng(random::stream(seed, Stream::Nonces { instance, incarnation }))
}

/// What a service factory receives to build one instance incarnation: the notes server's configuration and
/// ports (the cluster's store clients, the instance's skewed clock and nonce stream, the cluster's out-of-band
/// flows and page when the scenario has a browser).
#[derive(Clone)]
pub struct InstanceParts {
    pub config: Arc<NotesConfig>,
    pub ports: NotesPorts,
}

impl InstanceParts {
    /// The real notes server over these parts, built by `assembly` (the simulator's one call of
    /// [`assembly::notes_server`]: every simulated notes server, real or a mutant's base, comes from here).
    pub fn notes_server(self) -> NotesServer {
        assembly::notes_server(self.config, self.ports)
    }
}

/// Builds the service an instance runs. The default builds the real `NotesServer`; the hook exists so that
/// deliberately broken variants can be simulated without touching the handlers.
pub type ServiceFactory = Arc<dyn Fn(InstanceParts) -> Arc<dyn Service> + Send + Sync>;

pub fn notes_server_factory() -> ServiceFactory {
    Arc::new(|parts: InstanceParts| -> Arc<dyn Service> { Arc::new(parts.notes_server()) })
}

/// One instance's configuration and current incarnation.
pub struct Instance {
    pub name: String,
    /// Position among the instances (selects the nonce stream).
    pub index: u16,
    pub key_ring: KeyRing,
    pub clock_offset_ms: i64,
    /// Starts at 0; each restart adds one.
    pub incarnation: u16,
    pub up: bool,
    /// Runs the security gateway rather than the notes server (configuration: kept while it is down).
    pub is_gateway: bool,
    /// Also serves 2025-11-25 clients, through the legacy adapter (`eras both`; never a gateway).
    pub eras_both: bool,
    /// The running gateway of a gateway instance's current incarnation.
    pub gateway: Option<crate::servers::gateway::Gateway>,
    /// The running incarnation; rebuilt on restart and when configuration changes.
    pub service: Option<Arc<dyn Service>>,
    /// The incarnation's nonce stream, kept across configuration changes (never restarted mid-life).
    pub nonces: Option<Arc<SeededNonces>>,
    /// An `eras both` instance's legacy adapter of its current incarnation, and the service it reaches.
    pub(crate) legacy: Option<(Arc<LegacyAdapter>, CurrentService)>,
    /// A broken adapter's memory of the current incarnation (unused by the real one).
    pub(crate) legacy_memory: LegacyMemory,
}

impl Instance {
    /// Whether two instances would answer every request identically (same keys, same clock).
    pub(crate) fn same_configuration(&self, other: &Instance) -> bool {
        self.key_ring == other.key_ring
            && self.clock_offset_ms == other.clock_offset_ms
            && self.gateway.is_some() == other.gateway.is_some()
    }
}

/// The task that handles one request on an instance: the pipeline the real transports call (with the routing
/// headers the client sent, as over HTTP; without any, as over stdio). When the network carries the value
/// the bytes encode, the pipeline starts from it instead of reading the same JSON text again.
pub(crate) fn handle_request(
    service: Arc<dyn Service>,
    principal: String,
    body: RequestBody,
    headers: Option<crate::wire::headers::RoutingHeaders>,
) -> TaskFuture {
    Box::pin(async move {
        let exchange = match &body.decoded {
            Some(value) => handle_decoded_exchange(&*service, &principal, value, body.length, headers.as_ref()).await,
            None => handle_exchange(&*service, &principal, &body.bytes(), headers.as_ref()).await,
        };
        TaskOutput::Reply(exchange.reply)
    })
}

/// The task that serves one browser request to an instance's out-of-band page, for a browser signed in as
/// `user`: the request is `{"page":"open"|"complete","url":…}`; the reply is the page's answer as JSON, with
/// its HTTP status.
pub(crate) fn handle_page(service: Arc<dyn Service>, user: String, bytes: Vec<u8>) -> TaskFuture {
    use crate::framework::out_of_band::{PageAction, PageAnswer, PageRequest};
    Box::pin(async move {
        let request: Option<PageRequest> = serde_json::from_slice::<serde_json::Value>(&bytes).ok().and_then(|value| {
            let action = match value.get("page")?.as_str()? {
                "open" => PageAction::Open,
                "complete" => PageAction::Complete,
                _ => return None,
            };
            Some(PageRequest { action, url: value.get("url")?.as_str()?.to_string() })
        });
        let answer = match request {
            Some(request) => service.page(&user, &request).await,
            None => PageAnswer::new(400, "altered", "The browser's request was not a page request."),
        };
        TaskOutput::Reply(crate::framework::Reply { response: Some(answer.to_json()), http_status: answer.status })
    })
}
