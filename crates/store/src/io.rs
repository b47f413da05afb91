//! Writes to segment files, through one seam. In production a segment file
//! is a plain file. In crash tests it also tells a [`CrashHook`] what
//! each write replaced, until a sync makes it durable, so a simulated power
//! loss can undo every write the disk had not been told to keep — the
//! failure a SIGKILL never shows, since the page cache survives it. Reads go
//! through memory maps of the same files and need no seam; META and index
//! files are written whole, synced, then renamed into place, so they are
//! durable or absent.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a crash test watches of the store's writes (set as
/// [`StoreConfig::crash_hook`](crate::config::StoreConfig::crash_hook)): each write,
/// resize and sync of a segment file, each unlink and rename in the store's
/// directory and each sync of it, told before it happens. An `Err` fails
/// the operation, as a full disk or lost power would.
pub trait CrashHook: Send + Sync + std::fmt::Debug {
    /// `len` bytes at `offset` of `file` (at `path`) are about to be written.
    fn before_write(&self, file: &File, path: &Path, offset: u64, len: usize) -> io::Result<()>;
    /// `file` (at `path`) is about to be resized to `len` bytes.
    fn before_resize(&self, file: &File, path: &Path, len: u64) -> io::Result<()>;
    /// A file or directory is about to be synced.
    fn before_sync(&self) -> io::Result<()>;
    /// The file at `path` was synced: its writes are durable.
    fn synced(&self, path: &Path);
    /// `path` is about to be unlinked.
    fn before_unlink(&self, path: &Path) -> io::Result<()>;
    /// A file is about to be renamed over `path`.
    fn before_rename(&self, path: &Path) -> io::Result<()>;
    /// The directory was synced: its unlinks and renames are durable.
    fn dir_synced(&self);
}

/// A segment file open for writing.
#[derive(Debug)]
pub(crate) struct StoreFile {
    file: File,
    path: PathBuf,
    journal: Option<Arc<dyn CrashHook>>,
}

impl StoreFile {
    pub(crate) fn new(file: File, path: PathBuf, journal: Option<Arc<dyn CrashHook>>) -> Self {
        StoreFile {
            file,
            path,
            journal,
        }
    }

    /// The file, for mapping it.
    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    pub(crate) fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        if let Some(journal) = &self.journal {
            journal.before_write(&self.file, &self.path, offset, bytes.len())?;
        }
        self.file.write_all_at(bytes, offset)
    }

    pub(crate) fn set_len(&self, len: u64) -> io::Result<()> {
        if let Some(journal) = &self.journal {
            journal.before_resize(&self.file, &self.path, len)?;
        }
        self.file.set_len(len)
    }

    pub(crate) fn sync_data(&self) -> io::Result<()> {
        self.sync_with(File::sync_data)
    }

    pub(crate) fn sync_all(&self) -> io::Result<()> {
        self.sync_with(File::sync_all)
    }

    /// A sync, told to the journal: what it makes durable is no longer undone.
    fn sync_with(&self, sync: fn(&File) -> io::Result<()>) -> io::Result<()> {
        if let Some(journal) = &self.journal {
            journal.before_sync()?;
        }
        sync(&self.file)?;
        if let Some(journal) = &self.journal {
            journal.synced(&self.path);
        }
        Ok(())
    }

    /// Makes `from..to` read as zeros: a punched hole where the filesystem
    /// can, else written zeros. The length does not change.
    pub(crate) fn zero(&self, from: u64, to: u64) -> io::Result<()> {
        use std::os::unix::io::AsRawFd;
        if from >= to {
            return Ok(());
        }
        if let Some(journal) = &self.journal {
            journal.before_write(&self.file, &self.path, from, (to - from) as usize)?;
        }
        // SAFETY: fallocate on a descriptor we own, with a range inside the file.
        let punched = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                from as libc::off_t,
                (to - from) as libc::off_t,
            )
        } == 0;
        if !punched {
            static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
            let mut at = from;
            while at < to {
                let n = (to - at).min(ZEROS.len() as u64) as usize;
                self.file.write_all_at(&ZEROS[..n], at)?;
                at += n as u64;
            }
        }
        Ok(())
    }
}
