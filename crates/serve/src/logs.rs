//! `eth_getLogs` over the stored tail: blooms skip blocks, the log table
//! matches address and topics without parsing, and matching logs are the
//! stored bytes joined into an array.

use alloy_primitives::{Bloom, keccak256};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::ErrorCode;
use crate::params::{self, BlockTag};
use crate::rpc::{Context, Reads, Reply};

/// One-or-many, as the filter's `address` and topic positions allow.
#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany<'a> {
    One(#[serde(borrow)] &'a str),
    Many(#[serde(borrow)] Vec<Option<&'a str>>),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FilterShape<'a> {
    #[serde(borrow)]
    from_block: Option<&'a str>,
    #[serde(borrow)]
    to_block: Option<&'a str>,
    #[serde(borrow)]
    block_hash: Option<&'a str>,
    #[serde(borrow)]
    address: Option<OneOrMany<'a>>,
    #[serde(borrow)]
    topics: Option<Vec<Option<OneOrMany<'a>>>>,
}

/// Most addresses a filter may name, and most alternatives in one topic
/// position: geth's default (`--rpc.logquerylimit`), so both refuse the
/// same filters, and a bound on what a filter holds (a WebSocket session
/// keeps up to 64) and on the work of matching one log.
pub const MAX_FILTER_ALTERNATIVES: usize = 1000;

/// A parsed filter: alternatives per position (sorted), empty meaning "any".
pub(crate) struct Filter {
    addresses: Vec<[u8; 20]>,
    topics: Vec<Vec<[u8; 32]>>,
    address_blooms: Vec<BloomBits>,
    topic_blooms: Vec<Vec<BloomBits>>,
}

/// The three bits one value sets in a 2048-bit logs bloom (the yellow
/// paper's M3:2048), as (byte, mask) pairs: 6 bytes where a whole bloom of
/// the value would take 256.
#[derive(Clone, Copy)]
struct BloomBits([(u16, u8); 3]);

impl BloomBits {
    fn of(bytes: &[u8]) -> BloomBits {
        let hash = keccak256(bytes);
        BloomBits([0, 2, 4].map(|i| {
            let bit = ((hash[i] as usize) << 8 | hash[i + 1] as usize) & 2047;
            ((255 - bit / 8) as u16, 1u8 << (bit % 8))
        }))
    }

    fn in_bloom(&self, bloom: &Bloom) -> bool {
        self.0
            .iter()
            .all(|&(byte, mask)| bloom.0[byte as usize] & mask != 0)
    }
}

fn sorted<T: Ord>(mut values: Vec<T>) -> Vec<T> {
    values.sort_unstable();
    values.dedup();
    values
}

fn within_limit<T>(values: &[T]) -> Result<(), String> {
    if values.len() > MAX_FILTER_ALTERNATIVES {
        return Err(format!(
            "exceed max addresses or topics per search position (at most {MAX_FILTER_ALTERNATIVES})"
        ));
    }
    Ok(())
}

impl Filter {
    fn parse(shape: &FilterShape<'_>) -> Result<Filter, String> {
        if let Some(OneOrMany::Many(list)) = &shape.address {
            within_limit(list)?;
        }
        for position in shape.topics.iter().flatten() {
            if let Some(OneOrMany::Many(list)) = position {
                within_limit(list)?;
            }
        }
        let addresses = match &shape.address {
            None => Vec::new(),
            Some(OneOrMany::One(a)) => vec![params::address(a)?],
            Some(OneOrMany::Many(list)) => list
                .iter()
                .map(|a| {
                    a.ok_or_else(|| "null is not an address".to_string())
                        .and_then(params::address)
                })
                .collect::<Result<_, _>>()?,
        };
        let mut topics = Vec::new();
        for position in shape.topics.iter().flatten() {
            topics.push(match position {
                None => Vec::new(),
                Some(OneOrMany::One(t)) => vec![params::hash(t)?],
                // As geth: a null alternative makes the position match anything.
                Some(OneOrMany::Many(list)) if list.iter().any(Option::is_none) => Vec::new(),
                Some(OneOrMany::Many(list)) => list
                    .iter()
                    .flatten()
                    .map(|t| params::hash(t))
                    .collect::<Result<_, _>>()?,
            });
        }
        if topics.len() > 4 {
            return Err("too many topics, at most 4".into());
        }
        let addresses = sorted(addresses);
        let topics: Vec<Vec<[u8; 32]>> = topics.into_iter().map(sorted).collect();
        Ok(Filter {
            address_blooms: addresses.iter().map(|a| BloomBits::of(a)).collect(),
            topic_blooms: topics
                .iter()
                .map(|alts| alts.iter().map(|t| BloomBits::of(t)).collect())
                .collect(),
            addresses,
            topics,
        })
    }

    /// The address and topic part of a `logs` subscription's filter.
    pub(crate) fn for_subscription(raw: &RawValue) -> Result<Filter, String> {
        let shape: FilterShape<'_> =
            serde_json::from_str(raw.get()).map_err(|e| format!("invalid argument 1: {e}"))?;
        Filter::parse(&shape).map_err(|e| format!("invalid argument 1: {e}"))
    }

    /// The logs of `block` that match (none when its logs are damaged:
    /// counted and logged by the store).
    pub(crate) fn block_logs(&self, block: &neve_store::Block) -> Vec<neve_store::Log> {
        if block.log_count() == 0 || !self.may_match(&Bloom::from_slice(block.logs_bloom())) {
            return Vec::new();
        }
        let mut logs = block.logs().unwrap_or_default();
        logs.retain(|log| self.matches(&log.address, log.topics()));
        logs
    }

    /// Whether a block with this bloom may hold a matching log.
    fn may_match(&self, block_bloom: &Bloom) -> bool {
        let any =
            |bits: &[BloomBits]| bits.is_empty() || bits.iter().any(|b| b.in_bloom(block_bloom));
        any(&self.address_blooms) && self.topic_blooms.iter().all(|alts| any(alts))
    }

    /// How a run of logs sharing an address and first topic fares: decided
    /// whole from its run-table entry where the filter constrains no
    /// position past the first (the usual address-and-event query), else
    /// log by log.
    fn match_run(&self, run: &neve_store::EmitterRun<'_>) -> RunMatch {
        if !self.addresses.is_empty() && self.addresses.binary_search(run.address).is_err() {
            return RunMatch::None;
        }
        let Some(first_position) = self.topics.first() else {
            return RunMatch::All;
        };
        // Its logs have no topics, and a filter position needs one.
        let Some(topic0) = run.topic0 else {
            return RunMatch::None;
        };
        if !first_position.is_empty() && first_position.binary_search(topic0).is_err() {
            return RunMatch::None;
        }
        // As in `matches`: a log with fewer topics than the filter has
        // positions never matches, so a whole run matches only when its
        // shortest log is long enough.
        let wildcards_after_first = self.topics[1..].iter().all(Vec::is_empty);
        if wildcards_after_first && self.topics.len() <= run.fewest_topics as usize {
            RunMatch::All
        } else {
            RunMatch::Each
        }
    }

    fn matches(&self, address: &[u8; 20], topics: &[[u8; 32]]) -> bool {
        if !self.addresses.is_empty() && self.addresses.binary_search(address).is_err() {
            return false;
        }
        // As geth: more filter positions than log topics never match.
        if self.topics.len() > topics.len() {
            return false;
        }
        self.topics
            .iter()
            .zip(topics)
            .all(|(alts, topic)| alts.is_empty() || alts.binary_search(topic).is_ok())
    }
}

/// What a filter says of an emitter run.
#[derive(Debug, PartialEq, Eq)]
enum RunMatch {
    /// No log of it matches.
    None,
    /// Every log of it matches.
    All,
    /// Its logs must be matched one by one.
    Each,
}

fn invalid(message: impl Into<String>) -> Reply {
    Reply::Error(ErrorCode::InvalidParams, message.into())
}

/// Most blocks the `eth_getLogs` calls of one request (a call, or all of
/// a batch's) may scan together: two queries at the range limit. With the
/// range limit alone, a batch of 1,000 whole-range queries was 10 million
/// block scans on one request; past this the rest of the batch's queries
/// get -32005. Default is 20,000.
pub const DEFAULT_LOGS_BUDGET_BLOCKS: u64 = 20_000;

/// Most bytes of logs the `eth_getLogs` calls of one request may produce
/// together, so one request cannot hold more than this of answer in
/// memory; past it the query being scanned, and the rest, get -32005.
/// Default is 64 MiB.
pub const DEFAULT_LOGS_BUDGET_BYTES: u64 = 64 << 20;

/// Queries spanning at most this many blocks together are scanned where
/// they are parsed: their blooms are a few page-cached reads, cheaper than
/// a hop to the scan threads. The rest of a request's queries (a batch of
/// short ones too, once it has used this up) are scanned there, off the
/// async workers. Default is 32.
pub const SCAN_INLINE_BLOCKS: u64 = 32;

/// Most requests whose log scans may wait for (or run on) the scan threads
/// at once. Past it a request's off-worker queries are refused at once with
/// -32005 instead of queueing behind scans the client would time out on:
/// the threads are few (half the background cores) and a scan may take
/// seconds. Default is 64.
pub const MAX_QUEUED_SCANS: u64 = 64;

/// What one request may still spend on log scans.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    blocks: u64,
    bytes: u64,
    /// Blocks still to be scanned on the async worker.
    inline: u64,
}

impl Budget {
    pub(crate) fn new(blocks: u64, bytes: u64) -> Budget {
        Budget {
            blocks,
            bytes,
            inline: SCAN_INLINE_BLOCKS,
        }
    }

    /// Whether a query of `blocks` is short enough to scan on the async
    /// worker (books nothing).
    pub(crate) fn fits_inline(&self, blocks: u64) -> bool {
        blocks <= self.inline
    }

    /// Whether a query of `blocks` may be scanned on the async worker; if
    /// so, books them.
    pub(crate) fn take_inline(&mut self, blocks: u64) -> bool {
        if !self.fits_inline(blocks) {
            return false;
        }
        self.inline -= blocks;
        true
    }

    fn exhausted(&self, what: &str) -> Reply {
        Reply::Error(
            ErrorCode::LimitExceeded,
            format!(
                "request exceeds its eth_getLogs budget ({what}); send fewer or narrower queries per request"
            ),
        )
    }

    /// Books the blocks a query will scan, or refuses it.
    pub(crate) fn charge_blocks(&mut self, blocks: u64, limit: u64) -> Result<(), Reply> {
        if blocks > self.blocks {
            return Err(self.exhausted(&format!("{limit} blocks scanned")));
        }
        self.blocks -= blocks;
        Ok(())
    }
}

/// A query ready to scan: its filter and the heights it covers.
pub(crate) struct Plan {
    filter: Filter,
    from: u64,
    to: u64,
    /// By hash, the block found is the one searched: a reorg between the
    /// lookup and a re-read by height cannot swap it.
    by_hash: Option<neve_store::Block>,
}

impl Plan {
    /// How many blocks it covers.
    pub(crate) fn blocks(&self) -> u64 {
        self.to - self.from + 1
    }

    /// Whether scanning it touches only pages in memory: each block's
    /// fixed fields, log and run tables and log section (for a short query
    /// on an async worker; one that is not goes to the scan threads).
    pub(crate) fn in_memory(&self, ctx: &Context) -> bool {
        let logs_in_memory =
            |block: Option<&neve_store::Block>| block.is_none_or(neve_store::Block::logs_in_memory);
        match &self.by_hash {
            Some(block) => logs_in_memory(Some(block)),
            None => (self.from..=self.to).all(|height| {
                ctx.reader
                    .in_memory()
                    .block(height)
                    .is_ok_and(|block| logs_in_memory(block.as_ref()))
            }),
        }
    }
}

/// Parses and resolves a filter, checks the range limit; the reply is the
/// answer when there is nothing to scan (an error, or a miss), or
/// [`Reply::Cold`] when the block a hash names is not in memory and
/// `reads` may not wait for it.
pub(crate) fn plan(ctx: &Context, raw: &RawValue, reads: Reads) -> Result<Plan, Reply> {
    let shape: FilterShape<'_> = match serde_json::from_str(raw.get()) {
        Ok(shape) => shape,
        Err(e) => return Err(invalid(format!("invalid argument 0: {e}"))),
    };
    let filter = match Filter::parse(&shape) {
        Ok(filter) => filter,
        Err(e) => return Err(invalid(format!("invalid argument 0: {e}"))),
    };
    let (from, to, by_hash) = if let Some(hash) = shape.block_hash {
        if shape.from_block.is_some() || shape.to_block.is_some() {
            return Err(invalid(
                "invalid argument 0: cannot specify both BlockHash and FromBlock/ToBlock, choose one or the other",
            ));
        }
        let hash = match params::hash(hash) {
            Ok(hash) => hash,
            Err(e) => return Err(invalid(format!("invalid argument 0: {e}"))),
        };
        let found = match reads {
            Reads::InMemory => ctx.reader.in_memory().block_by_hash(&hash),
            Reads::FromDisk => Ok(ctx.reader.block_by_hash(&hash)),
        };
        match found {
            Ok(Some(block)) => (block.height(), block.height(), Some(block)),
            Ok(None) => return Err(Reply::Miss),
            Err(neve_store::Cold) => return Err(Reply::Cold),
        }
    } else {
        let tag = |text: Option<&str>| text.map_or(Ok(BlockTag::Latest), params::block_tag);
        let (from_tag, to_tag) = match (tag(shape.from_block), tag(shape.to_block)) {
            (Ok(f), Ok(t)) => (f, t),
            (Err(e), _) | (_, Err(e)) => return Err(invalid(format!("invalid argument 0: {e}"))),
        };
        // Past the upstream's own head is wrong everywhere, not just here.
        if let (Some(head), BlockTag::Number(n)) = (ctx.chain.upstream_head(), to_tag)
            && n > head
        {
            return Err(invalid("block range extends beyond current head block"));
        }
        let (Some(from), Some(to)) = (ctx.resolve(from_tag), ctx.resolve(to_tag)) else {
            return Err(Reply::Miss);
        };
        if from > to {
            return Err(invalid("invalid block range params"));
        }
        (from, to, None)
    };
    let max_range = ctx.config.logs_max_range;
    if to - from >= max_range {
        return Err(Reply::Error(
            ErrorCode::LimitExceeded,
            format!(
                "block range too large: at most {max_range} blocks per query; try [0x{from:x}, 0x{:x}]",
                from + max_range - 1
            ),
        ));
    }
    Ok(Plan {
        filter,
        from,
        to,
        by_hash,
    })
}

/// Scans a planned query, spending from `budget`'s bytes. Matching reads
/// a block's emitter runs (format 3 records) and touches the log table only
/// for runs the filter cannot decide whole; matching logs that lie back to
/// back are one slice of the block's log section, so a block whose logs all
/// match is one chunk of the answer.
pub(crate) fn scan(ctx: &Context, plan: &Plan, budget: &mut Budget) -> Reply {
    let (filter, from, to) = (&plan.filter, plan.from, plan.to);
    let mut answer = Answer {
        // Every piece starts with the comma that separates it from what
        // came before; the first one's is cut below.
        chunks: {
            // A piece or two a block is usual; more grows the vector.
            let mut chunks = Vec::with_capacity(plan.blocks().min(1024) as usize + 2);
            chunks.push(Bytes::from_static(b"["));
            chunks
        },
        found: 0,
        bytes: 0,
        max_results: ctx.config.logs_max_results,
        max_bytes: budget.bytes,
    };
    for height in from..=to {
        let Some(block) = plan.by_hash.clone().or_else(|| ctx.reader.block(height)) else {
            return Reply::Miss;
        };
        if block.log_count() == 0 || !filter.may_match(&Bloom::from_slice(block.logs_bloom())) {
            continue;
        }
        let scanned = match block.emitter_runs() {
            Ok(runs) => answer.by_runs(filter, &block, runs.iter()),
            Err(_) => Err(Overrun::Damaged),
        };
        match scanned {
            Ok(()) => {}
            // Counted and logged by the store; not ours to answer.
            Err(Overrun::Damaged) => return Reply::Miss,
            Err(Overrun::Results) => {
                let hint = if height > from {
                    format!("; try [0x{from:x}, 0x{:x}]", height - 1)
                } else {
                    String::new()
                };
                return Reply::Error(
                    ErrorCode::LimitExceeded,
                    format!(
                        "query returned more than {} results{hint}",
                        ctx.config.logs_max_results
                    ),
                );
            }
            Err(Overrun::Bytes) => {
                // Nothing of this query is kept: the rest of the request
                // finds the budget spent.
                budget.bytes = 0;
                return budget
                    .exhausted(&format!("{} bytes of logs", ctx.config.logs_budget_bytes));
            }
        }
    }
    budget.bytes -= answer.bytes;
    let mut chunks = answer.chunks;
    if let Some(first) = chunks.get_mut(1) {
        *first = first.slice(1..);
    }
    chunks.push(Bytes::from_static(b"]"));
    Reply::Result(chunks)
}

/// Byte ranges of one block's log section that go into an answer, joined
/// while each starts where the last ended.
#[derive(Default)]
struct Pieces {
    open: Option<(u32, u32)>,
}

impl Pieces {
    fn add(
        &mut self,
        chunks: &mut Vec<Bytes>,
        block: &neve_store::Block,
        start: u32,
        end: u32,
    ) -> Result<(), Overrun> {
        match &mut self.open {
            Some((_, open_end)) if *open_end == start => *open_end = end,
            open => {
                if let Some((s, e)) = open.replace((start, end)) {
                    chunks.push(block.log_slice(s, e).map_err(|_| Overrun::Damaged)?);
                }
            }
        }
        Ok(())
    }

    fn finish(self, chunks: &mut Vec<Bytes>, block: &neve_store::Block) -> Result<(), Overrun> {
        if let Some((start, end)) = self.open {
            chunks.push(block.log_slice(start, end).map_err(|_| Overrun::Damaged)?);
        }
        Ok(())
    }
}

/// Which limit a query ran past.
#[derive(Debug, PartialEq, Eq)]
enum Overrun {
    /// `--logs-max-results`.
    Results,
    /// The request's bytes of logs.
    Bytes,
    /// A part of the block failed its check.
    Damaged,
}

/// A query's answer as it is scanned: the pieces of log sections, and what
/// it has taken of its limits.
struct Answer {
    chunks: Vec<Bytes>,
    found: usize,
    bytes: u64,
    max_results: usize,
    max_bytes: u64,
}

impl Answer {
    /// Counts `logs` matching logs of `bytes` (their commas included).
    fn take(&mut self, logs: usize, bytes: u64) -> Result<(), Overrun> {
        self.found += logs;
        if self.found > self.max_results {
            return Err(Overrun::Results);
        }
        self.bytes += bytes;
        if self.bytes > self.max_bytes {
            return Err(Overrun::Bytes);
        }
        Ok(())
    }

    /// A block with emitter runs: a run the filter decides whole costs one
    /// table entry, however many logs it holds; pieces that touch (whole
    /// runs and single logs alike) are joined into one slice.
    fn by_runs<'a>(
        &mut self,
        filter: &Filter,
        block: &'a neve_store::Block,
        runs: impl Iterator<Item = neve_store::EmitterRun<'a>>,
    ) -> Result<(), Overrun> {
        let mut pieces = Pieces::default();
        let mut table: Option<neve_store::LogTable> = None;
        for run in runs {
            let whole = match filter.match_run(&run) {
                RunMatch::None => continue,
                RunMatch::All => {
                    let bytes = (run.end - run.start) as u64;
                    // Past both limits inside this run, which comes first
                    // depends on its logs' lengths: counted log by log, the
                    // refusal is the one a log-by-log scan gives.
                    let both = self.found + run.count as usize > self.max_results
                        && self.bytes + bytes > self.max_bytes;
                    if !both {
                        self.take(run.count as usize, bytes)?;
                        pieces.add(&mut self.chunks, block, run.start, run.end)?;
                        continue;
                    }
                    true
                }
                RunMatch::Each => false,
            };
            // Read once a block, and only when a run needs its logs' keys.
            if table.is_none() {
                table = Some(block.log_table().map_err(|_| Overrun::Damaged)?);
            }
            let table = table.as_ref().expect("read above");
            for index in run.first..run.first + run.count {
                let log = table.key(index);
                if whole || filter.matches(log.address, log.topics) {
                    let (start, end) = table.piece(index);
                    self.take(1, (end - start) as u64)?;
                    pieces.add(&mut self.chunks, block, start, end)?;
                }
            }
        }
        pieces.finish(&mut self.chunks, block)
    }
}

#[cfg(test)]
mod tests {
    use alloy_primitives::BloomInput;

    use super::*;

    impl Answer {
        /// Every log's table entry read, each matching log a piece: what
        /// [`Answer::by_runs`] must answer the same as.
        fn by_logs(&mut self, filter: &Filter, block: &neve_store::Block) -> Result<(), Overrun> {
            let table = block.log_table().map_err(|_| Overrun::Damaged)?;
            let mut pieces = Pieces::default();
            for index in 0..table.len() {
                let log = table.key(index);
                if filter.matches(log.address, log.topics) {
                    let (start, end) = table.piece(index);
                    self.take(1, (end - start) as u64)?;
                    pieces.add(&mut self.chunks, block, start, end)?;
                }
            }
            pieces.finish(&mut self.chunks, block)
        }
    }

    #[test]
    fn a_values_bits_are_the_bits_it_sets_in_a_bloom() {
        for n in 0u32..2000 {
            let value = keccak256(n.to_le_bytes());
            let bits = BloomBits::of(&value[..(n % 33) as usize]);
            let mut alone = Bloom::default();
            alone.accrue(BloomInput::Raw(&value[..(n % 33) as usize]));
            assert!(bits.in_bloom(&alone));
            let mut others = Bloom::default();
            others.accrue(BloomInput::Raw(&value[..]));
            assert_eq!(bits.in_bloom(&others), others.contains(&alone), "{n}");
        }
    }

    fn filter(json: &str) -> Result<Filter, String> {
        Filter::parse(&serde_json::from_str(json).unwrap())
    }

    #[test]
    fn a_request_scans_at_most_its_inline_blocks_on_the_worker() {
        let mut budget = Budget::new(1000, 1000);
        assert!(budget.take_inline(SCAN_INLINE_BLOCKS / 2));
        assert!(!budget.take_inline(SCAN_INLINE_BLOCKS));
        assert!(budget.take_inline(SCAN_INLINE_BLOCKS / 2));
        assert!(
            !budget.take_inline(1),
            "a batch of short queries goes off the worker"
        );
    }

    #[test]
    fn filters_hold_at_most_a_thousand_alternatives_a_position() {
        let list = |n: usize, width: usize| {
            (0..n)
                .map(|i| format!("\"0x{i:0width$x}\""))
                .collect::<Vec<_>>()
                .join(",")
        };
        assert!(filter(&format!("{{\"address\":[{}]}}", list(1000, 40))).is_ok());
        let error = filter(&format!("{{\"address\":[{}]}}", list(1001, 40)))
            .err()
            .unwrap();
        assert!(error.contains("exceed max addresses or topics"), "{error}");
        assert!(filter(&format!("{{\"topics\":[null,[{}]]}}", list(1000, 64))).is_ok());
        assert!(filter(&format!("{{\"topics\":[null,[{}]]}}", list(1001, 64))).is_err());
    }

    /// `synthetic` as this build stores it, read back (the directory lives
    /// as long as the block is used).
    fn stored(
        synthetic: &neve_store::testing::SyntheticBlock,
    ) -> (tempfile::TempDir, neve_store::Block) {
        let dir = tempfile::tempdir().unwrap();
        let identity = neve_store::Identity {
            chain_id: 5,
            genesis_hash: [0; 32],
        };
        let config = neve_store::StoreConfig {
            durability: neve_store::Durability::OsBuffered,
            ..neve_store::StoreConfig::default()
        };
        let mut store = neve_store::Store::open(dir.path(), identity, config).unwrap();
        store.append(&[synthetic.as_new()]).unwrap();
        let block = store.reader().block(synthetic.height).unwrap();
        (dir, block)
    }

    fn hex_of(byte: u8, width: usize) -> String {
        format!("\"0x{}\"", format!("{byte:02x}").repeat(width))
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(96))]
        /// Deciding whole emitter runs answers what matching log by log
        /// does: the same bytes, count and refusals, for any filter and
        /// limits (`by_logs` is how blocks before format 3 are scanned).
        #[test]
        fn scanning_by_runs_answers_what_scanning_log_by_log_does(
            logs in proptest::collection::vec(
                (0u8..3, proptest::collection::vec(0u8..3, 0..=4)),
                1..30,
            ),
            addresses in proptest::collection::vec(0u8..4, 0..3),
            positions in proptest::collection::vec(
                proptest::option::of(proptest::collection::vec(0u8..4, 0..3)),
                0..4,
            ),
            max_results in 1usize..40,
            max_bytes in 1u64..3000,
        ) {
            let mut synthetic = neve_store::testing::SyntheticBlock::new(0, 1, logs.len() as u32, 130);
            for (entry, (address, topics)) in synthetic.logs.iter_mut().zip(&logs) {
                entry.address = [*address; 20];
                entry.topics = topics.iter().map(|t| [*t; 32]).collect();
            }
            let (_dir, block) = stored(&synthetic);

            let list = |values: &[u8], width| {
                values.iter().map(|v| hex_of(*v, width)).collect::<Vec<_>>().join(",")
            };
            let topics: Vec<String> = positions
                .iter()
                .map(|p| p.as_ref().map_or("null".to_string(), |alts| format!("[{}]", list(alts, 32))))
                .collect();
            let json = format!(
                "{{\"address\":[{}],\"topics\":[{}]}}",
                list(&addresses, 20),
                topics.join(",")
            );
            let filter = filter(&json).unwrap();
            let scan = |by_runs: bool| {
                let mut answer = Answer { chunks: Vec::new(), found: 0, bytes: 0, max_results, max_bytes };
                let scanned = if by_runs {
                    answer.by_runs(&filter, &block, block.emitter_runs().unwrap().iter())
                } else {
                    answer.by_logs(&filter, &block)
                };
                (scanned, answer.found, answer.bytes, answer.chunks.concat())
            };
            let (runs, logs) = (scan(true), scan(false));
            proptest::prop_assert_eq!(&runs.0, &logs.0, "{}", json);
            if runs.0.is_ok() {
                proptest::prop_assert_eq!(runs, logs, "{}", json);
            }
        }
    }

    #[test]
    fn a_block_whose_logs_all_match_is_one_slice() {
        let mut synthetic = neve_store::testing::SyntheticBlock::new(0, 1, 20, 130);
        for entry in &mut synthetic.logs {
            entry.address = [7; 20];
            entry.topics = vec![[1; 32], [2; 32]];
        }
        // The last log is another event of the same contract.
        synthetic.logs[19].topics = vec![[3; 32]];
        let (_dir, block) = stored(&synthetic);
        let scan = |json: &str| {
            let mut answer = Answer {
                chunks: Vec::new(),
                found: 0,
                bytes: 0,
                max_results: 1000,
                max_bytes: 1 << 20,
            };
            answer
                .by_runs(
                    &filter(json).unwrap(),
                    &block,
                    block.emitter_runs().unwrap().iter(),
                )
                .unwrap();
            (answer.found, answer.chunks.len())
        };
        let address = hex_of(7, 20);
        assert_eq!(scan(&format!("{{\"address\":{address}}}")), (20, 1));
        assert_eq!(
            scan(&format!(
                "{{\"address\":{address},\"topics\":[{}]}}",
                hex_of(1, 32)
            )),
            (19, 1)
        );
        // A second position: the run is matched log by log, still one slice.
        assert_eq!(
            scan(&format!("{{\"topics\":[null,{}]}}", hex_of(2, 32))),
            (19, 1)
        );
        // More positions than the other event's logs have topics.
        assert_eq!(scan("{\"topics\":[null,null]}"), (19, 1));
        assert_eq!(scan(&format!("{{\"topics\":[{}]}}", hex_of(3, 32))), (1, 1));
        assert_eq!(scan(&format!("{{\"address\":{}}}", hex_of(8, 20))), (0, 0));
    }

    #[test]
    fn matching_reads_sorted_alternatives() {
        let f = filter(
            r#"{"address":["0x0000000000000000000000000000000000000009","0x0000000000000000000000000000000000000001","0x0000000000000000000000000000000000000009"],
                "topics":[["0x0000000000000000000000000000000000000000000000000000000000000002","0x0000000000000000000000000000000000000000000000000000000000000001"]]}"#,
        )
        .unwrap();
        assert_eq!(f.addresses.len(), 2, "duplicates dropped");
        let address = |b: u8| {
            let mut a = [0u8; 20];
            a[19] = b;
            a
        };
        let topic = |b: u8| {
            let mut t = [0u8; 32];
            t[31] = b;
            t
        };
        assert!(f.matches(&address(9), &[topic(1)]));
        assert!(f.matches(&address(1), &[topic(2), topic(7)]));
        assert!(!f.matches(&address(2), &[topic(1)]));
        assert!(!f.matches(&address(9), &[topic(3)]));
        assert!(!f.matches(&address(9), &[]));
    }
}
