//! What the checks compare against: the verified header's facts and the
//! verified parts of the block.

use alloy_consensus::{ReceiptEnvelope, TxEnvelope};
use alloy_primitives::{Address, B256, Log};
use serde_json::{Map, Value};

/// What the verified header says that the other checks need.
pub(crate) struct HeaderFacts {
    /// The header's fields as the verified header serialises them.
    pub fields: Map<String, Value>,
    /// Its RLP encoding (whose hash is the block hash).
    pub rlp: Vec<u8>,
    pub timestamp: u64,
    pub base_fee: Option<u64>,
    pub excess_blob_gas: Option<u64>,
    pub ommers_hash: B256,
    pub withdrawals_root: Option<B256>,
    /// avalanchego's C-chain: the hash of the block's extra data.
    pub ext_data_hash: Option<B256>,
    /// The chain's total difficulty at this block, where the chain's rules
    /// make it follow from the header alone.
    pub total_difficulty: Option<alloy_primitives::U256>,
}

/// The verified parts of a block the fields are checked against.
pub(crate) struct Verified<'a> {
    pub header: &'a HeaderFacts,
    pub transactions: &'a [TxEnvelope],
    pub senders: &'a [Address],
    pub receipts: &'a [ReceiptEnvelope<Log>],
}
