//! Byte layouts of the store's files. `docs/store-format.md` is the spec;
//! the constants here are its widths and offsets, and the tests at the bottom
//! pin them so a moved field fails loudly. All integers are little-endian.

use crate::{Hash, LogEntry, NewBlock, Span, TxEntry};

/// The store format this build writes. Version 2 added block records with
/// a log section (kind 3), version 3 their emitter-run table (kind 4);
/// version 1 and 2 stores are read as they are and their META is rewritten
/// as this version on open, so an older neve refuses the store instead of
/// misreading it.
pub const FORMAT_VERSION: u32 = 3;

/// The oldest store format this build reads.
pub const OLDEST_READABLE_VERSION: u32 = 1;

/// Whether this build reads files of format `version`.
pub(crate) fn readable(version: u32) -> bool {
    (OLDEST_READABLE_VERSION..=FORMAT_VERSION).contains(&version)
}

// ---- record header (24 bytes), in front of every record in a segment ----

/// `b"NVRC"` read as a little-endian u32.
pub const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"NVRC");
/// Record header length.
pub const RECORD_HEADER_LEN: usize = 24;
/// Record kind: a block whose log spans point into its receipts (format
/// version 1; read, no longer written).
pub const KIND_BLOCK: u8 = 1;
/// Record kind: a rollback tombstone; its height is the last height kept.
pub const KIND_ROLLBACK: u8 = 2;
/// Record kind: a block with a log section after its other sections; its
/// log spans point into that section (format version 2; read, no longer
/// written).
pub const KIND_BLOCK_WITH_LOGS: u8 = 3;
/// Record kind: a kind 3 block followed by its emitter-run table and the
/// table's entry count, so a log filter decides whole runs of logs from
/// one table entry instead of reading every log's.
pub const KIND_BLOCK_WITH_RUNS: u8 = 4;

/// Whether a record of `kind` is a block.
pub(crate) fn is_block(kind: u8) -> bool {
    matches!(
        kind,
        KIND_BLOCK | KIND_BLOCK_WITH_LOGS | KIND_BLOCK_WITH_RUNS
    )
}

/// Whether a block record of `kind` has a log section.
pub(crate) fn has_log_section(kind: u8) -> bool {
    kind == KIND_BLOCK_WITH_LOGS || kind == KIND_BLOCK_WITH_RUNS
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
    /// u32 CRC-32C of header bytes 4..20 followed by the body.
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
/// Log table entry: u32 tx index, span (u32, u32) into the log section
/// (kind 1: into receipts), [20] address, u8 topic count, [3] zero, 4 × [32]
/// topics (unused ones zero).
pub const LOG_ENTRY_LEN: usize = 164;

/// Emitter-run table entry (kind 4): a maximal run of consecutive logs
/// with the same address and the same first topic (or none).
pub const RUN_ENTRY_LEN: usize = 72;
/// The u32 run count that ends a kind 4 body, after the run table.
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
    let start = out.len();
    out.reserve(RECORD_HEADER_LEN + body_len as usize);
    out.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
    out.extend_from_slice(&[KIND_BLOCK_WITH_RUNS, 0, 0, 0]);
    out.extend_from_slice(&block.height.to_le_bytes());
    out.extend_from_slice(&body_len.to_le_bytes());
    out.extend_from_slice(&[0; 4]); // CRC, filled below
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
    debug_assert_eq!(out.len() - start, RECORD_HEADER_LEN + body_len as usize);
    seal_crc(&mut out[start..]);
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

fn record_crc(record: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&record[header::KIND..header::CRC]);
    crc32c::crc32c_append(crc, &record[RECORD_HEADER_LEN..])
}

fn seal_crc(record: &mut [u8]) {
    let crc = record_crc(record);
    record[header::CRC..header::CRC + 4].copy_from_slice(&crc.to_le_bytes());
}

/// A record header that passed its structural checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RecordHeader {
    pub(crate) kind: u8,
    pub(crate) height: u64,
    pub(crate) body_len: usize,
}

impl RecordHeader {
    pub(crate) fn total_len(&self) -> usize {
        RECORD_HEADER_LEN + self.body_len
    }
}

/// Reads the header at the start of `bytes`: `None` when it is not a record
/// (zeros, garbage, or a length running past `bytes`).
pub(crate) fn read_header(bytes: &[u8]) -> Option<RecordHeader> {
    if bytes.len() < RECORD_HEADER_LEN || u32_at(bytes, header::MAGIC) != RECORD_MAGIC {
        return None;
    }
    let kind = bytes[header::KIND];
    let body_len = u32_at(bytes, header::BODY_LEN) as usize;
    let valid_kind = match kind {
        KIND_BLOCK | KIND_BLOCK_WITH_LOGS | KIND_BLOCK_WITH_RUNS => body_len >= body::FIXED_LEN,
        KIND_ROLLBACK => body_len == 0,
        _ => false,
    };
    if !valid_kind || bytes.len() - RECORD_HEADER_LEN < body_len {
        return None;
    }
    Some(RecordHeader {
        kind,
        height: u64_at(bytes, header::HEIGHT),
        body_len,
    })
}

/// Whether the record at the start of `bytes` (as sized by its header) has
/// an intact checksum and a body whose tables fit.
pub(crate) fn verify_record(bytes: &[u8], header: &RecordHeader) -> bool {
    let record = &bytes[..header.total_len()];
    if u32_at(record, self::header::CRC) != record_crc(record) {
        return false;
    }
    !is_block(header.kind) || body_is_consistent(&record[RECORD_HEADER_LEN..], header.kind)
}

/// The tables and sections of a block body add up to its length, and every
/// span in its tables lies inside its section. Checked with the CRC, so a
/// record that passes can be sliced by readers without a bounds check
/// failing: a CRC only says the bytes are the ones written, not that what
/// was written is sane (a bug, or a file crafted by hand). A kind 3 body's
/// log section is what follows the other sections; each of its logs starts
/// after a comma. A kind 4 body's log section stops at its run table, whose
/// entries must say what the log table says.
fn body_is_consistent(body: &[u8], kind: u8) -> bool {
    if body.len() < body::FIXED_LEN {
        return false;
    }
    let tx_count = u32_at(body, body::TX_COUNT) as u64;
    let log_count = u32_at(body, body::LOG_COUNT) as u64;
    let lens: [u64; SECTIONS] =
        std::array::from_fn(|i| u32_at(body, body::SECTION_LENS + 4 * i) as u64);
    let tables =
        body::FIXED_LEN as u64 + tx_count * TX_ENTRY_LEN as u64 + log_count * LOG_ENTRY_LEN as u64;
    let sections_end = tables + lens.iter().sum::<u64>();
    let body_len = body.len() as u64;
    let (log_section_len, run_count) = match kind {
        KIND_BLOCK if sections_end == body_len => (0, 0),
        KIND_BLOCK_WITH_LOGS if sections_end <= body_len => (body_len - sections_end, 0),
        KIND_BLOCK_WITH_RUNS if sections_end + RUN_COUNT_LEN as u64 <= body_len => {
            let run_count = u32_at(body, body.len() - RUN_COUNT_LEN) as u64;
            let runs_len = run_count * RUN_ENTRY_LEN as u64 + RUN_COUNT_LEN as u64;
            match (body_len - sections_end).checked_sub(runs_len) {
                Some(len) => (len, run_count),
                None => return false,
            }
        }
        _ => return false,
    };
    let within_len = |at: usize, limit: u64| {
        let offset = u32_at(body, at) as u64;
        let len = u32_at(body, at + 4) as u64;
        offset + len <= limit
    };
    let within = |at: usize, section: Section| within_len(at, lens[section as usize]);
    let txs = (0..tx_count as usize).all(|i| {
        let entry = body::FIXED_LEN + i * TX_ENTRY_LEN;
        within(entry + 32, Section::Full)
            && within(entry + 40, Section::Receipts)
            && within(entry + 48, Section::RawBlock)
    });
    let table = body::FIXED_LEN + tx_count as usize * TX_ENTRY_LEN;
    // Kind 3: each log starts right after the previous one and its comma,
    // and the last ends the section, so any run of logs is one slice from
    // the byte before its first.
    let mut next_log = 1u64;
    let logs = (0..log_count as usize).all(|i| {
        let entry = table + i * LOG_ENTRY_LEN;
        let span_fits = if has_log_section(kind) {
            let offset = u32_at(body, entry + 4) as u64;
            let fits = offset == next_log && within_len(entry + 4, log_section_len);
            next_log = offset + u32_at(body, entry + 8) as u64 + 1;
            fits
        } else {
            within(entry + 4, Section::Receipts)
        };
        (u32_at(body, entry) as u64) < tx_count && span_fits && body[entry + 32] <= 4
    });
    let log_section_filled = !has_log_section(kind) || next_log - 1 == log_section_len;
    txs && logs
        && log_section_filled
        && (kind != KIND_BLOCK_WITH_RUNS || runs_agree(body, table, log_count, run_count))
}

/// A kind 4 body's run table covers its logs in order, each entry a run of
/// at least one log whose bytes, address, first topic and fewest topics
/// are the log table's. Called once the log table is known to fit.
fn runs_agree(body: &[u8], table: usize, log_count: u64, run_count: u64) -> bool {
    let runs = body.len() - RUN_COUNT_LEN - run_count as usize * RUN_ENTRY_LEN;
    let log = |i: u64| &body[table + i as usize * LOG_ENTRY_LEN..][..LOG_ENTRY_LEN];
    let mut next = 0u64;
    let agree = (0..run_count as usize).all(|r| {
        let entry = &body[runs + r * RUN_ENTRY_LEN..][..RUN_ENTRY_LEN];
        let (first, count) = (
            u32_at(entry, run::FIRST) as u64,
            u32_at(entry, run::COUNT) as u64,
        );
        if first != next || count == 0 || first + count > log_count {
            return false;
        }
        next = first + count;
        let (head, tail) = (log(first), log(first + count - 1));
        let fewest = entry[run::FEWEST_TOPICS];
        let topic0 = &entry[run::TOPIC0..run::TOPIC0 + 32];
        let bytes_agree = u32_at(entry, run::START) as u64 + 1 == u32_at(head, 4) as u64
            && u32_at(entry, run::END) as u64 == u32_at(tail, 4) as u64 + u32_at(tail, 8) as u64;
        let logs_agree = (first..first + count).all(|i| {
            let log = log(i);
            let topics = log[32];
            log[12..32] == entry[run::ADDRESS..run::ADDRESS + 20]
                && topics >= fewest
                && (topics == 0) == (fewest == 0)
                && (topics == 0 || log[36..68] == *topic0)
        });
        let fewest_is_met = (first..first + count).any(|i| log(i)[32] == fewest);
        let zeros = entry[run::FEWEST_TOPICS + 1..run::TOPIC0] == [0; 3]
            && (fewest != 0 || topic0 == [0; 32]);
        bytes_agree && logs_agree && fewest_is_met && zeros
    });
    agree && next == log_count
}

/// Encodes the META file.
pub(crate) fn encode_meta(meta: &crate::Meta) -> [u8; META_LEN] {
    let mut out = [0u8; META_LEN];
    out[0..8].copy_from_slice(&META_MAGIC);
    out[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    out[12..16].copy_from_slice(&meta.segment_blocks.to_le_bytes());
    out[16..24].copy_from_slice(&meta.identity.chain_id.to_le_bytes());
    out[24..56].copy_from_slice(&meta.identity.genesis_hash);
    out[56..64].copy_from_slice(&meta.segment_bytes.to_le_bytes());
    let crc = crc32c::crc32c(&out[..68]);
    out[68..72].copy_from_slice(&crc.to_le_bytes());
    out
}

/// What a META file says, or why it says nothing usable.
pub(crate) enum MetaRead {
    Ok(crate::Meta),
    Corrupt,
    Version(u32),
}

pub(crate) fn decode_meta(bytes: &[u8]) -> MetaRead {
    if bytes.len() != META_LEN || bytes[0..8] != META_MAGIC {
        return MetaRead::Corrupt;
    }
    if u32_at(bytes, 68) != crc32c::crc32c(&bytes[..68]) {
        return MetaRead::Corrupt;
    }
    let version = u32_at(bytes, 8);
    if !readable(version) {
        return MetaRead::Version(version);
    }
    MetaRead::Ok(crate::Meta {
        segment_blocks: u32_at(bytes, 12),
        identity: crate::Identity {
            chain_id: u64_at(bytes, 16),
            genesis_hash: hash_at(bytes, 24),
        },
        segment_bytes: u64_at(bytes, 56),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (Vec<u8>, Vec<u8>) {
        (
            b"{\"txs\":[{\"a\":1},{\"b\":2}]}".to_vec(),
            b"[{\"r\":1,\"logs\":[{\"l\":0}]},{\"r\":2}]".to_vec(),
        )
    }

    fn block<'a>(full: &'a [u8], receipts: &'a [u8]) -> NewBlock<'a> {
        NewBlock {
            height: 7,
            hash: [1; 32],
            parent_hash: [2; 32],
            logs_bloom: [3; 256],
            full,
            hashes_only: b"{\"txs\":[\"0x1\",\"0x2\"]}",
            receipts,
            raw_header: b"",
            raw_block: b"",
            raw_receipts: b"",
            txs: vec![
                TxEntry {
                    hash: [9; 32],
                    full: Span::new(8, 7),
                    receipt: Span::new(1, 24),
                    raw: Span::EMPTY,
                },
                TxEntry {
                    hash: [8; 32],
                    full: Span::new(16, 7),
                    receipt: Span::new(26, 7),
                    raw: Span::EMPTY,
                },
            ],
            logs: vec![LogEntry {
                tx_index: 0,
                span: Span::new(16, 7),
                address: [5; 20],
                topics: vec![[6; 32], [7; 32]],
            }],
        }
    }

    #[test]
    fn layout_is_pinned() {
        // Moving any of these breaks every store on disk: bump FORMAT_VERSION.
        assert_eq!(RECORD_HEADER_LEN, 24);
        assert_eq!(body::FIXED_LEN, body::SECTION_LENS + 4 * SECTIONS);
        assert_eq!(TX_ENTRY_LEN, 32 + 3 * 8);
        assert_eq!(LOG_ENTRY_LEN, 4 + 8 + 20 + 4 + 4 * 32);
        assert_eq!(RUN_ENTRY_LEN, 4 * 4 + 20 + 4 + 32);
        assert_eq!(
            [run::FIRST, run::COUNT, run::START, run::END, run::ADDRESS],
            [0, 4, 8, 12, 16]
        );
        assert_eq!((run::FEWEST_TOPICS, run::TOPIC0), (36, 40));
        assert_eq!(run::TOPIC0 + 32, RUN_ENTRY_LEN);
        assert_eq!(
            (
                KIND_BLOCK,
                KIND_ROLLBACK,
                KIND_BLOCK_WITH_LOGS,
                KIND_BLOCK_WITH_RUNS
            ),
            (1, 2, 3, 4)
        );
        assert_eq!(&RECORD_MAGIC.to_le_bytes(), b"NVRC");
    }

    #[test]
    fn encoded_block_has_fields_at_their_offsets() {
        let (full, receipts) = sample();
        let b = block(&full, &receipts);
        let mut out = Vec::new();
        encode_block(&b, &mut out).unwrap();
        let h = read_header(&out).unwrap();
        assert_eq!((h.kind, h.height), (KIND_BLOCK_WITH_RUNS, 7));
        assert_eq!(h.total_len(), out.len());
        assert!(verify_record(&out, &h));
        let body = &out[RECORD_HEADER_LEN..];
        assert_eq!(hash_at(body, body::HASH), [1; 32]);
        assert_eq!(hash_at(body, body::PARENT_HASH), [2; 32]);
        assert_eq!(body[body::LOGS_BLOOM..body::LOGS_BLOOM + 256], [3; 256]);
        assert_eq!(u32_at(body, body::TX_COUNT), 2);
        assert_eq!(u32_at(body, body::LOG_COUNT), 1);
        assert_eq!(u32_at(body, body::SECTION_LENS), full.len() as u32);
        let tx1 = body::FIXED_LEN + TX_ENTRY_LEN;
        assert_eq!(hash_at(body, tx1), [8; 32]);
        assert_eq!((u32_at(body, tx1 + 32), u32_at(body, tx1 + 36)), (16, 7));
        let log = body::FIXED_LEN + 2 * TX_ENTRY_LEN;
        assert_eq!(body[log + 12..log + 32], [5; 20]);
        assert_eq!(body[log + 32], 2);
        // The log's span is past its comma in the log section, which ends
        // the body.
        assert_eq!((u32_at(body, log + 4), u32_at(body, log + 8)), (1, 7));
        let sections = log + LOG_ENTRY_LEN;
        assert_eq!(&body[sections..sections + full.len()], &full[..]);
        // The log section, then one run and the run count end the body.
        let runs = body.len() - RUN_COUNT_LEN - RUN_ENTRY_LEN;
        assert!(body[..runs].ends_with(b",{\"l\":0}"));
        let run = &body[runs..runs + RUN_ENTRY_LEN];
        assert_eq!(
            [run::FIRST, run::COUNT, run::START, run::END].map(|at| u32_at(run, at)),
            [0, 1, 0, 8]
        );
        assert_eq!(run[run::ADDRESS..run::ADDRESS + 20], [5; 20]);
        assert_eq!(run[run::FEWEST_TOPICS], 2);
        assert_eq!(hash_at(run, run::TOPIC0), [6; 32]);
        assert_eq!(u32_at(body, body.len() - RUN_COUNT_LEN), 1);
    }

    /// The same block as a version 2 record (kind 3, no run table), as
    /// builds before version 3 wrote it.
    pub(crate) fn as_kind_3(record: &[u8]) -> Vec<u8> {
        let runs = u32_at(record, record.len() - RUN_COUNT_LEN) as usize;
        let mut out = record[..record.len() - RUN_COUNT_LEN - runs * RUN_ENTRY_LEN].to_vec();
        out[header::KIND] = KIND_BLOCK_WITH_LOGS;
        let body_len = (out.len() - RECORD_HEADER_LEN) as u32;
        out[header::BODY_LEN..header::BODY_LEN + 4].copy_from_slice(&body_len.to_le_bytes());
        seal_crc(&mut out);
        out
    }

    /// The same block as a version 1 record (kind 1, log spans into the
    /// receipts, no log section), as older builds wrote it.
    pub(crate) fn as_kind_1(record: &[u8], block: &NewBlock<'_>) -> Vec<u8> {
        let record = as_kind_3(record);
        let log_section: usize = block.logs.iter().map(|l| 1 + l.span.len as usize).sum();
        let mut out = record[..record.len() - log_section].to_vec();
        out[header::KIND] = KIND_BLOCK;
        let body_len = (out.len() - RECORD_HEADER_LEN) as u32;
        out[header::BODY_LEN..header::BODY_LEN + 4].copy_from_slice(&body_len.to_le_bytes());
        let table = RECORD_HEADER_LEN + body::FIXED_LEN + block.txs.len() * TX_ENTRY_LEN;
        for (i, log) in block.logs.iter().enumerate() {
            let at = table + i * LOG_ENTRY_LEN + 4;
            out[at..at + 4].copy_from_slice(&log.span.offset.to_le_bytes());
        }
        seal_crc(&mut out);
        out
    }

    #[test]
    fn records_of_every_version_read_the_same_logs() {
        let (full, receipts) = sample();
        let mut b = block(&full, &receipts);
        // A second log in the same receipt, and one in the next.
        let receipts =
            b"[{\"r\":1,\"logs\":[{\"l\":0},{\"l\":1}]},{\"r\":2,\"logs\":[{\"l\":2}]}]".to_vec();
        b.receipts = &receipts;
        b.txs[0].receipt = Span::new(1, 32);
        b.txs[1].receipt = Span::new(34, 24);
        let log = |tx_index, offset| LogEntry {
            tx_index,
            span: Span::new(offset, 7),
            address: [5; 20],
            topics: vec![],
        };
        b.logs = vec![log(0, 16), log(0, 24), log(1, 49)];
        let mut v3 = Vec::new();
        encode_block(&b, &mut v3).unwrap();
        let (v2, v1) = (as_kind_3(&v3), as_kind_1(&v3, &b));
        let mut blocks = Vec::new();
        for record in [&v3, &v2, &v1] {
            let h = read_header(record).unwrap();
            assert!(verify_record(record, &h), "kind {}", h.kind);
            let body = bytes::Bytes::copy_from_slice(&record[RECORD_HEADER_LEN..]);
            blocks.push(crate::Block::new(7, body, h.kind));
        }
        for block in &blocks {
            let logs: Vec<_> = block.logs().map(|l| l.bytes).collect();
            assert_eq!(logs, [&b"{\"l\":0}"[..], b"{\"l\":1}", b"{\"l\":2}"]);
            assert_eq!(&block.log_run(0, 2)[..], b",{\"l\":0},{\"l\":1},{\"l\":2}");
            assert_eq!(&block.log_run(1, 1)[..], b",{\"l\":1}");
            assert_eq!(block.log_len(2), 7);
            let keys: Vec<_> = block.log_keys().map(|k| (k.index, *k.address)).collect();
            assert_eq!(keys, [(0, [5; 20]), (1, [5; 20]), (2, [5; 20])]);
        }
        // The log section is sliced, not copied.
        let (run, section) = (blocks[0].log_run(0, 2), blocks[0].log_bytes());
        assert_eq!(run.as_ptr(), section.as_ptr());
        // Only version 3 records have emitter runs: here one, of all three.
        let runs: Vec<_> = blocks[0].emitter_runs().unwrap().collect();
        assert_eq!(runs.len(), 1);
        let (first, count) = (runs[0].first, runs[0].count);
        assert_eq!((first, count, runs[0].topic0), (0, 3, None));
        assert_eq!(
            &blocks[0].log_slice(runs[0].start, runs[0].end)[..],
            b",{\"l\":0},{\"l\":1},{\"l\":2}"
        );
        assert_eq!(blocks[0].log_piece(1), (8, 16));
        assert!(blocks[1].emitter_runs().is_none() && blocks[2].emitter_runs().is_none());
    }

    /// Logs of a few addresses and first topics, with 0 to 4 topics each,
    /// back to back in one receipt: `(address byte, topics)` per log.
    fn block_of_logs(receipts: &mut Vec<u8>, logs: &[(u8, Vec<u8>)]) -> Vec<LogEntry> {
        receipts.clear();
        receipts.extend_from_slice(b"[{\"logs\":[");
        let mut entries = Vec::new();
        for (i, (address, topics)) in logs.iter().enumerate() {
            if i > 0 {
                receipts.push(b',');
            }
            let offset = receipts.len() as u32;
            receipts.extend_from_slice(format!("{{\"i\":{i}}}").as_bytes());
            entries.push(LogEntry {
                tx_index: 0,
                span: Span::new(offset, receipts.len() as u32 - offset),
                address: [*address; 20],
                topics: topics.iter().map(|t| [*t; 32]).collect(),
            });
        }
        receipts.extend_from_slice(b"]}]");
        entries
    }

    proptest::proptest! {
        /// The run table covers every log once, in order; each run is
        /// maximal, its logs share its address and first topic, its fewest
        /// topics is theirs, and its slice is its logs, each after a comma.
        #[test]
        fn emitter_runs_describe_the_log_table(
            logs in proptest::collection::vec(
                (0u8..3, proptest::collection::vec(0u8..3, 0..=4)),
                0..40,
            )
        ) {
            let (full, _) = sample();
            let mut receipts = Vec::new();
            let entries = block_of_logs(&mut receipts, &logs);
            let mut b = block(&full, &receipts);
            b.txs[0].receipt = Span::new(0, receipts.len() as u32);
            b.txs[1].receipt = Span::EMPTY;
            b.logs = entries;
            let mut record = Vec::new();
            encode_block(&b, &mut record).unwrap();
            let h = read_header(&record).unwrap();
            proptest::prop_assert!(verify_record(&record, &h));
            let block = crate::Block::new(7, bytes::Bytes::copy_from_slice(&record[RECORD_HEADER_LEN..]), h.kind);
            let runs: Vec<_> = block.emitter_runs().unwrap().collect();
            let mut next = 0;
            for (r, run) in runs.iter().enumerate() {
                proptest::prop_assert_eq!(run.first, next);
                proptest::prop_assert!(run.count >= 1);
                next += run.count;
                let members = &b.logs[run.first as usize..next as usize];
                let mut expected = Vec::new();
                for log in members {
                    proptest::prop_assert_eq!(&log.address, run.address);
                    proptest::prop_assert_eq!(log.topics.first(), run.topic0);
                    expected.push(b',');
                    expected.extend_from_slice(&receipts[log.span.offset as usize..][..log.span.len as usize]);
                }
                let fewest = members.iter().map(|l| l.topics.len()).min().unwrap();
                proptest::prop_assert_eq!(run.fewest_topics as usize, fewest);
                proptest::prop_assert_eq!(&block.log_slice(run.start, run.end)[..], &expected[..]);
                if let Some(following) = runs.get(r + 1) {
                    proptest::prop_assert!(
                        (following.address, following.topic0) != (run.address, run.topic0),
                        "runs are maximal"
                    );
                }
            }
            proptest::prop_assert_eq!(next as usize, b.logs.len());
        }
    }

    /// A run table that disagrees with the log table (a bug, or a file
    /// crafted by hand) fails verification like a span outside its
    /// section: a filter deciding whole runs would otherwise serve logs
    /// the log table says do not match.
    #[test]
    fn a_run_table_that_disagrees_with_the_log_table_fails_verification() {
        let (full, _) = sample();
        let mut receipts = Vec::new();
        let entries = block_of_logs(&mut receipts, &[(1, vec![7, 8]), (1, vec![7]), (2, vec![])]);
        let mut b = block(&full, &receipts);
        b.txs[0].receipt = Span::new(0, receipts.len() as u32);
        b.txs[1].receipt = Span::EMPTY;
        b.logs = entries;
        let mut out = Vec::new();
        encode_block(&b, &mut out).unwrap();
        let header = read_header(&out).unwrap();
        assert!(verify_record(&out, &header));
        let count_at = out.len() - RUN_COUNT_LEN;
        assert_eq!(u32_at(&out, count_at), 2);
        let first_run = count_at - 2 * RUN_ENTRY_LEN;
        let second_run = first_run + RUN_ENTRY_LEN;
        let mut crafts: Vec<(usize, Vec<u8>)> = vec![
            (first_run + run::COUNT, 1u32.to_le_bytes().to_vec()),
            (first_run + run::COUNT, 3u32.to_le_bytes().to_vec()),
            (second_run + run::FIRST, 1u32.to_le_bytes().to_vec()),
            (first_run + run::START, 1u32.to_le_bytes().to_vec()),
            (second_run + run::END, 1u32.to_le_bytes().to_vec()),
            (first_run + run::ADDRESS, vec![2]),
            (first_run + run::TOPIC0, vec![8]),
            (first_run + run::FEWEST_TOPICS, vec![2]),
            (first_run + run::FEWEST_TOPICS, vec![0]),
            (second_run + run::FEWEST_TOPICS, vec![1]),
            (first_run + run::FEWEST_TOPICS + 1, vec![9]),
            (second_run + run::TOPIC0, vec![5]),
            (count_at, 3u32.to_le_bytes().to_vec()),
            (count_at, 1u32.to_le_bytes().to_vec()),
            (count_at, u32::MAX.to_le_bytes().to_vec()),
        ];
        for (at, value) in crafts.drain(..) {
            let mut crafted = out.clone();
            crafted[at..at + value.len()].copy_from_slice(&value);
            seal_crc(&mut crafted);
            let header = read_header(&crafted).unwrap();
            assert!(
                !verify_record(&crafted, &header),
                "crafted at {at}: {value:?}"
            );
        }
    }

    #[test]
    fn any_flipped_bit_fails_verification() {
        let (full, receipts) = sample();
        let mut out = Vec::new();
        encode_block(&block(&full, &receipts), &mut out).unwrap();
        for at in (0..out.len()).step_by(7) {
            let mut copy = out.clone();
            copy[at] ^= 0x10;
            let ok = read_header(&copy)
                .is_some_and(|h| h.total_len() <= copy.len() && verify_record(&copy, &h));
            assert!(!ok, "flip at {at} went unnoticed");
        }
    }

    /// Regression (hardening, store spans): a record whose CRC is intact
    /// but whose spans point outside their section is not a record; before,
    /// it verified and a reader slicing the span panicked.
    #[test]
    fn a_sealed_record_with_a_span_outside_its_section_fails_verification() {
        let (full, receipts) = sample();
        let mut out = Vec::new();
        encode_block(&block(&full, &receipts), &mut out).unwrap();
        let tx_receipt_len = RECORD_HEADER_LEN + body::FIXED_LEN + 40 + 4;
        let log_offset = RECORD_HEADER_LEN + body::FIXED_LEN + 2 * TX_ENTRY_LEN + 4;
        let topic_count = RECORD_HEADER_LEN + body::FIXED_LEN + 2 * TX_ENTRY_LEN + 32;
        for (at, value) in [
            (tx_receipt_len, 1_000u32.to_le_bytes()),
            (log_offset, u32::MAX.to_le_bytes()),
            // A log section's span starts past its comma.
            (log_offset, 0u32.to_le_bytes()),
            (topic_count, [9, 0, 0, 0]),
        ] {
            let mut crafted = out.clone();
            crafted[at..at + 4].copy_from_slice(&value);
            seal_crc(&mut crafted);
            let header = read_header(&crafted).unwrap();
            assert!(!verify_record(&crafted, &header), "crafted at {at}");
        }
        let header = read_header(&out).unwrap();
        assert!(verify_record(&out, &header));
    }

    #[test]
    fn spans_outside_their_section_are_refused() {
        let (full, receipts) = sample();
        let mut b = block(&full, &receipts);
        b.txs[0].full = Span::new(20, 100);
        assert!(matches!(
            encode_block(&b, &mut Vec::new()),
            Err(EncodeError::SpanOutOfBounds(_))
        ));
        let mut b = block(&full, &receipts);
        b.logs[0].topics = vec![[0; 32]; 5];
        assert_eq!(
            encode_block(&b, &mut Vec::new()),
            Err(EncodeError::TooManyTopics)
        );
    }

    #[test]
    fn truncated_or_zeroed_bytes_are_not_records() {
        let mut out = Vec::new();
        encode_rollback(5, &mut out);
        assert_eq!(read_header(&out).unwrap().kind, KIND_ROLLBACK);
        assert!(read_header(&out[..RECORD_HEADER_LEN - 1]).is_none());
        assert!(read_header(&[0; 64]).is_none());
    }

    #[test]
    fn meta_round_trips_and_detects_other_versions() {
        let meta = crate::Meta {
            segment_blocks: 1024,
            segment_bytes: 1 << 30,
            identity: crate::Identity {
                chain_id: 43112,
                genesis_hash: [4; 32],
            },
        };
        let mut bytes = encode_meta(&meta);
        assert!(matches!(decode_meta(&bytes), MetaRead::Ok(m) if m == meta));
        let mut version_1 = bytes;
        version_1[8] = 1;
        let crc = crc32c::crc32c(&version_1[..68]);
        version_1[68..72].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(decode_meta(&version_1), MetaRead::Ok(m) if m == meta));
        bytes[8] = 9;
        let crc = crc32c::crc32c(&bytes[..68]);
        bytes[68..72].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(decode_meta(&bytes), MetaRead::Version(9)));
        bytes[20] ^= 1;
        assert!(matches!(decode_meta(&bytes), MetaRead::Corrupt));
    }
}
