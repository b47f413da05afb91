//! What each recent block changed: the accounts and storage slots it
//! touched, as the upstream's tracer (or an upstream neve) said. Refreshing
//! state per block proves these keys at the block's root: every trie node
//! that differs from the parent's root lies on one of their paths, so
//! after that every key that was answerable at the parent is answerable
//! at the new root, whatever number of keys clients read.
//!
//! A hint, never trusted: a key left out costs a fetch-through later, a key
//! made up costs one proof, and every node still enters only by hash from
//! a verified root. Kept for the last [`TOUCHED_BLOCKS`] blocks so a
//! mirror can ask for them (`neve_getTouchedKeys`) instead of tracing.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use crate::trie::Hash;
use crate::vocabulary::Address;

/// Blocks whose touched keys are kept for mirrors: a mirror a few blocks
/// behind still finds them. Default is 64.
pub const TOUCHED_BLOCKS: usize = 64;

/// Keys (accounts and slots) the log keeps over all its blocks: the oldest
/// blocks go first past it, so what a mirror can ask for has a bound in
/// memory (~60 bytes a key: ~30 MiB) whatever blocks an upstream described.
/// Default is 500,000.
pub const TOUCHED_LOG_KEYS: usize = 500_000;

/// The keys one block touched: each account, with the slots of its
/// storage that changed or were read.
pub type Touched = BTreeMap<Address, Vec<Hash>>;

/// The touched keys of the newest blocks, by block hash: at most
/// [`TOUCHED_BLOCKS`] blocks and `TOUCHED_LOG_KEYS` keys.
#[derive(Default)]
pub struct TouchedLog {
    blocks: Mutex<VecDeque<(Hash, Arc<Touched>)>>,
}

impl TouchedLog {
    /// Keeps `touched` as block `block_hash`'s, dropping the oldest past
    /// [`TOUCHED_BLOCKS`].
    pub fn record(&self, block_hash: Hash, touched: Arc<Touched>) {
        let keys = |t: &Touched| t.values().map(|slots| 1 + slots.len()).sum::<usize>();
        let mut blocks = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        if blocks.iter().any(|(hash, _)| *hash == block_hash) {
            return;
        }
        if blocks.len() >= TOUCHED_BLOCKS {
            blocks.pop_front();
        }
        let mut held: usize = blocks.iter().map(|(_, t)| keys(t)).sum::<usize>() + keys(&touched);
        while held > TOUCHED_LOG_KEYS
            && let Some((_, oldest)) = blocks.pop_front()
        {
            held -= keys(&oldest);
        }
        if held <= TOUCHED_LOG_KEYS {
            blocks.push_back((block_hash, touched));
        }
    }

    /// Block `block_hash`'s touched keys, if kept.
    pub fn get(&self, block_hash: &Hash) -> Option<Arc<Touched>> {
        let blocks = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        blocks
            .iter()
            .rev()
            .find(|(hash, _)| hash == block_hash)
            .map(|(_, touched)| touched.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_blocks_are_kept_and_the_oldest_dropped() {
        let log = TouchedLog::default();
        for i in 0..(TOUCHED_BLOCKS as u8 + 3) {
            let mut touched = Touched::new();
            touched.insert([i; 20], vec![[i; 32]]);
            log.record([i; 32], Arc::new(touched));
        }
        assert!(log.get(&[0; 32]).is_none());
        assert!(log.get(&[2; 32]).is_none());
        let newest = log.get(&[TOUCHED_BLOCKS as u8 + 2; 32]).unwrap();
        assert_eq!(newest.len(), 1);
        assert!(log.get(&[3; 32]).is_some());
    }

    /// Issue 32 (3): the log's keys have a bound, whatever the blocks.
    #[test]
    fn the_oldest_blocks_go_when_the_keys_pass_their_bound() {
        let log = TouchedLog::default();
        let big = |seed: u8| {
            let slots: Vec<Hash> = (0..TOUCHED_LOG_KEYS / 3).map(|_| [seed; 32]).collect();
            let mut touched = Touched::new();
            touched.insert([seed; 20], slots);
            Arc::new(touched)
        };
        for seed in 0..4u8 {
            log.record([seed; 32], big(seed));
        }
        assert!(log.get(&[0; 32]).is_none() && log.get(&[1; 32]).is_none());
        assert!(log.get(&[2; 32]).is_some() && log.get(&[3; 32]).is_some());
    }
}
