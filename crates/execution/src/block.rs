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
    /// The verified state root every read starts from.
    pub state_root: B256,
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
    state_root: B256,
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
            state_root: header.state_root,
        })
    }
}

/// What was read of recent blocks, by height and confirmed by hash:
/// reading a block's facts (or its fees) out of its stored JSON scans its
/// transaction list, this is a lock and a compare. Direct-mapped,
/// [`FACTS_CACHED`] entries.
pub struct HeightCache<T>(std::sync::Mutex<Vec<Option<Cached<T>>>>);

type Cached<T> = (u64, [u8; 32], std::sync::Arc<T>);

/// The facts calls were pinned to lately.
pub type FactsCache = HeightCache<BlockFacts>;

/// Entries of a [`HeightCache`]: calls and fee answers land on recent
/// blocks, and the fee oracle reads the newest 20. Default is 256.
pub const FACTS_CACHED: usize = 256;

impl<T> Default for HeightCache<T> {
    fn default() -> Self {
        HeightCache(std::sync::Mutex::new(
            (0..FACTS_CACHED).map(|_| None).collect(),
        ))
    }
}

impl<T> HeightCache<T> {
    /// What was read of block `height` with `hash`, read with `read` on a
    /// miss (`None`: not readable, and not cached).
    pub fn get_or_read(
        &self,
        height: u64,
        hash: &[u8; 32],
        read: impl FnOnce() -> Option<T>,
    ) -> Option<std::sync::Arc<T>> {
        let slot = (height % FACTS_CACHED as u64) as usize;
        if let Some((at, of, value)) = &self.0.lock().unwrap_or_else(|e| e.into_inner())[slot]
            && *at == height
            && of == hash
        {
            return Some(value.clone());
        }
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
    }
}
