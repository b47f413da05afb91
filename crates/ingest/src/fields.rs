//! Every field neve serves is checked at ingest: either a hash the block
//! commits to covers it (header, transactions, receipts, withdrawals,
//! uncles, avalanchego's extra data), or it is derived from what is covered
//! (a receipt's `gasUsed` from cumulative gas, `effectiveGasPrice` from the
//! transaction and the base fee, `from` from the signature, a contract's
//! address from the sender's nonce, the block's `size` from its RLP).
//!
//! The check compares each received value with the value the verified data
//! gives, as JSON (the trees decoding parsed): a key nothing covers, a key
//! given twice (refused before any check), or a value in another spelling
//! (`"0x01"`, upper-case hex, a number) refuses the block, so the bytes
//! stored and later served are exactly what was checked.
//! ARCHITECTURE.md tables which check covers which field.

mod compare;
mod facts;
mod raw;
mod served;
#[cfg(test)]
mod tests;

pub use compare::FieldError;
pub(crate) use facts::{HeaderFacts, Verified};
pub(crate) use served::check_served_fields;
