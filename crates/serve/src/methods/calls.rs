//! Calls: `eth_call` and `eth_estimateGas`, executed with revm
//! (`neve_execution`) against verified state at a stored block, never on
//! an async worker: there the handler only answers [`Reply::Execute`], and
//! the server runs the call again on the call threads
//! (`server/execute.rs`). A run that read state not held names it
//! ([`Reply::Fetch`]); the server fetches and runs again.
//!
//! A call is a miss (421) where neve cannot answer with authority: the
//! block not stored, the chain's rules at it not known, `BLOCKHASH` of a
//! block outside the tail, a precompile move, or state not fetched in
//! time. Answers and errors are geth's, byte for byte: a revert is code 3
//! with `execution reverted[: reason]` and the revert data; anything else
//! that failed is -32000 with geth's message.

use alloy_primitives::{B256, hex};
use neve_execution::{
    BlockFacts, CallError, Ended, Estimate, Needs, Outcome, Pinned, Request, Run, StateOverride,
};
use neve_state::{FetchRequest, HotKey, State};

use crate::errors::ErrorCode;
use crate::params::{BlockRef, BlockTag, ParamError, Params};
use crate::rpc::{Context, Method, Pages, Reads, Reply, Stop};

pub(crate) const METHODS: &[Method] = &[
    // (arguments, block, state overrides, block overrides), as geth.
    Method::state_read("eth_call", (1, 4), call),
    Method::state_read("eth_estimateGas", (1, 4), estimate_gas),
    // The upstream's answer the rules were read from, passed on as sent:
    // what a mirror of this neve learns them from.
    Method::state_read("eth_config", (0, 0), config),
];

fn config(ctx: &Context, _: &Params<'_>, _: Reads) -> Result<Reply, Stop> {
    Ok(match ctx.call_rules.config() {
        Some(config) => Reply::json(config.to_string()),
        None => Reply::Miss,
    })
}

impl Context {
    /// Answers a call to execute (on the call threads), and the gas its
    /// run used, for the client's budget.
    pub(crate) fn execute(
        &self,
        method: &str,
        params: Option<&serde_json::value::RawValue>,
        reads: Reads,
    ) -> (Reply, u64) {
        let gas = std::cell::Cell::new(0);
        let answer = |p: &Params<'_>| match method {
            "eth_call" => executed(self, p, reads, &gas, run_call),
            "eth_estimateGas" => executed(self, p, reads, &gas, run_estimate),
            // Not a call: the table answers it.
            _ => Err(Stop::Cold),
        };
        let reply = match Params::new(params) {
            Ok(p) if matches!(method, "eth_call" | "eth_estimateGas") => {
                match p.arity(1, 4).map_err(Stop::from).and_then(|()| answer(&p)) {
                    Ok(reply) => reply,
                    Err(Stop::Param(error)) => error.into(),
                    Err(Stop::Cold) => Reply::Miss,
                    Err(Stop::Damaged) => Reply::Miss,
                }
            }
            _ => self.call(method, params, reads),
        };
        (reply, gas.get())
    }
}

fn call(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, Stop> {
    executed(ctx, p, reads, &Default::default(), run_call)
}

fn estimate_gas(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, Stop> {
    executed(ctx, p, reads, &Default::default(), run_estimate)
}

fn run_call(
    pinned: &Pinned<'_>,
    request: &Request,
    gas: &std::cell::Cell<u64>,
) -> Result<Answer, CallError> {
    Ok(match neve_execution::run(pinned, request, None)? {
        Run::Done(outcome) => {
            gas.set(gas.get() + outcome.gas_used);
            Answer::Ran(outcome)
        }
        Run::Needs(needs) => Answer::Needs(needs),
        Run::OutsideTail => Answer::Miss,
    })
}

fn run_estimate(
    pinned: &Pinned<'_>,
    request: &Request,
    gas: &std::cell::Cell<u64>,
) -> Result<Answer, CallError> {
    Ok(match neve_execution::estimate(pinned, request)? {
        Estimate::Gas(used) => {
            gas.set(gas.get() + used);
            Answer::Reply(Reply::json(format!("\"0x{used:x}\"")))
        }
        Estimate::Failed(outcome) => {
            gas.set(gas.get() + outcome.gas_used);
            Answer::Reply(failure(&outcome))
        }
        Estimate::Exceeds(limit) => {
            gas.set(gas.get() + limit);
            Answer::Reply(Reply::Error(
                ErrorCode::ExecutionFailed,
                format!("gas required exceeds allowance ({limit})"),
            ))
        }
        Estimate::Incomplete(Run::Needs(needs)) => Answer::Needs(needs),
        Estimate::Incomplete(_) => Answer::Miss,
    })
}

/// What executing found.
enum Answer {
    /// A run over held state (its reads become hot keys at `latest`).
    Ran(Outcome),
    /// A finished reply.
    Reply(Reply),
    /// State to fetch first.
    Needs(Needs),
    /// Not answerable here.
    Miss,
}

/// The request's parts, the pinned block, then `execute`, off the async
/// workers only.
fn executed(
    ctx: &Context,
    p: &Params<'_>,
    reads: Reads,
    gas: &std::cell::Cell<u64>,
    execute: fn(&Pinned<'_>, &Request, &std::cell::Cell<u64>) -> Result<Answer, CallError>,
) -> Result<Reply, Stop> {
    if reads.pages == Pages::InMemory {
        return Ok(Reply::Execute);
    }
    let Some(state) = &ctx.state else {
        return Ok(Reply::Unsupported);
    };
    let request = parse(p)?;
    let at = p.block_ref_or_latest(1)?;
    let Some(rules) = ctx.call_rules.get() else {
        return Ok(Reply::Miss);
    };
    // The block's table entry and header are read from memory when they
    // are there (they are, for recent blocks), from the disk otherwise.
    let memory = Reads {
        pages: Pages::InMemory,
        ..reads
    };
    let Some(block) = ctx.block(at, memory).or_else(|_| ctx.block(at, reads))? else {
        return Ok(Reply::Miss);
    };
    let hash = block.hash();
    let Some(facts) = ctx.call_blocks.get_or_read(block.height(), &hash, || {
        let json = match block.hashes_only() {
            Ok(json) => json,
            // Not in memory: read from the disk (here waiting is allowed).
            Err(_) => ctx
                .block(BlockRef::Hash(hash), reads)
                .ok()??
                .hashes_only()
                .ok()?,
        };
        BlockFacts::from_json(&json)
            .ok()
            .filter(|facts| facts.number == block.height() && facts.hash.0 == hash)
    }) else {
        return Ok(Reply::Miss);
    };
    let Some(fork) = rules.at(facts.timestamp) else {
        return Ok(Reply::Miss);
    };
    let block_hash = |height: u64| -> Option<B256> {
        let at = BlockRef::Tag(BlockTag::Number(height));
        ctx.block(at, memory)
            .or_else(|_| ctx.block(at, reads))
            .ok()
            .flatten()
            .map(|b| B256::from(b.hash()))
    };
    let pinned = Pinned {
        state,
        block: &facts,
        fork,
        chain_id: rules.chain_id,
        block_hash: &block_hash,
        codes: &ctx.call_codes,
    };
    let answer = match execute(&pinned, &request, gas) {
        Ok(answer) => answer,
        Err(error) => return Ok(refused(error)),
    };
    let latest = at == BlockRef::Tag(BlockTag::Latest);
    Ok(match answer {
        Answer::Ran(outcome) => {
            if latest {
                record_hot(state, &outcome.read);
            }
            match outcome.ended {
                Ended::Success => Reply::json(format!("\"0x{}\"", hex::encode(&outcome.output))),
                _ => failure(&outcome),
            }
        }
        Answer::Reply(reply) => reply,
        Answer::Needs(needs) => Reply::Fetch(requests(&facts, needs)),
        Answer::Miss => Reply::Miss,
    })
}

/// A run that did not succeed, as geth answers it.
fn failure(outcome: &Outcome) -> Reply {
    match &outcome.ended {
        Ended::Revert | Ended::Success => Reply::ErrorData(
            ErrorCode::ExecutionReverted,
            neve_execution::revert_message(&outcome.output),
            format!("\"0x{}\"", hex::encode(&outcome.output)),
        ),
        Ended::Halt(message) => Reply::Error(ErrorCode::ExecutionFailed, message.clone()),
    }
}

/// An error of the call itself, as geth answers it.
fn refused(error: CallError) -> Reply {
    match error {
        CallError::Unsupported => Reply::Miss,
        CallError::Internal(message) => Reply::Error(ErrorCode::Internal, message),
        other => Reply::Error(ErrorCode::ExecutionFailed, other.to_string()),
    }
}

/// The call's arguments and overrides; -32602 naming the argument, as
/// geth's decoding does.
fn parse(p: &Params<'_>) -> Result<Request, ParamError> {
    let invalid =
        |index: usize, e: serde_json::Error| ParamError(format!("invalid argument {index}: {e}"));
    // A `null` object is geth's zero value: every field absent.
    let args = match p.optional(0) {
        Some(raw) => serde_json::from_str(raw.get()).map_err(|e| invalid(0, e))?,
        None => {
            p.object(0)?;
            Default::default()
        }
    };
    let state = p
        .optional(2)
        .map(|raw| serde_json::from_str::<StateOverride>(raw.get()).map_err(|e| invalid(2, e)))
        .transpose()?;
    let block = p
        .optional(3)
        .map(|raw| serde_json::from_str(raw.get()).map_err(|e| invalid(3, e)))
        .transpose()?;
    Ok(Request { args, state, block })
}

/// The fetches a run's needs ask for, at the pinned block.
fn requests(facts: &BlockFacts, needs: Needs) -> Vec<FetchRequest> {
    needs
        .accounts
        .into_iter()
        .map(|(address, (slots, code))| FetchRequest {
            block_hash: facts.hash.0,
            state_root: facts.state_root.0,
            address: address.0.0,
            slots: slots.into_iter().map(|slot| slot.0).collect(),
            code,
        })
        .collect()
}

/// The keys a call at `latest` read become hot, so the refresh after each
/// block keeps them and the next call needs the node for nothing.
fn record_hot(state: &State, read: &[HotKey]) {
    let mut seen = std::collections::HashSet::with_capacity(read.len());
    for key in read {
        if seen.insert(*key) {
            state.record_hot(*key);
        }
    }
}
