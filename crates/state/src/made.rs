//! Trie nodes made by updating a trie ([`apply_into`]), each under the
//! hash the update computed for it: only this crate puts a node in, so
//! every key is its node's keccak256. What a root neve trusts (a verified
//! header's `stateRoot`) reaches of them is proven by that root
//! ([`Made::proving`]): a replayed block's post-state is kept by walking
//! its new nodes from the header's root, without hashing or copying them
//! again.
//!
//! Nothing made is state until then: a simulation's nodes are made from
//! whatever it was asked to run, and are only read back by its own later
//! roots.

use std::collections::{HashMap, HashSet};

use alloy_primitives::keccak256;
use bytes::Bytes;

use crate::proof::Verified;
use crate::trie::{Hash, Malformed};
use crate::update::{Updated, apply};
use crate::witness::{Trie, scan};

/// Nodes made by [`apply_into`], by hash.
#[derive(Debug, Default)]
pub struct Made {
    nodes: HashMap<Hash, Bytes>,
}

impl Made {
    /// The nodes made that `trusted` reaches (walked from it through
    /// nodes made: a node not made lies under a node not made, both
    /// unchanged), and of `codes` those a reached account names, each
    /// under its own hash: what a witness of that root proves, as
    /// [`crate::verify_witness`] takes it, without hashing a node again.
    /// Nodes made for other roots (a simulation's earlier blocks, a
    /// change undone) are left out. `None` when a reached node does not
    /// decode.
    pub fn proving(mut self, trusted: &Hash, codes: &[Bytes]) -> Option<Verified> {
        let mut queue = vec![(*trusted, Trie::Accounts)];
        let mut code_hashes = HashSet::new();
        let mut out = Verified::default();
        while let Some((hash, kind)) = queue.pop() {
            // Taken once: a node reached twice is the same node.
            let Some(node) = self.nodes.remove(&hash) else {
                continue;
            };
            scan(&node, kind, &mut queue, &mut code_hashes).ok()?;
            out.entries.push((hash, node));
        }
        for code in codes {
            let hash = keccak256(code).0;
            if code_hashes.contains(&hash) {
                out.entries.push((hash, code.clone()));
            }
        }
        Some(out)
    }
}

/// [`apply`] onto `made`: the nodes made before are read first, then
/// `get`; the new ones are added to `made`.
pub fn apply_into(
    root: &Hash,
    updates: &[(Hash, Option<Bytes>)],
    mut get: impl FnMut(&Hash) -> Option<Bytes>,
    made: &mut Made,
) -> Result<Updated, Malformed> {
    let mut put = Vec::new();
    let updated = apply(
        root,
        updates,
        |hash| made.nodes.get(hash).cloned().or_else(|| get(hash)),
        |hash, node| put.push((hash, node)),
    )?;
    made.nodes.extend(put);
    Ok(updated)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::account::EMPTY_CODE_HASH;
    use crate::trie::{EMPTY_ROOT, Walked, walk};

    /// An account's leaf: `nonce`, no storage, code of `code_hash`.
    fn account(nonce: u64, code_hash: Hash) -> Bytes {
        let mut out = Vec::new();
        alloy_rlp::encode_list::<_, dyn alloy_rlp::Encodable>(
            &[
                &nonce as &dyn alloy_rlp::Encodable,
                &alloy_primitives::U256::from(7),
                &alloy_primitives::B256::from(EMPTY_ROOT),
                &alloy_primitives::B256::from(code_hash),
            ],
            &mut out,
        );
        Bytes::from(out)
    }

    /// Accounts `range` set, as an account trie's updates.
    fn updates(range: std::ops::Range<u8>) -> Vec<(Hash, Option<Bytes>)> {
        range
            .map(|i| (keccak256([i]).0, Some(account(i.into(), EMPTY_CODE_HASH))))
            .collect()
    }

    fn root_of(updated: Updated) -> Hash {
        match updated {
            Updated::Root(root) => root,
            Updated::Unheld(_) => panic!("every node read is made"),
        }
    }

    /// `state` holds every one of `updates` under `root`.
    fn reads_back(state: &crate::State, root: &Hash, updates: &[(Hash, Option<Bytes>)]) {
        for (key, value) in updates {
            let found = walk(root, key, |h| state.node(h), None).unwrap();
            assert!(matches!(found, Walked::Found(v) if Some(v.clone()) == *value));
        }
    }

    #[test]
    fn what_a_trusted_root_reaches_is_proven_and_reads_back() {
        let mut made = Made::default();
        let root = root_of(apply_into(&EMPTY_ROOT, &updates(0..40), |_| None, &mut made).unwrap());
        let count = made.nodes.len();
        for (hash, node) in &made.nodes {
            assert_eq!(keccak256(node).0, *hash, "each node under its own hash");
        }
        let verified = made.proving(&root, &[]).expect("made nodes decode");
        assert_eq!(verified.len(), count, "a trie made whole is reached whole");
        let state = crate::State::new(1 << 20, 16);
        state.insert(verified);
        reads_back(&state, &root, &updates(0..40));
    }

    #[test]
    fn nodes_made_for_other_roots_are_left_out() {
        let mut made = Made::default();
        // Another trie first (a simulation's earlier block, say), then
        // the one trusted.
        let other = root_of(apply_into(&EMPTY_ROOT, &updates(0..20), |_| None, &mut made).unwrap());
        let mut alone = Made::default();
        let trusted =
            root_of(apply_into(&EMPTY_ROOT, &updates(50..60), |_| None, &mut alone).unwrap());
        root_of(apply_into(&EMPTY_ROOT, &updates(50..60), |_| None, &mut made).unwrap());
        let verified = made.proving(&trusted, &[]).unwrap();
        assert_eq!(
            verified.len(),
            alone.nodes.len(),
            "only the trusted trie's nodes"
        );
        assert!(
            verified
                .entries
                .iter()
                .all(|(h, _)| alone.nodes.contains_key(h))
        );
        assert_ne!(other, trusted);
        // A root none of it was made for proves nothing.
        let mut made = Made::default();
        apply_into(&EMPTY_ROOT, &updates(0..8), |_| None, &mut made).unwrap();
        assert!(
            made.proving(&keccak256(b"another root").0, &[])
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_later_update_reads_what_an_earlier_one_made_and_its_root_reaches_its_own() {
        let mut made = Made::default();
        let first = root_of(apply_into(&EMPTY_ROOT, &updates(0..20), |_| None, &mut made).unwrap());
        // Only the nodes made before are held: the second update reads them.
        let second = root_of(apply_into(&first, &updates(20..30), |_| None, &mut made).unwrap());
        let mut whole = Made::default();
        let at_once =
            root_of(apply_into(&EMPTY_ROOT, &updates(0..30), |_| None, &mut whole).unwrap());
        assert_eq!(second, at_once);
        let verified = made.proving(&second, &[]).unwrap();
        // The first root's nodes the second changed are not reached.
        assert_eq!(verified.len(), whole.nodes.len());
        let state = crate::State::new(1 << 20, 16);
        state.insert(verified);
        reads_back(&state, &second, &updates(0..30));
    }

    #[test]
    fn a_code_is_kept_when_a_reached_account_names_it() {
        let named = Bytes::from_static(&[0x60, 0x01, 0x60, 0x00, 0x55]);
        let unnamed = Bytes::from_static(&[0xfe]);
        let accounts: Vec<(Hash, Option<Bytes>)> = (0u8..10)
            .map(|i| {
                let code_hash = if i == 3 {
                    keccak256(&named).0
                } else {
                    EMPTY_CODE_HASH
                };
                (keccak256([i, i]).0, Some(account(i.into(), code_hash)))
            })
            .collect();
        let mut made = Made::default();
        let root = root_of(apply_into(&EMPTY_ROOT, &accounts, |_| None, &mut made).unwrap());
        let nodes = made.nodes.len();
        let verified = made.proving(&root, &[named.clone(), unnamed]).unwrap();
        assert_eq!(verified.len(), nodes + 1, "the named code alone");
        let state = crate::State::new(1 << 20, 16);
        state.insert(verified);
        assert!(state.has_code(&keccak256(&named).0));
    }
}
