//! A simulated block assembled as geth's `AssembleBlock` assembles it
//! (its transactions unsigned: a zero signature), hashed, and written as
//! geth's `RPCMarshalBlock` writes it with the calls' results beside.

use std::fmt::Write;

use alloy_consensus::{
    Eip658Value, Receipt, ReceiptEnvelope, ReceiptWithBloom, SignableTransaction, TxEip1559,
    TxEip4844, TxEip7702, TxEnvelope,
};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{B256, Bloom, Bytes, Signature, TxKind, U256, hex, keccak256};
use alloy_rlp::{Encodable, Header as RlpHeader};

use super::block::{CallResult, Executed};
use super::call::SimTx;
use super::error::CallCodes;

/// A block ready for the answer.
pub(crate) struct Assembled {
    pub(crate) hash: B256,
    pub(crate) json: String,
}

/// A transaction encoded as the block holds it, and its hash.
struct Encoded {
    bytes: Vec<u8>,
    hash: B256,
}

pub(crate) fn assemble(
    executed: &Executed,
    state_root: B256,
    full_transactions: bool,
    codes: CallCodes,
) -> Assembled {
    let encoded: Vec<Encoded> = executed.txs.iter().map(encode).collect();
    let receipts: Vec<ReceiptEnvelope> = executed
        .txs
        .iter()
        .zip(&executed.receipts)
        .map(|(tx, (success, cumulative, logs))| {
            let receipt = Receipt {
                status: Eip658Value::Eip658(*success),
                cumulative_gas_used: *cumulative,
                logs: logs.clone(),
            };
            let with_bloom = ReceiptWithBloom::from(receipt);
            match tx.tx_type {
                0 => ReceiptEnvelope::Legacy(with_bloom),
                3 => ReceiptEnvelope::Eip4844(with_bloom),
                4 => ReceiptEnvelope::Eip7702(with_bloom),
                _ => ReceiptEnvelope::Eip1559(with_bloom),
            }
        })
        .collect();
    let mut bloom = Bloom::ZERO;
    for receipt in &receipts {
        bloom.accrue_bloom(receipt.logs_bloom());
    }
    let mut header = executed.header.clone();
    header.state_root = state_root;
    header.ommers_hash = alloy_consensus::EMPTY_OMMER_ROOT_HASH;
    header.transactions_root =
        alloy_consensus::proofs::ordered_trie_root_with_encoder(&encoded, |tx, out| {
            out.extend_from_slice(&tx.bytes)
        });
    header.receipts_root = alloy_consensus::proofs::calculate_receipt_root(&receipts);
    header.logs_bloom = bloom;
    if let Some(withdrawals) = &executed.withdrawals {
        header.withdrawals_root = Some(alloy_consensus::proofs::calculate_withdrawals_root(
            withdrawals,
        ));
    }
    if let Some(requests) = &executed.requests {
        header.requests_hash = Some(requests_hash(requests));
    }
    let hash = header.hash_slow();

    // The block's RLP size: [header, transactions, uncles, withdrawals?].
    let txs_payload: usize = encoded
        .iter()
        .map(|tx| match tx.bytes.first() {
            Some(first) if *first < 0x7f => {
                // A typed transaction is a byte string in the block's list.
                let len = tx.bytes.len();
                len + RlpHeader {
                    list: false,
                    payload_length: len,
                }
                .length()
            }
            _ => tx.bytes.len(),
        })
        .sum();
    let mut payload = header.length()
        + txs_payload
        + RlpHeader {
            list: true,
            payload_length: txs_payload,
        }
        .length()
        + 1;
    if let Some(withdrawals) = &executed.withdrawals {
        let inner: usize = withdrawals.iter().map(Encodable::length).sum();
        payload += inner
            + RlpHeader {
                list: true,
                payload_length: inner,
            }
            .length();
    }
    let size = payload
        + RlpHeader {
            list: true,
            payload_length: payload,
        }
        .length();

    let json = render(
        executed,
        &header,
        hash,
        size,
        &encoded,
        full_transactions,
        codes,
    );
    Assembled { hash, json }
}

/// EIP-7685's commitment: sha256 over each non-empty request's sha256.
fn requests_hash(requests: &[Bytes]) -> B256 {
    use sha2::{Digest, Sha256};
    let mut outer = Sha256::new();
    for request in requests.iter().filter(|r| r.len() > 1) {
        outer.update(Sha256::digest(request));
    }
    B256::from_slice(&outer.finalize())
}

/// The transaction geth's `ToTransaction` makes, with a zero signature.
fn encode(tx: &SimTx) -> Encoded {
    let zero = Signature::new(U256::ZERO, U256::ZERO, false);
    let access_list = tx.args.access_list.clone().unwrap_or_default();
    let envelope: TxEnvelope = match tx.tx_type {
        0 => {
            // Legacy with V = 0 (unprotected, unsigned): alloy would write
            // 27, so it is written here.
            let to: &dyn Encodable = match &tx.to {
                Some(to) => to,
                None => &Bytes::new(),
            };
            let zero_u8 = 0u8;
            let fields: [&dyn Encodable; 9] = [
                &tx.nonce,
                &tx.fee_cap,
                &tx.gas,
                to,
                &tx.value,
                &tx.input,
                &zero_u8,
                &zero_u8,
                &zero_u8,
            ];
            let mut bytes = Vec::new();
            alloy_rlp::encode_list::<_, dyn Encodable>(&fields, &mut bytes);
            let hash = keccak256(&bytes);
            return Encoded { bytes, hash };
        }
        3 => TxEip4844 {
            chain_id: tx.chain_id,
            nonce: tx.nonce,
            gas_limit: tx.gas,
            max_fee_per_gas: tx.fee_cap,
            max_priority_fee_per_gas: tx.tip,
            to: tx.to.unwrap_or_default(),
            value: tx.value,
            access_list,
            blob_versioned_hashes: tx.args.blob_versioned_hashes.clone().unwrap_or_default(),
            max_fee_per_blob_gas: tx
                .args
                .max_fee_per_blob_gas
                .map_or(0, |fee| fee.saturating_to()),
            input: tx.input.clone(),
        }
        .into_signed(zero)
        .into(),
        4 => TxEip7702 {
            chain_id: tx.chain_id,
            nonce: tx.nonce,
            gas_limit: tx.gas,
            max_fee_per_gas: tx.fee_cap,
            max_priority_fee_per_gas: tx.tip,
            to: tx.to.unwrap_or_default(),
            value: tx.value,
            access_list,
            authorization_list: tx.args.authorization_list.clone().unwrap_or_default(),
            input: tx.input.clone(),
        }
        .into_signed(zero)
        .into(),
        _ => TxEip1559 {
            chain_id: tx.chain_id,
            nonce: tx.nonce,
            gas_limit: tx.gas,
            max_fee_per_gas: tx.fee_cap,
            max_priority_fee_per_gas: tx.tip,
            to: tx.to.map_or(TxKind::Create, TxKind::Call),
            value: tx.value,
            access_list,
            input: tx.input.clone(),
        }
        .into_signed(zero)
        .into(),
    };
    Encoded {
        bytes: envelope.encoded_2718(),
        hash: *envelope.tx_hash(),
    }
}

fn quantity(value: impl std::fmt::LowerHex) -> String {
    format!("\"0x{value:x}\"")
}

fn data(bytes: &[u8]) -> String {
    format!("\"0x{}\"", hex::encode(bytes))
}

fn render(
    executed: &Executed,
    header: &alloy_consensus::Header,
    hash: B256,
    size: usize,
    encoded: &[Encoded],
    full: bool,
    codes: CallCodes,
) -> String {
    // geth writes a block as a map: its keys in alphabetical order.
    let mut fields: Vec<(&'static str, String)> = Vec::with_capacity(28);
    let mut field = |name: &'static str, value: String| fields.push((name, value));
    field("hash", data(hash.as_slice()));
    field("parentHash", data(header.parent_hash.as_slice()));
    field("sha3Uncles", data(header.ommers_hash.as_slice()));
    field("miner", data(header.beneficiary.as_slice()));
    field("stateRoot", data(header.state_root.as_slice()));
    field(
        "transactionsRoot",
        data(header.transactions_root.as_slice()),
    );
    field("receiptsRoot", data(header.receipts_root.as_slice()));
    field("logsBloom", data(header.logs_bloom.as_slice()));
    field("difficulty", quantity(header.difficulty));
    field("number", quantity(header.number));
    field("gasLimit", quantity(header.gas_limit));
    field("gasUsed", quantity(header.gas_used));
    field("timestamp", quantity(header.timestamp));
    field("extraData", data(&header.extra_data));
    field("mixHash", data(header.mix_hash.as_slice()));
    field("nonce", data(header.nonce.as_slice()));
    if let Some(fee) = header.base_fee_per_gas {
        field("baseFeePerGas", quantity(fee));
    }
    if let Some(root) = header.withdrawals_root {
        field("withdrawalsRoot", data(root.as_slice()));
    }
    if let Some(gas) = header.blob_gas_used {
        field("blobGasUsed", quantity(gas));
    }
    if let Some(gas) = header.excess_blob_gas {
        field("excessBlobGas", quantity(gas));
    }
    if let Some(root) = header.parent_beacon_block_root {
        field("parentBeaconBlockRoot", data(root.as_slice()));
    }
    if let Some(requests) = header.requests_hash {
        field("requestsHash", data(requests.as_slice()));
    }
    field("size", quantity(size));
    field("uncles", "[]".to_string());
    // geth keeps each transaction's sender by the unsigned transaction's
    // hash, which the sender is not part of: of two identical calls from
    // different senders, both show the later one's.
    let senders: std::collections::HashMap<B256, alloy_primitives::Address> = executed
        .txs
        .iter()
        .zip(encoded)
        .map(|(tx, encoded)| (encoded.hash, tx.from))
        .collect();
    let transactions: Vec<String> = executed
        .txs
        .iter()
        .zip(encoded)
        .enumerate()
        .map(|(index, (tx, encoded))| {
            if full {
                transaction_json(
                    tx,
                    senders[&encoded.hash],
                    encoded.hash,
                    header,
                    hash,
                    index,
                )
            } else {
                data(encoded.hash.as_slice())
            }
        })
        .collect();
    field("transactions", format!("[{}]", transactions.join(",")));
    if let Some(withdrawals) = &executed.withdrawals {
        let list: Vec<String> = withdrawals
            .iter()
            .map(|w| {
                format!(
                    "{{\"index\":{},\"validatorIndex\":{},\"address\":{},\"amount\":{}}}",
                    quantity(w.index),
                    quantity(w.validator_index),
                    data(w.address.as_slice()),
                    quantity(w.amount)
                )
            })
            .collect();
        field("withdrawals", format!("[{}]", list.join(",")));
    }
    let calls: Vec<String> = executed
        .calls
        .iter()
        .zip(encoded)
        .map(|(call, encoded)| call_json(call, encoded.hash, header, hash, codes))
        .collect();
    field("calls", format!("[{}]", calls.join(",")));
    fields.sort_unstable_by_key(|(name, _)| *name);
    let mut out = String::with_capacity(fields.iter().map(|(n, v)| n.len() + v.len() + 4).sum());
    for (name, value) in fields {
        out.push(if out.is_empty() { '{' } else { ',' });
        let _ = write!(out, "\"{name}\":{value}");
    }
    out.push('}');
    out
}

fn call_json(
    call: &CallResult,
    tx_hash: B256,
    header: &alloy_consensus::Header,
    block_hash: B256,
    codes: CallCodes,
) -> String {
    let logs: Vec<String> = call
        .logs
        .iter()
        .map(|log| {
            let topics: Vec<String> = log.topics.iter().map(|t| data(t.as_slice())).collect();
            format!(
                "{{\"address\":{},\"topics\":[{}],\"data\":{},\"blockNumber\":{},\"transactionHash\":{},\"transactionIndex\":{},\"blockHash\":{},\"blockTimestamp\":{},\"logIndex\":{},\"removed\":false}}",
                data(log.address.as_slice()),
                topics.join(","),
                data(&log.data),
                quantity(header.number),
                data(tx_hash.as_slice()),
                quantity(log.tx_index),
                data(block_hash.as_slice()),
                quantity(header.timestamp),
                quantity(log.index),
            )
        })
        .collect();
    let error = match &call.error {
        None => String::new(),
        Some((reverted, message, revert_data)) => {
            let message = go_escaped(&serde_json::to_string(message).expect("strings serialise"));
            let code = if *reverted {
                codes.reverted
            } else {
                codes.vm_error
            };
            match revert_data {
                Some(bytes) => format!(
                    ",\"error\":{{\"message\":{message},\"code\":{code},\"data\":{}}}",
                    data(bytes)
                ),
                None => format!(",\"error\":{{\"message\":{message},\"code\":{code}}}"),
            }
        }
    };
    format!(
        "{{\"returnData\":{},\"logs\":[{}],\"gasUsed\":{},\"maxUsedGas\":{},\"status\":{}{error}}}",
        data(&call.return_data),
        logs.join(","),
        quantity(call.gas_used),
        quantity(call.max_used_gas),
        quantity(u8::from(call.success)),
    )
}

/// JSON text escaped as Go's `encoding/json` escapes it: a revert
/// reason's `<`, `>` and `&` as geth writes them.
fn go_escaped(json: &str) -> String {
    json.replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

/// geth's `RPCTransaction` of a simulated transaction, its sender set.
fn transaction_json(
    tx: &SimTx,
    from: alloy_primitives::Address,
    hash: B256,
    header: &alloy_consensus::Header,
    block_hash: B256,
    index: usize,
) -> String {
    let mut out = format!(
        "{{\"blockHash\":{},\"blockNumber\":{},\"blockTimestamp\":{},\"from\":{},\"gas\":{}",
        data(block_hash.as_slice()),
        quantity(header.number),
        quantity(header.timestamp),
        data(from.as_slice()),
        quantity(tx.gas),
    );
    let base_fee = u128::from(header.base_fee_per_gas.unwrap_or_default());
    let price = if tx.tx_type == 0 {
        tx.fee_cap
    } else {
        tx.tip.saturating_add(base_fee).min(tx.fee_cap)
    };
    let _ = write!(out, ",\"gasPrice\":{}", quantity(price));
    if tx.tx_type != 0 {
        let _ = write!(
            out,
            ",\"maxFeePerGas\":{},\"maxPriorityFeePerGas\":{}",
            quantity(tx.fee_cap),
            quantity(tx.tip)
        );
    }
    if tx.tx_type == 3 {
        let fee = tx.args.max_fee_per_blob_gas.unwrap_or_default();
        let _ = write!(out, ",\"maxFeePerBlobGas\":{}", quantity(fee));
    }
    let to = tx.to.map_or("null".to_string(), |to| data(to.as_slice()));
    let _ = write!(
        out,
        ",\"hash\":{},\"input\":{},\"nonce\":{},\"to\":{to},\"transactionIndex\":{},\"value\":{},\"type\":{}",
        data(hash.as_slice()),
        data(&tx.input),
        quantity(tx.nonce),
        quantity(index),
        quantity(tx.value),
        quantity(tx.tx_type),
    );
    if tx.tx_type != 0 {
        let list = serde_json::to_string(&tx.args.access_list.clone().unwrap_or_default())
            .expect("access lists serialise");
        let _ = write!(
            out,
            ",\"accessList\":{list},\"chainId\":{}",
            quantity(tx.chain_id)
        );
    }
    if tx.tx_type == 3 {
        let hashes =
            serde_json::to_string(&tx.args.blob_versioned_hashes.clone().unwrap_or_default())
                .expect("hashes serialise");
        let _ = write!(out, ",\"blobVersionedHashes\":{hashes}");
    }
    if tx.tx_type == 4 {
        let list = serde_json::to_string(&tx.args.authorization_list.clone().unwrap_or_default())
            .expect("authorizations serialise");
        let _ = write!(out, ",\"authorizationList\":{list}");
    }
    out.push_str(",\"v\":\"0x0\",\"r\":\"0x0\",\"s\":\"0x0\"");
    if tx.tx_type != 0 {
        out.push_str(",\"yParity\":\"0x0\"");
    }
    out.push('}');
    out
}
