//! Reading the upstream's answer for a block: its JSON, receipts and raw
//! RLP decoded into where each part lies ([`Decoded`]), with the checks no
//! hash covers of where a transaction, receipt or log says it sits, and the
//! raw block's transactions found and hashed. Verification
//! ([`crate::verify`]) reads what this decoded; the stored record is laid
//! out from it afterwards ([`crate::prepare`]).
//!
//! Spans come from serde_json's borrowed [`RawValue`]s, which point into the
//! received text, so an offset is a pointer difference: nothing is
//! re-serialised, and field order and unknown fields (avalanchego's
//! `blockExtraData`, `extDataHash`, …) pass through untouched.

use neve_store::{Hash, LogEntry, Span, TxEntry};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::rawrlp;

/// The upstream's answers to `debug_getRaw*`, as the JSON values it sent
/// (`"0x…"` strings; an array of them for receipts), each possibly empty.
/// Kept as received so serving them is a copy; a raw transaction is a slice
/// of the block's hex text.
#[derive(Clone, Debug, Default)]
pub struct RawParts {
    /// `debug_getRawHeader`.
    pub header: Vec<u8>,
    /// `debug_getRawBlock`.
    pub block: Vec<u8>,
    /// `debug_getRawReceipts`.
    pub receipts: Vec<u8>,
}

/// Decodes a JSON string of `0x`-hex into bytes.
fn decode_hex_json(json: &[u8]) -> Result<Vec<u8>, String> {
    let text = std::str::from_utf8(json).map_err(|e| e.to_string())?;
    let inner = text
        .strip_prefix("\"0x")
        .and_then(|t| t.strip_suffix('"'))
        .ok_or_else(|| "not a quoted 0x-hex string".to_string())?;
    alloy_primitives::hex::decode(inner).map_err(|e| e.to_string())
}

/// Why a block could not be prepared: the upstream sent something that is
/// not a consistent block.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PrepareError {
    /// The block JSON lacks a field or has one of the wrong shape.
    #[error("block JSON: {0}")]
    Block(String),
    /// The receipts JSON is not an array of receipts.
    #[error("receipts JSON: {0}")]
    Receipts(String),
    /// Receipts do not match the block's transactions one to one.
    #[error("receipts do not match the transactions: {0}")]
    Mismatch(String),
    /// The raw block does not hold the block's transactions.
    #[error("raw block: {0}")]
    Raw(String),
}

#[derive(Deserialize)]
struct BlockShape<'a> {
    #[serde(borrow)]
    hash: &'a str,
    #[serde(borrow)]
    number: &'a str,
    #[serde(borrow, rename = "parentHash")]
    parent_hash: &'a str,
    #[serde(borrow, rename = "logsBloom")]
    logs_bloom: &'a str,
    #[serde(borrow)]
    transactions: &'a RawValue,
}

/// Where a transaction, receipt or log says it sits. No hash covers these
/// fields, so each is checked against the block (when present).
struct Placement<'a> {
    block_hash: Option<&'a str>,
    block_number: Option<&'a str>,
    transaction_index: Option<&'a str>,
}

impl Placement<'_> {
    /// Checks the claims against block `hash` at `height`, transaction `index`.
    fn check(
        &self,
        what: impl Fn() -> String,
        hash: &[u8; 32],
        height: u64,
        index: usize,
    ) -> Result<(), PrepareError> {
        let wrong = |field: &str, value: &str| {
            Err(PrepareError::Mismatch(format!(
                "{} has {field} {value}",
                what()
            )))
        };
        if let Some(value) = self.block_hash
            && fixed_hex::<32>(value).as_ref() != Some(hash)
        {
            return wrong("blockHash", value);
        }
        if let Some(value) = self.block_number
            && neve_upstream::parse_quantity(value) != Some(height)
        {
            return wrong("blockNumber", value);
        }
        if let Some(value) = self.transaction_index
            && neve_upstream::parse_quantity(value) != Some(index as u64)
        {
            return wrong("transactionIndex", value);
        }
        Ok(())
    }
}

/// Declares a borrowed JSON shape with the placement fields added, and
/// its `placement()`.
macro_rules! placed_shape {
    ($name:ident { $($(#[$meta:meta])* $field:ident: $ty:ty,)* }) => {
        #[derive(Deserialize)]
        struct $name<'a> {
            $($(#[$meta])* $field: $ty,)*
            #[serde(borrow, default, rename = "blockHash")]
            block_hash: Option<&'a str>,
            #[serde(borrow, default, rename = "blockNumber")]
            block_number: Option<&'a str>,
            #[serde(borrow, default, rename = "transactionIndex")]
            transaction_index: Option<&'a str>,
        }

        impl<'a> $name<'a> {
            fn placement(&self) -> Placement<'a> {
                Placement {
                    block_hash: self.block_hash,
                    block_number: self.block_number,
                    transaction_index: self.transaction_index,
                }
            }
        }
    };
}

placed_shape!(TxShape {
    #[serde(borrow)]
    hash: &'a str,
});

placed_shape!(ReceiptShape {
    #[serde(borrow, rename = "transactionHash")]
    transaction_hash: &'a str,
    #[serde(borrow)]
    logs: Vec<&'a RawValue>,
});

placed_shape!(LogShape {
    #[serde(borrow)]
    address: &'a str,
    #[serde(borrow)]
    topics: Vec<&'a str>,
    #[serde(borrow, default, rename = "transactionHash")]
    transaction_hash: Option<&'a str>,
    #[serde(borrow, default, rename = "logIndex")]
    log_index: Option<&'a str>,
});

/// Decodes `0x`-prefixed hex of exactly `N` bytes.
pub(crate) fn fixed_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let digits = text.strip_prefix("0x")?;
    if digits.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(digits.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Where `inner` (a slice of `outer`) starts and how long it is.
fn span_of(outer: &str, inner: &str) -> Span {
    let offset = inner.as_ptr() as usize - outer.as_ptr() as usize;
    debug_assert!(offset + inner.len() <= outer.len());
    Span::new(offset as u32, inner.len() as u32)
}

/// A block decoded from the upstream's answer: the text as received
/// (borrowed), where each transaction, receipt and log lies in it, the
/// hashes-only block, the raw parts, and the raw block's RLP decoded once.
/// What verification reads; laid out as a [`crate::prepare::PreparedBlock`]
/// once it verified.
#[derive(Debug)]
pub struct Decoded<'a> {
    /// Height.
    pub height: u64,
    /// Hash.
    pub hash: Hash,
    /// Parent hash.
    pub parent_hash: Hash,
    pub(crate) logs_bloom: [u8; 256],
    pub(crate) full: &'a str,
    pub(crate) hashes_only: Vec<u8>,
    pub(crate) receipts: &'a str,
    pub(crate) raw: RawParts,
    /// `raw.header` decoded from its hex (`None` without a raw header); a
    /// failure is verification's to report, after the header's hash.
    pub(crate) raw_header: Option<Result<Vec<u8>, String>>,
    /// `raw.block` decoded from its hex (`None` without a raw block).
    pub(crate) raw_block: Option<Vec<u8>>,
    pub(crate) txs: Vec<TxEntry>,
    pub(crate) logs: Vec<LogEntry>,
}

impl Decoded<'_> {
    /// The block JSON with full transactions, as received.
    pub fn full_json(&self) -> &[u8] {
        self.full.as_bytes()
    }

    /// The block JSON with transaction hashes only.
    pub fn hashes_only_json(&self) -> &str {
        std::str::from_utf8(&self.hashes_only).expect("built from a str")
    }

    /// The receipts JSON, as received.
    pub fn receipts_json(&self) -> &[u8] {
        self.receipts.as_bytes()
    }

    /// Where each transaction and receipt is.
    pub fn transactions(&self) -> &[TxEntry] {
        &self.txs
    }

    /// The raw header's RLP, when the upstream sent one, or why its hex
    /// did not decode.
    pub fn raw_header_rlp(&self) -> Option<Result<&[u8], &str>> {
        self.raw_header
            .as_ref()
            .map(|decoded| decoded.as_deref().map_err(String::as_str))
    }

    /// The raw block's RLP, when the upstream sent one.
    pub fn raw_block_rlp(&self) -> Option<&[u8]> {
        self.raw_block.as_deref()
    }

    /// The raw receipts as the JSON array the upstream sent, or empty.
    pub fn raw_receipts_json(&self) -> &[u8] {
        &self.raw.receipts
    }
}

/// Decodes a block from its `fullTx=true` JSON, its receipts array JSON
/// and the raw RLP, if any, checking what says where each part sits.
pub fn decode<'a>(
    full: &'a str,
    receipts: &'a str,
    raw: RawParts,
) -> Result<Decoded<'a>, PrepareError> {
    let block: BlockShape<'_> =
        serde_json::from_str(full).map_err(|e| PrepareError::Block(e.to_string()))?;
    let bad = |field: &str| PrepareError::Block(format!("{field} is malformed"));
    let hash = fixed_hex::<32>(block.hash).ok_or_else(|| bad("hash"))?;
    let parent_hash = fixed_hex::<32>(block.parent_hash).ok_or_else(|| bad("parentHash"))?;
    let logs_bloom = fixed_hex::<256>(block.logs_bloom).ok_or_else(|| bad("logsBloom"))?;
    let height = neve_upstream::parse_quantity(block.number).ok_or_else(|| bad("number"))?;
    let txs: Vec<&RawValue> = serde_json::from_str(block.transactions.get())
        .map_err(|e| PrepareError::Block(format!("transactions: {e}")))?;
    let receipt_values: Vec<&RawValue> =
        serde_json::from_str(receipts).map_err(|e| PrepareError::Receipts(e.to_string()))?;
    if receipt_values.len() != txs.len() {
        return Err(PrepareError::Mismatch(format!(
            "{} transactions, {} receipts",
            txs.len(),
            receipt_values.len()
        )));
    }
    let raw_header = (!raw.header.is_empty()).then(|| decode_hex_json(&raw.header));
    let mut raw_block = None;
    // Each transaction's bytes in the raw block's RLP, when there is one.
    let rlp_spans = if raw.block.is_empty() {
        Vec::new()
    } else {
        let block_rlp: &[u8] =
            raw_block.insert(decode_hex_json(&raw.block).map_err(PrepareError::Raw)?);
        // The raw block must be this block: its header hashes to the hash.
        let header = rawrlp::header_item(block_rlp).map_err(PrepareError::Raw)?;
        if alloy_primitives::keccak256(header).0 != hash {
            return Err(PrepareError::Raw("the raw block is another block".into()));
        }
        let spans = rawrlp::transaction_spans(block_rlp).map_err(PrepareError::Raw)?;
        if spans.len() != txs.len() {
            return Err(PrepareError::Raw(format!(
                "{} transactions in RLP, {} in JSON",
                spans.len(),
                txs.len()
            )));
        }
        spans
    };
    let raw_spans = if raw.block.is_empty() {
        vec![Span::EMPTY; txs.len()]
    } else {
        // Byte offsets in the RLP → character offsets in `"0x<hex>"`.
        rlp_spans
            .iter()
            .map(|s| Span::new(3 + 2 * s.offset, 2 * s.len))
            .collect()
    };

    // Hashes-only form: the same bytes with the transactions array replaced.
    let array = span_of(full, block.transactions.get());
    let mut hashes_only = Vec::with_capacity(
        full.len()
            .min(array.offset as usize + 70 * txs.len() + 4096),
    );
    hashes_only.extend_from_slice(&full.as_bytes()[..array.offset as usize]);
    hashes_only.push(b'[');

    let mut entries = Vec::with_capacity(txs.len());
    let mut logs = Vec::new();
    for (index, (tx, receipt)) in txs.iter().zip(&receipt_values).enumerate() {
        let tx_shape: TxShape<'_> = serde_json::from_str(tx.get())
            .map_err(|e| PrepareError::Block(format!("transaction {index}: {e}")))?;
        let tx_hash = fixed_hex::<32>(tx_shape.hash).ok_or_else(|| bad("transaction hash"))?;
        let receipt_shape: ReceiptShape<'_> = serde_json::from_str(receipt.get())
            .map_err(|e| PrepareError::Receipts(format!("receipt {index}: {e}")))?;
        if fixed_hex::<32>(receipt_shape.transaction_hash) != Some(tx_hash) {
            return Err(PrepareError::Mismatch(format!(
                "receipt {index} is for {}",
                receipt_shape.transaction_hash
            )));
        }
        tx_shape
            .placement()
            .check(|| format!("transaction {index}"), &hash, height, index)?;
        receipt_shape
            .placement()
            .check(|| format!("receipt {index}"), &hash, height, index)?;
        if index > 0 {
            hashes_only.push(b',');
        }
        hashes_only.push(b'"');
        hashes_only.extend_from_slice(tx_shape.hash.as_bytes());
        hashes_only.push(b'"');
        for log in &receipt_shape.logs {
            let shape: LogShape<'_> = serde_json::from_str(log.get())
                .map_err(|e| PrepareError::Receipts(format!("log: {e}")))?;
            let what = || format!("log {} (transaction {index})", logs.len());
            shape.placement().check(what, &hash, height, index)?;
            if let Some(value) = shape.transaction_hash
                && fixed_hex::<32>(value) != Some(tx_hash)
            {
                return Err(PrepareError::Mismatch(format!(
                    "{} has transactionHash {value}",
                    what()
                )));
            }
            // Log indexes count the block's logs from zero.
            if let Some(value) = shape.log_index
                && neve_upstream::parse_quantity(value) != Some(logs.len() as u64)
            {
                return Err(PrepareError::Mismatch(format!(
                    "{} has logIndex {value}",
                    what()
                )));
            }
            let topics = shape
                .topics
                .iter()
                .map(|t| fixed_hex::<32>(t))
                .collect::<Option<Vec<_>>>()
                .filter(|t| t.len() <= 4)
                .ok_or_else(|| PrepareError::Receipts("log topics malformed".into()))?;
            logs.push(LogEntry {
                tx_index: index as u32,
                span: span_of(receipts, log.get()),
                address: fixed_hex::<20>(shape.address)
                    .ok_or_else(|| PrepareError::Receipts("log address malformed".into()))?,
                topics,
            });
        }
        // The raw block was decoded once above: a transaction is a slice of
        // its RLP, not its hex decoded again.
        if let Some(rlp) = &raw_block {
            let span = rlp_spans[index];
            let bytes = &rlp[span.offset as usize..(span.offset + span.len) as usize];
            if alloy_primitives::keccak256(bytes).0 != tx_hash {
                return Err(PrepareError::Raw(format!(
                    "raw transaction {index} is not {}",
                    tx_shape.hash
                )));
            }
        }
        let tx_span = span_of(full, tx.get());
        entries.push(TxEntry {
            hash: tx_hash,
            full: tx_span,
            receipt: span_of(receipts, receipt.get()),
            raw: raw_spans[index],
        });
    }
    hashes_only.push(b']');
    hashes_only.extend_from_slice(&full.as_bytes()[(array.offset + array.len) as usize..]);

    Ok(Decoded {
        height,
        hash,
        parent_hash,
        logs_bloom,
        full,
        hashes_only,
        receipts,
        raw,
        raw_header,
        raw_block,
        txs: entries,
        logs,
    })
}
