//! Turning the upstream's JSON into a store record: the bytes exactly as
//! received, plus the spans of every transaction, receipt and log, the
//! hashes-only block, and what log filters match on.
//!
//! Spans come from serde_json's borrowed [`RawValue`]s, which point into the
//! received text, so an offset is a pointer difference: nothing is
//! re-serialised, and field order and unknown fields (avalanchego's
//! `blockExtraData`, `extDataHash`, …) pass through untouched.

use neve_store::{Hash, LogEntry, NewBlock, Span, TxEntry};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::rawrlp;

/// A block ready to append, owning its bytes.
#[derive(Clone, Debug)]
pub struct PreparedBlock {
    /// Height.
    pub height: u64,
    /// Hash.
    pub hash: Hash,
    /// Parent hash.
    pub parent_hash: Hash,
    logs_bloom: [u8; 256],
    full: Vec<u8>,
    hashes_only: Vec<u8>,
    receipts: Vec<u8>,
    raw_header: Vec<u8>,
    raw_block: Vec<u8>,
    raw_receipts: Vec<u8>,
    txs: Vec<TxEntry>,
    logs: Vec<LogEntry>,
}

impl PreparedBlock {
    /// Bytes it holds (sections and tables), for ingest's buffer bound.
    pub fn bytes(&self) -> usize {
        self.full.len()
            + self.hashes_only.len()
            + self.receipts.len()
            + self.raw_header.len()
            + self.raw_block.len()
            + self.raw_receipts.len()
            + self.txs.len() * std::mem::size_of::<TxEntry>()
            + self.logs.len() * std::mem::size_of::<LogEntry>()
    }

    /// A view for [`neve_store::Store::append`].
    pub fn as_new(&self) -> NewBlock<'_> {
        NewBlock {
            height: self.height,
            hash: self.hash,
            parent_hash: self.parent_hash,
            logs_bloom: self.logs_bloom,
            full: &self.full,
            hashes_only: &self.hashes_only,
            receipts: &self.receipts,
            raw_header: &self.raw_header,
            raw_block: &self.raw_block,
            raw_receipts: &self.raw_receipts,
            txs: self.txs.clone(),
            logs: self.logs.clone(),
        }
    }

    /// The block JSON with full transactions, as received.
    pub fn full_json(&self) -> &[u8] {
        &self.full
    }

    /// The block JSON with transaction hashes only.
    pub fn hashes_only_json(&self) -> &str {
        std::str::from_utf8(&self.hashes_only).expect("prepared from a str")
    }

    /// The receipts JSON, as received.
    pub fn receipts_json(&self) -> &[u8] {
        &self.receipts
    }

    /// Where each transaction and receipt is.
    pub fn transactions(&self) -> &[TxEntry] {
        &self.txs
    }

    /// The raw header as the JSON string the upstream sent (`"0x…"`), or empty.
    pub fn raw_header_json(&self) -> &[u8] {
        &self.raw_header
    }

    /// The raw block as the JSON string the upstream sent, or empty.
    pub fn raw_block_json(&self) -> &[u8] {
        &self.raw_block
    }

    /// The raw receipts as the JSON array the upstream sent, or empty.
    pub fn raw_receipts_json(&self) -> &[u8] {
        &self.raw_receipts
    }

    /// Bytes this block will take in the store, roughly.
    pub fn size(&self) -> usize {
        self.full.len() + self.hashes_only.len() + self.receipts.len() + self.raw_block.len()
    }
}

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
pub fn decode_hex_json(json: &[u8]) -> Result<Vec<u8>, String> {
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

/// Prepares a block from its `fullTx=true` JSON, its receipts array JSON
/// and the raw RLP, if any.
pub fn prepare(full: &str, receipts: &str, raw: RawParts) -> Result<PreparedBlock, PrepareError> {
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
    let raw_spans = if raw.block.is_empty() {
        vec![Span::EMPTY; txs.len()]
    } else {
        let block_rlp = decode_hex_json(&raw.block).map_err(PrepareError::Raw)?;
        // The raw block must be this block: its header hashes to the hash.
        let header = rawrlp::header_item(&block_rlp).map_err(PrepareError::Raw)?;
        if alloy_primitives::keccak256(header).0 != hash {
            return Err(PrepareError::Raw("the raw block is another block".into()));
        }
        let spans = rawrlp::transaction_spans(&block_rlp).map_err(PrepareError::Raw)?;
        if spans.len() != txs.len() {
            return Err(PrepareError::Raw(format!(
                "{} transactions in RLP, {} in JSON",
                spans.len(),
                txs.len()
            )));
        }
        // Byte offsets in the RLP → character offsets in `"0x<hex>"`.
        spans
            .into_iter()
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
        if !raw.block.is_empty() {
            let span = raw_spans[index];
            let hex = &raw.block[span.offset as usize..(span.offset + span.len) as usize];
            let bytes =
                alloy_primitives::hex::decode(hex).map_err(|e| PrepareError::Raw(e.to_string()))?;
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

    Ok(PreparedBlock {
        height,
        hash,
        parent_hash,
        logs_bloom,
        full: full.as_bytes().to_vec(),
        hashes_only,
        receipts: receipts.as_bytes().to_vec(),
        raw_header: raw.header,
        raw_block: raw.block,
        raw_receipts: raw.receipts,
        txs: entries,
        logs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLOOM: &str = "0x00000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000";
    const H1: &str = "0x1111111111111111111111111111111111111111111111111111111111111111";
    const H2: &str = "0x2222222222222222222222222222222222222222222222222222222222222222";

    fn block_json() -> String {
        format!(
            r#"{{"number":"0x5","hash":"{H1}","parentHash":"{H2}","logsBloom":"{BLOOM}","extDataHash":"0xab","transactions":[{{"hash":"{H1}","input":"0x"}},{{"hash":"{H2}","nonce":"0x1"}}],"uncles":[]}}"#
        )
    }

    fn receipts_json() -> String {
        format!(
            r#"[{{"transactionHash":"{H1}","logs":[{{"address":"0x0101010101010101010101010101010101010101","topics":["{H2}"],"data":"0x"}}]}},{{"transactionHash":"{H2}","logs":[]}}]"#
        )
    }

    #[test]
    fn spans_point_at_the_received_bytes() {
        let (full, receipts) = (block_json(), receipts_json());
        let block = prepare(&full, &receipts, RawParts::default()).unwrap();
        assert_eq!(block.height, 5);
        let view = block.as_new();
        let slice = |s: &str, span: Span| {
            s[span.offset as usize..(span.offset + span.len) as usize].to_string()
        };
        assert_eq!(
            slice(&full, view.txs[1].full),
            format!(r#"{{"hash":"{H2}","nonce":"0x1"}}"#)
        );
        assert_eq!(
            slice(&receipts, view.txs[1].receipt),
            format!(r#"{{"transactionHash":"{H2}","logs":[]}}"#)
        );
        assert_eq!(view.logs.len(), 1);
        assert!(slice(&receipts, view.logs[0].span).starts_with(r#"{"address":"0x0101"#));
        assert_eq!(view.logs[0].topics, vec![fixed_hex::<32>(H2).unwrap()]);
        assert_eq!(
            view.full,
            full.as_bytes(),
            "bytes as received, unknown fields included"
        );
    }

    #[test]
    fn hashes_only_form_keeps_everything_but_the_transaction_objects() {
        let block = prepare(&block_json(), &receipts_json(), RawParts::default()).unwrap();
        let hashes: serde_json::Value = serde_json::from_slice(block.as_new().hashes_only).unwrap();
        let mut expected: serde_json::Value = serde_json::from_str(&block_json()).unwrap();
        expected["transactions"] = serde_json::json!([H1, H2]);
        assert_eq!(hashes, expected);
    }

    #[test]
    fn receipts_that_do_not_match_are_refused() {
        let swapped = receipts_json().replacen(
            H1,
            "0x3333333333333333333333333333333333333333333333333333333333333333",
            1,
        );
        assert!(matches!(
            prepare(&block_json(), &swapped, RawParts::default()),
            Err(PrepareError::Mismatch(_))
        ));
        assert!(matches!(
            prepare(&block_json(), "[]", RawParts::default()),
            Err(PrepareError::Mismatch(_))
        ));
        assert!(matches!(
            prepare(&block_json(), "{", RawParts::default()),
            Err(PrepareError::Receipts(_))
        ));
        assert!(matches!(
            prepare("[1]", "[]", RawParts::default()),
            Err(PrepareError::Block(_))
        ));
    }
}
