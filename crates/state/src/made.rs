//! Trie nodes made by updating a trie ([`apply_into`]), each under the
//! hash the update computed for it. Only this crate puts a node in, so
//! every key is its node's keccak256, and a set made for a root that is a
//! verified header's `stateRoot` is proven by that alone
//! ([`Made::proving`]): a replayed block's post-state is kept without
//! hashing and walking its nodes a second time.
//!
//! Nothing made is state until then: a simulation's nodes are made from
//! whatever it was asked to run, and are only read back by its own later
//! roots.

use std::collections::HashMap;

use bytes::Bytes;

use crate::proof::Verified;
use crate::trie::{Hash, Malformed};
use crate::update::{Updated, apply};

/// Nodes made by [`apply_into`], by hash, and the root the last update
/// that reached one made.
#[derive(Debug, Default)]
pub struct Made {
    nodes: HashMap<Hash, Bytes>,
    root: Option<Hash>,
}

impl Made {
    /// The node made under `hash`.
    pub fn get(&self, hash: &Hash) -> Option<&Bytes> {
        self.nodes.get(hash)
    }

    /// How many nodes were made.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Every node made, as verified, when the last root made is `trusted`
    /// (a verified header's `stateRoot`); else nothing. Each node is
    /// under its own hash by construction, and the trie they were made
    /// for hashes up to `trusted`.
    pub fn proving(self, trusted: &Hash) -> Option<Verified> {
        (self.root.as_ref() == Some(trusted)).then(|| Verified {
            entries: self.nodes.into_iter().collect(),
        })
    }
}

/// [`apply`] onto `made`: the nodes made before are read first, then
/// `get`; the new ones are added to `made`, and a root reached is the
/// last root made.
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
    if let Updated::Root(root) = &updated {
        made.root = Some(*root);
    }
    Ok(updated)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trie::{EMPTY_ROOT, Walked, walk};
    use alloy_primitives::keccak256;

    fn updates(n: u8) -> Vec<(Hash, Option<Bytes>)> {
        (0..n)
            .map(|i| (keccak256([i]).0, Some(Bytes::from(vec![0x82, i, i]))))
            .collect()
    }

    #[test]
    fn nodes_made_for_a_trusted_root_are_proven_and_read_back() {
        let mut made = Made::default();
        let Updated::Root(root) =
            apply_into(&EMPTY_ROOT, &updates(40), |_| None, &mut made).unwrap()
        else {
            panic!("an empty trie holds everything");
        };
        assert!(!made.is_empty());
        for (hash, node) in &made.nodes {
            assert_eq!(keccak256(node).0, *hash, "each node under its own hash");
        }
        let verified = made.proving(&root).expect("made for this root");
        let state = crate::State::new(1 << 20, 16);
        state.insert(verified);
        for (key, value) in updates(40) {
            let found = walk(&root, &key, |h| state.node(h), None).unwrap();
            assert!(matches!(found, Walked::Found(v) if Some(v.clone()) == value));
        }
    }

    #[test]
    fn nodes_made_for_another_root_prove_nothing() {
        let mut made = Made::default();
        apply_into(&EMPTY_ROOT, &updates(8), |_| None, &mut made).unwrap();
        assert!(made.proving(&keccak256(b"another root").0).is_none());
        assert!(
            Made::default().proving(&EMPTY_ROOT).is_none(),
            "nothing made"
        );
    }

    #[test]
    fn a_later_update_reads_what_an_earlier_one_made() {
        let mut made = Made::default();
        let Updated::Root(first) =
            apply_into(&EMPTY_ROOT, &updates(20), |_| None, &mut made).unwrap()
        else {
            panic!("an empty trie holds everything");
        };
        // Only the nodes made before are held: the second update reads them.
        let more: Vec<_> = updates(30).split_off(20);
        let Updated::Root(second) = apply_into(&first, &more, |_| None, &mut made).unwrap() else {
            panic!("what the first made is read");
        };
        let mut whole = Made::default();
        let Updated::Root(at_once) =
            apply_into(&EMPTY_ROOT, &updates(30), |_| None, &mut whole).unwrap()
        else {
            panic!("an empty trie holds everything");
        };
        assert_eq!(second, at_once);
        assert!(made.proving(&second).is_some());
    }
}
