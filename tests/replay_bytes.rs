//! What a held nonce costs the memory replay store, measured: this test binary's global allocator counts
//! the bytes live on the heap, and the store is filled with the claims a notes server commits (a 16-byte
//! drawn nonce, a principal, a deletion of `note-N`). The figure is heap bytes *requested* (what the ledger
//! and its trees ask for); the system allocator's own bookkeeping comes on top and is not counted.
//! A size, not a time: nothing here depends on the machine's speed.

use base64::Engine;
use mcpsim::testing::{ClaimOutcome, ClaimRecord, Clock, NonceClaim, ReplayStore};
use mcpsim::testing::{MemoryNoteStore, MemoryReplayStore, ReplayLimits, MEMORY_REPLAY_BYTES_PER_NONCE};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

struct Fixed;
impl Clock for Fixed {
    fn now_ms(&self) -> u64 {
        1_000
    }
}

/// A nonce as the notes server draws one: 16 bytes (here from a counter through SplitMix64), base64url.
fn drawn(n: u64) -> String {
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&mix(2 * n + 1).to_le_bytes());
    bytes[8..].copy_from_slice(&mix(2 * n + 2).to_le_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Heap bytes per held nonce after `count` consumed deletions (expiries spread like a steady stream's).
fn bytes_per_nonce(count: u64, principals: u64) -> f64 {
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let store = MemoryReplayStore::new(
        Arc::new(MemoryNoteStore::new(Vec::new())),
        Arc::new(Fixed),
        ReplayLimits::with_share(count as usize, 100, 60_000),
    );
    let principal_names: Vec<String> = (0..principals).map(|p| format!("principal-{p}")).collect();
    let before = LIVE.load(Ordering::SeqCst);
    runtime.block_on(async {
        for n in 0..count {
            let claim = NonceClaim {
                nonce: drawn(n),
                principal: principal_names[(n % principals) as usize].clone(),
                expires_at_ms: 300_000 + n / 10,
                record: ClaimRecord::Deleted { note_id: format!("note-{n}") },
            };
            assert_eq!(store.claim(claim).await, Ok(ClaimOutcome::Claimed));
        }
    });
    let after = LIVE.load(Ordering::SeqCst);
    assert_eq!(store.len(), count as usize);
    (after - before) as f64 / count as f64
}

#[test]
fn a_held_nonce_costs_at_most_200_bytes_in_memory() {
    for (count, principals) in [(100_000, 1), (300_000, 4)] {
        let per_nonce = bytes_per_nonce(count, principals);
        println!("{count} held nonces, {principals} principal(s): {per_nonce:.1} heap bytes each");
        assert!(
            per_nonce <= MEMORY_REPLAY_BYTES_PER_NONCE as f64,
            "{per_nonce:.1} bytes per held nonce; the memory store's default capacity assumes at most {MEMORY_REPLAY_BYTES_PER_NONCE}"
        );
    }
}
