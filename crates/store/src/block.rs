//! A stored block as readers see it: a handle on one record that reads and
//! checks only the part asked for (a section, a transaction's spans, the
//! log or run table, a slice of the log section), so an answer costs the
//! bytes it answers, not the record they sit in.
//!
//! Opening a block reads its fixed fields (the first chunk). Every other
//! part is read when asked: through the segment's mapping (zero-copy; on an
//! async worker only when its pages are in memory, else [`Unread::Cold`]),
//! or with `pread` into memory of its own on a thread that may wait. Either
//! way the chunks the part lies in are checked against their CRCs first.

use std::fs::File;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use bytes::Bytes;

use crate::damage::Damage;
use crate::format::{
    self, CHUNK_CRC_LEN, CHUNK_LEN, LOG_ENTRY_LEN, Layout, RECORD_HEADER_LEN, RUN_ENTRY_LEN,
    RecordHeader, Section, body,
};
use crate::types::Hash;

/// Why a part of a block was not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unread {
    /// Its pages are not in memory and the read may not wait for the disk:
    /// read it again where it may ([`crate::reader::Reader::from_disk`]).
    Cold,
    /// Its bytes fail their checksum or do not fit their record: counted
    /// in [`crate::reader::Stats::corrupt_reads`], logged, and answered as a miss.
    Damaged,
}

impl From<crate::reader::Cold> for Unread {
    fn from(_: crate::reader::Cold) -> Self {
        Unread::Cold
    }
}

/// Alignment of `O_DIRECT` reads: offsets, lengths and buffers (a page,
/// which covers every logical block size Linux file systems use).
const DIRECT_ALIGN: usize = 4096;

/// A heap buffer aligned for `O_DIRECT`.
struct Aligned {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: it owns its allocation, like a Vec<u8>.
unsafe impl Send for Aligned {}
// SAFETY: shared access is read-only, like a Vec<u8>.
unsafe impl Sync for Aligned {}

impl Aligned {
    fn layout(len: usize) -> Option<std::alloc::Layout> {
        std::alloc::Layout::from_size_align(len.max(DIRECT_ALIGN), DIRECT_ALIGN).ok()
    }

    fn new(len: usize) -> Option<Aligned> {
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(Aligned::layout(len)?) };
        Some(Aligned {
            ptr: std::ptr::NonNull::new(ptr)?,
            len,
        })
    }

    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: `len` bytes were allocated and zeroed; `&mut self` is unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl AsRef<[u8]> for Aligned {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `len` bytes were allocated and zeroed.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        if let Some(layout) = Aligned::layout(self.len) {
            // SAFETY: allocated with this layout in `new`.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

/// What the blocks of one segment file share: the file for `pread`, its
/// path for messages, the store's count of damaged reads, and per height
/// what was checked already and when its head was last found in memory.
pub(crate) struct Origin {
    pub(crate) path: PathBuf,
    pub(crate) file: File,
    pub(crate) damage: Arc<Damage>,
    first_height: u64,
    /// Per height, 64 bits: bit `g` says chunk group `g` (the record's
    /// chunks split into 64 runs of equal count) was checked against its
    /// CRCs through the mapping. Checked once and remembered: a hot full
    /// block costs no CRC after its first read, while an answer of a few
    /// hundred bytes still checks only its own chunks. 8 bytes a height.
    verified: Box<[AtomicU64]>,
    /// Per height, the chunk groups (as in `verified`; group 0 with the
    /// record's header) last found in memory, and when
    /// ([`crate::resident::now`] ticks): within
    /// [`crate::resident::FRESH_TICKS`] they are taken to be there still,
    /// which spares a hot read its `mincore` calls.
    resident: Box<[AtomicU64]>,
    resident_at: Box<[AtomicU32]>,
    /// The file opened with `O_DIRECT` (once, when first needed; `None`
    /// where the file system refuses it), for reads while the memory cgroup
    /// has no room for more page cache: a cold part read so neither fills
    /// the page cache nor makes a memory-limited process reclaim it on
    /// every read, which buffered reads did (a 160 MiB group serving a 510
    /// MiB store: 2,929 req/s, p99 29 ms, against 16,213 and 2.5 ms).
    direct: std::sync::OnceLock<Option<File>>,
}

impl Origin {
    /// The origin of the blocks of the segment file `file` at `path`. Its
    /// reads are told the kernel to be random (`POSIX_FADV_RANDOM`): a
    /// part is read with one `pread` of exactly its chunks, and readahead
    /// around it would bring in (and hold in the page cache) hundreds of
    /// KiB of the record for an answer of a few hundred bytes.
    pub(crate) fn new(
        path: PathBuf,
        file: File,
        damage: Arc<Damage>,
        first_height: u64,
        heights: usize,
    ) -> Origin {
        use std::os::fd::AsRawFd;
        // SAFETY: the descriptor is open for the call's duration; the
        // advice changes only how the kernel reads ahead.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
        Origin {
            path,
            file,
            damage,
            first_height,
            verified: (0..heights).map(|_| AtomicU64::new(0)).collect(),
            resident: (0..heights).map(|_| AtomicU64::new(0)).collect(),
            resident_at: (0..heights).map(|_| AtomicU32::new(0)).collect(),
            direct: std::sync::OnceLock::new(),
        }
    }

    fn slot(&self, height: u64) -> Option<usize> {
        height
            .checked_sub(self.first_height)
            .map(|i| i as usize)
            .filter(|i| *i < self.verified.len())
    }

    /// Takes the whole record at `height` as checked: the writer computed
    /// its CRCs from these bytes, or the recovery scan checked them all.
    pub(crate) fn mark_verified(&self, height: u64) {
        if let Some(i) = self.slot(height) {
            self.verified[i].store(u64::MAX, Ordering::Relaxed);
        }
    }

    /// Forgets what was checked at `height` (a rollback's record replaced).
    pub(crate) fn forget(&self, height: u64) {
        if let Some(i) = self.slot(height) {
            self.verified[i].store(0, Ordering::Relaxed);
            self.resident_at[i].store(0, Ordering::Relaxed);
        }
    }

    /// Takes over what `other` (the same file, before sealing) checked.
    pub(crate) fn inherit(&self, other: &Origin) {
        for (height, groups) in (other.first_height..).zip(other.verified.iter()) {
            self.add_verified(height, groups.load(Ordering::Relaxed));
        }
    }

    fn verified_groups(&self, height: u64) -> u64 {
        self.slot(height)
            .map_or(0, |i| self.verified[i].load(Ordering::Relaxed))
    }

    fn add_verified(&self, height: u64, groups: u64) {
        if let Some(i) = self.slot(height) {
            self.verified[i].fetch_or(groups, Ordering::Relaxed);
        }
    }

    /// The chunk groups of the record at `height` found in memory within
    /// the last [`crate::resident::FRESH_TICKS`].
    fn resident_groups(&self, height: u64) -> u64 {
        let Some(i) = self.slot(height) else {
            return 0;
        };
        let seen = self.resident_at[i].load(Ordering::Relaxed);
        let fresh =
            seen != 0 && crate::resident::now().wrapping_sub(seen) < crate::resident::FRESH_TICKS;
        if fresh {
            self.resident[i].load(Ordering::Relaxed)
        } else {
            0
        }
    }

    /// Whether the header of the record at `height` was found in memory
    /// within the last [`crate::resident::FRESH_TICKS`].
    pub(crate) fn head_fresh(&self, height: u64) -> bool {
        self.resident_groups(height) & 1 != 0
    }

    /// Forgets what was found in memory (a test's pages were dropped on
    /// purpose).
    pub(crate) fn forget_resident(&self) {
        for at in self.resident_at.iter() {
            at.store(0, Ordering::Relaxed);
        }
    }

    /// Counts and logs damage found at `height`.
    pub(crate) fn damaged(&self, height: u64, what: &str) -> Unread {
        self.damage.found(height);
        tracing::error!(
            height,
            path = %self.path.display(),
            damage = what,
            "corrupt record answered as a miss"
        );
        Unread::Damaged
    }

    /// `len` bytes at `offset` of the file: through the page cache (told to
    /// be random: no readahead) while the memory cgroup has room for it,
    /// so what is read stays in memory for the next read; with `O_DIRECT`
    /// when it has not and the file system allows (the aligned span around
    /// them, a page or two more). See
    /// [`crate::resident::MIN_PAGE_CACHE_ROOM`].
    pub(crate) fn pread(&self, height: u64, offset: u64, len: usize) -> Result<Bytes, Unread> {
        use std::os::unix::fs::FileExt;
        if !crate::resident::page_cache_room_for(len)
            && let Some((span, at)) = self.read_direct(offset, len)
        {
            return Ok(span.slice(at..at + len));
        }
        let mut bytes = vec![0u8; len];
        match self.file.read_exact_at(&mut bytes, offset) {
            Ok(()) => Ok(Bytes::from(bytes)),
            Err(e) => Err(self.damaged(height, &format!("reading: {e}"))),
        }
    }

    /// Reads `len` bytes at `offset` with `O_DIRECT`: the aligned span that
    /// holds them, and where they start in it. `None` when the file cannot
    /// be read so (the caller reads it through the page cache).
    fn read_direct(&self, offset: u64, len: usize) -> Option<(Bytes, usize)> {
        use std::os::unix::fs::{FileExt, OpenOptionsExt};
        let file = self
            .direct
            .get_or_init(|| {
                std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_DIRECT)
                    .open(&self.path)
                    .ok()
            })
            .as_ref()?;
        let align = DIRECT_ALIGN as u64;
        let start = offset / align * align;
        let end = (offset + len as u64).div_ceil(align) * align;
        let mut buffer = Aligned::new((end - start) as usize)?;
        let needed = (offset - start) as usize + len;
        let mut got = 0;
        while got < needed {
            // The file may end before the aligned span does: a short read.
            match file.read_at(&mut buffer.as_mut()[got..], start + got as u64) {
                Ok(0) | Err(_) => return None,
                Ok(n) => got += n,
            }
        }
        Some((Bytes::from_owner(buffer), (offset - start) as usize))
    }

    /// Remembers that `groups` of the record at `height` are in memory now.
    fn add_resident(&self, height: u64, groups: u64) {
        let Some(i) = self.slot(height) else {
            return;
        };
        if self.resident_groups(height) == 0 {
            self.resident[i].store(groups, Ordering::Relaxed);
            self.resident_at[i].store(crate::resident::now(), Ordering::Relaxed);
        } else {
            self.resident[i].fetch_or(groups, Ordering::Relaxed);
        }
    }
}

/// Where a block's bytes are read from.
#[derive(Clone)]
pub(crate) enum Source {
    /// The record, sliced from the segment's mapping; without `may_wait`,
    /// a part whose pages are not all in memory is [`Unread::Cold`].
    Mapped { record: Bytes, may_wait: bool },
    /// The record at `offset` of the file, read with `pread`.
    File { offset: u64 },
}

/// The chunks `range` of a body lies in: `first..last`.
fn chunks_of(range: &Range<usize>) -> (usize, usize) {
    (range.start / CHUNK_LEN, range.end.div_ceil(CHUNK_LEN))
}

/// Bits `first..=last` of a 64-bit group mask.
fn group_bits(first: usize, last: usize) -> u64 {
    let (first, last) = (first.min(63), last.min(63));
    (u64::MAX >> (63 - last)) & (u64::MAX << first)
}

/// Of bytes read to check a part: the table entries and the chunks are
/// read with one `pread` (or asked about with one `mincore`) when no more
/// than this lies between them.
const JOINED_READ_GAP: usize = 64 * 1024;

/// A stored block: a handle that reads its parts when asked.
#[derive(Clone)]
pub struct Block {
    height: u64,
    header: RecordHeader,
    source: Source,
    origin: Arc<Origin>,
    /// The fixed fields (hash, parent, bloom, counts, section lengths),
    /// checked when the block was opened.
    fixed: Bytes,
    layout: Layout,
}

impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Block")
            .field("height", &self.height)
            .field("body_len", &self.header.body_len)
            .finish_non_exhaustive()
    }
}

impl Block {
    /// Opens the record `header` describes: reads and checks its fixed
    /// fields.
    pub(crate) fn open(
        height: u64,
        header: RecordHeader,
        source: Source,
        origin: Arc<Origin>,
    ) -> Result<Block, Unread> {
        let mut block = Block {
            height,
            header,
            source,
            origin,
            fixed: Bytes::new(),
            layout: Layout {
                tx_count: 0,
                log_count: 0,
                starts: [0; format::SECTIONS + 1],
                lens: [0; format::SECTIONS],
                body_len: header.body_len,
            },
        };
        block.fixed = block.part(0..body::FIXED_LEN)?;
        block.layout = Layout::of(&block.fixed, header.body_len)
            .ok_or_else(|| block.damaged("its tables and sections do not fit its length"))?;
        Ok(block)
    }

    fn damaged(&self, what: &str) -> Unread {
        self.origin.damaged(self.height, what)
    }

    /// A block over a record held in memory (tests of the format).
    #[cfg(test)]
    pub(crate) fn from_record(height: u64, record: &[u8]) -> Block {
        let header = format::read_header(record).expect("a record header");
        let origin = Arc::new(Origin::new(
            PathBuf::from("(memory)"),
            File::open("/dev/null").expect("/dev/null"),
            Arc::default(),
            height,
            1,
        ));
        let source = Source::Mapped {
            record: Bytes::copy_from_slice(record),
            may_wait: true,
        };
        Block::open(height, header, source, origin).expect("an intact record")
    }

    /// Body bytes `range`, after checking the chunks they lie in.
    fn part(&self, range: Range<usize>) -> Result<Bytes, Unread> {
        let body_len = self.header.body_len;
        if range.start > range.end || range.end > body_len {
            return Err(self.damaged("a span runs past its record"));
        }
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        let (first, last) = chunks_of(&range);
        let (table, chunks) = self.spans(first, last);
        let body_at = self.header.body_offset();
        let skip = range.start - first * CHUNK_LEN;
        match &self.source {
            Source::Mapped { record, may_wait } => {
                let (entries, bytes) = (&record[table.clone()], &record[chunks.clone()]);
                // Chunk groups: the record's chunks in 64 runs; a group is
                // remembered once a read checked all of it, and for a
                // second once it was found in memory.
                let count = self.header.chunks();
                let per_group = count.div_ceil(64).max(1);
                let (g0, g1) = (first / per_group, (last - 1) / per_group);
                let touched = group_bits(g0, g1);
                if !*may_wait && self.origin.resident_groups(self.height) & touched != touched {
                    // Whole groups asked first (one call, and remembered);
                    // only the part's own chunks when some of a group is
                    // out, so a part read in from the file is answered on
                    // the worker next time whatever its neighbours.
                    let (gfirst, glast) = (g0 * per_group, ((g1 + 1) * per_group).min(count));
                    let (mut gtable, gchunks) = self.spans(gfirst, glast);
                    if gfirst == 0 {
                        // Group 0 with the record's header: a fresh group 0
                        // spares the next open its header's `mincore`.
                        gtable.start = 0;
                    }
                    if self.mapped_in_memory(record, gtable, gchunks) {
                        self.origin.add_resident(self.height, touched);
                    } else if !self.mapped_in_memory(record, table.clone(), chunks.clone()) {
                        return Err(Unread::Cold);
                    }
                }
                if self.origin.verified_groups(self.height) & touched != touched {
                    if !format::chunks_match(entries, bytes) {
                        return Err(self.damaged("checksum mismatch"));
                    }
                    let whole_first = first.div_ceil(per_group);
                    let whole_last = if last == count { 64 } else { last / per_group };
                    if whole_first < whole_last {
                        self.origin
                            .add_verified(self.height, group_bits(whole_first, whole_last - 1));
                    }
                }
                Ok(record.slice(body_at + range.start..body_at + range.end))
            }
            Source::File { offset } => {
                let (entries, bytes) = if chunks.start - table.end <= JOINED_READ_GAP {
                    let read = self.origin.pread(
                        self.height,
                        offset + table.start as u64,
                        chunks.end - table.start,
                    )?;
                    (
                        read.slice(..table.len()),
                        read.slice(chunks.start - table.start..),
                    )
                } else {
                    (
                        self.origin
                            .pread(self.height, offset + table.start as u64, table.len())?,
                        self.origin.pread(
                            self.height,
                            offset + chunks.start as u64,
                            chunks.len(),
                        )?,
                    )
                };
                if !format::chunks_match(&entries, &bytes) {
                    return Err(self.damaged("checksum mismatch"));
                }
                Ok(bytes.slice(skip..skip + range.len()))
            }
        }
    }

    /// Whether the chunk table entries `table` and the chunks `chunks` of
    /// a mapped record are in memory: one `mincore` when they lie close
    /// (the fixed fields, a transaction's entry), two otherwise.
    fn mapped_in_memory(&self, record: &Bytes, table: Range<usize>, chunks: Range<usize>) -> bool {
        use crate::resident::in_memory;
        if chunks.start - table.end <= JOINED_READ_GAP {
            in_memory(&record[table.start..chunks.end])
        } else {
            in_memory(&record[table]) && in_memory(&record[chunks])
        }
    }

    /// Where the chunk table entries of chunks `first..last` lie in the
    /// record, and where those chunks do.
    fn spans(&self, first: usize, last: usize) -> (Range<usize>, Range<usize>) {
        let body_at = self.header.body_offset();
        (
            RECORD_HEADER_LEN + first * CHUNK_CRC_LEN..RECORD_HEADER_LEN + last * CHUNK_CRC_LEN,
            body_at + first * CHUNK_LEN..body_at + (last * CHUNK_LEN).min(self.header.body_len),
        )
    }

    /// Whether reading `ranges` of the body now touches only pages in
    /// memory (always, read from the file or where reads may wait).
    fn parts_in_memory(&self, ranges: &[Range<usize>]) -> bool {
        let Source::Mapped { record, .. } = &self.source else {
            return true;
        };
        ranges.iter().filter(|r| !r.is_empty()).all(|range| {
            let (first, last) = chunks_of(range);
            let (table, chunks) = self.spans(first, last);
            self.mapped_in_memory(record, table, chunks)
        })
    }

    /// Its height.
    pub fn height(&self) -> u64 {
        self.height
    }

    /// Its hash.
    pub fn hash(&self) -> Hash {
        format::hash_at(&self.fixed, body::HASH)
    }

    /// Its parent's hash.
    pub fn parent_hash(&self) -> Hash {
        format::hash_at(&self.fixed, body::PARENT_HASH)
    }

    /// The header's logs bloom.
    pub fn logs_bloom(&self) -> &[u8] {
        &self.fixed[body::LOGS_BLOOM..body::LOGS_BLOOM + 256]
    }

    /// Number of transactions.
    pub fn tx_count(&self) -> u32 {
        self.layout.tx_count
    }

    /// Number of logs.
    pub fn log_count(&self) -> u32 {
        self.layout.log_count
    }

    fn section(&self, section: Section) -> Result<Bytes, Unread> {
        self.part(self.layout.section(section as usize))
    }

    /// The block with full transactions, bytes as the upstream sent them.
    pub fn full(&self) -> Result<Bytes, Unread> {
        self.section(Section::Full)
    }

    /// The block with transaction hashes only.
    pub fn hashes_only(&self) -> Result<Bytes, Unread> {
        self.section(Section::HashesOnly)
    }

    /// The receipts array, bytes as the upstream sent them.
    pub fn receipts(&self) -> Result<Bytes, Unread> {
        self.section(Section::Receipts)
    }

    /// Raw header as the upstream sent it; empty when not stored.
    pub fn raw_header(&self) -> Result<Bytes, Unread> {
        self.section(Section::RawHeader)
    }

    /// Raw block as the upstream sent it; empty when not stored.
    pub fn raw_block(&self) -> Result<Bytes, Unread> {
        self.section(Section::RawBlock)
    }

    /// Raw receipts as the upstream sent them; empty when not stored.
    pub fn raw_receipts(&self) -> Result<Bytes, Unread> {
        self.section(Section::RawReceipts)
    }

    /// The hashes of its transactions, in order (one read of the table).
    pub fn tx_hashes(&self) -> Result<impl Iterator<Item = Hash> + use<>, Unread> {
        let table = self.part(self.layout.tx_table())?;
        Ok((0..self.tx_count() as usize)
            .map(move |i| format::hash_at(&table, i * format::TX_ENTRY_LEN)))
    }

    /// The hash of transaction `index` (which must be below
    /// [`Block::tx_count`], else the block is taken as damaged).
    pub fn tx_hash(&self, index: u32) -> Result<Hash, Unread> {
        if index >= self.tx_count() {
            return Err(self.damaged("an index entry names a transaction past the block's"));
        }
        Ok(format::hash_at(&self.part(self.layout.tx_entry(index))?, 0))
    }

    /// The span at byte `at` of transaction `index`'s table entry, in
    /// `section`; `None` past the last transaction.
    fn tx_span(&self, index: u32, at: usize, section: Section) -> Result<Option<Bytes>, Unread> {
        if index >= self.tx_count() {
            return Ok(None);
        }
        let entry = self.part(self.layout.tx_entry(index))?;
        let (offset, len) = (
            format::u32_at(&entry, at) as usize,
            format::u32_at(&entry, at + 4) as usize,
        );
        let within = self.layout.section(section as usize);
        if offset + len > within.len() {
            return Err(self.damaged("a transaction's span runs past its section"));
        }
        let start = within.start + offset;
        self.part(start..start + len).map(Some)
    }

    /// Transaction `index` as it appears in the full block; `None` past
    /// the last.
    pub fn transaction(&self, index: u32) -> Result<Option<Bytes>, Unread> {
        self.tx_span(index, 32, Section::Full)
    }

    /// The receipt of transaction `index`; `None` past the last.
    pub fn receipt(&self, index: u32) -> Result<Option<Bytes>, Unread> {
        self.tx_span(index, 40, Section::Receipts)
    }

    /// The hex digits of transaction `index`'s EIP-2718 encoding, inside the
    /// raw block (empty when not stored); `None` past the last.
    pub fn raw_transaction(&self, index: u32) -> Result<Option<Bytes>, Unread> {
        self.tx_span(index, 48, Section::RawBlock)
    }

    /// The run table and the log section, as ranges of the body.
    fn runs_and_logs(&self) -> Result<(Range<usize>, Range<usize>), Unread> {
        let count = format::u32_at(&self.part(self.layout.run_count_at())?, 0);
        self.layout
            .runs_and_logs(count)
            .ok_or_else(|| self.damaged("its run table does not fit"))
    }

    /// Whether reading its logs (tables and log section) now touches only
    /// pages in memory: what a short `eth_getLogs` asks before it scans on
    /// an async worker.
    pub fn logs_in_memory(&self) -> bool {
        if self.log_count() == 0 {
            return true;
        }
        let count_at = self.layout.run_count_at();
        if !self.parts_in_memory(std::slice::from_ref(&count_at)) {
            return false;
        }
        match self.runs_and_logs() {
            Ok((runs, logs)) => self.parts_in_memory(&[runs, logs, self.layout.log_table()]),
            Err(_) => true,
        }
    }

    /// The block's emitter runs: consecutive logs sharing their address
    /// and first topic, each read from one run table entry without
    /// touching the log table.
    pub fn emitter_runs(&self) -> Result<Runs, Unread> {
        let (runs, _) = self.runs_and_logs()?;
        Ok(Runs(self.part(runs)?))
    }

    /// The log table: what filters match on, and where each log lies.
    pub fn log_table(&self) -> Result<LogTable, Unread> {
        let (_, logs) = self.runs_and_logs()?;
        Ok(LogTable {
            table: self.part(self.layout.log_table())?,
            log_section_len: logs.len() as u32,
        })
    }

    /// Bytes `start..end` of the log section, as an [`EmitterRun`] or
    /// [`LogTable::piece`] gives them (pieces that touch join into one):
    /// one slice, never a copy, checked on its own.
    pub fn log_slice(&self, start: u32, end: u32) -> Result<Bytes, Unread> {
        let (_, logs) = self.runs_and_logs()?;
        if start > end || end as usize > logs.len() {
            return Err(self.damaged("a log slice runs past the log section"));
        }
        self.part(logs.start + start as usize..logs.start + end as usize)
    }

    /// The logs of the block, in order, with what filters match on (the
    /// log table and the whole log section: for subscriptions, which send
    /// every matching log of a new block).
    pub fn logs(&self) -> Result<Vec<Log>, Unread> {
        let table = self.log_table()?;
        let (_, section) = self.runs_and_logs()?;
        let bytes = self.part(section)?;
        (0..self.log_count())
            .map(|i| {
                let (start, end) = table.piece(i);
                let entry = table.entry(i);
                if start >= end || end as usize > bytes.len() {
                    return Err(self.damaged("a log's span runs past the log section"));
                }
                let topic_count = entry[32].min(4) as usize;
                Ok(Log {
                    tx_index: format::u32_at(entry, 0),
                    address: entry[12..32].try_into().expect("20 bytes"),
                    topics: std::array::from_fn(|t| format::hash_at(entry, 36 + 32 * t)),
                    topic_count,
                    bytes: bytes.slice(start as usize + 1..end as usize),
                })
            })
            .collect()
    }
}

/// A block's emitter-run table, checked ([`Block::emitter_runs`]).
pub struct Runs(Bytes);

impl Runs {
    /// The runs, in log order.
    pub fn iter(&self) -> impl Iterator<Item = EmitterRun<'_>> + '_ {
        self.0.chunks_exact(RUN_ENTRY_LEN).map(|entry| {
            let fewest_topics = entry[format::run::FEWEST_TOPICS];
            EmitterRun {
                first: format::u32_at(entry, format::run::FIRST),
                count: format::u32_at(entry, format::run::COUNT),
                start: format::u32_at(entry, format::run::START),
                end: format::u32_at(entry, format::run::END),
                address: entry[format::run::ADDRESS..format::run::ADDRESS + 20]
                    .try_into()
                    .expect("20 bytes"),
                topic0: (fewest_topics > 0).then(|| {
                    entry[format::run::TOPIC0..format::run::TOPIC0 + 32]
                        .try_into()
                        .expect("32 bytes")
                }),
                fewest_topics,
            }
        })
    }
}

/// A block's log table, checked ([`Block::log_table`]).
pub struct LogTable {
    table: Bytes,
    log_section_len: u32,
}

impl LogTable {
    fn entry(&self, index: u32) -> &[u8] {
        let at = index as usize * LOG_ENTRY_LEN;
        self.table
            .get(at..at + LOG_ENTRY_LEN)
            .unwrap_or(&[0; LOG_ENTRY_LEN])
    }

    /// How many logs it describes.
    pub fn len(&self) -> u32 {
        (self.table.len() / LOG_ENTRY_LEN) as u32
    }

    /// Whether it describes no logs.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// What a filter matches log `index` on.
    pub fn key(&self, index: u32) -> LogKey<'_> {
        let entry = self.entry(index);
        let topic_count = entry[32].min(4) as usize;
        let (topics, _) = entry[36..36 + 32 * topic_count].as_chunks::<32>();
        LogKey {
            index,
            address: entry[12..32].try_into().expect("20 bytes"),
            topics,
        }
    }

    /// Where log `index` lies in the log section, from the comma before it
    /// to its end, for [`Block::log_slice`] (clamped to the section: a
    /// damaged entry yields a slice the block refuses, never a panic).
    pub fn piece(&self, index: u32) -> (u32, u32) {
        let entry = self.entry(index);
        let offset = format::u32_at(entry, 4).max(1);
        let end = offset.saturating_add(format::u32_at(entry, 8));
        (
            (offset - 1).min(self.log_section_len),
            end.min(self.log_section_len),
        )
    }
}

/// Consecutive logs of one block that share their address and first topic
/// (or have no topics), from the block's run table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmitterRun<'a> {
    /// Index of its first log.
    pub first: u32,
    /// How many logs it holds (at least one).
    pub count: u32,
    /// Where its logs lie in the log section, each after a comma, from the
    /// comma before the first: `start..end` for [`Block::log_slice`].
    pub start: u32,
    /// See `start`.
    pub end: u32,
    /// The address its logs share.
    pub address: &'a [u8; 20],
    /// The first topic its logs share; `None` when they have no topics.
    pub topic0: Option<&'a Hash>,
    /// The fewest topics any of its logs has.
    pub fewest_topics: u8,
}

/// A log's address and topics, borrowed from its block's log table.
#[derive(Clone, Copy, Debug)]
pub struct LogKey<'a> {
    /// Its position among the block's logs.
    pub index: u32,
    /// The emitting contract.
    pub address: &'a [u8; 20],
    /// Its topics.
    pub topics: &'a [Hash],
}

/// One log of a stored block.
#[derive(Clone, Debug)]
pub struct Log {
    /// Index of the emitting transaction.
    pub tx_index: u32,
    /// The emitting contract.
    pub address: [u8; 20],
    topics: [Hash; 4],
    topic_count: usize,
    /// The log object, bytes as the upstream sent them.
    pub bytes: Bytes,
}

impl Log {
    /// Its topics.
    pub fn topics(&self) -> &[Hash] {
        &self.topics[..self.topic_count]
    }
}
