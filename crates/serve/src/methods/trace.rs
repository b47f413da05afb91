//! Traces: `debug_traceTransaction`, `debug_traceBlockByNumber` and
//! `debug_traceBlockByHash`, as geth answers them. Executed methods
//! pinned to the parent of the block they replay ([`Pin::Parent`]): the
//! block's transactions run over the parent's verified state
//! (`neve_execution::trace`), fetched in rounds like a call's, charged by
//! gas, and kept in the traces' memo under the replayed block's hash.
//!
//! A miss (421) where neve cannot answer with authority: a block or
//! transaction not stored, rules it cannot name, a tracer or option it
//! does not run (JavaScript among them), a replay past its bounds (time,
//! answer bytes), and a replay that does not reproduce the block's
//! verified receipts (counted in `/metrics` and logged: never a trace).

use std::sync::atomic::Ordering;

use neve_execution::trace::{
    BlockTx, ReceiptFacts, ReplayBlock, ReplayError, Replayed, TraceConfig, TraceOptions,
    Unsupported, Which,
};
use neve_execution::{BlockFacts, CallError, Pinned};
use neve_store::Block;

use crate::errors::ErrorCode;
use crate::params::{BlockRef, BlockTag, ParamError, Params};
use crate::rpc::{Context, Job, Located, Method, NoReply, Pin, PinnedRun, Ran, Reads, Reply};

pub(crate) const METHODS: &[Method] = &[
    // (transaction hash, config), as geth.
    Method::executed(
        "debug_traceTransaction",
        (1, 2),
        replays(locate_transaction, parse_transaction),
    ),
    // (block number, config), as geth.
    Method::executed(
        "debug_traceBlockByNumber",
        (1, 2),
        replays(locate_number, parse_number),
    ),
    // (block hash, config), as geth.
    Method::executed(
        "debug_traceBlockByHash",
        (1, 2),
        replays(locate_hash, parse_hash),
    ),
];

const fn replays(locate: crate::rpc::Locate, parse: crate::rpc::Parse) -> PinnedRun {
    PinnedRun {
        pin: Pin::Parent(locate),
        parse,
        memo: true,
    }
}

/// geth's refusal of the genesis block, which has no parent state.
fn genesis() -> Located {
    Located::Reply(Reply::Error(
        ErrorCode::NotTraceable,
        "genesis is not traceable".into(),
    ))
}

/// The stored block `block` is, to replay.
fn located(block: Option<Block>) -> Located {
    match block {
        None => Located::Reply(Reply::Miss),
        Some(block) if block.height() == 0 => genesis(),
        Some(block) => Located::Block(block.height(), block.hash()),
    }
}

fn locate_transaction(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Located, NoReply> {
    let found = ctx.transaction(&p.hash(0)?, reads)?;
    Ok(located(found.map(|(block, _)| block)))
}

fn locate_number(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Located, NoReply> {
    let tag = p.block_tag(0)?;
    if matches!(tag, BlockTag::Number(0) | BlockTag::Earliest) {
        return Ok(genesis());
    }
    Ok(located(ctx.block(BlockRef::Tag(tag), reads)?))
}

fn locate_hash(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Located, NoReply> {
    Ok(located(ctx.block(BlockRef::Hash(p.hash(0)?), reads)?))
}

/// What a trace request names: its block (and transaction), and how to
/// trace it (or that neve does not: the node's).
struct Trace {
    target: Target,
    options: Result<TraceOptions, Unsupported>,
}

#[derive(Clone, Copy)]
enum Target {
    Transaction([u8; 32]),
    Block(BlockRef),
}

fn parse_transaction(p: &Params<'_>) -> Result<Box<dyn Job>, ParamError> {
    let target = Target::Transaction(p.hash(0)?);
    Ok(Box::new(Trace {
        target,
        options: options(p, 1)?,
    }))
}

fn parse_number(p: &Params<'_>) -> Result<Box<dyn Job>, ParamError> {
    let target = Target::Block(BlockRef::Tag(p.block_tag(0)?));
    Ok(Box::new(Trace {
        target,
        options: options(p, 1)?,
    }))
}

fn parse_hash(p: &Params<'_>) -> Result<Box<dyn Job>, ParamError> {
    let target = Target::Block(BlockRef::Hash(p.hash(0)?));
    Ok(Box::new(Trace {
        target,
        options: options(p, 1)?,
    }))
}

/// The trace configuration at `index` (geth's `TraceConfig`; absent or
/// `null` is geth's default, the struct logger).
fn options(p: &Params<'_>, index: usize) -> Result<Result<TraceOptions, Unsupported>, ParamError> {
    let config: TraceConfig = match p.optional(index) {
        Some(raw) => serde_json::from_str(raw.get())
            .map_err(|e| ParamError(format!("invalid argument {index}: {e}")))?,
        None => TraceConfig::default(),
    };
    Ok(config.options())
}

impl Job for Trace {
    fn run(&self, ctx: &Context, reads: Reads, pinned: &Pinned<'_>) -> Result<Ran, CallError> {
        let Ok(options) = &self.options else {
            return Ok(Ran::Miss);
        };
        let found = match self.target {
            Target::Transaction(hash) => ctx
                .transaction(&hash, reads)
                .ok()
                .flatten()
                .map(|(block, index)| (block, Which::One(index as usize))),
            Target::Block(at) => ctx.block(at, reads).ok().flatten().map(|b| (b, Which::All)),
        };
        let Some((block, which)) = found else {
            return Ok(Ran::Miss);
        };
        let Some(replayed) = replay_block(&block, which) else {
            return Ok(Ran::Miss);
        };
        let height = block.height();
        match neve_execution::trace::trace(pinned, &replayed, which, options) {
            Ok(Replayed::Traced(traces)) => {
                let answer = match which {
                    Which::One(_) => traces.into_iter().next().map(|(_, trace)| trace),
                    Which::All => Some(neve_execution::trace::block_answer(&traces)),
                };
                Ok(match answer {
                    Some(answer) => Ran::Answered(Reply::bytes(answer.into()), Vec::new()),
                    None => Ran::Miss,
                })
            }
            Ok(Replayed::Needs(needs)) => Ok(Ran::Needs(needs)),
            Ok(Replayed::OutsideTail) => Ok(Ran::Miss),
            Err(ReplayError::Diverged { index, what }) => {
                ctx.replays_diverged.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    block = height,
                    transaction = index,
                    %what,
                    "a replay did not reproduce the block's verified receipts; its trace is the node's"
                );
                Ok(Ran::Miss)
            }
            Err(ReplayError::Internal(message)) => {
                tracing::warn!(block = height, %message, "a replay failed; its trace is the node's");
                Ok(Ran::Miss)
            }
            Err(ReplayError::Unsupported | ReplayError::Stopped(_)) => Ok(Ran::Miss),
        }
    }
}

/// `block` as a replay takes it: its facts, and its transactions and
/// receipts up to the last one `which` traces; `None` when its raw
/// transactions are not stored, or a record does not read.
fn replay_block(block: &Block, which: Which) -> Option<ReplayBlock> {
    let facts = BlockFacts::from_json(&block.hashes_only().ok()?).ok()?;
    if facts.number != block.height() || facts.hash.0 != block.hash() {
        return None;
    }
    let last = match which {
        Which::All => block.tx_count(),
        Which::One(index) => u32::try_from(index).ok()? + 1,
    };
    let mut txs = Vec::with_capacity(last as usize);
    let mut receipts = Vec::with_capacity(last as usize);
    for index in 0..last {
        let hash = block.tx_hash(index).ok()?;
        let raw = block.raw_transaction(index).ok()??;
        if raw.is_empty() {
            return None;
        }
        let json = block.transaction(index).ok()??;
        txs.push(BlockTx::parse(hash.into(), &raw, &json).ok()?);
        receipts.push(ReceiptFacts::from_json(&block.receipt(index).ok()??).ok()?);
    }
    Some(ReplayBlock {
        facts,
        txs,
        receipts,
    })
}
