//! A stored block as readers see it: the record's sections sliced zero-copy
//! from the segment's map, its transaction, receipt and log tables, and the
//! emitter runs `eth_getLogs` matches on.

use bytes::Bytes;

use crate::Hash;
use crate::format::{self, Section, body};

/// A stored block: the record body, sliced zero-copy from the map.
#[derive(Clone, Debug)]
pub struct Block {
    height: u64,
    body: Bytes,
    /// Its logs are in a section of their own, each after a comma (record
    /// kinds 3 and 4); otherwise their spans point into the receipts.
    log_section: bool,
    /// An emitter-run table ends the body (record kind 4).
    runs: bool,
}

impl Block {
    pub(crate) fn new(height: u64, body: Bytes, kind: u8) -> Self {
        Block {
            height,
            body,
            log_section: format::has_log_section(kind),
            runs: kind == format::KIND_BLOCK_WITH_RUNS,
        }
    }

    /// Its height.
    pub fn height(&self) -> u64 {
        self.height
    }

    /// Its hash.
    pub fn hash(&self) -> Hash {
        format::hash_at(&self.body, body::HASH)
    }

    /// Its parent's hash.
    pub fn parent_hash(&self) -> Hash {
        format::hash_at(&self.body, body::PARENT_HASH)
    }

    /// The header's logs bloom.
    pub fn logs_bloom(&self) -> &[u8] {
        &self.body[body::LOGS_BLOOM..body::LOGS_BLOOM + 256]
    }

    /// Number of transactions.
    pub fn tx_count(&self) -> u32 {
        format::u32_at(&self.body, body::TX_COUNT)
    }

    /// Number of logs.
    pub fn log_count(&self) -> u32 {
        format::u32_at(&self.body, body::LOG_COUNT)
    }

    fn section_len(&self, section: Section) -> usize {
        format::u32_at(&self.body, body::SECTION_LENS + 4 * section as usize) as usize
    }

    /// Where section `index` starts; [`format::SECTIONS`] names the log
    /// section, after the others.
    fn section_start(&self, index: usize) -> usize {
        let tables = body::FIXED_LEN
            + self.tx_count() as usize * format::TX_ENTRY_LEN
            + self.log_count() as usize * format::LOG_ENTRY_LEN;
        tables
            + (0..index)
                .map(|earlier| {
                    format::u32_at(&self.body, body::SECTION_LENS + 4 * earlier) as usize
                })
                .sum::<usize>()
    }

    fn section(&self, section: Section) -> Bytes {
        let start = self.section_start(section as usize);
        self.body.slice(start..start + self.section_len(section))
    }

    /// The block with full transactions, bytes as the upstream sent them.
    pub fn full(&self) -> Bytes {
        self.section(Section::Full)
    }

    /// The block with transaction hashes only.
    pub fn hashes_only(&self) -> Bytes {
        self.section(Section::HashesOnly)
    }

    /// The receipts array, bytes as the upstream sent them.
    pub fn receipts(&self) -> Bytes {
        self.section(Section::Receipts)
    }

    /// Raw header as the upstream sent it; empty when not stored.
    pub fn raw_header(&self) -> Bytes {
        self.section(Section::RawHeader)
    }

    /// Raw block as the upstream sent it; empty when not stored.
    pub fn raw_block(&self) -> Bytes {
        self.section(Section::RawBlock)
    }

    /// Raw receipts as the upstream sent them; empty when not stored.
    pub fn raw_receipts(&self) -> Bytes {
        self.section(Section::RawReceipts)
    }

    fn tx_entry(&self, index: u32) -> usize {
        body::FIXED_LEN + index as usize * format::TX_ENTRY_LEN
    }

    /// The hash of transaction `index` (which must be below [`Block::tx_count`]).
    pub fn tx_hash(&self, index: u32) -> Hash {
        format::hash_at(&self.body, self.tx_entry(index))
    }

    fn span_bytes(&self, section: Section, entry_at: usize) -> Bytes {
        let offset = format::u32_at(&self.body, entry_at) as usize;
        let len = format::u32_at(&self.body, entry_at + 4) as usize;
        self.section(section).slice(offset..offset + len)
    }

    /// Transaction `index` as it appears in the full block, if it exists.
    pub fn transaction(&self, index: u32) -> Option<Bytes> {
        (index < self.tx_count()).then(|| self.span_bytes(Section::Full, self.tx_entry(index) + 32))
    }

    /// The receipt of transaction `index`, if it exists.
    pub fn receipt(&self, index: u32) -> Option<Bytes> {
        (index < self.tx_count())
            .then(|| self.span_bytes(Section::Receipts, self.tx_entry(index) + 40))
    }

    /// The hex digits of transaction `index`'s EIP-2718 encoding, inside the
    /// raw block (empty when not stored).
    pub fn raw_transaction(&self, index: u32) -> Option<Bytes> {
        (index < self.tx_count())
            .then(|| self.span_bytes(Section::RawBlock, self.tx_entry(index) + 48))
    }

    /// The section the log spans point into.
    pub(crate) fn log_bytes(&self) -> Bytes {
        if self.log_section {
            self.body
                .slice(self.section_start(format::SECTIONS)..self.log_section_end())
        } else {
            self.receipts()
        }
    }

    /// Entries in the run table (0 without one).
    fn run_count(&self) -> usize {
        if self.runs {
            format::u32_at(&self.body, self.body.len() - format::RUN_COUNT_LEN) as usize
        } else {
            0
        }
    }

    /// Where the log section stops: at the run table, or the body's end.
    fn log_section_end(&self) -> usize {
        if self.runs {
            self.body.len() - format::RUN_COUNT_LEN - self.run_count() * format::RUN_ENTRY_LEN
        } else {
            self.body.len()
        }
    }

    fn log_entry(&self, index: u32) -> &[u8] {
        let at = body::FIXED_LEN
            + self.tx_count() as usize * format::TX_ENTRY_LEN
            + index as usize * format::LOG_ENTRY_LEN;
        &self.body[at..at + format::LOG_ENTRY_LEN]
    }

    /// The block's emitter runs in log order: consecutive logs sharing
    /// their address and first topic, each read from one table entry
    /// without touching the log table. `None` for records written before
    /// format version 3, which have no run table.
    pub fn emitter_runs(&self) -> Option<impl Iterator<Item = EmitterRun<'_>> + '_> {
        let (runs, count) = (self.log_section_end(), self.run_count());
        self.runs.then(move || {
            (0..count).map(move |r| {
                let entry = &self.body[runs + r * format::RUN_ENTRY_LEN..][..format::RUN_ENTRY_LEN];
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
        })
    }

    /// Bytes `start..end` of the log section, as an [`EmitterRun`] or
    /// [`Block::log_piece`] gives them (pieces that touch join into one):
    /// one slice, never a copy. Only for blocks with a log section (all
    /// but format version 1's records).
    pub fn log_slice(&self, start: u32, end: u32) -> Bytes {
        debug_assert!(self.log_section, "version 1 records have no log section");
        let base = self.section_start(format::SECTIONS);
        self.body.slice(base + start as usize..base + end as usize)
    }

    /// Where log `index` lies in the log section, from the comma before it
    /// to its end, for [`Block::log_slice`]. Only for blocks with a log
    /// section.
    pub fn log_piece(&self, index: u32) -> (u32, u32) {
        let entry = self.log_entry(index);
        let offset = format::u32_at(entry, 4);
        (offset - 1, offset + format::u32_at(entry, 8))
    }

    /// What a filter matches log `index` on (which must be below
    /// [`Block::log_count`]), from the log table alone.
    pub fn log_key(&self, index: u32) -> LogKey<'_> {
        let entry = self.log_entry(index);
        let topic_count = entry[32].min(4) as usize;
        let (topics, _) = entry[36..36 + 32 * topic_count].as_chunks::<32>();
        LogKey {
            index,
            address: entry[12..32].try_into().expect("20 bytes"),
            topics,
        }
    }

    /// The logs of the block, in order, with what filters match on.
    pub fn logs(&self) -> impl Iterator<Item = Log> + '_ {
        let bytes = self.log_bytes();
        (0..self.log_count()).map(move |i| {
            let entry = self.log_entry(i);
            let offset = format::u32_at(entry, 4) as usize;
            let len = format::u32_at(entry, 8) as usize;
            let topic_count = entry[32].min(4) as usize;
            Log {
                tx_index: format::u32_at(entry, 0),
                address: entry[12..32].try_into().expect("20 bytes"),
                topics: std::array::from_fn(|t| format::hash_at(entry, 36 + 32 * t)),
                topic_count,
                bytes: bytes.slice(offset..offset + len),
            }
        })
    }

    /// What a filter matches each log on, in order, read from the log
    /// table alone: no log bytes are touched.
    pub fn log_keys(&self) -> impl Iterator<Item = LogKey<'_>> + '_ {
        (0..self.log_count()).map(move |index| self.log_key(index))
    }

    /// The length of log `index`'s bytes.
    pub fn log_len(&self, index: u32) -> u32 {
        format::u32_at(self.log_entry(index), 8)
    }

    /// Logs `first..=last` as they go into a JSON array after an earlier
    /// element: each preceded by a comma. One slice of the log section,
    /// whatever the run's length; a record without one (kind 1) is copied.
    pub fn log_run(&self, first: u32, last: u32) -> Bytes {
        let bytes = self.log_bytes();
        let span = |i: u32| {
            let entry = self.log_entry(i);
            let offset = format::u32_at(entry, 4) as usize;
            (offset, offset + format::u32_at(entry, 8) as usize)
        };
        if self.log_section {
            // Verified with the CRC: the logs lie back to back, each right
            // after its comma.
            return bytes.slice(span(first).0 - 1..span(last).1);
        }
        let mut joined = Vec::new();
        for i in first..=last {
            let (start, end) = span(i);
            joined.push(b',');
            joined.extend_from_slice(&bytes[start..end]);
        }
        joined.into()
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
