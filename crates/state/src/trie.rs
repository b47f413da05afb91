//! The Merkle-Patricia trie walk: from a root hash, node by node, to the
//! value stored under a 32-byte key, or to the proof that none is.
//!
//! Nodes are RLP: a branch is a list of 17 items (16 children, a value), an
//! extension or leaf a list of 2 (a hex-prefix path, then a child or a
//! value). A child is a 32-byte hash, an empty string, or (when its encoding
//! is shorter than 32 bytes) the node itself, inline.

use bytes::Bytes;

/// A keccak-256 hash.
pub type Hash = [u8; 32];

/// The root of an empty trie: keccak256 of the RLP empty string (0x80).
pub const EMPTY_ROOT: Hash = [
    0x56, 0xe8, 0x1f, 0x17, 0x1b, 0xcc, 0x55, 0xa6, 0xff, 0x83, 0x45, 0xe6, 0x92, 0xc0, 0xf8, 0x6e,
    0x5b, 0x48, 0xe0, 0x1b, 0x99, 0x6c, 0xad, 0xc0, 0x01, 0x62, 0x2f, 0xb5, 0xe3, 0x63, 0xb4, 0x21,
];

/// Steps a walk may take before the trie is called malformed. A secure trie
/// key has 64 nibbles, each step but an empty extension consumes at least
/// one, and a hash cycle cannot exist; this only stops crafted inline nodes.
const MAX_STEPS: usize = 160;

/// Where a walk ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Walked {
    /// The key holds this value (the leaf's value item, RLP payload).
    Found(Bytes),
    /// The trie proves the key holds nothing.
    Absent,
    /// A node on the path is not held: its hash.
    Missing(Hash),
}

/// A node that does not decode as a trie node. Nodes enter only by hash,
/// so this means the upstream's trie is not one (or a bug): never a panic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed trie node")]
pub struct Malformed;

/// One RLP item inside a buffer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Item {
    pub(crate) is_list: bool,
    /// The payload, without the item's own header.
    pub(crate) payload: (usize, usize),
    /// The whole item, header included.
    pub(crate) whole: (usize, usize),
}

/// Reads the RLP item starting at `at`, all offsets checked against `buf`.
fn item(buf: &[u8], at: usize) -> Result<Item, Malformed> {
    let first = *buf.get(at).ok_or(Malformed)?;
    let (is_list, header, len) = match first {
        0x00..=0x7f => {
            return Ok(Item {
                is_list: false,
                payload: (at, at + 1),
                whole: (at, at + 1),
            });
        }
        0x80..=0xb7 => (false, 1, (first - 0x80) as usize),
        0xc0..=0xf7 => (true, 1, (first - 0xc0) as usize),
        0xb8..=0xbf | 0xf8..=0xff => {
            let is_list = first >= 0xf8;
            let len_of_len = (first - if is_list { 0xf7 } else { 0xb7 }) as usize;
            if len_of_len > 4 {
                return Err(Malformed);
            }
            let bytes = buf.get(at + 1..at + 1 + len_of_len).ok_or(Malformed)?;
            let len = bytes.iter().fold(0usize, |acc, b| (acc << 8) | *b as usize);
            (is_list, 1 + len_of_len, len)
        }
    };
    let start = at + header;
    let end = start.checked_add(len).ok_or(Malformed)?;
    if end > buf.len() {
        return Err(Malformed);
    }
    Ok(Item {
        is_list,
        payload: (start, end),
        whole: (at, end),
    })
}

/// The items of a node (a list filling the whole buffer): 2 or 17.
pub(crate) fn node_items(node: &[u8]) -> Result<([Item; 17], usize), Malformed> {
    let list = item(node, 0)?;
    if !list.is_list || list.whole.1 != node.len() {
        return Err(Malformed);
    }
    let empty = Item {
        is_list: false,
        payload: (0, 0),
        whole: (0, 0),
    };
    let mut items = [empty; 17];
    let mut count = 0;
    let mut at = list.payload.0;
    while at < list.payload.1 {
        if count == 17 {
            return Err(Malformed);
        }
        let next = item(node, at)?;
        if next.whole.1 > list.payload.1 {
            return Err(Malformed);
        }
        items[count] = next;
        count += 1;
        at = next.whole.1;
    }
    match count {
        2 | 17 => Ok((items, count)),
        _ => Err(Malformed),
    }
}

/// What a walk reads of a node at one step: an extension's or leaf's two
/// items, or a branch's item it follows.
enum Step {
    /// An extension or leaf: its hex-prefix path and its child or value.
    Pair(Item, Item),
    /// A branch's item `wanted` (0..16 a child, 16 its value).
    Branch(Item),
}

/// The items of `node` a walk reads, parsed no further than the item
/// `wanted` of a branch: a walk reads one child of each branch, and most
/// of a walk's nodes are branches (the others' items are never read).
/// So a list of other than 17 items may pass as a branch when `wanted`
/// lies within it: harmless, as a walk reaches nodes only by their hash
/// from a verified root (the strict [`node_items`] decodes what is
/// verified or rewritten).
fn step(node: &[u8], wanted: usize) -> Result<Step, Malformed> {
    let list = item(node, 0)?;
    if !list.is_list || list.whole.1 != node.len() {
        return Err(Malformed);
    }
    let end = list.payload.1;
    let within = |at: usize| -> Result<Item, Malformed> {
        let next = item(node, at)?;
        if next.whole.1 > end {
            return Err(Malformed);
        }
        Ok(next)
    };
    let first = within(list.payload.0)?;
    let second = within(first.whole.1)?;
    if second.whole.1 == end {
        return Ok(Step::Pair(first, second));
    }
    // Past the list's end, `within` finds no item: malformed.
    let mut at = second;
    for _ in 1..wanted {
        at = within(at.whole.1)?;
    }
    Ok(Step::Branch(if wanted == 0 { first } else { at }))
}

/// The nibble of `key` at position `i` (0..64).
pub(crate) fn nibble(key: &Hash, i: usize) -> u8 {
    let byte = key[i / 2];
    if i.is_multiple_of(2) {
        byte >> 4
    } else {
        byte & 0x0f
    }
}

/// A reference to the next node.
pub(crate) enum Next {
    Hash(Hash),
    Inline(Bytes),
    Empty,
}

pub(crate) fn child(node: &Bytes, item: Item) -> Result<Next, Malformed> {
    if item.is_list {
        return Ok(Next::Inline(node.slice(item.whole.0..item.whole.1)));
    }
    match item.payload.1 - item.payload.0 {
        0 => Ok(Next::Empty),
        32 => Ok(Next::Hash(
            node[item.payload.0..item.payload.1]
                .try_into()
                .expect("32 bytes"),
        )),
        _ => Err(Malformed),
    }
}

/// The hex-prefix path of an extension or leaf, read in place.
pub(crate) struct HexPath<'a> {
    pub(crate) is_leaf: bool,
    odd: bool,
    bytes: &'a [u8],
}

impl<'a> HexPath<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Result<Self, Malformed> {
        let flags = *bytes.first().ok_or(Malformed)? >> 4;
        if flags > 3 {
            return Err(Malformed);
        }
        Ok(Self {
            is_leaf: flags & 2 != 0,
            odd: flags & 1 != 0,
            bytes,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.bytes.len() * 2 - if self.odd { 1 } else { 2 }
    }

    /// Nibble `i` of the path proper (after the flag nibble and, when even,
    /// its padding nibble).
    pub(crate) fn nibble(&self, i: usize) -> u8 {
        let j = i + if self.odd { 1 } else { 2 };
        let byte = self.bytes[j / 2];
        if j.is_multiple_of(2) {
            byte >> 4
        } else {
            byte & 0x0f
        }
    }
}

/// Walks from `root` to `key` (the already hashed trie key), asking `get`
/// for each node referenced by hash. Every node so fetched is pushed onto
/// `proof` when given, in path order: exactly an EIP-1186 proof.
pub fn walk(
    root: &Hash,
    key: &Hash,
    mut get: impl FnMut(&Hash) -> Option<Bytes>,
    mut proof: Option<&mut Vec<Bytes>>,
) -> Result<Walked, Malformed> {
    if *root == EMPTY_ROOT {
        return Ok(Walked::Absent);
    }
    let mut next = Next::Hash(*root);
    let mut depth = 0usize;
    for _ in 0..MAX_STEPS {
        let node = match next {
            Next::Empty => return Ok(Walked::Absent),
            Next::Inline(bytes) => bytes,
            Next::Hash(hash) => {
                let Some(node) = get(&hash) else {
                    return Ok(Walked::Missing(hash));
                };
                if let Some(proof) = proof.as_deref_mut() {
                    proof.push(node.clone());
                }
                node
            }
        };
        let wanted = if depth == 64 {
            16
        } else {
            nibble(key, depth) as usize
        };
        let (path, value) = match step(&node, wanted)? {
            Step::Branch(value) if depth == 64 => {
                return Ok(if value.payload.0 == value.payload.1 {
                    Walked::Absent
                } else {
                    Walked::Found(node.slice(value.payload.0..value.payload.1))
                });
            }
            Step::Branch(item) => {
                next = child(&node, item)?;
                depth += 1;
                continue;
            }
            Step::Pair(path, value) => (path, value),
        };
        // Extension or leaf: a hex-prefix path first.
        let path = HexPath::new(&node[path.payload.0..path.payload.1])?;
        let len = path.len();
        if depth + len > 64 || (0..len).any(|i| path.nibble(i) != nibble(key, depth + i)) {
            return Ok(Walked::Absent);
        }
        depth += len;
        if path.is_leaf {
            if depth != 64 {
                return Ok(Walked::Absent);
            }
            if value.is_list {
                return Err(Malformed);
            }
            return Ok(Walked::Found(node.slice(value.payload.0..value.payload.1)));
        }
        next = child(&node, value)?;
    }
    Err(Malformed)
}

/// The payload of an RLP string filling `bytes` (a leaf's value is an RLP
/// encoding of its own: a storage slot's trimmed big-endian integer).
pub fn rlp_string(bytes: &[u8]) -> Result<&[u8], Malformed> {
    let item = item(bytes, 0)?;
    if item.is_list || item.whole.1 != bytes.len() {
        return Err(Malformed);
    }
    Ok(&bytes[item.payload.0..item.payload.1])
}

/// The payloads of the items of an RLP list filling `bytes` (an account).
pub fn rlp_list(bytes: &[u8]) -> Result<Vec<&[u8]>, Malformed> {
    let list = item(bytes, 0)?;
    if !list.is_list || list.whole.1 != bytes.len() {
        return Err(Malformed);
    }
    let mut out = Vec::with_capacity(5);
    let mut at = list.payload.0;
    while at < list.payload.1 {
        let next = item(bytes, at)?;
        if next.is_list || next.whole.1 > list.payload.1 {
            return Err(Malformed);
        }
        out.push(&bytes[next.payload.0..next.payload.1]);
        at = next.whole.1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::keccak256;
    use std::collections::HashMap;

    fn rlp_str(payload: &[u8]) -> Vec<u8> {
        match payload.len() {
            1 if payload[0] < 0x80 => payload.to_vec(),
            n if n < 56 => [&[0x80 + n as u8][..], payload].concat(),
            n => {
                let len = (n as u32).to_be_bytes();
                let len: Vec<u8> = len.iter().copied().skip_while(|b| *b == 0).collect();
                [&[0xb7 + len.len() as u8][..], &len, payload].concat()
            }
        }
    }

    fn rlp_list_of(items: &[Vec<u8>]) -> Vec<u8> {
        let payload = items.concat();
        let n = payload.len();
        if n < 56 {
            [&[0xc0 + n as u8][..], &payload].concat()
        } else {
            let len = (n as u32).to_be_bytes();
            let len: Vec<u8> = len.iter().copied().skip_while(|b| *b == 0).collect();
            [&[0xf7 + len.len() as u8][..], &len, &payload].concat()
        }
    }

    /// A leaf for the last `nibbles` of a key.
    fn leaf(nibbles: &[u8], value: &[u8]) -> Vec<u8> {
        let mut path = Vec::new();
        if nibbles.len() % 2 == 1 {
            path.push(0x30 | nibbles[0]);
            for pair in nibbles[1..].chunks(2) {
                path.push(pair[0] << 4 | pair[1]);
            }
        } else {
            path.push(0x20);
            for pair in nibbles.chunks(2) {
                path.push(pair[0] << 4 | pair[1]);
            }
        }
        rlp_list_of(&[rlp_str(&path), rlp_str(value)])
    }

    fn nibbles(key: &Hash) -> Vec<u8> {
        (0..64).map(|i| nibble(key, i)).collect()
    }

    /// A two-leaf trie: a branch at the root whose children are the leaves
    /// of two keys that differ in their first nibble.
    fn two_leaf_trie() -> (Hash, HashMap<Hash, Bytes>, Hash, Hash) {
        let mut a = [0x11u8; 32];
        a[0] = 0x1a;
        let mut b = [0x22u8; 32];
        b[0] = 0x2b;
        let value = vec![0xaa; 40]; // long enough that leaves are hashed, not inline
        let leaf_a = leaf(&nibbles(&a)[1..], &value);
        let leaf_b = leaf(&nibbles(&b)[1..], &value);
        let mut branch = vec![rlp_str(&[]); 17];
        branch[1] = rlp_str(keccak256(&leaf_a).as_slice());
        branch[2] = rlp_str(keccak256(&leaf_b).as_slice());
        let branch = rlp_list_of(&branch);
        let mut nodes = HashMap::new();
        for node in [&leaf_a, &leaf_b, &branch] {
            nodes.insert(keccak256(node).0, Bytes::from(node.clone()));
        }
        (keccak256(&branch).0, nodes, a, b)
    }

    #[test]
    fn walks_to_values_and_proves_absence() {
        let (root, nodes, a, _) = two_leaf_trie();
        let get = |h: &Hash| nodes.get(h).cloned();
        let mut proof = Vec::new();
        let found = walk(&root, &a, get, Some(&mut proof)).unwrap();
        assert_eq!(found, Walked::Found(Bytes::from(vec![0xaa; 40])));
        assert_eq!(proof.len(), 2, "branch, then leaf");
        // Same first nibble as `a`, then a different path: the leaf proves absence.
        let mut near = a;
        near[31] ^= 1;
        assert_eq!(walk(&root, &near, get, None).unwrap(), Walked::Absent);
        // An empty branch slot proves absence.
        assert_eq!(walk(&root, &[0x55; 32], get, None).unwrap(), Walked::Absent);
    }

    #[test]
    fn a_node_not_held_is_missing_not_absent() {
        let (root, mut nodes, a, b) = two_leaf_trie();
        // Drop the leaf of `a` only.
        let mut proof = Vec::new();
        walk(&root, &a, |h| nodes.get(h).cloned(), Some(&mut proof)).unwrap();
        let leaf_a = keccak256(&proof[1]).0;
        nodes.remove(&leaf_a);
        assert_eq!(
            walk(&root, &a, |h| nodes.get(h).cloned(), None).unwrap(),
            Walked::Missing(leaf_a)
        );
        assert!(matches!(
            walk(&root, &b, |h| nodes.get(h).cloned(), None).unwrap(),
            Walked::Found(_)
        ));
    }

    #[test]
    fn a_value_under_a_branch_is_found() {
        let key = [0x31u8; 32];
        let tail = leaf(&nibbles(&key)[1..], &[0x05]);
        assert!(tail.len() >= 32);
        let mut branch = vec![rlp_str(&[]); 17];
        branch[3] = rlp_str(keccak256(&tail).as_slice());
        let branch = rlp_list_of(&branch);
        let root = keccak256(&branch).0;
        let nodes: HashMap<Hash, Bytes> = [
            (root, Bytes::from(branch.clone())),
            (keccak256(&tail).0, Bytes::from(tail)),
        ]
        .into();
        assert_eq!(
            walk(&root, &key, |h| nodes.get(h).cloned(), None).unwrap(),
            Walked::Found(Bytes::from_static(&[0x05]))
        );
    }

    #[test]
    fn inline_children_are_followed_and_left_out_of_proofs() {
        let key = [0x31u8; 32];
        let n = nibbles(&key);
        let inline_leaf = leaf(&n[63..], &[0x05]);
        assert!(inline_leaf.len() < 32);
        let mut branch = vec![rlp_str(&[]); 17];
        branch[n[62] as usize] = inline_leaf;
        let branch = rlp_list_of(&branch);
        let mut path = vec![0x00];
        for pair in n[..62].chunks(2) {
            path.push(pair[0] << 4 | pair[1]);
        }
        let extension = rlp_list_of(&[rlp_str(&path), rlp_str(keccak256(&branch).as_slice())]);
        let root = keccak256(&extension).0;
        let nodes: HashMap<Hash, Bytes> = [
            (root, Bytes::from(extension)),
            (keccak256(&branch).0, Bytes::from(branch)),
        ]
        .into();
        let mut proof = Vec::new();
        assert_eq!(
            walk(&root, &key, |h| nodes.get(h).cloned(), Some(&mut proof)).unwrap(),
            Walked::Found(Bytes::from_static(&[0x05]))
        );
        assert_eq!(proof.len(), 2, "the inline leaf is part of its branch");
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        for garbage in [
            &[][..],
            &[0xc0],
            &[0xff, 0xff, 0xff],
            &[0xc3, 0x80, 0x80],
            &[0xf8, 0x02, 0x80],
            &[0xb9, 0xff, 0xff, 0x00],
        ] {
            let bytes = Bytes::copy_from_slice(garbage);
            let root = keccak256(garbage).0;
            let result = walk(&root, &[0; 32], |_| Some(bytes.clone()), None);
            assert!(
                result.is_err() || result == Ok(Walked::Absent),
                "{garbage:?}"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn any_node_bytes_walk_without_panicking(node in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200), key in proptest::prelude::any::<[u8; 32]>()) {
            let bytes = Bytes::from(node);
            let _ = walk(&[1; 32], &key, |_| Some(bytes.clone()), None);
            let _ = rlp_list(&bytes);
            let _ = rlp_string(&bytes);
        }
    }
}
