//! Every field neve serves is checked at ingest: either a hash the block
//! commits to covers it (header, transactions, receipts, withdrawals,
//! uncles, avalanchego's extra data), or it is derived from what is covered
//! (a receipt's `gasUsed` from cumulative gas, `effectiveGasPrice` from the
//! transaction and the base fee, `from` from the signature, a contract's
//! address from the sender's nonce, the block's `size` from its RLP).
//!
//! The check compares each received value with the value the verified data
//! gives, as JSON (the trees decoding parsed): a key nothing covers, a key
//! given twice (refused before any check), or a value in another spelling
//! (`"0x01"`, upper-case hex, a number) refuses the block, so the bytes
//! stored and later served are exactly what was checked.
//! ARCHITECTURE.md tables which check covers which field.

use alloy_consensus::constants::{EMPTY_OMMER_ROOT_HASH, EMPTY_WITHDRAWALS};
use alloy_consensus::proofs::calculate_withdrawals_root;
use alloy_consensus::{Eip658Value, ReceiptEnvelope, Transaction, TxEnvelope, TxReceipt};
use alloy_eips::eip2718::{Encodable2718, Typed2718};
use alloy_eips::eip4844::{DATA_GAS_PER_BLOB, fake_exponential};
use alloy_eips::eip4895::Withdrawal;
use alloy_primitives::{Address, B256, Log, TxKind, keccak256};
use alloy_rlp::Encodable;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::decode::Decoded;
use crate::rawrlp;
use crate::strict_json::Json;

/// The blob base fee update fractions of the forks that carry blobs
/// (Cancun, Prague and Osaka, BPO1, BPO2): a receipt's `blobGasPrice` is the
/// price one of them gives for the header's `excessBlobGas`. Which fork is
/// active is chain configuration neve does not hold.
const BLOB_BASE_FEE_UPDATE_FRACTIONS: [u128; 4] = [3_338_477, 5_007_716, 8_346_193, 11_684_671];

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

/// A served field that is not what the verified block gives, is given
/// twice, or is one nothing verifies.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{object}: {field} {reason}")]
pub struct FieldError {
    /// Which object (`block`, `transaction 3`, `receipt 0`, `log 7`,
    /// `raw block`, `raw receipts`).
    pub object: String,
    /// Its key.
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

fn mismatch(object: &str, field: &str, reason: impl Into<String>) -> FieldError {
    FieldError {
        object: object.to_string(),
        field: field.to_string(),
        reason: reason.into(),
    }
}

/// A quantity as the JSON-RPC API writes it.
fn quantity(value: impl Into<u128>) -> Value {
    Value::String(format!("{:#x}", value.into()))
}

fn json(value: impl serde::Serialize) -> Value {
    serde_json::to_value(value).expect("alloy types serialise")
}

type Entries<'v, 'a> = &'v [(std::borrow::Cow<'a, str>, Json<'a>)];

fn object<'v, 'a>(value: &'v Json<'a>, what: &str) -> Result<Entries<'v, 'a>, FieldError> {
    value
        .as_object()
        .ok_or_else(|| mismatch(what, "(any)", "is not an object"))
}

/// Compares every field of `received` with what `expected` says of its key;
/// `None` is a key nothing verifies.
fn compare<'a>(
    what: &str,
    received: Entries<'_, 'a>,
    apart: &[&str],
    mut expected: impl FnMut(&str, &Json<'a>) -> Result<Option<Value>, FieldError>,
) -> Result<(), FieldError> {
    for (key, value) in received {
        if apart.contains(&key.as_ref()) {
            continue;
        }
        match expected(key, value)? {
            None => return Err(mismatch(what, key, "is not verified by anything")),
            Some(want) if !value.is(&want) => {
                let value = value.to_value();
                return Err(mismatch(what, key, format!("is {value}, verified {want}")));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Checks every served field of `block` (its JSON, receipts and raw RLP)
/// against the verified parts.
pub(crate) fn check(block: &Decoded<'_>, verified: &Verified<'_>) -> Result<(), FieldError> {
    // Parsed once, when the block was decoded.
    let full = &block.tree;
    let receipts = block
        .receipts_tree
        .as_array()
        .ok_or_else(|| mismatch("receipts", "(any)", "is not an array"))?;
    let facts = verified.header;
    let height = block.height;
    let hash = B256::from(block.hash);
    let raw = RawBlock::check(block, verified, full)?;

    // Transactions.
    let transactions = full
        .get("transactions")
        .and_then(Json::as_array)
        .ok_or_else(|| mismatch("block", "transactions", "is not an array"))?;
    if transactions.len() != verified.transactions.len() {
        return Err(mismatch("block", "transactions", "differ in number"));
    }
    for (index, (tx, envelope)) in transactions.iter().zip(verified.transactions).enumerate() {
        let what = format!("transaction {index}");
        let Value::Object(signed) = json(envelope) else {
            return Err(mismatch(&what, "(any)", "does not serialise to an object"));
        };
        compare(&what, object(tx, &what)?, &[], |key, _| {
            Ok(Some(match key {
                "blockHash" => json(hash),
                "blockNumber" => quantity(height),
                "blockTimestamp" => quantity(facts.timestamp),
                "transactionIndex" => quantity(index as u64),
                "hash" => json(B256::from(block.transactions()[index].hash)),
                "from" => json(verified.senders[index]),
                // A typed transaction's price is what it paid in this block.
                "gasPrice" => quantity(envelope.effective_gas_price(facts.base_fee)),
                // geth writes `v` beside `yParity` for typed transactions.
                "v" if !signed.contains_key("v") => match signed.get("yParity") {
                    Some(parity) => parity.clone(),
                    None => return Ok(None),
                },
                _ => match signed.get(key) {
                    Some(value) => value.clone(),
                    None => return Ok(None),
                },
            }))
        })?;
    }

    // Receipts and their logs.
    if receipts.len() != verified.receipts.len() {
        return Err(mismatch("receipts", "(any)", "differ in number"));
    }
    let mut previous_cumulative = 0u64;
    let mut log_index = 0u64;
    for (index, (receipt, envelope)) in receipts.iter().zip(verified.receipts).enumerate() {
        let what = format!("receipt {index}");
        let tx = &verified.transactions[index];
        let tx_hash = B256::from(block.transactions()[index].hash);
        let sender = verified.senders[index];
        if envelope.ty() != tx.ty() {
            return Err(mismatch(&what, "type", "differs from its transaction's"));
        }
        let cumulative = envelope.cumulative_gas_used();
        let gas_used = cumulative
            .checked_sub(previous_cumulative)
            .ok_or_else(|| mismatch(&what, "cumulativeGasUsed", "decreases"))?;
        previous_cumulative = cumulative;
        compare(&what, object(receipt, &what)?, &["logs"], |key, value| {
            Ok(Some(match key {
                "blockHash" => json(hash),
                "blockNumber" => quantity(height),
                "transactionIndex" => quantity(index as u64),
                "transactionHash" => json(tx_hash),
                "type" => quantity(envelope.ty()),
                "status" => match envelope.status_or_post_state() {
                    Eip658Value::Eip658(ok) => quantity(u8::from(ok)),
                    Eip658Value::PostState(_) => return Ok(None),
                },
                "root" => match envelope.status_or_post_state() {
                    Eip658Value::PostState(root) => json(root),
                    Eip658Value::Eip658(_) => return Ok(None),
                },
                "cumulativeGasUsed" => quantity(cumulative),
                "logsBloom" => json(envelope.bloom()),
                "gasUsed" => quantity(gas_used),
                "effectiveGasPrice" => quantity(tx.effective_gas_price(facts.base_fee)),
                "from" => json(sender),
                "to" => match tx.kind() {
                    TxKind::Call(to) => json(to),
                    TxKind::Create => Value::Null,
                },
                "contractAddress" => match tx.kind() {
                    TxKind::Call(_) => Value::Null,
                    TxKind::Create => json(sender.create(tx.nonce())),
                },
                "blobGasUsed" => match tx.blob_versioned_hashes() {
                    Some(hashes) => quantity(hashes.len() as u64 * DATA_GAS_PER_BLOB),
                    None => return Ok(None),
                },
                "blobGasPrice" => match (tx.blob_versioned_hashes(), facts.excess_blob_gas) {
                    (Some(_), Some(excess)) => BLOB_BASE_FEE_UPDATE_FRACTIONS
                        .iter()
                        .map(|f| quantity(fake_exponential(1, excess.into(), *f)))
                        .find(|price| value.is(price))
                        .ok_or_else(|| {
                            mismatch(&what, key, "is no fork's price for excessBlobGas")
                        })?,
                    _ => return Ok(None),
                },
                _ => return Ok(None),
            }))
        })?;
        let logs = receipt
            .get("logs")
            .and_then(Json::as_array)
            .ok_or_else(|| mismatch(&what, "logs", "is not an array"))?;
        if logs.len() != envelope.logs().len() {
            return Err(mismatch(&what, "logs", "differ in number"));
        }
        for (log, verified_log) in logs.iter().zip(envelope.logs()) {
            let what = format!("log {log_index}");
            compare(&what, object(log, &what)?, &[], |key, _| {
                Ok(Some(match key {
                    "address" => json(verified_log.address),
                    "topics" => json(verified_log.topics()),
                    "data" => json(&verified_log.data.data),
                    "blockHash" => json(hash),
                    "blockNumber" => quantity(height),
                    "blockTimestamp" => quantity(facts.timestamp),
                    "transactionHash" => json(tx_hash),
                    "transactionIndex" => quantity(index as u64),
                    "logIndex" => quantity(log_index),
                    "removed" => Value::Bool(false),
                    _ => return Ok(None),
                }))
            })?;
            log_index += 1;
        }
    }

    // The block's own fields.
    compare(
        "block",
        object(full, "block")?,
        &["transactions"],
        |key, _| {
            Ok(Some(match key {
                "hash" => json(hash),
                "size" => quantity(raw.size as u64),
                "uncles" => json(&raw.uncles),
                "withdrawals" => {
                    json(raw.withdrawals.as_ref().ok_or_else(|| {
                        mismatch("block", "withdrawals", "without withdrawalsRoot")
                    })?)
                }
                "blockExtraData" if facts.ext_data_hash.is_some() => json(&raw.ext_data),
                "totalDifficulty" => match facts.total_difficulty {
                    Some(total) => json(total),
                    None => return Ok(None),
                },
                _ => match facts.fields.get(key) {
                    Some(value) => value.clone(),
                    None => return Ok(None),
                },
            }))
        },
    )?;
    check_raw_receipts(block, verified)
}

/// The parts of a block's RLP the JSON does not carry whole (uncle headers,
/// avalanchego's version), its length, and what they verify.
struct RawBlock {
    size: usize,
    uncles: Vec<B256>,
    withdrawals: Option<Vec<Withdrawal>>,
    ext_data: alloy_primitives::Bytes,
}

impl RawBlock {
    /// Rebuilds the block's RLP from the verified parts, compares it with
    /// the raw block when there is one, and returns what it found.
    fn check(
        block: &Decoded<'_>,
        verified: &Verified<'_>,
        full: &Json<'_>,
    ) -> Result<RawBlock, FieldError> {
        let facts = verified.header;
        // Decoded from its hex once, where its transactions were found.
        let raw = block.raw_block_rlp();
        let raw_items = raw
            .map(rawrlp::list_items)
            .transpose()
            .map_err(|e| mismatch("raw block", "(any)", e))?;
        let wrong = |field: &str, reason: &str| mismatch("raw block", field, reason);

        // Uncles: none unless the header commits to some; their headers
        // only come in the raw block.
        let uncles_item: Vec<u8> = if facts.ommers_hash == EMPTY_OMMER_ROOT_HASH {
            vec![alloy_rlp::EMPTY_LIST_CODE]
        } else {
            let item = raw_items
                .as_ref()
                .and_then(|items| items.get(2))
                .ok_or_else(|| {
                    mismatch(
                        "block",
                        "uncles",
                        "has uncles, checked only with the upstream's debug_getRawBlock",
                    )
                })?;
            if keccak256(item) != facts.ommers_hash {
                return Err(wrong("uncles", "do not hash to sha3Uncles"));
            }
            item.to_vec()
        };
        let uncles = rawrlp::list_items(&uncles_item)
            .map_err(|e| mismatch("raw block", "uncles", e))?
            .into_iter()
            .map(keccak256)
            .collect();

        let withdrawals = match facts.withdrawals_root {
            None => None,
            Some(root) => {
                let list: Vec<Withdrawal> = match full.get("withdrawals") {
                    Some(value) => Vec::<Withdrawal>::deserialize(value)
                        .map_err(|e| mismatch("block", "withdrawals", e.to_string()))?,
                    None => match raw_items.as_ref().and_then(|items| items.get(3)) {
                        Some(item) => alloy_rlp::Decodable::decode(&mut &item[..])
                            .map_err(|e| wrong("withdrawals", &e.to_string()))?,
                        None if root == EMPTY_WITHDRAWALS => Vec::new(),
                        None => return Err(mismatch("block", "withdrawals", "missing")),
                    },
                };
                if calculate_withdrawals_root(&list) != root {
                    return Err(mismatch(
                        "block",
                        "withdrawals",
                        "do not hash to withdrawalsRoot",
                    ));
                }
                Some(list)
            }
        };

        // avalanchego's blocks end with a version and the extra data.
        let mut ext_data = alloy_primitives::Bytes::new();
        let mut version = 0u32;
        if let Some(ext_hash) = facts.ext_data_hash {
            if let Some(items) = &raw_items {
                let (Some(v), Some(data)) = (items.get(3), items.get(4)) else {
                    return Err(wrong("(any)", "lacks the version or the extra data"));
                };
                version = alloy_rlp::Decodable::decode(&mut &v[..])
                    .map_err(|e| wrong("version", &e.to_string()))?;
                ext_data = alloy_rlp::Decodable::decode(&mut &data[..])
                    .map_err(|e| wrong("extData", &e.to_string()))?;
            } else if let Some(value) = full.get("blockExtraData") {
                ext_data = alloy_primitives::Bytes::deserialize(value)
                    .map_err(|e| mismatch("block", "blockExtraData", e.to_string()))?;
            }
            // Genesis leaves the hash zero, which no data hashes to.
            let genesis_like = ext_hash.is_zero() && ext_data.is_empty();
            if keccak256(alloy_rlp::encode(&ext_data)) != ext_hash && !genesis_like {
                return Err(mismatch(
                    "block",
                    "blockExtraData",
                    "does not hash to extDataHash",
                ));
            }
        }

        let mut payload = facts.rlp.clone();
        alloy_rlp::encode_list(verified.transactions, &mut payload);
        payload.extend_from_slice(&uncles_item);
        if let Some(list) = &withdrawals {
            list.encode(&mut payload);
        }
        if facts.ext_data_hash.is_some() {
            version.encode(&mut payload);
            ext_data.encode(&mut payload);
        }
        let rebuilt = rawrlp::rlp_list(&payload);
        if let Some(raw) = raw
            && raw != rebuilt.as_slice()
        {
            return Err(wrong("(any)", "is not the verified block's encoding"));
        }
        Ok(RawBlock {
            size: rebuilt.len(),
            uncles,
            withdrawals,
            ext_data,
        })
    }
}

/// `debug_getRawReceipts`: each receipt's consensus encoding, which the
/// receipts root covers.
fn check_raw_receipts(block: &Decoded<'_>, verified: &Verified<'_>) -> Result<(), FieldError> {
    let raw = block.raw_receipts_json();
    if raw.is_empty() {
        return Ok(());
    }
    let wrong = |reason: String| mismatch("raw receipts", "(any)", reason);
    let tree = Json::parse(raw).map_err(|e| wrong(e.to_string()))?;
    let list =
        Vec::<alloy_primitives::Bytes>::deserialize(&tree).map_err(|e| wrong(e.to_string()))?;
    if !tree.is(&json(&list)) {
        return Err(wrong("are not written as the API writes them".into()));
    }
    if list.len() != verified.receipts.len() {
        return Err(wrong("differ in number".into()));
    }
    for (index, (bytes, receipt)) in list.iter().zip(verified.receipts).enumerate() {
        if bytes[..] != receipt.encoded_2718()[..] {
            return Err(wrong(format!("receipt {index} is not the verified one")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::FieldError;
    use crate::decode::{RawParts, decode};
    use crate::verify::{VerifyError, verify};
    use alloy_consensus::ReceiptEnvelope;
    use alloy_eips::eip2718::Encodable2718;
    use alloy_primitives::Log;
    use neve_devnet::conformance::fixture_result as fixture;

    fn latest() -> (String, String) {
        (
            fixture("eth_getBlockByNumber/get-latest.io"),
            fixture("eth_getBlockReceipts/get-block-receipts-latest.io"),
        )
    }

    /// The field a block is refused for, or `None` when it verifies.
    fn refused_field(full: &str, receipts: &str, raw: RawParts) -> Option<String> {
        let block = decode(full, receipts, raw).expect("prepares");
        match verify(&block) {
            Ok(()) => None,
            Err(VerifyError::Field(FieldError { object, field, .. })) => {
                Some(format!("{object}.{field}"))
            }
            Err(other) => Some(other.to_string()),
        }
    }

    fn once(text: &str, from: &str, to: &str) -> String {
        assert!(text.contains(from), "{from} is in the fixture");
        text.replacen(from, to, 1)
    }

    #[test]
    fn every_served_field_that_no_hash_covers_is_checked() {
        let (full, receipts) = latest();
        assert_eq!(refused_field(&full, &receipts, RawParts::default()), None);
        let block = |from: &str, to: &str| {
            refused_field(&once(&full, from, to), &receipts, RawParts::default())
        };
        let receipt = |from: &str, to: &str| {
            refused_field(&full, &once(&receipts, from, to), RawParts::default())
        };
        let to = "0x7dcd17433742f4c0ca53122ab541d0ba67fc27df";
        let other = "0x7dcd17433742f4c0ca53122ab541d0ba67fc27de";
        let cases = [
            (
                block("\"size\":\"0x455\"", "\"size\":\"0x456\""),
                "block.size",
            ),
            (
                block(
                    "\"uncles\":[]",
                    &format!("\"uncles\":[\"{}\"]", "0x".to_string() + &"11".repeat(32)),
                ),
                "block.uncles",
            ),
            (
                block(
                    "\"withdrawals\":[]",
                    &format!(
                        "\"withdrawals\":[{{\"index\":\"0x0\",\"validatorIndex\":\"0x1\",\"address\":\"{to}\",\"amount\":\"0x1\"}}]"
                    ),
                ),
                "block.withdrawals",
            ),
            (
                block(
                    "\"blockTimestamp\":\"0x21c\"",
                    "\"blockTimestamp\":\"0x21d\"",
                ),
                "transaction 0.blockTimestamp",
            ),
            (
                block("\"gas\":", "\"neve\":\"0x1\",\"gas\":"),
                "transaction 0.neve",
            ),
            (
                block("\"miner\":", "\"neve\":\"0x1\",\"miner\":"),
                "block.neve",
            ),
            (
                block("\"gasLimit\":\"0x", "\"gasLimit\":\"0x0"),
                "block.gasLimit",
            ),
            (
                block("\"nonce\":\"0xf5\"", "\"nonce\":\"0xF5\""),
                "transaction 0.nonce",
            ),
            (
                block("\"nonce\":\"0xf5\"", "\"nonce\":245"),
                "transaction 0.nonce",
            ),
            (
                receipt("\"gasUsed\":\"0xfc65\"", "\"gasUsed\":\"0xfc66\""),
                "receipt 1.gasUsed",
            ),
            (
                receipt(
                    "\"effectiveGasPrice\":\"0x1a21398\"",
                    "\"effectiveGasPrice\":\"0x1a21399\"",
                ),
                "receipt 0.effectiveGasPrice",
            ),
            (
                receipt(
                    "\"from\":\"0x7435ed30a8b4aeb0877cef0c6e8cffe834eb865f\"",
                    "\"from\":\"0x7435ed30a8b4aeb0877cef0c6e8cffe834eb865e\"",
                ),
                "receipt 0.from",
            ),
            (
                receipt(&format!("\"to\":\"{to}\""), &format!("\"to\":\"{other}\"")),
                "receipt 3.to",
            ),
            (
                receipt("\"to\":null", &format!("\"to\":\"{other}\"")),
                "receipt 0.to",
            ),
            (
                receipt(
                    "\"contractAddress\":\"0x891baaf101b07222bbcf62e7dc519199d09255b0\"",
                    "\"contractAddress\":\"0x891baaf101b07222bbcf62e7dc519199d09255b1\"",
                ),
                "receipt 0.contractAddress",
            ),
            (
                receipt(
                    "\"cumulativeGasUsed\":",
                    "\"gasUsed\":\"0x1\",\"cumulativeGasUsed\":",
                ),
                "receipts.(any)",
            ),
            (
                receipt("\"removed\":false", "\"removed\":true"),
                "log 0.removed",
            ),
            (
                receipt("\"blockTimestamp\":\"0x21c\"", "\"blockTimestamp\":\"0x0\""),
                "log 0.blockTimestamp",
            ),
            (
                receipt("\"status\":", "\"neve\":null,\"status\":"),
                "receipt 0.neve",
            ),
        ];
        for (got, want) in cases {
            assert_eq!(got.as_deref(), Some(want));
        }
    }

    #[test]
    fn raw_receipts_are_the_verified_receipts_encodings() {
        let (full, receipts) = latest();
        let verified: Vec<ReceiptEnvelope<Log>> = serde_json::from_str(&receipts).unwrap();
        let encodings: Vec<alloy_primitives::Bytes> =
            verified.iter().map(|r| r.encoded_2718().into()).collect();
        let raw = serde_json::to_string(&encodings).unwrap();
        let with = |raw: String| RawParts {
            receipts: raw.into_bytes(),
            ..RawParts::default()
        };
        assert_eq!(refused_field(&full, &receipts, with(raw.clone())), None);
        let at = raw.rfind('"').unwrap() - 1;
        let mut changed = raw.clone().into_bytes();
        changed[at] = if changed[at] == b'0' { b'1' } else { b'0' };
        assert_eq!(
            refused_field(&full, &receipts, with(String::from_utf8(changed).unwrap())).as_deref(),
            Some("raw receipts.(any)")
        );
        let fewer = serde_json::to_string(&encodings[1..]).unwrap();
        assert_eq!(
            refused_field(&full, &receipts, with(fewer)).as_deref(),
            Some("raw receipts.(any)")
        );
    }
}
