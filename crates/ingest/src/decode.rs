//! Reading the upstream's answer for a block: its JSON, receipts and raw
//! RLP decoded into where each part lies ([`Decoded`]), with the checks no
//! hash covers of where a transaction, receipt or log says it sits, and the
//! raw block's transactions found and hashed. Verification
//! ([`crate::verify`]) reads what this decoded; the stored record is laid
//! out from it afterwards ([`crate::prepare`]).
//!
//! Each text is parsed once, strictly (`strict_json`): the tree is kept for
//! verification to read (typed values are built from it, and every served
//! field is compared with it), a key given twice is noted for verification
//! to refuse, and spans are where the tree's values lie in the received
//! text: nothing is re-serialised, and field order and unknown fields
//! (avalanchego's `blockExtraData`, `extDataHash`, …) pass through
//! untouched.

use neve_store::{Hash, LogEntry, Span, TxEntry};

use crate::rawrlp;
use crate::strict_json::Json;

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

/// Where a transaction, receipt or log says it sits. No hash covers these
/// fields, so each is checked against the block (when present).
struct Placement<'a> {
    block_hash: Option<&'a str>,
    block_number: Option<&'a str>,
    transaction_index: Option<&'a str>,
}

impl<'a> Placement<'a> {
    /// What `object` says of where it sits.
    fn of(object: &Json<'a>) -> Result<Placement<'a>, String> {
        Ok(Placement {
            block_hash: optional_text(object, "blockHash")?,
            block_number: optional_text(object, "blockNumber")?,
            transaction_index: optional_text(object, "transactionIndex")?,
        })
    }

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

/// `value` when it is an object.
fn object<'v, 'a>(value: &'v Json<'a>) -> Result<&'v Json<'a>, String> {
    match value.as_object() {
        Some(_) => Ok(value),
        None => Err("is not an object".into()),
    }
}

/// The string `key` of `object`, as a slice of the received text (a
/// string written with escapes is malformed where a hash or a place is
/// expected).
fn text<'a>(object: &Json<'a>, key: &str) -> Result<&'a str, String> {
    let value = object
        .get(key)
        .ok_or_else(|| format!("missing field `{key}`"))?;
    as_text(value, key)
}

/// [`text`] for a key that may be missing or null.
fn optional_text<'a>(object: &Json<'a>, key: &str) -> Result<Option<&'a str>, String> {
    match object.get(key) {
        Some(value) if !value.is_null() => as_text(value, key).map(Some),
        _ => Ok(None),
    }
}

fn as_text<'a>(value: &Json<'a>, key: &str) -> Result<&'a str, String> {
    value
        .as_borrowed_str()
        .ok_or_else(|| format!("{key} is not a string as expected"))
}

/// The array `key` of `object`.
fn array<'v, 'a>(object: &'v Json<'a>, key: &str) -> Result<&'v [Json<'a>], String> {
    object
        .get(key)
        .ok_or_else(|| format!("missing field `{key}`"))?
        .as_array()
        .ok_or_else(|| format!("{key} is not an array"))
}

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

/// A block decoded from the upstream's answer: the text as received
/// (borrowed) and parsed, where each transaction, receipt and log lies in
/// it, the hashes-only block, the raw parts, and the raw block's RLP
/// decoded once.
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
    /// `full` parsed: an object whose `transactions` is an array.
    pub(crate) tree: Json<'a>,
    /// `receipts` parsed: an array, one receipt a transaction.
    pub(crate) receipts_tree: Json<'a>,
    /// Which text (`block` or `receipts`) gives a key twice, and where:
    /// verification refuses such a block.
    pub(crate) repeated: Option<(&'static str, String)>,
}

impl<'a> Decoded<'a> {
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

    /// The transaction objects, parsed, in the order of
    /// [`Decoded::transactions`].
    pub(crate) fn transaction_trees(&self) -> &[Json<'a>] {
        self.tree
            .get("transactions")
            .and_then(Json::as_array)
            .unwrap_or_default()
    }

    /// The receipt objects, parsed, one a transaction.
    pub(crate) fn receipt_trees(&self) -> &[Json<'a>] {
        self.receipts_tree.as_array().unwrap_or_default()
    }
}

/// Decodes a block from its `fullTx=true` JSON, its receipts array JSON
/// and the raw RLP, if any, checking what says where each part sits.
// Long: one pass over the texts as received, each part's place checked
// where it is found.
pub fn decode<'a>(
    full: &'a str,
    receipts: &'a str,
    raw: RawParts,
) -> Result<Decoded<'a>, PrepareError> {
    let parsed =
        Json::parse_noting_repeats(full).map_err(|e| PrepareError::Block(e.to_string()))?;
    let mut repeated = parsed.repeated.map(|e| ("block", e.to_string()));
    let block = object(&parsed.tree).map_err(PrepareError::Block)?;
    let field = |key: &str| text(block, key).map_err(PrepareError::Block);
    let (hash_text, number_text) = (field("hash")?, field("number")?);
    let (parent_text, bloom_text) = (field("parentHash")?, field("logsBloom")?);
    let txs = array(block, "transactions").map_err(PrepareError::Block)?;
    let bad = |field: &str| PrepareError::Block(format!("{field} is malformed"));
    let hash = fixed_hex::<32>(hash_text).ok_or_else(|| bad("hash"))?;
    let parent_hash = fixed_hex::<32>(parent_text).ok_or_else(|| bad("parentHash"))?;
    let logs_bloom = fixed_hex::<256>(bloom_text).ok_or_else(|| bad("logsBloom"))?;
    let height = neve_upstream::parse_quantity(number_text).ok_or_else(|| bad("number"))?;
    let receipts_parsed =
        Json::parse_noting_repeats(receipts).map_err(|e| PrepareError::Receipts(e.to_string()))?;
    repeated = repeated.or(receipts_parsed
        .repeated
        .map(|e| ("receipts", e.to_string())));
    let receipt_values = receipts_parsed
        .tree
        .as_array()
        .ok_or_else(|| PrepareError::Receipts("is not an array".into()))?;
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
    let array_span = block.get("transactions").expect("read above").span();
    let mut hashes_only = Vec::with_capacity(
        full.len()
            .min(array_span.offset as usize + 70 * txs.len() + 4096),
    );
    hashes_only.extend_from_slice(&full.as_bytes()[..array_span.offset as usize]);
    hashes_only.push(b'[');

    let mut entries = Vec::with_capacity(txs.len());
    let mut logs = Vec::new();
    for (index, (tx, receipt)) in txs.iter().zip(receipt_values).enumerate() {
        let in_tx = |e: String| PrepareError::Block(format!("transaction {index}: {e}"));
        let tx = object(tx).map_err(in_tx)?;
        let (tx_hash_text, tx_placement) = (
            text(tx, "hash").map_err(in_tx)?,
            Placement::of(tx).map_err(in_tx)?,
        );
        let tx_hash = fixed_hex::<32>(tx_hash_text).ok_or_else(|| bad("transaction hash"))?;
        let in_receipt = |e: String| PrepareError::Receipts(format!("receipt {index}: {e}"));
        let receipt = object(receipt).map_err(in_receipt)?;
        let (receipt_tx_hash, receipt_logs, receipt_placement) = (
            text(receipt, "transactionHash").map_err(in_receipt)?,
            array(receipt, "logs").map_err(in_receipt)?,
            Placement::of(receipt).map_err(in_receipt)?,
        );
        if fixed_hex::<32>(receipt_tx_hash) != Some(tx_hash) {
            return Err(PrepareError::Mismatch(format!(
                "receipt {index} is for {receipt_tx_hash}"
            )));
        }
        tx_placement.check(|| format!("transaction {index}"), &hash, height, index)?;
        receipt_placement.check(|| format!("receipt {index}"), &hash, height, index)?;
        if index > 0 {
            hashes_only.push(b',');
        }
        hashes_only.push(b'"');
        hashes_only.extend_from_slice(tx_hash_text.as_bytes());
        hashes_only.push(b'"');
        for log in receipt_logs {
            let in_log = |e: String| PrepareError::Receipts(format!("log: {e}"));
            let log_object = object(log).map_err(in_log)?;
            let address = text(log_object, "address").map_err(in_log)?;
            let topics = array(log_object, "topics")
                .and_then(|topics| {
                    topics
                        .iter()
                        .map(|t| t.as_borrowed_str().ok_or("a topic is not a string"))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(String::from)
                })
                .map_err(in_log)?;
            let log_tx_hash = optional_text(log_object, "transactionHash").map_err(in_log)?;
            let log_index = optional_text(log_object, "logIndex").map_err(in_log)?;
            let placement = Placement::of(log_object).map_err(in_log)?;
            let what = || format!("log {} (transaction {index})", logs.len());
            placement.check(what, &hash, height, index)?;
            if let Some(value) = log_tx_hash
                && fixed_hex::<32>(value) != Some(tx_hash)
            {
                return Err(PrepareError::Mismatch(format!(
                    "{} has transactionHash {value}",
                    what()
                )));
            }
            // Log indexes count the block's logs from zero.
            if let Some(value) = log_index
                && neve_upstream::parse_quantity(value) != Some(logs.len() as u64)
            {
                return Err(PrepareError::Mismatch(format!(
                    "{} has logIndex {value}",
                    what()
                )));
            }
            let topics = topics
                .iter()
                .map(|t| fixed_hex::<32>(t))
                .collect::<Option<Vec<_>>>()
                .filter(|t| t.len() <= 4)
                .ok_or_else(|| PrepareError::Receipts("log topics malformed".into()))?;
            logs.push(LogEntry {
                tx_index: index as u32,
                span: log.span(),
                address: fixed_hex::<20>(address)
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
                    "raw transaction {index} is not {tx_hash_text}"
                )));
            }
        }
        entries.push(TxEntry {
            hash: tx_hash,
            full: tx.span(),
            receipt: receipt.span(),
            raw: raw_spans[index],
        });
    }
    hashes_only.push(b']');
    hashes_only
        .extend_from_slice(&full.as_bytes()[(array_span.offset + array_span.len) as usize..]);

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
        tree: parsed.tree,
        receipts_tree: receipts_parsed.tree,
        repeated,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::{VerifyError, verify};
    use neve_devnet::conformance::fixture_result as fixture;

    /// Regression (decode once, strictly): a key given twice anywhere in
    /// the block or its receipts (a transaction, a receipt, a log) refuses
    /// the block, even with the same value both times.
    #[test]
    fn a_key_given_twice_anywhere_refuses_the_block() {
        let full = fixture("eth_getBlockByNumber/get-latest.io");
        let receipts = fixture("eth_getBlockReceipts/get-block-receipts-latest.io");
        let twice = |text: &str, field: &str| {
            assert!(text.contains(field), "{field} is in the fixture");
            text.replacen(field, &format!("{field},{field}"), 1)
        };
        let refused = |full: &str, receipts: &str| {
            let block = decode(full, receipts, RawParts::default()).expect("decodes");
            match verify(&block) {
                Err(VerifyError::Field(e)) if e.field == "(any)" => {
                    assert!(e.reason.contains("appears twice"), "{e}");
                    Some(e.object)
                }
                Err(other) => panic!("{other}"),
                Ok(()) => None,
            }
        };
        assert_eq!(refused(&full, &receipts), None);
        let block = Some("block".to_string());
        let receipts_refused = Some("receipts".to_string());
        assert_eq!(refused(&twice(&full, "\"uncles\":[]"), &receipts), block);
        assert_eq!(
            refused(&twice(&full, "\"nonce\":\"0xf5\""), &receipts),
            block
        );
        let status = twice(&receipts, "\"status\":\"0x1\"");
        assert_eq!(refused(&full, &status), receipts_refused);
        let removed = twice(&receipts, "\"removed\":false");
        assert_eq!(refused(&full, &removed), receipts_refused);
    }
}
