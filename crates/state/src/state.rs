//! [`State`]: the verified state neve holds, and the reads that walk it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use alloy_primitives::{U256, keccak256};
use bytes::Bytes;

use crate::account::{Account, EMPTY_CODE_HASH};
use crate::counters::{Counters, StateStats};
use crate::header::state_root_in_header;
use crate::hot::{HotKey, HotKeys};
use crate::keys::StorageKeys;
use crate::nodes::NodeStore;
use crate::post_states::PostStateClaims;
use crate::proof::Verified;
use crate::touched::TouchedLog;
use crate::trie::{self, Hash};
use crate::vocabulary::{AccountRead, Address, Read, SlotRead};
use crate::witnesses::{DEFAULT_WITNESS_BYTES, Witnesses};

/// Roots remembered per height (a direct-mapped cache keyed by height,
/// confirmed by block hash): reading `stateRoot` out of a header's JSON
/// costs microseconds, this costs a lock and a compare.
const ROOT_CACHE: usize = 1024;

/// The verified state neve holds: nodes, hot keys, counters.
pub struct State {
    nodes: NodeStore,
    hot: HotKeys,
    roots: Mutex<Vec<Option<(u64, Hash, Hash)>>>,
    post_states: PostStateClaims,
    /// What the newest blocks touched, for refresh and for mirrors.
    pub touched: TouchedLog,
    /// The newest height whose touched keys were proved, plus one (0:
    /// none yet).
    refreshed_plus_one: AtomicU64,
    /// Counters, bumped by serving and by the fetcher.
    pub counters: Counters,
    /// The chain's rule for storage keys.
    storage_keys: StorageKeys,
    /// Execution witnesses held to serve mirrors.
    pub witnesses: Witnesses,
}

impl State {
    /// An empty state of `cache_bytes` budget remembering `hot_keys` keys.
    pub fn new(cache_bytes: usize, hot_keys: usize) -> Self {
        State {
            nodes: NodeStore::new(cache_bytes),
            hot: HotKeys::new(hot_keys),
            roots: Mutex::new(vec![None; ROOT_CACHE]),
            post_states: PostStateClaims::default(),
            touched: TouchedLog::default(),
            refreshed_plus_one: AtomicU64::new(0),
            counters: Counters::default(),
            storage_keys: StorageKeys::Plain,
            witnesses: Witnesses::new(DEFAULT_WITNESS_BYTES),
        }
    }

    /// This state keeping at most `bytes` of witnesses.
    pub fn with_witness_bytes(mut self, bytes: usize) -> Self {
        self.witnesses = Witnesses::new(bytes);
        self
    }

    /// This state with the chain's rule for storage keys (Ethereum's unless
    /// told otherwise).
    pub fn with_storage_keys(mut self, storage_keys: StorageKeys) -> Self {
        self.storage_keys = storage_keys;
        self
    }

    /// The chain's rule for storage keys.
    pub fn storage_keys(&self) -> StorageKeys {
        self.storage_keys
    }

    /// Stores what a verification proved.
    pub fn insert(&self, verified: Verified) {
        for (hash, bytes) in verified.entries {
            self.nodes.insert(hash, bytes);
        }
    }

    /// The account at `address` under `root`.
    pub fn account(&self, root: &Hash, address: &Address, with_proof: bool) -> Read<AccountRead> {
        let mut proof = Vec::new();
        let key = keccak256(address).0;
        let walked = trie::walk(
            root,
            &key,
            |h| self.nodes.get(h),
            with_proof.then_some(&mut proof),
        );
        match walked {
            Ok(trie::Walked::Found(leaf)) => match Account::decode(&leaf) {
                Ok(account) => Read::Found(AccountRead {
                    account: Some(account),
                    proof,
                }),
                Err(_) => Read::Missing,
            },
            Ok(trie::Walked::Absent) => Read::Found(AccountRead {
                account: None,
                proof,
            }),
            // Missing, or a node that does not decode (cannot happen for a
            // node that hashed into place): either way, not ours to answer.
            Ok(trie::Walked::Missing(_)) | Err(_) => Read::Missing,
        }
    }

    /// The value of `slot` in the storage trie under `storage_root`.
    pub fn slot(&self, storage_root: &Hash, slot: &Hash, with_proof: bool) -> Read<SlotRead> {
        let mut proof = Vec::new();
        let key = keccak256(slot).0;
        let walked = trie::walk(
            storage_root,
            &key,
            |h| self.nodes.get(h),
            with_proof.then_some(&mut proof),
        );
        match walked {
            Ok(trie::Walked::Found(leaf)) => match slot_value(&leaf) {
                Ok(value) => Read::Found(SlotRead { value, proof }),
                Err(_) => Read::Missing,
            },
            Ok(trie::Walked::Absent) => Read::Found(SlotRead {
                value: U256::ZERO,
                proof,
            }),
            Ok(trie::Walked::Missing(_)) | Err(_) => Read::Missing,
        }
    }

    /// The trie node (or code) whose hash is `hash`, if held: what a
    /// caller applying updates to a verified trie reads
    /// ([`crate::update::apply`]).
    pub fn node(&self, hash: &Hash) -> Option<Bytes> {
        self.nodes.get(hash)
    }

    /// Whether the post-state of block `height` with `block_hash` was
    /// claimed already (by [`State::claim_post_state`]).
    pub fn post_state_claimed(&self, height: u64, block_hash: &Hash) -> bool {
        self.post_states.claimed(height, block_hash)
    }

    /// Claims the computing of block `height`'s post-state: true the first
    /// time for a block (remembered for the newest 256 heights), false
    /// after. Its computing ends with [`State::post_state_ended`].
    pub fn claim_post_state(&self, height: u64, block_hash: &Hash) -> bool {
        self.post_states.claim(height, block_hash)
    }

    /// The claimed post-state of block `height` is computed (kept or
    /// not): whoever waits for it goes on.
    pub fn post_state_ended(&self, height: u64, block_hash: &Hash) {
        self.post_states.end(height, block_hash)
    }

    /// Lets go of the claim on block `height`'s post-state (it was not
    /// computed): a later replay may claim it.
    pub fn release_post_state(&self, height: u64, block_hash: &Hash) {
        self.post_states.release(height, block_hash)
    }

    /// Waits, at most `most`, while block `height`'s post-state is being
    /// computed (claimed, not ended); whether it waited at all.
    pub fn wait_post_state(&self, height: u64, block_hash: &Hash, most: Duration) -> bool {
        let waited = self.post_states.wait(height, block_hash, most);
        if waited {
            self.counters
                .post_state_waits
                .fetch_add(1, Ordering::Relaxed);
        }
        waited
    }

    /// The code whose hash is `code_hash`.
    pub fn code(&self, code_hash: &Hash) -> Read<Bytes> {
        if *code_hash == EMPTY_CODE_HASH {
            return Read::Found(Bytes::new());
        }
        match self.nodes.get(code_hash) {
            Some(code) => Read::Found(code),
            None => Read::Missing,
        }
    }

    /// Whether the code under `code_hash` is held.
    pub fn has_code(&self, code_hash: &Hash) -> bool {
        *code_hash == EMPTY_CODE_HASH || self.nodes.contains(code_hash)
    }

    /// Notes that the block at `height` was refreshed: the nodes its
    /// touched keys need are held.
    pub fn mark_refreshed(&self, height: u64) {
        self.refreshed_plus_one
            .fetch_max(height + 1, Ordering::Relaxed);
    }

    /// The newest height refreshed, if any.
    pub fn refreshed(&self) -> Option<u64> {
        self.refreshed_plus_one
            .load(Ordering::Relaxed)
            .checked_sub(1)
    }

    /// Notes a key read at `latest`, for prefetch.
    pub fn record_hot(&self, key: HotKey) {
        self.hot.record(key);
    }

    /// Records each of `keys` as read at `latest` (a call's reads), under
    /// one lock.
    pub fn record_hot_all(&self, keys: &[HotKey]) {
        self.hot.record_all(keys);
    }

    /// The keys prefetch should keep fresh, most recent first.
    pub fn hot_keys(&self) -> Vec<HotKey> {
        self.hot.snapshot()
    }

    /// The `stateRoot` of the block at `height` with hash `block_hash`,
    /// read from its header JSON (a verified block's hashes-only form, which
    /// `header` reads) the first time, remembered after: a state read costs
    /// the block's header bytes once, not on every request.
    pub fn state_root<H: AsRef<[u8]>>(
        &self,
        height: u64,
        block_hash: &Hash,
        header: impl FnOnce() -> Option<H>,
    ) -> Option<Hash> {
        let slot = (height % ROOT_CACHE as u64) as usize;
        {
            let roots = self.roots.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((h, hash, root)) = roots[slot]
                && h == height
                && hash == *block_hash
            {
                return Some(root);
            }
        }
        let root = state_root_in_header(header()?.as_ref())?;
        self.roots.lock().unwrap_or_else(|e| e.into_inner())[slot] =
            Some((height, *block_hash, root));
        Some(root)
    }

    /// Counters and node-store figures.
    pub fn stats(&self) -> StateStats {
        let c = &self.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StateStats {
            hits: load(&c.hits),
            fetched: load(&c.fetched),
            misses: load(&c.misses),
            refused: load(&c.refused),
            fetch_failures: load(&c.fetch_failures),
            shed: load(&c.shed),
            upstream_calls: load(&c.upstream_calls),
            prefetch_calls: load(&c.prefetch_calls),
            refreshed_blocks: load(&c.refreshed_blocks),
            refresh_calls: load(&c.refresh_calls),
            post_states_kept: load(&c.post_states_kept),
            post_states_unkept: load(&c.post_states_unkept),
            post_states_unlike: load(&c.post_states_unlike),
            post_state_waits: load(&c.post_state_waits),
            post_state_overlays: load(&c.post_state_overlays),
            post_state_overlay_fetches: load(&c.post_state_overlay_fetches),
            nodes: self.nodes.stats(),
        }
    }
}

/// A storage leaf's value: an RLP string of the trimmed big-endian integer.
fn slot_value(leaf: &[u8]) -> Result<U256, trie::Malformed> {
    let bytes = trie::rlp_string(leaf)?;
    if bytes.len() > 32 {
        return Err(trie::Malformed);
    }
    Ok(U256::from_be_slice(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trie::EMPTY_ROOT;

    #[test]
    fn roots_are_cached_per_height_and_hash() {
        let state = State::new(1 << 20, 16);
        let header = format!(r#"{{"stateRoot":"0x{}"}}"#, "11".repeat(32));
        assert_eq!(
            state.state_root(7, &[1; 32], || Some(header.as_bytes())),
            Some([0x11; 32])
        );
        // Cached: the header is not read again for the same block.
        assert_eq!(
            state.state_root(7, &[1; 32], || Some(b"garbage")),
            Some([0x11; 32])
        );
        // Another block at that height (after a reorg) is read afresh.
        assert_eq!(state.state_root(7, &[2; 32], || Some(b"garbage")), None);
    }

    #[test]
    fn an_empty_storage_trie_answers_zero_without_nodes() {
        let state = State::new(1 << 20, 16);
        assert_eq!(
            state.slot(&EMPTY_ROOT, &[0; 32], true),
            Read::Found(SlotRead {
                value: U256::ZERO,
                proof: vec![]
            })
        );
        assert_eq!(state.code(&EMPTY_CODE_HASH), Read::Found(Bytes::new()));
        assert_eq!(state.account(&[9; 32], &[1; 20], false), Read::Missing);
    }
}
