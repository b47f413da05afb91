//! Blocks and transactions: a block by height, tag or hash (hashes only or
//! full), its transaction count, a transaction by block and index or by
//! hash. Each answer is a stored record's bytes; a block or transaction not
//! stored is a miss.

use bytes::Bytes;
use neve_store::{Block, Unread};

use crate::params::{BlockRef, Params};
use crate::rpc::{Context, Method, NoReply, Reads, Reply, count};

#[rustfmt::skip] // a table: one method a line
pub(crate) const METHODS: &[Method] = &[
    Method::new("eth_getBlockByNumber", (2, 2), by_number),
    Method::new("eth_getBlockByHash", (2, 2), by_hash),
    Method::new("eth_getBlockTransactionCountByNumber", (1, 1), tx_count_by_number),
    Method::new("eth_getBlockTransactionCountByHash", (1, 1), tx_count_by_hash),
    Method::new("eth_getTransactionByBlockNumberAndIndex", (2, 2), tx_by_number_and_index),
    Method::new("eth_getTransactionByBlockHashAndIndex", (2, 2), tx_by_hash_and_index),
    Method::new("eth_getTransactionByHash", (1, 1), tx_by_hash),
];

fn by_number(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    let full = p.bool_or(1, false)?;
    let block = ctx.block(BlockRef::Tag(p.block_tag(0)?), reads)?;
    Ok(block_reply(block, full)?)
}

fn by_hash(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    let full = p.bool_or(1, false)?;
    let block = ctx.block(BlockRef::Hash(p.hash(0)?), reads)?;
    Ok(block_reply(block, full)?)
}

fn tx_count_by_number(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    let block = ctx.block(BlockRef::Tag(p.block_tag(0)?), reads)?;
    Ok(count(block, Block::tx_count))
}

fn tx_count_by_hash(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    let block = ctx.block(BlockRef::Hash(p.hash(0)?), reads)?;
    Ok(count(block, Block::tx_count))
}

fn tx_by_number_and_index(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    let block = ctx.block(BlockRef::Tag(p.block_tag(0)?), reads)?;
    Ok(by_index(block, p.quantity(1)?, Block::transaction)?)
}

fn tx_by_hash_and_index(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    let block = ctx.block(BlockRef::Hash(p.hash(0)?), reads)?;
    Ok(by_index(block, p.quantity(1)?, Block::transaction)?)
}

fn tx_by_hash(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    Ok(match ctx.transaction(&p.hash(0)?, reads)? {
        Some((block, index)) => block.transaction(index)?.map_or(Reply::Miss, Reply::bytes),
        None => Reply::Miss,
    })
}

fn block_reply(block: Option<Block>, full: bool) -> Result<Reply, Unread> {
    Ok(match block {
        Some(block) if full => Reply::bytes(block.full()?),
        Some(block) => Reply::bytes(block.hashes_only()?),
        None => Reply::Miss,
    })
}

/// A transaction or receipt by index: the block is ours, so an index past
/// its end is an authoritative `null`.
fn by_index(
    block: Option<Block>,
    index: u64,
    f: impl Fn(&Block, u32) -> Result<Option<Bytes>, Unread>,
) -> Result<Reply, Unread> {
    let Some(block) = block else {
        return Ok(Reply::Miss);
    };
    let found = match u32::try_from(index) {
        Ok(index) => f(&block, index)?,
        Err(_) => None,
    };
    Ok(found.map_or_else(|| Reply::json("null"), Reply::bytes))
}
