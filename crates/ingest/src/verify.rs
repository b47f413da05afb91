//! Checking a decoded block before it is laid out and stored: the header fields in
//! the JSON hash to the block hash (geth's header schema through Osaka via
//! alloy, avalanchego's C-chain header with its extra fields by hand), the
//! raw header (when given) hashes to it too, every transaction re-encodes to
//! its hash, the transactions and receipts rebuild the header's roots, and
//! every transaction's `from` is the signer its signature recovers to (the
//! one field of a block no hash covers), and then every other served field
//! is what the verified parts give (`crate::fields`). Every typed value
//! is built from the trees decoding parsed, not from the text again; a
//! block whose text gives a key twice is refused before anything else.

use alloy_consensus::proofs::{calculate_receipt_root, calculate_transaction_root};
use alloy_consensus::transaction::SignerRecoverable;
use alloy_consensus::{Header, ReceiptEnvelope, TxEnvelope};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{Address, B64, B256, Bloom, Bytes, Log, U64, U256, keccak256};
use alloy_rlp::Encodable;
use serde::{Deserialize, Serialize};

use crate::decode::Decoded;
pub use crate::fields::FieldError;
use crate::fields::{self, HeaderFacts, Verified};

/// Why a block failed verification. Such a block is never stored.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VerifyError {
    /// The header fields could not be read.
    #[error("header fields do not decode: {0}")]
    Header(String),
    /// The header fields hash to something else than the block's hash.
    #[error("header hashes to {computed}, block claims {claimed}")]
    BlockHash {
        /// keccak256(RLP(header)).
        computed: B256,
        /// The `hash` field.
        claimed: B256,
    },
    /// The raw header does not hash to the block hash.
    #[error("raw header hashes to {0}, not the block hash")]
    RawHeader(B256),
    /// Transactions could not be decoded.
    #[error("transactions do not decode: {0}")]
    Transactions(String),
    /// A transaction's encoding hashes to something else than its hash.
    #[error("transaction {index} encodes to {computed}, claims {claimed}")]
    TxHash {
        /// Its index.
        index: usize,
        /// keccak256 of its EIP-2718 encoding.
        computed: B256,
        /// Its `hash` field.
        claimed: B256,
    },
    /// A transaction's `from` is not the signer its signature recovers to
    /// (or it recovers to none).
    #[error("transaction {index} claims sender {claimed}, its signature recovers {recovered}")]
    Sender {
        /// Its index.
        index: usize,
        /// What its signature recovers to (zero when nothing).
        recovered: Address,
        /// Its `from` field.
        claimed: Address,
    },
    /// The transactions do not rebuild `transactionsRoot`.
    #[error("transactions root {computed} differs from the header's {expected}")]
    TransactionsRoot {
        /// Rebuilt.
        computed: B256,
        /// In the header.
        expected: B256,
    },
    /// Receipts could not be decoded.
    #[error("receipts do not decode: {0}")]
    Receipts(String),
    /// The receipts do not rebuild `receiptsRoot`.
    #[error("receipts root {computed} differs from the header's {expected}")]
    ReceiptsRoot {
        /// Rebuilt.
        computed: B256,
        /// In the header.
        expected: B256,
    },
    /// A served field is not what the verified block gives, is given twice,
    /// or is one nothing verifies.
    #[error(transparent)]
    Field(#[from] FieldError),
}

/// The C-chain header of avalanchego (coreth): Ethereum's fields through the
/// nonce, then `extDataHash`, then optional fields in this order (the last
/// two arrived with avalanchego 1.14's Granite upgrade).
#[derive(Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
struct AvalancheHeader {
    parent_hash: B256,
    sha3_uncles: B256,
    miner: Address,
    state_root: B256,
    transactions_root: B256,
    receipts_root: B256,
    logs_bloom: Bloom,
    difficulty: U256,
    number: U256,
    gas_limit: U64,
    gas_used: U64,
    timestamp: U64,
    extra_data: Bytes,
    mix_hash: B256,
    nonce: B64,
    ext_data_hash: B256,
    #[serde(skip_serializing_if = "Option::is_none")]
    base_fee_per_gas: Option<U256>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ext_data_gas_used: Option<U256>,
    #[serde(skip_serializing_if = "Option::is_none")]
    block_gas_cost: Option<U256>,
    #[serde(skip_serializing_if = "Option::is_none")]
    blob_gas_used: Option<U64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    excess_blob_gas: Option<U64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent_beacon_block_root: Option<B256>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timestamp_milliseconds: Option<U64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_delay_excess: Option<U64>,
}

impl AvalancheHeader {
    fn rlp(&self) -> Vec<u8> {
        let mut fields: Vec<u8> = Vec::new();
        self.parent_hash.encode(&mut fields);
        self.sha3_uncles.encode(&mut fields);
        self.miner.encode(&mut fields);
        self.state_root.encode(&mut fields);
        self.transactions_root.encode(&mut fields);
        self.receipts_root.encode(&mut fields);
        self.logs_bloom.encode(&mut fields);
        self.difficulty.encode(&mut fields);
        self.number.encode(&mut fields);
        self.gas_limit.encode(&mut fields);
        self.gas_used.encode(&mut fields);
        self.timestamp.encode(&mut fields);
        self.extra_data.encode(&mut fields);
        self.mix_hash.encode(&mut fields);
        self.nonce.encode(&mut fields);
        self.ext_data_hash.encode(&mut fields);
        // RLP "optional" fields: present up to the last one that is set;
        // an unset one before a set one is encoded as its zero value.
        let optionals: [Option<Vec<u8>>; 8] = [
            self.base_fee_per_gas.map(alloy_rlp::encode),
            self.ext_data_gas_used.map(alloy_rlp::encode),
            self.block_gas_cost.map(alloy_rlp::encode),
            self.blob_gas_used.map(alloy_rlp::encode),
            self.excess_blob_gas.map(alloy_rlp::encode),
            self.parent_beacon_block_root.map(alloy_rlp::encode),
            self.timestamp_milliseconds.map(alloy_rlp::encode),
            self.min_delay_excess.map(alloy_rlp::encode),
        ];
        let zero: [Vec<u8>; 8] = [
            alloy_rlp::encode(U256::ZERO),
            alloy_rlp::encode(U256::ZERO),
            alloy_rlp::encode(U256::ZERO),
            alloy_rlp::encode(U64::ZERO),
            alloy_rlp::encode(U64::ZERO),
            alloy_rlp::encode(B256::ZERO),
            alloy_rlp::encode(U64::ZERO),
            alloy_rlp::encode(U64::ZERO),
        ];
        let last = optionals.iter().rposition(Option::is_some);
        if let Some(last) = last {
            for i in 0..=last {
                fields.extend_from_slice(optionals[i].as_ref().unwrap_or(&zero[i]));
            }
        }
        crate::rawrlp::rlp_list(&fields)
    }
}

/// Blocks with more transactions than this recover their signers on
/// several threads: about 25 µs a signature with libsecp256k1, so a block
/// of 1,250 takes ~30 ms on one core. Below it, one thread is cheaper than
/// starting more. Default is 128.
pub const PARALLEL_RECOVERY_MIN_TXS: usize = 128;

/// Each transaction's `from` is what its signature recovers to. No hash
/// covers `from`, so without this a lying upstream could change who sent a
/// transaction and every mirror downstream would repeat it. Part of
/// [`verify`]; on its own for measuring its cost.
pub fn check_senders(block: &Decoded<'_>) -> Result<(), VerifyError> {
    check_senders_split(&transactions(block)?, block, PARALLEL_RECOVERY_MIN_TXS).map(drop)
}

/// Each transaction built from its parsed object, which is exactly the
/// span serving cuts out: what is checked is what is served.
fn transactions(block: &Decoded<'_>) -> Result<Vec<TxEnvelope>, VerifyError> {
    block
        .transaction_trees()
        .iter()
        .map(|tx| TxEnvelope::deserialize(tx).map_err(|e| VerifyError::Transactions(e.to_string())))
        .collect()
}

/// The senders, each checked against its `from`.
fn check_senders_split(
    transactions: &[TxEnvelope],
    block: &Decoded<'_>,
    parallel_from: usize,
) -> Result<Vec<Address>, VerifyError> {
    let trees = block.transaction_trees();
    let check = |index: usize| -> Result<Address, VerifyError> {
        let claimed = trees
            .get(index)
            .and_then(|tx| tx.get("from"))
            .and_then(|from| Address::deserialize(from).ok())
            .ok_or_else(|| VerifyError::Transactions(format!("transaction {index} has no from")))?;
        let recovered = transactions[index].recover_signer().unwrap_or_default();
        if recovered != claimed {
            return Err(VerifyError::Sender {
                index,
                recovered,
                claimed,
            });
        }
        Ok(recovered)
    };
    let count = transactions.len();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if count < parallel_from || threads < 2 {
        return (0..count).map(check).collect();
    }
    let chunk = count.div_ceil(threads);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..count)
            .step_by(chunk)
            .map(|start| {
                let check = &check;
                scope.spawn(move || {
                    (start..(start + chunk).min(count))
                        .map(check)
                        .collect::<Result<Vec<_>, _>>()
                })
            })
            .collect();
        let mut senders = Vec::with_capacity(count);
        for worker in workers {
            senders.extend(worker.join().expect("recovery does not panic")?);
        }
        Ok(senders)
    })
}

/// Verifies `block`; `Ok` means every check passed.
pub fn verify(block: &Decoded<'_>) -> Result<(), VerifyError> {
    verified_time(block).map(|_| ())
}

/// [`verify`], giving the verified header's time (Unix seconds): what the
/// chain's block interval is learnt from
/// ([`IngestStatus::block_interval`](crate::status::IngestStatus::block_interval)).
// Long: the checks run in the order of what each relies on, on parts the
// earlier ones verified.
pub(crate) fn verified_time(block: &Decoded<'_>) -> Result<u64, VerifyError> {
    // A key given twice is read one way here and maybe another by a client.
    if let Some((object, reason)) = &block.repeated {
        return Err(VerifyError::Field(FieldError {
            object: object.to_string(),
            field: "(any)".into(),
            reason: reason.clone(),
        }));
    }
    // The header fields are the block object's; the rest of it (the
    // transactions above all) is skipped without being read.
    let tree = &block.tree;
    let claimed = B256::from(block.hash);
    let is_avalanche = tree.get("extDataHash").is_some();
    let header_error = |e: serde_json::Error| VerifyError::Header(e.to_string());
    let (facts, transactions_root, receipts_root) = if is_avalanche {
        let header = AvalancheHeader::deserialize(tree).map_err(header_error)?;
        let facts = HeaderFacts {
            fields: header_fields(&header)?,
            rlp: header.rlp(),
            timestamp: header.timestamp.to(),
            base_fee: header.base_fee_per_gas.map(|fee| fee.saturating_to()),
            excess_blob_gas: header.excess_blob_gas.map(|gas| gas.to()),
            ommers_hash: header.sha3_uncles,
            withdrawals_root: None,
            ext_data_hash: Some(header.ext_data_hash),
            // The C-chain's rules fix every block's difficulty at 1 after a
            // genesis of 0, so its total difficulty is its height.
            total_difficulty: (header.difficulty
                == U256::from(u64::from(header.number > U256::ZERO)))
            .then_some(header.number),
        };
        (facts, header.transactions_root, header.receipts_root)
    } else {
        let header = Header::deserialize(tree).map_err(header_error)?;
        let facts = HeaderFacts {
            fields: header_fields(&header)?,
            rlp: alloy_rlp::encode(&header),
            timestamp: header.timestamp,
            base_fee: header.base_fee_per_gas,
            excess_blob_gas: header.excess_blob_gas,
            ommers_hash: header.ommers_hash,
            withdrawals_root: header.withdrawals_root,
            ext_data_hash: None,
            total_difficulty: None,
        };
        (facts, header.transactions_root, header.receipts_root)
    };
    let computed = keccak256(&facts.rlp);
    if computed != claimed {
        return Err(VerifyError::BlockHash { computed, claimed });
    }
    if let Some(header) = block.raw_header_rlp() {
        let header = header.map_err(|e| VerifyError::Header(e.to_string()))?;
        let raw = keccak256(header);
        if raw != claimed {
            return Err(VerifyError::RawHeader(raw));
        }
    }

    let transactions = transactions(block)?;
    for (index, (tx, entry)) in transactions.iter().zip(block.transactions()).enumerate() {
        let computed = keccak256(tx.encoded_2718());
        let claimed = B256::from(entry.hash);
        if computed != claimed {
            return Err(VerifyError::TxHash {
                index,
                computed,
                claimed,
            });
        }
    }
    let senders = check_senders_split(&transactions, block, PARALLEL_RECOVERY_MIN_TXS)?;
    let computed = calculate_transaction_root(&transactions);
    if computed != transactions_root {
        return Err(VerifyError::TransactionsRoot {
            computed,
            expected: transactions_root,
        });
    }

    let receipts = block
        .receipt_trees()
        .iter()
        .map(ReceiptEnvelope::<Log>::deserialize)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| VerifyError::Receipts(e.to_string()))?;
    let computed = calculate_receipt_root(&receipts);
    if computed != receipts_root {
        return Err(VerifyError::ReceiptsRoot {
            computed,
            expected: receipts_root,
        });
    }
    fields::check_served_fields(
        block,
        &Verified {
            header: &facts,
            transactions: &transactions,
            senders: &senders,
            receipts: &receipts,
        },
    )?;
    Ok(facts.timestamp)
}

/// A verified header's fields as JSON, to compare the served ones with.
fn header_fields(
    header: &impl Serialize,
) -> Result<serde_json::Map<String, serde_json::Value>, VerifyError> {
    match serde_json::to_value(header) {
        Ok(serde_json::Value::Object(fields)) => Ok(fields),
        _ => Err(VerifyError::Header(
            "does not serialise to an object".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::{RawParts, decode};

    use neve_devnet::conformance::fixture_result as fixture;

    fn latest() -> (String, String) {
        (
            fixture("eth_getBlockByNumber/get-latest.io"),
            fixture("eth_getBlockReceipts/get-block-receipts-latest.io"),
        )
    }

    fn check(full: &str, receipts: &str) -> Result<(), VerifyError> {
        let block = decode(full, receipts, RawParts::default()).expect("prepares");
        verify(&block)
    }

    #[test]
    fn a_real_block_and_its_receipts_verify() {
        let (full, receipts) = latest();
        assert!(
            full.contains("\"transactions\":[{"),
            "has full transactions"
        );
        assert_eq!(check(&full, &receipts), Ok(()));
    }

    #[test]
    fn a_changed_header_field_transaction_or_receipt_is_refused() {
        let (full, receipts) = latest();
        let header = full.replacen("\"gasUsed\":\"0x", "\"gasUsed\":\"0x1", 1);
        assert!(matches!(
            check(&header, &receipts),
            Err(VerifyError::BlockHash { .. })
        ));
        // A transaction's value changed, its claimed hash kept.
        let tx = full.replacen("\"value\":\"0x", "\"value\":\"0x1", 1);
        assert!(matches!(
            check(&tx, &receipts),
            Err(VerifyError::TxHash { index: 0, .. })
        ));
        let receipt = receipts.replacen("\"gasUsed\":\"0x", "\"gasUsed\":\"0x1", 1);
        let receipt = receipt.replacen(
            "\"cumulativeGasUsed\":\"0x",
            "\"cumulativeGasUsed\":\"0x1",
            1,
        );
        assert!(matches!(
            check(&full, &receipt),
            Err(VerifyError::ReceiptsRoot { .. })
        ));
    }

    /// Regression (hardening: senders): `from` is the one field of a block
    /// no hash covers; a changed one is refused, on one thread or several.
    #[test]
    fn a_transaction_whose_from_is_not_its_signer_is_refused() {
        let (full, receipts) = latest();
        let at = full.find("\"from\":\"0x").unwrap() + "\"from\":\"0x".len();
        let mut lied = full.clone().into_bytes();
        lied[at] = if lied[at] == b'0' { b'1' } else { b'0' };
        let lied = String::from_utf8(lied).unwrap();
        assert!(matches!(
            check(&lied, &receipts),
            Err(VerifyError::Sender { index: 0, .. })
        ));
        for block in [&full, &lied] {
            let prepared = decode(block, &receipts, RawParts::default()).unwrap();
            let txs: Vec<TxEnvelope> = prepared
                .transactions()
                .iter()
                .map(|e| {
                    let span = e.full.offset as usize..(e.full.offset + e.full.len) as usize;
                    serde_json::from_slice(&prepared.full_json()[span]).unwrap()
                })
                .collect();
            assert_eq!(
                check_senders_split(&txs, &prepared, 0).is_ok(),
                block == &full,
                "split over threads"
            );
        }
    }

    #[test]
    fn a_transaction_receipt_or_log_claiming_another_place_is_refused() {
        use crate::decode::PrepareError;
        let (full, receipts) = latest();
        let refused = |full: &str, receipts: &str| {
            matches!(
                decode(full, receipts, RawParts::default()),
                Err(PrepareError::Mismatch(_))
            )
        };
        let moved_tx = full.replacen(
            "\"transactionIndex\":\"0x0\"",
            "\"transactionIndex\":\"0x1\"",
            1,
        );
        assert!(refused(&moved_tx, &receipts));
        let other_block =
            receipts.replacen("\"blockNumber\":\"0x36\"", "\"blockNumber\":\"0x35\"", 1);
        assert!(refused(&full, &other_block));
        let log_index = receipts.replacen("\"logIndex\":\"0x1\"", "\"logIndex\":\"0x7\"", 1);
        assert!(refused(&full, &log_index));
    }

    /// Fuzz target: upstream answers through preparation and verification
    /// (a block and its receipts, as `eth_getBlockByNumber` and
    /// `eth_getBlockReceipts` send them, split at a NUL byte). Whatever the
    /// bytes, the answer is a block or a refusal.
    #[test]
    fn fuzz_upstream_answers_through_preparation_and_verification() {
        let (full, receipts) = latest();
        let seed = [full.as_bytes(), b"\0", receipts.as_bytes()].concat();
        let dictionary: [&[u8]; 10] = [
            b"\"0x",
            b"\"hash\":",
            b"\"from\":",
            b"\"logs\":[",
            b"\"type\":\"0x2\"",
            b"null",
            b"{}",
            b"[]",
            b"\"transactions\":[",
            b"\"input\":\"0x",
        ];
        let report =
            neve_devnet::fuzz::run("prepare+verify", &[seed], &dictionary, 256 << 10, |input| {
                let (full, receipts) = match input.iter().position(|b| *b == 0) {
                    Some(at) => (&input[..at], &input[at + 1..]),
                    None => (input, &b"[]"[..]),
                };
                let (Ok(full), Ok(receipts)) =
                    (std::str::from_utf8(full), std::str::from_utf8(receipts))
                else {
                    return;
                };
                if let Ok(block) = decode(full, receipts, RawParts::default()) {
                    let _ = verify(&block);
                }
            });
        eprintln!("prepare+verify: {report}");
    }
}
