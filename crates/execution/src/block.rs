//! The block a call runs in: the fields of a verified header the EVM reads
//! (number, time, coinbase, gas limit, base fee, prevrandao, blob excess),
//! read once from the header's stored JSON. The header was verified by hash
//! at ingest, so these are the chain's own values.

use alloy_primitives::{Address, B256, U256};
use serde::Deserialize;

/// What the EVM reads of the block a call is pinned to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockFacts {
    /// Height.
    pub number: u64,
    /// The block's hash (what fetches name the state by).
    pub hash: B256,
    /// Seconds since the epoch.
    pub timestamp: u64,
    /// `COINBASE`.
    pub beneficiary: Address,
    /// `GASLIMIT`.
    pub gas_limit: u64,
    /// `BASEFEE`, from London on.
    pub base_fee: Option<u64>,
    /// `DIFFICULTY` before the merge.
    pub difficulty: U256,
    /// `PREVRANDAO` after the merge (the header's mix hash).
    pub mix_hash: B256,
    /// The blob gas excess, from Cancun on.
    pub excess_blob_gas: Option<u64>,
    /// Gas its transactions used (a simulated child's base fee follows it).
    pub gas_used: u64,
    /// Blob gas its transactions used, from Cancun on.
    pub blob_gas_used: Option<u64>,
    /// The verified state root every read starts from.
    pub state_root: B256,
    /// The parent's hash (a replayed block runs over its parent's state).
    pub parent_hash: B256,
    /// EIP-4788's root, from Cancun on (a replayed block's first system
    /// call stores it).
    pub parent_beacon_block_root: Option<B256>,
    /// Which forks the header's own fields show (Shanghai's
    /// `withdrawalsRoot`, Cancun's `blobGasUsed`, Prague's
    /// `requestsHash`): what rules claimed for it must agree with.
    pub shows: HeaderForks,
}

/// The fork-specific fields a verified header carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeaderForks {
    /// `withdrawalsRoot`: Shanghai or later.
    pub withdrawals: bool,
    /// `blobGasUsed`: Cancun or later.
    pub blob_gas: bool,
    /// `requestsHash`: Prague or later.
    pub requests: bool,
}

/// A header's JSON as geth and avalanchego write it, the fields a call
/// needs (anything else, transactions included, is skipped unread).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HeaderJson {
    number: U256,
    hash: B256,
    timestamp: U256,
    miner: Address,
    gas_limit: U256,
    #[serde(default)]
    base_fee_per_gas: Option<U256>,
    #[serde(default)]
    difficulty: U256,
    #[serde(default)]
    mix_hash: B256,
    #[serde(default)]
    excess_blob_gas: Option<U256>,
    #[serde(default)]
    gas_used: U256,
    state_root: B256,
    #[serde(default)]
    parent_hash: B256,
    #[serde(default)]
    parent_beacon_block_root: Option<B256>,
    #[serde(default)]
    withdrawals_root: Option<B256>,
    #[serde(default)]
    blob_gas_used: Option<U256>,
    #[serde(default)]
    requests_hash: Option<B256>,
}

fn small(value: U256, field: &str) -> Result<u64, String> {
    u64::try_from(value).map_err(|_| format!("{field} does not fit 64 bits"))
}

impl BlockFacts {
    /// Reads the facts from a block's JSON (hashes-only or full form).
    pub fn from_json(json: &[u8]) -> Result<BlockFacts, String> {
        let header: HeaderJson = serde_json::from_slice(json).map_err(|e| e.to_string())?;
        Ok(BlockFacts {
            number: small(header.number, "number")?,
            hash: header.hash,
            timestamp: small(header.timestamp, "timestamp")?,
            beneficiary: header.miner,
            gas_limit: small(header.gas_limit, "gasLimit")?,
            base_fee: header
                .base_fee_per_gas
                .map(|fee| small(fee, "baseFeePerGas"))
                .transpose()?,
            difficulty: header.difficulty,
            mix_hash: header.mix_hash,
            excess_blob_gas: header
                .excess_blob_gas
                .map(|gas| small(gas, "excessBlobGas"))
                .transpose()?,
            gas_used: small(header.gas_used, "gasUsed")?,
            blob_gas_used: header
                .blob_gas_used
                .map(|gas| small(gas, "blobGasUsed"))
                .transpose()?,
            state_root: header.state_root,
            parent_hash: header.parent_hash,
            parent_beacon_block_root: header.parent_beacon_block_root,
            shows: HeaderForks {
                withdrawals: header.withdrawals_root.is_some(),
                blob_gas: header.blob_gas_used.is_some(),
                requests: header.requests_hash.is_some(),
            },
        })
    }

    /// Whether the block's own header contradicts `fork` being in force at
    /// it: on Ethereum's chains each of Shanghai, Cancun and Prague adds a
    /// header field, so the fields name the fork from Shanghai to Prague
    /// (Osaka adds none); on coreth's only a field newer than the rules'
    /// fork is a contradiction (its headers follow its own upgrades).
    pub fn contradicts(&self, fork: &crate::rules::Fork) -> bool {
        use revm::primitives::hardfork::SpecId;
        let claims = |spec: SpecId| fork.spec.is_enabled_in(spec);
        let shows = self.shows;
        let newer = (shows.requests && !claims(SpecId::PRAGUE))
            || (shows.blob_gas && !claims(SpecId::CANCUN))
            || (shows.withdrawals && !claims(SpecId::SHANGHAI));
        let older = (!shows.requests && claims(SpecId::PRAGUE))
            || (!shows.blob_gas && claims(SpecId::CANCUN))
            || (!shows.withdrawals && claims(SpecId::SHANGHAI));
        match fork.dialect {
            crate::rules::Dialect::Ethereum => newer || older,
            crate::rules::Dialect::Coreth => shows.requests && !claims(SpecId::PRAGUE),
        }
    }
}

/// What was read of recent blocks, by height and confirmed by hash:
/// reading a block's facts (or its fees) out of its stored JSON scans its
/// transaction list, this is a lock and a compare. Direct-mapped,
/// [`FACTS_CACHED`] entries unless made with fewer.
pub struct HeightCache<T>(std::sync::Mutex<Vec<Option<Cached<T>>>>);

type Cached<T> = (u64, [u8; 32], std::sync::Arc<T>);

/// The facts calls were pinned to lately.
pub type FactsCache = HeightCache<BlockFacts>;

/// Entries of a [`HeightCache`]: calls and fee answers land on recent
/// blocks, and the fee oracle reads the newest 20. Default is 256.
pub const FACTS_CACHED: usize = 256;

impl<T> Default for HeightCache<T> {
    fn default() -> Self {
        HeightCache::with_entries(FACTS_CACHED)
    }
}

impl<T> HeightCache<T> {
    /// One of `entries` slots (at least one), direct-mapped by height.
    pub fn with_entries(entries: usize) -> Self {
        HeightCache(std::sync::Mutex::new(
            (0..entries.max(1)).map(|_| None).collect(),
        ))
    }

    /// What was read of block `height` with `hash`, read with `read` on a
    /// miss (`None`: not readable, and not cached).
    pub fn get_or_read(
        &self,
        height: u64,
        hash: &[u8; 32],
        read: impl FnOnce() -> Option<T>,
    ) -> Option<std::sync::Arc<T>> {
        let slot = {
            let entries = self.0.lock().unwrap_or_else(|e| e.into_inner());
            let slot = (height % entries.len() as u64) as usize;
            if let Some((at, of, value)) = &entries[slot]
                && *at == height
                && of == hash
            {
                return Some(value.clone());
            }
            slot
        };
        // Read without the lock: a block's parse is milliseconds.
        let value = std::sync::Arc::new(read()?);
        self.0.lock().unwrap_or_else(|e| e.into_inner())[slot] =
            Some((height, *hash, value.clone()));
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_reads_into_the_facts_a_call_needs() {
        let json = br#"{"number":"0x1b4","hash":"0x1111111111111111111111111111111111111111111111111111111111111111","timestamp":"0x65","miner":"0x0000000000000000000000000000000000000abc","gasLimit":"0x1c9c380","baseFeePerGas":"0x7","difficulty":"0x0","mixHash":"0x2222222222222222222222222222222222222222222222222222222222222222","excessBlobGas":"0x0","stateRoot":"0x3333333333333333333333333333333333333333333333333333333333333333","transactions":["0x4444444444444444444444444444444444444444444444444444444444444444"],"extra":1}"#;
        let facts = BlockFacts::from_json(json).unwrap();
        assert_eq!(facts.number, 0x1b4);
        assert_eq!(facts.timestamp, 0x65);
        assert_eq!(facts.gas_limit, 30_000_000);
        assert_eq!(facts.base_fee, Some(7));
        assert_eq!(facts.excess_blob_gas, Some(0));
        assert_eq!(facts.mix_hash, B256::repeat_byte(0x22));
        assert!(BlockFacts::from_json(b"{}").is_err());
        assert_eq!(facts.shows, HeaderForks::default());
    }

    /// Issue 42.6: a fork claimed for a block whose header shows another
    /// is a contradiction.
    #[test]
    fn a_header_contradicts_rules_that_name_another_fork() {
        use revm::primitives::hardfork::SpecId;
        let prague_header = HeaderForks {
            withdrawals: true,
            blob_gas: true,
            requests: true,
        };
        let facts = |shows| BlockFacts {
            number: 1,
            hash: B256::ZERO,
            timestamp: 1,
            beneficiary: Address::ZERO,
            gas_limit: 1,
            base_fee: Some(1),
            difficulty: U256::ZERO,
            mix_hash: B256::ZERO,
            excess_blob_gas: Some(0),
            gas_used: 0,
            blob_gas_used: Some(0),
            state_root: B256::ZERO,
            parent_hash: Default::default(),
            parent_beacon_block_root: None,
            shows,
        };
        let fork = |spec, dialect| crate::rules::Fork {
            dialect,
            activation_time: 0,
            spec,
            blob_base_fee_update_fraction: Some(1),
            blob_target: 0,
            blob_max: 0,
        };
        let ethereum = crate::rules::Dialect::Ethereum;
        assert!(!facts(prague_header).contradicts(&fork(SpecId::PRAGUE, ethereum)));
        assert!(!facts(prague_header).contradicts(&fork(SpecId::OSAKA, ethereum)));
        assert!(facts(prague_header).contradicts(&fork(SpecId::CANCUN, ethereum)));
        let cancun_header = HeaderForks {
            requests: false,
            ..prague_header
        };
        assert!(facts(cancun_header).contradicts(&fork(SpecId::PRAGUE, ethereum)));
        let coreth = crate::rules::Dialect::Coreth;
        assert!(!facts(HeaderForks::default()).contradicts(&fork(SpecId::CANCUN, coreth)));
        assert!(facts(prague_header).contradicts(&fork(SpecId::CANCUN, coreth)));
    }

    #[test]
    fn a_height_cache_keeps_a_block_by_height_and_hash_in_its_slots() {
        let cache = HeightCache::<u32>::with_entries(2);
        let reads = std::cell::Cell::new(0);
        let read = |value| {
            reads.set(reads.get() + 1);
            Some(value)
        };
        assert_eq!(*cache.get_or_read(4, &[1; 32], || read(40)).unwrap(), 40);
        assert_eq!(*cache.get_or_read(4, &[1; 32], || read(41)).unwrap(), 40);
        assert_eq!(reads.get(), 1, "kept");
        // Another block at the height (a reorg), then one in the same slot.
        assert_eq!(*cache.get_or_read(4, &[2; 32], || read(42)).unwrap(), 42);
        assert_eq!(*cache.get_or_read(6, &[3; 32], || read(60)).unwrap(), 60);
        assert_eq!(*cache.get_or_read(4, &[2; 32], || read(43)).unwrap(), 43);
        assert_eq!(*cache.get_or_read(5, &[4; 32], || read(50)).unwrap(), 50);
        assert_eq!(*cache.get_or_read(4, &[2; 32], || read(44)).unwrap(), 43);
        // Not readable: not kept.
        assert!(cache.get_or_read(7, &[5; 32], || None).is_none());
        assert_eq!(*cache.get_or_read(7, &[5; 32], || read(70)).unwrap(), 70);
    }
}
