//! The admin actor: an operator (or adversary) who changes data behind every client's back.
//!
//! Note changes are messages to the note-store actor, so inside a `parallel` block they race the clients.
//! Revoking a workspace is a configuration change applied to every instance between two deliveries (the
//! handlers read configuration once per request).

use crate::scenario::model::AdminAction;
use crate::sim::engine::message::StoreCall;

/// The message to a store or backend actor, for actions that change data.
pub(crate) fn store_call(action: &AdminAction) -> Option<StoreCall> {
    match action {
        AdminAction::DeleteNote { note_id } => Some(StoreCall::AdminDelete { note_id: note_id.clone() }),
        AdminAction::MoveNote { note_id, uri } => Some(StoreCall::AdminMove { note_id: note_id.clone(), uri: uri.clone() }),
        AdminAction::RenameNote { note_id, title } => Some(StoreCall::AdminRename { note_id: note_id.clone(), title: title.clone() }),
        AdminAction::SwapNote { note_id } => Some(StoreCall::AdminSwap { note_id: note_id.clone() }),
        AdminAction::Descriptor { tool, fields, .. } => Some(StoreCall::AdminDescriptor { tool: tool.clone(), fields: fields.clone() }),
        AdminAction::Revoke { .. } | AdminAction::Approve { .. } => None,
    }
}
