//! Traces: `debug_traceTransaction`, `debug_traceBlockByNumber`,
//! `debug_traceBlockByHash` and `debug_traceCall`, as geth answers them. Executed methods
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

mod ahead;
mod stored;

use stored::replay_block;

use neve_execution::trace::{
    ReplayError, TRACE_CONFIG_KEYS, TraceConfig, TraceOptions, Unsupported, Which, block_answer,
    joins_others, keys_read_alike, trace_block_along,
};
use neve_execution::{CallError, Pinned, Request};
use neve_store::Block;

use crate::errors::ErrorCode;
use crate::params::{BlockRef, BlockTag, ParamError, Params};
use crate::rpc::{
    Alongside, Context, Job, Located, Method, NoReply, Pin, PinnedRun, Ran, Reads, Reply,
};

pub(crate) const METHODS: &[Method] = &[
    // (transaction hash, config), as geth.
    Method::executed(
        "debug_traceTransaction",
        (1, 2),
        replays(locate_transaction, parse_transaction, None),
    ),
    // (block number, config), as geth; a block's replay answers the
    // configurations other clients trace blocks with lately too.
    Method::executed(
        "debug_traceBlockByNumber",
        (1, 2),
        replays(locate_number, parse_number, ALONG),
    ),
    // (block hash, config), as geth; likewise.
    Method::executed(
        "debug_traceBlockByHash",
        (1, 2),
        replays(locate_hash, parse_hash, ALONG),
    ),
    // (call, block, config with overrides and `txIndex`), as geth.
    Method::executed(
        "debug_traceCall",
        (2, 3),
        replays(locate_call, parse_call, None),
    ),
];

/// A whole block's trace: its configuration the second parameter.
const ALONG: Option<Alongside> = Some(Alongside {
    param: 1,
    joins: |text| {
        config_of(Some(text))
            .ok()
            .and_then(|(_, options)| options.ok())
            .is_some_and(|options| joins_others(&options))
    },
});

const fn replays(
    locate: crate::rpc::Locate,
    parse: crate::rpc::Parse,
    along: Option<Alongside>,
) -> PinnedRun {
    PinnedRun {
        pin: Pin::Parent(locate),
        parse,
        memo: true,
        along,
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

fn locate_call(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Located, NoReply> {
    let at = p.block_ref(1)?;
    let Some(index) = call_config(p)?.tx_index else {
        return Ok(Located::After(at));
    };
    let Some(block) = ctx.block(at, reads)? else {
        return Ok(Located::Reply(Reply::Miss));
    };
    // geth's refusals, told before any state is read (a cold block's
    // witness is not asked for an index it has no transaction at).
    let refused =
        |message: String| Located::Reply(Reply::Error(ErrorCode::ExecutionFailed, message));
    if block.height() == 0 {
        return Ok(refused("no transaction in genesis".into()));
    }
    let index = index.to::<u64>();
    if !runs_before(index, block.tx_count()) {
        // As geth prints it: the index as Go's `int`.
        let hash = alloy_primitives::B256::from(block.hash());
        return Ok(refused(format!(
            "transaction index {} out of range for block {hash}",
            index as i64
        )));
    }
    Ok(Located::Block(block.height(), block.hash()))
}

/// Whether a traced call runs at `index` of a block of `count`
/// transactions: before one of them, or at the start of a block of none
/// (over its parent's state, as geth does).
fn runs_before(index: u64, count: u32) -> bool {
    index < u64::from(count) || index == 0
}

/// What a trace request names: its block (and transaction), and how to
/// trace it (or that neve does not: the node's).
struct Trace {
    target: Target,
    options: Result<TraceOptions, Unsupported>,
    /// Configurations other clients trace blocks with, each as they send
    /// it, to answer in the same replay ([`Job::offer`]).
    offered: Vec<(Box<str>, TraceOptions)>,
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
        offered: Vec::new(),
    }))
}

fn parse_number(p: &Params<'_>) -> Result<Box<dyn Job>, ParamError> {
    let target = Target::Block(BlockRef::Tag(p.block_tag(0)?));
    Ok(Box::new(Trace {
        target,
        options: options(p, 1)?,
        offered: Vec::new(),
    }))
}

fn parse_hash(p: &Params<'_>) -> Result<Box<dyn Job>, ParamError> {
    let target = Target::Block(BlockRef::Hash(p.hash(0)?));
    Ok(Box::new(Trace {
        target,
        options: options(p, 1)?,
        offered: Vec::new(),
    }))
}

/// The trace configuration at `index` (geth's `TraceConfig`; absent or
/// `null` is geth's default, the struct logger).
fn options(p: &Params<'_>, index: usize) -> Result<Result<TraceOptions, Unsupported>, ParamError> {
    Ok(config_at(p, index)?.1)
}

/// The configuration at `index`, and the tracing it asks for: the node's
/// where geth would read its keys otherwise (Go matches them without
/// regard to case, the last of two wins).
fn config_at(
    p: &Params<'_>,
    index: usize,
) -> Result<(TraceConfig, Result<TraceOptions, Unsupported>), ParamError> {
    config_of(p.optional(index).map(|raw| raw.get()))
        .map_err(|e| ParamError(format!("invalid argument {index}: {e}")))
}

/// The configuration `text` is (absent: geth's default), and the tracing
/// it asks for; serde's words when it does not read.
fn config_of(
    text: Option<&str>,
) -> Result<(TraceConfig, Result<TraceOptions, Unsupported>), serde_json::Error> {
    let config: TraceConfig = match text {
        // Read otherwise by geth (a duplicate key serde refuses among
        // them): the node's, whatever serde would make of it.
        Some(text) if !keys_read_alike(text, TRACE_CONFIG_KEYS) => {
            return Ok((
                TraceConfig::default(),
                Err(Unsupported("configuration keys geth reads otherwise")),
            ));
        }
        Some(text) => serde_json::from_str(text)?,
        None => TraceConfig::default(),
    };
    let options = config.options();
    Ok((config, options))
}

/// `debug_traceCall`'s configuration (geth's `TraceCallConfig`).
fn call_config(p: &Params<'_>) -> Result<TraceConfig, ParamError> {
    config_at(p, 2).map(|(config, _)| config)
}

/// `debug_traceCall`: a call, the block it runs at, how to trace it.
struct TraceCall {
    request: Request,
    at: BlockRef,
    tx_index: Option<usize>,
    options: Result<TraceOptions, Unsupported>,
}

fn parse_call(p: &Params<'_>) -> Result<Box<dyn Job>, ParamError> {
    // A `null` call is geth's zero value: every field absent.
    let args = match p.optional(0) {
        Some(raw) => serde_json::from_str(raw.get())
            .map_err(|e| ParamError(format!("invalid argument 0: {e}")))?,
        None => {
            p.object(0)?;
            Default::default()
        }
    };
    let at = p.block_ref(1)?;
    let (config, options) = config_at(p, 2)?;
    let tx_index = config
        .tx_index
        .map(|index| usize::try_from(index.to::<u64>()).unwrap_or(usize::MAX));
    Ok(Box::new(TraceCall {
        request: Request {
            args,
            state: config.state_overrides,
            block: config.block_overrides,
        },
        at,
        tx_index,
        options,
    }))
}

impl Job for TraceCall {
    fn runs_here(&self) -> bool {
        self.options.is_ok()
    }

    fn replays_part(&self) -> bool {
        self.tx_index.is_some()
    }

    fn run(&self, ctx: &Context, reads: Reads, pinned: &Pinned<'_>) -> Result<Ran, CallError> {
        let Ok(options) = &self.options else {
            return Ok(Ran::Miss);
        };
        let block;
        let at = match self.tx_index {
            None => None,
            Some(index) => {
                let Some(found) = ctx.block(self.at, reads).ok().flatten() else {
                    return Ok(Ran::Miss);
                };
                if !runs_before(index as u64, found.tx_count()) {
                    // Refused where the block was located: not this one.
                    return Ok(Ran::Miss);
                }
                let Some(replayed) = replay_block(&found, Which::Before(index)) else {
                    return Ok(Ran::Miss);
                };
                block = replayed;
                Some((&block, index))
            }
        };
        let since = reads.since.unwrap_or_else(std::time::Instant::now);
        let traced = neve_execution::trace::trace_call(pinned, &self.request, options, at, since);
        answered(ctx, pinned.block.number, traced)
    }
}

impl Job for Trace {
    /// A whole block's transactions and receipts parsed into the cache
    /// its run reads them from (a third of the run after a witness).
    fn prepare(&self, ctx: &Context, reads: Reads) {
        if let Target::Block(at) = self.target
            && let Some(block) = ctx.block(at, reads).ok().flatten()
        {
            ctx.replay_blocks
                .get_or_read(block.height(), &block.hash(), || {
                    replay_block(&block, Which::All).inspect(|_| {
                        ctx.blocks_prepared.fetch_add(1, Ordering::Relaxed);
                    })
                });
        }
    }

    fn runs_here(&self) -> bool {
        self.options.is_ok()
    }

    fn replays_part(&self) -> bool {
        matches!(self.target, Target::Transaction(_))
    }

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
        // A whole block parsed once for its runs (and its companions').
        let replayed = match which {
            Which::All => ctx
                .replay_blocks
                .get_or_read(block.height(), &block.hash(), || {
                    replay_block(&block, which)
                }),
            _ => replay_block(&block, which).map(std::sync::Arc::new),
        };
        let Some(replayed) = replayed else {
            return Ok(Ran::Miss);
        };
        let since = reads.since.unwrap_or_else(std::time::Instant::now);
        if which == Which::All {
            // With nothing offered, the asked tracer alone.
            let offered: Vec<TraceOptions> = self.offered.iter().map(|(_, o)| o.clone()).collect();
            let traced = trace_block_along(pinned, &replayed, options, &offered, since);
            if !reads.fetched {
                // Ahead of the block a client tracing the chain asks next,
                // fetched beside this one's round (less what that round
                // fetches: held at this block's root after it).
                let fetching = match &traced {
                    Err(ReplayError::Needs(needs)) => Some(needs),
                    _ => None,
                };
                ahead::offer_child(ctx, reads, pinned, &replayed, fetching);
            }
            let (answer, along) = match traced {
                Ok((traces, along)) => (Ok(block_answer(&traces)), along),
                Err(error) => (Err(error), Vec::new()),
            };
            let made: Vec<(Box<str>, Reply)> = self
                .offered
                .iter()
                .zip(along)
                .filter_map(|((config, _), traces)| {
                    Some((config.clone(), Reply::bytes(block_answer(&traces?).into())))
                })
                .collect();
            return match answered(ctx, block.height(), answer)? {
                Ran::Answered(reply, _) if !made.is_empty() => Ok(Ran::AnsweredAlong(reply, made)),
                ran => Ok(ran),
            };
        }
        let traced = neve_execution::trace::trace(pinned, &replayed, which, options, since)
            .and_then(|traces| {
                traces
                    .into_iter()
                    .next()
                    .map(|(_, trace)| trace)
                    .ok_or(ReplayError::Unsupported)
            });
        answered(ctx, block.height(), traced)
    }

    fn offer(&mut self, configs: Vec<Box<str>>) {
        if !matches!(self.target, Target::Block(_)) {
            return;
        }
        // Only what reads as a configuration neve traces with; the
        // replay runs those it can beside the asked one.
        self.offered = configs
            .into_iter()
            .filter_map(|text| {
                let (_, options) = config_of(Some(&text)).ok()?;
                Some((text, options.ok()?))
            })
            .collect();
    }
}

/// Whether a replay's fault at `height` is the first told of that block:
/// a batch of traces of one block logs it once (every one is counted).
fn first_for(height: u64) -> bool {
    static LAST: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(u64::MAX);
    LAST.swap(height, Ordering::Relaxed) != height
}

/// What a replay came to, as an answer: the trace, the state to fetch,
/// geth's refusal of the call, or a miss (a replay unlike the chain's is
/// counted and logged).
fn answered(
    ctx: &Context,
    height: u64,
    traced: Result<Vec<u8>, ReplayError>,
) -> Result<Ran, CallError> {
    match traced {
        Ok(answer) => Ok(Ran::Answered(Reply::bytes(answer.into()), Vec::new())),
        Err(ReplayError::Needs(needs)) => Ok(Ran::Needs(needs)),
        Err(ReplayError::Diverged { index, what }) => {
            ctx.replays_diverged.fetch_add(1, Ordering::Relaxed);
            if first_for(height) {
                tracing::warn!(
                    block = height,
                    transaction = index,
                    %what,
                    "a replay did not reproduce the block's verified receipts; its trace is the node's"
                );
            }
            Ok(Ran::Miss)
        }
        Err(ReplayError::Internal(message)) => {
            if first_for(height) {
                tracing::warn!(block = height, %message, "a replay failed; its trace is the node's");
            }
            Ok(Ran::Miss)
        }
        // Refused before it ran, in geth's words for a call.
        Err(ReplayError::Call(error @ (CallError::Args(_) | CallError::Override(_)))) => Err(error),
        Err(
            ReplayError::Call(_)
            | ReplayError::Unsupported
            | ReplayError::Stopped(_)
            | ReplayError::OutsideTail,
        ) => Ok(Ran::Miss),
    }
}
