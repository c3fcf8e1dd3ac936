//! The admin actor: changes behind everyone's back. Note changes and descriptor changes are messages (to the
//! note store, to a backend); an approval and a revocation apply at once.

use super::Cluster;
use crate::oracle::history::EffectKind;
use crate::policy::containment::FileUri;
use crate::policy::containment::UriError;
use crate::policy::state::KeyError;
use crate::scenario::model::AdminAction;
use crate::sim::actors::admin::store_call;
use crate::sim::actors::gateway::ApproveError;
use crate::sim::engine::message::Payload;
use crate::sim::engine::network::NetworkFull;
use std::sync::Arc;

/// Why an admin action (or a key change) could not be carried out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    #[error("admin approve needs a gateway: declare `gateway NAME`")]
    NoGateway,
    #[error(transparent)]
    Approve(#[from] ApproveError),
    #[error("no gateway backend {0} (declare `gateway NAME` to have backends)")]
    NoBackend(String),
    #[error(transparent)]
    NetworkFull(#[from] NetworkFull),
    #[error("cannot revoke {workspace:?}: {source}")]
    Revoke { workspace: String, source: UriError },
    /// An instance's key ring refused a rotation or retirement.
    #[error("{instance}: {source}")]
    Key { instance: String, source: KeyError },
}

impl Cluster {
    /// An admin action: note changes are messages to the note store, descriptor changes to a backend; an
    /// approval and a revocation apply at once.
    pub fn admin(&mut self, action: &AdminAction) -> Result<(), AdminError> {
        if let AdminAction::Approve { tool } = action {
            let now_ms = crate::framework::ports::Clock::now_ms(&self.clock);
            let world = self.gateway_world.as_ref().ok_or(AdminError::NoGateway)?;
            let (digest, descriptor) = world.approve(tool, now_ms)?;
            self.record_effect(None, EffectKind::Approved { tool: tool.clone(), descriptor });
            let shown: String = digest.chars().take(crate::sim::engine::message::DIGEST_CHARS_SHOWN).collect();
            self.event(Some(self.admin_actor), format!("approved {tool}: pinned to its current descriptor {shown}"));
            return Ok(());
        }
        if let (AdminAction::Descriptor { backend, .. }, Some(call)) = (action, store_call(action)) {
            let index = self.gateway_world.as_ref().and_then(|w| w.backends.iter().position(|b| &b.id == backend));
            let index = index.ok_or_else(|| AdminError::NoBackend(backend.clone()))?;
            let now_ms = self.clock.elapsed_ms();
            self.network.send(self.admin_actor, self.backends[index].actor, now_ms, None, None, Payload::Call(call))?;
            return Ok(());
        }
        if let Some(call) = store_call(action) {
            let now_ms = self.clock.elapsed_ms();
            self.network.send(self.admin_actor, self.note_store_actor, now_ms, None, None, Payload::Call(call))?;
            return Ok(());
        }
        if let AdminAction::Revoke { principal, workspace } = action {
            let root = FileUri::parse(workspace).map_err(|source| AdminError::Revoke { workspace: workspace.clone(), source })?;
            Arc::make_mut(&mut self.authorizations).revoke(principal, &root);
            if let Some(world) = self.gateway_world.as_mut() {
                world.reauthorize(&self.exchange, self.note_store_actor, &self.authorizations);
            }
            for index in 0..self.instances.len() {
                self.rebuild_service(index);
            }
            self.record_effect(None, EffectKind::Revoked { principal: principal.clone(), workspace: workspace.clone() });
            self.event(Some(self.admin_actor), format!("revoked {principal}'s workspace {root} on every instance"));
        }
        Ok(())
    }
}
