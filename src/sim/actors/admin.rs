//! The admin actor: an operator (or adversary) who changes data behind every client's back.
//!
//! Note changes are messages to the note-store actor, so inside a `parallel` block they race the clients.
//! Revoking a workspace is a configuration change applied to every instance between two deliveries (the
//! handlers read configuration once per request).

use crate::sim::message::StoreCall;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminAction {
    DeleteNote {
        note_id: String,
    },
    MoveNote {
        note_id: String,
        uri: String,
    },
    RenameNote {
        note_id: String,
        title: String,
    },
    /// Removes the principal's grants at or below `workspace` on every instance.
    Revoke {
        principal: String,
        workspace: String,
    },
    /// Changes what a gateway backend publishes (a message to the backend actor): `tool: Some` merges `fields`
    /// into that descriptor (a rug pull), `None` publishes `fields` as one more descriptor.
    Descriptor {
        backend: String,
        tool: Option<String>,
        fields: serde_json::Value,
    },
    /// The operator reviews `backend.tool` and re-pins it to what the backend publishes now.
    Approve {
        tool: String,
    },
}

impl AdminAction {
    /// The message to the note store, for actions that change notes.
    pub fn store_call(&self) -> Option<StoreCall> {
        match self {
            AdminAction::DeleteNote { note_id } => Some(StoreCall::AdminDelete { note_id: note_id.clone() }),
            AdminAction::MoveNote { note_id, uri } => Some(StoreCall::AdminMove { note_id: note_id.clone(), uri: uri.clone() }),
            AdminAction::RenameNote { note_id, title } => Some(StoreCall::AdminRename { note_id: note_id.clone(), title: title.clone() }),
            AdminAction::Descriptor { tool, fields, .. } => Some(StoreCall::AdminDescriptor { tool: tool.clone(), fields: fields.clone() }),
            AdminAction::Revoke { .. } | AdminAction::Approve { .. } => None,
        }
    }
}
