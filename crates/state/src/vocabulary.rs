//! The words the crate's parts share: addresses, what a read finds, what
//! a read needs fetched and who fetches it, and the budgets' defaults.

use std::future::Future;
use std::pin::Pin;

use alloy_primitives::U256;
use bytes::Bytes;

use crate::account::Account;
use crate::trie::Hash;

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

/// Most accounts whose proofs are asked in one batch ([`proof_batches`]):
/// a node answers a batch of proofs for a fraction of the CPU it spends on
/// as many single requests (each one an HTTP exchange), and a call's round
/// keeps at most 16 fetches under way. Default is 64.
pub const MAX_PROOFS_PER_BATCH: usize = 64;

/// Most storage slots one batch of proofs names over all its accounts, so
/// a batch's answer stays a few MiB (on coreth each slot is asked with its
/// normalized one too: twice this) and a node answers it well within a
/// fetch's timeout. Default is 512.
pub const MAX_SLOTS_PER_BATCH: usize = 512;

/// `requests` cut into batches of at most [`MAX_PROOFS_PER_BATCH`]
/// accounts and [`MAX_SLOTS_PER_BATCH`] slots, in the order given; a
/// request naming more slots than that is a batch of its own.
pub fn proof_batches(requests: Vec<ProofRequest>) -> Vec<Vec<ProofRequest>> {
    let mut batches: Vec<Vec<ProofRequest>> = Vec::new();
    let mut slots = 0;
    for request in requests {
        let fits = batches.last().is_some_and(|batch| {
            batch.len() < MAX_PROOFS_PER_BATCH && slots + request.slots.len() <= MAX_SLOTS_PER_BATCH
        });
        if !fits {
            batches.push(Vec::new());
            slots = 0;
        }
        slots += request.slots.len();
        batches.last_mut().expect("pushed above").push(request);
    }
    batches
}

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
pub struct ProofRequest {
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

/// What a block's replay needs fetched: the block's execution witness
/// (the parent's state its transactions read), verified from the parent's
/// `stateRoot`, its headers by hash from the parent's hash.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WitnessRequest {
    /// The block replayed (asked of the upstream by hash).
    pub block_hash: Hash,
    /// Its height.
    pub number: u64,
    /// Its parent's hash, verified: the witness's newest header must hash
    /// to it.
    pub parent_hash: Hash,
    /// Its parent's verified `stateRoot`, which the witness's nodes must
    /// hash up to.
    pub parent_state_root: Hash,
}

/// What is fetched into the node store.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum FetchRequest {
    /// One account's proof (`eth_getProof`, and `eth_getCode`).
    Proof(ProofRequest),
    /// A block's execution witness (`debug_executionWitness`), which also
    /// keeps it to serve mirrors ([`crate::Witnesses`]).
    Witness(WitnessRequest),
}

/// Brings what a [`FetchRequest`] names into the node store. Implemented by
/// ingest (from the upstream's `eth_getProof` and `eth_getCode`, or its
/// `debug_executionWitness`); serving
/// only waits for it, with a deadline of its own.
pub trait Fetch: Send + Sync + 'static {
    /// Starts fetching (or joins a fetch of the same request already under
    /// way). The future ends when the nodes are stored or the fetch failed;
    /// dropping it does not cancel the fetch, so a slow answer still warms
    /// the store.
    fn fetch(&self, request: FetchRequest) -> Pin<Box<dyn Future<Output = ()> + Send>>;

    /// As [`Fetch::fetch`], but when all of the fetcher's slots are taken
    /// the future waits for one (in turn with the others waiting) rather
    /// than ending at once unfetched; nothing starts until it has a slot,
    /// so dropping it before then asks the upstream nothing.
    fn fetch_in_turn(&self, request: FetchRequest) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        self.fetch(request)
    }

    /// As [`Fetch::fetch_in_turn`] for a batch of proofs (see
    /// [`proof_batches`]): those under way already are joined, the rest
    /// asked together, holding one of the fetcher's slots.
    fn fetch_proofs_in_turn(
        &self,
        requests: Vec<ProofRequest>,
    ) -> Pin<Box<dyn Future<Output = ()> + Send>>;

    /// A batch of proofs no request waits for (fetched ahead of one):
    /// started at once, as prefetch, only when a slot beyond those reads
    /// wait for in turn is free, else shed (nothing asked). Those under
    /// way already are joined. By default nothing is fetched.
    fn prefetch_proofs(
        &self,
        requests: Vec<ProofRequest>,
    ) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        drop(requests);
        Box::pin(std::future::ready(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asking(slots: usize, tag: u8) -> ProofRequest {
        ProofRequest {
            block_hash: [0; 32],
            state_root: [0; 32],
            address: [tag; 20],
            slots: (0..slots).map(|i| [i as u8; 32]).collect(),
            code: false,
        }
    }

    #[test]
    fn proof_batches_keep_order_and_both_bounds() {
        // 130 accounts without slots: 64, 64, 2.
        let plain: Vec<_> = (0..130).map(|i| asking(0, i as u8)).collect();
        let batches = proof_batches(plain.clone());
        let sizes: Vec<_> = batches.iter().map(Vec::len).collect();
        assert_eq!(sizes, [64, 64, 2]);
        assert_eq!(batches.concat(), plain);

        // Slots cut earlier: 300 + 300 is past 512, 200 + 300 is not; one
        // over the bound alone is a batch of its own.
        let slotted = vec![
            asking(300, 1),
            asking(300, 2),
            asking(200, 3),
            asking(600, 4),
            asking(1, 5),
        ];
        let tags: Vec<_> = proof_batches(slotted)
            .iter()
            .map(|b| b.iter().map(|r| r.address[0]).collect::<Vec<_>>())
            .collect();
        assert_eq!(tags, [vec![1], vec![2, 3], vec![4], vec![5]]);
        assert!(proof_batches(Vec::new()).is_empty());
    }
}
