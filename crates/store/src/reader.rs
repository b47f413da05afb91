//! Reading the store: snapshots of its segments that the writer swaps in
//! through `arc-swap`, so a read never waits for a write beyond a hash-map
//! operation on the segment being written.

use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::block::Block;
use crate::damage::Damage;
use crate::hashes;
use crate::miss::{Cold, Unread};
use crate::segment::{Pages, Segment};
use crate::types::Hash;

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

/// How much of the stored records is in memory (the page cache), from a
/// sample of their pages: what an operator sizes memory by, since a read of
/// a page that is not waits for the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Residency {
    /// Pages looked at, spread evenly over the records.
    pub sampled_pages: u64,
    /// Of those, the ones in memory.
    pub resident_pages: u64,
    /// Bytes of records the sample stands for.
    pub bytes: u64,
}

impl Residency {
    /// The fraction of the records in memory; `None` before any record.
    pub fn fraction(&self) -> Option<f64> {
        (self.sampled_pages > 0).then(|| self.resident_pages as f64 / self.sampled_pages as f64)
    }

    /// Bytes of records in memory, estimated from the sample.
    pub fn resident_bytes(&self) -> u64 {
        self.fraction()
            .map_or(0, |f| (f * self.bytes as f64) as u64)
    }
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
    pub(crate) damage: Arc<Damage>,
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
            corrupt_reads: self.shared.damage.reads(),
        }
    }

    /// Asks the kernel (`mincore`) which of at most `max_pages` pages of the
    /// stored records are in memory, the pages spread over the segments by
    /// their size. A system call a page (about a microsecond each): call it
    /// off the async workers.
    pub fn residency(&self, max_pages: usize) -> Residency {
        let state = self.shared.state.load();
        let sealed: u64 = state.segments.iter().filter_map(|s| s.sealed_len()).sum();
        let used = |s: &Segment| s.sealed_len().unwrap_or(state.bytes.saturating_sub(sealed));
        let mut residency = Residency {
            bytes: state.bytes,
            ..Residency::default()
        };
        if state.bytes == 0 {
            return residency;
        }
        for segment in &state.segments {
            let bytes = used(segment);
            let pages = (max_pages as u128 * bytes as u128 / state.bytes as u128).max(1) as usize;
            let (sampled, resident) = segment.resident_pages(bytes as usize, pages);
            residency.sampled_pages += sampled;
            residency.resident_pages += resident;
        }
        residency
    }

    /// The block at `height`, or `None` when it is not stored (or damaged:
    /// see [`Stats::corrupt_reads`]).
    pub fn block(&self, height: u64) -> Option<Block> {
        self.block_in(height, Pages::MayWait).unwrap_or_default()
    }

    /// The block with hash `hash`.
    pub fn block_by_hash(&self, hash: &Hash) -> Option<Block> {
        self.block_by_hash_in(hash, Pages::MayWait)
            .unwrap_or_default()
    }

    /// The block holding transaction `hash`, and the transaction's index.
    pub fn transaction(&self, hash: &Hash) -> Option<(Block, u32)> {
        self.transaction_in(hash, Pages::MayWait)
            .unwrap_or_default()
    }

    /// Reads for records that are not in memory, on a thread that may wait:
    /// each record is read whole into memory of its own (`pread`), not
    /// faulted in through the mapping a page at a time.
    pub fn from_disk(&self) -> FromDisk<'_> {
        FromDisk(self)
    }

    /// Reads that never wait for the disk, for an async worker: each
    /// answers [`Cold`] instead of touching a page that is not in memory
    /// (the record, its index entry, the hash table's slot), so the caller
    /// can hand the read to a thread that may wait.
    pub fn in_memory(&self) -> InMemory<'_> {
        InMemory(self)
    }

    /// Drops every stored record's pages from memory, as memory pressure
    /// would (`sync`, then `MADV_PAGEOUT`); whether the kernel did. For
    /// tests and benchmarks of cold reads ([`crate::testing::page_out`]).
    pub(crate) fn page_out(&self) -> bool {
        // SAFETY: sync has no preconditions; dirty pages cannot be dropped.
        unsafe { libc::sync() };
        let state = self.shared.state.load();
        state.segments.iter().all(|segment| segment.page_out())
    }

    /// Opens the block at `height`; damage (already counted and logged by
    /// the segment) is answered as not stored.
    fn read(&self, state: &State, height: u64, pages: Pages) -> Result<Option<Block>, Cold> {
        let Some(segment) = state.segment_for(height) else {
            return Ok(None);
        };
        match segment.block(height, pages) {
            Ok(block) => Ok(block),
            Err(Unread::Cold) => Err(Cold),
            Err(Unread::Damaged) => Ok(None),
        }
    }

    fn block_in(&self, height: u64, pages: Pages) -> Result<Option<Block>, Cold> {
        let state = self.shared.state.load();
        self.read(&state, height, pages)
    }

    /// The first of the candidates the indexes give for `hash` that
    /// `accept` takes: the newest segments' first, then the store-wide
    /// table's (heights, with transaction indexes when `transactions`).
    /// Stops at the first taken, as a lookup by hash is on the hot path.
    fn find<T>(
        state: &State,
        hash: &Hash,
        transactions: bool,
        pages: Pages,
        mut accept: impl FnMut(u64, Option<u32>) -> Result<Option<T>, Cold>,
    ) -> Result<Option<T>, Cold> {
        for segment in state.uncovered() {
            if pages == Pages::InMemory && !segment.hash_index_in_memory() {
                return Err(Cold);
            }
            let found: Box<dyn Iterator<Item = (u64, Option<u32>)>> = if transactions {
                Box::new(
                    segment
                        .tx_candidates(hash)
                        .into_iter()
                        .map(|(h, t)| (h, Some(t))),
                )
            } else {
                Box::new(
                    segment
                        .block_candidates(hash)
                        .into_iter()
                        .map(|h| (h, None)),
                )
            };
            for (height, tx) in found {
                if let Some(taken) = accept(height, tx)? {
                    return Ok(Some(taken));
                }
            }
        }
        if let Some(table) = &state.hashes
            && pages == Pages::InMemory
            && !table.home_in_memory(hash)
        {
            return Err(Cold);
        }
        for (height, tx) in state.covered(hash) {
            if let Some(taken) = accept(height, tx)? {
                return Ok(Some(taken));
            }
        }
        Ok(None)
    }

    fn block_by_hash_in(&self, hash: &Hash, pages: Pages) -> Result<Option<Block>, Cold> {
        let state = self.shared.state.load();
        Self::find(&state, hash, false, pages, |height, tx| {
            if tx.is_some() {
                return Ok(None);
            }
            let block = self.read(&state, height, pages)?;
            Ok(block.filter(|b| b.hash() == *hash))
        })
    }

    fn transaction_in(&self, hash: &Hash, pages: Pages) -> Result<Option<(Block, u32)>, Cold> {
        let state = self.shared.state.load();
        Self::find(&state, hash, true, pages, |height, tx| {
            let Some(index) = tx else {
                return Ok(None);
            };
            let Some(block) = self.read(&state, height, pages)? else {
                return Ok(None);
            };
            match block.tx_hash(index) {
                Ok(found) if found == *hash => Ok(Some((block, index))),
                Ok(_) | Err(Unread::Damaged) => Ok(None),
                Err(Unread::Cold) => Err(Cold),
            }
        })
    }
}

/// [`Reader`]'s reads that never wait for the disk ([`Reader::in_memory`]).
pub struct InMemory<'r>(&'r Reader);

impl InMemory<'_> {
    /// [`Reader::block`], or [`Cold`].
    pub fn block(&self, height: u64) -> Result<Option<Block>, Cold> {
        self.0.block_in(height, Pages::InMemory)
    }

    /// [`Reader::block_by_hash`], or [`Cold`].
    pub fn block_by_hash(&self, hash: &Hash) -> Result<Option<Block>, Cold> {
        self.0.block_by_hash_in(hash, Pages::InMemory)
    }

    /// [`Reader::transaction`], or [`Cold`].
    pub fn transaction(&self, hash: &Hash) -> Result<Option<(Block, u32)>, Cold> {
        self.0.transaction_in(hash, Pages::InMemory)
    }
}

/// [`Reader`]'s reads into memory of their own ([`Reader::from_disk`]).
pub struct FromDisk<'r>(&'r Reader);

impl FromDisk<'_> {
    /// [`Reader::block`], read with `pread`.
    pub fn block(&self, height: u64) -> Option<Block> {
        self.0.block_in(height, Pages::FromDisk).unwrap_or_default()
    }

    /// [`Reader::block_by_hash`], read with `pread`.
    pub fn block_by_hash(&self, hash: &Hash) -> Option<Block> {
        self.0
            .block_by_hash_in(hash, Pages::FromDisk)
            .unwrap_or_default()
    }

    /// [`Reader::transaction`], read with `pread`.
    pub fn transaction(&self, hash: &Hash) -> Option<(Block, u32)> {
        self.0
            .transaction_in(hash, Pages::FromDisk)
            .unwrap_or_default()
    }
}
