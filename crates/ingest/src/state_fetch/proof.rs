//! Proof verification glue: an upstream's `eth_getProof` (and
//! `eth_getCode`) answer decoded and walked from the request's verified
//! root, and the hex text the upstream speaks.

use alloy_primitives::{U256, keccak256};
use bytes::Bytes;
use neve_state::{
    Account, EMPTY_CODE_HASH, EMPTY_ROOT, Hash, ProofError, ProofRequest, StorageKeys, Verified,
    proof,
};
use serde::Deserialize;

use super::error::FetchError;

/// An `eth_getProof` answer. Only the nodes are stored (and every value
/// served is read back from them); the values it states are checked
/// against the nodes, so an upstream that lies about them is caught and
/// counted even where its nodes are honest.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ProofAnswer {
    account_proof: Vec<String>,
    balance: String,
    nonce: String,
    code_hash: String,
    storage_hash: String,
    #[serde(default)]
    storage_proof: Vec<StorageAnswer>,
}

#[derive(Deserialize)]
pub(super) struct StorageAnswer {
    value: String,
    #[serde(default)]
    proof: Vec<String>,
}

/// What an answer states, decoded.
pub(super) struct Stated {
    balance: U256,
    nonce: u64,
    code_hash: Hash,
    storage_hash: Hash,
    values: Vec<U256>,
}

pub(super) fn quantity_u256(text: &str) -> Result<U256, FetchError> {
    text.strip_prefix("0x")
        .and_then(|digits| U256::from_str_radix(digits, 16).ok())
        .ok_or_else(|| FetchError::Shape(format!("{text:?} is not a quantity")))
}

pub(super) fn hash32(text: &str) -> Result<Hash, FetchError> {
    decode_hex(text)?
        .as_ref()
        .try_into()
        .map_err(|_| FetchError::Shape(format!("{text:?} is not a 32-byte hash")))
}

impl ProofAnswer {
    fn stated(&self) -> Result<Stated, FetchError> {
        Ok(Stated {
            balance: quantity_u256(&self.balance)?,
            nonce: u64::try_from(quantity_u256(&self.nonce)?)
                .map_err(|_| FetchError::Shape("nonce over 64 bits".into()))?,
            code_hash: hash32(&self.code_hash)?,
            storage_hash: hash32(&self.storage_hash)?,
            values: self
                .storage_proof
                .iter()
                .map(|s| quantity_u256(&s.value))
                .collect::<Result<_, _>>()?,
        })
    }
}

pub(super) fn hex(bytes: &[u8]) -> String {
    format!("0x{}", alloy_primitives::hex::encode(bytes))
}

pub(super) fn decode_hex(text: &str) -> Result<Bytes, FetchError> {
    alloy_primitives::hex::decode(text)
        .map(Bytes::from)
        .map_err(|_| FetchError::Shape("a node is not hex".into()))
}

/// An upstream's `eth_getProof` answer (and `eth_getCode`'s, when asked
/// for), as received, decoded and walked from the request's verified root.
pub(super) fn decode_and_verify(
    request: &ProofRequest,
    keys: StorageKeys,
    proof: &str,
    code: Option<&str>,
) -> Result<Verified, FetchError> {
    let proof: ProofAnswer =
        serde_json::from_str(proof).map_err(|e| FetchError::Shape(e.to_string()))?;
    let code: Option<Bytes> = match code {
        Some(raw) => {
            let text: String =
                serde_json::from_str(raw).map_err(|e| FetchError::Shape(e.to_string()))?;
            Some(decode_hex(&text)?)
        }
        None => None,
    };
    let stated = proof.stated()?;
    let account_nodes = proof
        .account_proof
        .iter()
        .map(|n| decode_hex(n))
        .collect::<Result<Vec<_>, _>>()?;
    let storage_nodes = proof
        .storage_proof
        .iter()
        .map(|s| s.proof.iter().map(|n| decode_hex(n)).collect())
        .collect::<Result<Vec<Vec<Bytes>>, _>>()?;
    Ok(verify_answer(
        request,
        keys,
        &stated,
        &account_nodes,
        &storage_nodes,
        code.as_deref(),
    )?)
}

/// `request` with the value slot of each of its slots (see
/// [`StorageKeys`]) named too, so the values an answer states can be
/// checked: a coreth node proves a slot's own path but states the value of
/// its normalized one.
pub(super) fn with_value_slots(request: &ProofRequest, keys: StorageKeys) -> ProofRequest {
    ProofRequest {
        slots: keys.with_value_slots(&request.slots),
        ..request.clone()
    }
}

/// Walks an upstream's answer from the request's verified root; returns
/// what it proved. Each stated storage value is checked against the value
/// proved at its value slot (the slot itself, but on coreth; see
/// [`StorageKeys`]), which the request must name.
pub(super) fn verify_answer(
    request: &ProofRequest,
    keys: StorageKeys,
    stated: &Stated,
    account_nodes: &[Bytes],
    storage_nodes: &[Vec<Bytes>],
    code: Option<&[u8]>,
) -> Result<Verified, ProofError> {
    let (mut verified, leaf) = proof::verify(
        &request.state_root,
        &keccak256(request.address).0,
        account_nodes,
    )?;
    if stated.values.len() != request.slots.len() || storage_nodes.len() != request.slots.len() {
        return Err(ProofError::Disagrees("number of storage proofs"));
    }
    let Some(leaf) = leaf else {
        // The account does not exist: its proof of absence is all there is.
        if stated.balance != U256::ZERO || stated.nonce != 0 {
            return Err(ProofError::Disagrees(
                "balance or nonce of a missing account",
            ));
        }
        if stated.values.iter().any(|v| *v != U256::ZERO) {
            return Err(ProofError::Disagrees("storage value of a missing account"));
        }
        return Ok(verified);
    };
    let account =
        Account::decode(&leaf).map_err(|_| ProofError::BadLeaf("account does not decode"))?;
    for (disagrees, what) in [
        (stated.balance != account.balance, "balance"),
        (stated.nonce != account.nonce, "nonce"),
        (stated.code_hash != account.code_hash, "code hash"),
        (stated.storage_hash != account.storage_root, "storage hash"),
    ] {
        if disagrees {
            return Err(ProofError::Disagrees(what));
        }
    }
    let mut proved = Vec::with_capacity(request.slots.len());
    for (slot, nodes) in request.slots.iter().zip(storage_nodes) {
        let value = if account.storage_root == EMPTY_ROOT {
            U256::ZERO
        } else {
            let (slot_nodes, leaf) =
                proof::verify(&account.storage_root, &keccak256(slot).0, nodes)?;
            verified.extend(slot_nodes);
            match leaf {
                None => U256::ZERO,
                Some(leaf) => {
                    let bytes = neve_state::trie::rlp_string(&leaf)
                        .map_err(|_| ProofError::BadLeaf("slot value does not decode"))?;
                    if bytes.len() > 32 {
                        return Err(ProofError::BadLeaf("slot value over 32 bytes"));
                    }
                    U256::from_be_slice(bytes)
                }
            }
        };
        proved.push(value);
    }
    for (slot, stated_value) in request.slots.iter().zip(&stated.values) {
        let value_slot = keys.value_slot(slot);
        let at = request
            .slots
            .iter()
            .position(|s| *s == value_slot)
            .ok_or(ProofError::Disagrees("a value slot was not asked for"))?;
        if proved[at] != *stated_value {
            return Err(ProofError::Disagrees("storage value"));
        }
    }
    if request.code && account.code_hash != EMPTY_CODE_HASH {
        let code = code.ok_or(ProofError::BadLeaf("code asked for but not given"))?;
        verified.extend(neve_state::verify_code(&account.code_hash, code)?);
    }
    Ok(verified)
}

pub(super) fn address20(text: &str) -> Result<[u8; 20], FetchError> {
    decode_hex(text)?
        .as_ref()
        .try_into()
        .map_err(|_| FetchError::Shape(format!("{text:?} is not an address")))
}
