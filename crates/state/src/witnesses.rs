//! [`Witnesses`]: the execution witnesses neve holds, as the answers it
//! serves mirrors (`debug_executionWitness`), under a byte budget.
//!
//! What is kept is only what verified (see [`crate::verify_witness`]): a
//! mirror below asks for it and verifies it again from its own root. A
//! witness held here also brings its nodes back into the node store when
//! they were evicted there, without asking the upstream again.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;

use crate::trie::Hash;

/// Default byte budget of held witnesses: a witness is about twice its
/// block's bytes (hex doubles it again), so this holds some tens of busy
/// blocks' while staying a small share of a mirror's memory. Default is
/// 64 MiB.
pub const DEFAULT_WITNESS_BYTES: usize = 64 << 20;

/// The held witnesses, oldest out first.
pub struct Witnesses {
    budget: usize,
    held: Mutex<Held>,
    /// The upstream does not serve `debug_executionWitness` (avalanchego):
    /// replays fetch proofs instead, without asking again.
    unavailable: AtomicBool,
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
            unavailable: AtomicBool::new(false),
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

    /// Notes that the upstream does not serve witnesses.
    pub fn mark_unavailable(&self) {
        self.unavailable.store(true, Ordering::Relaxed);
    }

    /// Whether the upstream was found not to serve witnesses.
    pub fn unavailable(&self) -> bool {
        self.unavailable.load(Ordering::Relaxed)
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
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
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
    }
}
