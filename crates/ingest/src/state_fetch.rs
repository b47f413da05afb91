//! Fetching state proofs from the upstream into the verified node store:
//! fetch-through for reads that miss, and prefetch of the hot keys each
//! time a block is stored.
//!
//! A fetch asks the upstream for `eth_getProof(address, slots, {blockHash})`
//! (and `eth_getCode` in the same batch when the read needs code), then,
//! off the async workers, walks the proof from the block's verified
//! `stateRoot`: the account path, each slot's path from the account's
//! `storageRoot`, the code against its `codeHash`. Only what those walks
//! used enters the store; a proof that does not verify is refused, counted
//! and logged. Concurrent fetches of the same request share one upstream
//! call; at most [`MAX_FETCHES_IN_FLIGHT`] run at once.
//!
//! A replay (a trace) asks instead for the block's execution witness
//! (`debug_executionWitness`, one call for all the parent's state the
//! block reads), verified from the parent's `stateRoot` and kept, under
//! `--witness-bytes`, as the answer mirrors below are served
//! (`witness.rs`); an upstream without it is asked for proofs.
//!
//! Prefetch refreshes per block, not per key: when a block is stored it
//! learns the keys the block touched (the upstream's `prestateTracer` in
//! diff mode, plus what the tracer leaves out: the fee recipient,
//! withdrawals and the EIP-4788 and EIP-2935 system writes; or, from an
//! upstream neve, its `neve_getTouchedKeys`) and proves them at the new
//! root in one batch. Every node that changed from the parent's root lies
//! on one of their paths, so the keys clients read stay answerable for a
//! number of upstream calls set by what the block changed, not by how many
//! keys are hot. Keys the refresh did not cover (an untraced change, a
//! node evicted) are then fetched one by one as before.

mod error;
mod fetcher;
mod hot_keys;
mod pace;
mod prefetch;
mod proof;
mod refresh;
#[cfg(test)]
mod tests;
mod touched;
mod witness;

pub use fetcher::{
    AHEAD_PROOFS_TIMEOUT, FETCH_TIMEOUT, MAX_FETCHES_IN_FLIGHT, MAX_IN_TURN_FETCHES,
    MAX_PROOF_BATCH_ANSWER_BYTES, MAX_WITNESS_ANSWER_BYTES, MAX_WITNESS_FETCHES_IN_FLIGHT,
    ProofFetcher,
};
pub use hot_keys::{HOT_KEYS_SAVE_EVERY, MAX_HOT_KEYS_FILE_BYTES, save_hot_keys};
pub use prefetch::{DEFAULT_PREFETCH_RATE, prefetch};
pub use refresh::TouchSource;
pub use touched::{MAX_TOUCHED_ANSWER_BYTES, MAX_TOUCHED_KEYS_PER_BLOCK};
pub use witness::MAX_WITNESS_ITEMS;
