//! The content-addressed node store: `keccak(bytes) → bytes` for trie nodes
//! and contract code, under a byte budget.
//!
//! Eviction is two-generational per shard: new and re-read entries go to
//! the young map; when it holds half the shard's budget, the old map is
//! dropped whole and the young one becomes old. A read that hits the old map
//! moves the entry back to the young one (moving bytes, adding none, so a
//! read never rotates). So what is read survives, memory stays under the
//! budget at every instant, and neither reads nor inserts ever scan; the
//! dropped generation is freed by the inserting thread after the shard's
//! lock is released (ingest inserts off the async workers). Only [`crate::proof`] and [`crate::proof::verify_code`] can produce
//! what goes in, so nothing unverified can enter.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use bytes::Bytes;

use crate::trie::Hash;

/// Shards, so readers and the fetcher rarely meet on one lock.
const SHARDS: usize = 16;

/// Bytes an entry costs beyond its content: the 32-byte key, the `Bytes`
/// handle, the map's slot and the allocation's header, rounded up.
pub const ENTRY_OVERHEAD: usize = 128;

/// Keys are keccak hashes, already uniform: 8 of their bytes are the
/// map's hash, no SipHash round. Not the first 8: the first byte picks the
/// shard ([`NodeStore::shard`]), so within a shard it is the same modulo
/// [`SHARDS`], and the map's bucket is its hash's low bits: a sixteenth of
/// the buckets would start every probe (hits measured 20–45 % slower,
/// misses 25–80 %, on maps of 10k–400k keys).
#[derive(Default)]
struct KeyHasher(u64);

/// Where in a key the map's hash is taken: past the shard's byte.
const HASH_BYTES: std::ops::Range<usize> = 8..16;

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // A slice's length comes by `write_usize` (ignored), then its
        // bytes in one call.
        if let Some(eight) = bytes.get(HASH_BYTES) {
            self.0 ^= u64::from_le_bytes(eight.try_into().expect("8 bytes"));
        }
    }
    fn write_usize(&mut self, _: usize) {}
}

type Map = HashMap<Hash, Bytes, BuildHasherDefault<KeyHasher>>;

#[derive(Default)]
struct Shard {
    young: Map,
    old: Map,
    young_bytes: usize,
    old_bytes: usize,
}

fn cost(bytes: &Bytes) -> usize {
    bytes.len() + ENTRY_OVERHEAD
}

/// Counters of the node store.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct NodeStats {
    /// Bytes held, overhead included.
    pub bytes: u64,
    /// Entries held.
    pub entries: u64,
    /// Entries dropped to stay under the budget since start.
    pub evicted: u64,
    /// The byte budget.
    pub budget: u64,
}

/// Trie nodes and code by hash, under a byte budget.
pub struct NodeStore {
    shards: Box<[RwLock<Shard>]>,
    /// Half a shard's budget: the young map rotates when it holds this much.
    rotate_at: usize,
    budget: usize,
    bytes: AtomicI64,
    entries: AtomicI64,
    evicted: AtomicU64,
}

impl NodeStore {
    /// An empty store that keeps at most about `budget` bytes.
    pub fn new(budget: usize) -> Self {
        NodeStore {
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
            rotate_at: (budget / SHARDS / 2).max(1),
            budget,
            bytes: AtomicI64::new(0),
            entries: AtomicI64::new(0),
            evicted: AtomicU64::new(0),
        }
    }

    fn shard(&self, hash: &Hash) -> &RwLock<Shard> {
        &self.shards[hash[0] as usize % SHARDS]
    }

    fn read(&self, hash: &Hash) -> RwLockReadGuard<'_, Shard> {
        // A panic elsewhere cannot leave a map half-updated in a way that
        // matters here (entries are whole values), so poisoning is ignored.
        self.shard(hash).read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self, hash: &Hash) -> RwLockWriteGuard<'_, Shard> {
        self.shard(hash).write().unwrap_or_else(|e| e.into_inner())
    }

    /// The bytes stored under `hash`, if held.
    pub fn get(&self, hash: &Hash) -> Option<Bytes> {
        {
            let shard = self.read(hash);
            if let Some(bytes) = shard.young.get(hash) {
                return Some(bytes.clone());
            }
            if !shard.old.contains_key(hash) {
                return None;
            }
        }
        // Read again while old: back to the young generation.
        let mut shard = self.write(hash);
        match shard.old.remove(hash) {
            Some(bytes) => {
                shard.old_bytes -= cost(&bytes);
                shard.young_bytes += cost(&bytes);
                shard.young.insert(*hash, bytes.clone());
                Some(bytes)
            }
            None => shard.young.get(hash).cloned(),
        }
    }

    /// Whether `hash` is held (no promotion).
    pub fn contains(&self, hash: &Hash) -> bool {
        let shard = self.read(hash);
        shard.young.contains_key(hash) || shard.old.contains_key(hash)
    }

    /// Stores verified bytes under their hash.
    pub(crate) fn insert(&self, hash: Hash, bytes: Bytes) {
        let dropped = {
            let mut shard = self.write(&hash);
            if shard.young.contains_key(&hash) {
                return;
            }
            let bytes = match shard.old.remove(&hash) {
                Some(held) => {
                    shard.old_bytes -= cost(&held);
                    held
                }
                None => {
                    self.bytes.fetch_add(cost(&bytes) as i64, Ordering::Relaxed);
                    self.entries.fetch_add(1, Ordering::Relaxed);
                    bytes
                }
            };
            shard.young_bytes += cost(&bytes);
            shard.young.insert(hash, bytes);
            if shard.young_bytes < self.rotate_at {
                return;
            }
            // Rotate: the old generation goes, the young one becomes old.
            let young = std::mem::take(&mut shard.young);
            let dropped = std::mem::replace(&mut shard.old, young);
            let young_bytes = shard.young_bytes;
            let dropped_bytes = std::mem::replace(&mut shard.old_bytes, young_bytes);
            shard.young_bytes = 0;
            self.bytes
                .fetch_sub(dropped_bytes as i64, Ordering::Relaxed);
            self.entries
                .fetch_sub(dropped.len() as i64, Ordering::Relaxed);
            self.evicted
                .fetch_add(dropped.len() as u64, Ordering::Relaxed);
            dropped
        };
        // Freed here, after the lock: readers of the shard do not wait on it.
        drop(dropped);
    }

    /// Current counters.
    pub fn stats(&self) -> NodeStats {
        NodeStats {
            bytes: self.bytes.load(Ordering::Relaxed).max(0) as u64,
            entries: self.entries.load(Ordering::Relaxed).max(0) as u64,
            evicted: self.evicted.load(Ordering::Relaxed),
            budget: self.budget as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> Hash {
        let mut h = [0u8; 32];
        h[..4].copy_from_slice(&i.to_be_bytes());
        h[4..8].copy_from_slice(&i.wrapping_mul(2_654_435_761).to_le_bytes());
        // Uniform where the map's hash is taken, as a keccak hash is.
        h[HASH_BYTES].copy_from_slice(
            &(u64::from(i) ^ 0x5555)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .to_le_bytes(),
        );
        h[0] = (i % 251) as u8;
        h
    }

    #[test]
    fn a_shards_keys_spread_over_the_maps_buckets() {
        use std::hash::BuildHasher;
        // Keys of one shard (same first byte modulo SHARDS) must not share
        // the low bits of the map's hash.
        let build = BuildHasherDefault::<KeyHasher>::default();
        let low: std::collections::HashSet<u64> = (0..256u32)
            .map(|i| {
                let mut hash = key(i);
                hash[0] = 3;
                build.hash_one(hash) & 0xff
            })
            .collect();
        assert!(low.len() > 64, "only {} of 256 low bytes", low.len());
    }

    #[test]
    fn holds_what_was_inserted() {
        let store = NodeStore::new(1 << 20);
        store.insert(key(1), Bytes::from_static(b"node"));
        assert_eq!(store.get(&key(1)), Some(Bytes::from_static(b"node")));
        assert_eq!(store.get(&key(2)), None);
        assert_eq!(store.stats().entries, 1);
        store.insert(key(1), Bytes::from_static(b"node"));
        assert_eq!(store.stats().entries, 1, "a second insert changes nothing");
    }

    #[test]
    fn stays_under_budget_with_ten_times_more_keys() {
        let budget = 256 * 1024;
        let store = NodeStore::new(budget);
        let node = Bytes::from(vec![7u8; 500]);
        let keys = 10 * budget / (500 + ENTRY_OVERHEAD);
        for i in 0..keys as u32 {
            store.insert(key(i), node.clone());
            assert!(store.stats().bytes as usize <= budget + SHARDS * (500 + ENTRY_OVERHEAD));
        }
        let stats = store.stats();
        assert!(stats.evicted > 0);
        assert!(stats.bytes as usize > budget / 4, "{stats:?}");
    }

    #[test]
    fn what_is_read_survives_rotation() {
        let store = NodeStore::new(64 * 1024);
        let node = Bytes::from(vec![1u8; 200]);
        store.insert(key(0), node.clone());
        for i in 1..20_000u32 {
            store.insert(key(i), node.clone());
            // A hot key, read all along, is never evicted.
            assert!(store.get(&key(0)).is_some(), "lost the hot key at {i}");
        }
    }
}
