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

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

use crate::format::{
    self, CHUNK_CRC_LEN, CHUNK_LEN, LOG_ENTRY_LEN, Layout, RECORD_HEADER_LEN, RUN_ENTRY_LEN,
    RecordHeader, Section, body,
};
use crate::integrity;
use crate::miss::Unread;
use crate::segment_file::{SegmentFile, Source};
use crate::types::Hash;

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
    origin: Arc<SegmentFile>,
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
        origin: Arc<SegmentFile>,
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
        let origin = Arc::new(SegmentFile::new(
            std::path::PathBuf::from("(memory)"),
            std::fs::File::open("/dev/null").expect("/dev/null"),
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
                    if !integrity::chunks_match(entries, bytes) {
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
                if !integrity::chunks_match(&entries, &bytes) {
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

    /// Its first `count` transactions' parts (hash, raw encoding, JSON,
    /// receipt), each section's run of them read once: a replay's inputs,
    /// whose reads of a part at a time would each read and check the
    /// chunks around it again. Only as far into each section as the
    /// `count` transactions reach is read. `count` past the block's
    /// transactions is taken as all.
    pub fn transaction_parts(&self, count: u32) -> Result<TxParts, Unread> {
        let count = count.min(self.tx_count());
        let first = self.layout.tx_entry(0).start;
        let mut parts = TxParts {
            table: self.part(first..first + count as usize * format::TX_ENTRY_LEN)?,
            full: Bytes::new(),
            receipts: Bytes::new(),
            raw: Bytes::new(),
        };
        for (at, section) in [
            (32, Section::Full),
            (40, Section::Receipts),
            (48, Section::RawBlock),
        ] {
            let within = self.layout.section(section as usize);
            let mut reach = 0;
            for index in 0..count as usize {
                let (offset, len) = parts.span(index, at);
                reach = reach.max(offset + len);
            }
            if reach > within.len() {
                return Err(self.damaged("a transaction's span runs past its section"));
            }
            let read = self.part(within.start..within.start + reach)?;
            match section {
                Section::Full => parts.full = read,
                Section::Receipts => parts.receipts = read,
                _ => parts.raw = read,
            }
        }
        Ok(parts)
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

/// The first transactions of a block, their parts read whole once
/// ([`Block::transaction_parts`]).
pub struct TxParts {
    table: Bytes,
    full: Bytes,
    receipts: Bytes,
    raw: Bytes,
}

/// One transaction's parts, views into [`TxParts`].
pub struct TxPart {
    /// Its hash.
    pub hash: Hash,
    /// The hex digits of its EIP-2718 encoding (empty when not stored).
    pub raw: Bytes,
    /// Its JSON, as the upstream sent it.
    pub json: Bytes,
    /// Its receipt's JSON, as the upstream sent it.
    pub receipt: Bytes,
}

impl TxParts {
    /// How many transactions.
    pub fn len(&self) -> usize {
        self.table.len() / format::TX_ENTRY_LEN
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    fn span(&self, index: usize, at: usize) -> (usize, usize) {
        let entry = index * format::TX_ENTRY_LEN;
        (
            format::u32_at(&self.table, entry + at) as usize,
            format::u32_at(&self.table, entry + at + 4) as usize,
        )
    }

    /// Transaction `index`'s parts (below [`TxParts::len`]).
    pub fn get(&self, index: usize) -> TxPart {
        let slice = |at: usize, within: &Bytes| {
            let (offset, len) = self.span(index, at);
            within.slice(offset..offset + len)
        };
        TxPart {
            hash: format::hash_at(&self.table, index * format::TX_ENTRY_LEN),
            raw: slice(48, &self.raw),
            json: slice(32, &self.full),
            receipt: slice(40, &self.receipts),
        }
    }
}
