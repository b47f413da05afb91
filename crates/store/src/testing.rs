//! Deterministic synthetic blocks for tests and benchmarks: JSON-shaped
//! sections of a chosen size with real spans, hashes derived from
//! (fork, height) so any height's content can be regenerated and compared.

use crate::io::CrashHook;
use crate::types::{Hash, LogEntry, NewBlock, Span, TxEntry};

/// Drops every record `reader` can read from memory, as memory pressure
/// would, so the next read of each waits for the disk; whether the kernel
/// did (it needs Linux 5.4's `MADV_PAGEOUT`).
pub fn page_out(reader: &crate::reader::Reader) -> bool {
    reader.page_out()
}

/// An owned block whose [`SyntheticBlock::as_new`] borrows it.
#[derive(Clone, Debug)]
pub struct SyntheticBlock {
    /// Height.
    pub height: u64,
    /// Hash.
    pub hash: Hash,
    /// Parent hash.
    pub parent_hash: Hash,
    /// Full block bytes.
    pub full: Vec<u8>,
    /// Hashes-only bytes.
    pub hashes_only: Vec<u8>,
    /// Receipts bytes.
    pub receipts: Vec<u8>,
    /// Raw block, as the JSON string `debug_getRawBlock` answers (`"0x…"`).
    pub raw_block: Vec<u8>,
    /// Transaction spans.
    pub txs: Vec<TxEntry>,
    /// Log spans.
    pub logs: Vec<LogEntry>,
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A 32-byte pseudo-hash of `(domain, a, b)`.
pub fn pseudo_hash(domain: u64, a: u64, b: u64) -> Hash {
    let mut out = [0u8; 32];
    let mut state = mix(domain ^ mix(a ^ mix(b)));
    for chunk in out.chunks_mut(8) {
        state = mix(state);
        chunk.copy_from_slice(&state.to_le_bytes());
    }
    out
}

/// The hash of block `height` on `fork`.
pub fn block_hash(fork: u64, height: u64) -> Hash {
    pseudo_hash(1, fork, height)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl SyntheticBlock {
    /// Block `height` of `fork` with `tx_count` transactions padded so the
    /// full block is roughly `tx_count * tx_bytes` bytes.
    pub fn new(fork: u64, height: u64, tx_count: u32, tx_bytes: usize) -> Self {
        let hash = block_hash(fork, height);
        let parent_hash = block_hash(fork, height.wrapping_sub(1));
        let mut full = format!(
            "{{\"number\":\"0x{height:x}\",\"hash\":\"0x{}\",\"transactions\":[",
            hex(&hash)
        )
        .into_bytes();
        let mut hashes_only =
            format!("{{\"number\":\"0x{height:x}\",\"transactions\":[").into_bytes();
        let mut receipts = b"[".to_vec();
        // Raw data is stored as the JSON values the upstream sent: the RLP
        // block as a quoted hex string, transaction spans over its digits.
        let mut raw_block = b"\"0xf90000".to_vec();
        let mut txs = Vec::new();
        let mut logs = Vec::new();
        for i in 0..tx_count {
            // Unique per (fork, height, index) for forks and heights below 2^32.
            let tx_hash = pseudo_hash(2, fork.rotate_left(32) ^ height, i as u64);
            if i > 0 {
                full.push(b',');
                hashes_only.push(b',');
                receipts.push(b',');
            }
            let pad = "p".repeat(tx_bytes.saturating_sub(120));
            let tx = format!(
                "{{\"hash\":\"0x{}\",\"i\":{i},\"pad\":\"{pad}\"}}",
                hex(&tx_hash)
            );
            let tx_span = Span::new(full.len() as u32, tx.len() as u32);
            full.extend_from_slice(tx.as_bytes());
            hashes_only.extend_from_slice(format!("\"0x{}\"", hex(&tx_hash)).as_bytes());
            let receipt_start = receipts.len();
            let log = format!("{{\"logIndex\":\"0x{i:x}\",\"block\":{height}}}");
            receipts.extend_from_slice(b"{\"status\":\"0x1\",\"logs\":[");
            let log_span = Span::new(receipts.len() as u32, log.len() as u32);
            receipts.extend_from_slice(log.as_bytes());
            receipts.extend_from_slice(b"]}");
            let raw_start = raw_block.len();
            raw_block.extend_from_slice(hex(&tx_hash[..8]).as_bytes());
            txs.push(TxEntry {
                hash: tx_hash,
                full: tx_span,
                receipt: Span::new(
                    receipt_start as u32,
                    (receipts.len() - receipt_start) as u32,
                ),
                raw: Span::new(raw_start as u32, 16),
            });
            logs.push(LogEntry {
                tx_index: i,
                span: log_span,
                address: [(i % 251) as u8; 20],
                topics: (0..(i % 5).min(4))
                    .map(|t| pseudo_hash(3, i as u64, t as u64))
                    .collect(),
            });
        }
        full.extend_from_slice(b"]}");
        hashes_only.extend_from_slice(b"]}");
        receipts.push(b']');
        raw_block.push(b'"');
        SyntheticBlock {
            height,
            hash,
            parent_hash,
            full,
            hashes_only,
            receipts,
            raw_block,
            txs,
            logs,
        }
    }

    /// A view to append.
    pub fn as_new(&self) -> NewBlock<'_> {
        NewBlock {
            height: self.height,
            hash: self.hash,
            parent_hash: self.parent_hash,
            logs_bloom: [self.height as u8; 256],
            full: &self.full,
            hashes_only: &self.hashes_only,
            receipts: &self.receipts,
            raw_header: b"\"0xf9beef\"",
            raw_block: &self.raw_block,
            raw_receipts: b"[]",
            txs: self.txs.clone(),
            logs: self.logs.clone(),
        }
    }
}

/// Simulated power loss for crash tests (set as
/// [`StoreConfig::crash_hook`](crate::config::StoreConfig::crash_hook)): it
/// remembers what each segment-file write replaced until a sync makes it
/// durable, and each unlink and rename in the store's directory until the
/// directory is synced; can make every write, sync, unlink and rename from
/// some point on fail (the moment power goes); and
/// [`CrashJournal::power_loss`] then undoes, newest first, every change the
/// disk was never told to keep.
#[derive(Debug, Default)]
pub struct CrashJournal {
    state: std::sync::Mutex<JournalState>,
}

#[derive(Debug, Default)]
struct JournalState {
    /// Writes and syncs that may still happen; `None`: no limit.
    ops_left: Option<u64>,
    /// The op (counted from the start) that fails once, as a full disk or
    /// an I/O error would, while every other goes through.
    fail_once_at: Option<u64>,
    crashed: bool,
    ops: u64,
    undo: Vec<(std::path::PathBuf, Undo)>,
}

#[derive(Debug)]
enum Undo {
    Bytes {
        offset: u64,
        old: Vec<u8>,
    },
    Len(u64),
    /// The path was unlinked; its file lives on at `backup` (a hard link)
    /// until the directory is synced.
    Unlink {
        backup: std::path::PathBuf,
    },
    /// A file was renamed over the path; what it replaced lives on at
    /// `backup` (or nothing was there) until the directory is synced.
    Replace {
        backup: Option<std::path::PathBuf>,
    },
}

fn power_went() -> std::io::Error {
    std::io::Error::other("simulated power loss")
}

impl CrashJournal {
    /// A journal with no crash planned.
    pub fn new() -> std::sync::Arc<Self> {
        std::sync::Arc::new(CrashJournal::default())
    }

    /// The next `ops` writes and syncs succeed; every one after fails.
    pub fn crash_after(&self, ops: u64) {
        self.state.lock().unwrap().ops_left = Some(ops);
    }

    /// Op number `op` (counted from now: writes, syncs, unlinks and
    /// renames) fails once with an I/O error; power stays on.
    pub fn fail_once(&self, op: u64) {
        let mut state = self.state.lock().unwrap();
        state.fail_once_at = Some(state.ops + op);
    }

    /// Writes and syncs so far (to choose crash points).
    pub fn ops(&self) -> u64 {
        self.state.lock().unwrap().ops
    }

    /// Whether the planned crash happened.
    pub fn crashed(&self) -> bool {
        self.state.lock().unwrap().crashed
    }

    /// Undoes every write not made durable, newest first, and forgets the
    /// crash: the files are what the disk would hold after power returns.
    pub fn power_loss(&self) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let mut state = self.state.lock().unwrap();
        for (path, undo) in state.undo.drain(..).rev() {
            match undo {
                Undo::Unlink { backup } => {
                    std::fs::rename(&backup, &path)?;
                    continue;
                }
                Undo::Replace {
                    backup: Some(backup),
                } => {
                    std::fs::rename(&backup, &path)?;
                    continue;
                }
                Undo::Replace { backup: None } => {
                    let _ = std::fs::remove_file(&path);
                    continue;
                }
                _ => {}
            }
            let Ok(file) = std::fs::OpenOptions::new().write(true).open(&path) else {
                continue; // removed since: nothing left to undo
            };
            match undo {
                Undo::Bytes { offset, old } => file.write_all_at(&old, offset)?,
                Undo::Len(len) => file.set_len(len)?,
                Undo::Unlink { .. } | Undo::Replace { .. } => unreachable!("handled above"),
            }
        }
        *state = JournalState::default();
        Ok(())
    }

    fn count(state: &mut JournalState) -> std::io::Result<()> {
        if state.crashed {
            return Err(power_went());
        }
        if state.fail_once_at == Some(state.ops) {
            state.fail_once_at = None;
            state.ops += 1;
            return Err(std::io::Error::other("simulated I/O error"));
        }
        if let Some(left) = state.ops_left.as_mut() {
            if *left == 0 {
                state.crashed = true;
                return Err(power_went());
            }
            *left -= 1;
        }
        state.ops += 1;
        Ok(())
    }

    /// A hard link keeping `path`'s file alive, named so no listing of the
    /// store takes it for one of its files.
    fn backup_of(state: &JournalState, path: &std::path::Path) -> std::path::PathBuf {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".journal-{}", state.ops));
        name.into()
    }
}

impl CrashHook for CrashJournal {
    fn before_write(
        &self,
        file: &std::fs::File,
        path: &std::path::Path,
        offset: u64,
        len: usize,
    ) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let mut state = self.state.lock().unwrap();
        Self::count(&mut state)?;
        let file_len = file.metadata()?.len();
        if offset + len as u64 > file_len {
            state.undo.push((path.to_path_buf(), Undo::Len(file_len)));
        }
        let kept = file_len.saturating_sub(offset).min(len as u64) as usize;
        let mut old = vec![0; kept];
        file.read_exact_at(&mut old, offset)?;
        state
            .undo
            .push((path.to_path_buf(), Undo::Bytes { offset, old }));
        Ok(())
    }

    fn before_resize(
        &self,
        file: &std::fs::File,
        path: &std::path::Path,
        len: u64,
    ) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let mut state = self.state.lock().unwrap();
        Self::count(&mut state)?;
        let file_len = file.metadata()?.len();
        if len < file_len {
            // Shortening loses bytes: remember them.
            let mut old = vec![0; (file_len - len) as usize];
            file.read_exact_at(&mut old, len)?;
            state
                .undo
                .push((path.to_path_buf(), Undo::Bytes { offset: len, old }));
        }
        state.undo.push((path.to_path_buf(), Undo::Len(file_len)));
        Ok(())
    }

    fn before_sync(&self) -> std::io::Result<()> {
        Self::count(&mut self.state.lock().unwrap())
    }

    fn synced(&self, path: &std::path::Path) {
        self.state.lock().unwrap().undo.retain(|(p, undo)| {
            p != path || matches!(undo, Undo::Unlink { .. } | Undo::Replace { .. })
        });
    }

    /// `path` is about to be unlinked: until the directory is synced, power
    /// loss brings it back.
    fn before_unlink(&self, path: &std::path::Path) -> std::io::Result<()> {
        let mut state = self.state.lock().unwrap();
        Self::count(&mut state)?;
        if path.exists() {
            let backup = Self::backup_of(&state, path);
            std::fs::hard_link(path, &backup)?;
            state
                .undo
                .push((path.to_path_buf(), Undo::Unlink { backup }));
        }
        Ok(())
    }

    /// A file is about to be renamed over `path`: until the directory is
    /// synced, power loss brings back what was there (or nothing).
    fn before_rename(&self, path: &std::path::Path) -> std::io::Result<()> {
        let mut state = self.state.lock().unwrap();
        Self::count(&mut state)?;
        let backup = if path.exists() {
            let backup = Self::backup_of(&state, path);
            std::fs::hard_link(path, &backup)?;
            Some(backup)
        } else {
            None
        };
        state
            .undo
            .push((path.to_path_buf(), Undo::Replace { backup }));
        Ok(())
    }

    /// The directory was synced: its unlinks and renames are durable.
    fn dir_synced(&self) {
        let mut state = self.state.lock().unwrap();
        state.undo.retain(|(_, undo)| match undo {
            Undo::Unlink { backup }
            | Undo::Replace {
                backup: Some(backup),
            } => {
                let _ = std::fs::remove_file(backup);
                false
            }
            Undo::Replace { backup: None } => false,
            _ => true,
        });
    }
}
