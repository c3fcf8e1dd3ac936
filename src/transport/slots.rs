//! Keyed places: a bound on what one key (a principal, a client address) holds and a bound on what all keys
//! hold together, checked in that order, each place given back when its [`Slot`] is dropped. Every capacity
//! bound of the HTTP transport with a share per key is one of these: connections per process and per client
//! address, requests in flight per listener and per principal (per client address off the MCP endpoint),
//! legacy calls waiting per listener and per principal.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// At most `share` places per key and `total` in all. A key has an entry only while it holds a place, so the
/// map is bounded by `total`.
#[derive(Debug)]
pub(crate) struct KeyedSlots<K: Ord + Clone> {
    share: usize,
    total: usize,
    held: Mutex<Held<K>>,
}

#[derive(Debug)]
struct Held<K> {
    by_key: BTreeMap<K, usize>,
    all: usize,
}

/// Why a place was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotRefusal {
    /// The key holds its share.
    Share,
    /// All keys together hold the total.
    Total,
}

/// One place: the key's and the total's, given back when dropped.
#[derive(Debug)]
pub(crate) struct Slot<K: Ord + Clone> {
    slots: Arc<KeyedSlots<K>>,
    key: K,
}

impl<K: Ord + Clone> KeyedSlots<K> {
    pub(crate) fn new(share: usize, total: usize) -> Arc<KeyedSlots<K>> {
        Arc::new(KeyedSlots { share, total, held: Mutex::new(Held { by_key: BTreeMap::new(), all: 0 }) })
    }

    fn lock(&self) -> MutexGuard<'_, Held<K>> {
        // A poisoned lock only means another thread panicked between two integer updates.
        self.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The most places one key holds.
    pub(crate) fn share(&self) -> usize {
        self.share
    }

    /// The most places all keys hold together.
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// Places held right now, by all keys.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.lock().all
    }

    /// A place for `key`: its share first (so a key over it is refused without touching the total), then the
    /// total. A refusal changes nothing.
    pub(crate) fn try_take(self: &Arc<Self>, key: &K) -> Result<Slot<K>, SlotRefusal> {
        let mut held = self.lock();
        let count = held.by_key.get(key).copied().unwrap_or(0);
        if count >= self.share {
            return Err(SlotRefusal::Share);
        }
        if held.all >= self.total {
            return Err(SlotRefusal::Total);
        }
        held.by_key.insert(key.clone(), count + 1);
        held.all += 1;
        Ok(Slot { slots: self.clone(), key: key.clone() })
    }

    #[cfg(test)]
    fn keys(&self) -> usize {
        self.lock().by_key.len()
    }
}

impl<K: Ord + Clone> Drop for Slot<K> {
    fn drop(&mut self) {
        let mut held = self.slots.lock();
        if let Some(count) = held.by_key.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                held.by_key.remove(&self.key);
            }
            held.all -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_holds_at_most_its_share() {
        let slots = KeyedSlots::new(2, 10);
        let _first = slots.try_take(&"bob").expect("a first place");
        let _second = slots.try_take(&"bob").expect("a second place");
        assert_eq!(slots.try_take(&"bob").unwrap_err(), SlotRefusal::Share, "bob's share is two");
        assert!(slots.try_take(&"alice").is_ok(), "alice is not bob");
        assert_eq!(slots.held(), 2, "the refusal and alice's dropped place left nothing held");
    }

    #[test]
    fn all_keys_together_hold_at_most_the_total() {
        let slots = KeyedSlots::new(2, 3);
        let held: Vec<_> = ["a", "a", "b"].iter().map(|key| slots.try_take(key).expect("within the total")).collect();
        assert_eq!(slots.try_take(&"c").unwrap_err(), SlotRefusal::Total, "c holds nothing, but the total is reached");
        assert_eq!(slots.try_take(&"a").unwrap_err(), SlotRefusal::Share, "a key over its share is told so first");
        assert_eq!((slots.held(), slots.keys()), (3, 2), "refusals leave no entry behind");
        drop(held);
        assert!(slots.try_take(&"c").is_ok());
    }

    #[test]
    fn a_dropped_place_is_free_again() {
        let slots = KeyedSlots::new(1, 1);
        let first = slots.try_take(&"bob").expect("a place");
        assert!(slots.try_take(&"bob").is_err());
        drop(first);
        let again = slots.try_take(&"bob").expect("the place given back is free again");
        assert_eq!(slots.held(), 1);
        drop(again);
        assert_eq!(slots.held(), 0);
    }

    #[test]
    fn a_key_is_removed_when_its_count_is_zero() {
        let slots = KeyedSlots::new(3, 10);
        let places: Vec<_> = (0..3).map(|_| slots.try_take(&"bob").expect("within bob's share")).collect();
        let alice = slots.try_take(&"alice").expect("alice's place");
        assert_eq!(slots.keys(), 2);
        drop(places);
        assert_eq!(slots.keys(), 1, "bob holds nothing, so bob has no entry");
        drop(alice);
        assert_eq!((slots.held(), slots.keys()), (0, 0));
        let none = KeyedSlots::new(0, 10);
        assert_eq!(none.try_take(&"bob").unwrap_err(), SlotRefusal::Share);
        assert_eq!(none.keys(), 0, "a refusal leaves no entry behind");
    }
}
