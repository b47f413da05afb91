//! Calls: `eth_call`, `eth_estimateGas` and `eth_createAccessList`,
//! executed with revm (`neve_execution`) against verified state at a
//! stored block, never on an async worker: they are executed methods
//! (`rpc/execute.rs` pins the block, keeps the answers, and the server
//! runs them on the call threads, `server/execute.rs`). A run that read
//! state not held names it ([`Reply::Fetch`]); the server fetches and runs
//! again. Here: each call's parameters and what its runs answer.
//!
//! A call is a miss (421) where neve cannot answer with authority: the
//! block not stored, the chain's rules at it not known, `BLOCKHASH` of a
//! block outside the tail, a precompile move, or state not fetched in
//! time. Answers and errors are geth's, byte for byte: a revert is code 3
//! with `execution reverted[: reason]` and the revert data; anything else
//! that failed is -32000 with geth's message. On avalanchego's C-chain they
//! are coreth's (`in_coreths_words`), and what revm cannot run as coreth
//! does is a miss (`neve_execution`'s `coreth.rs`).

use alloy_primitives::hex;
use neve_execution::{
    AccessListOutcome, AccessListRequest, CallError, Estimate, Pinned, Request, Run, StateOverride,
};

use crate::errors::ErrorCode;
use crate::params::{ParamError, Params};
use crate::rpc::{
    Context, Job, Method, NoReply, Pin, PinnedRun, Ran, Reads, Reply, answered, failure,
    hex_quantity,
};

pub(crate) const METHODS: &[Method] = &[
    // (arguments, block, state overrides, block overrides), as geth.
    Method::executed("eth_call", (1, 4), call_at(parse_call, true)),
    Method::executed("eth_estimateGas", (1, 4), call_at(parse_estimate, true)),
    // (arguments, block, state overrides), as geth. Not kept: its fee
    // defaults come from the oracle at the head, not its pinned block.
    Method::executed(
        "eth_createAccessList",
        (1, 3),
        call_at(parse_access_list, false),
    ),
    // The upstream's answer the rules were read from, passed on as sent:
    // what a mirror of this neve learns them from (`eth_config`, or
    // coreth's `eth_getChainConfig` on Avalanche's C-chain).
    Method::state_read("eth_config", (0, 0), eth_config),
    Method::state_read("eth_getChainConfig", (0, 0), coreth_config),
];

/// A call of geth's layout, its block the second parameter.
const fn call_at(parse: crate::rpc::Parse, memo: bool) -> PinnedRun {
    PinnedRun {
        pin: Pin::At(1),
        parse,
        memo,
        along: None,
    }
}

fn eth_config(ctx: &Context, _: &Params<'_>, _: Reads) -> Result<Reply, NoReply> {
    Ok(config(ctx, "eth_config"))
}

fn coreth_config(ctx: &Context, _: &Params<'_>, _: Reads) -> Result<Reply, NoReply> {
    Ok(config(ctx, "eth_getChainConfig"))
}

fn config(ctx: &Context, method: &str) -> Reply {
    match ctx.call_rules.config(method) {
        Some(config) => Reply::json(config.to_string()),
        None => Reply::Miss,
    }
}

/// `eth_call`: one run, its return data or how it failed.
struct Call(Request);

fn parse_call(p: &Params<'_>) -> Result<Box<dyn Job>, ParamError> {
    Ok(Box::new(Call(parse(p)?)))
}

impl Job for Call {
    fn run(&self, _: &Context, _: Reads, pinned: &Pinned<'_>) -> Result<Ran, CallError> {
        Ok(match neve_execution::run(pinned, &self.0, None)? {
            Run::Done(outcome) => answered(outcome),
            Run::Needs(needs) => Ran::Needs(needs),
            Run::OutsideTail => Ran::Miss,
        })
    }
}

/// `eth_estimateGas`: geth's search over runs.
struct EstimateGas(Request);

fn parse_estimate(p: &Params<'_>) -> Result<Box<dyn Job>, ParamError> {
    Ok(Box::new(EstimateGas(parse(p)?)))
}

impl Job for EstimateGas {
    fn run(&self, _: &Context, _: Reads, pinned: &Pinned<'_>) -> Result<Ran, CallError> {
        let reply = match neve_execution::estimate(pinned, &self.0)? {
            Estimate::Gas(used) => Reply::json(hex_quantity(used)),
            Estimate::Failed(outcome) => failure(&outcome),
            Estimate::Exceeds(limit) => Reply::Error(
                ErrorCode::ExecutionFailed,
                format!("gas required exceeds allowance ({limit})"),
            ),
            Estimate::Incomplete(Run::Needs(needs)) => return Ok(Ran::Needs(needs)),
            Estimate::Incomplete(_) => return Ok(Ran::Miss),
        };
        Ok(Ran::Answered(reply, Vec::new()))
    }
}

/// `eth_createAccessList` as geth makes it: the request readied as geth
/// readies it (`neve_execution::access_list_request`: fee defaults from
/// the oracle's tip at the head), then runs under an access-list tracer
/// until the list stops changing. A run refused before executing is a
/// miss: geth words it with the unsigned transaction's hash, which neve
/// does not make.
struct AccessList(Request);

fn parse_access_list(p: &Params<'_>) -> Result<Box<dyn Job>, ParamError> {
    Ok(Box::new(AccessList(parse(p)?)))
}

impl Job for AccessList {
    fn run(&self, ctx: &Context, reads: Reads, pinned: &Pinned<'_>) -> Result<Ran, CallError> {
        let tip = || match ctx.suggested_tip(reads.latest?, reads) {
            Ok(Some(tip)) => Some(alloy_primitives::U256::from(tip)),
            _ => None,
        };
        let (request, excluded) = match neve_execution::access_list_request(pinned, &self.0, tip)? {
            AccessListRequest::Ready(request, excluded) => (request, excluded),
            AccessListRequest::Refused(message) => {
                let reply = Reply::Error(ErrorCode::ExecutionFailed, message);
                return Ok(Ran::Answered(reply, Vec::new()));
            }
            AccessListRequest::Needs(needs) => return Ok(Ran::Needs(needs)),
        };
        match neve_execution::create_access_list(pinned, &request, excluded) {
            Ok(AccessListOutcome::Done {
                list,
                gas_used,
                error,
            }) => Ok(Ran::Answered(
                Reply::json(access_list_json(
                    list.0
                        .iter()
                        .map(|item| (item.address, item.storage_keys.as_slice())),
                    gas_used,
                    error,
                )),
                Vec::new(),
            )),
            Ok(AccessListOutcome::Incomplete(Run::Needs(needs))) => Ok(Ran::Needs(needs)),
            Ok(AccessListOutcome::Incomplete(_)) => Ok(Ran::Miss),
            // geth names the unsigned transaction's hash in these: the node's.
            Err(CallError::PreCheck(_)) => Ok(Ran::Miss),
            Err(other) => Err(other),
        }
    }
}

/// geth's `{accessList, error, gasUsed}`.
fn access_list_json<'a>(
    list: impl Iterator<Item = (alloy_primitives::Address, &'a [alloy_primitives::B256])>,
    gas_used: u64,
    error: Option<String>,
) -> String {
    let entries: Vec<String> = list
        .map(|(address, storage_keys)| {
            let keys: Vec<String> = storage_keys
                .iter()
                .map(|key| format!("\"0x{}\"", hex::encode(key)))
                .collect();
            format!(
                "{{\"address\":\"0x{}\",\"storageKeys\":[{}]}}",
                hex::encode(address),
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
    format!(
        "{{\"accessList\":[{}]{error},\"gasUsed\":\"0x{gas_used:x}\"}}",
        entries.join(",")
    )
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
