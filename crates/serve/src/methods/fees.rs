//! The fee methods a wallet asks beside its calls: `eth_gasPrice`,
//! `eth_maxPriorityFeePerGas`, `eth_feeHistory`, `eth_blobBaseFee` and
//! `eth_baseFee`, computed from stored verified blocks and receipts as
//! geth's price oracle computes them for the same head
//! (`neve_execution::fees`).
//!
//! Each reads up to dozens of full blocks and their receipts, so it never
//! runs on an async worker: there it answers [`Reply::Execute`] and is
//! answered again on the call threads. What a block's fees are is read
//! once per block and cached by height and hash. A block the answer needs
//! that is not stored, or blob fees under rules neve does not know, is a
//! miss (421). So is every fee method on Avalanche's C-chain: coreth's
//! oracle is its own (minimum prices, ACP-176's fees), not geth's.

use neve_execution::fees::{self, BlobParams, BlockFees};

use crate::params::{ParamError, Params};
use crate::rpc::{Context, Method, Pages, Reads, Reply, Stop};

pub(crate) const METHODS: &[Method] = &[
    Method::new("eth_gasPrice", (0, 0), gas_price),
    Method::new("eth_maxPriorityFeePerGas", (0, 0), max_priority_fee),
    Method::new("eth_feeHistory", (2, 3), fee_history),
    Method::new("eth_blobBaseFee", (0, 0), blob_base_fee),
    Method::new("eth_baseFee", (0, 0), base_fee),
];

/// Blocks `eth_feeHistory` answers for at most (geth's default
/// `--rpc.feehistory` header and block limits). Default is 1,024.
pub(crate) const MAX_FEE_HISTORY_BLOCKS: u64 = 1024;

fn quantity(value: u128) -> String {
    format!("\"0x{value:x}\"")
}

/// Runs `answer` off the async workers, at the request's head, where the
/// chain's price oracle is geth's.
fn at_head(
    ctx: &Context,
    reads: Reads,
    answer: impl FnOnce(u64) -> Result<Reply, Stop>,
) -> Result<Reply, Stop> {
    if !ctx.fees_are_geths() {
        return Ok(Reply::Miss);
    }
    if reads.pages == Pages::InMemory {
        return Ok(Reply::Execute);
    }
    // The oracle answers for the request's `latest`.
    match reads.latest {
        Some(head) => answer(head),
        None => Ok(Reply::Miss),
    }
}

fn gas_price(ctx: &Context, _: &Params<'_>, reads: Reads) -> Result<Reply, Stop> {
    at_head(ctx, reads, |head| {
        let (Some(tip), Some(block)) = (
            ctx.suggested_tip(head, reads)?,
            ctx.block_fees(head, reads)?,
        ) else {
            return Ok(Reply::Miss);
        };
        Ok(Reply::json(quantity(fees::gas_price(tip, block.base_fee))))
    })
}

fn max_priority_fee(ctx: &Context, _: &Params<'_>, reads: Reads) -> Result<Reply, Stop> {
    at_head(ctx, reads, |head| {
        Ok(match ctx.suggested_tip(head, reads)? {
            Some(tip) => Reply::json(quantity(tip)),
            None => Reply::Miss,
        })
    })
}

/// The blob schedule in force at `timestamp`, if the chain's rules are
/// known there.
fn blob_params(ctx: &Context, timestamp: u64) -> Option<(BlobParams, u64, bool)> {
    let fork = ctx.call_rules.get()?.at(timestamp)?;
    Some((
        BlobParams {
            max_blobs: fork.blob_max,
            update_fraction: fork.blob_base_fee_update_fraction?,
        },
        fork.blob_target,
        fork.spec.is_enabled_in(neve_execution::SpecId::OSAKA),
    ))
}

fn blob_base_fee(ctx: &Context, _: &Params<'_>, reads: Reads) -> Result<Reply, Stop> {
    at_head(ctx, reads, |head| {
        let Some(block) = ctx.block_fees(head, reads)? else {
            return Ok(Reply::Miss);
        };
        let Some(excess) = block.excess_blob_gas else {
            return Ok(Reply::json("null"));
        };
        Ok(match blob_params(ctx, block.timestamp) {
            Some((params, ..)) => Reply::json(quantity(fees::blob_base_fee(
                excess,
                params.update_fraction,
            ))),
            None => Reply::Miss,
        })
    })
}

fn base_fee(ctx: &Context, _: &Params<'_>, reads: Reads) -> Result<Reply, Stop> {
    at_head(ctx, reads, |head| {
        let Some(block) = ctx.block_fees(head, reads)? else {
            return Ok(Reply::Miss);
        };
        Ok(match block.base_fee {
            Some(_) => Reply::json(quantity(fees::next_base_fee(&block, 2, 8))),
            None => Reply::json("null"),
        })
    })
}

/// geth's `math.HexOrDecimal64`: a JSON number, or a string of decimal or
/// `0x` hex digits.
fn block_count(p: &Params<'_>) -> Result<u64, ParamError> {
    let raw = p.object(0)?.get();
    let invalid = || {
        ParamError(format!(
            "invalid argument 0: invalid hex or decimal integer {raw}"
        ))
    };
    if let Ok(number) = raw.parse::<u64>() {
        return Ok(number);
    }
    let text: &str = serde_json::from_str(raw).map_err(|_| invalid())?;
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(digits) => u64::from_str_radix(digits, 16).map_err(|_| invalid()),
        None => text.parse().map_err(|_| invalid()),
    }
}

fn fee_history(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, Stop> {
    let count = block_count(p)?;
    let newest = p.block_tag(1)?;
    let percentiles: Vec<f64> = match p.optional(2) {
        Some(raw) => serde_json::from_str(raw.get())
            .map_err(|e| ParamError(format!("invalid argument 2: {e}")))?,
        None => Vec::new(),
    };
    if !ctx.fees_are_geths() {
        return Ok(Reply::Miss);
    }
    if reads.pages == Pages::InMemory {
        return Ok(Reply::Execute);
    }
    if count == 0 {
        return Ok(Reply::json(r#"{"oldestBlock":"0x0","gasUsedRatio":null}"#));
    }
    if let Err(message) = fees::validate_percentiles(&percentiles) {
        return Ok(Reply::Error(
            crate::errors::ErrorCode::ExecutionFailed,
            message,
        ));
    }
    let Some(newest) = ctx.resolve(newest, reads) else {
        return Ok(Reply::Miss);
    };
    let count = count.min(MAX_FEE_HISTORY_BLOCKS).min(newest + 1);
    let oldest = newest + 1 - count;
    let mut blocks = Vec::with_capacity(count as usize);
    for height in oldest..=newest {
        match ctx.block_fees(height, reads)? {
            Some(block) => blocks.push(block),
            None => return Ok(Reply::Miss),
        }
    }
    let last = blocks.last().expect("at least one block").clone();
    let next_base_fee = match last.base_fee {
        Some(_) => fees::next_base_fee(&last, 2, 8),
        None => 0,
    };
    let next_blob_base_fee = match last.excess_blob_gas {
        None => 0,
        Some(_) => match blob_params(ctx, last.timestamp) {
            Some((params, target, osaka)) => {
                fees::history_next_blob_base_fee(&last, target, params, osaka)
            }
            None => return Ok(Reply::Miss),
        },
    };
    // A block with blob fields under rules neve does not know: not ours.
    if blocks
        .iter()
        .any(|b| b.excess_blob_gas.is_some() && blob_params(ctx, b.timestamp).is_none())
    {
        return Ok(Reply::Miss);
    }
    let refs: Vec<&BlockFees> = blocks.iter().map(|b| b.as_ref()).collect();
    let history = fees::fee_history(
        &refs,
        &percentiles,
        next_base_fee,
        next_blob_base_fee,
        |timestamp| blob_params(ctx, timestamp).map(|(params, ..)| params),
    );
    let list = |values: &[u128]| {
        let items: Vec<String> = values.iter().map(|v| quantity(*v)).collect();
        format!("[{}]", items.join(","))
    };
    let floats = |values: &[f64]| {
        let items: Vec<String> = values.iter().map(|v| fees::go_float(*v)).collect();
        format!("[{}]", items.join(","))
    };
    let mut out = format!(
        "{{\"oldestBlock\":{}",
        quantity(history.oldest_block as u128)
    );
    if let Some(reward) = &history.reward
        && !reward.is_empty()
    {
        let rows: Vec<String> = reward.iter().map(|row| list(row)).collect();
        out.push_str(&format!(",\"reward\":[{}]", rows.join(",")));
    }
    if !history.base_fee_per_gas.is_empty() {
        out.push_str(&format!(
            ",\"baseFeePerGas\":{}",
            list(&history.base_fee_per_gas)
        ));
    }
    out.push_str(&format!(
        ",\"gasUsedRatio\":{}",
        floats(&history.gas_used_ratio)
    ));
    if !history.base_fee_per_blob_gas.is_empty() {
        out.push_str(&format!(
            ",\"baseFeePerBlobGas\":{}",
            list(&history.base_fee_per_blob_gas)
        ));
    }
    if !history.blob_gas_used_ratio.is_empty() {
        out.push_str(&format!(
            ",\"blobGasUsedRatio\":{}",
            floats(&history.blob_gas_used_ratio)
        ));
    }
    out.push('}');
    Ok(Reply::json(out))
}
