//! The keys a block touched: from a `prestateTracer` diff, what the
//! tracer leaves out (read from the header), or an upstream neve's list;
//! each bounded.

use std::collections::BTreeMap;

use alloy_primitives::U256;
use serde::Deserialize;

use super::error::FetchError;
use super::proof::{address20, hash32, quantity_u256};

/// EIP-4788's beacon roots contract and ring size: each block writes the
/// slots `timestamp % 8191` and that plus 8191 outside any transaction.
pub(super) const BEACON_ROOTS: [u8; 20] =
    alloy_primitives::hex!("000F3df6D732807Ef1319fB7B8bB8522d0Beac02");
/// EIP-2935's block hash history contract: each block writes the slot
/// `(number - 1) % 8191` outside any transaction.
pub(super) const HISTORY_STORAGE: [u8; 20] =
    alloy_primitives::hex!("0000F90827F1C53a10cb7A02335B175320002935");
/// Both system contracts' ring size.
pub(super) const SYSTEM_RING: u64 = 8191;

/// The keys a `prestateTracer` diff-mode trace of a block names: every
/// account in any transaction's `pre` or `post`, with the slots of its
/// `storage` there.
pub(super) fn touched_by_trace(trace: &str) -> Result<neve_state::Touched, FetchError> {
    within_answer_bound(trace)?;
    #[derive(Deserialize)]
    struct Traced {
        result: Option<Diff>,
    }
    #[derive(Deserialize)]
    struct Diff {
        #[serde(default)]
        pre: BTreeMap<String, Changed>,
        #[serde(default)]
        post: BTreeMap<String, Changed>,
    }
    #[derive(Deserialize)]
    struct Changed {
        #[serde(default)]
        storage: BTreeMap<String, serde::de::IgnoredAny>,
    }
    let traced: Vec<Traced> =
        serde_json::from_str(trace).map_err(|e| FetchError::Shape(e.to_string()))?;
    let mut touched = neve_state::Touched::new();
    for diff in traced.into_iter().filter_map(|t| t.result) {
        for (address, changed) in diff.pre.into_iter().chain(diff.post) {
            let slots = touched.entry(address20(&address)?).or_default();
            for slot in changed.storage.keys() {
                slots.push(hash32(slot)?);
            }
        }
    }
    for slots in touched.values_mut() {
        slots.sort_unstable();
        slots.dedup();
    }
    within_key_bound(touched.values().map(|slots| 1 + slots.len()).sum())?;
    Ok(touched)
}

/// Adds what a block changes outside its transactions, which the tracer
/// does not see: the fee recipient, withdrawals' recipients, and the
/// EIP-4788 and EIP-2935 system contracts' slots, read from the verified
/// header.
pub(super) fn add_untraced(
    touched: &mut neve_state::Touched,
    header: &[u8],
) -> Result<(), FetchError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Header {
        number: String,
        timestamp: String,
        miner: String,
        #[serde(default)]
        parent_beacon_block_root: Option<String>,
        #[serde(default)]
        requests_hash: Option<String>,
        #[serde(default)]
        withdrawals: Vec<Withdrawal>,
    }
    #[derive(Deserialize)]
    struct Withdrawal {
        address: String,
    }
    let header: Header =
        serde_json::from_slice(header).map_err(|e| FetchError::Shape(e.to_string()))?;
    let number = u64::try_from(quantity_u256(&header.number)?)
        .map_err(|_| FetchError::Shape("height over 64 bits".into()))?;
    let timestamp = u64::try_from(quantity_u256(&header.timestamp)?)
        .map_err(|_| FetchError::Shape("timestamp over 64 bits".into()))?;
    touched.entry(address20(&header.miner)?).or_default();
    for withdrawal in &header.withdrawals {
        touched.entry(address20(&withdrawal.address)?).or_default();
    }
    let slot = |n: u64| U256::from(n).to_be_bytes::<32>();
    if header.parent_beacon_block_root.is_some() {
        let ring = timestamp % SYSTEM_RING;
        let slots = touched.entry(BEACON_ROOTS).or_default();
        slots.extend([slot(ring), slot(ring + SYSTEM_RING)]);
    }
    if header.requests_hash.is_some() && number > 0 {
        let slots = touched.entry(HISTORY_STORAGE).or_default();
        slots.push(slot((number - 1) % SYSTEM_RING));
    }
    for slots in touched.values_mut() {
        slots.sort_unstable();
        slots.dedup();
    }
    Ok(())
}

/// Keys (accounts and slots together) one block's touched set may name,
/// from the upstream's trace or an upstream neve: past it the answer is
/// refused (logged) and that block is refreshed key by key, so a hostile
/// or broken upstream naming millions of keys costs neither gigabytes nor
/// an hour of prefetch budget. A block of Ethereum mainnet touches a few
/// thousand; 100,000 is far above any. Default is 100,000.
pub const MAX_TOUCHED_KEYS_PER_BLOCK: usize = 100_000;

/// Bytes of a touched-keys answer (a trace or a neve's list) parsed at
/// most, so the key bound is not reached only after the parse allocated
/// them. Default is 64 MiB.
pub const MAX_TOUCHED_ANSWER_BYTES: usize = 64 << 20;

/// Refuses a touched set naming `keys` keys past
/// [`MAX_TOUCHED_KEYS_PER_BLOCK`].
pub(super) fn within_key_bound(keys: usize) -> Result<(), FetchError> {
    if keys > MAX_TOUCHED_KEYS_PER_BLOCK {
        tracing::warn!(
            keys,
            limit = MAX_TOUCHED_KEYS_PER_BLOCK,
            "the upstream named more touched keys than a block can have; refreshing key by key"
        );
        return Err(FetchError::Shape(format!(
            "{keys} touched keys, past the bound of {MAX_TOUCHED_KEYS_PER_BLOCK}"
        )));
    }
    Ok(())
}

/// Refuses a touched-keys answer past [`MAX_TOUCHED_ANSWER_BYTES`] unparsed.
pub(super) fn within_answer_bound(answer: &str) -> Result<(), FetchError> {
    if answer.len() > MAX_TOUCHED_ANSWER_BYTES {
        tracing::warn!(
            bytes = answer.len(),
            limit = MAX_TOUCHED_ANSWER_BYTES,
            "a touched-keys answer past its bound; refreshing key by key"
        );
        return Err(FetchError::Shape(format!(
            "a touched-keys answer of {} bytes, past the bound of {MAX_TOUCHED_ANSWER_BYTES}",
            answer.len()
        )));
    }
    Ok(())
}

/// An upstream neve's `neve_getTouchedKeys` answer.
pub(super) fn touched_as_said(said: &str) -> Result<neve_state::Touched, FetchError> {
    within_answer_bound(said)?;
    let said: BTreeMap<String, Vec<String>> =
        serde_json::from_str(said).map_err(|e| FetchError::Shape(e.to_string()))?;
    within_key_bound(said.values().map(|slots| 1 + slots.len()).sum())?;
    said.iter()
        .map(|(address, slots)| {
            Ok((
                address20(address)?,
                slots.iter().map(|s| hash32(s)).collect::<Result<_, _>>()?,
            ))
        })
        .collect()
}
