//! The contract every store kind must meet, written once against `stores::open` and the port traits. Each
//! kind's module instantiates it with `contract_tests!` (and `persistent_contract_tests!` for databases).
//! The expectations are the memory store's behaviour, which the simulator and handlers were built on.

use crate::support::TestClock;
use async_trait::async_trait;
use mcpsim::testing::open_with_durability;
use mcpsim::testing::Durability;
use mcpsim::testing::FileUri;
use mcpsim::testing::ReplayLimits;
use mcpsim::testing::{ClaimAndDelete, ClaimOutcome, ClaimRecord, GuardedDelete, NonceClaim, Note, NoteStore, StoreError};
use mcpsim::testing::{SeedReport, StoreSpec, Stores};
use std::sync::Arc;

/// A kind of store, able to provide fresh empty locations.
#[async_trait]
pub trait StoreKind: Send + Sync {
    async fn fresh(&self) -> StoreSpec;

    /// When the store acknowledges commits; the contract holds either way.
    fn durability(&self) -> Durability {
        Durability::Durable
    }
}

pub const START_MS: u64 = 1_000;
pub const GRACE_MS: u64 = 100;
/// Far beyond any test clock: these entries never become prunable.
pub const FAR_FUTURE_MS: u64 = 1 << 50;

/// A note as every store kind can hold it: the directory store derives the id from the file's path (`n1.md` is
/// `n1`) and the title from its first heading.
pub fn note(id: &str, uri: &str) -> Note {
    Note {
        id: id.into(),
        title: format!("title {id}"),
        uri: uri.into(),
        body: format!("# title {id}\n\nbody of {id}\n"),
        revision: String::new(),
    }
}

pub fn fixture_notes() -> Vec<Note> {
    vec![note("n1", "file:///w/n1.md"), note("n2", "file:///w/n2.md"), note("n3", "file:///w/n3.md")]
}

/// The notes with their revisions cleared: their content, to compare with the fixture.
pub fn without_revisions(notes: Vec<Note>) -> Vec<Note> {
    notes.into_iter().map(|note| Note { revision: String::new(), ..note }).collect()
}

/// The revision a store lists for `id` (what a form would bind); empty when the note is not listed.
pub async fn revision_in(stores: &Stores, id: &str) -> String {
    stores.notes.list_notes().await.unwrap().into_iter().find(|note| note.id == id).map(|note| note.revision).unwrap_or_default()
}

pub fn workspace() -> FileUri {
    FileUri::parse("file:///w").unwrap()
}

pub fn declined() -> ClaimRecord {
    ClaimRecord::Declined { tool: None }
}

pub fn deleted_record(note_id: &str) -> ClaimRecord {
    ClaimRecord::Deleted { note_id: note_id.to_string() }
}

pub fn claim(nonce: &str, expires_at_ms: u64, record: ClaimRecord) -> NonceClaim {
    NonceClaim { nonce: nonce.into(), principal: "alice".into(), expires_at_ms, record }
}

/// `claim` by another principal.
pub fn claim_of(principal: &str, nonce: &str, expires_at_ms: u64, record: ClaimRecord) -> NonceClaim {
    NonceClaim { principal: principal.into(), ..claim(nonce, expires_at_ms, record) }
}

pub struct Opened {
    pub spec: StoreSpec,
    pub durability: Durability,
    pub stores: Stores,
    pub clock: Arc<TestClock>,
    pub limits: ReplayLimits,
}

impl Opened {
    /// Another handle on the same store: for databases a separate open (own connections), for memory the same one.
    pub async fn another_handle(&self) -> Stores {
        match self.spec {
            StoreSpec::Memory => self.stores.clone(),
            _ => open_with_durability(&self.spec, self.clock.clone(), self.limits, self.durability).await.expect("reopen the store"),
        }
    }

    /// The revision this store lists for `id` (see [`revision_in`]).
    pub async fn revision(&self, id: &str) -> String {
        revision_in(&self.stores, id).await
    }

    /// The note as this store lists it (with its revision, if the store keeps one).
    pub async fn listed(&self, id: &str) -> Note {
        self.stores.notes.list_notes().await.unwrap().into_iter().find(|note| note.id == id).expect("the note is listed")
    }

    pub async fn ids(&self) -> Vec<String> {
        self.stores.admin.list().await.unwrap().into_iter().map(|n| n.id).collect()
    }

    pub async fn nonce_count(&self) -> u64 {
        self.stores.admin.nonce_count().await.unwrap()
    }
}

/// A fresh store of `kind` with the fixture notes, a clock at `START_MS`, and the given capacity.
pub async fn open_fresh(kind: &dyn StoreKind, capacity: usize) -> Opened {
    open_fresh_with(kind, ReplayLimits { capacity, principal_capacity: capacity, retention_grace_ms: GRACE_MS }).await
}

pub async fn open_fresh_with(kind: &dyn StoreKind, limits: ReplayLimits) -> Opened {
    let spec = kind.fresh().await;
    let clock = Arc::new(TestClock::at(START_MS));
    let durability = kind.durability();
    let stores = open_with_durability(&spec, clock.clone(), limits, durability).await.unwrap_or_else(|e| panic!("open {spec}: {e}"));
    stores.admin.seed(&fixture_notes()).await.expect("seed the fixture");
    Opened { spec, durability, stores, clock, limits }
}

pub async fn claims_once_and_returns_the_record(kind: &dyn StoreKind) {
    let store = open_fresh(kind, 10).await;
    let replay = &store.stores.replay;
    assert_eq!(replay.claim(claim("x", 2_000, declined())).await, Ok(ClaimOutcome::Claimed));
    assert_eq!(replay.claim(claim("x", 2_000, declined())).await, Ok(ClaimOutcome::AlreadyClaimed { record: declined() }));
    assert_eq!(
        replay.claim_and_delete(claim("x", 2_000, deleted_record("n1")), "n1", &store.revision("n1").await, &workspace()).await,
        Ok(ClaimAndDelete::AlreadyClaimed { record: declined() }),
        "a declined confirmation cannot be turned into a delete"
    );
    assert_eq!(store.ids().await, ["n1", "n2", "n3"]);
    assert_eq!(store.nonce_count().await, 1);
    assert_eq!(store.stores.admin.nonce_record("x").await, Ok(Some(declined())));
    assert_eq!(store.stores.admin.nonce_record("never").await, Ok(None));
}

pub async fn claim_and_delete_consumes_only_when_it_deletes(kind: &dyn StoreKind) {
    let store = open_fresh(kind, 10).await;
    let n1 = store.listed("n1").await;
    let (replay, admin) = (&store.stores.replay, &store.stores.admin);
    let deleted =
        replay.claim_and_delete(claim("x", 2_000, deleted_record("n1")), "n1", &store.revision("n1").await, &workspace()).await.unwrap();
    assert_eq!(deleted, ClaimAndDelete::Deleted(n1), "the deleted note is returned whole");
    assert_eq!(
        replay.claim_and_delete(claim("x", 2_000, deleted_record("n2")), "n2", &store.revision("n2").await, &workspace()).await,
        Ok(ClaimAndDelete::AlreadyClaimed { record: deleted_record("n1") })
    );
    assert_eq!(store.ids().await, ["n2", "n3"], "the second accept of one nonce deletes nothing");

    assert_eq!(
        replay.claim_and_delete(claim("y", 2_000, deleted_record("n1")), "n1", &store.revision("n1").await, &workspace()).await,
        Ok(ClaimAndDelete::NoteGone)
    );
    assert_eq!(admin.nonce_record("y").await, Ok(None), "a refused delete consumes nothing");
    assert!(admin.move_to("n2", "file:///elsewhere/b.md").await.unwrap());
    assert_eq!(
        replay.claim_and_delete(claim("y", 2_000, deleted_record("n2")), "n2", &store.revision("n2").await, &workspace()).await,
        Ok(ClaimAndDelete::NoteOutsideWorkspace)
    );
    assert_eq!(admin.nonce_record("y").await, Ok(None));
    assert_eq!(store.nonce_count().await, 1);
    assert!(admin.move_to("n2", "file:///w/sub/b.md").await.unwrap());
    assert!(matches!(
        replay.claim_and_delete(claim("y", 2_000, deleted_record("n2")), "n2", &store.revision("n2").await, &workspace()).await,
        Ok(ClaimAndDelete::Deleted(ref note)) if note.uri == "file:///w/sub/b.md"
    ));
    assert_eq!(admin.nonce_record("y").await, Ok(Some(deleted_record("n2"))));
    assert_eq!(store.nonce_count().await, 2);
    assert_eq!(store.ids().await, ["n3"]);
}

pub async fn moved_and_prefix_sibling_notes_are_outside(kind: &dyn StoreKind) {
    let store = open_fresh(kind, 10).await;
    let (replay, admin) = (&store.stores.replay, &store.stores.admin);
    for outside in ["file:///w-evil/a.md", "file:///wx", "file:///w/../etc/a.md", "file://otherhost/w/a.md", "http://w/a.md", "garbage"] {
        assert!(admin.move_to("n1", outside).await.unwrap());
        assert_eq!(
            replay.claim_and_delete(claim("x", 2_000, deleted_record("n1")), "n1", &store.revision("n1").await, &workspace()).await,
            Ok(ClaimAndDelete::NoteOutsideWorkspace),
            "{outside} must count as outside file:///w"
        );
    }
    assert_eq!(store.nonce_count().await, 0, "no refusal consumed the nonce");
    assert_eq!(store.ids().await, ["n1", "n2", "n3"], "nothing was deleted");
    assert!(admin.move_to("n1", "file://localhost/w/%61.md").await.unwrap());
    assert!(matches!(
        replay.claim_and_delete(claim("x", 2_000, deleted_record("n1")), "n1", &store.revision("n1").await, &workspace()).await,
        Ok(ClaimAndDelete::Deleted(_))
    ));
}

/// Round 1's search answers from the store's index: exactly the notes inside the workspace whose title holds
/// the query (any case), in listing order, never a prefix sibling, another host or a traversal out (an
/// encoded slash is decoded first, as containment does); the index follows moves, renames, deletes and
/// upserts; the re-check by id lists the live ones.
pub async fn candidates_are_the_workspace_notes_matching_the_title(kind: &dyn StoreKind) {
    let store = open_fresh(kind, 10).await;
    let (notes, admin) = (&store.stores.notes, &store.stores.admin);
    let titled = |id: &str, title: &str, uri: &str| Note { title: title.into(), ..note(id, uri) };
    for extra in [
        titled("in-sub", "Weekly PLAN", "file:///w/sub/deep/p.md"),
        titled("in-encoded", "plan, encoded", "file://localhost/w/%70lan.md"),
        titled("sibling", "plan", "file:///w-evil/plan.md"),
        titled("prefix", "plan", "file:///wx/plan.md"),
        // Decoded before it is split (GUARANTEES.md §1.2): /w/x/plan.md, inside.
        titled("slash", "plan", "file:///w%2Fx/plan.md"),
        titled("climbs", "plan", "file:///w/../etc/plan.md"),
        titled("host", "plan", "file://otherhost/w/plan.md"),
        titled("garbage", "plan", "not a uri"),
        titled("other-title", "groceries", "file:///w/g.md"),
        titled("unicode", "ÉTÉ PLANS", "file:///w/ete.md"),
    ] {
        admin.upsert(extra).await.unwrap();
    }
    let ids = |found: Vec<Note>| found.into_iter().map(|note| note.id).collect::<Vec<_>>();
    let find = |query: &'static str| async move { ids(notes.find_candidates(&workspace(), query).await.unwrap()) };
    assert_eq!(find("plan").await, ["in-sub", "in-encoded", "slash", "unicode"]);
    assert_eq!(find("été").await, ["unicode"], "case folding is Unicode's, not ASCII's");
    assert_eq!(find("TITLE").await, ["n1", "n2", "n3"]);
    let root = FileUri::parse("file:///").unwrap();
    assert_eq!(
        ids(notes.find_candidates(&root, "plan").await.unwrap()),
        ["in-sub", "in-encoded", "sibling", "prefix", "slash", "climbs", "unicode"]
    );
    let sub = FileUri::parse("file:///w/sub").unwrap();
    assert_eq!(ids(notes.find_candidates(&sub, "plan").await.unwrap()), ["in-sub"]);

    assert!(admin.move_to("in-sub", "file:///w-evil/p.md").await.unwrap());
    assert!(admin.move_to("sibling", "file:///w/back.md").await.unwrap());
    assert!(admin.rename("in-encoded", "no longer").await.unwrap());
    assert!(admin.remove("unicode").await.unwrap());
    admin.upsert(titled("other-title", "plan now", "file:///w/g.md")).await.unwrap();
    assert_eq!(find("plan").await, ["sibling", "slash", "other-title"], "the index follows every change");

    let wanted: Vec<String> = ["n3", "gone", "n1", "in-sub"].map(String::from).to_vec();
    let live = notes.notes_by_ids(&wanted).await.unwrap();
    assert_eq!(ids(live.clone()), ["n1", "n3", "in-sub"], "listing order, absent ids left out");
    assert_eq!(live[0].uri, "file:///w/n1.md");
}

/// The store's search against the default `NoteStore::find_candidates` (a scan of the listing) on random titles
/// (ASCII and not: `İ` folds to two chars, `ß`, `Σ`, CJK of three UTF-8 bytes, and `%`, `_`, `"`, `*`, `[`,
/// `\`, which a SQL pattern or an FTS query would take for syntax), queries of 0 to 5 chars (random, or a
/// slice of a title in another case), in three workspaces, after rounds of upserts, renames, moves, copies,
/// guarded deletes and removals: the same notes in the same order, every time. Cases come from proptest's
/// deterministic runner (the same every run).
pub async fn search_is_the_default_search_on_random_titles(kind: &dyn StoreKind) {
    use proptest::strategy::{Strategy, ValueTree};
    use proptest::test_runner::TestRunner;
    let store = open_fresh(kind, 10).await;
    let (notes, admin) = (&store.stores.notes, &store.stores.admin);
    let mut runner = TestRunner::deterministic();
    let mut draw = |strategy: proptest::strategy::BoxedStrategy<String>| strategy.new_tree(&mut runner).unwrap().current();
    let title = || r#"[aAbB c%_"*\[\\İßΣσé日本-]{0,10}"#.boxed();
    let places = ["file:///w/", "file:///w/sub/", "file:///w-evil/", "file:///x/"];
    let workspaces = ["file:///w", "file:///w/sub", "file:///"].map(|uri| FileUri::parse(uri).unwrap());
    let pick = |text: &str, n: usize| text.bytes().fold(7usize, |h, b| h.wrapping_mul(31).wrapping_add(usize::from(b))) % n;
    let mut ids: Vec<String> = Vec::new();
    // More notes than a database compares one by one before it asks its trigram index (SQLite: 16), so a
    // search of the whole store (`file:///`) takes the index's path, and one of `file:///w/sub` the scan's
    // while it holds 16 notes or fewer.
    for k in 0..300 {
        let id = format!("fill-{k}");
        admin
            .upsert(Note {
                id: id.clone(),
                title: draw(title()),
                uri: format!("file:///x/fill/{id}.md"),
                body: String::new(),
                revision: String::new(),
            })
            .await
            .unwrap();
        ids.push(id);
    }
    for round in 0..6 {
        for k in 0..12 {
            let id = format!("r{round}-{k}");
            let t = draw(title());
            let uri = format!("{}{id}.md", places[pick(&t, places.len())]);
            admin.upsert(Note { id: id.clone(), title: t, uri, body: String::new(), revision: String::new() }).await.unwrap();
            ids.push(id);
        }
        for k in 0..8 {
            let salt = draw(title());
            let id = ids[pick(&format!("{salt}{k}"), ids.len())].clone();
            match (pick(&salt, 6) + k) % 6 {
                0 => drop(admin.rename(&id, &draw(title())).await.unwrap()),
                1 => drop(admin.move_to(&id, &format!("{}{id}.md", places[pick(&id, places.len())])).await.unwrap()),
                2 if admin.keeps_revisions() => drop(admin.swap(&id).await.unwrap()),
                3 => drop(admin.remove(&id).await.unwrap()),
                4 => drop(notes.delete_if_inside(&id, &store.revision(&id).await, &workspaces[0]).await.unwrap()),
                _ => admin
                    .upsert(Note {
                        id: id.clone(),
                        title: salt,
                        uri: format!("file:///w/{id}.md"),
                        body: String::new(),
                        revision: String::new(),
                    })
                    .await
                    .unwrap(),
            }
        }
        let listing = notes.list_notes().await.unwrap();
        let mut queries: Vec<String> = (0..10).map(|_| draw(r#"[aAbB c%_"*\[\\İßΣé日-]{0,5}"#.boxed())).collect();
        for note in listing.iter().filter(|note| !note.id.starts_with("fill-")).chain(listing.iter().step_by(10)) {
            let chars: Vec<char> = note.title.chars().collect();
            let from = pick(&note.id, chars.len().max(1)).min(chars.len());
            // Up to 7 characters: SQLite asks its index for a cover of 1, 2 or 3 of the query's trigrams.
            for len in 1..=7 {
                queries.push(chars[from..(from + len).min(chars.len())].iter().collect::<String>().to_uppercase());
            }
        }
        let default = DefaultSearch(listing);
        for workspace in &workspaces {
            for query in &queries {
                let found: Vec<String> = notes.find_candidates(workspace, query).await.unwrap().into_iter().map(|n| n.id).collect();
                let expected: Vec<String> = default.find_candidates(workspace, query).await.unwrap().into_iter().map(|n| n.id).collect();
                assert_eq!(found, expected, "round {round}: {query:?} in {workspace}");
            }
        }
    }
}

/// A store that has only a listing: its search is `NoteStore`'s default.
struct DefaultSearch(Vec<Note>);

#[async_trait]
impl NoteStore for DefaultSearch {
    async fn list_notes(&self) -> Result<Vec<Note>, StoreError> {
        Ok(self.0.clone())
    }

    async fn delete_if_inside(&self, _: &str, _: &str, _: &FileUri) -> Result<GuardedDelete, StoreError> {
        Ok(GuardedDelete::Gone)
    }
}

pub async fn full_store_fails_closed_until_entries_expire(kind: &dyn StoreKind) {
    let store = open_fresh(kind, 2).await;
    let n1 = store.listed("n1").await;
    let replay = &store.stores.replay;
    assert_eq!(replay.claim(claim("a", 2_000, declined())).await, Ok(ClaimOutcome::Claimed));
    assert_eq!(replay.claim(claim("b", 5_000, declined())).await, Ok(ClaimOutcome::Claimed));
    assert_eq!(replay.claim(claim("c", 9_000, declined())).await, Ok(ClaimOutcome::Full));
    assert_eq!(
        replay.claim_and_delete(claim("c", 9_000, deleted_record("n1")), "n1", &store.revision("n1").await, &workspace()).await,
        Ok(ClaimAndDelete::Full)
    );
    assert_eq!(store.ids().await, ["n1", "n2", "n3"], "a full store deletes nothing");
    // "a" expired at 2000 but is kept for the grace period (100 ms): still full at 2099.
    store.clock.set(2_099);
    assert_eq!(replay.claim(claim("c", 9_000, declined())).await, Ok(ClaimOutcome::Full));
    assert_eq!(
        replay.claim(claim("a", 2_000, declined())).await,
        Ok(ClaimOutcome::AlreadyClaimed { record: declined() }),
        "an unexpired-plus-grace nonce is never evicted"
    );
    assert_eq!(store.nonce_count().await, 2);
    store.clock.set(2_100);
    assert_eq!(
        replay.claim_and_delete(claim("c", 9_000, deleted_record("n1")), "n1", &store.revision("n1").await, &workspace()).await,
        Ok(ClaimAndDelete::Deleted(n1))
    );
    assert_eq!(replay.claim(claim("b", 5_000, declined())).await, Ok(ClaimOutcome::AlreadyClaimed { record: declined() }));
    assert_eq!(replay.claim(claim("d", 9_000, declined())).await, Ok(ClaimOutcome::Full), "b and c are live: full again");
    assert_eq!(store.nonce_count().await, 2);
    assert_eq!(store.stores.admin.nonce_record("a").await, Ok(None), "a was pruned");
}

/// One principal filling its share of the capacity is refused while the others keep claiming; the global
/// bound still holds; expired entries give their principal's places back; a handle of its own (another
/// process) sees the same counts.
pub async fn a_principal_filling_its_share_leaves_the_others_working(kind: &dyn StoreKind) {
    let store = open_fresh_with(kind, ReplayLimits { capacity: 4, principal_capacity: 2, retention_grace_ms: GRACE_MS }).await;
    let replay = &store.stores.replay;
    let other = store.another_handle().await;
    assert_eq!(replay.claim(claim_of("bob", "b1", 2_000, declined())).await, Ok(ClaimOutcome::Claimed));
    assert_eq!(other.replay.claim(claim_of("bob", "b2", 2_000, declined())).await, Ok(ClaimOutcome::Claimed));
    assert_eq!(replay.claim(claim_of("bob", "b3", 9_000, declined())).await, Ok(ClaimOutcome::Full), "bob's share is full");
    assert_eq!(
        other
            .replay
            .claim_and_delete(claim_of("bob", "b3", 9_000, deleted_record("n1")), "n1", &store.revision("n1").await, &workspace())
            .await,
        Ok(ClaimAndDelete::Full),
        "on every handle"
    );
    assert_eq!(
        replay
            .claim_and_delete(claim_of("alice", "a1", 9_000, deleted_record("n1")), "n1", &store.revision("n1").await, &workspace())
            .await,
        Ok(ClaimAndDelete::Deleted(fixture_notes()[0].clone())),
        "alice is not bob"
    );
    assert_eq!(replay.claim(claim_of("carol", "c1", 9_000, declined())).await, Ok(ClaimOutcome::Claimed));
    assert_eq!(replay.claim(claim_of("alice", "a2", 9_000, declined())).await, Ok(ClaimOutcome::Full), "the global bound is kept");
    assert_eq!(store.nonce_count().await, 4);
    // bob's two expire (plus the grace): his places come back, and the others' entries stay.
    store.clock.set(2_100);
    assert_eq!(other.replay.claim(claim_of("bob", "b3", 9_000, declined())).await, Ok(ClaimOutcome::Claimed));
    assert_eq!(replay.claim(claim_of("bob", "b4", 9_000, declined())).await, Ok(ClaimOutcome::Claimed));
    assert_eq!(replay.claim(claim_of("bob", "b5", 9_000, declined())).await, Ok(ClaimOutcome::Full), "two of bob's again");
    assert_eq!(store.stores.admin.nonce_record("a1").await, Ok(Some(deleted_record("n1"))));
    assert_eq!(store.stores.admin.nonce_record("b1").await, Ok(None), "b1 was pruned");
    assert_eq!(store.nonce_count().await, 4);
}

/// A claim the store can no longer judge is refused, by the store's own clock: its state's expiry plus the grace
/// has passed (the nonce, had it been used, may already be pruned). A nonce still held answers as held.
pub async fn claims_past_the_replay_window_are_refused(kind: &dyn StoreKind) {
    let store = open_fresh(kind, 10).await;
    let replay = &store.stores.replay;
    assert_eq!(replay.claim(claim("used", 2_000, declined())).await, Ok(ClaimOutcome::Claimed));
    store.clock.set(2_100);
    assert_eq!(replay.claim(claim("late", 2_000, declined())).await, Ok(ClaimOutcome::Expired), "2000 + grace 100 <= 2100");
    assert_eq!(
        replay.claim_and_delete(claim("late", 2_000, deleted_record("n1")), "n1", &store.revision("n1").await, &workspace()).await,
        Ok(ClaimAndDelete::Expired)
    );
    assert_eq!(replay.claim(claim("just", 2_001, declined())).await, Ok(ClaimOutcome::Claimed), "2001 + 100 > 2100");
    assert_eq!(
        replay.claim(claim("used", 2_000, declined())).await,
        Ok(ClaimOutcome::AlreadyClaimed { record: declined() }),
        "a nonce still held says what it did, however late"
    );
    assert_eq!(store.ids().await, ["n1", "n2", "n3"], "a refused claim deletes nothing");
    assert_eq!(store.nonce_count().await, 2, "a refused claim consumes nothing");
}

/// Once nonces expiring up to some time were pruned, no handle may claim a state expiring by then, whatever
/// its own clock says: a process whose clock lags cannot get a pruned (used) confirmation accepted again.
pub async fn pruned_nonces_stay_refused_for_a_lagging_clock(kind: &dyn StoreKind) {
    let store = open_fresh(kind, 1).await;
    let n1 = store.listed("n1").await;
    let replay = &store.stores.replay;
    assert_eq!(
        replay.claim_and_delete(claim("first", 2_000, deleted_record("n1")), "n1", &store.revision("n1").await, &workspace()).await,
        Ok(ClaimAndDelete::Deleted(n1))
    );
    store.clock.set(2_200);
    // The only slot holds "first", past its window: claiming another prunes it.
    assert_eq!(replay.claim(claim("second", 9_000, declined())).await, Ok(ClaimOutcome::Claimed));
    assert_eq!(store.stores.admin.nonce_record("first").await, Ok(None), "first was pruned");
    // Another handle whose clock is far behind (for databases, another process's connections).
    let lagging_clock = Arc::new(TestClock::at(1_500));
    let lagging = match &store.spec {
        StoreSpec::Memory => {
            store.clock.set(1_500);
            store.stores.clone()
        }
        spec => open_with_durability(spec, lagging_clock, store.limits, store.durability).await.expect("reopen"),
    };
    assert_eq!(
        lagging.replay.claim_and_delete(claim("first", 2_000, deleted_record("n2")), "n2", &store.revision("n2").await, &workspace()).await,
        Ok(ClaimAndDelete::Expired),
        "by its own clock the state is unexpired, but the store pruned its nonce: refused"
    );
    assert_eq!(store.ids().await, ["n2", "n3"], "one confirmation, one deletion");
}

pub async fn delete_if_inside_rechecks_the_live_note(kind: &dyn StoreKind) {
    let store = open_fresh(kind, 10).await;
    let notes = &store.stores.notes;
    assert_eq!(notes.delete_if_inside("missing", "", &workspace()).await, Ok(GuardedDelete::Gone));
    store.stores.admin.move_to("n1", "file:///w-evil/a.md").await.unwrap();
    assert_eq!(notes.delete_if_inside("n1", &store.revision("n1").await, &workspace()).await, Ok(GuardedDelete::OutsideWorkspace));
    let (n2, revision) = (store.listed("n2").await, store.revision("n2").await);
    assert_eq!(notes.delete_if_inside("n2", &revision, &workspace()).await, Ok(GuardedDelete::Deleted(n2)));
    assert_eq!(notes.delete_if_inside("n2", &revision, &workspace()).await, Ok(GuardedDelete::Gone));
    assert_eq!(store.ids().await, ["n1", "n3"]);
    assert_eq!(store.nonce_count().await, 0, "the note store alone consumes no nonce");
}

pub async fn listing_order_is_stable(kind: &dyn StoreKind) {
    let store = open_fresh(kind, 10).await;
    let admin = &store.stores.admin;
    assert_eq!(store.stores.notes.list_notes().await.unwrap(), fixture_notes());
    admin.upsert(Note { title: "renamed".into(), ..note("n2", "file:///w/b2.md") }).await.unwrap();
    assert_eq!(store.ids().await, ["n1", "n2", "n3"], "replacing a note keeps its place");
    admin.upsert(note("n0", "file:///w/0.md")).await.unwrap();
    assert_eq!(store.ids().await, ["n1", "n2", "n3", "n0"], "a new note goes last");
    assert!(admin.remove("n1").await.unwrap());
    assert!(!admin.remove("n1").await.unwrap());
    admin.upsert(note("n1", "file:///w/a.md")).await.unwrap();
    assert_eq!(store.ids().await, ["n2", "n3", "n0", "n1"], "a re-added note goes last");
    assert!(admin.rename("n3", "new title").await.unwrap());
    assert!(!admin.rename("missing", "x").await.unwrap());
    assert!(!admin.move_to("missing", "file:///w/x.md").await.unwrap());
    let listed = store.stores.notes.list_notes().await.unwrap();
    assert_eq!(listed[0].title, "renamed");
    assert_eq!(listed[0].uri, "file:///w/b2.md");
    assert_eq!(listed[1].title, "new title");
}

pub async fn seed_is_idempotent_and_restores(kind: &dyn StoreKind) {
    let store = open_fresh(kind, 10).await;
    let admin = &store.stores.admin;
    admin.remove("n2").await.unwrap();
    admin.rename("n1", "changed").await.unwrap();
    admin.upsert(note("extra", "file:///w/extra.md")).await.unwrap();
    let report = admin.seed(&fixture_notes()).await.unwrap();
    assert_eq!(report, SeedReport { inserted: 1, updated: 1, unchanged: 1, others_kept: 1, reordered: true });
    let mut expected = fixture_notes();
    expected.push(note("extra", "file:///w/extra.md"));
    assert_eq!(admin.list().await.unwrap(), expected, "seeded notes first, in order, then the others");
    let again = admin.seed(&fixture_notes()).await.unwrap();
    assert_eq!(again, SeedReport { inserted: 0, updated: 0, unchanged: 3, others_kept: 1, reordered: false });
    assert_eq!(admin.list().await.unwrap(), expected);
}

/// Many tasks, over several handles (separate connection pools for databases), accept one confirmation at once.
pub async fn racing_tasks_on_one_nonce_delete_once(kind: &dyn StoreKind) {
    const HANDLES: usize = 4;
    const TASKS: usize = 32;
    let store = open_fresh(kind, 10_000).await;
    let mut handles = Vec::new();
    for _ in 0..HANDLES {
        handles.push(store.another_handle().await);
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(TASKS));
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let replay = handles[task % HANDLES].replay.clone();
        let barrier = barrier.clone();
        let id = ["n1", "n2", "n3"][task % 3];
        let revision = store.revision(id).await;
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            replay.claim_and_delete(claim("same", FAR_FUTURE_MS, deleted_record(id)), id, &revision, &workspace()).await
        }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        match task.await.unwrap().unwrap() {
            ClaimAndDelete::Deleted(note) => winners.push(note.id),
            // A racer arriving while the winner's claim is still pending sees `in_progress` (the memory store);
            // one arriving after the commit (or serialized behind it, as the databases do) sees `deleted`.
            ClaimAndDelete::AlreadyClaimed { record } => {
                assert!(matches!(record, ClaimRecord::Deleted { .. } | ClaimRecord::InProgress), "a losing racer saw {record:?}")
            }
            other => panic!("a racer got {other:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one racer deletes");
    assert_eq!(store.nonce_count().await, 1);
    assert_eq!(store.stores.admin.nonce_record("same").await.unwrap(), Some(deleted_record(&winners[0])));
    assert_eq!(store.ids().await.len(), 2);
    assert!(!store.ids().await.contains(&winners[0]));
}

/// Many tasks with different nonces race to delete one note: one deletes, the rest find it gone and consume nothing.
pub async fn racing_nonces_on_one_note_delete_once(kind: &dyn StoreKind) {
    const HANDLES: usize = 4;
    const TASKS: usize = 16;
    let store = open_fresh(kind, 10_000).await;
    let mut handles = Vec::new();
    for _ in 0..HANDLES {
        handles.push(store.another_handle().await);
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(TASKS));
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let replay = handles[task % HANDLES].replay.clone();
        let barrier = barrier.clone();
        let revision = store.revision("n1").await;
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let nonce = format!("nonce-{task}");
            (
                nonce.clone(),
                replay.claim_and_delete(claim(&nonce, FAR_FUTURE_MS, deleted_record("n1")), "n1", &revision, &workspace()).await,
            )
        }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        let (nonce, outcome) = task.await.unwrap();
        match outcome.unwrap() {
            ClaimAndDelete::Deleted(_) => winners.push(nonce),
            ClaimAndDelete::NoteGone => assert_eq!(store.stores.admin.nonce_record(&nonce).await, Ok(None)),
            other => panic!("a racer got {other:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one racer deletes");
    assert_eq!(store.nonce_count().await, 1, "only the winner's nonce is consumed");
    assert_eq!(store.ids().await, ["n2", "n3"]);
}

/// Reopening a database (a restart) keeps notes, consumed nonces and the schema; migration runs once.
pub async fn restart_keeps_everything(kind: &dyn StoreKind) {
    let store = open_fresh(kind, 10).await;
    store
        .stores
        .replay
        .claim_and_delete(claim("x", 2_000, deleted_record("n1")), "n1", &store.revision("n1").await, &workspace())
        .await
        .unwrap();
    store.stores.replay.claim(claim("y", 2_000, declined())).await.unwrap();
    let Opened { spec, durability, stores, clock, limits } = store;
    drop(stores);
    let reopened = open_with_durability(&spec, clock.clone(), limits, durability).await.expect("reopen after restart");
    assert_eq!(without_revisions(reopened.admin.list().await.unwrap()), fixture_notes()[1..]);
    assert_eq!(reopened.admin.nonce_count().await, Ok(2));
    assert_eq!(
        reopened
            .replay
            .claim_and_delete(claim("x", 2_000, deleted_record("n2")), "n2", &revision_in(&reopened, "n2").await, &workspace())
            .await,
        Ok(ClaimAndDelete::AlreadyClaimed { record: deleted_record("n1") })
    );
    assert_eq!(reopened.admin.seed(&fixture_notes()).await.unwrap().inserted, 1);
}

/// The out-of-band flows (URL-mode elicitation): shared by every handle, completed only by the principal,
/// once, before expiry; a refused attempt changes nothing.
pub async fn out_of_band_flows_complete_once_for_their_principal(kind: &dyn StoreKind) {
    use mcpsim::testing::{Completion, FlowStatus, OutOfBandFlow};
    let store = open_fresh(kind, 10_000).await;
    let other = store.another_handle().await;
    let flow = |reference: &str, expires_at_ms: u64| OutOfBandFlow {
        reference: reference.into(),
        principal: "alice".into(),
        tool: "notes_publish".into(),
        subject: "n1".into(),
        expires_at_ms,
    };
    let now = 1_000;
    store.stores.out_of_band.start(flow("r1", FAR_FUTURE_MS), now).await.unwrap();
    let seen = other.out_of_band.flow("r1").await.unwrap().expect("another handle sees the started flow");
    assert_eq!((seen.flow, seen.status), (flow("r1", FAR_FUTURE_MS), FlowStatus::Started));
    assert_eq!(other.out_of_band.complete("r1", "bob", now).await.unwrap(), Completion::NotYours);
    assert_eq!(store.stores.out_of_band.flow("r1").await.unwrap().unwrap().status, FlowStatus::Started, "refused: unchanged");
    assert_eq!(other.out_of_band.complete("nope", "alice", now).await.unwrap(), Completion::Unknown);
    assert_eq!(other.out_of_band.complete("r1", "alice", now).await.unwrap(), Completion::Completed);
    assert_eq!(store.stores.out_of_band.complete("r1", "alice", now).await.unwrap(), Completion::AlreadyCompleted);
    assert_eq!(store.stores.out_of_band.flow("r1").await.unwrap().unwrap().status, FlowStatus::Completed { by: "alice".into() });
    store.stores.out_of_band.start(flow("r2", now + 10), now).await.unwrap();
    assert_eq!(other.out_of_band.complete("r2", "alice", now + 10).await.unwrap(), Completion::Expired);
    assert_eq!(store.stores.out_of_band.flow("r2").await.unwrap().unwrap().status, FlowStatus::Started);
}

/// Many tasks over several handles submit one flow's page at once: exactly one completes it.
pub async fn racing_completions_complete_once(kind: &dyn StoreKind) {
    use mcpsim::testing::{Completion, OutOfBandFlow};
    const HANDLES: usize = 4;
    const TASKS: usize = 16;
    let store = open_fresh(kind, 10_000).await;
    let flow = OutOfBandFlow {
        reference: "shared".into(),
        principal: "alice".into(),
        tool: "notes_publish".into(),
        subject: "n1".into(),
        expires_at_ms: FAR_FUTURE_MS,
    };
    store.stores.out_of_band.start(flow, 0).await.unwrap();
    let mut handles = Vec::new();
    for _ in 0..HANDLES {
        handles.push(store.another_handle().await);
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(TASKS));
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let flows = handles[task % HANDLES].out_of_band.clone();
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            flows.complete("shared", "alice", 1).await
        }));
    }
    let mut completed = 0;
    for task in tasks {
        match task.await.unwrap().unwrap() {
            Completion::Completed => completed += 1,
            Completion::AlreadyCompleted => {}
            other => panic!("a racer got {other:?}"),
        }
    }
    assert_eq!(completed, 1, "exactly one submission completes the flow");
}

/// A principal holding its share of the out-of-band flows is refused another (`Full`, nothing recorded) on every
/// handle, while the others keep starting theirs; the whole store's bound is kept; its expired flows give its
/// places back (GUARANTEES.md §2.9).
pub async fn a_principal_holding_its_flow_share_leaves_the_others_starting(kind: &dyn StoreKind) {
    use mcpsim::testing::open_with_limits;
    use mcpsim::testing::{FlowStart, OutOfBandFlow};
    use mcpsim::testing::{OutOfBandLimits, OUT_OF_BAND_GRACE_MS};
    let spec = kind.fresh().await;
    let clock = Arc::new(TestClock::at(START_MS));
    let limits = ReplayLimits { capacity: 100, principal_capacity: 100, retention_grace_ms: GRACE_MS };
    let flow_limits = OutOfBandLimits::with_share(4, 50);
    let open = || open_with_limits(&spec, clock.clone(), limits, flow_limits, kind.durability());
    let one = open().await.unwrap_or_else(|e| panic!("open {spec}: {e}")).out_of_band;
    // A memory store is one process's: its other handle is itself.
    let two = if matches!(spec, StoreSpec::Memory) { one.clone() } else { open().await.unwrap().out_of_band };
    let flow = |reference: &str, principal: &str, expires_at_ms: u64| OutOfBandFlow {
        reference: reference.into(),
        principal: principal.into(),
        tool: "notes_publish".into(),
        subject: "n1".into(),
        expires_at_ms,
    };
    let now = START_MS;
    assert_eq!(one.start(flow("b1", "bob", 2_000), now).await, Ok(FlowStart::Started));
    assert_eq!(two.start(flow("b2", "bob", 2_000), now).await, Ok(FlowStart::Started));
    assert_eq!(one.start(flow("b3", "bob", FAR_FUTURE_MS), now).await, Ok(FlowStart::Full), "bob's share is full");
    assert_eq!(two.start(flow("b3", "bob", FAR_FUTURE_MS), now).await, Ok(FlowStart::Full), "on every handle");
    assert_eq!(two.flow("b3").await, Ok(None), "a refused start records nothing");
    assert_eq!(one.start(flow("a1", "alice", FAR_FUTURE_MS), now).await, Ok(FlowStart::Started), "alice is not bob");
    assert_eq!(two.start(flow("c1", "carol", FAR_FUTURE_MS), now).await, Ok(FlowStart::Started));
    assert_eq!(one.start(flow("a2", "alice", FAR_FUTURE_MS), now).await, Ok(FlowStart::Full), "the whole bound is kept");
    // bob's two expire (plus the grace): his places come back, the others' flows stay.
    let later = 2_000 + OUT_OF_BAND_GRACE_MS;
    assert_eq!(two.start(flow("b3", "bob", FAR_FUTURE_MS), later).await, Ok(FlowStart::Started));
    assert_eq!(one.flow("b1").await, Ok(None), "b1 was pruned");
    assert!(one.flow("a1").await.unwrap().is_some() && one.flow("c1").await.unwrap().is_some());
}

/// The out-of-band checks every store kind runs (the flows of `dir:` are its process's own, in memory).
macro_rules! out_of_band_contract_tests {
    (ignore = $why:literal, $kind:expr) => {
        $crate::contract::contract_tests!(@each_ignored $why, $kind;
            out_of_band_flows_complete_once_for_their_principal,
            racing_completions_complete_once,
            a_principal_holding_its_flow_share_leaves_the_others_starting,
        );
    };
    ($kind:expr) => {
        $crate::contract::contract_tests!(@each $kind;
            out_of_band_flows_complete_once_for_their_principal,
            racing_completions_complete_once,
            a_principal_holding_its_flow_share_leaves_the_others_starting,
        );
    };
}

pub(crate) use out_of_band_contract_tests;

/// The checks every store kind runs; `contract_tests!(ignore = "why", KIND)` marks each of them ignored.
macro_rules! contract_tests {
    (ignore = $why:literal, $kind:expr) => {
        $crate::contract::contract_tests!(@each_ignored $why, $kind;
            claims_once_and_returns_the_record,
            claim_and_delete_consumes_only_when_it_deletes,
            moved_and_prefix_sibling_notes_are_outside,
            candidates_are_the_workspace_notes_matching_the_title,
            search_is_the_default_search_on_random_titles,
            full_store_fails_closed_until_entries_expire,
            a_principal_filling_its_share_leaves_the_others_working,
            delete_if_inside_rechecks_the_live_note,
            listing_order_is_stable,
            seed_is_idempotent_and_restores,
            racing_tasks_on_one_nonce_delete_once,
            racing_nonces_on_one_note_delete_once,
        );
    };
    // A store whose notes are files (`dir:`): ids and titles come from paths and headings, the listing is in
    // path order, and a note cannot be moved out of its folder; the checks relying on free-form ids, insertion
    // order or moves anywhere are not run, and tests/stores/dir.rs checks the same rules the files' way.
    (files, $kind:expr) => {
        $crate::contract::contract_tests!(@each $kind;
            claims_once_and_returns_the_record,
            full_store_fails_closed_until_entries_expire,
            claims_past_the_replay_window_are_refused,
            pruned_nonces_stay_refused_for_a_lagging_clock,
            racing_tasks_on_one_nonce_delete_once,
            racing_nonces_on_one_note_delete_once,
        );
    };
    ($kind:expr) => {
        $crate::contract::contract_tests!(@each $kind;
            claims_once_and_returns_the_record,
            claim_and_delete_consumes_only_when_it_deletes,
            moved_and_prefix_sibling_notes_are_outside,
            candidates_are_the_workspace_notes_matching_the_title,
            search_is_the_default_search_on_random_titles,
            full_store_fails_closed_until_entries_expire,
            a_principal_filling_its_share_leaves_the_others_working,
            claims_past_the_replay_window_are_refused,
            pruned_nonces_stay_refused_for_a_lagging_clock,
            delete_if_inside_rechecks_the_live_note,
            listing_order_is_stable,
            seed_is_idempotent_and_restores,
            racing_tasks_on_one_nonce_delete_once,
            racing_nonces_on_one_note_delete_once,
        );
    };
    (@each $kind:expr; $($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $check() {
                $crate::contract::$check(&$kind).await;
            }
        )*
    };
    (@each_ignored $why:literal, $kind:expr; $($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            #[ignore = $why]
            async fn $check() {
                $crate::contract::$check(&$kind).await;
            }
        )*
    };
}

/// The checks only a store that outlives its process can run.
macro_rules! persistent_contract_tests {
    (ignore = $why:literal, $kind:expr) => {
        $crate::contract::contract_tests!(@each_ignored $why, $kind; restart_keeps_everything);
    };
    ($kind:expr) => {
        $crate::contract::contract_tests!(@each $kind; restart_keeps_everything);
    };
}

pub(crate) use contract_tests;
pub(crate) use persistent_contract_tests;
