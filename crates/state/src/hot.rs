//! The keys read at `latest` lately: what prefetch refreshes when a new
//! block is stored, so the next `latest` read hits.
//!
//! Two generations of at most half the capacity each: a key recorded goes
//! into the young set; when that is full the old set is dropped and the
//! young one becomes old. Recording and listing never scan more than the
//! capacity, and memory is bounded by it.

use std::collections::HashSet;
use std::sync::Mutex;

use crate::trie::Hash;

/// One thing a read needed: an account, or one of its slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HotKey {
    /// The account.
    pub address: [u8; 20],
    /// A storage slot of it, if the read was of storage.
    pub slot: Option<Hash>,
}

/// The recently read keys, bounded.
pub struct HotKeys {
    generations: Mutex<(HashSet<HotKey>, HashSet<HotKey>)>,
    half: usize,
}

impl HotKeys {
    /// Keeps about `capacity` keys (0 disables recording).
    pub fn new(capacity: usize) -> Self {
        HotKeys {
            generations: Mutex::default(),
            half: capacity / 2,
        }
    }

    /// Notes a key read at `latest`.
    pub fn record(&self, key: HotKey) {
        self.record_all(&[key]);
    }

    /// [`record`](Self::record) for each of `keys`, under one lock.
    pub fn record_all(&self, keys: &[HotKey]) {
        if self.half == 0 {
            return;
        }
        let mut guard = self.generations.lock().unwrap_or_else(|e| e.into_inner());
        let (young, old) = &mut *guard;
        for key in keys {
            if young.contains(key) {
                continue;
            }
            young.insert(*key);
            if young.len() >= self.half {
                *old = std::mem::take(young);
            }
        }
    }

    /// The keys, most recent generation first.
    pub fn snapshot(&self) -> Vec<HotKey> {
        let guard = self.generations.lock().unwrap_or_else(|e| e.into_inner());
        let (young, old) = &*guard;
        young
            .iter()
            .chain(old.iter().filter(|k| !young.contains(k)))
            .copied()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> HotKey {
        let mut address = [0u8; 20];
        address[..4].copy_from_slice(&i.to_be_bytes());
        HotKey {
            address,
            slot: None,
        }
    }

    #[test]
    fn bounded_and_recent_first() {
        let hot = HotKeys::new(100);
        for i in 0..1000 {
            hot.record(key(i));
            assert!(hot.snapshot().len() <= 100);
        }
        let snapshot = hot.snapshot();
        assert!(snapshot.contains(&key(999)));
        assert!(!snapshot.contains(&key(0)));
    }

    #[test]
    fn zero_capacity_records_nothing() {
        let hot = HotKeys::new(0);
        hot.record(key(1));
        assert!(hot.snapshot().is_empty());
    }
}
