//! ingest: follows an upstream node and feeds the store.
//!
//! Owns everything between the upstream's JSON-RPC and the store's append:
//! probing the upstream (chain id, genesis, which methods it has), fetching
//! a block with its receipts and raw RLP in one batch, decoding it
//! ([`decode`]: each text parsed once, strictly, with spans into the bytes
//! as received), verifying it ([`verify`]:
//! header hash, transaction hashes and roots, then every served field),
//! laying out the record ([`prepare`]) and appending it in order;
//! backfill with concurrent fetches, parent-hash continuity, and rollback to
//! the common ancestor on a reorg. It never serves and knows nothing of HTTP
//! serving; serving reads what it wrote through the store.
//!
//! It also fetches state proofs ([`state_fetch`]): fetch-through for reads
//! that miss and prefetch of hot keys, verified into `neve-state`'s node
//! store against the roots of blocks it stored.
//!
//! What the rest of neve reads of it while it runs is [`IngestView`]
//! (heights, health, metrics) and [`progress`] (catch-up shown to people).
//!
//! A running neve starts all of it with one call, [`start`], and holds the
//! [`Running`] it returns. Underneath, start at [`Follower::connect`] and
//! [`Follower::sync_once`]; [`supervise::start`] waits for an upstream
//! not up yet and [`supervise::supervise`] keeps a follower running.

pub mod bootstrap;
pub mod call_rules;
pub mod cpu;
pub mod decode;
mod error;
pub mod fetch;
mod fields;
pub mod follow;
pub mod heads;
pub mod prepare;
pub mod progress;
pub mod rawrlp;
pub mod running;
pub mod state_fetch;
mod status;
mod strict_json;
pub mod supervise;
#[cfg(test)]
mod testing;
pub mod verify;
pub mod view;

pub use error::IngestError;
pub use follow::{Follower, IngestConfig, SharedStore, StartHeight, SyncOutcome};
pub use running::{
    IngestHandle, IngestSettings, IngestState, LaunchError, Running, StateSettings, start,
};
pub use state_fetch::TouchSource;
pub use status::{Capabilities, IngestStatus};
pub use supervise::StartError;
pub use view::IngestView;
