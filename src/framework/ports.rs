//! What a handler needs from the world, as traits. Implementations live in `stores` (memory, databases) and in
//! the simulator (channel-backed clients of store actors, virtual clock, seeded nonces).
//!
//! Every store method is `async` so that, in the simulator, every store call is a message and an interleaving point.

use crate::policy::containment::FileUri;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One note: an id, a title, where it lives, its (untrusted) body, and which copy of it this is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Note {
    pub id: String,
    pub title: String,
    pub uri: String,
    pub body: String,
    /// The identity of this copy of the note, where the store has one: for the directory store the file's
    /// device, inode, size and modification time (`stores::dir`); the memory store's admin "swap" changes it.
    /// Empty where a store keeps none (the databases). A confirmation form binds the revision it showed, and a
    /// delete whose note no longer has that revision finds it gone ([`GuardedDelete::Gone`]).
    pub revision: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("the store is unavailable: {0}")]
    Unavailable(String),
}

/// A note's title as the title search compares it: lowercased (Unicode), as the query is.
pub fn fold_title(title: &str) -> String {
    title.to_lowercase()
}

/// Whether [`fold_title`] of `title` contains `folded_query` (itself folded already). An ASCII title folds to
/// its ASCII lower case, so it is searched in place, ignoring ASCII case, without folding a copy (candidate
/// searches test every note a listing or an index range holds).
pub fn folded_title_contains(title: &str, folded_query: &str) -> bool {
    if !title.is_ascii() {
        return fold_title(title).contains(folded_query);
    }
    let (title, query) = (title.as_bytes(), folded_query.as_bytes());
    // A folded query that is not ASCII cannot occur in an ASCII title's fold; an empty one occurs in every title.
    query.is_empty() || (folded_query.is_ascii() && title.windows(query.len()).any(|window| window.eq_ignore_ascii_case(query)))
}

/// Whether the note's URI normalizes to one inside `workspace` (a URI that does not parse is inside nothing).
pub fn note_is_inside(workspace: &FileUri, note: &Note) -> bool {
    FileUri::parse(&note.uri).is_ok_and(|uri| workspace.contains(&uri))
}

/// Whether a search for `folded_query` (already [`fold_title`]d) in `workspace` finds `note`: what the
/// default [`NoteStore::find_candidates`] keeps of a listing. The title first: folding one title costs less
/// than parsing one URI, and most notes fail it.
pub fn is_candidate(note: &Note, workspace: &FileUri, folded_query: &str) -> bool {
    folded_title_contains(&note.title, folded_query) && note_is_inside(workspace, note)
}

/// A note's place in a by-workspace index: its normalized URI's [`FileUri::index_key`], or `None` for a URI
/// that does not parse (such a note is never a candidate).
pub fn note_index_key(uri: &str) -> Option<String> {
    FileUri::parse(uri).ok().map(|uri| uri.index_key())
}

/// Result of the note store's compare-and-delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GuardedDelete {
    Deleted(Note),
    /// No note with that id exists any more.
    Gone,
    /// The live note's URI is no longer inside the workspace (it was moved); nothing deleted.
    OutsideWorkspace,
}

#[async_trait]
pub trait NoteStore: Send + Sync {
    /// Every note, in the store's stable listing order.
    async fn list_notes(&self) -> Result<Vec<Note>, StoreError>;

    /// The candidates of a confirmation: the notes inside `workspace` whose title contains `query` ignoring
    /// case (`folded_title_contains` of the folded query), in listing order. An index narrows, it never authorizes: a store may return
    /// more than that (the notes server checks every candidate's containment and title again and drops the
    /// rest), never fewer. Bodies may be left empty. The default reads every note; the stores of `stores`
    /// answer a query of 3 characters or more from an index of the folded titles' trigrams (cost: the notes
    /// holding the query's trigrams, not the workspace) and a shorter one from an index on
    /// [`FileUri::index_key`] and the folded title (cost: the notes in the workspace, not in the store).
    async fn find_candidates(&self, workspace: &FileUri, query: &str) -> Result<Vec<Note>, StoreError> {
        let notes = self.list_notes().await?;
        let query = fold_title(query);
        Ok(notes.into_iter().filter(|note| is_candidate(note, workspace, &query)).collect())
    }

    /// The live notes among `ids`, in listing order, absent ones left out (the re-check of a form's candidates
    /// by id). Bodies may be left empty. The default reads every note.
    async fn notes_by_ids(&self, ids: &[String]) -> Result<Vec<Note>, StoreError> {
        let notes = self.list_notes().await?;
        Ok(notes.into_iter().filter(|note| ids.contains(&note.id)).collect())
    }

    /// Re-reads the live note and deletes it only if it still exists with `revision` (the one the form showed;
    /// another copy at the same place is [`GuardedDelete::Gone`]) and still lies inside `workspace`.
    async fn delete_if_inside(&self, id: &str, revision: &str, workspace: &FileUri) -> Result<GuardedDelete, StoreError>;
}

/// What consuming a confirmation's nonce meant: kept with the nonce, and reported to every later claimant
/// (the recovery rule: a client that lost its answer learns the outcome by retrying). On the wire (the
/// `previousOutcome` of a `state_consumed` refusal) and in the databases it is a JSON object tagged by
/// `outcome`: `{"outcome":"deleted","noteId":"note-7"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case", deny_unknown_fields)]
pub enum ClaimRecord {
    /// The notes server deleted this note.
    Deleted {
        #[serde(rename = "noteId")]
        note_id: String,
    },
    /// The notes server published this note, after its principal completed the out-of-band authorization
    /// (`notes_publish`, GUARANTEES.md §2.7).
    Published {
        #[serde(rename = "noteId")]
        note_id: String,
    },
    /// The user declined: terminal, nothing ran. The gateway names the tool; the notes server does not.
    Declined {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
    },
    /// The gateway accepted a confirmation of exactly this call (its arguments digest); the call is run once,
    /// with the nonce as its idempotency key, however often it is re-driven.
    Confirmed {
        tool: String,
        #[serde(rename = "argumentsDigest")]
        arguments_digest: String,
    },
    /// The claim is being carried out right now (a claim-and-delete in flight, or stranded by a crash until
    /// its retention ends): whoever asks should retry later.
    InProgress,
    /// A dismissed form. Our servers never record one (a cancel consumes nothing); the variant exists so that
    /// a store written by a server that does (a mutant of the zoo) still reads back.
    Cancelled,
}

impl ClaimRecord {
    /// As JSON: the shape clients read in `previousOutcome`, and the text the databases keep.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("a claim record serializes")
    }

    /// Reads a record back (`None`: not a record of ours).
    pub(crate) fn from_json(value: &Value) -> Option<ClaimRecord> {
        serde_json::from_value(value.clone()).ok()
    }
}

/// A one-time nonce to consume, with what the consumption meant (returned to later claimants).
#[derive(Debug, Clone, PartialEq)]
pub struct NonceClaim {
    pub nonce: String,
    /// Whose confirmation it is: the replay store bounds each principal's share of its capacity, so one
    /// principal filling its share leaves the others working.
    pub principal: String,
    /// When the state carrying this nonce expires; the entry is kept at least until then.
    pub expires_at_ms: u64,
    /// What consuming it did.
    pub record: ClaimRecord,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ClaimOutcome {
    Claimed,
    /// Already consumed (or being consumed right now); `record` says by what.
    AlreadyClaimed {
        record: ClaimRecord,
    },
    /// Full of unexpired nonces: refused, never evicting (fail closed).
    Full,
    /// The state's expiry plus the store's grace period has passed by the store's own clock (or the store has
    /// already pruned nonces that old): it can no longer tell whether this nonce was used, so it refuses it.
    /// Clock skew beyond the grace costs availability this way, never at-most-once.
    Expired,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ClaimAndDelete {
    Deleted(Note),
    NoteGone,
    NoteOutsideWorkspace,
    AlreadyClaimed {
        record: ClaimRecord,
    },
    Full,
    /// See [`ClaimOutcome::Expired`]; nothing was deleted.
    Expired,
}

/// The replay store shared by every instance. Bounded, TTL-pruned, never evicts an unexpired nonce.
#[async_trait]
pub trait ReplayStore: Send + Sync {
    /// Consumes a nonce with no other effect (a terminal decline).
    async fn claim(&self, claim: NonceClaim) -> Result<ClaimOutcome, StoreError>;

    /// One atomic operation: claim the nonce, re-read the live note, re-check its revision and containment,
    /// delete it. If the note is gone (or is another copy than `revision`) or outside the workspace, the nonce
    /// is released: nothing is consumed.
    async fn claim_and_delete(
        &self,
        claim: NonceClaim,
        note_id: &str,
        revision: &str,
        workspace: &FileUri,
    ) -> Result<ClaimAndDelete, StoreError>;
}

/// Milliseconds since the Unix epoch; virtual in the simulator.
pub trait Clock: Send + Sync {
    fn now_ms(&self) -> u64;
}

/// Unpredictable nonces; seeded in the simulator.
pub trait NonceSource: Send + Sync {
    fn nonce(&self) -> [u8; 16];
}

/// A list a server announces as changed to open `subscriptions/listen` streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ListChanged {
    Tools,
    Prompts,
    Resources,
}

impl ListChanged {
    pub const ALL: [ListChanged; 3] = [ListChanged::Tools, ListChanged::Prompts, ListChanged::Resources];
}

/// Fan-out of list changes to every open subscription: a broadcast channel in one process, a shared bus in
/// a fleet, a scheduled actor in the simulator.
pub trait ChangeFeed: Send + Sync {
    fn publish(&self, change: ListChanged);

    /// Starts receiving. Only changes published after this call are seen, so a subscriber registers
    /// before it acknowledges.
    fn subscribe(&self) -> Box<dyn ChangeSubscription>;
}

#[async_trait]
pub trait ChangeSubscription: Send {
    /// Waits for the next change. `None` when the feed has shut down.
    async fn next_change(&mut self) -> Option<ListChanged>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    proptest::proptest! {
        /// Searching an ASCII title in place finds exactly what folding a copy of it finds.
        #[test]
        fn a_title_is_searched_as_its_fold_is(title in "[a-zA-Z0-9 KİßΣσ-]{0,16}", query in "[a-zA-Z KİßΣ]{0,4}") {
            let folded = fold_title(&query);
            proptest::prop_assert_eq!(folded_title_contains(&title, &folded), fold_title(&title).contains(&folded));
        }
    }

    #[test]
    fn ascii_titles_match_in_any_case() {
        assert!(folded_title_contains("TPS Report 2024", &fold_title("tps report")));
        assert!(folded_title_contains("TPS Report 2024", ""));
        assert!(!folded_title_contains("TPS Report 2024", &fold_title("TPS reports")));
        // The Kelvin sign folds to an ASCII `k`: an ASCII title is searched for that.
        assert!(folded_title_contains("Kiosk list", &fold_title("\u{212a}")));
        assert!(!folded_title_contains("TPS report", &fold_title("\u{212a}")));
    }

    #[test]
    fn claim_records_keep_their_wire_shape() {
        let cases = [
            (ClaimRecord::Deleted { note_id: "note-7".into() }, json!({"outcome": "deleted", "noteId": "note-7"})),
            (ClaimRecord::Declined { tool: None }, json!({"outcome": "declined"})),
            (ClaimRecord::Published { note_id: "note-1".into() }, json!({"outcome": "published", "noteId": "note-1"})),
            (ClaimRecord::Declined { tool: Some("notes.export".into()) }, json!({"outcome": "declined", "tool": "notes.export"})),
            (
                ClaimRecord::Confirmed { tool: "notes.export".into(), arguments_digest: "ab".into() },
                json!({"outcome": "confirmed", "tool": "notes.export", "argumentsDigest": "ab"}),
            ),
            (ClaimRecord::InProgress, json!({"outcome": "in_progress"})),
        ];
        for (record, wire) in cases {
            assert_eq!(record.to_json(), wire);
            assert_eq!(ClaimRecord::from_json(&wire), Some(record));
        }
        assert_eq!(ClaimRecord::from_json(&json!({"outcome": "exploded"})), None);
        assert_eq!(ClaimRecord::from_json(&json!({"outcome": "deleted"})), None, "a deletion names its note");
        assert_eq!(ClaimRecord::from_json(&json!({"outcome": "deleted", "noteId": "n", "extra": 1})), None);
    }
}
