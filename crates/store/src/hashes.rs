//! The store-wide hash table: block and transaction hash → height, for every
//! sealed segment at once, so a lookup by hash reads one table (a slot or
//! two of one page) whatever the number of segments.
//!
//! It is a cache of the sealed segments' `.idx` files and never the only
//! copy of anything:
//! - Heights below `covered_end` in sealed segments have all their entries
//!   in it; segments at or above it (the one being written, one sealed just
//!   before a crash) are looked up in their own indexes.
//! - Entries are written and synced before `covered_end` moves past them,
//!   and `covered_end` is lowered, durably, before a rollback changes a
//!   covered segment. So a covered hash is never missing.
//! - Entries are never removed: pruned and rolled-back heights leave stale
//!   ones, which readers skip by height and by comparing the record's hash
//!   (as they do for any prefix match). The table is rebuilt, whole, under
//!   a temporary name, when stale and live entries fill it.
//! - A damaged or missing table covers nothing; the writer's next append
//!   rebuilds it (and a full disk only delays that: lookups read the
//!   segments' own indexes meanwhile).
//!
//! Layout (`HASHES`): a 4,096-byte header page, then `capacity` slots of 16
//! bytes, open addressing with linear probing. Slot: key (u64 LE, the hash's
//! first 8 bytes; 0 marks an empty slot, so a key of 0 is stored as 1), then
//! value (u64 LE: height << 24 | tag, tag 0 for a block, 1 + index for a
//! transaction). Header: magic `NEVEHASH`, format version (u32), log2 of the
//! capacity (u32), `covered_end` (u64), slots used (u64), seed (u64), CRC-32C
//! of the 40 bytes before it.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::{Mmap, MmapMut};

use crate::config::Durability;
use crate::directory;
use crate::error::{StoreError, io_error, sync_error};
use crate::format::{self, u32_at, u64_at};
use crate::io::{CrashHook, StoreFile};
use crate::segment::Segment;
use crate::types::Hash;

pub(crate) const HASHES_FILE: &str = "HASHES";
const MAGIC: [u8; 8] = *b"NEVEHASH";
const HEADER_LEN: usize = 4096;
const SLOT_LEN: usize = 16;
/// The smallest table: 4,096 slots (64 KiB).
const MIN_CAPACITY_LOG2: u32 = 12;
/// Rebuilt when used slots would pass this share of the capacity (linear
/// probing stays short below it).
const MAX_LOAD: f64 = 0.7;
/// A rebuilt table has this many slots per live entry (rounded up to a power
/// of two), so about one full turnover of the tail fits before the next.
const SLOTS_PER_ENTRY: u64 = 3;
/// More uncovered segments than this are covered by a rebuild (sequential)
/// rather than by inserts (a write per entry).
const REBUILD_AFTER_SEGMENTS: usize = 8;
/// Transaction indexes must fit the 24-bit tag.
pub(crate) const MAX_TXS_PER_BLOCK: u32 = (1 << 24) - 2;

/// What a slot's value says.
pub(crate) fn block_value(height: u64) -> u64 {
    height << 24
}

pub(crate) fn tx_value(height: u64, index: u32) -> u64 {
    (height << 24) | (index as u64 + 1)
}

/// (height, transaction index) of a value; `None` index for a block.
pub(crate) fn decode(value: u64) -> (u64, Option<u32>) {
    let tag = (value & 0xFF_FFFF) as u32;
    (value >> 24, tag.checked_sub(1))
}

/// The read side: a mapping of the table file. Immutable for readers apart
/// from slots going from empty to used, which never breaks a probe chain.
pub(crate) struct HashTable {
    map: Option<Mmap>,
    mask: u64,
    seed: u64,
}

impl HashTable {
    fn home(&self, key: u64) -> u64 {
        // The seed keeps an adversary from choosing hashes that cluster.
        (key ^ self.seed)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(29)
            & self.mask
    }

    fn slot(&self, i: u64) -> (u64, u64) {
        match self.slot_bytes(i) {
            Some(slot) => (u64_at(slot, 0), u64_at(slot, 8)),
            None => (0, 0),
        }
    }

    fn slot_bytes(&self, i: u64) -> Option<&[u8]> {
        let map = self.map.as_deref().unwrap_or_default();
        let at = HEADER_LEN + i as usize * SLOT_LEN;
        map.get(at..at + SLOT_LEN)
    }

    /// Whether the slot a search for `hash` starts at is in memory (a
    /// search that probes on past its page may still touch another).
    pub(crate) fn home_in_memory(&self, hash: &Hash) -> bool {
        let i = self.home(stored_key(format::prefix(hash)));
        self.slot_bytes(i).is_none_or(crate::resident::in_memory)
    }

    /// Values stored under the prefix of `hash` (callers check the record).
    pub(crate) fn candidates(&self, hash: &Hash) -> impl Iterator<Item = u64> + '_ {
        let key = stored_key(format::prefix(hash));
        let mut i = self.home(key);
        let mut left = self.mask + 1;
        std::iter::from_fn(move || {
            while left > 0 {
                left -= 1;
                let (k, v) = self.slot(i);
                i = (i + 1) & self.mask;
                if k == 0 {
                    left = 0;
                } else if k == key {
                    return Some(v);
                }
            }
            None
        })
    }
}

fn stored_key(prefix: u64) -> u64 {
    prefix.max(1)
}

/// The writer's side: the table (when there is a usable one), what it
/// covers, and how full it is.
pub(crate) struct HashWriter {
    dir: PathBuf,
    /// `None` while there is no usable table (missing, damaged, or no room
    /// to build one): nothing is covered and the next cover builds it.
    open: Option<OpenTable>,
    covered_end: u64,
    journal: Option<Arc<dyn CrashHook>>,
}

struct OpenTable {
    file: StoreFile,
    table: Arc<HashTable>,
    used: u64,
}

struct Header {
    capacity_log2: u32,
    covered_end: u64,
    used: u64,
    seed: u64,
}

fn encode_header(h: &Header) -> [u8; 44] {
    let mut out = [0u8; 44];
    out[..8].copy_from_slice(&MAGIC);
    out[8..12].copy_from_slice(&format::FORMAT_VERSION.to_le_bytes());
    out[12..16].copy_from_slice(&h.capacity_log2.to_le_bytes());
    out[16..24].copy_from_slice(&h.covered_end.to_le_bytes());
    out[24..32].copy_from_slice(&h.used.to_le_bytes());
    out[32..40].copy_from_slice(&h.seed.to_le_bytes());
    let crc = crc32c::crc32c(&out[..40]);
    out[40..44].copy_from_slice(&crc.to_le_bytes());
    out
}

fn decode_header(bytes: &[u8], file_len: u64) -> Option<Header> {
    if bytes.len() < 44 || bytes[..8] != MAGIC || u32_at(bytes, 40) != crc32c::crc32c(&bytes[..40])
    {
        return None;
    }
    let header = Header {
        capacity_log2: u32_at(bytes, 12),
        covered_end: u64_at(bytes, 16),
        used: u64_at(bytes, 24),
        seed: u64_at(bytes, 32),
    };
    let fits = (MIN_CAPACITY_LOG2..48).contains(&header.capacity_log2)
        && file_len == file_len_for(header.capacity_log2);
    (format::readable(u32_at(bytes, 8)) && fits).then_some(header)
}

fn file_len_for(capacity_log2: u32) -> u64 {
    HEADER_LEN as u64 + ((SLOT_LEN as u64) << capacity_log2)
}

fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(std::process::id() as u64);
    hasher.finish()
}

/// Every (key, value) of a sealed segment's index.
fn entries_of(segment: &Segment) -> impl Iterator<Item = (u64, u64)> + '_ {
    segment.index_entries().map(move |(prefix, delta, tx)| {
        let height = segment.first_height + delta as u64;
        let value = match tx {
            None => block_value(height),
            Some(index) => tx_value(height, index),
        };
        (stored_key(prefix), value)
    })
}

impl HashWriter {
    /// Opens the table in `dir`, reading only its header. A missing or
    /// damaged one is left for the next [`HashWriter::cover`] to rebuild;
    /// until then nothing is covered. What it covers is capped at
    /// `sealed_end` (the end of the sealed segments found at open).
    pub(crate) fn open(
        dir: &Path,
        sealed_end: u64,
        journal: Option<Arc<dyn CrashHook>>,
    ) -> Result<HashWriter, StoreError> {
        let _ = std::fs::remove_file(dir.join(format!("{HASHES_FILE}.tmp")));
        let mut writer = HashWriter {
            dir: dir.to_path_buf(),
            open: None,
            covered_end: 0,
            journal,
        };
        if let Some((open, covered_end)) = writer.open_existing()? {
            writer.open = Some(open);
            writer.covered_end = covered_end.min(sealed_end);
        }
        Ok(writer)
    }

    fn open_existing(&self) -> Result<Option<(OpenTable, u64)>, StoreError> {
        let path = self.dir.join(HASHES_FILE);
        let file = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error(&path, "opening")(e)),
        };
        let len = file
            .metadata()
            .map_err(io_error(&path, "reading metadata"))?
            .len();
        // SAFETY: only this store's writer changes the file (through `pwrite`,
        // slot by slot), and it never shortens it; a rebuilt table replaces
        // it by rename, leaving this mapping intact.
        let map = unsafe { Mmap::map(&file) }.map_err(io_error(&path, "mapping"))?;
        let Some(header) = decode_header(&map, len) else {
            tracing::warn!(path = %path.display(), "hash table damaged; rebuilt at the next append");
            return Ok(None);
        };
        let table = HashTable {
            map: Some(map),
            mask: (1u64 << header.capacity_log2) - 1,
            seed: header.seed,
        };
        let open = OpenTable {
            file: StoreFile::new(file, path, self.journal.clone()),
            table: Arc::new(table),
            used: header.used,
        };
        Ok(Some((open, header.covered_end)))
    }

    /// The table readers should use, and the height below which it covers
    /// sealed segments.
    pub(crate) fn view(&self) -> (Option<Arc<HashTable>>, u64) {
        (
            self.open.as_ref().map(|o| o.table.clone()),
            self.covered_end,
        )
    }

    /// Covers every sealed segment in `sealed` (all of the store's, oldest
    /// first) not yet covered: inserts their entries, or rebuilds the table
    /// when there is none, when they are many, or when it would be too full.
    pub(crate) fn cover(
        &mut self,
        sealed: &[Arc<Segment>],
        durability: Durability,
    ) -> Result<(), StoreError> {
        let end_of = |s: &Segment| s.first_height + s.sealed_count().unwrap_or(0) as u64;
        let covered_end = self.covered_end;
        let pending: Vec<&Arc<Segment>> =
            sealed.iter().filter(|s| end_of(s) > covered_end).collect();
        let Some(last) = pending.last() else {
            return Ok(());
        };
        let new_end = end_of(last);
        let adding: u64 = pending.iter().map(|s| s.index_len() as u64).sum();
        let Some(open) = self.open.as_mut().filter(|open| {
            let capacity = (open.table.mask + 1) as f64;
            pending.len() <= REBUILD_AFTER_SEGMENTS
                && ((open.used + adding) as f64) <= capacity * MAX_LOAD
        }) else {
            return self.rebuild(sealed, new_end);
        };
        for segment in pending {
            for (key, value) in entries_of(segment) {
                open.insert(key, value)?;
            }
        }
        if durability == Durability::Fsync {
            open.file
                .sync_data()
                .map_err(sync_error(open.file.path(), "syncing"))?;
        }
        open.write_header(new_end, durability)?;
        self.covered_end = new_end;
        Ok(())
    }

    /// Stops covering heights from `height` up, durably, before a rollback
    /// changes them.
    pub(crate) fn uncover_from(
        &mut self,
        height: u64,
        durability: Durability,
    ) -> Result<(), StoreError> {
        if height >= self.covered_end {
            return Ok(());
        }
        if let Some(open) = self.open.as_mut() {
            open.write_header(height, durability)?;
        }
        self.covered_end = height;
        Ok(())
    }

    /// Writes a new table holding every entry of `sealed`, whole, under a
    /// temporary name, and renames it into place.
    fn rebuild(&mut self, sealed: &[Arc<Segment>], covered_end: u64) -> Result<(), StoreError> {
        let live: u64 = sealed.iter().map(|s| s.index_len() as u64).sum();
        let capacity_log2 = (live * SLOTS_PER_ENTRY)
            .next_power_of_two()
            .trailing_zeros()
            .max(MIN_CAPACITY_LOG2);
        let header = Header {
            capacity_log2,
            covered_end,
            used: live,
            seed: random_seed(),
        };
        let started = std::time::Instant::now();
        build(
            &self.dir,
            &header,
            sealed.iter().flat_map(|s| entries_of(s)),
            self.journal.as_deref(),
        )?;
        let (open, covered_end) = self.open_existing()?.ok_or_else(|| {
            StoreError::Corrupt(format!(
                "{} unreadable right after writing",
                self.dir.join(HASHES_FILE).display()
            ))
        })?;
        self.open = Some(open);
        self.covered_end = covered_end;
        tracing::info!(
            entries = live,
            slots = 1u64 << capacity_log2,
            ms = started.elapsed().as_millis() as u64,
            "rebuilt the hash table"
        );
        Ok(())
    }
}

impl OpenTable {
    fn write_header(&mut self, covered_end: u64, durability: Durability) -> Result<(), StoreError> {
        let header = encode_header(&Header {
            capacity_log2: (self.table.mask + 1).trailing_zeros(),
            covered_end,
            used: self.used,
            seed: self.table.seed,
        });
        let path = self.file.path().to_path_buf();
        self.file
            .write_all_at(&header, 0)
            .map_err(io_error(&path, "writing the header"))?;
        if durability == Durability::Fsync {
            self.file
                .sync_data()
                .map_err(sync_error(&path, "syncing"))?;
        }
        Ok(())
    }

    fn insert(&mut self, key: u64, value: u64) -> Result<(), StoreError> {
        let table = &self.table;
        let mut i = table.home(key);
        let mut probes = 0;
        while table.slot(i).0 != 0 {
            i = (i + 1) & table.mask;
            probes += 1;
            if probes > table.mask {
                return Err(StoreError::Corrupt(format!(
                    "{} has no free slot",
                    self.file.path().display()
                )));
            }
        }
        let mut slot = [0u8; SLOT_LEN];
        slot[..8].copy_from_slice(&key.to_le_bytes());
        slot[8..].copy_from_slice(&value.to_le_bytes());
        self.file
            .write_all_at(&slot, (HEADER_LEN + i as usize * SLOT_LEN) as u64)
            .map_err(io_error(self.file.path(), "writing"))?;
        self.used += 1;
        Ok(())
    }
}

/// Writes a table with `header` and `entries` to a temporary file through a
/// writable mapping, makes it durable and renames it to [`HASHES_FILE`].
fn build(
    dir: &Path,
    header: &Header,
    entries: impl Iterator<Item = (u64, u64)>,
    journal: Option<&dyn CrashHook>,
) -> Result<(), StoreError> {
    let tmp = dir.join(format!("{HASHES_FILE}.tmp"));
    let result = write_table(&tmp, header, entries);
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result?;
    let path = dir.join(HASHES_FILE);
    directory::rename(&tmp, &path, journal)?;
    directory::sync_dir(dir, journal)
}

fn write_table(
    tmp: &Path,
    header: &Header,
    entries: impl Iterator<Item = (u64, u64)>,
) -> Result<(), StoreError> {
    let file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(tmp)
        .map_err(io_error(tmp, "creating"))?;
    file.set_len(file_len_for(header.capacity_log2))
        .map_err(io_error(tmp, "sizing"))?;
    // Blocks are allocated up front so that a full disk is an error here,
    // not a SIGBUS when a page of the mapping is first written.
    // SAFETY: fallocate on a descriptor we own, within its length.
    let allocated = unsafe {
        use std::os::unix::io::AsRawFd;
        libc::fallocate(
            file.as_raw_fd(),
            0,
            0,
            file_len_for(header.capacity_log2) as libc::off_t,
        )
    };
    if allocated != 0 {
        let error = std::io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EOPNOTSUPP) {
            return Err(io_error(tmp, "allocating")(error));
        }
        // A file system without fallocate: writing the zeros allocates the
        // blocks just as well, and a full disk fails the write.
        write_zeros(&file, file_len_for(header.capacity_log2))
            .map_err(io_error(tmp, "allocating"))?;
    }
    // SAFETY: a file this function just created; nobody else maps it.
    let mut map = unsafe { MmapMut::map_mut(&file) }.map_err(io_error(tmp, "mapping"))?;
    let table = HashTable {
        map: None,
        mask: (1u64 << header.capacity_log2) - 1,
        seed: header.seed,
    };
    for (key, value) in entries {
        let mut i = table.home(key);
        loop {
            let at = HEADER_LEN + i as usize * SLOT_LEN;
            if u64_at(&map, at) == 0 {
                map[at..at + 8].copy_from_slice(&key.to_le_bytes());
                map[at + 8..at + 16].copy_from_slice(&value.to_le_bytes());
                break;
            }
            i = (i + 1) & table.mask;
        }
    }
    map[..44].copy_from_slice(&encode_header(header));
    map.flush().map_err(io_error(tmp, "writing"))?;
    drop(map);
    file.sync_all().map_err(sync_error(tmp, "syncing"))
}

/// Writes zeros over `0..len` of `file`, so every block is allocated
/// before the file is mapped.
fn write_zeros(file: &File, len: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let zeros = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(zeros.len() as u64) as usize;
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip() {
        assert_eq!(decode(block_value(7)), (7, None));
        assert_eq!(decode(tx_value(7, 0)), (7, Some(0)));
        assert_eq!(
            decode(tx_value((1 << 40) - 1, MAX_TXS_PER_BLOCK)),
            ((1 << 40) - 1, Some(MAX_TXS_PER_BLOCK))
        );
    }

    #[test]
    fn a_damaged_header_is_refused() {
        let header = Header {
            capacity_log2: MIN_CAPACITY_LOG2,
            covered_end: 5,
            used: 3,
            seed: 9,
        };
        let len = file_len_for(MIN_CAPACITY_LOG2);
        let bytes = encode_header(&header);
        assert!(decode_header(&bytes, len).is_some());
        assert!(decode_header(&bytes, len + 16).is_none());
        for at in 0..bytes.len() {
            let mut bad = bytes;
            bad[at] ^= 1;
            assert!(decode_header(&bad, len).is_none(), "flipped byte {at}");
        }
    }

    #[test]
    fn without_fallocate_the_zeros_are_written_so_every_block_is_allocated() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("t"))
            .unwrap();
        let len = (3 << 20) + 4096;
        file.set_len(len).unwrap();
        assert!(
            file.metadata().unwrap().blocks() * 512 < len,
            "sparse at first"
        );
        write_zeros(&file, len).unwrap();
        let meta = file.metadata().unwrap();
        assert_eq!(meta.len(), len);
        assert!(
            meta.blocks() * 512 >= len,
            "{} bytes allocated",
            meta.blocks() * 512
        );
    }
}
