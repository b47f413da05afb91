//! One segment: a file of consecutive block records, memory-mapped, with its
//! hash indexes — in memory while it is the segment being written, in an
//! `.idx` file once sealed.

use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use memmap2::Mmap;

use crate::block::Block;
use crate::damage::Damage;
use crate::directory::{index_file_name, segment_file_name, write_atomically};
use crate::error::{StoreError, io_error};
use crate::format::{self, INDEX_ENTRY_LEN, INDEX_HEADER_LEN, INDEX_MAGIC};
use crate::io::CrashHook;
use crate::miss::Unread;
use crate::segment_file::{SegmentFile, Source};
use crate::types::Hash;

/// Whether a read may wait for the disk, and how it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pages {
    /// Through the mapping, faulting pages in.
    MayWait,
    /// Through the mapping, only pages in memory.
    InMemory,
    /// Into memory of its own with `pread`.
    FromDisk,
}

/// A segment as readers see it.
pub(crate) struct Segment {
    pub(crate) first_height: u64,
    /// The whole mapping; reads slice it (zero-copy, reference counted).
    data: Bytes,
    index: SegmentIndex,
    pub(crate) path: PathBuf,
    /// The file and the store's damage count, shared with its blocks.
    origin: Arc<SegmentFile>,
}

enum SegmentIndex {
    /// Written to: offsets are published per height before the store's
    /// `max` moves past them; hash maps change under a brief write lock.
    Active {
        offsets: Box<[AtomicU64]>,
        hashes: RwLock<ActiveHashes>,
    },
    /// Immutable: offsets and sorted hash tables in a mapped `.idx` file.
    Sealed {
        index: Mmap,
        count: usize,
        tx_count: usize,
    },
}

#[derive(Default)]
pub(crate) struct ActiveHashes {
    blocks: HashMap<Hash, u64>,
    txs: HashMap<Hash, (u64, u32)>,
}

/// Maps `file` read-only (shared, so writes through the file are visible).
fn map(file: &File, path: &Path) -> Result<Bytes, StoreError> {
    // SAFETY: the store owns these files and never truncates a mapped region
    // a reader can reach: records are only appended, a torn tail is cut
    // before any reader exists, and deleted segments stay mapped until the
    // last reader drops them.
    let map = unsafe { Mmap::map(file) }.map_err(io_error(path, "mapping"))?;
    Ok(Bytes::from_owner(map))
}

impl Segment {
    /// An active segment over a mapped file, indexed from a scan's
    /// `offsets` (its `damaged` heights indexed, never taken as checked).
    pub(crate) fn active(
        path: PathBuf,
        file: &File,
        first_height: u64,
        segment_blocks: usize,
        offsets: &[u64],
        damaged: &[u64],
        damage: Arc<Damage>,
    ) -> Result<Segment, StoreError> {
        let data = map(file, &path)?;
        let segment = Segment {
            first_height,
            data,
            index: SegmentIndex::Active {
                offsets: (0..segment_blocks).map(|_| AtomicU64::new(0)).collect(),
                hashes: RwLock::new(ActiveHashes::default()),
            },
            origin: Arc::new(SegmentFile::new(
                path.clone(),
                // Its own open file: the readahead advice is per open file,
                // and the writer's stays as it was.
                File::open(&path).map_err(io_error(&path, "opening"))?,
                damage,
                first_height,
                segment_blocks,
            )),
            path,
        };
        for (i, offset) in offsets.iter().enumerate() {
            let height = first_height + i as u64;
            segment.publish_offset(i, *offset);
            if damaged.contains(&height) {
                continue;
            }
            // The scan that found these records checked each one whole.
            segment.origin.mark_verified(height);
            if let Some(block) = segment.read_unchecked(height) {
                segment.index_hashes(&block);
            }
        }
        Ok(segment)
    }

    /// Opens a sealed segment and its index; `None` when the index is
    /// missing, damaged or does not describe this file (then the caller
    /// rebuilds it from a scan).
    pub(crate) fn open_sealed(
        dir: &Path,
        first_height: u64,
        segment_blocks: usize,
        damage: Arc<Damage>,
    ) -> Result<Option<Segment>, StoreError> {
        let path = dir.join(segment_file_name(first_height));
        let index_path = dir.join(index_file_name(first_height));
        let Ok(index_file) = File::open(&index_path) else {
            return Ok(None);
        };
        // SAFETY: index files are written once under a temporary name,
        // made durable, renamed into place and never modified.
        let index = unsafe { Mmap::map(&index_file) }.map_err(io_error(&index_path, "mapping"))?;
        let file = File::open(&path).map_err(io_error(&path, "opening"))?;
        let file_len = file
            .metadata()
            .map_err(io_error(&path, "reading metadata"))?
            .len();
        let Some((count, tx_count)) = check_index_header(&index, first_height, file_len) else {
            return Ok(None);
        };
        if count > segment_blocks {
            return Ok(None);
        }
        Ok(Some(Segment {
            first_height,
            data: map(&file, &path)?,
            index: SegmentIndex::Sealed {
                index,
                count,
                tx_count,
            },
            origin: Arc::new(SegmentFile::new(
                path.clone(),
                file,
                damage,
                first_height,
                segment_blocks,
            )),
            path,
        }))
    }

    /// Writes the `.idx` file for this segment's first `count` records
    /// (temporary name, fsync, rename, fsync of the directory).
    pub(crate) fn write_index(
        &self,
        dir: &Path,
        count: usize,
        data_len: u64,
        journal: Option<&dyn CrashHook>,
    ) -> Result<(), StoreError> {
        let mut blocks = Vec::with_capacity(count);
        let mut txs = Vec::new();
        let mut offsets = Vec::with_capacity(count);
        for i in 0..count {
            let height = self.first_height + i as u64;
            let offset = self.offset(i).expect("indexed heights have offsets");
            offsets.push(offset);
            // A damaged record (kept by a recovering scan, or found so now)
            // keeps its offset, where reads find the damage, and for its
            // hash a placeholder entry (prefix 0: a lookup that lands on it
            // reads the record, finds the damage and answers a miss), since
            // the index holds one block entry per height. By hash as by
            // height it is a miss until repaired.
            let Some((hash, tx_hashes)) = self
                .read_unchecked(height)
                .and_then(|block| Some((block.hash(), block.tx_hashes().ok()?)))
            else {
                blocks.push((0, i as u32, 0u32));
                continue;
            };
            blocks.push((format::prefix(&hash), i as u32, 0u32));
            for (t, hash) in tx_hashes.enumerate() {
                txs.push((format::prefix(&hash), i as u32, t as u32));
            }
        }
        blocks.sort_unstable();
        txs.sort_unstable();
        let mut out = Vec::with_capacity(
            INDEX_HEADER_LEN + count * 8 + (blocks.len() + txs.len()) * INDEX_ENTRY_LEN,
        );
        out.extend_from_slice(&INDEX_MAGIC);
        out.extend_from_slice(&format::FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&(count as u32).to_le_bytes());
        out.extend_from_slice(&self.first_height.to_le_bytes());
        out.extend_from_slice(&(txs.len() as u32).to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&data_len.to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        let crc = crc32c::crc32c(&out[..44]);
        out.extend_from_slice(&crc.to_le_bytes());
        for offset in offsets {
            out.extend_from_slice(&offset.to_le_bytes());
        }
        for (prefix, delta, index) in blocks.into_iter().chain(txs) {
            out.extend_from_slice(&prefix.to_le_bytes());
            out.extend_from_slice(&delta.to_le_bytes());
            out.extend_from_slice(&index.to_le_bytes());
        }
        write_atomically(dir, &index_file_name(self.first_height), &out, journal)
    }

    fn publish_offset(&self, i: usize, offset: u64) {
        if let SegmentIndex::Active { offsets, .. } = &self.index {
            offsets[i].store(offset, Ordering::Release);
        }
    }

    /// Adds a freshly written record (the writer calls this before moving
    /// the store's `max` past it).
    pub(crate) fn push(&self, i: usize, offset: u64) -> Result<(), StoreError> {
        self.publish_offset(i, offset);
        let height = self.first_height + i as u64;
        // Its CRCs were computed from these bytes a moment ago: the first
        // readers of a new block (the most read) need not check them again.
        self.origin.forget(height);
        self.origin.mark_verified(height);
        let block = self.read_unchecked(height).ok_or_else(|| {
            StoreError::Corrupt(format!("record {height} unreadable right after writing"))
        })?;
        self.index_hashes(&block);
        Ok(())
    }

    fn index_hashes(&self, block: &Block) {
        if let SegmentIndex::Active { hashes, .. } = &self.index {
            let Ok(txs) = block.tx_hashes() else {
                return;
            };
            let mut hashes = hashes.write().unwrap_or_else(|p| p.into_inner());
            hashes.blocks.insert(block.hash(), block.height());
            for (t, hash) in txs.enumerate() {
                hashes.txs.insert(hash, (block.height(), t as u32));
            }
        }
    }

    /// Forgets the hashes of a record a rollback removed.
    pub(crate) fn unindex(&self, block: &Block) {
        if let SegmentIndex::Active { hashes, .. } = &self.index {
            let Ok(txs) = block.tx_hashes() else {
                return;
            };
            let mut hashes = hashes.write().unwrap_or_else(|p| p.into_inner());
            hashes.blocks.remove(&block.hash());
            for hash in txs {
                hashes.txs.remove(&hash);
            }
        }
    }

    /// The record offset of the `i`th height, if published.
    pub(crate) fn offset(&self, i: usize) -> Option<u64> {
        match &self.index {
            SegmentIndex::Active { offsets, .. } => offsets
                .get(i)
                .map(|o| o.load(Ordering::Acquire))
                .filter(|o| *o != 0),
            SegmentIndex::Sealed { index, count, .. } => {
                (i < *count).then(|| format::u64_at(index, INDEX_HEADER_LEN + 8 * i))
            }
        }
    }

    /// Where the `i`th height's record lies: from its offset to the next
    /// height's, or to `end` (where the segment's records end) for the
    /// last; `None` when not indexed or not inside the mapping.
    pub(crate) fn record_span(&self, i: usize, end: u64) -> Option<Range<usize>> {
        let start = self.offset(i)? as usize;
        let stop = self.offset(i + 1).unwrap_or(end) as usize;
        (start <= stop && stop <= self.data.len()).then_some(start..stop)
    }

    /// The mapped bytes of `span` (a record's, from [`Segment::record_span`]).
    pub(crate) fn mapped(&self, span: Range<usize>) -> &[u8] {
        &self.data[span]
    }

    /// After a record was written over in place: forgets what was checked
    /// of it, and indexes its hashes if this segment is being written (a
    /// sealed one has its index written again by the caller).
    pub(crate) fn rewritten(&self, height: u64) {
        self.origin.forget(height);
        if let Some(block) = self.read_unchecked(height) {
            self.index_hashes(&block);
        }
    }

    /// Takes over what `other` (the same file, before sealing) checked.
    pub(crate) fn inherit_verified(&self, other: &Segment) {
        self.origin.inherit(&other.origin);
    }

    /// The store's count of damaged reads, which this segment's blocks add to.
    pub(crate) fn damage(&self) -> Arc<Damage> {
        self.origin.damage.clone()
    }

    /// All mapped bytes (for the recovery scan).
    pub(crate) fn bytes(&self) -> Bytes {
        self.data.clone()
    }

    /// The file length of a sealed segment.
    pub(crate) fn sealed_len(&self) -> Option<u64> {
        matches!(self.index, SegmentIndex::Sealed { .. }).then_some(self.data.len() as u64)
    }

    /// Of `pages` pages spread evenly over the first `used` bytes, how many
    /// were looked at and how many are in memory (`mincore`).
    pub(crate) fn resident_pages(&self, used: usize, pages: usize) -> (u64, u64) {
        let page = crate::resident::page_size();
        let used = used.min(self.data.len());
        let base = self.data.as_ptr() as usize;
        if used == 0 || !base.is_multiple_of(page) {
            return (0, 0);
        }
        let in_use = used.div_ceil(page);
        let step = (in_use / pages.max(1)).max(1);
        let (mut sampled, mut resident) = (0, 0);
        for index in (0..in_use).step_by(step).take(pages) {
            let mut vector = 0u8;
            // SAFETY: the page lies inside this segment's mapping, which
            // `self.data` keeps alive; mincore writes one byte for one page.
            let answered = unsafe {
                libc::mincore(
                    (base + index * page) as *mut libc::c_void,
                    page,
                    &mut vector,
                )
            };
            if answered == 0 {
                sampled += 1;
                resident += u64::from(vector & 1);
            }
        }
        (sampled, resident)
    }

    /// Whether a search of this segment's hash index touches only pages in
    /// memory: the active segment's are on the heap; a sealed one's are its
    /// mapped `.idx`, searched by bisection, so all of it.
    pub(crate) fn hash_index_in_memory(&self) -> bool {
        match &self.index {
            SegmentIndex::Active { .. } => true,
            SegmentIndex::Sealed { index, .. } => crate::resident::in_memory(index),
        }
    }

    /// Asks the kernel to drop this segment's pages from memory (a test's
    /// way to make records cold while they are mapped); whether it did.
    /// `MADV_PAGEOUT` drops the pages this process has touched through the
    /// mapping; `POSIX_FADV_DONTNEED` the cached ones it has not (written,
    /// never read back), which the first cannot see.
    pub(crate) fn page_out(&self) -> bool {
        use std::os::fd::AsRawFd;
        self.origin.forget_resident();
        // SAFETY: the range is this segment's mapping, kept alive by
        // `self.data`; MADV_PAGEOUT only drops pages, never their contents.
        let mapped = unsafe {
            libc::madvise(
                self.data.as_ptr() as *mut libc::c_void,
                self.data.len(),
                libc::MADV_PAGEOUT,
            ) == 0
        };
        let cached = File::open(&self.path).is_ok_and(|file| {
            // SAFETY: the descriptor is open for the call's duration.
            unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) == 0 }
        });
        mapped && cached
    }

    /// The number of heights a sealed segment holds.
    pub(crate) fn sealed_count(&self) -> Option<usize> {
        match &self.index {
            SegmentIndex::Sealed { count, .. } => Some(*count),
            SegmentIndex::Active { .. } => None,
        }
    }

    /// Opens the block at `height` (its fixed fields read and checked);
    /// its parts are read as asked, in the same way. `Unread::Cold` when
    /// `pages` is [`Pages::InMemory`] and the index entry, the record
    /// header or the fixed fields are not in memory.
    pub(crate) fn block(&self, height: u64, pages: Pages) -> Result<Option<Block>, Unread> {
        use crate::resident::in_memory;
        let i = (height - self.first_height) as usize;
        if pages == Pages::InMemory
            && let SegmentIndex::Sealed { index, count, .. } = &self.index
            && i < *count
        {
            let at = INDEX_HEADER_LEN + 8 * i;
            if !in_memory(index.get(at..at + 8).unwrap_or_default()) {
                return Err(Unread::Cold);
            }
        }
        let Some(offset) = self.offset(i) else {
            return Ok(None);
        };
        let at = offset as usize;
        let head = match pages {
            Pages::FromDisk => self
                .origin
                .pread(height, offset, format::RECORD_HEADER_LEN)?,
            Pages::MayWait | Pages::InMemory => {
                let head = self.data.slice(
                    at.min(self.data.len())..(at + format::RECORD_HEADER_LEN).min(self.data.len()),
                );
                if pages == Pages::InMemory && !self.origin.head_fresh(height) && !in_memory(&head)
                {
                    return Err(Unread::Cold);
                }
                head
            }
        };
        let Some(header) = format::read_header(&head)
            .filter(|h| format::is_block(h.kind) && h.height == height)
            .filter(|h| at + h.total_len() <= self.data.len())
        else {
            return Err(self
                .origin
                .damaged(height, "no block record header at its offset"));
        };
        let source = match pages {
            Pages::FromDisk => Source::File { offset },
            Pages::MayWait | Pages::InMemory => Source::Mapped {
                record: self.data.slice(at..at + header.total_len()),
                may_wait: pages == Pages::MayWait,
            },
        };
        Block::open(height, header, source, self.origin.clone()).map(Some)
    }

    /// Reads a record the writer itself just wrote or scanned.
    fn read_unchecked(&self, height: u64) -> Option<Block> {
        self.block(height, Pages::MayWait).ok().flatten()
    }

    /// Heights whose block hash may be `hash` (callers compare the record).
    pub(crate) fn block_candidates(&self, hash: &Hash) -> Vec<u64> {
        match &self.index {
            SegmentIndex::Active { hashes, .. } => {
                let hashes = hashes.read().unwrap_or_else(|p| p.into_inner());
                hashes.blocks.get(hash).copied().into_iter().collect()
            }
            SegmentIndex::Sealed { index, count, .. } => {
                let table = INDEX_HEADER_LEN + 8 * count;
                matching(index, table, *count, format::prefix(hash))
                    .map(|(delta, _)| self.first_height + delta as u64)
                    .collect()
            }
        }
    }

    /// Entries of a sealed segment's index, blocks then transactions:
    /// (hash prefix, height - first height, transaction index). Nothing for
    /// the segment being written.
    pub(crate) fn index_entries(&self) -> impl Iterator<Item = (u64, u32, Option<u32>)> + '_ {
        let (index, count, tx_count): (&[u8], usize, usize) = match &self.index {
            SegmentIndex::Sealed {
                index,
                count,
                tx_count,
            } => (index, *count, *tx_count),
            SegmentIndex::Active { .. } => (&[], 0, 0),
        };
        let table = INDEX_HEADER_LEN + 8 * count;
        (0..count + tx_count).map(move |i| {
            let at = table + i * INDEX_ENTRY_LEN;
            let (prefix, delta) = (format::u64_at(index, at), format::u32_at(index, at + 8));
            let tx = (i >= count).then(|| format::u32_at(index, at + 12));
            (prefix, delta, tx)
        })
    }

    /// How many entries [`Segment::index_entries`] yields.
    pub(crate) fn index_len(&self) -> usize {
        match &self.index {
            SegmentIndex::Sealed {
                count, tx_count, ..
            } => count + tx_count,
            SegmentIndex::Active { .. } => 0,
        }
    }

    /// (height, index) pairs whose transaction hash may be `hash`.
    pub(crate) fn tx_candidates(&self, hash: &Hash) -> Vec<(u64, u32)> {
        match &self.index {
            SegmentIndex::Active { hashes, .. } => {
                let hashes = hashes.read().unwrap_or_else(|p| p.into_inner());
                hashes.txs.get(hash).copied().into_iter().collect()
            }
            SegmentIndex::Sealed {
                index,
                count,
                tx_count,
            } => {
                let table = INDEX_HEADER_LEN + 8 * count + INDEX_ENTRY_LEN * count;
                matching(index, table, *tx_count, format::prefix(hash))
                    .map(|(delta, t)| (self.first_height + delta as u64, t))
                    .collect()
            }
        }
    }
}

/// Entries of a sorted hash table whose prefix equals `key`.
fn matching(
    index: &[u8],
    table: usize,
    len: usize,
    key: u64,
) -> impl Iterator<Item = (u32, u32)> + '_ {
    let prefix_at = move |i: usize| format::u64_at(index, table + i * INDEX_ENTRY_LEN);
    // Lower bound by binary search, then walk the (rarely >1) equal run.
    let (mut lo, mut hi) = (0, len);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if prefix_at(mid) < key {
            lo = mid + 1
        } else {
            hi = mid
        }
    }
    (lo..len)
        .take_while(move |i| prefix_at(*i) == key)
        .map(move |i| {
            let at = table + i * INDEX_ENTRY_LEN;
            (
                format::u32_at(index, at + 8),
                format::u32_at(index, at + 12),
            )
        })
}

pub(crate) fn check_index_header(
    index: &[u8],
    first_height: u64,
    file_len: u64,
) -> Option<(usize, usize)> {
    if index.len() < INDEX_HEADER_LEN || index[..8] != INDEX_MAGIC {
        return None;
    }
    if format::u32_at(index, 44) != crc32c::crc32c(&index[..44])
        || !format::readable(format::u32_at(index, 8))
    {
        return None;
    }
    let count = format::u32_at(index, 12) as usize;
    let tx_count = format::u32_at(index, 24) as usize;
    let expected = INDEX_HEADER_LEN + 8 * count + INDEX_ENTRY_LEN * (count + tx_count);
    let consistent = format::u64_at(index, 16) == first_height
        && format::u64_at(index, 32) == file_len
        && index.len() == expected
        && count > 0;
    consistent.then_some((count, tx_count))
}
