//! How a store is opened: retention, durability, segment sizes.

use std::sync::Arc;

use crate::io::CrashHook;

/// Heights per segment file. Retention drops whole segments, so this is the
/// granularity of pruning, and it bounds what opening must scan (the segment
/// being written). Default is 1,024.
pub const DEFAULT_SEGMENT_BLOCKS: u32 = 1024;

/// The tail `neve serve` keeps unless told otherwise: 65,536 blocks (64
/// segments), about nine days of Ethereum mainnet or a day and a half of
/// the Avalanche C-chain. A mirror is a tail, not an archive: without a
/// bound it would backfill from genesis and grow for ever. Default is 65,536.
pub const DEFAULT_RETAIN_BLOCKS: u64 = 65_536;

/// Bytes per segment file at most; a segment is sealed early when the next
/// record would not fit. The file is sparse, so unused capacity costs address
/// space, not disk. Default is 1 GiB.
pub const DEFAULT_SEGMENT_BYTES: u64 = 1 << 30;

/// When appended blocks are durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// `fdatasync` before `append` returns: acknowledged blocks survive
    /// power loss. The default.
    Fsync,
    /// Written to the OS before `append` returns: acknowledged blocks survive
    /// a crash or SIGKILL of neve, not of the machine. For backfills that can
    /// be redone, and tests.
    OsBuffered,
}

/// How a store is opened.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// Keep at least this many of the newest blocks; older whole segments
    /// are dropped. `None`: no block limit. Default is `None`.
    pub retain_blocks: Option<u64>,
    /// Drop the oldest segments while the store is larger than this (the
    /// segment being written is never dropped). `None`: no byte limit.
    /// Default is `None`.
    pub retain_bytes: Option<u64>,
    /// See [`Durability`]. Default is `Fsync`.
    pub durability: Durability,
    /// Heights per segment for a new store (an existing store keeps its
    /// own). Default is [`DEFAULT_SEGMENT_BLOCKS`].
    pub segment_blocks: u32,
    /// Bytes per segment for a new store. Default is [`DEFAULT_SEGMENT_BYTES`].
    pub segment_bytes: u64,
    /// Crash tests only: segment-file writes are reported to this journal,
    /// which can fail them from a chosen point on and undo what was never
    /// synced. Default is `None`.
    pub crash_hook: Option<Arc<dyn CrashHook>>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            retain_blocks: None,
            retain_bytes: None,
            durability: Durability::Fsync,
            segment_blocks: DEFAULT_SEGMENT_BLOCKS,
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            crash_hook: None,
        }
    }
}
