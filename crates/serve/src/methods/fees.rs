//! The fee methods a wallet asks beside its calls: `eth_gasPrice`,
//! `eth_maxPriorityFeePerGas`, `eth_feeHistory`, `eth_blobBaseFee` and
//! `eth_baseFee`, computed from stored verified blocks and receipts as
//! geth's price oracle computes them for the same head
//! (`neve_execution::fees`).
//!
//! Each reads up to dozens of full blocks and their receipts (fee history
//! up to [`MAX_FEE_HISTORY_BLOCKS`] headers, or blocks and receipts with
//! reward percentiles), so it never runs on an async worker: there it
//! answers [`Reply::LongRead`] and is answered again on the call threads.
//! What a block's fees are is read once per block and cached by height and
//! hash (fee history's heads apart from its rewards, `fees::HistoryCache`),
//! and fee history charges its client by the blocks it read ([`charge`]).
//! A block the answer needs that is not stored, or blob fees under rules
//! neve does not know, is a miss (421). So is every fee method on
//! Avalanche's C-chain: coreth's oracle is its own (minimum prices,
//! ACP-176's fees), not geth's.

use bytes::Bytes;
use neve_execution::fees::{self, BlobParams, HistoryBlock, HistoryReads};

use crate::params::{BlockRef, BlockTag, ParamError, Params};
use crate::rpc::charge::charge;
use crate::rpc::{Context, Method, NoReply, Reads, Reply, Waits};

pub(crate) const METHODS: &[Method] = &[
    Method::new("eth_gasPrice", (0, 0), gas_price),
    Method::new("eth_maxPriorityFeePerGas", (0, 0), max_priority_fee),
    // (blockCount, newestBlock, rewardPercentiles): all three required, as
    // geth's `[]float64` is (only pointer arguments may be left out); a
    // null third is no percentiles there and here.
    Method::new("eth_feeHistory", (3, 3), fee_history),
    Method::new("eth_blobBaseFee", (0, 0), blob_base_fee),
    Method::new("eth_baseFee", (0, 0), base_fee),
];

/// Blocks `eth_feeHistory` answers for at most (geth's default
/// `--rpc.feehistory` header and block limits). Default is 1,024.
pub(crate) const MAX_FEE_HISTORY_BLOCKS: u64 = fees::MAX_FEE_HISTORY_BLOCKS;

/// What `eth_feeHistory` charges per block of its range found in the cache
/// (the record opened for its hash, the row computed and encoded), in the
/// gas of `--client-rate` (`clients::GAS_PER_UNIT` to a unit, a unit
/// about 75 µs of a core as the 50 M gas cap's 10,000 units are most of
/// a second). Estimated from the debug build's timing (`tests::
/// fee_history_cpu_per_request`: ~13 µs a block there) taken as about
/// five times the release build's. Default is 200.
pub(crate) const GAS_PER_BLOCK_CACHED: u64 = 200;

/// What `eth_feeHistory` charges per block it read from the store (its
/// header JSON, or its full block and receipts), beside the bytes parsed.
/// Default is 400.
pub(crate) const GAS_PER_BLOCK_READ: u64 = 400;

/// What `eth_feeHistory` charges per KiB of block and receipt JSON it
/// parsed (~5 µs a KiB in the debug build). Default is 100: a 1,024-block
/// range of 350 KB blocks and receipts read cold costs ~7,300 units, its
/// headers alone ~320, and either range answered from the cache ~41.
pub(crate) const GAS_PER_KIB_PARSED: u64 = 100;

/// The gas `reads` is charged.
pub(crate) fn gas_of(reads: &HistoryReads) -> u64 {
    reads
        .cached
        .saturating_mul(GAS_PER_BLOCK_CACHED)
        .saturating_add(reads.blocks_read().saturating_mul(GAS_PER_BLOCK_READ))
        .saturating_add(reads.bytes.saturating_mul(GAS_PER_KIB_PARSED) / 1024)
}

fn quantity(value: u128) -> String {
    format!("\"0x{value:x}\"")
}

/// Runs `answer` off the async workers, at the request's head, where the
/// chain's price oracle is geth's.
fn at_head(
    ctx: &Context,
    reads: Reads,
    answer: impl FnOnce(u64) -> Result<Reply, NoReply>,
) -> Result<Reply, NoReply> {
    if !ctx.fees_are_geths() {
        return Ok(Reply::Miss);
    }
    if reads.waits == Waits::Never {
        return Ok(Reply::LongRead);
    }
    // The oracle answers for the request's `latest`.
    match reads.latest {
        Some(head) => answer(head),
        None => Ok(Reply::Miss),
    }
}

fn gas_price(ctx: &Context, _: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
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

fn max_priority_fee(ctx: &Context, _: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
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

fn blob_base_fee(ctx: &Context, _: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
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

fn base_fee(ctx: &Context, _: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
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

/// A stored block as fee history reads it.
struct Stored(neve_store::Block);

impl fees::StoredBlock for Stored {
    type Json = Bytes;

    fn hash(&self) -> [u8; 32] {
        self.0.hash()
    }

    fn header_json(&self) -> Option<Bytes> {
        self.0.hashes_only().ok()
    }

    fn full_json(&self) -> Option<Bytes> {
        self.0.full().ok()
    }

    fn receipts_json(&self) -> Option<Bytes> {
        self.0.receipts().ok()
    }
}

fn fee_history(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    let count = block_count(p)?;
    let newest = p.block_tag(1)?;
    // geth decodes a null `[]float64` as nil: no percentiles.
    let percentiles: Vec<f64> = match p.optional(2) {
        Some(raw) => serde_json::from_str(raw.get())
            .map_err(|e| ParamError(format!("invalid argument 2: {e}")))?,
        None => Vec::new(),
    };
    if !ctx.fees_are_geths() {
        return Ok(Reply::Miss);
    }
    if reads.waits == Waits::Never {
        return Ok(Reply::LongRead);
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
    // Headers alone without percentiles, as geth reads them.
    let mut read = HistoryReads::default();
    let blocks = ctx.fee_blocks.history.blocks(
        oldest..=newest,
        !percentiles.is_empty(),
        |height| {
            ctx.block(BlockRef::Tag(BlockTag::Number(height)), reads)
                .map(|block| block.map(Stored))
        },
        &mut read,
    );
    charge(gas_of(&read));
    let Some(blocks) = blocks? else {
        return Ok(Reply::Miss);
    };
    let json = history_json(&blocks, &percentiles, |time| blob_params(ctx, time));
    Ok(match json {
        Some(json) => Reply::json(json),
        None => Reply::Miss,
    })
}

/// The answer over `blocks` (oldest first, at least one), or `None` where
/// a block has blob fields under rules neve does not know (not ours).
/// `blob` is [`blob_params`].
fn history_json(
    blocks: &[HistoryBlock],
    percentiles: &[f64],
    blob: impl Fn(u64) -> Option<(BlobParams, u64, bool)>,
) -> Option<String> {
    let last = blocks
        .last()
        .expect("at least one block")
        .head
        .as_block_fees();
    let next_base_fee = match last.base_fee {
        Some(_) => fees::next_base_fee(&last, 2, 8),
        None => 0,
    };
    let next_blob_base_fee = match last.excess_blob_gas {
        None => 0,
        Some(_) => {
            let (params, target, osaka) = blob(last.timestamp)?;
            fees::history_next_blob_base_fee(&last, target, params, osaka)
        }
    };
    // A block with blob fields under rules neve does not know: not ours.
    if blocks
        .iter()
        .any(|b| b.head.excess_blob_gas.is_some() && blob(b.head.timestamp).is_none())
    {
        return None;
    }
    let history = fees::fee_history_of(
        blocks,
        percentiles,
        next_base_fee,
        next_blob_base_fee,
        |timestamp| blob(timestamp).map(|(params, ..)| params),
    );
    Some(encode(&history))
}

/// geth's JSON of a fee history: `reward` only with percentiles, the blob
/// fields only when there are some.
fn encode(history: &fees::FeeHistory) -> String {
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
    out
}

#[cfg(test)]
mod tests;
