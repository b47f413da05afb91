//! The node a rewrite works on: decoded where an update goes through it,
//! a reference where none does.

use bytes::Bytes;

use crate::trie::Hash;

/// A node of the trie being rewritten. What no update goes through stays a
/// reference, so an untouched subtree is neither fetched nor re-encoded.
#[derive(Debug)]
pub(super) enum Node {
    Empty,
    /// Referenced by hash, not read.
    Hash(Hash),
    /// Referenced inline (its encoding, under 32 bytes), not decoded.
    Inline(Bytes),
    Leaf {
        path: Vec<u8>,
        value: Bytes,
    },
    Extension {
        path: Vec<u8>,
        child: Box<Node>,
    },
    /// No value item: every key has 64 nibbles, so none ends at a branch.
    Branch(Box<[Node; 16]>),
}
