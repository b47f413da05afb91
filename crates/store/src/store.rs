//! The single writer of a store directory: its state, and what every
//! write shares (publishing a snapshot, stopping after a failed fsync,
//! keeping the hash table up to the sealed segments). Opening, appending,
//! rollback, retention and repair add their methods in files of their own.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use crate::config::StoreConfig;
use crate::error::StoreError;
use crate::hashes;
use crate::io;
use crate::reader::{Reader, Shared, State, Stats};
use crate::segment::Segment;
use crate::types::{Hash, Identity, Meta};

/// The segment being written.
pub(crate) struct Active {
    pub(crate) file: io::StoreFile,
    pub(crate) segment: Arc<Segment>,
    /// Where the next record goes.
    pub(crate) end: u64,
    /// Live heights in it.
    pub(crate) count: usize,
}

/// The single writer of a store directory (an OS file lock keeps it single).
pub struct Store {
    pub(crate) dir: PathBuf,
    pub(crate) meta: Meta,
    pub(crate) config: StoreConfig,
    pub(crate) shared: Arc<Shared>,
    pub(crate) active: Option<Active>,
    /// Height and hash of the last block written (ahead of the published
    /// `max` while a batch is being written).
    pub(crate) tip: Option<(u64, Hash)>,
    pub(crate) scratch: Vec<u8>,
    pub(crate) hashes: hashes::HashWriter,
    /// The hash table failed to catch up; retried at the next seal.
    pub(crate) hashes_stalled: bool,
    /// Set by a failed fsync; see [`StoreError::WriterFailed`].
    pub(crate) failed: Option<String>,
    pub(crate) _lock: File,
}

impl Store {
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

    /// Brings the hash table up to the sealed segments. A failure leaves
    /// them to their own indexes (slower lookups, never wrong ones) until
    /// the next segment is sealed.
    pub(crate) fn cover_sealed(&mut self) {
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
    pub(crate) fn publish_hashes(&self) {
        let (table, covered_end) = self.hashes.view();
        self.publish(|state| {
            state.hashes = table;
            state.covered_end = covered_end;
        });
    }

    /// Refuses to write after a failed fsync.
    pub(crate) fn writable(&self) -> Result<(), StoreError> {
        match &self.failed {
            Some(reason) => Err(StoreError::WriterFailed(reason.clone())),
            None => Ok(()),
        }
    }

    /// Any fsync that failed (a file's, a directory's, an index's or META's
    /// on its way into place) stops the writer, wherever it happened.
    pub(crate) fn stop_on_sync_failure<T>(
        &mut self,
        result: Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        match result {
            Err(error) if error.is_sync_failure() && self.failed.is_none() => Err(self.fail(error)),
            other => other,
        }
    }

    /// Stops writing for good: after a failed fsync the kernel may have
    /// dropped the unsynced pages, so neither the page cache nor this
    /// writer's view can be trusted to match the disk.
    pub(crate) fn fail(&mut self, error: StoreError) -> StoreError {
        tracing::error!(%error, "fsync failed: the store writes nothing more until reopened");
        self.failed = Some(error.to_string());
        error
    }

    /// Swaps in a new snapshot made by `change`.
    pub(crate) fn publish(&self, change: impl FnOnce(&mut State)) {
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
