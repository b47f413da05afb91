//! The store record of a block that verified ([`PreparedBlock`]): the
//! bytes exactly as received, plus the spans of every transaction, receipt
//! and log, the hashes-only block, and what log filters match on, all laid
//! out from what [`crate::decode`] found.

use neve_store::{Hash, LogEntry, NewBlock, TxEntry};

use crate::decode::{Decoded, PrepareError, RawParts, decode};

/// A block ready to append, owning its bytes.
#[derive(Clone, Debug)]
pub struct PreparedBlock {
    /// Height.
    pub height: u64,
    /// Hash.
    pub hash: Hash,
    /// Parent hash.
    pub parent_hash: Hash,
    /// The verified header's time (Unix seconds); `None` for a block
    /// prepared without verification ([`prepare`]).
    pub(crate) time: Option<u64>,
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

    /// Bytes this block will take in the store, roughly.
    pub fn size(&self) -> usize {
        self.full.len() + self.hashes_only.len() + self.receipts.len() + self.raw_block.len()
    }
}

impl From<Decoded<'_>> for PreparedBlock {
    /// Lays out the record: the text is copied as received, what decoding
    /// built is moved in.
    fn from(block: Decoded<'_>) -> PreparedBlock {
        PreparedBlock {
            height: block.height,
            hash: block.hash,
            parent_hash: block.parent_hash,
            time: None,
            logs_bloom: block.logs_bloom,
            full: block.full.as_bytes().to_vec(),
            hashes_only: block.hashes_only,
            receipts: block.receipts.as_bytes().to_vec(),
            raw_header: block.raw.header,
            raw_block: block.raw.block,
            raw_receipts: block.raw.receipts,
            txs: block.txs,
            logs: block.logs,
        }
    }
}

/// Prepares a block from its `fullTx=true` JSON, its receipts array JSON
/// and the raw RLP, if any, without verifying it.
pub fn prepare(full: &str, receipts: &str, raw: RawParts) -> Result<PreparedBlock, PrepareError> {
    decode(full, receipts, raw).map(PreparedBlock::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::fixed_hex;
    use neve_store::Span;

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
