//! Reading the store: snapshots of its segments that the writer swaps in
//! through `arc-swap`, so a read never waits for a write beyond a hash-map
//! operation on the segment being written.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;

use crate::segment::Segment;
use crate::{Block, Hash, hashes};

/// Store counters, each O(1) to read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Lowest stored height.
    pub min_height: Option<u64>,
    /// Highest stored height; every height from `min_height` up to it is stored.
    pub max_contiguous_height: Option<u64>,
    /// Highest height ever stored since open (at least `max_contiguous_height`;
    /// higher after a rollback).
    pub high_water: Option<u64>,
    /// Bytes of records on disk.
    pub bytes: u64,
    /// Segment files.
    pub segments: usize,
    /// Reads answered as misses because a record failed its checksum.
    pub corrupt_reads: u64,
}

/// What readers see: an immutable snapshot swapped in by the writer.
#[derive(Clone, Default)]
pub(crate) struct State {
    pub(crate) segments: Vec<Arc<Segment>>,
    pub(crate) min: Option<u64>,
    pub(crate) max: Option<u64>,
    pub(crate) high_water: Option<u64>,
    /// Bytes of the segment files, derived on every publish.
    pub(crate) bytes: u64,
    /// The store-wide hash table, and the height below which it holds
    /// every hash of the sealed segments.
    pub(crate) hashes: Option<Arc<hashes::HashTable>>,
    pub(crate) covered_end: u64,
}

impl State {
    pub(crate) fn segment_for(&self, height: u64) -> Option<&Arc<Segment>> {
        let (min, max) = (self.min?, self.max?);
        if height < min || height > max {
            return None;
        }
        let at = self.segments.partition_point(|s| s.first_height <= height);
        self.segments.get(at.checked_sub(1)?)
    }

    /// Segments whose hashes the table does not hold, newest first: the
    /// one being written, and any sealed since the table last caught up.
    pub(crate) fn uncovered(&self) -> impl Iterator<Item = &Arc<Segment>> {
        self.segments.iter().rev().take_while(|s| {
            s.sealed_count()
                .is_none_or(|count| s.first_height + count as u64 > self.covered_end)
        })
    }

    /// (height, transaction index) the table holds for `hash`'s prefix, in
    /// covered heights.
    pub(crate) fn covered(&self, hash: &Hash) -> impl Iterator<Item = (u64, Option<u32>)> {
        self.hashes
            .iter()
            .flat_map(|table| table.candidates(hash))
            .map(hashes::decode)
            .filter(|(height, _)| *height < self.covered_end)
    }
}

pub(crate) struct Shared {
    pub(crate) state: ArcSwap<State>,
    pub(crate) corrupt_reads: AtomicU64,
}

/// Reads the store; cheap to clone, `Send + Sync`, never waits for the writer
/// beyond a hash-map operation.
#[derive(Clone)]
pub struct Reader {
    pub(crate) shared: Arc<Shared>,
}

impl Reader {
    /// Counters.
    pub fn stats(&self) -> Stats {
        let state = self.shared.state.load();
        Stats {
            min_height: state.min,
            max_contiguous_height: state.max,
            high_water: state.high_water,
            bytes: state.bytes,
            segments: state.segments.len(),
            corrupt_reads: self.shared.corrupt_reads.load(Ordering::Relaxed),
        }
    }

    /// The block at `height`, or `None` when it is not stored (or damaged:
    /// see [`Stats::corrupt_reads`]).
    pub fn block(&self, height: u64) -> Option<Block> {
        let state = self.shared.state.load();
        self.read(&state, height)
    }

    fn read(&self, state: &State, height: u64) -> Option<Block> {
        let segment = state.segment_for(height)?;
        match segment.read(height) {
            Ok(block) => block,
            Err(damage) => {
                self.shared.corrupt_reads.fetch_add(1, Ordering::Relaxed);
                tracing::error!(height, %damage, "corrupt record answered as a miss");
                None
            }
        }
    }

    /// The block with hash `hash`.
    pub fn block_by_hash(&self, hash: &Hash) -> Option<Block> {
        let state = self.shared.state.load();
        let read = |height| self.read(&state, height).filter(|b| b.hash() == *hash);
        state
            .uncovered()
            .find_map(|segment| segment.block_candidates(hash).into_iter().find_map(read))
            .or_else(|| {
                state
                    .covered(hash)
                    .filter(|(_, tx)| tx.is_none())
                    .find_map(|(height, _)| read(height))
            })
    }

    /// The block holding transaction `hash`, and the transaction's index.
    pub fn transaction(&self, hash: &Hash) -> Option<(Block, u32)> {
        let state = self.shared.state.load();
        let read = |(height, index): (u64, u32)| {
            let block = self.read(&state, height)?;
            (index < block.tx_count() && block.tx_hash(index) == *hash).then_some((block, index))
        };
        state
            .uncovered()
            .find_map(|segment| segment.tx_candidates(hash).into_iter().find_map(read))
            .or_else(|| {
                state
                    .covered(hash)
                    .find_map(|(height, tx)| read((height, tx?)))
            })
    }
}
