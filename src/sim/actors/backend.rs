//! Backend actors: the gateway's backends (`handlers::backends`, unchanged) as actors of the cluster.
//!
//! A gateway instance reaches a backend only through [`BackendClient`], an implementation of the gateway's
//! [`Backend`] port that turns every listing and every forwarded call into an envelope, exactly as
//! [`super::StoreClient`] does for the stores. The backend actor serves each envelope as one task running the
//! real backend handler (`LocalBackend` over `NotesBackend`/`IssuesBackend`); the notes backend's note port
//! is itself a `StoreClient` to the note-store actor, so a search or an export reads the notes by message.
//!
//! The admin changes what a backend publishes with a message too (`admin rugpull`, `admin publish`), so a
//! rug pull lands between two deliveries and, inside a `parallel` block, races the clients.

use super::{StoreClient, TaskFuture, TaskOutput};
use crate::servers::gateway::backends::LiveDescriptors;
use crate::servers::gateway::ports::{Backend, BackendCall, BackendError, LocalBackend, ToolListing};
use crate::sim::engine::message::{StoreCall, StoreReturn};
use crate::stores::gateway::MemoryExportLedger;
use async_trait::async_trait;
use serde_json::Value;
use std::sync::Arc;

/// One backend server: its handler, the descriptors it publishes, and (notes backends) its export archive.
pub struct BackendActor {
    /// The configured id that prefixes its tools (`notes` in `notes.export`).
    pub id: String,
    pub server: LocalBackend,
    pub descriptors: Arc<LiveDescriptors>,
    pub ledger: Option<Arc<MemoryExportLedger>>,
}

/// Serves one call as one task of the backend actor.
pub fn serve(backend: Arc<BackendActor>, call: StoreCall) -> TaskFuture {
    Box::pin(async move {
        let value = match call {
            StoreCall::ListTools => match backend.server.list_tools().await {
                Ok(listing) => StoreReturn::Listing(listing),
                Err(error) => StoreReturn::ToolResult(Err(error)),
            },
            StoreCall::CallTool { principal, tool, arguments, idempotency_key } => {
                let call =
                    BackendCall { principal: &principal, tool: &tool, arguments: &arguments, idempotency_key: idempotency_key.as_deref() };
                StoreReturn::ToolResult(backend.server.call_tool(call).await)
            }
            StoreCall::AdminDescriptor { tool: Some(tool), fields } => {
                let existed = backend.descriptors.update(&tool, |descriptor| merge(descriptor, &fields));
                StoreReturn::AdminDone { existed }
            }
            StoreCall::AdminDescriptor { tool: None, fields } => {
                backend.descriptors.push(fields);
                StoreReturn::AdminDone { existed: false }
            }
            other => StoreReturn::Failed(crate::framework::ports::StoreError::Unavailable(format!(
                "backend {} does not serve {}",
                backend.id,
                other.label()
            ))),
        };
        TaskOutput::Return(value)
    })
}

/// Replaces the descriptor's top-level fields by those given (`null` removes one): a rug pull rewrites
/// whole fields (`description`, `inputSchema`), which is exactly what a reviewer's diff shows.
fn merge(descriptor: &mut Value, fields: &Value) {
    let (Value::Object(target), Value::Object(fields)) = (descriptor, fields) else { return };
    for (key, value) in fields {
        if value.is_null() {
            target.remove(key);
        } else {
            target.insert(key.clone(), value.clone());
        }
    }
}

/// The gateway's backend port as messages to one backend actor.
pub struct BackendClient {
    pub client: StoreClient,
}

fn unexpected(what: &str, value: StoreReturn) -> BackendError {
    match value {
        StoreReturn::ToolResult(Err(error)) => error,
        other => BackendError::Unreachable(format!("the backend answered {what} with {other:?}")),
    }
}

#[async_trait]
impl Backend for BackendClient {
    async fn list_tools(&self) -> Result<ToolListing, BackendError> {
        match self.client.call(StoreCall::ListTools).await {
            StoreReturn::Listing(listing) => Ok(listing),
            other => Err(unexpected("list_tools", other)),
        }
    }

    async fn call_tool(&self, call: BackendCall<'_>) -> Result<Value, BackendError> {
        let message = StoreCall::CallTool {
            principal: call.principal.to_string(),
            tool: call.tool.to_string(),
            arguments: call.arguments.clone(),
            idempotency_key: call.idempotency_key.map(str::to_string),
        };
        match self.client.call(message).await {
            StoreReturn::ToolResult(result) => result,
            other => Err(unexpected("call_tool", other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_rug_pull_replaces_and_removes_top_level_fields() {
        let mut descriptor = json!({"name": "export", "description": "old", "annotations": {"a": 1}});
        merge(&mut descriptor, &json!({"description": "new", "annotations": null}));
        assert_eq!(descriptor, json!({"name": "export", "description": "new"}));
    }
}
