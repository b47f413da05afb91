//! What `eth_feeHistory` keeps of the blocks it read, so a range asked
//! again is not read again: a block's header-level fee facts
//! ([`BlockHead`], all a request without percentiles needs, read from the
//! block's header JSON alone, never its transactions or receipts) apart
//! from its transactions' tips sorted with their gas ([`BlockRewards`],
//! what reward percentiles need, read once from the full block and its
//! receipts). Both are kept by height and confirmed by hash, least
//! recently used first out, under bounds a full range of
//! [`MAX_FEE_HISTORY_BLOCKS`] blocks fits.
//!
//! A request reports what it read ([`HistoryReads`]) so the server can
//! charge its client by the blocks read, not by the call.

use std::collections::{BTreeMap, HashMap};
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex};

use alloy_primitives::{Address, U256};
use serde::Deserialize;

use super::block::{small, wide};
use super::*;

/// Most blocks one `eth_feeHistory` answers for (geth's default
/// `--rpc.feehistory.maxheaders` and `maxblocks`). Default is 1,024.
pub const MAX_FEE_HISTORY_BLOCKS: u64 = 1024;

/// Blocks whose [`BlockHead`] fee history keeps: four full ranges of
/// [`MAX_FEE_HISTORY_BLOCKS`], about 150 bytes each (0.6 MB). Default is
/// 4,096.
pub const HISTORY_HEADS_CACHED: usize = 4096;

/// Blocks whose [`BlockRewards`] fee history keeps, at most (empty blocks
/// cost little bytes but an entry each). Default is 4,096.
pub const HISTORY_REWARDS_CACHED: usize = 4096;

/// Bytes of [`BlockRewards`] fee history keeps, counted as
/// [`BlockRewards::bytes`] (24 bytes per distinct tip in a block plus
/// [`REWARDS_ENTRY_BYTES`]): a full range of [`MAX_FEE_HISTORY_BLOCKS`]
/// fits while its blocks average under about 1,360 distinct tips. Default
/// is 32 MiB.
pub const HISTORY_REWARDS_BYTES: usize = 32 << 20;

/// What one kept [`BlockRewards`] costs beside its tips: the entry, its
/// place in the order, two boxed slices' headers.
pub const REWARDS_ENTRY_BYTES: usize = 128;

/// A block's header-level fee facts: everything `eth_feeHistory` reads of
/// a block when no reward percentiles are asked (geth then reads headers
/// only), and what the next fees are computed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockHead {
    /// Height.
    pub number: u64,
    /// Base fee per gas, from London on.
    pub base_fee: Option<u128>,
    /// Gas used by the whole block.
    pub gas_used: u64,
    /// The block's gas limit.
    pub gas_limit: u64,
    /// Blob gas used, from Cancun on.
    pub blob_gas_used: Option<u64>,
    /// Excess blob gas, from Cancun on.
    pub excess_blob_gas: Option<u64>,
    /// Seconds since the epoch (selects the blob schedule).
    pub timestamp: u64,
    /// The fee recipient.
    pub coinbase: Address,
}

/// The header fields of a block's JSON, either form (the transactions,
/// hashes or objects, are skipped unread).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HeadJson {
    number: U256,
    #[serde(default)]
    base_fee_per_gas: Option<U256>,
    gas_used: U256,
    gas_limit: U256,
    #[serde(default)]
    blob_gas_used: Option<U256>,
    #[serde(default)]
    excess_blob_gas: Option<U256>,
    timestamp: U256,
    miner: Address,
}

impl BlockHead {
    /// Reads the header fields from a block's JSON, hashes-only or full
    /// (the cheapest stored form is the hashes-only one).
    ///
    /// # Errors
    ///
    /// Malformed JSON, a field missing, or a value too wide for its field.
    pub fn from_json(block: &[u8]) -> Result<Self, String> {
        let raw: HeadJson =
            serde_json::from_slice(block).map_err(|err| format!("block JSON: {err}"))?;
        Ok(Self {
            number: small(raw.number, "number")?,
            base_fee: raw
                .base_fee_per_gas
                .map(|fee| wide(fee, "baseFeePerGas"))
                .transpose()?,
            gas_used: small(raw.gas_used, "gasUsed")?,
            gas_limit: small(raw.gas_limit, "gasLimit")?,
            blob_gas_used: raw
                .blob_gas_used
                .map(|used| small(used, "blobGasUsed"))
                .transpose()?,
            excess_blob_gas: raw
                .excess_blob_gas
                .map(|excess| small(excess, "excessBlobGas"))
                .transpose()?,
            timestamp: small(raw.timestamp, "timestamp")?,
            coinbase: raw.miner,
        })
    }

    /// The header-level facts of a block read in full.
    pub fn of(block: &BlockFees) -> Self {
        Self {
            number: block.number,
            base_fee: block.base_fee,
            gas_used: block.gas_used,
            gas_limit: block.gas_limit,
            blob_gas_used: block.blob_gas_used,
            excess_blob_gas: block.excess_blob_gas,
            timestamp: block.timestamp,
            coinbase: block.coinbase,
        }
    }

    /// The block as the fee formulas take it ([`next_base_fee`],
    /// [`history_next_blob_base_fee`]), without its transactions (which
    /// they do not read).
    pub fn as_block_fees(&self) -> BlockFees {
        BlockFees {
            number: self.number,
            base_fee: self.base_fee,
            gas_used: self.gas_used,
            gas_limit: self.gas_limit,
            blob_gas_used: self.blob_gas_used,
            excess_blob_gas: self.excess_blob_gas,
            timestamp: self.timestamp,
            coinbase: self.coinbase,
            txs: Vec::new(),
        }
    }
}

/// A block's transactions as reward percentiles read them: effective tips
/// ascending, transactions of equal tip merged, each with the running sum
/// of receipt gas up to and including it.
///
/// Merging equal tips changes no answer: a percentile's answer is the tip
/// of the first transaction at which the running sum reaches the
/// threshold, and every transaction of a merged run has that run's tip.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockRewards {
    tips: Box<[u128]>,
    /// `cumulative[i]`: gas of every transaction with a tip up to
    /// `tips[i]` (saturating; receipts' gas sums to the block's gasUsed).
    cumulative: Box<[u64]>,
}

impl BlockRewards {
    /// The rewards data of a block read in full.
    pub fn of(block: &BlockFees) -> Self {
        let mut sorted: Vec<(u128, u64)> =
            block.txs.iter().map(|tx| (tx.tip, tx.gas_used)).collect();
        sorted.sort_unstable_by_key(|&(tip, _)| tip);
        let mut tips: Vec<u128> = Vec::with_capacity(sorted.len());
        let mut cumulative: Vec<u64> = Vec::with_capacity(sorted.len());
        let mut sum = 0u64;
        for (tip, gas) in sorted {
            sum = sum.saturating_add(gas);
            if tips.last() == Some(&tip) {
                *cumulative.last_mut().expect("as long as tips") = sum;
            } else {
                tips.push(tip);
                cumulative.push(sum);
            }
        }
        Self {
            tips: tips.into_boxed_slice(),
            cumulative: cumulative.into_boxed_slice(),
        }
    }

    /// The block's reward row for `percentiles`, as [`block_rewards`]
    /// computes it from the block read in full; `gas_used` is the block's
    /// (the header's, not the receipts' sum).
    pub fn at(&self, gas_used: u64, percentiles: &[f64]) -> Vec<u128> {
        let Some(last) = self.tips.len().checked_sub(1) else {
            return vec![0; percentiles.len()];
        };
        percentiles
            .iter()
            .map(|&p| {
                // As `block_rewards`: Go's truncating float-to-uint64.
                let threshold = (gas_used as f64 * p / 100.0) as u64;
                let index = self.cumulative.partition_point(|&sum| sum < threshold);
                self.tips[index.min(last)]
            })
            .collect()
    }

    /// What it costs to keep, for [`HISTORY_REWARDS_BYTES`].
    pub fn bytes(&self) -> usize {
        REWARDS_ENTRY_BYTES + self.tips.len() * (size_of::<u128>() + size_of::<u64>())
    }
}

/// One block of an `eth_feeHistory` range as the cache gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryBlock {
    /// Its header-level facts.
    pub head: BlockHead,
    /// Its rewards data, when percentiles were asked.
    pub rewards: Option<Arc<BlockRewards>>,
}

/// A block as fee history reads it: what the store gives, in the order of
/// cost (the hash from the record's fixed fields, the header JSON, the
/// full block and its receipts). `None`: not readable (a miss).
pub trait StoredBlock {
    /// The bytes of one stored part.
    type Json: AsRef<[u8]>;
    /// The block's hash, what the cache confirms an entry by.
    fn hash(&self) -> [u8; 32];
    /// The block's header JSON: its hashes-only form is the cheapest read
    /// that holds gasUsed, gasLimit, baseFeePerGas, blobGasUsed and
    /// excessBlobGas.
    fn header_json(&self) -> Option<Self::Json>;
    /// The block with full transactions.
    fn full_json(&self) -> Option<Self::Json>;
    /// Its receipts.
    fn receipts_json(&self) -> Option<Self::Json>;
}

/// What one `eth_feeHistory` request read, for charging its client by
/// blocks read rather than by the call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HistoryReads {
    /// Blocks found in the cache: only the record's fixed fields were read
    /// (for the hash).
    pub cached: u64,
    /// Blocks whose header JSON was read and parsed.
    pub headers: u64,
    /// Blocks read in full with their receipts and parsed.
    pub bodies: u64,
    /// Bytes of JSON read and parsed (header JSON, full blocks, receipts).
    pub bytes: u64,
}

impl HistoryReads {
    /// Blocks read or parsed: every block of the range but the cached.
    pub fn blocks_read(&self) -> u64 {
        self.headers + self.bodies
    }
}

/// Least recently used entries by height, confirmed by hash, under an
/// entry and a byte bound.
struct Lru<T> {
    entries: HashMap<u64, Entry<T>>,
    /// Use tick to height, oldest first.
    order: BTreeMap<u64, u64>,
    tick: u64,
    bytes: usize,
    max_entries: usize,
    max_bytes: usize,
}

struct Entry<T> {
    hash: [u8; 32],
    value: Arc<T>,
    tick: u64,
    bytes: usize,
}

impl<T> Lru<T> {
    fn new(max_entries: usize, max_bytes: usize) -> Self {
        Self {
            entries: HashMap::new(),
            order: BTreeMap::new(),
            tick: 0,
            bytes: 0,
            max_entries,
            max_bytes,
        }
    }

    fn get(&mut self, height: u64, hash: &[u8; 32]) -> Option<Arc<T>> {
        let entry = self.entries.get_mut(&height)?;
        if entry.hash != *hash {
            return None;
        }
        self.tick += 1;
        self.order.remove(&entry.tick);
        entry.tick = self.tick;
        self.order.insert(self.tick, height);
        Some(entry.value.clone())
    }

    fn insert(&mut self, height: u64, hash: [u8; 32], value: Arc<T>, bytes: usize) {
        self.tick += 1;
        let entry = Entry {
            hash,
            value,
            tick: self.tick,
            bytes,
        };
        if let Some(old) = self.entries.insert(height, entry) {
            self.order.remove(&old.tick);
            self.bytes -= old.bytes;
        }
        self.order.insert(self.tick, height);
        self.bytes += bytes;
        while self.entries.len() > self.max_entries || self.bytes > self.max_bytes {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            if let Some(old) = self.entries.remove(&oldest) {
                self.bytes -= old.bytes;
            }
        }
    }

    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// What fee history read of recent blocks: [`BlockHead`]s (at most
/// [`HISTORY_HEADS_CACHED`]) apart from [`BlockRewards`] (at most
/// [`HISTORY_REWARDS_CACHED`] blocks and [`HISTORY_REWARDS_BYTES`]), each
/// least recently used first out.
pub struct HistoryCache {
    heads: Mutex<Lru<BlockHead>>,
    rewards: Mutex<Lru<BlockRewards>>,
}

impl Default for HistoryCache {
    fn default() -> Self {
        Self::with_bounds(
            HISTORY_HEADS_CACHED,
            HISTORY_REWARDS_CACHED,
            HISTORY_REWARDS_BYTES,
        )
    }
}

impl HistoryCache {
    /// A cache of at most `heads` heads and `rewards` rewards entries of
    /// `rewards_bytes` in all.
    pub fn with_bounds(heads: usize, rewards: usize, rewards_bytes: usize) -> Self {
        Self {
            heads: Mutex::new(Lru::new(heads, usize::MAX)),
            rewards: Mutex::new(Lru::new(rewards, rewards_bytes)),
        }
    }

    /// Blocks with heads kept, and blocks with rewards kept.
    pub fn len(&self) -> (usize, usize) {
        (
            self.heads.lock().unwrap_or_else(|e| e.into_inner()).len(),
            self.rewards.lock().unwrap_or_else(|e| e.into_inner()).len(),
        )
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == (0, 0)
    }

    fn head(&self, height: u64, hash: &[u8; 32]) -> Option<Arc<BlockHead>> {
        self.heads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(height, hash)
    }

    fn keep_head(&self, height: u64, hash: [u8; 32], head: Arc<BlockHead>) {
        let bytes = size_of::<Entry<BlockHead>>() + size_of::<BlockHead>();
        self.heads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(height, hash, head, bytes);
    }

    fn rewards(&self, height: u64, hash: &[u8; 32]) -> Option<Arc<BlockRewards>> {
        self.rewards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(height, hash)
    }

    fn keep_rewards(&self, height: u64, hash: [u8; 32], rewards: Arc<BlockRewards>) {
        let bytes = rewards.bytes();
        self.rewards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(height, hash, rewards, bytes);
    }

    /// The blocks `heights` (oldest first) as fee history reads them: heads
    /// alone without `rewards` (from the header JSON, receipts never
    /// read), with their [`BlockRewards`] too with it (the full block and
    /// its receipts read, once, where not kept). `open` gives a stored
    /// block by height; what was read is added to `reads`.
    ///
    /// `Ok(None)` when a block is not stored or not readable, or its JSON
    /// is not for its height (a miss).
    ///
    /// # Errors
    ///
    /// What `open` returns.
    pub fn blocks<B: StoredBlock, E>(
        &self,
        heights: RangeInclusive<u64>,
        rewards: bool,
        mut open: impl FnMut(u64) -> Result<Option<B>, E>,
        reads: &mut HistoryReads,
    ) -> Result<Option<Vec<HistoryBlock>>, E> {
        let mut blocks = Vec::with_capacity(
            usize::try_from(heights.end().saturating_sub(*heights.start()))
                .unwrap_or(0)
                .saturating_add(1)
                .min(MAX_FEE_HISTORY_BLOCKS as usize),
        );
        for height in heights {
            let Some(block) = open(height)? else {
                return Ok(None);
            };
            let hash = block.hash();
            let head = self.head(height, &hash);
            let read = if rewards {
                let kept = self.rewards(height, &hash);
                match (head, kept) {
                    (Some(head), Some(kept)) => {
                        reads.cached += 1;
                        Some((*head, Some(kept)))
                    }
                    _ => {
                        reads.bodies += 1;
                        self.read_body(height, hash, &block, reads)
                            .map(|(head, rewards)| (head, Some(rewards)))
                    }
                }
            } else {
                match head {
                    Some(head) => {
                        reads.cached += 1;
                        Some((*head, None))
                    }
                    None => {
                        reads.headers += 1;
                        self.read_head(height, hash, &block, reads)
                            .map(|head| (head, None))
                    }
                }
            };
            let Some((head, rewards)) = read else {
                return Ok(None);
            };
            blocks.push(HistoryBlock { head, rewards });
        }
        Ok(Some(blocks))
    }

    fn read_head<B: StoredBlock>(
        &self,
        height: u64,
        hash: [u8; 32],
        block: &B,
        reads: &mut HistoryReads,
    ) -> Option<BlockHead> {
        let json = block.header_json()?;
        reads.bytes += json.as_ref().len() as u64;
        let head = BlockHead::from_json(json.as_ref())
            .ok()
            .filter(|head| head.number == height)?;
        self.keep_head(height, hash, Arc::new(head));
        Some(head)
    }

    fn read_body<B: StoredBlock>(
        &self,
        height: u64,
        hash: [u8; 32],
        block: &B,
        reads: &mut HistoryReads,
    ) -> Option<(BlockHead, Arc<BlockRewards>)> {
        let (full, receipts) = (block.full_json()?, block.receipts_json()?);
        reads.bytes += (full.as_ref().len() + receipts.as_ref().len()) as u64;
        let fees = BlockFees::from_json(full.as_ref(), receipts.as_ref())
            .ok()
            .filter(|fees| fees.number == height)?;
        let head = BlockHead::of(&fees);
        let rewards = Arc::new(BlockRewards::of(&fees));
        self.keep_head(height, hash, Arc::new(head));
        self.keep_rewards(height, hash, rewards.clone());
        Some((head, rewards))
    }
}

/// The fee methods' caches: the oracle's (`eth_gasPrice`,
/// `eth_maxPriorityFeePerGas`: the newest blocks with their senders) and
/// fee history's, apart, so a long fee history does not evict the
/// oracle's blocks.
#[derive(Default)]
pub struct FeeCaches {
    /// The blocks the oracle read lately.
    pub oracle: crate::block::HeightCache<BlockFees>,
    /// What fee history read.
    pub history: HistoryCache,
}
