//! state: verified account and storage reads, without executing anything.
//!
//! Owns the node store (trie nodes and contract code by keccak hash, under a
//! byte budget), the trie walk that answers a read at a state root, proof
//! verification (the way a node gets in; the other is what a replayed
//! block's verified root reaches of the nodes its post-state made), the
//! account encodings of geth and coreth, and the hot-key set prefetch
//! refreshes.
//!
//! What it must not do: execute, fetch, or know HTTP and JSON-RPC. Serving
//! reads through [`State`]; when a walk hits a node it does not hold, the
//! read is [`Read::Missing`] and the caller may ask a [`Fetch`] (implemented
//! by ingest, which talks to the upstream) to bring the proof, then read
//! again. A chain of mirrors stays honest because every root a walk starts
//! from is the `stateRoot` of a header the caller verified itself, and every
//! node reached from it was checked by hash on the way in.
//!
//! Start at [`State`], then [`proof::verify`] and [`trie::walk`]. A
//! block's execution witness (the nodes and codes a block's execution
//! reads, keyed by nothing) gets in the same way: [`verify_witness`] keeps
//! what a trusted root reaches; [`Witnesses`] holds the verified ones
//! to serve mirrors. Writing is [`update::apply`], for simulated blocks'
//! `stateRoot`: the root the verified trie would have with a simulation's
//! changes, nothing stored as state. Of a replayed block's changes made
//! the same way ([`apply_into`]), what the block's verified `stateRoot`
//! reaches is stored ([`Made::proving`]).

mod account;
mod counters;
mod header;
mod hot;
mod keys;
mod made;
mod nodes;
mod post_states;
pub mod proof;
mod state;
mod touched;
pub mod trie;
pub mod update;
mod vocabulary;
mod witness;
mod witnesses;

pub use account::{Account, EMPTY_CODE_HASH};
pub use counters::{Counters, StateStats};
pub use header::state_root_in_header;
pub use hot::{HotKey, HotKeys};
pub use keys::StorageKeys;
pub use made::{Made, apply_into};
pub use nodes::{NodeStats, NodeStore};
pub use proof::{ProofError, Verified, verify_code};
pub use state::State;
pub use touched::{TOUCHED_BLOCKS, Touched, TouchedLog};
pub use trie::{EMPTY_ROOT, Hash};
pub use update::{Unheld, Updated, apply as apply_updates, preimage_under};
pub use vocabulary::{
    AccountRead, Address, DEFAULT_CACHE_BYTES, DEFAULT_HOT_KEYS, Fetch, FetchRequest,
    MAX_PROOFS_PER_BATCH, MAX_SLOTS_PER_BATCH, MAX_SLOTS_PER_REQUEST, ProofRequest, Read, SlotRead,
    WitnessRequest, proof_batches,
};
pub use witness::{Witnessed, verify_witness};
pub use witnesses::{
    DEFAULT_WITNESS_BYTES, MAX_BLOCKS_WITHOUT_WITNESS, WITNESS_UNAVAILABLE_FOR, WitnessStats,
    Witnesses,
};
