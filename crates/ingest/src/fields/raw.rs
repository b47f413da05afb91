//! The block's RLP rebuilt from the verified parts and compared with the
//! raw block: uncles, withdrawals, avalanchego's extra data, the size.

use alloy_consensus::constants::{EMPTY_OMMER_ROOT_HASH, EMPTY_WITHDRAWALS};
use alloy_consensus::proofs::calculate_withdrawals_root;
use alloy_eips::eip4895::Withdrawal;
use alloy_primitives::{B256, keccak256};
use alloy_rlp::Encodable;
use serde::Deserialize;

use crate::decode::Decoded;
use crate::rawrlp;
use crate::strict_json::Json;

use super::compare::{FieldError, mismatch};
use super::facts::Verified;

/// The parts of a block's RLP the JSON does not carry whole (uncle headers,
/// avalanchego's version), its length, and what they verify.
pub(super) struct RawBlock {
    pub(super) size: usize,
    pub(super) uncles: Vec<B256>,
    pub(super) withdrawals: Option<Vec<Withdrawal>>,
    pub(super) ext_data: alloy_primitives::Bytes,
}

impl RawBlock {
    /// Rebuilds the block's RLP from the verified parts, compares it with
    /// the raw block when there is one, and returns what it found.
    // Long: one walk over the raw block's items, each compared as it is
    // rebuilt from the verified parts.
    pub(super) fn rebuild_and_compare(
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
