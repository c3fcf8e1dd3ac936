//! A map kept as a vector sorted by key, for the simulator's few-entry maps whose keys are handed out in
//! ascending order (envelopes in flight, running tasks, returns waiting for their task): a new key goes at
//! the end without a search, a lookup is a binary search over a handful of entries, and nothing is
//! allocated per entry. Iteration is in key order, as a `BTreeMap`'s is, so nothing that depends on it
//! changes.

/// Entries sorted by key, each key at most once.
#[derive(Debug, Clone)]
pub(crate) struct SortedMap<K, V> {
    entries: Vec<(K, V)>,
}

impl<K, V> Default for SortedMap<K, V> {
    fn default() -> Self {
        SortedMap { entries: Vec::new() }
    }
}

impl<K: Ord + Copy, V> SortedMap<K, V> {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Where `key` is (`Ok`) or would go (`Err`). A key past the last one, the usual case, needs no search.
    fn position(&self, key: &K) -> Result<usize, usize> {
        match self.entries.last() {
            Some((last, _)) if last < key => Err(self.entries.len()),
            None => Err(0),
            Some(_) => self.entries.binary_search_by(|(k, _)| k.cmp(key)),
        }
    }

    /// Inserts `value` under `key`; returns the value it replaces, if any.
    pub(crate) fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.position(&key) {
            Ok(index) => Some(std::mem::replace(&mut self.entries[index].1, value)),
            Err(index) => {
                self.entries.insert(index, (key, value));
                None
            }
        }
    }

    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        self.position(key).ok().map(|index| &self.entries[index].1)
    }

    pub(crate) fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.position(key).ok().map(|index| &mut self.entries[index].1)
    }

    pub(crate) fn contains_key(&self, key: &K) -> bool {
        self.position(key).is_ok()
    }

    pub(crate) fn remove(&mut self, key: &K) -> Option<V> {
        self.position(key).ok().map(|index| self.entries.remove(index).1)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every entry, in key order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.entries.iter().map(|(key, value)| (key, value))
    }

    /// Every value, in key order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.iter().map(|(_, value)| value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn it_behaves_as_a_btree_map_whatever_order_keys_arrive_in() {
        let mut sorted = SortedMap::new();
        let mut reference = BTreeMap::new();
        // Ascending, repeated, descending and interleaved keys; removals of present and absent keys.
        let operations: [(bool, u64); 16] = [
            (true, 3),
            (true, 5),
            (true, 9),
            (true, 5),
            (true, 1),
            (false, 4),
            (true, 7),
            (false, 5),
            (true, 2),
            (false, 1),
            (true, 10),
            (true, 6),
            (false, 10),
            (false, 10),
            (true, 0),
            (true, 8),
        ];
        for (step, (insert, key)) in operations.into_iter().enumerate() {
            if insert {
                assert_eq!(sorted.insert(key, step), reference.insert(key, step), "insert {key}");
            } else {
                assert_eq!(sorted.remove(&key), reference.remove(&key), "remove {key}");
            }
            assert_eq!(
                sorted.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>(),
                reference.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>()
            );
            assert_eq!(sorted.len(), reference.len());
            for probe in 0..12 {
                assert_eq!(sorted.get(&probe), reference.get(&probe));
                assert_eq!(sorted.contains_key(&probe), reference.contains_key(&probe));
            }
        }
        if let Some(value) = sorted.get_mut(&7) {
            *value = 99;
        }
        assert_eq!(sorted.get(&7), Some(&99));
        assert_eq!(sorted.values().count(), reference.len());
        assert!(!sorted.is_empty());
    }
}
