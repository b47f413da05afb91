//! What the fee methods read of one block: its base fee, gas and blob
//! fields, and each transaction's effective tip and gas used, from the
//! stored JSON of the block and its receipts.

use alloy_primitives::{Address, U256};
use serde::Deserialize;

/// One transaction as the fee logic sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxFee {
    /// The effective tip per gas against the block's base fee:
    /// `min(tipCap, feeCap - baseFee)`, or the tip cap when the block has no
    /// base fee. Legacy and access-list transactions have both caps equal
    /// to their gas price.
    pub tip: u128,
    /// Gas the transaction used, from its receipt.
    pub gas_used: u64,
    /// The transaction's sender.
    pub sender: Address,
}

/// What the oracle and fee history read of one block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockFees {
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
    /// The fee recipient; its own transactions are not sampled.
    pub coinbase: Address,
    /// The block's transactions, in block order.
    pub txs: Vec<TxFee>,
}

/// The fields of `eth_getBlockByNumber(n, true)` fees need; the rest is
/// skipped unread.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockJson {
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
    #[serde(default)]
    transactions: Vec<TxJson>,
}

/// A full transaction object's pricing fields and sender.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TxJson {
    #[serde(default)]
    gas_price: Option<U256>,
    #[serde(default)]
    max_fee_per_gas: Option<U256>,
    #[serde(default)]
    max_priority_fee_per_gas: Option<U256>,
    from: Address,
}

impl TxJson {
    /// `(feeCap, tipCap)`: the 1559 pair when the transaction carries one
    /// (types 2, 3 and 4), else its gas price for both (types 0 and 1).
    /// For 1559 transactions geth's JSON `gasPrice` is the effective price
    /// paid, not a cap, so it must not be used for them.
    fn caps(&self) -> Option<(U256, U256)> {
        match (self.max_fee_per_gas, self.max_priority_fee_per_gas) {
            (Some(fee_cap), Some(tip_cap)) => Some((fee_cap, tip_cap)),
            _ => self.gas_price.map(|price| (price, price)),
        }
    }
}

/// A receipt's gas used (`eth_getBlockReceipts` element).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReceiptJson {
    gas_used: U256,
}

pub(super) fn small(value: U256, field: &str) -> Result<u64, String> {
    u64::try_from(value).map_err(|_| format!("{field} does not fit 64 bits"))
}

pub(super) fn wide(value: U256, field: &str) -> Result<u128, String> {
    u128::try_from(value).map_err(|_| format!("{field} does not fit 128 bits"))
}

/// geth's `EffectiveGasTip` in its 256-bit arithmetic: the subtraction
/// wraps when the fee cap is below the base fee, so the minimum is then the
/// tip cap (geth returns that value alongside an error both callers ignore).
pub(super) fn effective_tip(fee_cap: U256, tip_cap: U256, base_fee: Option<u128>) -> U256 {
    match base_fee {
        None => tip_cap,
        Some(base) => tip_cap.min(fee_cap.wrapping_sub(U256::from(base))),
    }
}

impl BlockFees {
    /// Reads a block from geth's `eth_getBlockByNumber(n, true)` JSON object
    /// and its `eth_getBlockReceipts` JSON array (receipts in transaction
    /// order). Unknown fields are ignored.
    ///
    /// # Errors
    ///
    /// Malformed JSON, a hashes-only block, a transaction without prices,
    /// a receipt count that differs from the transaction count, or a value
    /// too wide for its field (an effective tip above 2^128 included).
    pub fn from_json(block: &[u8], receipts: &[u8]) -> Result<Self, String> {
        let raw: BlockJson =
            serde_json::from_slice(block).map_err(|err| format!("block JSON: {err}"))?;
        let receipts: Vec<ReceiptJson> =
            serde_json::from_slice(receipts).map_err(|err| format!("receipts JSON: {err}"))?;
        if receipts.len() != raw.transactions.len() {
            return Err(format!(
                "block has {} transactions but {} receipts",
                raw.transactions.len(),
                receipts.len()
            ));
        }
        let base_fee = raw
            .base_fee_per_gas
            .map(|fee| wide(fee, "baseFeePerGas"))
            .transpose()?;
        let mut txs = Vec::with_capacity(raw.transactions.len());
        for (index, (tx, receipt)) in raw.transactions.iter().zip(&receipts).enumerate() {
            let (fee_cap, tip_cap) = tx
                .caps()
                .ok_or_else(|| format!("transaction {index} has no gasPrice"))?;
            let tip = u128::try_from(effective_tip(fee_cap, tip_cap, base_fee))
                .map_err(|_| format!("transaction {index}: effective tip does not fit 128 bits"))?;
            txs.push(TxFee {
                tip,
                gas_used: small(receipt.gas_used, "receipt gasUsed")?,
                sender: tx.from,
            });
        }
        Ok(Self {
            number: small(raw.number, "number")?,
            base_fee,
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
            txs,
        })
    }
}
