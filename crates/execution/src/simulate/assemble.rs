//! A simulated block assembled as geth's `AssembleBlock` assembles it
//! (its transactions unsigned: a zero signature), hashed, and written as
//! geth's `RPCMarshalBlock` writes it with the calls' results beside.

use std::fmt::Write;

use alloy_consensus::{
    Eip658Value, Receipt, ReceiptEnvelope, ReceiptWithBloom, SignableTransaction, TxEip1559,
    TxEip4844, TxEip7702, TxEnvelope,
};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{B256, Bloom, Bytes, Signature, TxKind, U256, keccak256};
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

/// A value serde writes (the lists a transaction carries).
fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("transaction lists serialise")
}

/// A JSON object written straight into the answer, key by key.
struct Object<'a> {
    out: &'a mut String,
    empty: bool,
}

impl<'a> Object<'a> {
    fn open(out: &'a mut String) -> Self {
        out.push('{');
        Object { out, empty: true }
    }

    /// Writes `"name":` and hands the buffer over for the value.
    fn key(&mut self, name: &str) -> &mut String {
        if !self.empty {
            self.out.push(',');
        }
        self.empty = false;
        self.out.push('"');
        self.out.push_str(name);
        self.out.push_str("\":");
        self.out
    }

    fn data(&mut self, name: &str, bytes: &[u8]) {
        push_data(self.key(name), bytes);
    }

    fn quantity(&mut self, name: &str, value: impl std::fmt::LowerHex) {
        let _ = write!(self.key(name), "\"0x{value:x}\"");
    }

    fn close(self) {
        self.out.push('}');
    }
}

/// `"0x…"`, the bytes in lowercase hex.
fn push_data(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    out.reserve(bytes.len() * 2 + 4);
    out.push_str("\"0x");
    for byte in bytes {
        out.push(DIGITS[usize::from(byte >> 4)] as char);
        out.push(DIGITS[usize::from(byte & 0x0f)] as char);
    }
    out.push('"');
}

/// A list of `items`, each written by `write`.
fn push_list<T>(out: &mut String, items: &[T], mut write: impl FnMut(&mut String, usize, &T)) {
    out.push('[');
    for (index, item) in items.iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        write(out, index, item);
    }
    out.push(']');
}

/// The block as geth writes it: a Go map, its keys in alphabetical order.
fn render(
    executed: &Executed,
    header: &alloy_consensus::Header,
    hash: B256,
    size: usize,
    encoded: &[Encoded],
    full: bool,
    codes: CallCodes,
) -> String {
    let mut out = String::with_capacity(2048);
    let mut block = Object::open(&mut out);
    if let Some(fee) = header.base_fee_per_gas {
        block.quantity("baseFeePerGas", fee);
    }
    if let Some(gas) = header.blob_gas_used {
        block.quantity("blobGasUsed", gas);
    }
    push_list(block.key("calls"), &executed.calls, |out, index, call| {
        call_json(out, call, encoded[index].hash, header, hash, codes)
    });
    block.quantity("difficulty", header.difficulty);
    if let Some(gas) = header.excess_blob_gas {
        block.quantity("excessBlobGas", gas);
    }
    block.data("extraData", &header.extra_data);
    block.quantity("gasLimit", header.gas_limit);
    block.quantity("gasUsed", header.gas_used);
    block.data("hash", hash.as_slice());
    block.data("logsBloom", header.logs_bloom.as_slice());
    block.data("miner", header.beneficiary.as_slice());
    block.data("mixHash", header.mix_hash.as_slice());
    block.data("nonce", header.nonce.as_slice());
    block.quantity("number", header.number);
    if let Some(root) = header.parent_beacon_block_root {
        block.data("parentBeaconBlockRoot", root.as_slice());
    }
    block.data("parentHash", header.parent_hash.as_slice());
    block.data("receiptsRoot", header.receipts_root.as_slice());
    if let Some(requests) = header.requests_hash {
        block.data("requestsHash", requests.as_slice());
    }
    block.data("sha3Uncles", header.ommers_hash.as_slice());
    block.quantity("size", size);
    block.data("stateRoot", header.state_root.as_slice());
    block.quantity("timestamp", header.timestamp);
    // geth keeps each transaction's sender by the unsigned transaction's
    // hash, which the sender is not part of: of two identical calls from
    // different senders, both show the later one's.
    let senders: std::collections::HashMap<B256, alloy_primitives::Address> = executed
        .txs
        .iter()
        .zip(encoded)
        .map(|(tx, encoded)| (encoded.hash, tx.from))
        .collect();
    push_list(
        block.key("transactions"),
        &executed.txs,
        |out, index, tx| {
            let tx_hash = encoded[index].hash;
            if full {
                transaction_json(out, tx, senders[&tx_hash], tx_hash, header, hash, index);
            } else {
                push_data(out, tx_hash.as_slice());
            }
        },
    );
    block.data("transactionsRoot", header.transactions_root.as_slice());
    block.key("uncles").push_str("[]");
    if let Some(withdrawals) = &executed.withdrawals {
        push_list(block.key("withdrawals"), withdrawals, |out, _, w| {
            let mut withdrawal = Object::open(out);
            withdrawal.quantity("index", w.index);
            withdrawal.quantity("validatorIndex", w.validator_index);
            withdrawal.data("address", w.address.as_slice());
            withdrawal.quantity("amount", w.amount);
            withdrawal.close();
        });
    }
    if let Some(root) = header.withdrawals_root {
        block.data("withdrawalsRoot", root.as_slice());
    }
    block.close();
    out
}

/// One call's result, geth's `simCallResult`.
fn call_json(
    out: &mut String,
    call: &CallResult,
    tx_hash: B256,
    header: &alloy_consensus::Header,
    block_hash: B256,
    codes: CallCodes,
) {
    let mut result = Object::open(out);
    result.data("returnData", &call.return_data);
    push_list(result.key("logs"), &call.logs, |out, _, log| {
        let mut entry = Object::open(out);
        entry.data("address", log.address.as_slice());
        push_list(entry.key("topics"), &log.topics, |out, _, topic| {
            push_data(out, topic.as_slice())
        });
        entry.data("data", &log.data);
        entry.quantity("blockNumber", header.number);
        entry.data("transactionHash", tx_hash.as_slice());
        entry.quantity("transactionIndex", log.tx_index);
        entry.data("blockHash", block_hash.as_slice());
        entry.quantity("blockTimestamp", header.timestamp);
        entry.quantity("logIndex", log.index);
        entry.key("removed").push_str("false");
        entry.close();
    });
    result.quantity("gasUsed", call.gas_used);
    result.quantity("maxUsedGas", call.max_used_gas);
    result.quantity("status", u8::from(call.success));
    if let Some((reverted, message, revert_data)) = &call.error {
        let mut error = Object::open(result.key("error"));
        let message = serde_json::to_string(message).expect("strings serialise");
        error
            .key("message")
            .push_str(&crate::go_json::go_escaped(&message));
        let code = if *reverted {
            codes.reverted
        } else {
            codes.vm_error
        };
        let _ = write!(error.key("code"), "{code}");
        if let Some(bytes) = revert_data {
            error.data("data", bytes);
        }
        error.close();
    }
    result.close();
}

/// geth's `RPCTransaction` of a simulated transaction, its sender set.
fn transaction_json(
    out: &mut String,
    tx: &SimTx,
    from: alloy_primitives::Address,
    hash: B256,
    header: &alloy_consensus::Header,
    block_hash: B256,
    index: usize,
) {
    let mut entry = Object::open(out);
    entry.data("blockHash", block_hash.as_slice());
    entry.quantity("blockNumber", header.number);
    entry.quantity("blockTimestamp", header.timestamp);
    entry.data("from", from.as_slice());
    entry.quantity("gas", tx.gas);
    let base_fee = u128::from(header.base_fee_per_gas.unwrap_or_default());
    let price = if tx.tx_type == 0 {
        tx.fee_cap
    } else {
        tx.tip.saturating_add(base_fee).min(tx.fee_cap)
    };
    entry.quantity("gasPrice", price);
    if tx.tx_type != 0 {
        entry.quantity("maxFeePerGas", tx.fee_cap);
        entry.quantity("maxPriorityFeePerGas", tx.tip);
    }
    if tx.tx_type == 3 {
        entry.quantity(
            "maxFeePerBlobGas",
            tx.args.max_fee_per_blob_gas.unwrap_or_default(),
        );
    }
    entry.data("hash", hash.as_slice());
    entry.data("input", &tx.input);
    entry.quantity("nonce", tx.nonce);
    match tx.to {
        Some(to) => entry.data("to", to.as_slice()),
        None => entry.key("to").push_str("null"),
    }
    entry.quantity("transactionIndex", index);
    entry.quantity("value", tx.value);
    entry.quantity("type", tx.tx_type);
    if tx.tx_type != 0 {
        let list = tx.args.access_list.clone().unwrap_or_default();
        entry.key("accessList").push_str(&to_json(&list));
        entry.quantity("chainId", tx.chain_id);
    }
    if tx.tx_type == 3 {
        let hashes = tx.args.blob_versioned_hashes.clone().unwrap_or_default();
        entry.key("blobVersionedHashes").push_str(&to_json(&hashes));
    }
    if tx.tx_type == 4 {
        let list = tx.args.authorization_list.clone().unwrap_or_default();
        entry.key("authorizationList").push_str(&to_json(&list));
    }
    for signature in ["v", "r", "s"] {
        entry.quantity(signature, 0u8);
    }
    if tx.tx_type != 0 {
        entry.quantity("yParity", 0u8);
    }
    entry.close();
}
