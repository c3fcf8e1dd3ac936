//! In-memory note store and replay store.
//!
//! The replay store is bounded and pruned by TTL but never evicts an unexpired nonce: when full of live
//! entries it refuses new claims (fail closed). `claim_and_delete` marks the nonce *pending* (so a concurrent
//! claim of the same nonce is refused), runs the note store's compare-and-delete, then either commits the
//! claim (deleted) or releases it (note gone or moved: nothing consumed). No lock is held across the await.
//! A claim stranded mid-delete (a crash) stays pending, refusing every retry, until its state's retention
//! ends; then it is pruned like a consumed entry.

use crate::framework::ports::{
    fold_title, folded_title_contains, note_index_key, ClaimAndDelete, ClaimOutcome, ClaimRecord, Clock, GuardedDelete, NonceClaim, Note,
    NoteStore, ReplayStore, StoreError,
};
use crate::policy::containment::{same_text, FileUri};
use async_trait::async_trait;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

/// Notes in listing order, indexed by id, by place (workspace, then title) and, once a search needs it, by the
/// byte trigrams of their folded titles: round 1's search reads the notes of the asked workspace holding the
/// query's rarest trigram, never the rest of the store nor the workspace's other notes.
#[derive(Debug, Default)]
pub struct MemoryNoteStore {
    notes: Mutex<Notes>,
}

#[derive(Debug, Default, Clone)]
struct Notes {
    /// Position → note: the listing order (positions only grow; a replaced note keeps its place).
    listing: BTreeMap<u64, Note>,
    /// Id → position.
    positions: BTreeMap<String, u64>,
    /// (the URI's [`FileUri::index_key`], position) → the folded title. A workspace's notes are one range of
    /// it; a note whose URI does not parse is not in it (it is inside no workspace).
    places: BTreeMap<(String, u64), String>,
    /// The trigram index of the placed notes' folded titles, built by the first search that can use it (a
    /// query of [`TRIGRAM`] bytes or more) and kept true by every change after: a store nobody searches that
    /// way (the simulator's, which answers from its listing) never pays for it.
    grams: Option<TitleGrams>,
    next: u64,
    /// The listing as last handed out whole, shared until a change (the simulated note store answers every
    /// read with it, and the history keeps each answer).
    shared: Option<Arc<Vec<Note>>>,
}

/// The length of the n-grams the title index keeps, in bytes.
const TRIGRAM: usize = 3;

/// An n-gram of a folded title: [`TRIGRAM`] bytes of its UTF-8. Bytes, not chars: a folded title contains the
/// folded query exactly when its bytes contain the query's (`str::contains` compares bytes; both are UTF-8),
/// so every byte trigram of the query is one of a match's, whatever its characters; the keys are fixed-size
/// (no allocation per posting), and a one-character query of three UTF-8 bytes (most CJK) is indexed too.
type Trigram = [u8; TRIGRAM];

/// The byte trigrams of `folded`, each once.
fn trigrams(folded: &str) -> BTreeSet<Trigram> {
    folded.as_bytes().windows(TRIGRAM).map(|gram| [gram[0], gram[1], gram[2]]).collect()
}

/// Trigram → the places (index key, position) of the notes whose folded title holds it. A workspace's notes
/// with a trigram are one range of its postings, as in `places`.
#[derive(Debug, Default, Clone)]
struct TitleGrams {
    postings: BTreeMap<Trigram, BTreeSet<(Arc<str>, u64)>>,
}

impl TitleGrams {
    fn add(&mut self, key: &str, position: u64, folded: &str) {
        let key: Arc<str> = key.into();
        for gram in trigrams(folded) {
            self.postings.entry(gram).or_default().insert((key.clone(), position));
        }
    }

    fn remove(&mut self, key: &str, position: u64, folded: &str) {
        let place = (Arc::<str>::from(key), position);
        for gram in trigrams(folded) {
            if let Some(places) = self.postings.get_mut(&gram) {
                places.remove(&place);
                if places.is_empty() {
                    self.postings.remove(&gram);
                }
            }
        }
    }

    /// The positions of the notes placed in `[start, end)` whose folded title holds the rarest trigram (the
    /// fewest postings in the store) of `folded_query` (at least [`TRIGRAM`] bytes): a superset of the matches
    /// there, which the caller checks. Empty when some trigram of the query is in no title.
    fn narrow(&self, start: &str, end: &str, folded_query: &str) -> Vec<u64> {
        let mut rarest: Option<&BTreeSet<(Arc<str>, u64)>> = None;
        for gram in trigrams(folded_query) {
            let Some(places) = self.postings.get(&gram) else {
                return Vec::new();
            };
            if rarest.is_none_or(|fewest| places.len() < fewest.len()) {
                rarest = Some(places);
            }
        }
        let Some(places) = rarest else {
            return Vec::new();
        };
        places.range((Arc::from(start), 0)..(Arc::from(end), 0)).map(|(_, position)| *position).collect()
    }
}

impl Notes {
    fn unplace(&mut self, position: u64) {
        if let Some(key) = self.listing.get(&position).and_then(|note| note_index_key(&note.uri)) {
            if let Some(folded) = self.places.remove(&(key.clone(), position)) {
                if let Some(grams) = &mut self.grams {
                    grams.remove(&key, position, &folded);
                }
            }
        }
    }

    fn place(&mut self, position: u64) {
        if let Some(note) = self.listing.get(&position) {
            if let Some(key) = note_index_key(&note.uri) {
                let folded = fold_title(&note.title);
                if let Some(grams) = &mut self.grams {
                    grams.add(&key, position, &folded);
                }
                self.places.insert((key, position), folded);
            }
        }
    }

    /// The trigram index, built from `places` if no search has needed it yet.
    fn grams(&mut self) -> &TitleGrams {
        let places = &self.places;
        self.grams.get_or_insert_with(|| {
            let mut grams = TitleGrams::default();
            for ((key, position), folded) in places {
                grams.add(key, *position, folded);
            }
            grams
        })
    }

    /// Adds a note at the end of the listing, or replaces the one with its id where it stands.
    fn upsert(&mut self, note: Note) {
        self.shared = None;
        let position = match self.positions.get(&note.id) {
            Some(&position) => {
                self.unplace(position);
                position
            }
            None => {
                let position = self.next;
                self.next += 1;
                self.positions.insert(note.id.clone(), position);
                position
            }
        };
        self.listing.insert(position, note);
        self.place(position);
    }

    fn remove(&mut self, id: &str) -> Option<Note> {
        let position = *self.positions.get(id)?;
        self.shared = None;
        self.unplace(position);
        self.positions.remove(id);
        self.listing.remove(&position)
    }

    /// Changes one note in place (keeping the indexes true). Returns whether it existed.
    fn update(&mut self, id: &str, change: impl FnOnce(&mut Note)) -> bool {
        let Some(&position) = self.positions.get(id) else {
            return false;
        };
        self.shared = None;
        self.unplace(position);
        if let Some(note) = self.listing.get_mut(&position) {
            change(note);
        }
        self.place(position);
        true
    }

    fn get(&self, id: &str) -> Option<&Note> {
        self.positions.get(id).and_then(|position| self.listing.get(position))
    }
}

/// A note as a search returns it: everything but the body, which a confirmation form never shows.
fn without_body(note: &Note) -> Note {
    Note { id: note.id.clone(), title: note.title.clone(), uri: note.uri.clone(), body: String::new(), revision: note.revision.clone() }
}

impl Clone for MemoryNoteStore {
    /// Another store holding what this one holds now, indexes included (nothing is parsed again).
    fn clone(&self) -> Self {
        MemoryNoteStore { notes: Mutex::new(self.lock().clone()) }
    }
}

impl MemoryNoteStore {
    /// The notes in listing order. A later note with an id already listed replaces that one where it stands.
    pub fn new(notes: Vec<Note>) -> Self {
        let mut indexed = Notes::default();
        for note in notes {
            indexed.upsert(note);
        }
        MemoryNoteStore { notes: Mutex::new(indexed) }
    }

    fn lock(&self) -> MutexGuard<'_, Notes> {
        // A poisoned lock only means another thread panicked mid-read; every change keeps the indexes whole
        // before it can panic (none of them does).
        self.notes.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn snapshot(&self) -> Vec<Note> {
        self.lock().listing.values().cloned().collect()
    }

    /// The notes in listing order, shared: the same list is handed out again until something changes.
    pub fn listing(&self) -> Arc<Vec<Note>> {
        let notes = &mut *self.lock();
        notes.shared.get_or_insert_with(|| Arc::new(notes.listing.values().cloned().collect())).clone()
    }

    /// How many notes the store holds.
    pub fn len(&self) -> usize {
        self.lock().listing.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Admin: adds or replaces a note.
    pub fn upsert(&self, note: Note) {
        self.lock().upsert(note);
    }

    /// Admin: deletes behind everyone's back. Returns whether it existed.
    pub fn remove(&self, id: &str) -> bool {
        self.lock().remove(id).is_some()
    }

    /// Admin: moves a note to another URI. Returns whether it existed.
    pub fn move_to(&self, id: &str, uri: &str) -> bool {
        self.lock().update(id, |n| n.uri = uri.to_string())
    }

    /// Admin: replaces a note's file with another copy at the same place (what a user's editor does when it saves
    /// by writing a new file and renaming it over the old): same id, title, URI and body, a new `revision`
    /// (`copy-1`, `copy-2`, … : deterministic). Returns whether it existed.
    pub fn swap(&self, id: &str) -> bool {
        self.lock().update(id, |n| {
            let copies = n.revision.strip_prefix("copy-").and_then(|k| k.parse::<u64>().ok()).unwrap_or(0);
            n.revision = format!("copy-{}", copies + 1);
        })
    }

    /// Admin: renames a note. Returns whether it existed.
    pub fn rename(&self, id: &str, title: &str) -> bool {
        self.lock().update(id, |n| n.title = title.to_string())
    }
}

#[async_trait]
impl NoteStore for MemoryNoteStore {
    async fn list_notes(&self) -> Result<Vec<Note>, StoreError> {
        Ok(self.snapshot())
    }

    /// A query of [`TRIGRAM`] bytes or more (folded) reads the workspace's postings of its rarest trigram
    /// and compares those notes' titles only: the cost follows the notes holding that trigram in the
    /// workspace, not the workspace. A shorter one (0–2 bytes: an empty query, one or two ASCII letters, one
    /// accented letter) compares every title of the workspace's range: such a query matches most titles of a
    /// workspace anyway (any title, for the empty one), so postings of 1- and 2-grams (as many again as the
    /// trigrams' to keep) would save little, and a form offers at most a few candidates.
    async fn find_candidates(&self, workspace: &FileUri, query: &str) -> Result<Vec<Note>, StoreError> {
        let mut notes = self.lock();
        let (start, end) = workspace.index_range();
        let query = fold_title(query);
        let mut positions: Vec<u64> = if query.len() >= TRIGRAM {
            let narrowed = notes.grams().narrow(&start, &end, &query);
            narrowed
                .into_iter()
                .filter(|position| notes.listing.get(position).is_some_and(|note| folded_title_contains(&note.title, &query)))
                .collect()
        } else {
            notes
                .places
                .range((start, 0)..(end, 0))
                .filter(|(_, title)| title.contains(&query))
                .map(|((_, position), _)| *position)
                .collect()
        };
        positions.sort_unstable();
        Ok(positions.iter().filter_map(|position| notes.listing.get(position)).map(without_body).collect())
    }

    async fn notes_by_ids(&self, ids: &[String]) -> Result<Vec<Note>, StoreError> {
        let notes = self.lock();
        let mut positions: Vec<u64> = ids.iter().filter_map(|id| notes.positions.get(id).copied()).collect();
        positions.sort_unstable();
        positions.dedup();
        Ok(positions.iter().filter_map(|position| notes.listing.get(position)).map(without_body).collect())
    }

    async fn delete_if_inside(&self, id: &str, revision: &str, workspace: &FileUri) -> Result<GuardedDelete, StoreError> {
        let mut notes = self.lock();
        // Another copy at the same id (an admin swap) is not the note the form showed. (A note the store was
        // seeded with has an empty revision: `same_text` compares it without a slow zero-length `memcmp`.)
        let Some(note) = notes.get(id).filter(|n| same_text(&n.revision, revision)) else {
            return Ok(GuardedDelete::Gone);
        };
        let inside = FileUri::parse(&note.uri).is_ok_and(|uri| workspace.contains(&uri));
        if !inside {
            return Ok(GuardedDelete::OutsideWorkspace);
        }
        match notes.remove(id) {
            Some(note) => Ok(GuardedDelete::Deleted(note)),
            None => Ok(GuardedDelete::Gone),
        }
    }
}

/// Whether a claim of a state expiring at `expires_at_ms` comes too late for the replay store to judge: its
/// retention (expiry plus grace) has ended by the store's clock, or nonces that old were already pruned. The
/// one rule every store applies (memory, SQLite, PostgreSQL), so a claimant whose clock lags cannot get a
/// pruned nonce accepted again.
pub fn past_retention(expires_at_ms: u64, store_now_ms: u64, grace_ms: u64, pruned_through_ms: u64) -> bool {
    expires_at_ms.saturating_add(grace_ms) <= store_now_ms || expires_at_ms <= pruned_through_ms
}

/// Nonces the replay store holds at most, all principals together.
pub const REPLAY_CAPACITY: usize = 100_000;
/// The share of [`REPLAY_CAPACITY`] one principal may hold, in percent: a principal that fills its share (by
/// declining confirmations as fast as it can, say) is refused while every other principal keeps working.
pub const REPLAY_PRINCIPAL_SHARE_PERCENT: usize = 25;
/// How long a nonce is kept past its state's expiry.
pub const REPLAY_RETENTION_GRACE_MS: u64 = 60_000;
/// The most one held nonce of a notes-server confirmation costs the memory replay store, in bytes of heap
/// (ledger entry, expiry index and their share of the trees' nodes), as `tests/replay_bytes.rs` measures it
/// with a counting allocator.
pub const MEMORY_REPLAY_BYTES_PER_NONCE: usize = 200;
// `serve`'s default replay capacity and its log line (the `cli` feature).
/// What `serve` lets a memory replay store hold by default: its default capacity is this budget over
/// [`MEMORY_REPLAY_BYTES_PER_NONCE`] (335,544 nonces).
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub const MEMORY_REPLAY_BUDGET_BYTES: usize = 64 * 1024 * 1024;
/// Nonces a SQLite or PostgreSQL replay store holds by default under `serve`: a row each, on disk.
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub const DATABASE_REPLAY_CAPACITY: usize = 5_000_000;

/// Where a replay store keeps its nonces, for sizing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayMedium {
    Memory,
    /// SQLite or PostgreSQL: a row per nonce.
    Database,
    /// The folder store: a file per nonce in `FOLDER/.mcpsim`.
    Files,
}

/// The replay capacity `serve` gives a store by default when `[replay] capacity` does not say: memory is
/// bounded by bytes, the databases by rows; the folder store keeps the original 100,000 (a file each).
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub fn default_replay_capacity(medium: ReplayMedium) -> usize {
    match medium {
        ReplayMedium::Memory => MEMORY_REPLAY_BUDGET_BYTES / MEMORY_REPLAY_BYTES_PER_NONCE,
        ReplayMedium::Database => DATABASE_REPLAY_CAPACITY,
        ReplayMedium::Files => REPLAY_CAPACITY,
    }
}

/// The confirmations per second a replay store of `capacity` nonces sustains without refusing
/// (`replay_store_full`): every nonce is held for its state's lifetime plus the grace period, so at most
/// `capacity / (ttl + grace)` can be claimed per second, all principals together (one principal: its share).
#[cfg_attr(not(feature = "cli"), allow(dead_code))]
pub fn sustained_claims_per_second(capacity: usize, state_ttl_ms: u64, grace_ms: u64) -> f64 {
    capacity as f64 * 1000.0 / state_ttl_ms.saturating_add(grace_ms).max(1) as f64
}

/// Bounds of the replay store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayLimits {
    /// Most nonces held at once (pending and consumed), all principals together.
    pub capacity: usize,
    /// Most nonces one principal's confirmations hold at once (at most `capacity`).
    pub principal_capacity: usize,
    /// Kept past a state's expiry before pruning, to cover clock skew between instances and the store.
    pub retention_grace_ms: u64,
}

impl ReplayLimits {
    /// `capacity` nonces, each principal allowed `share_percent` of them (at least one).
    pub fn with_share(capacity: usize, share_percent: usize, retention_grace_ms: u64) -> ReplayLimits {
        ReplayLimits { capacity, principal_capacity: share_of(capacity, share_percent), retention_grace_ms }
    }
}

/// One principal's share of a shared store's `capacity`: `share_percent` of it, at least 1 and at most all. The
/// replay store and the out-of-band flows take their shares by this one rule.
pub(crate) fn share_of(capacity: usize, share_percent: usize) -> usize {
    (capacity.saturating_mul(share_percent.min(100)) / 100).clamp(1, capacity.max(1))
}

impl Default for ReplayLimits {
    fn default() -> Self {
        ReplayLimits::with_share(REPLAY_CAPACITY, REPLAY_PRINCIPAL_SHARE_PERCENT, REPLAY_RETENTION_GRACE_MS)
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Entry {
    /// A claim-and-delete is in flight for this nonce.
    Pending,
    Consumed(ClaimRecord),
}

/// A nonce as the ledger keys it: the 16 bytes our servers draw (base64url without padding, 22 characters,
/// decoded) or, for anything else a state could carry, the text itself. Two keys are equal exactly when the
/// nonces are.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum NonceKey {
    Drawn([u8; 16]),
    Other(Box<str>),
}

impl NonceKey {
    fn of(nonce: &str) -> NonceKey {
        use base64::Engine;
        let engine = &base64::engine::general_purpose::URL_SAFE_NO_PAD;
        if nonce.len() == 22 {
            if let Ok(bytes) = engine.decode(nonce) {
                // Only the canonical spelling: another text decoding to the same bytes is another nonce.
                if let Ok(drawn) = <[u8; 16]>::try_from(bytes.as_slice()) {
                    if engine.encode(drawn) == nonce {
                        return NonceKey::Drawn(drawn);
                    }
                }
            }
        }
        NonceKey::Other(nonce.into())
    }

    fn text(&self) -> String {
        use base64::Engine;
        match self {
            NonceKey::Drawn(bytes) => base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes),
            NonceKey::Other(text) => text.to_string(),
        }
    }
}

/// A short string kept inline (note ids are short), a longer one on the heap.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Text {
    Inline { len: u8, bytes: [u8; TEXT_INLINE_MAX] },
    Heap(Box<str>),
}

const TEXT_INLINE_MAX: usize = 22;

impl Text {
    fn of(text: &str) -> Text {
        if text.len() <= TEXT_INLINE_MAX {
            let mut bytes = [0u8; TEXT_INLINE_MAX];
            bytes[..text.len()].copy_from_slice(text.as_bytes());
            Text::Inline { len: text.len() as u8, bytes }
        } else {
            Text::Heap(text.into())
        }
    }

    fn as_str(&self) -> &str {
        match self {
            // Copied from a `&str` at a char boundary (the whole string), so always UTF-8.
            Text::Inline { len, bytes } => std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default(),
            Text::Heap(text) => text,
        }
    }
}

/// What a held nonce means, in a fixed-size encoding (no JSON, no value tree): the note id of a deletion
/// inline (a publication's too), a tool name as a number into the ledger's word table; only the gateway's confirmations (their
/// arguments digest) keep a box.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Pending,
    Deleted(Text),
    Published(Text),
    Declined(Option<u32>),
    Confirmed(Box<(u32, Box<str>)>),
    InProgress,
    Cancelled,
}

/// One held nonce: whose it is (a number into the word table) and what it meant. Its expiry is kept once,
/// in the ledger's expiry index.
#[derive(Debug, Clone)]
struct Held {
    principal: u32,
    outcome: Outcome,
}

/// Principals and tool names, each kept once: held nonces refer to them by number.
#[derive(Debug, Default)]
struct Words {
    numbers: BTreeMap<Box<str>, u32>,
    words: Vec<Box<str>>,
}

impl Words {
    fn number(&mut self, word: &str) -> u32 {
        if let Some(&number) = self.numbers.get(word) {
            return number;
        }
        let number = u32::try_from(self.words.len()).unwrap_or(u32::MAX);
        self.words.push(word.into());
        self.numbers.insert(word.into(), number);
        number
    }

    fn word(&self, number: u32) -> &str {
        self.words.get(number as usize).map_or("", |word| word)
    }
}

#[derive(Debug, Default)]
struct Ledger {
    entries: BTreeMap<NonceKey, Held>,
    /// Nonces held per principal number (only principals holding some).
    held: BTreeMap<u32, usize>,
    by_expiry: BTreeSet<(u64, NonceKey)>,
    words: Words,
    /// The latest expiry pruned so far: a claim of a state expiring at or before it may have been pruned
    /// after it was used, so it is refused whatever the claimant's clock says.
    pruned_through_ms: u64,
}

impl Ledger {
    fn encode(&mut self, entry: &Entry) -> Outcome {
        match entry {
            Entry::Pending => Outcome::Pending,
            Entry::Consumed(ClaimRecord::Deleted { note_id }) => Outcome::Deleted(Text::of(note_id)),
            Entry::Consumed(ClaimRecord::Published { note_id }) => Outcome::Published(Text::of(note_id)),
            Entry::Consumed(ClaimRecord::Declined { tool }) => Outcome::Declined(tool.as_deref().map(|tool| self.words.number(tool))),
            Entry::Consumed(ClaimRecord::Confirmed { tool, arguments_digest }) => {
                Outcome::Confirmed(Box::new((self.words.number(tool), arguments_digest.as_str().into())))
            }
            Entry::Consumed(ClaimRecord::InProgress) => Outcome::InProgress,
            Entry::Consumed(ClaimRecord::Cancelled) => Outcome::Cancelled,
        }
    }

    fn decode(&self, outcome: &Outcome) -> Entry {
        Entry::Consumed(match outcome {
            Outcome::Pending => return Entry::Pending,
            Outcome::Deleted(note_id) => ClaimRecord::Deleted { note_id: note_id.as_str().to_string() },
            Outcome::Published(note_id) => ClaimRecord::Published { note_id: note_id.as_str().to_string() },
            Outcome::Declined(tool) => ClaimRecord::Declined { tool: tool.map(|tool| self.words.word(tool).to_string()) },
            Outcome::Confirmed(confirmed) => {
                ClaimRecord::Confirmed { tool: self.words.word(confirmed.0).to_string(), arguments_digest: confirmed.1.to_string() }
            }
            Outcome::InProgress => ClaimRecord::InProgress,
            Outcome::Cancelled => ClaimRecord::Cancelled,
        })
    }

    /// Drops every entry whose retention (its state's expiry plus the grace period) has ended, consumed and
    /// pending alike; never an unexpired one.
    ///
    /// A pending entry that old was stranded: its instance crashed between claim and delete, or its store call
    /// never returned. The state carrying its nonce has expired on every instance, so nothing can present that
    /// nonce again and dropping it allows no replay. Keeping it would let every crash shrink the store for good
    /// and, at the head of the expiry order, stop everything behind it from ever being pruned.
    fn prune(&mut self, now_ms: u64, grace_ms: u64) {
        while let Some((expires_at_ms, _)) = self.by_expiry.first() {
            if expires_at_ms.saturating_add(grace_ms) > now_ms {
                break;
            }
            let Some((expires_at_ms, key)) = self.by_expiry.pop_first() else { break };
            self.remove(&key);
            self.pruned_through_ms = self.pruned_through_ms.max(expires_at_ms);
        }
    }

    fn insert(&mut self, claim: &NonceClaim, entry: Entry) {
        let key = NonceKey::of(&claim.nonce);
        let principal = self.words.number(&claim.principal);
        let outcome = self.encode(&entry);
        let previous = self.entries.insert(key.clone(), Held { principal, outcome });
        if previous.is_none() {
            *self.held.entry(principal).or_insert(0) += 1;
        }
        self.by_expiry.insert((claim.expires_at_ms, key));
    }

    /// Removes an entry (not its expiry index) and gives its principal's place back.
    fn remove(&mut self, key: &NonceKey) {
        if let Some(held) = self.entries.remove(key) {
            if let Some(count) = self.held.get_mut(&held.principal) {
                *count -= 1;
                if *count == 0 {
                    self.held.remove(&held.principal);
                }
            }
        }
    }

    /// Releases a reservation: the entry and its expiry index.
    fn release(&mut self, claim: &NonceClaim) {
        let key = NonceKey::of(&claim.nonce);
        self.remove(&key);
        self.by_expiry.remove(&(claim.expires_at_ms, key));
    }

    fn held_by(&self, principal: &str) -> usize {
        self.words.numbers.get(principal).and_then(|number| self.held.get(number)).copied().unwrap_or(0)
    }

    fn get(&self, nonce: &str) -> Option<Entry> {
        self.entries.get(&NonceKey::of(nonce)).map(|held| self.decode(&held.outcome))
    }

    fn reserve(&mut self, claim: &NonceClaim, entry: Entry, now_ms: u64, limits: ReplayLimits) -> Result<(), ClaimOutcome> {
        if let Some(existing) = self.get(&claim.nonce) {
            let record = match existing {
                Entry::Pending => ClaimRecord::InProgress,
                Entry::Consumed(record) => record,
            };
            return Err(ClaimOutcome::AlreadyClaimed { record });
        }
        if past_retention(claim.expires_at_ms, now_ms, limits.retention_grace_ms, self.pruned_through_ms) {
            return Err(ClaimOutcome::Expired);
        }
        // The principal's share, then the whole: each pruned only when it is needed, never evicting.
        let full =
            |ledger: &Ledger| ledger.held_by(&claim.principal) >= limits.principal_capacity || ledger.entries.len() >= limits.capacity;
        if full(self) {
            self.prune(now_ms, limits.retention_grace_ms);
            if full(self) {
                return Err(ClaimOutcome::Full);
            }
        }
        self.insert(claim, entry);
        Ok(())
    }

    /// Nonces held per principal, by name.
    #[cfg(test)]
    fn held_by_name(&self) -> BTreeMap<String, usize> {
        self.held.iter().map(|(number, count)| (self.words.word(*number).to_string(), *count)).collect()
    }
}

/// The shared replay store. `notes` is the note store that `claim_and_delete` deletes from.
pub struct MemoryReplayStore {
    ledger: Mutex<Ledger>,
    notes: Arc<dyn NoteStore>,
    clock: Arc<dyn Clock>,
    limits: ReplayLimits,
}

impl MemoryReplayStore {
    pub fn new(notes: Arc<dyn NoteStore>, clock: Arc<dyn Clock>, limits: ReplayLimits) -> Self {
        MemoryReplayStore { ledger: Mutex::new(Ledger::default()), notes, clock, limits }
    }

    fn lock(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Nonces currently held (pending or consumed).
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The record of a consumed nonce, if held.
    pub fn record(&self, nonce: &str) -> Option<ClaimRecord> {
        match self.lock().get(nonce) {
            Some(Entry::Consumed(record)) => Some(record),
            _ => None,
        }
    }

    /// How many nonces are consumed ([`MemoryReplayStore::consumed`]'s length, without reading the records).
    pub fn consumed_count(&self) -> usize {
        self.lock().entries.values().filter(|held| !matches!(held.outcome, Outcome::Pending)).count()
    }

    /// Consumed nonces and their records, in nonce order (for inspection and transcripts).
    pub fn consumed(&self) -> Vec<(String, ClaimRecord)> {
        let ledger = self.lock();
        let mut consumed: Vec<(String, ClaimRecord)> = ledger
            .entries
            .iter()
            .filter_map(|(key, held)| match ledger.decode(&held.outcome) {
                Entry::Consumed(record) => Some((key.text(), record)),
                Entry::Pending => None,
            })
            .collect();
        // The keys' order is the bytes', not the text's: sort by the text, as a transcript reads it.
        consumed.sort_by(|a, b| a.0.cmp(&b.0));
        consumed
    }

    pub fn limits(&self) -> ReplayLimits {
        self.limits
    }
}

#[async_trait]
impl ReplayStore for MemoryReplayStore {
    async fn claim(&self, claim: NonceClaim) -> Result<ClaimOutcome, StoreError> {
        let now_ms = self.clock.now_ms();
        let mut ledger = self.lock();
        match ledger.reserve(&claim, Entry::Consumed(claim.record.clone()), now_ms, self.limits) {
            Ok(()) => Ok(ClaimOutcome::Claimed),
            Err(refused) => Ok(refused),
        }
    }

    async fn claim_and_delete(
        &self,
        claim: NonceClaim,
        note_id: &str,
        revision: &str,
        workspace: &FileUri,
    ) -> Result<ClaimAndDelete, StoreError> {
        let now_ms = self.clock.now_ms();
        if let Err(refused) = self.lock().reserve(&claim, Entry::Pending, now_ms, self.limits) {
            return Ok(match refused {
                ClaimOutcome::AlreadyClaimed { record } => ClaimAndDelete::AlreadyClaimed { record },
                ClaimOutcome::Full => ClaimAndDelete::Full,
                ClaimOutcome::Expired => ClaimAndDelete::Expired,
                ClaimOutcome::Claimed => unreachable!("reserve refuses only with AlreadyClaimed, Expired or Full"),
            });
        }
        let deleted = self.notes.delete_if_inside(note_id, revision, workspace).await;
        let mut ledger = self.lock();
        match deleted {
            Ok(GuardedDelete::Deleted(note)) => {
                // Re-index too: a delete slow enough to outlive its state's retention was pruned meanwhile,
                // and its record must still expire like any other.
                ledger.insert(&claim, Entry::Consumed(claim.record.clone()));
                Ok(ClaimAndDelete::Deleted(note))
            }
            other => {
                // Release: nothing was deleted, so nothing is consumed.
                ledger.release(&claim);
                match other {
                    Ok(GuardedDelete::Gone) => Ok(ClaimAndDelete::NoteGone),
                    Ok(GuardedDelete::OutsideWorkspace) => Ok(ClaimAndDelete::NoteOutsideWorkspace),
                    Err(error) => Err(error),
                    Ok(GuardedDelete::Deleted(_)) => unreachable!("handled above"),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    struct TestClock(AtomicU64);
    impl Clock for TestClock {
        fn now_ms(&self) -> u64 {
            self.0.load(Ordering::SeqCst)
        }
    }

    fn note(id: &str, uri: &str) -> Note {
        Note { id: id.into(), title: format!("title {id}"), uri: uri.into(), body: String::new(), revision: String::new() }
    }

    fn fixture(capacity: usize) -> (Arc<MemoryNoteStore>, Arc<TestClock>, MemoryReplayStore) {
        let notes = Arc::new(MemoryNoteStore::new(vec![note("n1", "file:///w/a.md"), note("n2", "file:///w/b.md")]));
        let clock = Arc::new(TestClock(AtomicU64::new(1_000)));
        let replay = MemoryReplayStore::new(notes.clone(), clock.clone(), ReplayLimits::with_share(capacity, 100, 100));
        (notes, clock, replay)
    }

    fn claim(nonce: &str, expires_at_ms: u64) -> NonceClaim {
        NonceClaim { nonce: nonce.into(), principal: "alice".into(), expires_at_ms, record: ClaimRecord::Declined { tool: None } }
    }

    fn workspace() -> FileUri {
        FileUri::parse("file:///w").unwrap()
    }

    #[tokio::test]
    async fn a_guarded_delete_needs_the_revision_the_form_showed() {
        let (notes, _, _) = fixture(10);
        // Seeded notes have an empty revision: an empty one matches it, any other is another copy.
        assert_eq!(notes.delete_if_inside("n1", "copy-1", &workspace()).await, Ok(GuardedDelete::Gone));
        assert!(matches!(notes.delete_if_inside("n1", "", &workspace()).await, Ok(GuardedDelete::Deleted(n)) if n.id == "n1"));
        // After a swap the note is `copy-1`: the empty revision a form showed before no longer matches.
        assert!(notes.swap("n2"));
        assert_eq!(notes.delete_if_inside("n2", "", &workspace()).await, Ok(GuardedDelete::Gone));
        assert!(matches!(notes.delete_if_inside("n2", "copy-1", &workspace()).await, Ok(GuardedDelete::Deleted(n)) if n.id == "n2"));
    }

    #[tokio::test]
    async fn a_nonce_is_claimed_once() {
        let (_, _, replay) = fixture(10);
        assert_eq!(replay.claim(claim("x", 2_000)).await, Ok(ClaimOutcome::Claimed));
        assert_eq!(
            replay.claim(claim("x", 2_000)).await,
            Ok(ClaimOutcome::AlreadyClaimed { record: ClaimRecord::Declined { tool: None } })
        );
    }

    #[tokio::test]
    async fn full_store_fails_closed_until_entries_expire() {
        let (_, clock, replay) = fixture(2);
        replay.claim(claim("a", 2_000)).await.unwrap();
        replay.claim(claim("b", 5_000)).await.unwrap();
        assert_eq!(replay.claim(claim("c", 9_000)).await, Ok(ClaimOutcome::Full));
        // "a" expired at 2000 but is kept for the grace period (100 ms): still full at 2099.
        clock.0.store(2_099, Ordering::SeqCst);
        assert_eq!(replay.claim(claim("c", 9_000)).await, Ok(ClaimOutcome::Full));
        assert_eq!(
            replay.claim(claim("a", 2_000)).await,
            Ok(ClaimOutcome::AlreadyClaimed { record: ClaimRecord::Declined { tool: None } }),
            "an unexpired-plus-grace nonce is never evicted"
        );
        clock.0.store(2_100, Ordering::SeqCst);
        assert_eq!(replay.claim(claim("c", 9_000)).await, Ok(ClaimOutcome::Claimed));
        assert_eq!(
            replay.claim(claim("b", 5_000)).await,
            Ok(ClaimOutcome::AlreadyClaimed { record: ClaimRecord::Declined { tool: None } })
        );
        assert_eq!(replay.len(), 2);
    }

    #[test]
    fn a_stranded_pending_claim_neither_blocks_pruning_nor_outlives_its_retention() {
        let limits = ReplayLimits::with_share(2, 100, 100);
        let mut ledger = Ledger::default();
        ledger.reserve(&claim("stranded", 2_000), Entry::Pending, 1_000, limits).unwrap();
        ledger.reserve(&claim("declined", 3_000), Entry::Consumed(ClaimRecord::Declined { tool: None }), 1_000, limits).unwrap();
        assert_eq!(ledger.reserve(&claim("new", 9_000), Entry::Pending, 2_099, limits), Err(ClaimOutcome::Full));
        assert_eq!(
            ledger.reserve(&claim("stranded", 2_000), Entry::Pending, 2_099, limits),
            Err(ClaimOutcome::AlreadyClaimed { record: ClaimRecord::InProgress }),
            "within its retention a stranded claim refuses every retry"
        );
        assert_eq!(ledger.reserve(&claim("new", 9_000), Entry::Pending, 3_100, limits), Ok(()));
        assert_eq!(ledger.entries.keys().map(NonceKey::text).collect::<Vec<_>>(), ["new"], "both expired entries were pruned");
    }

    #[test]
    fn the_consumed_count_leaves_pending_claims_out_as_the_listing_does() {
        let notes = Arc::new(MemoryNoteStore::new(Vec::new()));
        let limits = ReplayLimits::with_share(8, 100, 100);
        let replay = MemoryReplayStore::new(notes, Arc::new(TestClock(AtomicU64::new(1_000))), limits);
        assert_eq!(replay.consumed_count(), 0);
        replay.lock().reserve(&claim("pending", 9_000), Entry::Pending, 1_000, limits).unwrap();
        replay
            .lock()
            .reserve(&claim("deleted", 9_000), Entry::Consumed(ClaimRecord::Deleted { note_id: "n1".into() }), 1_000, limits)
            .unwrap();
        replay.lock().reserve(&claim("cancelled", 9_000), Entry::Consumed(ClaimRecord::Cancelled), 1_000, limits).unwrap();
        assert_eq!(replay.len(), 3);
        assert_eq!(replay.consumed().len(), 2);
        assert_eq!(replay.consumed_count(), 2);
    }

    #[tokio::test]
    async fn a_principal_filling_its_share_leaves_the_others_working() {
        let notes = Arc::new(MemoryNoteStore::new(vec![note("n1", "file:///w/a.md")]));
        let clock = Arc::new(TestClock(AtomicU64::new(1_000)));
        let limits = ReplayLimits::with_share(4, 50, 100);
        assert_eq!(limits.principal_capacity, 2);
        let replay = MemoryReplayStore::new(notes, clock.clone(), limits);
        let of = |principal: &str, nonce: &str| NonceClaim { principal: principal.into(), ..claim(nonce, 2_000) };
        assert_eq!(replay.claim(of("bob", "b1")).await, Ok(ClaimOutcome::Claimed));
        assert_eq!(replay.claim(of("bob", "b2")).await, Ok(ClaimOutcome::Claimed));
        assert_eq!(replay.claim(of("bob", "b3")).await, Ok(ClaimOutcome::Full), "bob's share is full");
        assert_eq!(replay.claim(of("alice", "a1")).await, Ok(ClaimOutcome::Claimed), "alice is not bob");
        assert_eq!(replay.claim(of("carol", "c1")).await, Ok(ClaimOutcome::Claimed));
        assert_eq!(replay.claim(of("alice", "a2")).await, Ok(ClaimOutcome::Full), "the global bound is kept");
        assert!(matches!(replay.claim(of("alice", "b1")).await, Ok(ClaimOutcome::AlreadyClaimed { .. })), "a held nonce is reported");
        clock.0.store(2_100, Ordering::SeqCst);
        assert_eq!(
            replay.claim(NonceClaim { expires_at_ms: 9_000, ..of("bob", "b3") }).await,
            Ok(ClaimOutcome::Claimed),
            "expired entries give places back"
        );
        assert_eq!(replay.lock().held_by_name(), BTreeMap::from([("bob".to_string(), 1)]), "counts follow the entries");
    }

    #[test]
    fn records_and_nonces_read_back_as_they_were_written() {
        let limits = ReplayLimits::with_share(100, 100, 100);
        let mut ledger = Ledger::default();
        let records = [
            ClaimRecord::Deleted { note_id: "note-7".into() },
            ClaimRecord::Deleted { note_id: "a note id longer than twenty-two bytes, ünïcode".into() },
            ClaimRecord::Published { note_id: "note-3".into() },
            ClaimRecord::Declined { tool: None },
            ClaimRecord::Declined { tool: Some("notes.export".into()) },
            ClaimRecord::Confirmed { tool: "notes.export".into(), arguments_digest: "ab".repeat(32) },
            ClaimRecord::InProgress,
            ClaimRecord::Cancelled,
        ];
        // A drawn nonce, its non-canonical twin (same bytes, other last character), and free-form ones.
        let nonces = ["AAECAwQFBgcICQoLDA0ODw", "AAECAwQFBgcICQoLDA0ODx", "short", "x".repeat(40).leak()];
        assert_eq!(NonceKey::of(nonces[0]), NonceKey::Drawn(core::array::from_fn(|i| i as u8)));
        assert!(matches!(NonceKey::of(nonces[1]), NonceKey::Other(_)), "only the canonical spelling is compacted");
        for (n, nonce) in nonces.iter().enumerate() {
            for (r, record) in records.iter().enumerate() {
                let nonce = format!("{nonce}{}", if r == 0 { String::new() } else { format!("-{r}") });
                let nonce = if n == 0 && r == 0 { nonces[0].to_string() } else { format!("{n}{nonce}") };
                let claim = NonceClaim { record: record.clone(), ..claim(&nonce, 2_000) };
                ledger.reserve(&claim, Entry::Consumed(record.clone()), 1_000, limits).unwrap();
                assert_eq!(ledger.get(&nonce), Some(Entry::Consumed(record.clone())), "{nonce}");
                assert_eq!(NonceKey::of(&nonce).text(), nonce);
            }
        }
        assert_eq!(ledger.get("AAECAwQFBgcICQoLDA0ODx"), None, "the twin was never claimed");
    }

    #[tokio::test]
    async fn claim_and_delete_consumes_only_when_it_deletes() {
        let (notes, _, replay) = fixture(10);
        let deleted = replay.claim_and_delete(claim("x", 2_000), "n1", "", &workspace()).await.unwrap();
        assert!(matches!(deleted, ClaimAndDelete::Deleted(ref n) if n.id == "n1"));
        assert!(matches!(
            replay.claim_and_delete(claim("x", 2_000), "n2", "", &workspace()).await.unwrap(),
            ClaimAndDelete::AlreadyClaimed { .. }
        ));
        assert_eq!(notes.snapshot().len(), 1, "the second accept of one nonce deletes nothing");

        assert_eq!(replay.claim_and_delete(claim("y", 2_000), "n1", "", &workspace()).await.unwrap(), ClaimAndDelete::NoteGone);
        assert!(replay.record("y").is_none(), "a refused delete consumes nothing");
        notes.move_to("n2", "file:///elsewhere/b.md");
        assert_eq!(replay.claim_and_delete(claim("y", 2_000), "n2", "", &workspace()).await.unwrap(), ClaimAndDelete::NoteOutsideWorkspace);
        assert!(replay.record("y").is_none());
        notes.move_to("n2", "file:///w/sub/b.md");
        assert!(matches!(replay.claim_and_delete(claim("y", 2_000), "n2", "", &workspace()).await.unwrap(), ClaimAndDelete::Deleted(_)));
    }

    #[tokio::test]
    async fn prefix_sibling_is_outside_at_delete_time() {
        let (notes, _, replay) = fixture(10);
        notes.move_to("n1", "file:///w-evil/a.md");
        assert_eq!(replay.claim_and_delete(claim("x", 2_000), "n1", "", &workspace()).await.unwrap(), ClaimAndDelete::NoteOutsideWorkspace);
    }

    #[tokio::test]
    async fn racing_claims_from_many_threads_delete_once() {
        let (notes, _, replay) = fixture(10_000);
        let replay = Arc::new(replay);
        let mut tasks = Vec::new();
        for i in 0..32 {
            let replay = replay.clone();
            let id = if i % 2 == 0 { "n1" } else { "n2" };
            tasks.push(tokio::spawn(async move { replay.claim_and_delete(claim("same", 2_000), id, "", &workspace()).await.unwrap() }));
        }
        let mut deleted = 0;
        for task in tasks {
            if matches!(task.await.unwrap(), ClaimAndDelete::Deleted(_)) {
                deleted += 1;
            }
        }
        assert_eq!(deleted, 1);
        assert_eq!(notes.snapshot().len(), 1);
    }
}
