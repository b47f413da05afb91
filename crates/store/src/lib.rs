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

mod block;
mod damage;
mod format;
mod hashes;
mod io;
mod reader;
mod repair;
mod resident;
mod segment;
#[doc(hidden)]
pub mod testing;
#[cfg(test)]
mod tests;

use damage::Damage;
pub use damage::MAX_DAMAGED_HEIGHTS;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
pub use bytes::Bytes;

pub use block::{Block, EmitterRun, Log, LogKey, LogTable, Runs, Unread};
pub use format::FORMAT_VERSION;
pub use reader::{Cold, FromDisk, InMemory, Reader, Residency, Stats};
use reader::{Shared, State};
pub use repair::Repair;
use segment::{Segment, index_file_name, segment_file_name};

/// A 32-byte Keccak hash.
pub type Hash = [u8; 32];

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

/// A byte range inside one section of a record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    /// Start, from the start of the section.
    pub offset: u32,
    /// Length in bytes.
    pub len: u32,
}

impl Span {
    /// The empty span (for data the upstream did not provide).
    pub const EMPTY: Span = Span { offset: 0, len: 0 };

    /// A span of `len` bytes at `offset`.
    pub const fn new(offset: u32, len: u32) -> Self {
        Span { offset, len }
    }
}

/// Where one transaction's bytes are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxEntry {
    /// The transaction hash.
    pub hash: Hash,
    /// The transaction object inside the full block.
    pub full: Span,
    /// Its receipt object inside the receipts.
    pub receipt: Span,
    /// Its EIP-2718 encoding inside the raw block (empty without raw data).
    pub raw: Span,
}

/// Where one log's bytes are, and what a log filter matches on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    /// Index of the transaction that emitted it.
    pub tx_index: u32,
    /// The log object inside the receipts.
    pub span: Span,
    /// The emitting contract.
    pub address: [u8; 20],
    /// Up to four topics.
    pub topics: Vec<Hash>,
}

/// A block prepared for serving, as ingest hands it to the store.
#[derive(Clone, Debug)]
pub struct NewBlock<'a> {
    /// Its height.
    pub height: u64,
    /// Its hash (verified by ingest).
    pub hash: Hash,
    /// Its parent's hash; must be the hash of the block at `height - 1` when
    /// that block is stored.
    pub parent_hash: Hash,
    /// The header's logs bloom.
    pub logs_bloom: [u8; 256],
    /// The block with full transactions, bytes as received.
    pub full: &'a [u8],
    /// The block with transaction hashes only.
    pub hashes_only: &'a [u8],
    /// The receipts array, bytes as received.
    pub receipts: &'a [u8],
    /// Raw header as the JSON value the upstream sent (empty when it gave none).
    pub raw_header: &'a [u8],
    /// Raw block as the JSON value the upstream sent (empty when it gave none).
    pub raw_block: &'a [u8],
    /// Raw receipts as the JSON value the upstream sent (empty when it gave none).
    pub raw_receipts: &'a [u8],
    /// One entry per transaction, in block order.
    pub txs: Vec<TxEntry>,
    /// One entry per log, in block order.
    pub logs: Vec<LogEntry>,
}

/// Which chain a store holds; a store refuses to open for another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    /// `eth_chainId`.
    pub chain_id: u64,
    /// The hash of block 0.
    pub genesis_hash: Hash,
}

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
    pub crash_journal: Option<std::sync::Arc<testing::CrashJournal>>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            retain_blocks: None,
            retain_bytes: None,
            durability: Durability::Fsync,
            segment_blocks: DEFAULT_SEGMENT_BLOCKS,
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            crash_journal: None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Meta {
    pub(crate) identity: Identity,
    pub(crate) segment_blocks: u32,
    pub(crate) segment_bytes: u64,
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A filesystem call failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// An fsync of a file or a directory failed: what the kernel kept of
    /// the unsynced writes is unknown. Every fsync's failure is this
    /// variant ([`sync_error`]), so [`StoreError::is_sync_failure`] needs
    /// no reading of the words.
    #[error("{action} {path}: {source}")]
    SyncFailed {
        /// What the sync was for.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The directory holds another chain's blocks.
    #[error(
        "the store in {dir} holds chain {stored} (genesis {stored_genesis}), not chain {wanted} \
         (genesis {wanted_genesis}): point neve at another data directory, or delete this one"
    )]
    WrongChain {
        /// The directory.
        dir: PathBuf,
        /// Its chain id.
        stored: u64,
        /// Its genesis hash, hex.
        stored_genesis: String,
        /// The chain asked for.
        wanted: u64,
        /// The genesis asked for, hex.
        wanted_genesis: String,
    },
    /// The store was written in a format this build does not read.
    #[error(
        "the store in {dir} has format version {found}, this neve reads version {expected}: \
         use a matching neve release, or delete the directory and let neve re-ingest"
    )]
    FormatVersion {
        /// The directory.
        dir: PathBuf,
        /// The version on disk.
        found: u32,
        /// The version this build reads.
        expected: u32,
    },
    /// Another process has the store open.
    #[error("the store in {0} is in use by another process")]
    Locked(PathBuf),
    /// An fsync failed earlier: what the kernel kept of the unsynced writes
    /// is unknown, so this writer writes nothing more. Reopening (restarting
    /// neve) recovers the files to their last intact record.
    #[error("the store stopped writing after a failed fsync ({0}); restart neve to recover it")]
    WriterFailed(String),
    /// A block does not continue the stored chain.
    #[error("block {height} does not continue the store: {reason}")]
    NotContiguous {
        /// The block's height.
        height: u64,
        /// Why.
        reason: String,
    },
    /// A block's spans or sizes do not fit its sections.
    #[error("block {height} is malformed: {reason}")]
    Malformed {
        /// The block's height.
        height: u64,
        /// Why.
        reason: String,
    },
    /// Files on disk contradict each other beyond what recovery handles.
    #[error("store corrupt: {0}")]
    Corrupt(String),
}

pub(crate) fn io_error(
    path: &Path,
    action: &'static str,
) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = path.to_path_buf();
    move |source| StoreError::Io {
        action,
        path,
        source,
    }
}

/// The error of a failed fsync of `path` (a file, or a directory's
/// entries): the one way every sync's failure is made, so each stops the
/// writer.
pub(crate) fn sync_error(
    path: &Path,
    action: &'static str,
) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = path.to_path_buf();
    move |source| StoreError::SyncFailed {
        action,
        path,
        source,
    }
}

/// The segment being written.
struct Active {
    file: io::StoreFile,
    segment: Arc<Segment>,
    /// Where the next record goes.
    end: u64,
    /// Live heights in it.
    count: usize,
}

/// The single writer of a store directory (an OS file lock keeps it single).
pub struct Store {
    dir: PathBuf,
    meta: Meta,
    config: StoreConfig,
    shared: Arc<Shared>,
    active: Option<Active>,
    /// Height and hash of the last block written (ahead of the published
    /// `max` while a batch is being written).
    tip: Option<(u64, Hash)>,
    scratch: Vec<u8>,
    hashes: hashes::HashWriter,
    /// The hash table failed to catch up; retried at the next seal.
    hashes_stalled: bool,
    /// Set by a failed fsync; see [`StoreError::WriterFailed`].
    failed: Option<String>,
    _lock: File,
}

impl StoreError {
    /// Whether this is a failed fsync (of a file or a directory): what the
    /// kernel kept of unsynced writes is then unknown.
    pub fn is_sync_failure(&self) -> bool {
        matches!(self, StoreError::SyncFailed { .. })
    }
}

const META_FILE: &str = "META";
const LOCK_FILE: &str = "LOCK";

impl Store {
    /// Opens the store in `dir` for `identity`, creating it if the directory
    /// is empty or missing. Recovers from a crash at any instant: cuts a torn
    /// tail, rebuilds missing indexes, and drops segments that no longer
    /// join the newest run.
    pub fn open(dir: &Path, identity: Identity, config: StoreConfig) -> Result<Store, StoreError> {
        std::fs::create_dir_all(dir).map_err(io_error(dir, "creating"))?;
        let lock_path = dir.join(LOCK_FILE);
        let lock = File::create(&lock_path).map_err(io_error(&lock_path, "creating"))?;
        if lock.try_lock().is_err() {
            return Err(StoreError::Locked(dir.to_path_buf()));
        }
        let journal = config.crash_journal.clone();
        let journal = journal.as_deref();
        let meta = open_meta(dir, identity, &config)?;
        let mut files = list_segments(dir)?;
        files.sort_unstable();

        let mut segments: Vec<Arc<Segment>> = Vec::new();
        let mut active = None;
        let blocks = meta.segment_blocks as usize;
        let damage = Arc::new(Damage::default());
        for (i, first_height) in files.iter().copied().enumerate() {
            let is_last = i + 1 == files.len();
            if !is_last
                && let Some(segment) =
                    Segment::open_sealed(dir, first_height, blocks, damage.clone())?
            {
                segments.push(Arc::new(segment));
                continue;
            }
            // The last segment is reopened for writing; an earlier one whose
            // sealing a crash cut short is rebuilt from its records.
            segment::unlink(&dir.join(index_file_name(first_height)), journal)?;
            let Some((file, segment, scan)) = reopen_for_writing(
                dir,
                &meta,
                first_height,
                config.crash_journal.clone(),
                &damage,
                if is_last {
                    Recover::CutAtDamage
                } else {
                    Recover::PastDamage
                },
            )?
            else {
                // Nothing intact in it: a segment created just before a crash.
                remove_segment(dir, first_height, journal)?;
                continue;
            };
            if is_last {
                active = Some(Active {
                    file,
                    segment: segment.clone(),
                    end: scan.end,
                    count: scan.offsets.len(),
                });
                segments.push(segment);
            } else {
                segments.push(seal(
                    dir,
                    &meta,
                    &file,
                    &segment,
                    scan.end,
                    scan.offsets.len(),
                    journal,
                )?);
            }
        }
        // Keep the oldest run of segments that join up: a gap never costs
        // the intact blocks below it (what lies beyond a gap can only be a
        // rollback's doomed fork, or blocks that no longer link), and the
        // newest of what is dropped goes first, so a crash here leaves a
        // run that still joins.
        let active_count = active.as_ref().map_or(0, |a: &Active| a.count);
        let len_of = |segment: &Segment| segment.sealed_count().unwrap_or(active_count);
        let keep_until = (1..segments.len())
            .find(|&i| {
                segments[i - 1].first_height + len_of(&segments[i - 1]) as u64
                    != segments[i].first_height
            })
            .unwrap_or(segments.len());
        let dropped: Vec<_> = segments.drain(keep_until..).collect();
        if !dropped.is_empty() {
            tracing::warn!(
                kept_through = segments
                    .last()
                    .map(|s| s.first_height + len_of(s) as u64 - 1),
                dropped_from = dropped[0].first_height,
                "the store's segments do not join up; keeping the run from its oldest block"
            );
            // The segment being written, the last, lay beyond the gap.
            active = None;
        }
        for segment in dropped.iter().rev() {
            remove_segment(dir, segment.first_height, journal)?;
        }
        let min = segments.first().map(|s| s.first_height);
        let max = segments
            .last()
            .map(|s| s.first_height + len_of(s) as u64 - 1);
        let sealed_end = segments
            .iter()
            .filter_map(|s| Some(s.first_height + s.sealed_count()? as u64))
            .max()
            .unwrap_or(0);
        let hashes = hashes::HashWriter::open(dir, sealed_end, config.crash_journal.clone())?;
        let (table, covered_end) = hashes.view();
        let mut store = Store {
            dir: dir.to_path_buf(),
            meta,
            config,
            shared: Arc::new(Shared {
                state: ArcSwap::from_pointee(State::default()),
                damage,
            }),
            active,
            tip: None,
            scratch: Vec::new(),
            hashes,
            hashes_stalled: false,
            failed: None,
            _lock: lock,
        };
        store.publish(|state| {
            *state = State {
                segments,
                min,
                max,
                high_water: max,
                bytes: 0,
                hashes: table,
                covered_end,
            }
        });
        if let Some(max) = max {
            let top = store
                .reader()
                .block(max)
                .ok_or_else(|| StoreError::Corrupt(format!("block {max} unreadable at open")))?;
            store.tip = Some((max, top.hash()));
        }
        Ok(store)
    }

    /// A reader of this store.
    pub fn reader(&self) -> Reader {
        Reader {
            shared: self.shared.clone(),
        }
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.reader().stats()
    }

    /// The identity the store was created for.
    pub fn identity(&self) -> Identity {
        self.meta.identity
    }

    /// Appends `blocks`, which must continue the store (height `max + 1`,
    /// parent hash = hash of `max`; any height when empty). When it returns
    /// `Ok`, the blocks are readable and durable per [`Durability`]. On `Err`
    /// the blocks before the failing one are stored and visible.
    pub fn append(&mut self, blocks: &[NewBlock<'_>]) -> Result<(), StoreError> {
        self.writable()?;
        let result = self.append_unchecked(blocks);
        self.stop_on_sync_failure(result)
    }

    fn append_unchecked(&mut self, blocks: &[NewBlock<'_>]) -> Result<(), StoreError> {
        if !self.hashes_stalled
            && self
                .shared
                .state
                .load()
                .uncovered()
                .any(|s| s.sealed_count().is_some())
        {
            self.cover_sealed();
        }
        let mut written_through = None;
        let result = blocks.iter().try_for_each(|block| {
            self.write_block(block)?;
            written_through = Some(block.height);
            Ok(())
        });
        if written_through.is_some() {
            if self.config.durability == Durability::Fsync
                && let Some(active) = &self.active
                && let Err(error) = active.file.sync_data()
            {
                return Err(self.fail(sync_error(&active.segment.path, "syncing")(error)));
            }
            self.publish(|state| {
                state.max = written_through;
                state.min = state.min.or(state.segments.first().map(|s| s.first_height));
                state.high_water = state.high_water.max(written_through);
            });
            self.prune()?;
        }
        result
    }

    fn write_block(&mut self, block: &NewBlock<'_>) -> Result<(), StoreError> {
        if let Some((max, hash)) = self.tip {
            let continues = block.height == max + 1 && block.parent_hash == hash;
            if !continues {
                return Err(StoreError::NotContiguous {
                    height: block.height,
                    reason: if block.height != max + 1 {
                        format!("the store ends at {max}")
                    } else {
                        "its parent hash is not the hash of the stored block below it".into()
                    },
                });
            }
        }
        if block.txs.len() > hashes::MAX_TXS_PER_BLOCK as usize {
            return Err(StoreError::Malformed {
                height: block.height,
                reason: format!(
                    "{} transactions; a block holds at most {}",
                    block.txs.len(),
                    hashes::MAX_TXS_PER_BLOCK
                ),
            });
        }
        self.scratch.clear();
        format::encode_block(block, &mut self.scratch).map_err(|e| StoreError::Malformed {
            height: block.height,
            reason: format!("{e:?}"),
        })?;
        let len = self.scratch.len() as u64;
        if format::SEGMENT_HEADER_LEN as u64 + len > self.meta.segment_bytes {
            return Err(StoreError::Malformed {
                height: block.height,
                reason: format!(
                    "{len} bytes do not fit a segment of {} bytes",
                    self.meta.segment_bytes
                ),
            });
        }
        let full = self.active.as_ref().is_none_or(|a| {
            a.count >= self.meta.segment_blocks as usize || a.end + len > self.meta.segment_bytes
        });
        if full {
            self.start_segment(block.height)?;
        }
        let active = self.active.as_mut().expect("a segment is open");
        active
            .file
            .write_all_at(&self.scratch, active.end)
            .map_err(io_error(&active.segment.path, "writing"))?;
        active.segment.push(active.count, active.end)?;
        active.end += len;
        active.count += 1;
        self.tip = Some((block.height, block.hash));
        Ok(())
    }

    /// Seals the segment being written (if any) and starts a new one.
    fn start_segment(&mut self, first_height: u64) -> Result<(), StoreError> {
        if let Some(active) = &self.active {
            // The segment stays the one being written until it is sealed:
            // a failure here leaves the writer as it was (or, for a failed
            // fsync, stopped), never with a listed segment nobody writes.
            let sealed = seal(
                &self.dir,
                &self.meta,
                &active.file,
                &active.segment,
                active.end,
                active.count,
                self.config.crash_journal.as_deref(),
            )?;
            self.active = None;
            self.publish(|state| {
                *state
                    .segments
                    .last_mut()
                    .expect("the active segment is listed") = sealed;
            });
            self.cover_sealed();
        }
        let path = self.dir.join(segment_file_name(first_height));
        let file = segment::open_for_writing(
            &path,
            first_height,
            self.meta.segment_bytes,
            self.config.crash_journal.clone(),
        )?;
        segment::sync_dir(&self.dir, self.config.crash_journal.as_deref())?;
        let segment = Arc::new(Segment::active(
            path,
            file.file(),
            first_height,
            self.meta.segment_blocks as usize,
            &[],
            &[],
            self.shared.damage.clone(),
        )?);
        self.active = Some(Active {
            file,
            segment: segment.clone(),
            end: format::SEGMENT_HEADER_LEN as u64,
            count: 0,
        });
        self.publish(|state| state.segments.push(segment));
        Ok(())
    }

    /// Removes every block above `keep_up_to` (all blocks when it is below
    /// the lowest). Durable per [`Durability`] when it returns.
    pub fn rollback(&mut self, keep_up_to: u64) -> Result<(), StoreError> {
        self.writable()?;
        let result = self.rollback_unchecked(keep_up_to);
        self.stop_on_sync_failure(result)
    }

    fn rollback_unchecked(&mut self, keep_up_to: u64) -> Result<(), StoreError> {
        let state = self.shared.state.load_full();
        let (Some(min), Some(max)) = (state.min, state.max) else {
            return Ok(());
        };
        if keep_up_to >= max {
            return Ok(());
        }
        // The table stops covering what the rollback changes before it does.
        let changed_from = state
            .segment_for(keep_up_to)
            .map_or(0, |segment| segment.first_height);
        self.hashes
            .uncover_from(changed_from, self.config.durability)?;
        self.publish_hashes();
        if keep_up_to < min {
            self.active = None;
            self.tip = None;
            self.publish(|state| {
                *state = State {
                    high_water: state.high_water,
                    hashes: state.hashes.clone(),
                    covered_end: state.covered_end,
                    ..State::default()
                };
            });
            for segment in state.segments.iter().rev() {
                remove_segment(
                    &self.dir,
                    segment.first_height,
                    self.config.crash_journal.as_deref(),
                )?;
            }
            return Ok(());
        }
        // The kept block's hash becomes the tip new blocks must link to; a
        // rollback to a block that cannot be read is refused before anything
        // is written, rather than leaving the tip unknown.
        let kept_hash = self
            .reader()
            .block(keep_up_to)
            .ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "block {keep_up_to} is unreadable; cannot roll back to it"
                ))
            })?
            .hash();
        let keep_segment = state
            .segment_for(keep_up_to)
            .expect("within min..=max")
            .clone();
        // Segments wholly above the kept height go first.
        let doomed: Vec<u64> = state
            .segments
            .iter()
            .filter(|s| s.first_height > keep_up_to)
            .map(|s| s.first_height)
            .collect();
        if !doomed.is_empty() {
            self.active = None;
            self.publish(|state| state.segments.retain(|s| s.first_height <= keep_up_to));
            // Newest first: a crash between two unlinks leaves the kept
            // blocks and a shorter doomed run that still joins them, never
            // a gap (which open would cut at, keeping the kept blocks).
            for first in doomed.into_iter().rev() {
                remove_segment(&self.dir, first, self.config.crash_journal.as_deref())?;
            }
        }
        // Reopen the segment holding the kept height for writing if sealed.
        if self
            .active
            .as_ref()
            .is_none_or(|a| a.segment.first_height != keep_segment.first_height)
        {
            let first = keep_segment.first_height;
            let journal = self.config.crash_journal.clone();
            // An index a failed seal never wrote is already gone.
            segment::unlink(&self.dir.join(index_file_name(first)), journal.as_deref())?;
            segment::sync_dir(&self.dir, journal.as_deref())?;
            let (file, segment, scan) = reopen_for_writing(
                &self.dir,
                &self.meta,
                first,
                self.config.crash_journal.clone(),
                &self.shared.damage,
                // It was sealed: every record in it was acknowledged.
                Recover::PastDamage,
            )?
            .ok_or_else(|| StoreError::Corrupt(format!("segment {first} lost its records")))?;
            self.active = Some(Active {
                file,
                segment: segment.clone(),
                end: scan.end,
                count: scan.offsets.len(),
            });
            self.publish(|state| {
                *state.segments.last_mut().expect("kept segment listed") = segment
            });
        }
        let active = self.active.as_mut().expect("reopened above");
        let keep = (keep_up_to + 1 - active.segment.first_height) as usize;
        for height in keep_up_to + 1..active.segment.first_height + active.count as u64 {
            if let Ok(Some(block)) = active.segment.block(height, segment::Pages::MayWait) {
                active.segment.unindex(&block);
            }
        }
        self.scratch.clear();
        format::encode_rollback(keep_up_to, &mut self.scratch);
        active
            .file
            .write_all_at(&self.scratch, active.end)
            .map_err(io_error(&active.segment.path, "writing a rollback"))?;
        if self.config.durability == Durability::Fsync
            && let Err(error) = active.file.sync_data()
        {
            let error = sync_error(&active.segment.path, "syncing")(error);
            return Err(self.fail(error));
        }
        active.end += self.scratch.len() as u64;
        active.count = keep;
        self.tip = Some((keep_up_to, kept_hash));
        self.publish(|state| state.max = Some(keep_up_to));
        Ok(())
    }

    /// Drops the oldest segments beyond the retention limits.
    fn prune(&mut self) -> Result<(), StoreError> {
        loop {
            let state = self.shared.state.load_full();
            let (Some(max), true) = (state.max, state.segments.len() > 1) else {
                return Ok(());
            };
            let next_first = state.segments[1].first_height;
            let over_blocks = self
                .config
                .retain_blocks
                .is_some_and(|keep| max + 1 - next_first >= keep);
            let over_bytes = self
                .config
                .retain_bytes
                .is_some_and(|limit| state.bytes > limit);
            if !(over_blocks || over_bytes) {
                return Ok(());
            }
            let oldest = state.segments[0].first_height;
            self.publish(|state| {
                state.segments.remove(0);
                state.min = Some(next_first);
            });
            remove_segment(&self.dir, oldest, self.config.crash_journal.as_deref())?;
        }
    }

    /// Brings the hash table up to the sealed segments. A failure leaves
    /// them to their own indexes (slower lookups, never wrong ones) until
    /// the next segment is sealed.
    fn cover_sealed(&mut self) {
        let sealed: Vec<Arc<Segment>> = self
            .shared
            .state
            .load()
            .segments
            .iter()
            .filter(|s| s.sealed_count().is_some())
            .cloned()
            .collect();
        self.hashes_stalled = false;
        if let Err(error) = self.hashes.cover(&sealed, self.config.durability) {
            tracing::warn!(%error, "the hash table did not catch up; lookups read segment indexes");
            self.hashes_stalled = true;
        }
        self.publish_hashes();
    }

    /// Shows readers the hash table as the writer now has it.
    fn publish_hashes(&self) {
        let (table, covered_end) = self.hashes.view();
        self.publish(|state| {
            state.hashes = table;
            state.covered_end = covered_end;
        });
    }

    /// Refuses to write after a failed fsync.
    fn writable(&self) -> Result<(), StoreError> {
        match &self.failed {
            Some(reason) => Err(StoreError::WriterFailed(reason.clone())),
            None => Ok(()),
        }
    }

    /// Any fsync that failed (a file's, a directory's, an index's or META's
    /// on its way into place) stops the writer, wherever it happened.
    fn stop_on_sync_failure<T>(&mut self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        match result {
            Err(error) if error.is_sync_failure() && self.failed.is_none() => Err(self.fail(error)),
            other => other,
        }
    }

    /// Stops writing for good: after a failed fsync the kernel may have
    /// dropped the unsynced pages, so neither the page cache nor this
    /// writer's view can be trusted to match the disk.
    fn fail(&mut self, error: StoreError) -> StoreError {
        tracing::error!(%error, "fsync failed: the store writes nothing more until reopened");
        self.failed = Some(error.to_string());
        error
    }

    /// Swaps in a new snapshot made by `change`.
    fn publish(&self, change: impl FnOnce(&mut State)) {
        let mut next = State::clone(&self.shared.state.load());
        change(&mut next);
        next.bytes = next
            .segments
            .iter()
            .filter_map(|s| s.sealed_len())
            .sum::<u64>()
            + self.active.as_ref().map_or(0, |a| a.end);
        self.shared.state.store(Arc::new(next));
    }
}

/// What a scan that rebuilds a segment's index does at a damaged record.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Recover {
    /// Keep the damaged height (a counted miss until repaired) and the
    /// records after it: for a segment whose records were all acknowledged
    /// (one that was sealed), where a damaged record is a bad disk block,
    /// not a torn write.
    PastDamage,
    /// End the segment there: for the segment being written, whose damaged
    /// last record is a write a crash tore (never acknowledged).
    CutAtDamage,
}

/// Opens a segment file for writing and indexes its intact records; `None`
/// when it holds none. Cuts the tail after the last intact record to zeros,
/// so no stale record can ever be read as a continuation.
fn reopen_for_writing(
    dir: &Path,
    meta: &Meta,
    first_height: u64,
    journal: Option<Arc<testing::CrashJournal>>,
    damage: &Arc<Damage>,
    recover: Recover,
) -> Result<Option<(io::StoreFile, Arc<Segment>, segment::Scan)>, StoreError> {
    let path = dir.join(segment_file_name(first_height));
    let file = segment::open_for_writing(&path, first_height, meta.segment_bytes, journal)?;
    let blocks = meta.segment_blocks as usize;
    let heights = match recover {
        Recover::PastDamage => Some(first_height..first_height + blocks as u64),
        Recover::CutAtDamage => None,
    };
    let scan = Segment::scan_recovering(
        &Segment::active(
            path.clone(),
            file.file(),
            first_height,
            blocks,
            &[],
            &[],
            damage.clone(),
        )?
        .bytes(),
        heights,
    );
    if scan.first_height != Some(first_height) {
        return Ok(None);
    }
    for &height in &scan.damaged {
        tracing::error!(
            height,
            path = %path.display(),
            "a damaged record was kept as a miss (the blocks after it are intact); it is repaired when the block is fetched again"
        );
        damage.remember(height);
    }
    // Readers may map this file (a rollback unsealing it): zero the tail,
    // never shorten the file under them.
    segment::zero_tail(&file, scan.end, meta.segment_bytes)?;
    file.sync_data()
        .map_err(sync_error(&path, "syncing the cut tail of"))?;
    let segment = Segment::active(
        path,
        file.file(),
        first_height,
        blocks,
        &scan.offsets,
        &scan.damaged,
        damage.clone(),
    )?;
    Ok(Some((file, Arc::new(segment), scan)))
}

/// Writes the index of a full segment, trims its file and returns the sealed
/// segment readers should see.
fn seal(
    dir: &Path,
    meta: &Meta,
    file: &io::StoreFile,
    segment: &Segment,
    end: u64,
    count: usize,
    journal: Option<&testing::CrashJournal>,
) -> Result<Arc<Segment>, StoreError> {
    // Trimming a file readers have mapped is safe here, unlike in a
    // rollback: every index entry points below `end`, so no reader can
    // touch the pages cut off.
    file.set_len(end)
        .map_err(io_error(&segment.path, "trimming"))?;
    file.sync_all()
        .map_err(sync_error(&segment.path, "syncing"))?;
    segment.write_index(dir, count, end, journal)?;
    let sealed = Segment::open_sealed(
        dir,
        segment.first_height,
        meta.segment_blocks as usize,
        segment.damage(),
    )?
    .ok_or_else(|| {
        StoreError::Corrupt(format!(
            "index of {} unreadable right after writing",
            segment.path.display()
        ))
    })?;
    sealed.inherit_verified(segment);
    Ok(Arc::new(sealed))
}

fn remove_segment(
    dir: &Path,
    first_height: u64,
    journal: Option<&testing::CrashJournal>,
) -> Result<(), StoreError> {
    // Data first: an index without its segment is ignored and removed at
    // open, while a segment without its index is simply rebuilt.
    for name in [
        segment_file_name(first_height),
        index_file_name(first_height),
    ] {
        segment::unlink(&dir.join(name), journal)?;
    }
    segment::sync_dir(dir, journal)
}

/// First heights of the segment files in `dir`; removes leftovers of
/// interrupted writes (temporary files, indexes without a segment).
fn list_segments(dir: &Path) -> Result<Vec<u64>, StoreError> {
    let mut segments = Vec::new();
    let mut indexes = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_error(dir, "listing"))? {
        let path = entry.map_err(io_error(dir, "listing"))?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name.ends_with(".tmp") {
            let _ = std::fs::remove_file(&path);
        } else if let Some(first) = name.strip_suffix(".seg").and_then(|n| n.parse().ok()) {
            segments.push(first);
        } else if let Some(first) = name
            .strip_suffix(".idx")
            .and_then(|n| n.parse::<u64>().ok())
        {
            indexes.push(first);
        }
    }
    for first in indexes {
        if !segments.contains(&first) {
            let _ = std::fs::remove_file(dir.join(index_file_name(first)));
        }
    }
    Ok(segments)
}

/// The identity of the store in `dir`, if one is there and its META reads:
/// lets a store be opened while the upstream that would name the chain
/// cannot be reached.
pub fn stored_identity(dir: &Path) -> Option<Identity> {
    match format::decode_meta(&std::fs::read(dir.join(META_FILE)).ok()?) {
        format::MetaRead::Ok(meta) => Some(meta.identity),
        _ => None,
    }
}

fn write_meta(dir: &Path, meta: &Meta, config: &StoreConfig) -> Result<(), StoreError> {
    segment::write_atomically(
        dir,
        META_FILE,
        &format::encode_meta(meta),
        config.crash_journal.as_deref(),
    )
}

fn open_meta(dir: &Path, identity: Identity, config: &StoreConfig) -> Result<Meta, StoreError> {
    let path = dir.join(META_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => match format::decode_meta(&bytes) {
            format::MetaRead::Ok(meta) if meta.identity == identity => Ok(meta),
            format::MetaRead::Ok(meta) => Err(StoreError::WrongChain {
                dir: dir.to_path_buf(),
                stored: meta.identity.chain_id,
                stored_genesis: hex(&meta.identity.genesis_hash),
                wanted: identity.chain_id,
                wanted_genesis: hex(&identity.genesis_hash),
            }),
            format::MetaRead::Version(found) => Err(StoreError::FormatVersion {
                dir: dir.to_path_buf(),
                found,
                expected: FORMAT_VERSION,
            }),
            format::MetaRead::Corrupt => Err(StoreError::Corrupt(format!(
                "{} is damaged",
                path.display()
            ))),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !list_segments(dir)?.is_empty() {
                return Err(StoreError::Corrupt(format!(
                    "{} holds segments but no META",
                    dir.display()
                )));
            }
            if config.segment_blocks == 0 || config.segment_bytes < 4096 {
                return Err(StoreError::Corrupt("segment size too small".into()));
            }
            let meta = Meta {
                identity,
                segment_blocks: config.segment_blocks,
                segment_bytes: config.segment_bytes,
            };
            write_meta(dir, &meta, config)?;
            Ok(meta)
        }
        Err(e) => Err(io_error(&path, "reading")(e)),
    }
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::from("0x");
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
    }
    out
}
