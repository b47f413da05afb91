//! state: verified account and storage reads, without executing anything.
//!
//! Owns the node store (trie nodes and contract code by keccak hash, under a
//! byte budget), the trie walk that answers a read at a state root, proof
//! verification (the only way a node gets in), the account encodings of
//! geth and coreth, and the hot-key set prefetch refreshes.
//!
//! What it must not do: execute, fetch, or know HTTP and JSON-RPC. Serving
//! reads through [`State`]; when a walk hits a node it does not hold, the
//! read is [`Read::Missing`] and the caller may ask a [`Fetch`] (implemented
//! by ingest, which talks to the upstream) to bring the proof, then read
//! again. A chain of mirrors stays honest because every root a walk starts
//! from is the `stateRoot` of a header the caller verified itself, and every
//! node reached from it was checked by hash on the way in.
//!
//! Start at [`State`], then [`proof::verify`] and [`trie::walk`].

mod account;
mod hot;
mod keys;
mod nodes;
pub mod proof;
mod touched;
pub mod trie;

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use alloy_primitives::{U256, keccak256};
use bytes::Bytes;

pub use account::{Account, EMPTY_CODE_HASH};
pub use hot::{HotKey, HotKeys};
pub use keys::StorageKeys;
pub use nodes::{NodeStats, NodeStore};
pub use proof::{ProofError, Verified, verify_code};
pub use touched::{TOUCHED_BLOCKS, Touched, TouchedLog};
pub use trie::{EMPTY_ROOT, Hash};

/// An account address.
pub type Address = [u8; 20];

/// Default byte budget of the node store: a mainnet account proof is about
/// 5 KB, so this holds the paths of tens of thousands of hot keys while
/// staying a small share of a mirror's memory. Default is 256 MiB.
pub const DEFAULT_CACHE_BYTES: usize = 256 << 20;

/// Default number of keys prefetch keeps fresh at `latest`. Default is 4,096.
pub const DEFAULT_HOT_KEYS: usize = 4096;

/// Most storage slots one request may name (`eth_getProof`'s keys,
/// `eth_getStorageValues`' slots over all accounts): geth's own limit, so a
/// request neve refuses is one geth refuses too. Default is 1,024.
pub const MAX_SLOTS_PER_REQUEST: usize = 1024;

/// Roots remembered per height (a direct-mapped cache keyed by height,
/// confirmed by block hash): reading `stateRoot` out of a header's JSON
/// costs microseconds, this costs a lock and a compare.
const ROOT_CACHE: usize = 1024;

/// What a read found, or that it needs a node neve does not hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Read<T> {
    /// Answered from verified nodes.
    Found(T),
    /// A node on the path (or the code) is not held: fetch, then read again.
    Missing,
}

/// An account read: the account (`None`: proven not to exist) and, when
/// asked for, the nodes on its path (an EIP-1186 `accountProof`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountRead {
    /// The account, if it exists.
    pub account: Option<Account>,
    /// The path's nodes, root first (empty unless asked for).
    pub proof: Vec<Bytes>,
}

/// A storage read: the slot's value and, when asked for, its proof.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotRead {
    /// The value (zero when absent).
    pub value: U256,
    /// The path's nodes, root first (empty unless asked for).
    pub proof: Vec<Bytes>,
}

/// What a read needs fetched: the proof of an account (and some of its
/// slots, and its code) at one block, by that block's hash.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FetchRequest {
    /// The block whose state is read (asked of the upstream by hash, so a
    /// reorg upstream cannot answer for another root).
    pub block_hash: Hash,
    /// That block's verified `stateRoot`, which the proof must hash up to.
    pub state_root: Hash,
    /// The account.
    pub address: Address,
    /// Slots of it the read needs, sorted and deduplicated.
    pub slots: Vec<Hash>,
    /// Whether the read needs the account's code.
    pub code: bool,
}

/// Brings what a [`FetchRequest`] names into the node store. Implemented by
/// ingest (from the upstream's `eth_getProof` and `eth_getCode`); serving
/// only waits for it, with a deadline of its own.
pub trait Fetch: Send + Sync + 'static {
    /// Starts fetching (or joins a fetch of the same request already under
    /// way). The future ends when the nodes are stored or the fetch failed;
    /// dropping it does not cancel the fetch, so a slow answer still warms
    /// the store.
    fn fetch(&self, request: FetchRequest) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// Counters of state reads, shown by `/metrics` and `/health`.
#[derive(Debug, Default)]
pub struct Counters {
    /// State requests answered from held nodes at once.
    pub hits: AtomicU64,
    /// State requests answered after fetching through.
    pub fetched: AtomicU64,
    /// State requests answered 421 (not held and not fetched in time).
    pub misses: AtomicU64,
    /// Proofs or code refused because they did not verify.
    pub refused: AtomicU64,
    /// Fetches that failed (upstream error, timeout, no answer).
    pub fetch_failures: AtomicU64,
    /// Fetches not started because too many were in flight.
    pub shed: AtomicU64,
    /// Calls made to the upstream for reads (fetch-through).
    pub upstream_calls: AtomicU64,
    /// Calls made to the upstream by prefetch.
    pub prefetch_calls: AtomicU64,
    /// Blocks whose touched keys were proved at their root (refreshed
    /// per block).
    pub refreshed_blocks: AtomicU64,
    /// Calls made to the upstream to refresh per block (the touched keys,
    /// and their proofs); a share of [`Counters::prefetch_calls`].
    pub refresh_calls: AtomicU64,
}

/// A snapshot of [`Counters`] and the node store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateStats {
    /// See [`Counters::hits`].
    pub hits: u64,
    /// See [`Counters::fetched`].
    pub fetched: u64,
    /// See [`Counters::misses`].
    pub misses: u64,
    /// See [`Counters::refused`].
    pub refused: u64,
    /// See [`Counters::fetch_failures`].
    pub fetch_failures: u64,
    /// See [`Counters::shed`].
    pub shed: u64,
    /// See [`Counters::upstream_calls`].
    pub upstream_calls: u64,
    /// See [`Counters::prefetch_calls`].
    pub prefetch_calls: u64,
    /// See [`Counters::refreshed_blocks`].
    pub refreshed_blocks: u64,
    /// See [`Counters::refresh_calls`].
    pub refresh_calls: u64,
    /// The node store's counters.
    pub nodes: NodeStats,
}

/// The verified state neve holds: nodes, hot keys, counters.
pub struct State {
    nodes: NodeStore,
    hot: HotKeys,
    roots: Mutex<Vec<Option<(u64, Hash, Hash)>>>,
    /// What the newest blocks touched, for refresh and for mirrors.
    pub touched: TouchedLog,
    /// The newest height whose touched keys were proved, plus one (0:
    /// none yet).
    refreshed_plus_one: AtomicU64,
    /// Counters, bumped by serving and by the fetcher.
    pub counters: Counters,
    /// The chain's rule for storage keys.
    storage_keys: StorageKeys,
}

impl State {
    /// An empty state of `cache_bytes` budget remembering `hot_keys` keys.
    pub fn new(cache_bytes: usize, hot_keys: usize) -> Self {
        State {
            nodes: NodeStore::new(cache_bytes),
            hot: HotKeys::new(hot_keys),
            roots: Mutex::new(vec![None; ROOT_CACHE]),
            touched: TouchedLog::default(),
            refreshed_plus_one: AtomicU64::new(0),
            counters: Counters::default(),
            storage_keys: StorageKeys::Plain,
        }
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

/// The top-level `stateRoot` member of a header (or block) object. Parsed,
/// not searched for, so a nested member of the same name cannot stand in.
pub fn state_root_in_header(header: &[u8]) -> Option<Hash> {
    #[derive(serde::Deserialize)]
    struct Header<'a> {
        #[serde(rename = "stateRoot", borrow)]
        state_root: &'a str,
    }
    let header: Header<'_> = serde_json::from_slice(header).ok()?;
    let digits = header.state_root.strip_prefix("0x")?;
    if digits.len() != 64 || !digits.is_ascii() {
        return None;
    }
    let mut root = [0u8; 32];
    for (i, byte) in root.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&digits[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_root_is_read_at_the_top_level_only() {
        let root = format!("0x{}", "ab".repeat(32));
        let decoy = format!("0x{}", "cd".repeat(32));
        let header = format!(
            r#"{{"extra":{{"stateRoot":"{decoy}"}},"number":"0x1","stateRoot":"{root}","transactions":[]}}"#
        );
        assert_eq!(state_root_in_header(header.as_bytes()), Some([0xab; 32]));
        assert_eq!(state_root_in_header(b"{\"number\":\"0x1\"}"), None);
        assert_eq!(
            state_root_in_header(br#"{"stateRoot":"0x12"}"#),
            None,
            "short root"
        );
    }

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
