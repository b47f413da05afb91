//! A block's execution witness verified against a root neve trusts: the
//! state trie nodes and codes geth's `debug_executionWitness` hands over
//! for a block, keyed by nothing. Every node is taken only if it is
//! reached from the parent's verified `stateRoot` by hash (branch to
//! child, extension to child, an account's leaf to its storage trie); a
//! code only if a reached account names its hash. Anything else in the
//! witness is dropped, counted. Like a proof, what is reached is
//! [`Verified`]: the one thing the node store takes.

use std::collections::{HashMap, HashSet};

use alloy_primitives::keccak256;
use bytes::Bytes;

use crate::account::{Account, EMPTY_CODE_HASH};
use crate::proof::Verified;
use crate::trie::{self, EMPTY_ROOT, Hash, HexPath, Malformed, Next};

/// What a witness proved, and what of it was not on any path from the root.
#[derive(Debug, Default)]
pub struct Witnessed {
    /// The nodes and codes reached from the root: the nodes first (the
    /// first [`Witnessed::nodes`] entries), then the codes.
    pub verified: Verified,
    /// Nodes reached.
    pub nodes: usize,
    /// Codes an account reached names.
    pub codes: usize,
    /// Nodes and codes no path from the root reaches, dropped.
    pub dropped: usize,
    /// Bytes of what was reached.
    pub bytes: usize,
}

impl Witnessed {
    /// The nodes reached, in the order they were reached.
    pub fn state_nodes(&self) -> impl Iterator<Item = &Bytes> {
        self.verified.entries[..self.nodes].iter().map(|(_, n)| n)
    }

    /// The codes reached.
    pub fn code_items(&self) -> impl Iterator<Item = &Bytes> {
        self.verified.entries[self.nodes..].iter().map(|(_, c)| c)
    }
}

/// Which trie a node belongs to: an account leaf leads to a storage trie.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trie {
    Accounts,
    Storage,
}

/// Verifies a witness's `nodes` and `codes` against `root` (see the
/// module's doc). A reached node that does not decode as a trie node, or
/// an account leaf that does not decode, refuses the witness whole.
pub fn verify_witness(
    root: &Hash,
    nodes: &[Bytes],
    codes: &[Bytes],
) -> Result<Witnessed, Malformed> {
    // Keyed with a random seed: the upstream chooses what its items hash
    // to, and could choose many alike in a few bits.
    let by_hash: HashMap<Hash, &Bytes> = nodes.iter().map(|n| (keccak256(n).0, n)).collect();
    let codes_by_hash: HashMap<Hash, &Bytes> = codes.iter().map(|c| (keccak256(c).0, c)).collect();
    let mut queue: Vec<(Hash, Trie)> = Vec::new();
    if *root != EMPTY_ROOT {
        queue.push((*root, Trie::Accounts));
    }
    let mut reached: HashSet<Hash> = HashSet::new();
    let mut code_hashes: HashSet<Hash> = HashSet::new();
    let mut out = Witnessed::default();
    while let Some((hash, kind)) = queue.pop() {
        if !reached.insert(hash) {
            continue;
        }
        // A subtrie the block never entered: not in the witness.
        let Some(node) = by_hash.get(&hash) else {
            continue;
        };
        scan(node, kind, &mut queue, &mut code_hashes)?;
        out.nodes += 1;
        out.bytes += node.len();
        // Its own allocation, not a view into the upstream's answer.
        out.verified
            .entries
            .push((hash, Bytes::copy_from_slice(node)));
    }
    for hash in &code_hashes {
        if let Some(code) = codes_by_hash.get(hash) {
            out.codes += 1;
            out.bytes += code.len();
            out.verified
                .entries
                .push((*hash, Bytes::copy_from_slice(code)));
        }
    }
    out.dropped = (nodes.len() + codes.len()).saturating_sub(out.nodes + out.codes);
    Ok(out)
}

/// The children `node` refers to by hash (onto `queue`), and the code
/// hashes of the accounts its leaves hold; inline children scanned in place.
pub(crate) fn scan(
    node: &Bytes,
    kind: Trie,
    queue: &mut Vec<(Hash, Trie)>,
    code_hashes: &mut HashSet<Hash>,
) -> Result<(), Malformed> {
    let (items, count) = trie::node_items(node)?;
    let mut follow = |next: Next, queue: &mut Vec<(Hash, Trie)>| -> Result<(), Malformed> {
        match next {
            Next::Hash(hash) => queue.push((hash, kind)),
            Next::Inline(inline) => scan(&inline, kind, queue, code_hashes)?,
            Next::Empty => {}
        }
        Ok(())
    };
    if count == 17 {
        for item in &items[..16] {
            follow(trie::child(node, *item)?, queue)?;
        }
        return Ok(());
    }
    let path = HexPath::new(&node[items[0].payload.0..items[0].payload.1])?;
    if !path.is_leaf {
        return follow(trie::child(node, items[1])?, queue);
    }
    if kind == Trie::Accounts {
        let account = Account::decode(&node[items[1].payload.0..items[1].payload.1])?;
        if account.storage_root != EMPTY_ROOT {
            queue.push((account.storage_root, Trie::Storage));
        }
        if account.code_hash != EMPTY_CODE_HASH {
            code_hashes.insert(account.code_hash);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::update::{Updated, apply};

    /// A trie of `leaves` built with `update::apply`: its root and every
    /// node, as a witness of the whole trie would hold them.
    fn trie_of(leaves: &[(Hash, Bytes)]) -> (Hash, Vec<Bytes>) {
        let updates: Vec<(Hash, Option<Bytes>)> =
            leaves.iter().map(|(k, v)| (*k, Some(v.clone()))).collect();
        let mut nodes = Vec::new();
        let root = match apply(&EMPTY_ROOT, &updates, |_| None, |_, node| nodes.push(node)).unwrap()
        {
            Updated::Root(root) => root,
            Updated::Unheld(_) => panic!("an empty trie holds everything"),
        };
        (root, nodes)
    }

    fn account(storage_root: Hash, code_hash: Hash) -> Bytes {
        let mut out = Vec::new();
        alloy_rlp::encode_list::<_, dyn alloy_rlp::Encodable>(
            &[
                &1u64 as &dyn alloy_rlp::Encodable,
                &alloy_primitives::U256::from(7),
                &alloy_primitives::B256::from(storage_root),
                &alloy_primitives::B256::from(code_hash),
            ],
            &mut out,
        );
        out.into()
    }

    #[test]
    fn what_the_root_reaches_is_kept_and_the_rest_dropped() {
        let code = Bytes::from_static(&[0x60, 0x01, 0x60, 0x00, 0x55]);
        let slots: Vec<(Hash, Bytes)> = (0u8..40)
            .map(|i| (keccak256([i]).0, Bytes::from(vec![0x82, i, i])))
            .collect();
        let (storage_root, storage_nodes) = trie_of(&slots);
        let accounts: Vec<(Hash, Bytes)> = (0u8..60)
            .map(|i| {
                let (root, code_hash) = match i {
                    3 => (storage_root, keccak256(&code).0),
                    _ => (EMPTY_ROOT, EMPTY_CODE_HASH),
                };
                (keccak256([i, i]).0, account(root, code_hash))
            })
            .collect();
        let (root, account_nodes) = trie_of(&accounts);
        let stray = Bytes::from_static(&[0xc2, 0x80, 0x80]);
        let stray_code = Bytes::from_static(&[0xfe]);
        let mut nodes: Vec<Bytes> = account_nodes
            .iter()
            .chain(&storage_nodes)
            .cloned()
            .collect();
        nodes.push(stray);
        let witnessed = verify_witness(&root, &nodes, &[code.clone(), stray_code]).unwrap();
        assert_eq!(witnessed.nodes, account_nodes.len() + storage_nodes.len());
        assert_eq!(witnessed.codes, 1);
        assert_eq!(witnessed.dropped, 2, "the stray node and the stray code");
        // Every node kept reads back through the walk.
        let state = crate::State::new(1 << 20, 16);
        state.insert(witnessed.verified);
        for (key, value) in &accounts {
            let found = trie::walk(&root, key, |h| state.node(h), None).unwrap();
            assert!(matches!(found, trie::Walked::Found(v) if v == value));
        }
        assert!(state.has_code(&keccak256(&code).0));
    }

    #[test]
    fn a_witness_of_another_root_proves_nothing() {
        let (_, nodes) = trie_of(&[(keccak256([1]).0, account(EMPTY_ROOT, EMPTY_CODE_HASH))]);
        let witnessed = verify_witness(&keccak256(b"another root").0, &nodes, &[]).unwrap();
        assert_eq!(witnessed.nodes, 0);
        assert_eq!(witnessed.dropped, nodes.len());
        assert!(witnessed.verified.is_empty());
    }
}
