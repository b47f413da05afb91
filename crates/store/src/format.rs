//! Byte layouts of the store's files. `docs/store-format.md` is the spec;
//! the constants here are its widths and offsets, and the tests at the bottom
//! pin them so a moved field fails loudly. All integers are little-endian.

use crate::types::{Hash, LogEntry, NewBlock, Span, TxEntry};

/// The store format this build writes and reads. Version 4 checks a
/// record in 4 KiB chunks, each with a CRC of its own, so a read checks
/// the bytes it returns rather than the whole record; stores of versions 1
/// to 3 (one CRC a record) are refused with [`crate::error::StoreError::FormatVersion`]
/// and re-ingested (docs/store-format.md, "Upgrading").
pub const FORMAT_VERSION: u32 = 4;

/// Whether this build reads files of format `version`.
pub(crate) fn readable(version: u32) -> bool {
    version == FORMAT_VERSION
}

// ---- record header (24 bytes), in front of every record in a segment ----

/// `b"NVRC"` read as a little-endian u32.
pub const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"NVRC");
/// Record header length.
pub const RECORD_HEADER_LEN: usize = 24;
/// Record kind: a rollback tombstone; its height is the last height kept.
pub const KIND_ROLLBACK: u8 = 2;
/// Record kind: a block (format version 4): its chunk table, then a body
/// of tables, sections, log section and emitter-run table. Kinds 1, 3 and
/// 4 were the blocks of versions 1 to 3, which this build does not read.
pub const KIND_BLOCK: u8 = 5;

/// The bytes one CRC of a block's chunk table covers: 4 KiB, a page, so
/// an answer of a few hundred bytes checks at most two chunks, and the
/// table costs 0.1 % of the body.
pub const CHUNK_LEN: usize = 4096;
/// A chunk table entry: the u32 CRC-32C of one chunk.
pub const CHUNK_CRC_LEN: usize = 4;

/// Whether a record of `kind` is a block.
pub(crate) fn is_block(kind: u8) -> bool {
    kind == KIND_BLOCK
}

/// How many chunks a body of `body_len` bytes has.
pub(crate) fn chunk_count(body_len: usize) -> usize {
    body_len.div_ceil(CHUNK_LEN)
}

/// Header field offsets.
pub mod header {
    /// u32 magic.
    pub const MAGIC: usize = 0;
    /// u8 kind; bytes 5..8 are reserved zero.
    pub const KIND: usize = 4;
    /// u64 height.
    pub const HEIGHT: usize = 8;
    /// u32 body length.
    pub const BODY_LEN: usize = 16;
    /// u32 CRC-32C of header bytes 4..20 (the chunk table checks the
    /// body, a chunk at a time).
    pub const CRC: usize = 20;
}

// ---- block record body ----

/// Body field offsets; sections follow the tables in this order: full,
/// hashes-only, receipts, raw header, raw block, raw receipts.
pub mod body {
    /// [32] block hash.
    pub const HASH: usize = 0;
    /// [32] parent hash.
    pub const PARENT_HASH: usize = 32;
    /// [256] the header's logs bloom.
    pub const LOGS_BLOOM: usize = 64;
    /// u32 transaction count.
    pub const TX_COUNT: usize = 320;
    /// u32 log count.
    pub const LOG_COUNT: usize = 324;
    /// 6 × u32 section lengths.
    pub const SECTION_LENS: usize = 328;
    /// Start of the transaction table.
    pub const FIXED_LEN: usize = 352;
}

/// The six byte sections of a block record, in body order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    /// The block with full transactions, as the upstream sent it.
    Full = 0,
    /// The block with transaction hashes only.
    HashesOnly = 1,
    /// The block's receipts array, as the upstream sent it.
    Receipts = 2,
    /// Raw header, as the upstream's JSON value (may be empty).
    RawHeader = 3,
    /// Raw block, as the upstream's JSON value (may be empty).
    RawBlock = 4,
    /// Raw receipts, as the upstream's JSON value (may be empty).
    RawReceipts = 5,
}

/// Number of sections.
pub const SECTIONS: usize = 6;

/// Transaction table entry: [32] hash, then (offset u32, len u32) spans into
/// the full, receipts and raw-block sections.
pub const TX_ENTRY_LEN: usize = 56;
/// Log table entry: u32 tx index, span (u32, u32) into the log section,
/// [20] address, u8 topic count, [3] zero, 4 × [32]
/// topics (unused ones zero).
pub const LOG_ENTRY_LEN: usize = 164;

/// Emitter-run table entry: a maximal run of consecutive logs
/// with the same address and the same first topic (or none).
pub const RUN_ENTRY_LEN: usize = 72;
/// The u32 run count that ends a block body, after the run table.
pub const RUN_COUNT_LEN: usize = 4;

/// Emitter-run entry field offsets.
pub mod run {
    /// u32 index of its first log.
    pub const FIRST: usize = 0;
    /// u32 number of its logs (at least 1).
    pub const COUNT: usize = 4;
    /// u32 offset in the log section of the comma before its first log.
    pub const START: usize = 8;
    /// u32 offset in the log section just past its last log.
    pub const END: usize = 12;
    /// [20] the address its logs share.
    pub const ADDRESS: usize = 16;
    /// u8 the fewest topics any of its logs has (0: none has any, and
    /// the first topic is zero); bytes 37..40 are reserved zero.
    pub const FEWEST_TOPICS: usize = 36;
    /// [32] the first topic its logs share.
    pub const TOPIC0: usize = 40;
}

/// Consecutive logs with the same emitter and first topic, as
/// `(first index, count)`: what one run-table entry covers.
fn emitter_runs(logs: &[LogEntry]) -> Vec<(usize, usize)> {
    let key = |log: &LogEntry| (log.address, log.topics.first().copied());
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (i, log) in logs.iter().enumerate() {
        match runs.last_mut() {
            Some((first, count)) if key(&logs[*first]) == key(log) => *count += 1,
            _ => runs.push((i, 1)),
        }
    }
    runs
}

// ---- segment file header (16 bytes) ----

/// `b"NEVESEG\0"`.
pub const SEGMENT_MAGIC: [u8; 8] = *b"NEVESEG\0";
/// Segment header length; the first record starts here.
pub const SEGMENT_HEADER_LEN: usize = 16;

// ---- index file of a sealed segment ----

/// `b"NEVEIDX\0"`.
pub const INDEX_MAGIC: [u8; 8] = *b"NEVEIDX\0";
/// Index header length: magic, u32 version, u32 block count, u64 first
/// height, u32 tx count, u32 reserved, u64 segment length, u32 reserved,
/// u32 CRC-32C of bytes 0..44.
pub const INDEX_HEADER_LEN: usize = 48;
/// Hash-table entry: u64 hash prefix, u32 height delta, u32 tx index.
pub const INDEX_ENTRY_LEN: usize = 16;

// ---- META file ----

/// `b"NEVEMETA"`.
pub const META_MAGIC: [u8; 8] = *b"NEVEMETA";
/// META length: magic, u32 version, u32 segment blocks, u64 chain id, [32]
/// genesis hash, u64 segment bytes, u32 reserved, u32 CRC-32C of 0..68.
pub const META_LEN: usize = 72;

pub(crate) fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

pub(crate) fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

pub(crate) fn hash_at(bytes: &[u8], at: usize) -> Hash {
    bytes[at..at + 32].try_into().expect("32 bytes")
}

/// The first 8 bytes of a hash, the key of the index tables.
pub(crate) fn prefix(hash: &Hash) -> u64 {
    u64::from_le_bytes(hash[..8].try_into().expect("8 bytes"))
}

fn push_span(out: &mut Vec<u8>, span: Span) {
    out.extend_from_slice(&span.offset.to_le_bytes());
    out.extend_from_slice(&span.len.to_le_bytes());
}

/// Why a block cannot be encoded.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum EncodeError {
    SpanOutOfBounds(&'static str),
    TooManyTopics,
    TooLarge,
}

/// Encodes a whole block record (header and body) onto `out`.
// Long: one pass lays out the record's parts in the spec's order.
pub(crate) fn encode_block(block: &NewBlock<'_>, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let sections: [&[u8]; SECTIONS] = [
        block.full,
        block.hashes_only,
        block.receipts,
        block.raw_header,
        block.raw_block,
        block.raw_receipts,
    ];
    check_spans(block)?;
    // The log section: every log's bytes, each after a comma, so that any
    // run of consecutive logs is one slice with its separator in front.
    let log_section_len: usize = block.logs.iter().map(|l| 1 + l.span.len as usize).sum();
    let runs = emitter_runs(&block.logs);
    let body_len = body::FIXED_LEN
        + block.txs.len() * TX_ENTRY_LEN
        + block.logs.len() * LOG_ENTRY_LEN
        + sections.iter().map(|s| s.len()).sum::<usize>()
        + log_section_len
        + runs.len() * RUN_ENTRY_LEN
        + RUN_COUNT_LEN;
    let body_len = u32::try_from(body_len).map_err(|_| EncodeError::TooLarge)?;
    let chunks = chunk_count(body_len as usize);
    let start = out.len();
    out.reserve(RECORD_HEADER_LEN + chunks * CHUNK_CRC_LEN + body_len as usize);
    out.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
    out.extend_from_slice(&[KIND_BLOCK, 0, 0, 0]);
    out.extend_from_slice(&block.height.to_le_bytes());
    out.extend_from_slice(&body_len.to_le_bytes());
    out.extend_from_slice(&[0; 4]); // CRC, filled below
    out.resize(out.len() + chunks * CHUNK_CRC_LEN, 0); // chunk table, filled below
    out.extend_from_slice(&block.hash);
    out.extend_from_slice(&block.parent_hash);
    out.extend_from_slice(&block.logs_bloom);
    out.extend_from_slice(&(block.txs.len() as u32).to_le_bytes());
    out.extend_from_slice(&(block.logs.len() as u32).to_le_bytes());
    for section in sections {
        out.extend_from_slice(&(section.len() as u32).to_le_bytes());
    }
    for tx in &block.txs {
        out.extend_from_slice(&tx.hash);
        push_span(out, tx.full);
        push_span(out, tx.receipt);
        push_span(out, tx.raw);
    }
    let mut log_offset = 0u32;
    for log in &block.logs {
        out.extend_from_slice(&log.tx_index.to_le_bytes());
        log_offset += 1; // its comma
        push_span(
            out,
            Span {
                offset: log_offset,
                len: log.span.len,
            },
        );
        log_offset += log.span.len;
        out.extend_from_slice(&log.address);
        out.extend_from_slice(&[log.topics.len() as u8, 0, 0, 0]);
        for i in 0..4 {
            out.extend_from_slice(log.topics.get(i).unwrap_or(&[0; 32]));
        }
    }
    for section in sections {
        out.extend_from_slice(section);
    }
    for log in &block.logs {
        let start = log.span.offset as usize;
        out.push(b',');
        out.extend_from_slice(&block.receipts[start..start + log.span.len as usize]);
    }
    let mut run_start = 0u32;
    for &(first, count) in &runs {
        let logs = &block.logs[first..first + count];
        let run_end = run_start + logs.iter().map(|l| 1 + l.span.len).sum::<u32>();
        let fewest_topics = logs.iter().map(|l| l.topics.len()).min().unwrap_or(0) as u8;
        out.extend_from_slice(&(first as u32).to_le_bytes());
        out.extend_from_slice(&(count as u32).to_le_bytes());
        out.extend_from_slice(&run_start.to_le_bytes());
        out.extend_from_slice(&run_end.to_le_bytes());
        out.extend_from_slice(&logs[0].address);
        out.extend_from_slice(&[fewest_topics, 0, 0, 0]);
        out.extend_from_slice(logs[0].topics.first().unwrap_or(&[0; 32]));
        run_start = run_end;
    }
    out.extend_from_slice(&(runs.len() as u32).to_le_bytes());
    let record = &mut out[start..];
    debug_assert_eq!(
        record.len(),
        RECORD_HEADER_LEN + chunks * CHUNK_CRC_LEN + body_len as usize
    );
    let (head, body) = record.split_at_mut(RECORD_HEADER_LEN + chunks * CHUNK_CRC_LEN);
    for (chunk, entry) in body
        .chunks(CHUNK_LEN)
        .zip(head[RECORD_HEADER_LEN..].chunks_mut(CHUNK_CRC_LEN))
    {
        entry.copy_from_slice(&crc32c::crc32c(chunk).to_le_bytes());
    }
    seal_crc(record);
    Ok(())
}

fn check_spans(block: &NewBlock<'_>) -> Result<(), EncodeError> {
    let within = |span: Span, section: &[u8], what| {
        let end = span.offset as u64 + span.len as u64;
        if end <= section.len() as u64 {
            Ok(())
        } else {
            Err(EncodeError::SpanOutOfBounds(what))
        }
    };
    for TxEntry {
        full, receipt, raw, ..
    } in &block.txs
    {
        within(*full, block.full, "transaction span in the full block")?;
        within(*receipt, block.receipts, "receipt span in the receipts")?;
        within(
            *raw,
            block.raw_block,
            "raw transaction span in the raw block",
        )?;
    }
    for LogEntry {
        span,
        topics,
        tx_index,
        ..
    } in &block.logs
    {
        within(*span, block.receipts, "log span in the receipts")?;
        if topics.len() > 4 {
            return Err(EncodeError::TooManyTopics);
        }
        if *tx_index as usize >= block.txs.len() {
            return Err(EncodeError::SpanOutOfBounds("log transaction index"));
        }
    }
    Ok(())
}

/// Encodes a rollback tombstone: everything above `keep_up_to` is gone.
pub(crate) fn encode_rollback(keep_up_to: u64, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
    out.extend_from_slice(&[KIND_ROLLBACK, 0, 0, 0]);
    out.extend_from_slice(&keep_up_to.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    seal_crc(&mut out[start..]);
}

fn header_crc(record: &[u8]) -> u32 {
    crc32c::crc32c(&record[header::KIND..header::CRC])
}

fn seal_crc(record: &mut [u8]) {
    let crc = header_crc(record);
    record[header::CRC..header::CRC + 4].copy_from_slice(&crc.to_le_bytes());
}

/// A record header that passed its structural checks and its CRC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RecordHeader {
    pub(crate) kind: u8,
    pub(crate) height: u64,
    pub(crate) body_len: usize,
}

impl RecordHeader {
    /// How many chunks (and chunk table entries) its body has.
    pub(crate) fn chunks(&self) -> usize {
        chunk_count(self.body_len)
    }

    /// Where its body starts, from the start of the record.
    pub(crate) fn body_offset(&self) -> usize {
        RECORD_HEADER_LEN + self.chunks() * CHUNK_CRC_LEN
    }

    pub(crate) fn total_len(&self) -> usize {
        self.body_offset() + self.body_len
    }
}

/// Reads the header at the start of `bytes` (at least its 24 bytes):
/// `None` when it is not an intact record header (zeros, garbage, a torn
/// write, a kind this build does not know). Whether the record's length
/// fits what follows is the caller's to check.
pub(crate) fn read_header(bytes: &[u8]) -> Option<RecordHeader> {
    if bytes.len() < RECORD_HEADER_LEN || u32_at(bytes, header::MAGIC) != RECORD_MAGIC {
        return None;
    }
    if u32_at(bytes, header::CRC) != header_crc(bytes) {
        return None;
    }
    let kind = bytes[header::KIND];
    let body_len = u32_at(bytes, header::BODY_LEN) as usize;
    let valid_kind = match kind {
        KIND_BLOCK => body_len >= body::FIXED_LEN + RUN_COUNT_LEN,
        KIND_ROLLBACK => body_len == 0,
        _ => false,
    };
    valid_kind.then(|| RecordHeader {
        kind,
        height: u64_at(bytes, header::HEIGHT),
        body_len,
    })
}

/// Where the parts of a block body lie, from its fixed fields alone (the
/// first [`body::FIXED_LEN`] bytes): what a reader needs to find any part
/// without touching the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub(crate) tx_count: u32,
    pub(crate) log_count: u32,
    /// Each section's start and length in the body; index [`SECTIONS`] is
    /// the log section's start (its length needs the run count).
    pub(crate) starts: [usize; SECTIONS + 1],
    pub(crate) lens: [usize; SECTIONS],
    pub(crate) body_len: usize,
}

impl Layout {
    /// The layout the fixed fields describe, if it fits a body of
    /// `body_len` bytes (tables, sections, and at least the run count).
    pub(crate) fn of(fixed: &[u8], body_len: usize) -> Option<Layout> {
        if fixed.len() < body::FIXED_LEN {
            return None;
        }
        let tx_count = u32_at(fixed, body::TX_COUNT);
        let log_count = u32_at(fixed, body::LOG_COUNT);
        let lens: [usize; SECTIONS] =
            std::array::from_fn(|i| u32_at(fixed, body::SECTION_LENS + 4 * i) as usize);
        let tables = body::FIXED_LEN as u64
            + tx_count as u64 * TX_ENTRY_LEN as u64
            + log_count as u64 * LOG_ENTRY_LEN as u64;
        let mut starts = [0usize; SECTIONS + 1];
        let mut at = tables;
        for (i, len) in lens.iter().enumerate() {
            starts[i] = at as usize;
            at += *len as u64;
        }
        starts[SECTIONS] = at as usize;
        (at + RUN_COUNT_LEN as u64 <= body_len as u64).then_some(Layout {
            tx_count,
            log_count,
            starts,
            lens,
            body_len,
        })
    }

    /// Where transaction `index`'s table entry lies.
    pub(crate) fn tx_entry(&self, index: u32) -> std::ops::Range<usize> {
        let at = body::FIXED_LEN + index as usize * TX_ENTRY_LEN;
        at..at + TX_ENTRY_LEN
    }

    /// The whole transaction table.
    pub(crate) fn tx_table(&self) -> std::ops::Range<usize> {
        body::FIXED_LEN..self.log_table().start
    }

    /// The whole log table.
    pub(crate) fn log_table(&self) -> std::ops::Range<usize> {
        let at = body::FIXED_LEN + self.tx_count as usize * TX_ENTRY_LEN;
        at..at + self.log_count as usize * LOG_ENTRY_LEN
    }

    /// A section's bytes.
    pub(crate) fn section(&self, section: usize) -> std::ops::Range<usize> {
        self.starts[section]..self.starts[section] + self.lens[section]
    }

    /// Where the run count lies (the body's last 4 bytes).
    pub(crate) fn run_count_at(&self) -> std::ops::Range<usize> {
        self.body_len - RUN_COUNT_LEN..self.body_len
    }

    /// The run table of `run_count` entries, and the log section before
    /// it; `None` when they do not fit.
    pub(crate) fn runs_and_logs(
        &self,
        run_count: u32,
    ) -> Option<(std::ops::Range<usize>, std::ops::Range<usize>)> {
        let end = self.body_len - RUN_COUNT_LEN;
        let runs = end.checked_sub(run_count as usize * RUN_ENTRY_LEN)?;
        (runs >= self.starts[SECTIONS]).then_some((runs..end, self.starts[SECTIONS]..runs))
    }
}

#[cfg(test)]
mod tests;
