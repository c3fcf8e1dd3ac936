//! Virtual time: the only time inside a simulation.
//!
//! The scheduler moves the clock forward when it delivers an envelope (to the envelope's delivery time) and
//! when a scenario says `advance`. Nothing in `sim/` reads the wall clock. Each instance sees the shared
//! virtual time plus its own fixed offset, which is how a scenario models clock skew between instances.

use crate::framework::ports::Clock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// 2026-07-28T00:00:00Z, the protocol revision's date. Virtual time starts here so sealed states carry
/// plausible timestamps; transcripts print time relative to it.
pub(crate) const VIRTUAL_EPOCH_MS: u64 = 1_785_196_800_000;

/// The shared virtual clock. Cloning shares it. Time only moves forward.
#[derive(Debug, Clone, Default)]
pub(crate) struct VirtualClock {
    elapsed_ms: Arc<AtomicU64>,
}

impl VirtualClock {
    pub fn new() -> Self {
        Self::default()
    }

    /// Milliseconds since the start of the simulation.
    pub(crate) fn elapsed_ms(&self) -> u64 {
        // One thread runs a simulation; the atomic only satisfies the `Clock: Sync` bound.
        self.elapsed_ms.load(Ordering::Relaxed)
    }

    /// Moves time forward to `elapsed_ms`; never backwards.
    pub(crate) fn advance_to(&self, elapsed_ms: u64) {
        self.elapsed_ms.fetch_max(elapsed_ms, Ordering::Relaxed);
    }

    pub(crate) fn advance_by(&self, duration_ms: u64) {
        self.advance_to(self.elapsed_ms().saturating_add(duration_ms));
    }

    /// The view of one instance (or store) whose clock is `offset_ms` ahead (negative: behind).
    pub(crate) fn with_offset(&self, offset_ms: i64) -> SkewedClock {
        SkewedClock { clock: self.clone(), offset_ms }
    }
}

impl Clock for VirtualClock {
    fn now_ms(&self) -> u64 {
        VIRTUAL_EPOCH_MS.saturating_add(self.elapsed_ms())
    }
}

/// Virtual time as one actor reads it: the shared clock plus a fixed skew.
#[derive(Debug, Clone)]
pub(crate) struct SkewedClock {
    clock: VirtualClock,
    offset_ms: i64,
}

impl Clock for SkewedClock {
    fn now_ms(&self) -> u64 {
        self.clock.now_ms().saturating_add_signed(self.offset_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_moves_forward_only_and_skew_is_fixed() {
        let clock = VirtualClock::new();
        let ahead = clock.with_offset(2_000);
        let behind = clock.with_offset(-500);
        assert_eq!(clock.now_ms(), VIRTUAL_EPOCH_MS);
        clock.advance_to(100);
        clock.advance_to(40);
        assert_eq!(clock.elapsed_ms(), 100, "advance_to never moves backwards");
        clock.advance_by(10);
        assert_eq!(ahead.now_ms(), VIRTUAL_EPOCH_MS + 2_110);
        assert_eq!(behind.now_ms(), VIRTUAL_EPOCH_MS + 110 - 500);
    }
}
