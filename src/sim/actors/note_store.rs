//! The note-store actor: the in-memory note store, serving one call per task.
//!
//! Admin changes arrive here as messages too, so a delete "behind everyone's back" lands between two
//! deliveries like anything else.

use super::{TaskFuture, TaskOutput};
use crate::framework::ports::NoteStore;
use crate::sim::engine::message::{StoreCall, StoreReturn};
use crate::stores::memory::MemoryNoteStore;
use std::sync::Arc;

pub fn serve(notes: Arc<MemoryNoteStore>, call: StoreCall) -> TaskFuture {
    Box::pin(async move {
        let value = match call {
            StoreCall::ListNotes => StoreReturn::Notes(notes.listing()),
            StoreCall::DeleteIfInside { note_id, revision, workspace } => {
                match notes.delete_if_inside(&note_id, &revision, &workspace).await {
                    Ok(outcome) => StoreReturn::Guarded(outcome),
                    Err(error) => StoreReturn::Failed(error),
                }
            }
            StoreCall::AdminDelete { note_id } => StoreReturn::AdminDone { existed: notes.remove(&note_id) },
            StoreCall::AdminMove { note_id, uri } => StoreReturn::AdminDone { existed: notes.move_to(&note_id, &uri) },
            StoreCall::AdminRename { note_id, title } => StoreReturn::AdminDone { existed: notes.rename(&note_id, &title) },
            StoreCall::AdminSwap { note_id } => StoreReturn::AdminDone { existed: notes.swap(&note_id) },
            other => StoreReturn::Failed(crate::framework::ports::StoreError::Unavailable(format!(
                "the note store does not serve {}",
                other.label()
            ))),
        };
        TaskOutput::Return(value)
    })
}
