//! [`Witnesses`]: the execution witnesses neve holds, as the answers it
//! serves mirrors (`debug_executionWitness`), under a byte budget.
//!
//! What is kept is only what verified (see [`crate::verify_witness`]): a
//! mirror below asks for it and verifies it again from its own root. A
//! witness held here also brings its nodes back into the node store when
//! they were evicted there, without asking the upstream again.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::trie::Hash;

/// Default byte budget of held witnesses: a witness is about twice its
/// block's bytes (hex doubles it again), so this holds some tens of busy
/// blocks' while staying a small share of a mirror's memory. Default is
/// 64 MiB.
pub const DEFAULT_WITNESS_BYTES: usize = 64 << 20;

/// Blocks remembered as having no witness to be had (refused, failed,
/// too large to keep): their replays fetch proofs, and a mirror below is
/// answered 421 without asking the upstream again. Default is 1,024.
pub const MAX_BLOCKS_WITHOUT_WITNESS: usize = 1024;

/// How long an upstream found without `debug_executionWitness` is not
/// asked for one again (a load balancer may have sent one call to a
/// backend without the `debug` namespace). Default is 10 minutes.
pub const WITNESS_UNAVAILABLE_FOR: Duration = Duration::from_secs(600);

/// The held witnesses, oldest out first.
pub struct Witnesses {
    budget: usize,
    held: Mutex<Held>,
    /// Blocks without a witness to be had, oldest out first.
    without: Mutex<(HashSet<Hash>, VecDeque<Hash>)>,
    /// When the upstream was last found not to serve
    /// `debug_executionWitness` (avalanchego): for
    /// [`WITNESS_UNAVAILABLE_FOR`], replays fetch proofs instead.
    unavailable_since: Mutex<Option<Instant>>,
    /// Witnesses fetched from the upstream and verified.
    pub fetched: AtomicU64,
    /// Witnesses refused: they did not decode, or their headers did not
    /// hash to the block's parent.
    pub refused: AtomicU64,
    /// Nodes and codes witnesses held that no path from the root reached,
    /// dropped.
    pub dropped: AtomicU64,
}

#[derive(Default)]
struct Held {
    by_block: HashMap<Hash, Bytes>,
    order: VecDeque<Hash>,
    bytes: usize,
}

/// A snapshot of [`Witnesses`], for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WitnessStats {
    /// Witnesses held.
    pub held: u64,
    /// Their bytes (the answers as served).
    pub bytes: u64,
    /// See [`Witnesses::fetched`].
    pub fetched: u64,
    /// See [`Witnesses::refused`].
    pub refused: u64,
    /// See [`Witnesses::dropped`].
    pub dropped: u64,
}

impl Witnesses {
    /// No witness held, `budget` bytes for them (0: none kept).
    pub fn new(budget: usize) -> Self {
        Witnesses {
            budget,
            held: Mutex::default(),
            without: Mutex::default(),
            unavailable_since: Mutex::new(None),
            fetched: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    /// The answer held for the block of this hash.
    pub fn get(&self, block_hash: &Hash) -> Option<Bytes> {
        self.lock().by_block.get(block_hash).cloned()
    }

    /// Keeps `answer` for the block of this hash, the oldest ones out
    /// until it fits; one larger than a quarter of the budget is not kept,
    /// so one huge block does not push out many.
    pub fn insert(&self, block_hash: Hash, answer: Bytes) {
        if answer.len() > self.budget / 4 {
            return;
        }
        let mut held = self.lock();
        if held.by_block.contains_key(&block_hash) {
            return;
        }
        while held.bytes + answer.len() > self.budget {
            let Some(oldest) = held.order.pop_front() else {
                break;
            };
            if let Some(gone) = held.by_block.remove(&oldest) {
                held.bytes -= gone.len();
            }
        }
        held.bytes += answer.len();
        held.order.push_back(block_hash);
        held.by_block.insert(block_hash, answer);
    }

    /// Whether none are kept (a budget of 0).
    pub fn keeps_none(&self) -> bool {
        self.budget == 0
    }

    /// Notes that the upstream does not serve witnesses.
    pub fn mark_unavailable(&self) {
        *lock(&self.unavailable_since) = Some(Instant::now());
    }

    /// Whether the upstream was found not to serve witnesses lately
    /// (within [`WITNESS_UNAVAILABLE_FOR`]).
    pub fn unavailable(&self) -> bool {
        lock(&self.unavailable_since).is_some_and(|at| at.elapsed() < WITNESS_UNAVAILABLE_FOR)
    }

    /// Notes that the block of this hash has no witness to be had.
    pub fn mark_without(&self, block_hash: Hash) {
        let mut without = lock(&self.without);
        if !without.0.insert(block_hash) {
            return;
        }
        without.1.push_back(block_hash);
        while without.1.len() > MAX_BLOCKS_WITHOUT_WITNESS {
            if let Some(oldest) = without.1.pop_front() {
                without.0.remove(&oldest);
            }
        }
    }

    /// Whether a witness is worth asking the upstream for, for the block
    /// of this hash: it serves them, and this block's did not fail.
    pub fn worth_asking(&self, block_hash: &Hash) -> bool {
        !self.unavailable() && !lock(&self.without).0.contains(block_hash)
    }

    /// The counters and what is held.
    pub fn stats(&self) -> WitnessStats {
        let held = self.lock();
        WitnessStats {
            held: held.by_block.len() as u64,
            bytes: held.bytes as u64,
            fetched: self.fetched.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        lock(&self.held)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_go_first_and_the_budget_holds() {
        let witnesses = Witnesses::new(400);
        for i in 0..10u8 {
            witnesses.insert([i; 32], Bytes::from(vec![i; 90]));
        }
        let stats = witnesses.stats();
        assert_eq!(stats.held, 4);
        assert_eq!(stats.bytes, 360);
        assert!(witnesses.get(&[5; 32]).is_none());
        assert_eq!(witnesses.get(&[9; 32]).unwrap().len(), 90);
        // Over a quarter of the budget: not kept, nothing pushed out.
        witnesses.insert([42; 32], Bytes::from(vec![0; 101]));
        assert!(witnesses.get(&[42; 32]).is_none());
        assert_eq!(witnesses.stats().held, 4);
        // None kept at a budget of 0.
        let none = Witnesses::new(0);
        none.insert([1; 32], Bytes::from_static(b"{}"));
        assert!(none.get(&[1; 32]).is_none());
        assert!(none.keeps_none());
    }

    #[test]
    fn blocks_without_a_witness_are_remembered_within_a_bound() {
        let witnesses = Witnesses::new(1 << 20);
        assert!(witnesses.worth_asking(&[1; 32]));
        for i in 0..=MAX_BLOCKS_WITHOUT_WITNESS as u32 {
            let mut hash = [0u8; 32];
            hash[..4].copy_from_slice(&i.to_be_bytes());
            witnesses.mark_without(hash);
        }
        assert!(witnesses.worth_asking(&[0; 32]), "the oldest forgotten");
        let mut newest = [0u8; 32];
        newest[..4].copy_from_slice(&(MAX_BLOCKS_WITHOUT_WITNESS as u32).to_be_bytes());
        assert!(!witnesses.worth_asking(&newest));
        assert_eq!(lock(&witnesses.without).1.len(), MAX_BLOCKS_WITHOUT_WITNESS);
        witnesses.mark_unavailable();
        assert!(witnesses.unavailable() && !witnesses.worth_asking(&[1; 32]));
    }
}
