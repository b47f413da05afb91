//! Whether a record's bytes are whole and sane: its chunks against their
//! CRCs, its tables against its sections, and whether a repaired record
//! may replace a damaged one in place.

use crate::format::{
    CHUNK_CRC_LEN, CHUNK_LEN, LOG_ENTRY_LEN, Layout, RECORD_HEADER_LEN, RUN_COUNT_LEN,
    RUN_ENTRY_LEN, RecordHeader, Section, chunk_count, is_block, read_header, run, u32_at,
};

/// Whether every chunk of `body` from chunk `first` on matches its entry
/// in `table` (entries for those chunks only).
pub(crate) fn chunks_match(table: &[u8], body: &[u8]) -> bool {
    table.len() == chunk_count(body.len()) * CHUNK_CRC_LEN
        && body
            .chunks(CHUNK_LEN)
            .zip(table.chunks(CHUNK_CRC_LEN))
            .all(|(chunk, entry)| crc32c::crc32c(chunk).to_le_bytes() == entry)
}

/// Whether `new` (a whole record) may replace `old` (a damaged one of the
/// same length) in place: byte for byte the same wherever `old` could still
/// be read, so a reader holding or opening the old record never sees
/// content change under it, only damage turn into what it should have been.
/// Where `old`'s header is damaged nothing of it was readable; otherwise
/// the header must match, and every chunk that matches its old CRC entry
/// must be unchanged, entry included.
pub(crate) fn replaces_only_damage(old: &[u8], new: &[u8]) -> bool {
    if old.len() != new.len() {
        return false;
    }
    let Some(header) = read_header(old) else {
        return true;
    };
    if old[..RECORD_HEADER_LEN] != new[..RECORD_HEADER_LEN] || header.total_len() != old.len() {
        return false;
    }
    fn chunks(record: &[u8], body_offset: usize) -> impl Iterator<Item = (&[u8], &[u8])> {
        let (tables, body) = record[RECORD_HEADER_LEN..].split_at(body_offset - RECORD_HEADER_LEN);
        body.chunks(CHUNK_LEN).zip(tables.chunks(CHUNK_CRC_LEN))
    }
    let chunks = |record| chunks(record, header.body_offset());
    chunks(old).zip(chunks(new)).all(|(old, new)| {
        let (chunk, entry) = old;
        crc32c::crc32c(chunk).to_le_bytes() != entry || old == new
    })
}

/// Whether the record at the start of `bytes` (as sized by its header) is
/// whole: every chunk matches its CRC and the body's tables fit. Read so
/// by the recovery scan; serving checks only the chunks it answers from.
pub(crate) fn verify_record(bytes: &[u8], header: &RecordHeader) -> bool {
    if bytes.len() < header.total_len() {
        return false;
    }
    let record = &bytes[..header.total_len()];
    let body = &record[header.body_offset()..];
    chunks_match(&record[RECORD_HEADER_LEN..header.body_offset()], body)
        && (!is_block(header.kind) || body_is_consistent(body))
}

/// The tables and sections of a block body add up to its length, every
/// span in its tables lies inside its section, each log starts right after
/// the previous one and its comma (the last ending the log section, so any
/// run of logs is one slice from the byte before its first), and the run
/// table says what the log table says. Checked by the recovery scan and
/// the tests: a CRC only says the bytes are the ones written, not that
/// what was written is sane (a bug, or a file crafted by hand). Readers
/// bounds-check what they slice as well, so a record that passes its
/// chunk CRCs but not this can answer a miss, never a panic.
fn body_is_consistent(body: &[u8]) -> bool {
    let Some(layout) = Layout::of(body, body.len()) else {
        return false;
    };
    let run_count = u32_at(body, body.len() - RUN_COUNT_LEN);
    let Some((_, logs)) = layout.runs_and_logs(run_count) else {
        return false;
    };
    let log_section_len = logs.len() as u64;
    let within_len = |at: usize, limit: usize| {
        let offset = u32_at(body, at) as u64;
        let len = u32_at(body, at + 4) as u64;
        offset + len <= limit as u64
    };
    let within = |at: usize, section: Section| within_len(at, layout.lens[section as usize]);
    let txs = (0..layout.tx_count).all(|i| {
        let entry = layout.tx_entry(i).start;
        within(entry + 32, Section::Full)
            && within(entry + 40, Section::Receipts)
            && within(entry + 48, Section::RawBlock)
    });
    let table = layout.log_table().start;
    let mut next_log = 1u64;
    let logs_fit = (0..layout.log_count as usize).all(|i| {
        let entry = table + i * LOG_ENTRY_LEN;
        let offset = u32_at(body, entry + 4) as u64;
        let fits = offset == next_log && within_len(entry + 4, logs.len());
        next_log = offset + u32_at(body, entry + 8) as u64 + 1;
        (u32_at(body, entry) as u64) < layout.tx_count as u64 && fits && body[entry + 32] <= 4
    });
    txs && logs_fit
        && next_log - 1 == log_section_len
        && runs_agree(body, table, layout.log_count as u64, run_count as u64)
}

/// A body's run table covers its logs in order, each entry a run of
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
