//! Node encoding: RLP, hex-prefix paths, and the rule that puts a child
//! inline or behind its hash.

use alloy_primitives::keccak256;
use bytes::Bytes;

use super::node::Node;
use crate::trie::Hash;

pub(super) struct Encoder<P> {
    pub(super) put: P,
}

impl<P: FnMut(Hash, Bytes)> Encoder<P> {
    /// The RLP of `node`, putting every new node it references by hash.
    pub(super) fn encode(&mut self, node: &Node) -> Vec<u8> {
        let mut payload = Vec::new();
        match node {
            Node::Empty => return vec![0x80],
            Node::Inline(rlp) => return rlp.to_vec(),
            // Not reached: a hash is a reference, never a node's encoding.
            Node::Hash(hash) => {
                let mut out = Vec::with_capacity(33);
                string(&mut out, hash);
                return out;
            }
            Node::Leaf { path, value } => {
                string(&mut payload, &hex_prefix(path, true));
                string(&mut payload, value);
            }
            Node::Extension { path, child } => {
                string(&mut payload, &hex_prefix(path, false));
                self.reference(child, &mut payload);
            }
            Node::Branch(children) => {
                for child in children.iter() {
                    self.reference(child, &mut payload);
                }
                payload.push(0x80);
            }
        }
        let mut out = Vec::with_capacity(payload.len() + 9);
        header(&mut out, 0xc0, payload.len());
        out.extend_from_slice(&payload);
        out
    }

    /// Appends `node` as a child item: inline when its RLP is under 32
    /// bytes (the rule every Ethereum client hashes by), else its hash.
    fn reference(&mut self, node: &Node, out: &mut Vec<u8>) {
        match node {
            Node::Empty => out.push(0x80),
            Node::Hash(hash) => string(out, hash),
            Node::Inline(rlp) => out.extend_from_slice(rlp),
            node => {
                let rlp = self.encode(node);
                if rlp.len() < 32 {
                    out.extend_from_slice(&rlp);
                } else {
                    let hash = keccak256(&rlp).0;
                    string(out, &hash);
                    (self.put)(hash, Bytes::from(rlp));
                }
            }
        }
    }
}

fn string(out: &mut Vec<u8>, bytes: &[u8]) {
    match bytes {
        [byte] if *byte < 0x80 => out.push(*byte),
        _ => {
            header(out, 0x80, bytes.len());
            out.extend_from_slice(bytes);
        }
    }
}

fn header(out: &mut Vec<u8>, base: u8, len: usize) {
    if len < 56 {
        out.push(base + len as u8);
    } else {
        let be = len.to_be_bytes();
        let skip = be.iter().take_while(|b| **b == 0).count();
        out.push(base + 55 + (be.len() - skip) as u8);
        out.extend_from_slice(&be[skip..]);
    }
}

fn hex_prefix(path: &[u8], leaf: bool) -> Vec<u8> {
    let flag = if leaf { 0x20 } else { 0x00 };
    let mut out = Vec::with_capacity(path.len() / 2 + 1);
    let rest = if path.len() % 2 == 1 {
        out.push(flag | 0x10 | path[0]);
        &path[1..]
    } else {
        out.push(flag);
        path
    };
    for pair in rest.chunks_exact(2) {
        out.push(pair[0] << 4 | pair[1]);
    }
    out
}
