//! Proof verification: the only way nodes enter the node store.
//!
//! A proof is the list of nodes an upstream says lie on a key's path. It is
//! walked from a root neve already trusts (a verified header's `stateRoot`,
//! or the `storageRoot` of an account read from such a walk), looking nodes
//! up only among the proof's own by their keccak hash. The walk must end in
//! a value or a proof of absence; the nodes it used are [`Verified`] and may
//! be stored; nodes it did not use are dropped.

use alloy_primitives::keccak256;
use bytes::Bytes;

use crate::trie::{self, Hash, Malformed, Walked};

/// Why a proof was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    /// The path needs a node the proof does not hold (its hash).
    #[error("proof lacks node 0x{}", alloy_primitives::hex::encode(.0))]
    Incomplete(Hash),
    /// A node on the path does not decode as a trie node.
    #[error("proof holds a malformed node")]
    Malformed,
    /// The leaf's value is not what its trie holds (an account or a slot).
    #[error("proof's leaf does not decode: {0}")]
    BadLeaf(&'static str),
    /// The answer states a value (balance, nonce, hashes, a slot) that its
    /// own proof contradicts: the upstream is lying or broken.
    #[error("the answer states a {0} its proof contradicts")]
    Disagrees(&'static str),
    /// Code that does not hash to the account's code hash.
    #[error("code does not hash to the account's code hash")]
    CodeMismatch,
}

impl From<Malformed> for ProofError {
    fn from(_: Malformed) -> Self {
        ProofError::Malformed
    }
}

/// Nodes proven by a trusted root (on a path from it: a proof's, a
/// witness's, or nodes made by [`crate::apply_into`] that it reaches); the
/// only thing `State::insert` takes.
#[derive(Debug, Default)]
pub struct Verified {
    pub(crate) entries: Vec<(Hash, Bytes)>,
}

impl Verified {
    /// How many nodes (or code blobs) were proven.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing was proven (an empty trie's proof).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds what another verification proved.
    pub fn extend(&mut self, other: Verified) {
        self.entries.extend(other.entries);
    }
}

/// Walks `nodes` from `root` to `key` (already hashed). Returns the nodes
/// on the path and the leaf value (`None`: proven absent).
pub fn verify(
    root: &Hash,
    key: &Hash,
    nodes: &[Bytes],
) -> Result<(Verified, Option<Bytes>), ProofError> {
    let hashed: Vec<(Hash, &Bytes)> = nodes.iter().map(|n| (keccak256(n).0, n)).collect();
    let mut used = Vec::new();
    let walked = trie::walk(
        root,
        key,
        |hash| {
            hashed.iter().find(|(h, _)| h == hash).map(|(h, node)| {
                used.push((*h, (*node).clone()));
                (*node).clone()
            })
        },
        None,
    )?;
    let value = match walked {
        Walked::Found(value) => Some(value),
        Walked::Absent => None,
        Walked::Missing(hash) => return Err(ProofError::Incomplete(hash)),
    };
    // Store each node as its own allocation, not as a view into the
    // upstream's whole answer (which would pin the answer in memory).
    let entries = used
        .into_iter()
        .map(|(h, node)| (h, Bytes::copy_from_slice(&node)))
        .collect();
    Ok((Verified { entries }, value))
}

/// Checks code against the code hash a verified account states.
pub fn verify_code(code_hash: &Hash, code: &[u8]) -> Result<Verified, ProofError> {
    if keccak256(code).0 != *code_hash {
        return Err(ProofError::CodeMismatch);
    }
    Ok(Verified {
        entries: vec![(*code_hash, Bytes::copy_from_slice(code))],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::account::Account;
    use crate::state::State;
    use crate::vocabulary::Read;

    /// geth's own `eth_getProof` answer from the execution-apis suite.
    fn fixture() -> serde_json::Value {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/conformance/rpc-compat/eth_getProof/get-account-proof-latest.io"
        );
        let text =
            std::fs::read_to_string(path).expect("the conformance fixtures beside the project");
        let line = text.lines().find(|l| l.starts_with("<<")).unwrap();
        serde_json::from_str::<serde_json::Value>(&line[3..]).unwrap()["result"].clone()
    }

    fn decode_hex(text: &str) -> Vec<u8> {
        let digits = text.trim_start_matches("0x");
        (0..digits.len() / 2)
            .map(|i| u8::from_str_radix(&digits[2 * i..2 * i + 2], 16).unwrap())
            .collect()
    }

    /// The fixture's proof nodes, the root they hash up to, its address
    /// and the answer itself.
    fn proof() -> (Vec<Bytes>, Hash, [u8; 20], serde_json::Value) {
        let result = fixture();
        let nodes: Vec<Bytes> = result["accountProof"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| Bytes::from(decode_hex(n.as_str().unwrap())))
            .collect();
        let root = keccak256(&nodes[0]).0;
        let address = decode_hex(result["address"].as_str().unwrap())
            .try_into()
            .unwrap();
        (nodes, root, address, result)
    }

    #[test]
    fn a_geth_proof_verifies_and_answers_from_the_store() {
        let (nodes, root, address, result) = proof();
        let (verified, leaf) = verify(&root, &keccak256(address).0, &nodes).unwrap();
        assert_eq!(verified.len(), nodes.len());
        let account = Account::decode(&leaf.unwrap()).unwrap();
        assert_eq!(account.balance, alloy_primitives::U256::from(0x76));
        assert_eq!(
            account.code_hash.to_vec(),
            decode_hex(result["codeHash"].as_str().unwrap())
        );

        let state = State::new(1 << 20, 0);
        assert_eq!(state.account(&root, &address, false), Read::Missing);
        state.insert(verified);
        let Read::Found(read) = state.account(&root, &address, true) else {
            panic!("held after insert")
        };
        assert_eq!(read.account, Some(account));
        assert_eq!(
            read.proof, nodes,
            "the proof rebuilt from the store is geth's"
        );
    }

    #[test]
    fn a_tampered_or_partial_proof_is_refused() {
        let (nodes, root, address, _) = proof();
        let key = keccak256(address).0;
        // A changed byte in the leaf (the balance, say) breaks its hash.
        let mut tampered = nodes.clone();
        let mut leaf = tampered.last().unwrap().to_vec();
        let last = leaf.len() - 40;
        leaf[last] ^= 1;
        *tampered.last_mut().unwrap() = Bytes::from(leaf);
        assert!(matches!(
            verify(&root, &key, &tampered),
            Err(ProofError::Incomplete(_))
        ));
        // A node left out.
        assert!(matches!(
            verify(&root, &key, &nodes[..1]),
            Err(ProofError::Incomplete(_))
        ));
        // Another root.
        assert!(verify(&[7; 32], &key, &nodes).is_err());
        // Code that is not the account's.
        assert_eq!(
            verify_code(&[1; 32], b"code").unwrap_err(),
            ProofError::CodeMismatch
        );
        assert_eq!(
            verify_code(&keccak256(b"code").0, b"code").unwrap().len(),
            1
        );
    }
}
