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
//! that failed is -32000 with geth's message. On avalanchego's C-chain they
//! are coreth's (`in_coreths_words`), and what revm cannot run as coreth
//! does is a miss (`neve_execution`'s `coreth.rs`).

use alloy_primitives::{B256, hex};
use neve_execution::{
    BlockFacts, CallError, Dialect, Ended, Estimate, Needs, Outcome, Pinned, Request, Run,
    StateOverride,
};
use neve_state::FetchRequest;

use crate::errors::ErrorCode;
use crate::params::{BlockRef, BlockTag, ParamError, Params};
use crate::rpc::{Context, Method, Pages, Reads, Reply, Stop, hex_quantity};

pub(crate) const METHODS: &[Method] = &[
    // (arguments, block, state overrides, block overrides), as geth.
    Method::state_read("eth_call", (1, 4), call),
    Method::state_read("eth_estimateGas", (1, 4), estimate_gas),
    // (arguments, block, state overrides), as geth.
    Method::state_read("eth_createAccessList", (1, 3), create_access_list),
    // The upstream's answer the rules were read from, passed on as sent:
    // what a mirror of this neve learns them from (`eth_config`, or
    // coreth's `eth_getChainConfig` on Avalanche's C-chain).
    Method::state_read("eth_config", (0, 0), eth_config),
    Method::state_read("eth_getChainConfig", (0, 0), coreth_config),
];

/// How each executed method runs, and whether its answers are kept in
/// the memo (`rpc/call_memo.rs`): those that depend on nothing but the
/// pinned block and the call. `eth_createAccessList`'s fee defaults come
/// from the oracle at the head, which is not its pinned block.
fn how(method: &str) -> Option<(Execute, Option<Memo>)> {
    Some(match method {
        "eth_call" => (run_call, Some(Memo::Call)),
        "eth_estimateGas" => (run_estimate, Some(Memo::Estimate)),
        "eth_createAccessList" => (run_access_list, None),
        _ => return None,
    })
}

/// Whether `method` is executed (a call), not read: what the call metrics
/// count.
pub(crate) fn is_executed(method: &str) -> bool {
    how(method).is_some()
}

fn eth_config(ctx: &Context, _: &Params<'_>, _: Reads) -> Result<Reply, Stop> {
    Ok(config(ctx, "eth_config"))
}

fn coreth_config(ctx: &Context, _: &Params<'_>, _: Reads) -> Result<Reply, Stop> {
    Ok(config(ctx, "eth_getChainConfig"))
}

fn config(ctx: &Context, method: &str) -> Reply {
    match ctx.call_rules.config(method) {
        Some(config) => Reply::json(config.to_string()),
        None => Reply::Miss,
    }
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
        let Some((run, memo)) = how(method) else {
            // Not a call (a fee method): the table answers it, charged
            // for what it read.
            return crate::rpc::charge::charged(|| self.call(method, params, reads));
        };
        let (required, most) = METHODS
            .iter()
            .find(|m| m.name == method)
            .expect("every call is in the table")
            .arity;
        let gas = std::cell::Cell::new(0);
        let answered = Params::new(params).map_err(Stop::from).and_then(|p| {
            p.arity(required, most)?;
            executed(self, &p, reads, &gas, run, memo)
        });
        let reply = match answered {
            Ok(reply) => reply,
            Err(Stop::Param(error)) => error.into(),
            Err(Stop::Cold | Stop::Damaged) => Reply::Miss,
        };
        (reply, gas.get())
    }
}

fn call(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, Stop> {
    first_pass(ctx, p, reads, "eth_call")
}

fn estimate_gas(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, Stop> {
    first_pass(ctx, p, reads, "eth_estimateGas")
}

fn create_access_list(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, Stop> {
    first_pass(ctx, p, reads, "eth_createAccessList")
}

/// A call as the table answers it: on an async worker, a kept answer or
/// [`Reply::Execute`].
fn first_pass(ctx: &Context, p: &Params<'_>, reads: Reads, method: &str) -> Result<Reply, Stop> {
    let (run, memo) = how(method).expect("a call method");
    executed(ctx, p, reads, &Default::default(), run, memo)
}

/// Which memo a method's answers are kept under.
#[derive(Clone, Copy)]
enum Memo {
    Call = 1,
    Estimate = 2,
}

/// The memo's key of a call: the method, the pinned block's hash, and the
/// call's arguments and overrides as sent (the block parameter is the
/// hash: `latest` and its number share answers).
fn memo_key(memo: Memo, block_hash: &[u8; 32], p: &Params<'_>) -> Vec<u8> {
    let parts = [0, 2, 3].map(|index| p.optional(index).map_or("", |raw| raw.get()));
    let mut key = Vec::with_capacity(33 + parts.iter().map(|part| part.len() + 1).sum::<usize>());
    key.push(memo as u8);
    key.extend_from_slice(block_hash);
    for part in parts {
        key.extend_from_slice(part.as_bytes());
        // Not in any JSON text: parts cannot run into each other.
        key.push(0);
    }
    key
}

/// The kept answer to this call, looked up on the async worker: the block
/// from memory only, and anything unusual left for the run to answer.
fn remembered(ctx: &Context, p: &Params<'_>, reads: Reads, memo: Memo) -> Option<Reply> {
    if !ctx.call_answers.enabled() {
        return None;
    }
    let at = p.block_ref_or_latest(1).ok()?;
    let block = ctx.block(at, reads).ok()??;
    ctx.call_answers.get(&memo_key(memo, &block.hash(), p))
}

fn run_call(
    _: &Context,
    _: Reads,
    pinned: &Pinned<'_>,
    request: &Request,
) -> Result<Answer, CallError> {
    Ok(match neve_execution::run(pinned, request, None)? {
        Run::Done(outcome) => Answer::Ran(outcome),
        Run::Needs(needs) => Answer::Needs(needs),
        Run::OutsideTail => Answer::Miss,
    })
}

fn run_estimate(
    _: &Context,
    _: Reads,
    pinned: &Pinned<'_>,
    request: &Request,
) -> Result<Answer, CallError> {
    Ok(match neve_execution::estimate(pinned, request)? {
        Estimate::Gas(used) => Answer::Reply(Reply::json(hex_quantity(used))),
        Estimate::Failed(outcome) => Answer::Reply(failure(&outcome)),
        Estimate::Exceeds(limit) => Answer::Reply(Reply::Error(
            ErrorCode::ExecutionFailed,
            format!("gas required exceeds allowance ({limit})"),
        )),
        Estimate::Incomplete(Run::Needs(needs)) => Answer::Needs(needs),
        Estimate::Incomplete(_) => Answer::Miss,
    })
}

/// One way of executing a request at a pinned block.
type Execute = fn(&Context, Reads, &Pinned<'_>, &Request) -> Result<Answer, CallError>;

/// `eth_createAccessList` as geth makes it: fee defaults filled as geth's
/// `setFeeDefaults` fills them (the oracle's tip at the head, twice the
/// pinned block's base fee on top), then runs under an access-list tracer
/// until the list stops changing. A run refused before executing is a
/// miss: geth words it with the unsigned transaction's hash, which neve
/// does not make.
fn run_access_list(
    ctx: &Context,
    reads: Reads,
    pinned: &Pinned<'_>,
    request: &Request,
) -> Result<Answer, CallError> {
    if pinned.fork.dialect == neve_execution::Dialect::Coreth {
        // Its fee defaults are coreth's oracle's, and its tracer geth
        // 1.13's: the node answers.
        return Ok(Answer::Miss);
    }
    let mut request = request.clone();
    let args = &mut request.args;
    if args.blob_versioned_hashes.is_some() || args.max_fee_per_blob_gas.is_some() {
        // Blob fee defaults come from the head's blob fee: not made here.
        return Err(CallError::Unsupported);
    }
    let refused = |message: &str| {
        Ok(Answer::Reply(Reply::Error(
            ErrorCode::ExecutionFailed,
            message.into(),
        )))
    };
    let both_1559 = args.max_fee_per_gas.is_some() && args.max_priority_fee_per_gas.is_some();
    if args.gas_price.is_some()
        && (args.max_fee_per_gas.is_some() || args.max_priority_fee_per_gas.is_some())
    {
        return refused("both gasPrice and (maxFeePerGas or maxPriorityFeePerGas) specified");
    }
    if args.gas_price.is_some() && args.authorization_list.is_some() {
        return refused("both gasPrice and authorizationList specified");
    }
    let london = pinned.block.base_fee.is_some();
    if both_1559 {
        let (fee_cap, tip) = (
            args.max_fee_per_gas.unwrap_or_default(),
            args.max_priority_fee_per_gas.unwrap_or_default(),
        );
        if fee_cap.is_zero() {
            return refused("maxFeePerGas must be non-zero");
        }
        if fee_cap < tip {
            return refused(&format!(
                "maxFeePerGas ({fee_cap:#x}) < maxPriorityFeePerGas ({tip:#x})"
            ));
        }
    } else if let Some(price) = args.gas_price {
        if london && price.is_zero() {
            return refused("gasPrice must be non-zero after london fork");
        }
    } else if let Some(base_fee) = pinned.block.base_fee {
        let tip = match args.max_priority_fee_per_gas {
            Some(tip) => tip,
            None => {
                let Some(head) = reads.latest else {
                    return Ok(Answer::Miss);
                };
                match ctx.suggested_tip(head, reads) {
                    Ok(Some(tip)) => alloy_primitives::U256::from(tip),
                    _ => return Ok(Answer::Miss),
                }
            }
        };
        let fee_cap = match args.max_fee_per_gas {
            Some(fee_cap) => fee_cap,
            // geth adds in big integers: past 256 bits its pre-check
            // refuses the fee cap in words naming the transaction's hash,
            // which neve does not make.
            None => match alloy_primitives::U256::from(base_fee)
                .checked_mul(alloy_primitives::U256::from(2))
                .and_then(|twice| tip.checked_add(twice))
            {
                Some(fee_cap) => fee_cap,
                None => return Ok(Answer::Miss),
            },
        };
        if fee_cap < tip {
            return refused(&format!(
                "maxFeePerGas ({fee_cap:#x}) < maxPriorityFeePerGas ({tip:#x})"
            ));
        }
        args.max_priority_fee_per_gas = Some(tip);
        args.max_fee_per_gas = Some(fee_cap);
    } else {
        // Before London geth prices the call at the oracle's price.
        return Err(CallError::Unsupported);
    }
    let from = args.sender();
    let gas_limit = args.gas.map_or(neve_execution::GAS_CAP, |g| {
        g.to::<u64>().min(neve_execution::GAS_CAP)
    });
    let auths = args.authorization_list.clone().unwrap_or_default();
    if auths.len() as u64 > gas_limit / 25_000 {
        return refused("insufficient gas to process all authorizations");
    }
    let to = match args.to {
        Some(to) => to,
        None => {
            let nonce = match args.nonce {
                Some(nonce) => nonce.to::<u64>(),
                None => match pinned
                    .state
                    .account(&pinned.block.state_root.0, &from.0.0, false)
                {
                    neve_state::Read::Found(read) => read.account.map_or(0, |a| a.nonce),
                    neve_state::Read::Missing => {
                        return Ok(Answer::Needs(Needs {
                            accounts: [(from, Default::default())].into_iter().collect(),
                        }));
                    }
                },
            };
            from.create(nonce)
        }
    };
    let excluded =
        neve_execution::excluded_addresses(from, to, pinned.fork.spec, pinned.chain_id, &auths);
    match neve_execution::create_access_list(pinned, &request, excluded) {
        Ok(neve_execution::AccessListOutcome::Done {
            list,
            gas_used,
            error,
        }) => {
            let entries: Vec<String> = list
                .0
                .iter()
                .map(|item| {
                    let keys: Vec<String> = item
                        .storage_keys
                        .iter()
                        .map(|key| format!("\"0x{}\"", hex::encode(key)))
                        .collect();
                    format!(
                        "{{\"address\":\"0x{}\",\"storageKeys\":[{}]}}",
                        hex::encode(item.address),
                        keys.join(",")
                    )
                })
                .collect();
            let error = error
                .map(|e| {
                    format!(
                        ",\"error\":{}",
                        serde_json::to_string(&e).expect("a string serialises")
                    )
                })
                .unwrap_or_default();
            Ok(Answer::Reply(Reply::json(format!(
                "{{\"accessList\":[{}]{error},\"gasUsed\":\"0x{gas_used:x}\"}}",
                entries.join(",")
            ))))
        }
        Ok(neve_execution::AccessListOutcome::Incomplete(Run::Needs(needs))) => {
            Ok(Answer::Needs(needs))
        }
        Ok(neve_execution::AccessListOutcome::Incomplete(_)) => Ok(Answer::Miss),
        // geth names the unsigned transaction's hash in these: the node's.
        Err(CallError::PreCheck(_)) => Ok(Answer::Miss),
        Err(other) => Err(other),
    }
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
    execute: Execute,
    memo: Option<Memo>,
) -> Result<Reply, Stop> {
    if reads.pages == Pages::InMemory {
        let kept = memo.and_then(|memo| remembered(ctx, p, reads, memo));
        return Ok(kept.unwrap_or(Reply::Execute));
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
    if facts.contradicts(&fork) {
        rules_contradicted(&facts, &fork);
        return Ok(Reply::Miss);
    }
    let canonical = |height: u64| -> Option<[u8; 32]> {
        let at = BlockRef::Tag(BlockTag::Number(height));
        ctx.block(at, memory)
            .or_else(|_| ctx.block(at, reads))
            .ok()
            .flatten()
            .map(|b| b.hash())
    };
    let block_hash = |height: u64| ancestor_hash(&canonical, (facts.number, hash), height);
    let pinned = Pinned {
        state,
        block: &facts,
        fork,
        rules: &rules,
        spent: Default::default(),
        chain_id: rules.chain_id,
        block_hash: &block_hash,
        codes: &ctx.call_codes,
    };
    let latest = at == BlockRef::Tag(BlockTag::Latest);
    let executed = execute(ctx, reads, &pinned, &request);
    // Every run's gas, whatever came of it.
    gas.set(gas.get() + pinned.spent.get());
    let reply = match executed {
        Ok(Answer::Ran(outcome)) => {
            // The keys a call at `latest` read become hot, so the refresh
            // after each block keeps them and the next call needs the node
            // for nothing.
            if latest {
                state.record_hot_all(&outcome.read);
            }
            match outcome.ended {
                Ended::Success => Reply::json(format!("\"0x{}\"", hex::encode(&outcome.output))),
                _ => failure(&outcome),
            }
        }
        Ok(Answer::Reply(reply)) => reply,
        Ok(Answer::Needs(needs)) => return Ok(Reply::Fetch(requests(&facts, needs))),
        Ok(Answer::Miss) => return Ok(Reply::Miss),
        Err(error) => refused(error),
    };
    let reply = match pinned.fork.dialect {
        Dialect::Ethereum => reply,
        Dialect::Coreth => in_coreths_words(reply),
    };
    if let Some(memo) = memo {
        ctx.call_answers.insert(memo_key(memo, &hash, p), &reply);
    }
    Ok(reply)
}

/// `BLOCKHASH(height)` in a run pinned to `pinned` (its height and hash):
/// the pinned block's ancestor's hash, read as the stored chain's hash at
/// that height so long as the pinned block is still on that chain once it
/// is read. A reorg since pinning would otherwise mix forks in one run
/// (and its answer is kept under the pinned block's hash); then it is
/// `None`, and the run a miss.
fn ancestor_hash(
    canonical: &dyn Fn(u64) -> Option<[u8; 32]>,
    pinned: (u64, [u8; 32]),
    height: u64,
) -> Option<B256> {
    let ancestor = canonical(height)?;
    (canonical(pinned.0)? == pinned.1).then_some(B256::from(ancestor))
}

/// Rules that the block's own header contradicts (a fork's field there,
/// or missing): logged once, and every call at such a block is a miss.
fn rules_contradicted(facts: &BlockFacts, fork: &neve_execution::Fork) {
    static TOLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !TOLD.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(
            block = facts.number,
            claimed = ?fork.spec,
            header = ?facts.shows,
            "the upstream's rules contradict a verified header; calls at such blocks are 421"
        );
    }
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

/// An answer as coreth words it (geth 1.13's way): a revert without data
/// is a plain error, and every error's message is escaped as Go's
/// `encoding/json` escapes it.
fn in_coreths_words(reply: Reply) -> Reply {
    match reply {
        Reply::ErrorData(ErrorCode::ExecutionReverted, message, data) if data == "\"0x\"" => {
            Reply::ErrorData(ErrorCode::ExecutionFailed, message, String::new())
        }
        Reply::Error(code, message) if code != ErrorCode::Internal => {
            Reply::ErrorData(code, message, String::new())
        }
        other => other,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 42.12: after a reorg replaced the pinned block, `BLOCKHASH`
    /// reads nothing of the new fork (the run is a miss).
    #[test]
    fn blockhash_reads_the_pinned_blocks_ancestors_only() {
        let old_fork = |height: u64| Some([height as u8; 32]);
        let new_fork = |height: u64| Some([height as u8 + if height >= 5 { 100 } else { 0 }; 32]);
        let pinned = (7, [7u8; 32]);
        assert_eq!(
            ancestor_hash(&old_fork, pinned, 6),
            Some(B256::repeat_byte(6))
        );
        assert_eq!(
            ancestor_hash(&new_fork, pinned, 6),
            None,
            "the new fork's block 6"
        );
        assert_eq!(
            ancestor_hash(&new_fork, pinned, 3),
            None,
            "pinned block no longer stored"
        );
    }
}
