//! The operator's side of a store: seeding, inspecting and changing notes behind the servers' backs, and
//! counting nonces. Scenario admin steps, `mcpsim seed` and the store tests use it; handlers never do.
//!
//! Every store kind implements it with the same meaning, so a test written against [`StoreAdmin`] holds for
//! memory, SQLite and PostgreSQL alike.

use crate::framework::ports::{ClaimRecord, Note, StoreError};
use crate::stores::memory::{MemoryNoteStore, MemoryReplayStore};
use async_trait::async_trait;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// What a seed changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SeedReport {
    /// Notes that did not exist and were added.
    pub inserted: usize,
    /// Notes that existed with another title, URI or body, and were restored.
    pub updated: usize,
    /// Notes that were already exactly as seeded.
    pub unchanged: usize,
    /// Notes in the store that the seed does not mention; they are kept, listed after the seeded ones.
    pub others_kept: usize,
    /// Whether notes had to be moved in the listing (adding new ones at its end is not moving).
    pub reordered: bool,
}

impl std::fmt::Display for SeedReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} inserted, {} restored, {} already as seeded, {} other notes kept{}",
            self.inserted,
            self.updated,
            self.unchanged,
            self.others_kept,
            if self.reordered { ", listing order restored" } else { "" }
        )
    }
}

#[async_trait]
pub trait StoreAdmin: Send + Sync {
    /// Loads `notes` idempotently: each is inserted or restored to exactly the given title, URI and body, and
    /// afterwards they list first, in the given order, followed by any other notes in their previous order.
    /// A repeated id is applied like a second upsert (its content wins, its first position stays).
    async fn seed(&self, notes: &[Note]) -> Result<SeedReport, StoreError>;
    /// Every note, in listing order.
    async fn list(&self) -> Result<Vec<Note>, StoreError>;
    /// Adds a note at the end of the listing, or replaces an existing one in place.
    async fn upsert(&self, note: Note) -> Result<(), StoreError>;
    /// Deletes a note. Returns whether it existed.
    async fn remove(&self, id: &str) -> Result<bool, StoreError>;
    /// Moves a note to another URI. Returns whether it existed.
    async fn move_to(&self, id: &str, uri: &str) -> Result<bool, StoreError>;
    /// Renames a note. Returns whether it existed.
    async fn rename(&self, id: &str, title: &str) -> Result<bool, StoreError>;
    /// Replaces the note by another copy at the same place with the same content (a new revision: a form that
    /// showed the old copy no longer names it). Returns whether it existed. The databases keep no revisions.
    async fn swap(&self, id: &str) -> Result<bool, StoreError> {
        debug_assert!(!self.keeps_revisions(), "a store that keeps revisions implements swap");
        let _ = id;
        Err(StoreError::Unavailable(format!("{} keeps no revisions, so a note cannot be swapped for another copy", self.describe())))
    }
    /// Whether notes carry revisions, so that [`StoreAdmin::swap`] can replace one by another copy.
    fn keeps_revisions(&self) -> bool {
        false
    }
    /// Nonces currently held (consumed, plus in-flight ones in memory).
    async fn nonce_count(&self) -> Result<u64, StoreError>;
    /// The record of a consumed nonce, if held.
    async fn nonce_record(&self, nonce: &str) -> Result<Option<ClaimRecord>, StoreError>;
    /// What this store is, for logs and reports; never contains a password.
    fn describe(&self) -> String;
    /// When the database acknowledges this store's commits, read back from it (SQLite's `synchronous`,
    /// PostgreSQL's `synchronous_commit` of a pooled session): evidence of `--durability`, not an echo of it.
    async fn commit_setting(&self) -> Result<String, StoreError> {
        Ok("in memory: nothing is written to disk".into())
    }
    /// Releases the store's connections at shutdown. Operations after it fail with `StoreError::Unavailable`;
    /// an operation still running finishes (its connection is closed when it returns). Nothing is lost: every
    /// committed change is already durable, and an uncommitted one rolls back as it would on a crash.
    async fn close(&self) -> Result<(), StoreError> {
        // In-process stores hold nothing outside the process.
        Ok(())
    }
}

// Reseeding a live fleet (`http`) and `mcpsim run`.
/// What [`reseed`] changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(not(feature = "http"), allow(dead_code))]
pub struct ReseedReport {
    pub seed: SeedReport,
    /// Notes the seed does not mention, removed.
    pub removed: usize,
}

impl std::fmt::Display for ReseedReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let seed = &self.seed;
        write!(
            f,
            "{} inserted, {} restored, {} already as seeded, {} other notes removed",
            seed.inserted, seed.updated, seed.unchanged, self.removed
        )
    }
}

/// Leaves exactly `notes` in the store, in their order: the seed (`mcpsim seed`'s, idempotent), then every
/// other note removed. Consumed nonces are never touched: a confirmation used before stays used. For a test
/// fleet between scenarios (`mcpsim run --live --reseed`); servers may keep serving meanwhile.
#[cfg_attr(not(feature = "http"), allow(dead_code))]
pub async fn reseed(admin: &dyn StoreAdmin, notes: &[Note]) -> Result<ReseedReport, StoreError> {
    let seed = admin.seed(notes).await?;
    let wanted: BTreeSet<&str> = notes.iter().map(|note| note.id.as_str()).collect();
    let mut removed = 0;
    for note in admin.list().await? {
        if !wanted.contains(note.id.as_str()) && admin.remove(&note.id).await? {
            removed += 1;
        }
    }
    Ok(ReseedReport { seed, removed })
}

/// The listing a seed must produce: the seeded notes in order (later duplicates replacing content), then
/// every other current note in its current order. Linear but for the ids' index (O(n log n) in all notes):
/// the fleet benchmark seeds thousands of notes into stores holding many more.
pub(crate) fn seeded_listing(current: &[Note], seed: &[Note]) -> Vec<Note> {
    let mut seeded: Vec<Note> = Vec::with_capacity(seed.len());
    let mut position: BTreeMap<&str, usize> = BTreeMap::new();
    for note in seed {
        match position.get(note.id.as_str()) {
            Some(&index) => seeded[index] = note.clone(),
            None => {
                position.insert(&note.id, seeded.len());
                seeded.push(note.clone());
            }
        }
    }
    let others = current.iter().filter(|note| !position.contains_key(note.id.as_str())).cloned();
    let mut listing = seeded;
    listing.extend(others);
    listing
}

/// Counts what a seed changes, comparing the listing before and after.
pub(crate) fn seed_report(current: &[Note], target: &[Note], seed: &[Note]) -> SeedReport {
    let seeded_ids: BTreeSet<&str> = seed.iter().map(|note| note.id.as_str()).collect();
    let existing: BTreeMap<&str, &Note> = current.iter().map(|note| (note.id.as_str(), note)).collect();
    let mut report = SeedReport { reordered: !upserts_give_order(current, target, seed), ..SeedReport::default() };
    for note in target {
        if !seeded_ids.contains(note.id.as_str()) {
            report.others_kept += 1;
            continue;
        }
        match existing.get(note.id.as_str()) {
            None => report.inserted += 1,
            Some(&existing) if existing == note => report.unchanged += 1,
            Some(_) => report.updated += 1,
        }
    }
    report
}

/// Whether upserting `seed` in order onto `current` (existing notes keep their place, new ones go last) already
/// lists `target`; if not, the seed must move notes.
fn upserts_give_order(current: &[Note], target: &[Note], seed: &[Note]) -> bool {
    let mut listed: Vec<&str> = current.iter().map(|note| note.id.as_str()).collect();
    let mut known: BTreeSet<&str> = listed.iter().copied().collect();
    for note in seed {
        if known.insert(&note.id) {
            listed.push(&note.id);
        }
    }
    listed.len() == target.len() && listed.iter().zip(target).all(|(id, note)| *id == note.id)
}

/// The admin handle of the in-memory stores.
pub(crate) struct MemoryAdmin {
    pub notes: Arc<MemoryNoteStore>,
    pub replay: Arc<MemoryReplayStore>,
}

#[async_trait]
impl StoreAdmin for MemoryAdmin {
    async fn seed(&self, notes: &[Note]) -> Result<SeedReport, StoreError> {
        let current = self.notes.snapshot();
        let target = seeded_listing(&current, notes);
        let report = seed_report(&current, &target, notes);
        if current != target {
            // Rebuild in the target order; a memory store is seeded before it serves, so nobody sees the gap.
            for note in &current {
                self.notes.remove(&note.id);
            }
            for note in target {
                self.notes.upsert(note);
            }
        }
        Ok(report)
    }

    async fn list(&self) -> Result<Vec<Note>, StoreError> {
        Ok(self.notes.snapshot())
    }

    async fn upsert(&self, note: Note) -> Result<(), StoreError> {
        self.notes.upsert(note);
        Ok(())
    }

    async fn remove(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self.notes.remove(id))
    }

    async fn move_to(&self, id: &str, uri: &str) -> Result<bool, StoreError> {
        Ok(self.notes.move_to(id, uri))
    }

    async fn rename(&self, id: &str, title: &str) -> Result<bool, StoreError> {
        Ok(self.notes.rename(id, title))
    }

    async fn swap(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self.notes.swap(id))
    }

    fn keeps_revisions(&self) -> bool {
        true
    }

    async fn nonce_count(&self) -> Result<u64, StoreError> {
        Ok(self.replay.len() as u64)
    }

    async fn nonce_record(&self, nonce: &str) -> Result<Option<ClaimRecord>, StoreError> {
        Ok(self.replay.record(nonce))
    }

    fn describe(&self) -> String {
        "memory (this process only)".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(id: &str, title: &str) -> Note {
        Note { id: id.into(), title: title.into(), uri: format!("file:///w/{id}.md"), body: String::new(), revision: String::new() }
    }

    #[test]
    fn seeded_notes_come_first_in_seed_order_and_others_keep_theirs() {
        let current = vec![note("x", "x"), note("b", "old b"), note("y", "y")];
        let seed = vec![note("a", "a"), note("b", "b")];
        let target = seeded_listing(&current, &seed);
        let ids: Vec<&str> = target.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "x", "y"]);
        assert_eq!(target[1].title, "b");
        let report = seed_report(&current, &target, &seed);
        assert_eq!(report, SeedReport { inserted: 1, updated: 1, unchanged: 0, others_kept: 2, reordered: true });
        let fresh = seed_report(&[], &seeded_listing(&[], &seed), &seed);
        assert!(!fresh.reordered, "seeding an empty store only appends");
        let appended = [note("a", "a")];
        assert!(!seed_report(&appended, &seeded_listing(&appended, &seed), &seed).reordered, "b is added after a");
        let again = seed_report(&target, &seeded_listing(&target, &seed), &seed);
        assert_eq!(again, SeedReport { inserted: 0, updated: 0, unchanged: 2, others_kept: 2, reordered: false });
    }

    #[test]
    fn a_repeated_id_keeps_its_first_place_and_last_content() {
        let seed = vec![note("a", "first"), note("b", "b"), note("a", "second")];
        let target = seeded_listing(&[], &seed);
        assert_eq!(target.iter().map(|n| (n.id.as_str(), n.title.as_str())).collect::<Vec<_>>(), [("a", "second"), ("b", "b")]);
    }
}
