//! Where a stored block's bytes come from: the segment file its blocks
//! share (mapped, or read with `pread`, with `O_DIRECT` when the page cache
//! has no room), and what was checked of each height already.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use bytes::Bytes;

use crate::damage::Damage;
use crate::miss::Unread;

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
pub(crate) struct SegmentFile {
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

impl SegmentFile {
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
    ) -> SegmentFile {
        use std::os::fd::AsRawFd;
        // SAFETY: the descriptor is open for the call's duration; the
        // advice changes only how the kernel reads ahead.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
        SegmentFile {
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
    pub(crate) fn inherit(&self, other: &SegmentFile) {
        for (height, groups) in (other.first_height..).zip(other.verified.iter()) {
            self.add_verified(height, groups.load(Ordering::Relaxed));
        }
    }

    pub(crate) fn verified_groups(&self, height: u64) -> u64 {
        self.slot(height)
            .map_or(0, |i| self.verified[i].load(Ordering::Relaxed))
    }

    pub(crate) fn add_verified(&self, height: u64, groups: u64) {
        if let Some(i) = self.slot(height) {
            self.verified[i].fetch_or(groups, Ordering::Relaxed);
        }
    }

    /// The chunk groups of the record at `height` found in memory within
    /// the last [`crate::resident::FRESH_TICKS`].
    pub(crate) fn resident_groups(&self, height: u64) -> u64 {
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
    pub(crate) fn add_resident(&self, height: u64, groups: u64) {
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
