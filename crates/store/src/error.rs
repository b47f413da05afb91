//! Why a store operation fails, and the two ways a filesystem call's
//! error becomes one.

use std::path::{Path, PathBuf};

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
    /// variant (`sync_error`), so [`StoreError::is_sync_failure`] needs
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

impl StoreError {
    /// Whether this is a failed fsync (of a file or a directory): what the
    /// kernel kept of unsynced writes is then unknown.
    pub fn is_sync_failure(&self) -> bool {
        matches!(self, StoreError::SyncFailed { .. })
    }
}
