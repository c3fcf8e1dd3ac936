//! Deliberately broken 2025-11-25 adapters, for the mutant zoo (`sim::explore::mutants`): the real
//! [`LegacyAdapter`](crate::eras::LegacyAdapter) with one wrong decision added around it. Reachable only
//! through `RunOptions::era_variant`; `src/eras` itself is untouched.
//!
//! * [`EraVariant::TrustsRoots`]: roots widen authorization. The root list a legacy client answered is
//!   taken as a grant: a call whose workspace lies inside one of its roots is served by a server that
//!   authorizes it.
//! * [`EraVariant::KeepsSessionCapabilities`]: a legacy session's negotiated capabilities leak into the
//!   modern requests of the same principal on that instance.

use crate::framework::pipeline::{RequestContext, ServiceResponse};
use crate::framework::Service;
use crate::policy::containment::FileUri;
use crate::servers::notes::NotesServer;
use crate::wire::errors::RpcError;
use crate::wire::jsonrpc::RequestId;
use async_trait::async_trait;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Which adapter `eras both` instances run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EraVariant {
    /// The real adapter.
    #[default]
    Real,
    /// Takes a legacy client's root list as a grant.
    TrustsRoots,
    /// Lets a legacy session's capabilities reach the principal's modern requests.
    KeepsSessionCapabilities,
}

/// What a mutant remembers across the requests of one incarnation, by principal.
#[derive(Clone, Default)]
pub struct LegacyMemory {
    roots: Arc<Mutex<BTreeMap<String, Vec<String>>>>,
    capabilities: Arc<Mutex<BTreeMap<String, Map<String, Value>>>>,
}

impl LegacyMemory {
    /// A legacy client of `principal` answered `roots/list` with `answer`.
    pub fn saw_roots(&self, principal: &str, answer: &Value) {
        let roots: Vec<String> = answer
            .pointer("/result/roots")
            .and_then(Value::as_array)
            .map(|roots| roots.iter().filter_map(|r| r.get("uri").and_then(Value::as_str).map(str::to_string)).collect())
            .unwrap_or_default();
        self.roots.lock().unwrap_or_else(|p| p.into_inner()).insert(principal.to_string(), roots);
    }
}

/// The service an instance's adapter calls, for `variant`. `server` builds the real notes server of the
/// incarnation, for the variant that re-grants around it (built only then).
pub fn adapter_service(
    variant: EraVariant,
    memory: &LegacyMemory,
    real: Arc<dyn Service>,
    server: impl FnOnce() -> NotesServer,
) -> Arc<dyn Service> {
    match variant {
        EraVariant::Real => real,
        EraVariant::TrustsRoots => Arc::new(TrustsRoots { server: server(), memory: memory.clone() }),
        EraVariant::KeepsSessionCapabilities => Arc::new(RecordsCapabilities { inner: real, memory: memory.clone() }),
    }
}

/// The service an instance's modern requests reach, for `variant`.
pub fn modern_service(variant: EraVariant, memory: &LegacyMemory, real: Arc<dyn Service>) -> Arc<dyn Service> {
    match variant {
        EraVariant::KeepsSessionCapabilities => Arc::new(LendsCapabilities { inner: real, memory: memory.clone() }),
        _ => real,
    }
}

struct TrustsRoots {
    server: NotesServer,
    memory: LegacyMemory,
}

impl TrustsRoots {
    /// The wrong decision: a workspace inside a root the client listed is granted.
    fn granting(&self, principal: &str, params: &Value) -> NotesServer {
        let requested = params.pointer("/arguments/workspaceUri").and_then(Value::as_str).and_then(|uri| FileUri::parse(uri).ok());
        let roots = self.memory.roots.lock().unwrap_or_else(|p| p.into_inner()).get(principal).cloned().unwrap_or_default();
        let Some(requested) = requested else { return self.server.clone() };
        let inside = roots.iter().filter_map(|root| FileUri::parse(root).ok()).any(|root| root.contains(&requested));
        let mut config = (*self.server.config).clone();
        if !inside || Arc::make_mut(&mut config.authorizations).grant(principal, &requested.to_string()).is_err() {
            return self.server.clone();
        }
        crate::assembly::notes_server(Arc::new(config), self.server.ports.clone())
    }
}

#[async_trait]
impl Service for TrustsRoots {
    fn has_method(&self, method: &str) -> bool {
        self.server.has_method(method)
    }

    async fn call(&self, context: RequestContext<'_>, method: &str, params: &Value) -> Result<Value, RpcError> {
        self.granting(context.principal, params).call(context, method, params).await
    }

    async fn respond(&self, context: RequestContext<'_>, method: &str, params: &Value) -> Result<ServiceResponse, RpcError> {
        self.granting(context.principal, params).respond(context, method, params).await
    }
}

struct RecordsCapabilities {
    inner: Arc<dyn Service>,
    memory: LegacyMemory,
}

#[async_trait]
impl Service for RecordsCapabilities {
    fn has_method(&self, method: &str) -> bool {
        self.inner.has_method(method)
    }

    async fn call(&self, context: RequestContext<'_>, method: &str, params: &Value) -> Result<Value, RpcError> {
        self.record(&context);
        self.inner.call(context, method, params).await
    }

    async fn respond(&self, context: RequestContext<'_>, method: &str, params: &Value) -> Result<ServiceResponse, RpcError> {
        self.record(&context);
        self.inner.respond(context, method, params).await
    }

    async fn refused(&self, principal: &str, id: &RequestId, method: &str, params: Option<&Value>, error: &RpcError) {
        self.inner.refused(principal, id, method, params, error).await
    }
}

impl RecordsCapabilities {
    fn record(&self, context: &RequestContext<'_>) {
        if !context.meta.client_capabilities.is_empty() {
            let mut capabilities = self.memory.capabilities.lock().unwrap_or_else(|p| p.into_inner());
            capabilities.insert(context.principal.to_string(), context.meta.client_capabilities.clone().into_owned());
        }
    }
}

struct LendsCapabilities {
    inner: Arc<dyn Service>,
    memory: LegacyMemory,
}

impl LendsCapabilities {
    /// The wrong decision: what the principal's legacy session negotiated fills in what this request lacks.
    fn lent<'m>(&self, context: &RequestContext<'m>) -> Option<crate::wire::meta::RequestMeta<'m>> {
        let capabilities = self.memory.capabilities.lock().unwrap_or_else(|p| p.into_inner()).get(context.principal).cloned()?;
        let mut meta = context.meta.clone();
        for (name, value) in capabilities {
            meta.client_capabilities.to_mut().entry(name).or_insert(value);
        }
        Some(meta)
    }
}

#[async_trait]
impl Service for LendsCapabilities {
    fn has_method(&self, method: &str) -> bool {
        self.inner.has_method(method)
    }

    async fn call(&self, context: RequestContext<'_>, method: &str, params: &Value) -> Result<Value, RpcError> {
        match self.lent(&context) {
            Some(meta) => self.inner.call(RequestContext { meta: &meta, ..context }, method, params).await,
            None => self.inner.call(context, method, params).await,
        }
    }

    async fn respond(&self, context: RequestContext<'_>, method: &str, params: &Value) -> Result<ServiceResponse, RpcError> {
        match self.lent(&context) {
            Some(meta) => self.inner.respond(RequestContext { meta: &meta, ..context }, method, params).await,
            None => self.inner.respond(context, method, params).await,
        }
    }

    async fn refused(&self, principal: &str, id: &RequestId, method: &str, params: Option<&Value>, error: &RpcError) {
        self.inner.refused(principal, id, method, params, error).await
    }
}
