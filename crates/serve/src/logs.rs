//! `eth_getLogs` over the stored tail: blooms skip blocks, the log table
//! matches address and topics without parsing, and matching logs are the
//! stored bytes joined into an array.

use alloy_primitives::{Bloom, BloomInput};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::ErrorCode;
use crate::params::{self, BlockTag};
use crate::rpc::{Context, Reply};

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

/// A parsed filter: alternatives per position, empty meaning "any".
pub(crate) struct Filter {
    addresses: Vec<[u8; 20]>,
    topics: Vec<Vec<[u8; 32]>>,
    address_blooms: Vec<Bloom>,
    topic_blooms: Vec<Vec<Bloom>>,
}

fn bloom_of(bytes: &[u8]) -> Bloom {
    let mut bloom = Bloom::default();
    bloom.accrue(BloomInput::Raw(bytes));
    bloom
}

impl Filter {
    fn parse(shape: &FilterShape<'_>) -> Result<Filter, String> {
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
        Ok(Filter {
            address_blooms: addresses.iter().map(|a| bloom_of(a)).collect(),
            topic_blooms: topics
                .iter()
                .map(|alts| alts.iter().map(|t| bloom_of(t)).collect())
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

    /// The logs of `block` that match.
    pub(crate) fn block_logs<'a>(
        &'a self,
        block: &'a neve_store::Block,
    ) -> impl Iterator<Item = neve_store::Log> + 'a {
        let may = block.log_count() > 0 && self.may_match(&Bloom::from_slice(block.logs_bloom()));
        block
            .logs()
            .filter(move |log| may && self.matches(&log.address, log.topics()))
    }

    /// Whether a block with this bloom may hold a matching log.
    fn may_match(&self, block_bloom: &Bloom) -> bool {
        let any =
            |blooms: &[Bloom]| blooms.is_empty() || blooms.iter().any(|b| block_bloom.contains(b));
        any(&self.address_blooms) && self.topic_blooms.iter().all(|alts| any(alts))
    }

    fn matches(&self, address: &[u8; 20], topics: &[[u8; 32]]) -> bool {
        if !self.addresses.is_empty() && !self.addresses.contains(address) {
            return false;
        }
        // As geth: more filter positions than log topics never match.
        if self.topics.len() > topics.len() {
            return false;
        }
        self.topics
            .iter()
            .zip(topics)
            .all(|(alts, topic)| alts.is_empty() || alts.contains(topic))
    }
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

/// A query spanning at most this many blocks is scanned where it is
/// parsed: its blooms are a few page-cached reads, cheaper than a hop to
/// the blocking pool. Longer ones are scanned there, off the async
/// workers. Default is 32.
pub const SCAN_INLINE_BLOCKS: u64 = 32;

/// What one request may still spend on log scans.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    blocks: u64,
    bytes: u64,
}

impl Budget {
    pub(crate) fn new(blocks: u64, bytes: u64) -> Budget {
        Budget { blocks, bytes }
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
}

/// Parses and resolves a filter, checks the range limit; the reply is the
/// answer when there is nothing to scan (an error, or a miss).
pub(crate) fn plan(ctx: &Context, raw: &RawValue) -> Result<Plan, Reply> {
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
        match ctx.reader.block_by_hash(&hash) {
            Some(block) => (block.height(), block.height(), Some(block)),
            None => return Err(Reply::Miss),
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
/// only the log tables; each run of consecutive matching logs of a block is
/// one slice of its log section, so a block whose logs all match is one
/// chunk of the answer.
pub(crate) fn scan(ctx: &Context, plan: &Plan, budget: &mut Budget) -> Reply {
    let (filter, from, to) = (&plan.filter, plan.from, plan.to);
    // Every run starts with the comma that separates it from what came
    // before; the first one's is cut below.
    let mut chunks = vec![Bytes::from_static(b"[")];
    let mut found = 0usize;
    let mut bytes = 0u64;
    for height in from..=to {
        let Some(block) = plan.by_hash.clone().or_else(|| ctx.reader.block(height)) else {
            return Reply::Miss;
        };
        if block.log_count() == 0 || !filter.may_match(&Bloom::from_slice(block.logs_bloom())) {
            continue;
        }
        let mut run: Option<(u32, u32)> = None;
        for log in block.log_keys() {
            if !filter.matches(log.address, log.topics) {
                if let Some((first, last)) = run.take() {
                    chunks.push(block.log_run(first, last));
                }
                continue;
            }
            found += 1;
            if found > ctx.config.logs_max_results {
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
            bytes += block.log_len(log.index) as u64 + 1;
            if bytes > budget.bytes {
                // Nothing of this query is kept: the rest of the request
                // finds the budget spent.
                budget.bytes = 0;
                return budget
                    .exhausted(&format!("{} bytes of logs", ctx.config.logs_budget_bytes));
            }
            run = Some((run.map_or(log.index, |(first, _)| first), log.index));
        }
        if let Some((first, last)) = run {
            chunks.push(block.log_run(first, last));
        }
    }
    budget.bytes -= bytes;
    if let Some(first) = chunks.get_mut(1) {
        *first = first.slice(1..);
    }
    chunks.push(Bytes::from_static(b"]"));
    Reply::Result(chunks)
}
