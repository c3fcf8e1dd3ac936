//! The 2025-11-25 era in the simulator: the unchanged [`LegacyAdapter`] on an instance, and the legacy client
//! it asks things of.
//!
//! An instance declared `eras both` holds one adapter per incarnation (its sessions live in that
//! incarnation's memory: a restart, or another instance, does not know them). A legacy request is one task
//! on the instance, running [`LegacyAdapter::handle`] exactly as the HTTP transport runs it. When the adapter
//! asks the client something inside the call (`elicitation/create`, `roots/list`), `SimClientLink` parks
//! the task the way a [`StoreClient`] call does: the request is an envelope to the
//! client actor, whose answer is the envelope that resumes the task, so every question is an interleaving
//! point. The client answers as the scenario declared it (`client … legacy roots [...] answers {...}`).

use super::legacy_mutants::LegacyMemory;
use super::{ExchangeHandle, StoreClient, TaskFuture, TaskOutput};
use crate::eras::{Channel, ClientLink, LegacyAdapter};
use crate::framework::pipeline::{RequestContext, ServiceResponse};
use crate::framework::Service;
use crate::scenario::model::LegacyClientSpec;
use crate::sim::engine::message::{ActorId, StoreCall, StoreReturn};
use crate::wire::errors::RpcError;
use crate::wire::jsonrpc::RequestId;
use async_trait::async_trait;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// The service an incarnation runs now: configuration changes (a key rotation, a revocation) rebuild the
/// service, and the incarnation's adapter, which keeps its sessions, reaches the current one through here.
#[derive(Clone, Default)]
pub struct CurrentService(Arc<Mutex<Option<Arc<dyn Service>>>>);

impl CurrentService {
    pub fn set(&self, service: Arc<dyn Service>) {
        *self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(service);
    }

    fn get(&self) -> Result<Arc<dyn Service>, RpcError> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
            .ok_or_else(|| RpcError::new(crate::wire::errors::INTERNAL_ERROR, "the instance runs no service"))
    }
}

#[async_trait]
impl Service for CurrentService {
    fn has_method(&self, method: &str) -> bool {
        self.get().is_ok_and(|service| service.has_method(method))
    }

    async fn call(&self, context: RequestContext<'_>, method: &str, params: &Value) -> Result<Value, RpcError> {
        self.get()?.call(context, method, params).await
    }

    async fn respond(&self, context: RequestContext<'_>, method: &str, params: &Value) -> Result<ServiceResponse, RpcError> {
        self.get()?.respond(context, method, params).await
    }

    async fn refused(&self, principal: &str, id: &RequestId, method: &str, params: Option<&Value>, error: &RpcError) {
        if let Ok(service) = self.get() {
            service.refused(principal, id, method, params, error).await
        }
    }
}

/// The adapter's way to the legacy client that sent the request: a question is an envelope to the client
/// actor and its answer the envelope that resumes the task; the answer then reaches the adapter as the
/// client's own JSON-RPC response over the same session.
pub(crate) struct SimClientLink {
    client: StoreClient,
    adapter: Arc<LegacyAdapter>,
    principal: String,
    session: Option<String>,
    /// A zoo mutant's memory of what the client answered (`None` for the real adapter).
    memory: Option<LegacyMemory>,
}

#[async_trait]
impl ClientLink for SimClientLink {
    async fn send(&self, message: Value) -> bool {
        if message.get("id").is_none() {
            // A notification inside the call (a log message): the client reads it and answers nothing.
            return true;
        }
        let asked_roots = message.get("method").and_then(Value::as_str) == Some("roots/list");
        let StoreReturn::ClientAnswer(answer) = self.client.call(StoreCall::AskClient { request: message }).await else {
            return false;
        };
        if let (true, Some(memory)) = (asked_roots, &self.memory) {
            memory.saw_roots(&self.principal, &answer);
        }
        let bytes = serde_json::to_vec(&answer).expect("a JSON value serializes");
        let channel = Channel::Http { session_id: self.session.as_deref() };
        self.adapter.handle(&self.principal, channel, &bytes, self).await;
        true
    }

    async fn wait(&self, mut answer: oneshot::Receiver<Value>) -> Option<Value> {
        // The answer was delivered (or not) before `send` returned: nothing else is in flight for this call.
        answer.try_recv().ok()
    }
}

/// The task that handles one legacy request on an instance: the adapter, as the HTTP transport runs it.
pub(crate) fn handle_request(
    adapter: Arc<LegacyAdapter>,
    exchange: ExchangeHandle,
    client: ActorId,
    principal: String,
    bytes: Vec<u8>,
    session: Option<String>,
    memory: Option<LegacyMemory>,
) -> TaskFuture {
    Box::pin(async move {
        let link = SimClientLink { client: StoreClient::new(exchange, client), adapter: adapter.clone(), principal, session, memory };
        let channel = Channel::Http { session_id: link.session.as_deref() };
        TaskOutput::Legacy(adapter.handle(&link.principal, channel, &bytes, &link).await)
    })
}

/// What a legacy client answers a server→client request with, as its declaration says: its roots for
/// `roots/list`, its declared result for `elicitation/create`, method-not-found for anything else.
pub(crate) fn answer(spec: &LegacyClientSpec, request: &Value) -> Value {
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    match request.get("method").and_then(Value::as_str) {
        Some("roots/list") => {
            let roots: Vec<Value> = spec.roots.iter().map(|uri| json!({ "uri": uri })).collect();
            json!({ "jsonrpc": "2.0", "id": id, "result": { "roots": roots } })
        }
        Some("elicitation/create") => json!({ "jsonrpc": "2.0", "id": id, "result": spec.elicitation }),
        _ => json!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32601, "message": "this client does not answer that" } }),
    }
}
