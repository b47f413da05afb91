//! Writing to a sparse trie: the root a secure Merkle-Patricia trie has once
//! some keys are set or deleted, computed from only the nodes held.
//!
//! It exists for the `stateRoot` of simulated blocks: the verified trie of
//! the parent block with a simulation's changes applied (storage tries
//! first, then the account trie with the new storage roots). The mirror holds
//! only what proofs brought, so a node the update needs may be missing; it is
//! then reported, never guessed, and the caller fetches proofs and calls
//! again.
//!
//! A set or a deletion needs the nodes on its key's path, which a proof of
//! that key brings. A deletion can need one more: a branch left with a
//! single child folds into its parent's path, and how depends on what that
//! child is (a leaf or an extension merges paths with it, a branch stays
//! behind a one-nibble extension). That child lies off every updated key's
//! path, so no proof of those keys brings it; it is reported as a sibling,
//! by its path, and a proof of any key under that path brings it.

use std::cmp::Ordering;
use std::mem;

use alloy_primitives::keccak256;
use bytes::Bytes;

use crate::trie::{EMPTY_ROOT, Hash, HexPath, Malformed, Next, child, nibble, node_items};
use encode::Encoder;
use node::Node;

mod encode;
mod node;

/// What the update needs that the getter does not hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unheld {
    /// Keys (of the updates) whose path from the root reaches a node not
    /// held: a proof of that key brings it.
    pub keys: Vec<Hash>,
    /// Nodes a deletion collapses into (the one child left in a branch that
    /// lost its other children), by their path from the root in nibbles
    /// (each 0..16): a proof of any key under that path brings it.
    pub siblings: Vec<Vec<u8>>,
}

impl Unheld {
    fn len(&self) -> usize {
        self.keys.len() + self.siblings.len()
    }
}

/// The outcome of [`apply`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Updated {
    /// The root of the updated trie.
    Root(Hash),
    /// Nodes to fetch before the root can be computed; everything found
    /// missing in this pass, so one round of proofs usually suffices.
    Unheld(Unheld),
}

/// Applies `updates` to the trie at `root`: `(key, Some(value))` sets,
/// `(key, None)` deletes; keys are trie keys (already hashed), values the
/// leaf's value item payload, as [`crate::trie::walk`] returns them. An
/// empty value deletes, as in Ethereum's trie. Order is free; a key given
/// twice takes its later update.
///
/// `get` is asked for nodes by hash; `put` receives every node the new trie
/// references by hash that was not in it before, so the caller can store
/// them and apply further updates to the new root. Nothing is put unless the
/// result is [`Updated::Root`].
pub fn apply(
    root: &Hash,
    updates: &[(Hash, Option<Bytes>)],
    get: impl FnMut(&Hash) -> Option<Bytes>,
    put: impl FnMut(Hash, Bytes),
) -> Result<Updated, Malformed> {
    let mut sorted: Vec<Up> = updates
        .iter()
        .map(|(key, value)| Up {
            key: *key,
            value: value.clone().filter(|v| !v.is_empty()),
        })
        .collect();
    // Stable, so among equal keys the later update stays last.
    sorted.sort_by_key(|up| up.key);
    let mut ups: Vec<Up> = Vec::with_capacity(sorted.len());
    for up in sorted {
        match ups.last_mut() {
            Some(last) if last.key == up.key => *last = up,
            _ => ups.push(up),
        }
    }

    let start = if *root == EMPTY_ROOT {
        Node::Empty
    } else {
        Node::Hash(*root)
    };
    let mut rewrite = Rewrite {
        get,
        unheld: Unheld::default(),
    };
    let (new, changed) = rewrite.update(start, 0, &ups)?;
    if rewrite.unheld.len() > 0 {
        let mut unheld = rewrite.unheld;
        unheld.siblings.sort();
        unheld.siblings.dedup();
        return Ok(Updated::Unheld(unheld));
    }
    if !changed {
        return Ok(Updated::Root(*root));
    }
    let mut encoder = Encoder { put };
    Ok(Updated::Root(match new {
        Node::Empty => EMPTY_ROOT,
        Node::Hash(hash) => hash,
        node => {
            // The root is stored by hash even when its encoding is short.
            let rlp = encoder.encode(&node);
            let hash = keccak256(&rlp).0;
            (encoder.put)(hash, Bytes::from(rlp));
            hash
        }
    }))
}

/// A preimage of `len` bytes (20 for an address, 32 for a storage slot)
/// whose keccak256 starts with the nibbles `prefix`: a key to ask a proof
/// for when a sibling under that path is needed. Candidates count up from a
/// fixed seed, at most `tries` of them; about 16^`prefix.len()` are needed,
/// so this suits the shallow paths where siblings sit.
pub fn preimage_under(prefix: &[u8], len: usize, tries: u64) -> Option<Vec<u8>> {
    if prefix.len() > 64 || prefix.iter().any(|n| *n > 0x0f) {
        return None;
    }
    let mut candidate: Vec<u8> = b"neve".iter().copied().cycle().take(len).collect();
    let counted = len.min(8);
    for count in 0..tries {
        candidate[len - counted..].copy_from_slice(&count.to_be_bytes()[8 - counted..]);
        let hash = keccak256(&candidate).0;
        if prefix
            .iter()
            .enumerate()
            .all(|(i, n)| nibble(&hash, i) == *n)
        {
            return Some(candidate);
        }
    }
    None
}

/// One update, its empty value already turned into a deletion.
struct Up {
    key: Hash,
    value: Option<Bytes>,
}

fn no_children() -> Box<[Node; 16]> {
    Box::new(std::array::from_fn(|_| Node::Empty))
}

/// Decodes one node; its children stay references.
fn decode(rlp: &Bytes) -> Result<Node, Malformed> {
    let (items, count) = node_items(rlp)?;
    let reference = |i: usize| -> Result<Node, Malformed> {
        Ok(match child(rlp, items[i])? {
            Next::Hash(hash) => Node::Hash(hash),
            Next::Inline(rlp) => Node::Inline(rlp),
            Next::Empty => Node::Empty,
        })
    };
    if count == 17 {
        let value = items[16];
        if value.is_list || value.payload.0 != value.payload.1 {
            return Err(Malformed);
        }
        let mut children = no_children();
        for (i, slot) in children.iter_mut().enumerate() {
            *slot = reference(i)?;
        }
        return Ok(Node::Branch(children));
    }
    if items[0].is_list {
        return Err(Malformed);
    }
    let hex = HexPath::new(&rlp[items[0].payload.0..items[0].payload.1])?;
    let path: Vec<u8> = (0..hex.len()).map(|i| hex.nibble(i)).collect();
    if hex.is_leaf {
        if items[1].is_list {
            return Err(Malformed);
        }
        let value = rlp.slice(items[1].payload.0..items[1].payload.1);
        return Ok(Node::Leaf { path, value });
    }
    // An empty extension would let the rewrite recurse without consuming a
    // nibble; no encoder makes one.
    if path.is_empty() {
        return Err(Malformed);
    }
    Ok(Node::Extension {
        path,
        child: Box::new(reference(1)?),
    })
}

/// `node` moved down under `path`, merging paths where Ethereum's trie does.
/// A reference is taken to be to a branch (what extensions point at).
fn prefixed(path: &[u8], node: Node) -> Node {
    if path.is_empty() {
        return node;
    }
    match node {
        Node::Empty => Node::Empty,
        Node::Leaf { path: rest, value } => Node::Leaf {
            path: [path, &rest].concat(),
            value,
        },
        Node::Extension { path: rest, child } => Node::Extension {
            path: [path, &rest].concat(),
            child,
        },
        node => Node::Extension {
            path: path.to_vec(),
            child: Box::new(node),
        },
    }
}

/// A fresh subtree at `depth` holding `entries` (sorted, distinct keys).
fn build(depth: usize, entries: &[(Hash, Bytes)]) -> Result<Node, Malformed> {
    let (first, last) = match entries {
        [] => return Ok(Node::Empty),
        [(key, value)] => {
            return Ok(Node::Leaf {
                path: (depth..64).map(|i| nibble(key, i)).collect(),
                value: value.clone(),
            });
        }
        [first, .., last] => (&first.0, &last.0),
    };
    // Sorted, so the prefix the first and last share is everyone's.
    let mut at = depth;
    while at < 64 && nibble(first, at) == nibble(last, at) {
        at += 1;
    }
    if at == 64 {
        return Err(Malformed);
    }
    let mut children = no_children();
    for group in entries.chunk_by(|a, b| nibble(&a.0, at) == nibble(&b.0, at)) {
        children[nibble(&group[0].0, at) as usize] = build(at + 1, group)?;
    }
    let path: Vec<u8> = (depth..at).map(|i| nibble(first, i)).collect();
    Ok(prefixed(&path, Node::Branch(children)))
}

/// A rewritten node, and whether it differs from the one given.
type Rewritten = Result<(Node, bool), Malformed>;

struct Rewrite<G> {
    get: G,
    unheld: Unheld,
}

impl<G: FnMut(&Hash) -> Option<Bytes>> Rewrite<G> {
    /// Applies `ups` (sorted, all sharing the `depth` nibbles that lead to
    /// `node`) and says whether anything changed; unchanged, the node comes
    /// back as it was given. Recursion is bounded: every call goes at least
    /// one nibble deeper and depth past 64 is malformed.
    fn update(&mut self, node: Node, depth: usize, ups: &[Up]) -> Rewritten {
        if ups.is_empty() {
            return Ok((node, false));
        }
        let (node, reference) = match node {
            Node::Hash(hash) => match (self.get)(&hash) {
                Some(rlp) => (decode(&rlp)?, Some(Node::Hash(hash))),
                None => {
                    self.unheld.keys.extend(ups.iter().map(|up| up.key));
                    return Ok((Node::Hash(hash), false));
                }
            },
            Node::Inline(rlp) => (decode(&rlp)?, Some(Node::Inline(rlp))),
            node => (node, None),
        };
        let (new, changed) = match node {
            Node::Empty => {
                let sets = sets(ups, None);
                (build(depth, &sets)?, !sets.is_empty())
            }
            Node::Leaf { path, value } => self.leaf(path, value, depth, ups)?,
            Node::Extension { path, child } => self.extension(path, *child, depth, ups)?,
            Node::Branch(children) => self.branch(children, depth, ups, false)?,
            Node::Hash(_) | Node::Inline(_) => return Err(Malformed),
        };
        Ok(match reference {
            Some(reference) if !changed => (reference, false),
            _ => (new, changed),
        })
    }

    fn leaf(&mut self, path: Vec<u8>, value: Bytes, depth: usize, ups: &[Up]) -> Rewritten {
        if depth + path.len() != 64 {
            return Err(Malformed);
        }
        let mut key = ups[0].key;
        for (i, n) in path.iter().enumerate() {
            set_nibble(&mut key, depth + i, *n);
        }
        let touched = ups.iter().find(|up| up.key == key);
        let unchanged = match touched {
            Some(up) => up.value.as_ref() == Some(&value),
            None => true,
        } && ups.iter().all(|up| up.key == key || up.value.is_none());
        if unchanged {
            return Ok((Node::Leaf { path, value }, false));
        }
        // The leaf becomes one more entry of a subtree built afresh.
        let kept = touched.is_none().then_some((key, value));
        Ok((build(depth, &sets(ups, kept))?, true))
    }

    fn extension(&mut self, path: Vec<u8>, child: Node, depth: usize, ups: &[Up]) -> Rewritten {
        let end = depth + path.len();
        if end > 64 {
            return Err(Malformed);
        }
        let order = |up: &Up| {
            (depth..end)
                .map(|i| nibble(&up.key, i))
                .cmp(path.iter().copied())
        };
        let start = ups.partition_point(|up| order(up) == Ordering::Less);
        let stop = ups.partition_point(|up| order(up) != Ordering::Greater);
        // A deletion off the path deletes nothing.
        let leaving = ups[..start]
            .iter()
            .chain(&ups[stop..])
            .any(|up| up.value.is_some());
        if !leaving {
            let (child, changed) = self.update(child, end, &ups[start..stop])?;
            return Ok(if changed {
                (prefixed(&path, child), true)
            } else {
                (
                    Node::Extension {
                        path,
                        child: Box::new(child),
                    },
                    false,
                )
            });
        }
        // A key leaves the path: split at its first nibble into a branch,
        // which the branch's rules shape (and join again if they can).
        let mut children = no_children();
        children[path[0] as usize] = prefixed(&path[1..], child);
        self.branch(children, depth, ups, true)
    }

    fn branch(
        &mut self,
        mut children: Box<[Node; 16]>,
        depth: usize,
        ups: &[Up],
        mut changed: bool,
    ) -> Rewritten {
        if depth >= 64 {
            return Err(Malformed);
        }
        let unheld_before = self.unheld.len();
        for group in ups.chunk_by(|a, b| nibble(&a.key, depth) == nibble(&b.key, depth)) {
            let i = nibble(&group[0].key, depth) as usize;
            let (node, updated) = self.update(
                mem::replace(&mut children[i], Node::Empty),
                depth + 1,
                group,
            )?;
            children[i] = node;
            changed |= updated;
        }
        if !changed {
            return Ok((Node::Branch(children), false));
        }
        let mut left = children
            .iter()
            .enumerate()
            .filter(|(_, child)| !matches!(child, Node::Empty));
        let only = match (left.next(), left.next()) {
            (None, _) => return Ok((Node::Empty, true)),
            (Some((i, _)), None) => i,
            _ => return Ok((Node::Branch(children), true)),
        };
        // Below, a node not held may yet turn out emptied: the shape is
        // settled in the round after it is fetched.
        if self.unheld.len() > unheld_before {
            return Ok((Node::Branch(children), true));
        }
        let nibble_only = [only as u8];
        let joined = match mem::replace(&mut children[only], Node::Empty) {
            Node::Hash(hash) => match (self.get)(&hash) {
                Some(rlp) => joined(&nibble_only, decode(&rlp)?, Node::Hash(hash)),
                None => {
                    let mut path: Vec<u8> = (0..depth).map(|i| nibble(&ups[0].key, i)).collect();
                    path.push(only as u8);
                    self.unheld.siblings.push(path);
                    children[only] = Node::Hash(hash);
                    return Ok((Node::Branch(children), true));
                }
            },
            Node::Inline(rlp) => {
                let decoded = decode(&rlp)?;
                joined(&nibble_only, decoded, Node::Inline(rlp))
            }
            node => prefixed(&nibble_only, node),
        };
        Ok((joined, true))
    }
}

/// The one child left in a branch, moved up into its parent's path. A
/// branch is kept by its reference, so it is not stored again.
fn joined(path: &[u8], decoded: Node, reference: Node) -> Node {
    match decoded {
        Node::Branch(_) => prefixed(path, reference),
        node => prefixed(path, node),
    }
}

/// The values `ups` set, with `kept` (an entry already there) in key order.
fn sets(ups: &[Up], kept: Option<(Hash, Bytes)>) -> Vec<(Hash, Bytes)> {
    let mut sets: Vec<(Hash, Bytes)> = ups
        .iter()
        .filter_map(|up| Some((up.key, up.value.clone()?)))
        .collect();
    if let Some(kept) = kept {
        let at = sets.partition_point(|(key, _)| *key < kept.0);
        sets.insert(at, kept);
    }
    sets
}

fn set_nibble(key: &mut Hash, i: usize, n: u8) {
    let byte = &mut key[i / 2];
    *byte = if i.is_multiple_of(2) {
        (*byte & 0x0f) | n << 4
    } else {
        (*byte & 0xf0) | n
    };
}

#[cfg(test)]
mod tests;
