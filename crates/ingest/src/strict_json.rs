//! JSON parsed once, to be checked rather than used: each received text
//! (a block, its receipts) becomes one tree that every later step reads.
//! Strings without escapes borrow the text, objects keep their entries in
//! order, every value knows where it lies in the text (so what is stored is
//! cut from the bytes as received), and an object that gives a key twice is
//! an error (a client may read the first, a check the last).
//!
//! The tree is compared with the `serde_json::Value` a check expects, and
//! typed values (headers, transactions, receipts) are deserialised from it
//! ([`de`]) instead of from the text again.

mod de;
mod parse;
#[cfg(test)]
mod tests;
mod tree;

pub(crate) use tree::Json;
