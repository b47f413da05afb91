//! The served fields of a block, its transactions and receipts (with
//! their logs) against the verified parts.

use alloy_consensus::{Eip658Value, ReceiptEnvelope, Transaction, TxReceipt};
use alloy_eips::eip2718::{Encodable2718, Typed2718};
use alloy_eips::eip4844::{DATA_GAS_PER_BLOB, fake_exponential};
use alloy_primitives::{B256, Log, TxKind};
use serde::Deserialize;
use serde_json::Value;

use crate::decode::Decoded;
use crate::strict_json::Json;

use super::compare::{FieldError, compare, json, mismatch, object, quantity};
use super::facts::Verified;
use super::raw::RawBlock;

/// Checks every served field of `block` (its JSON, receipts and raw RLP)
/// against the verified parts.
pub(crate) fn check_served_fields(
    block: &Decoded<'_>,
    verified: &Verified<'_>,
) -> Result<(), FieldError> {
    // Parsed once, when the block was decoded.
    let full = &block.tree;
    let receipts = block
        .receipts_tree
        .as_array()
        .ok_or_else(|| mismatch("receipts", "(any)", "is not an array"))?;
    let facts = verified.header;
    let hash = B256::from(block.hash);
    let raw = RawBlock::rebuild_and_compare(block, verified, full)?;

    check_transactions(block, verified, full, hash)?;
    check_receipts(block, verified, receipts, hash)?;

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

/// Each transaction of the block's JSON against its verified envelope,
/// sender and place in the block.
fn check_transactions(
    block: &Decoded<'_>,
    verified: &Verified<'_>,
    full: &Json<'_>,
    hash: B256,
) -> Result<(), FieldError> {
    let (facts, height) = (verified.header, block.height);
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
    Ok(())
}

/// Each receipt against its verified envelope and transaction (gas used
/// from cumulative gas, price, sender, contract address, blob gas), then
/// its logs.
fn check_receipts(
    block: &Decoded<'_>,
    verified: &Verified<'_>,
    receipts: &[Json<'_>],
    hash: B256,
) -> Result<(), FieldError> {
    let (facts, height) = (verified.header, block.height);
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
        check_logs(
            &what,
            receipt,
            envelope,
            index,
            tx_hash,
            &mut log_index,
            block,
            facts.timestamp,
            hash,
        )?;
    }
    Ok(())
}

/// A receipt's logs against the verified receipt's, numbered from
/// `log_index` across the block.
// Each is a fact the check needs; a struct would only rename them.
#[allow(clippy::too_many_arguments)]
fn check_logs(
    what: &str,
    receipt: &Json<'_>,
    envelope: &ReceiptEnvelope<Log>,
    index: usize,
    tx_hash: B256,
    log_index: &mut u64,
    block: &Decoded<'_>,
    timestamp: u64,
    hash: B256,
) -> Result<(), FieldError> {
    let height = block.height;
    let logs = receipt
        .get("logs")
        .and_then(Json::as_array)
        .ok_or_else(|| mismatch(what, "logs", "is not an array"))?;
    if logs.len() != envelope.logs().len() {
        return Err(mismatch(what, "logs", "differ in number"));
    }
    for (log, verified_log) in logs.iter().zip(envelope.logs()) {
        let what = format!("log {}", *log_index);
        compare(&what, object(log, &what)?, &[], |key, _| {
            Ok(Some(match key {
                "address" => json(verified_log.address),
                "topics" => json(verified_log.topics()),
                "data" => json(&verified_log.data.data),
                "blockHash" => json(hash),
                "blockNumber" => quantity(height),
                "blockTimestamp" => quantity(timestamp),
                "transactionHash" => json(tx_hash),
                "transactionIndex" => quantity(index as u64),
                "logIndex" => quantity(*log_index),
                "removed" => Value::Bool(false),
                _ => return Ok(None),
            }))
        })?;
        *log_index += 1;
    }
    Ok(())
}

/// The blob base fee update fractions of the forks that carry blobs
/// (Cancun, Prague and Osaka, BPO1, BPO2): a receipt's `blobGasPrice` is the
/// price one of them gives for the header's `excessBlobGas`. Which fork is
/// active is chain configuration neve does not hold.
const BLOB_BASE_FEE_UPDATE_FRACTIONS: [u128; 4] = [3_338_477, 5_007_716, 8_346_193, 11_684_671];

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
