//! The files of a store's directory: their names, listing and removing
//! segment files, and the filesystem calls every write goes through
//! (atomic writes, renames, unlinks, directory syncs), each told to the
//! crash hook first.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use crate::error::{StoreError, io_error, sync_error};
use crate::format;
use crate::io::{CrashHook, StoreFile};

pub(crate) fn remove_segment(
    dir: &Path,
    first_height: u64,
    journal: Option<&dyn CrashHook>,
) -> Result<(), StoreError> {
    // Data first: an index without its segment is ignored and removed at
    // open, while a segment without its index is simply rebuilt.
    for name in [
        segment_file_name(first_height),
        index_file_name(first_height),
    ] {
        unlink(&dir.join(name), journal)?;
    }
    sync_dir(dir, journal)
}

/// First heights of the segment files in `dir`; removes leftovers of
/// interrupted writes (temporary files, indexes without a segment).
pub(crate) fn list_segments(dir: &Path) -> Result<Vec<u64>, StoreError> {
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

/// File name of the segment starting at `first_height`.
pub(crate) fn segment_file_name(first_height: u64) -> String {
    format!("{first_height:020}.seg")
}

/// File name of the index of the segment starting at `first_height`.
pub(crate) fn index_file_name(first_height: u64) -> String {
    format!("{first_height:020}.idx")
}

/// Writes `name` in `dir` so that it either exists whole or not at all.
pub(crate) fn write_atomically(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    journal: Option<&dyn CrashHook>,
) -> Result<(), StoreError> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut file = File::create(&tmp).map_err(io_error(&tmp, "creating"))?;
    file.write_all(bytes).map_err(io_error(&tmp, "writing"))?;
    file.sync_all().map_err(sync_error(&tmp, "syncing"))?;
    let path = dir.join(name);
    rename(&tmp, &path, journal)?;
    sync_dir(dir, journal)
}

/// Renames `from` over `to` (told to a crash journal first).
pub(crate) fn rename(
    from: &Path,
    to: &Path,
    journal: Option<&dyn CrashHook>,
) -> Result<(), StoreError> {
    if let Some(journal) = journal {
        journal
            .before_rename(to)
            .map_err(io_error(to, "renaming into place"))?;
    }
    std::fs::rename(from, to).map_err(io_error(to, "renaming into place"))
}

/// Unlinks `path`, which may already be gone (told to a crash journal
/// first).
pub(crate) fn unlink(path: &Path, journal: Option<&dyn CrashHook>) -> Result<(), StoreError> {
    if let Some(journal) = journal {
        journal
            .before_unlink(path)
            .map_err(io_error(path, "removing"))?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_error(path, "removing")(e)),
    }
}

/// Makes renames, creations and deletions in `dir` durable.
pub(crate) fn sync_dir(dir: &Path, journal: Option<&dyn CrashHook>) -> Result<(), StoreError> {
    if let Some(journal) = journal {
        journal
            .before_sync()
            .map_err(sync_error(dir, "syncing directory"))?;
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(sync_error(dir, "syncing directory"))?;
    if let Some(journal) = journal {
        journal.dir_synced();
    }
    Ok(())
}

/// Makes bytes `from..` of `file` read as zeros without ever making the
/// file shorter: readers may have it mapped, and touching a mapped page
/// past the end of a file kills the process (SIGBUS). Then grows the file
/// to at least `len`.
pub(crate) fn zero_tail(file: &StoreFile, from: u64, len: u64) -> Result<(), StoreError> {
    let path = file.path().to_path_buf();
    let current = file.len().map_err(io_error(&path, "reading the size"))?;
    file.zero(from, current)
        .map_err(io_error(&path, "zeroing the tail"))?;
    if current < len {
        file.set_len(len).map_err(io_error(&path, "sizing"))?;
    }
    Ok(())
}

/// Opens (creating if needed) a segment file for writing, sized to
/// `capacity` so the whole mapping is backed by the file (sparse, so the
/// unused part costs no disk).
pub(crate) fn open_for_writing(
    path: &Path,
    first_height: u64,
    capacity: u64,
    journal: Option<Arc<dyn CrashHook>>,
) -> Result<StoreFile, StoreError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(io_error(path, "opening for writing"))?;
    let file = StoreFile::new(file, path.to_path_buf(), journal);
    let len = file.len().map_err(io_error(path, "reading the size"))?;
    // Written unless whole: a write cut short by a full disk leaves a
    // shorter file, and the next attempt completes it.
    if len < format::SEGMENT_HEADER_LEN as u64 {
        let mut header = [0u8; format::SEGMENT_HEADER_LEN];
        header[..8].copy_from_slice(&format::SEGMENT_MAGIC);
        header[8..16].copy_from_slice(&first_height.to_le_bytes());
        file.write_all_at(&header, 0)
            .map_err(io_error(path, "writing header"))?;
    }
    // Grown, never shrunk: see [`zero_tail`].
    if len < capacity {
        file.set_len(capacity).map_err(io_error(path, "sizing"))?;
    }
    Ok(file)
}
