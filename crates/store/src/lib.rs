//! store: neve's on-disk tail of recent blocks.
//!
//! Owns the files under one directory: a `META` identity file and a run of
//! segment files, each holding consecutive block records that carry the
//! bytes serving needs (the block as the upstream sent it, its hashes-only
//! form, receipts, raw data) plus tables of byte spans for every transaction,
//! receipt and log. It knows nothing of HTTP or JSON-RPC and never parses
//! JSON: what goes in is already prepared ([`NewBlock`]), what comes out is
//! [`Bytes`] sliced from a memory map, ready for a socket.
//!
//! Properties (the format spec is `docs/store-format.md`):
//! - contiguous: heights `min..=max` with no gaps; every block's parent hash
//!   is the hash of the block below it;
//! - atomic per block and crash-safe: a block and its index entries become
//!   visible together, after its bytes are written; on open a torn or stale
//!   tail is cut and the indexes of the segment being written are rebuilt
//!   from its records, so no index entry can go missing;
//! - bounded: whole segments are dropped by `retain_blocks` / `retain_bytes`;
//! - rollbacks are tombstone records: bytes a reader may hold are never
//!   overwritten;
//! - fast open: sealed segments are mapped, not read; only the segment being
//!   written is scanned (bounded by `segment_blocks`);
//! - readers never take a global lock: they load a snapshot through
//!   `arc-swap`; only the hash maps of the segment being written sit behind
//!   a per-segment `RwLock` held for a map operation.
//!
//! Start at [`Store::open`], [`Store::append`] and [`Reader`].

mod append;
mod block;
mod config;
mod damage;
mod directory;
mod error;
mod format;
mod hashes;
mod integrity;
mod io;
mod meta;
mod miss;
mod open;
mod reader;
mod repair;
mod resident;
mod retention;
mod rollback;
mod scan;
mod sealing;
mod segment;
mod segment_file;
mod store;
#[doc(hidden)]
pub mod testing;
#[cfg(test)]
mod tests;
mod types;

pub use bytes::Bytes;

pub use block::{Block, EmitterRun, Log, LogKey, LogTable, Runs, TxPart, TxParts};
pub use config::{
    DEFAULT_RETAIN_BLOCKS, DEFAULT_SEGMENT_BLOCKS, DEFAULT_SEGMENT_BYTES, Durability, StoreConfig,
};
pub use damage::MAX_DAMAGED_HEIGHTS;
pub use error::StoreError;
pub use format::FORMAT_VERSION;
pub use io::CrashHook;
pub use meta::stored_identity;
pub use miss::{Cold, Unread};
pub use reader::{FromDisk, InMemory, Reader, Residency, Stats};
pub use repair::Repair;
pub use store::Store;
pub use types::{Hash, Identity, LogEntry, NewBlock, Span, TxEntry};
