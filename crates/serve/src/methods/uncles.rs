//! Uncles: counts and uncles by block and index. neve stores no uncle
//! headers, so it answers only for blocks that have none (every block
//! since the merge); for others it is a miss.

use neve_store::{Block, Unread};

use crate::params::{BlockRef, Params};
use crate::rpc::{Context, Method, NoReply, Reads, Reply, count};

#[rustfmt::skip] // a table: one method a line
pub(crate) const METHODS: &[Method] = &[
    Method::new("eth_getUncleCountByBlockNumber", (1, 1), count_by_number),
    Method::new("eth_getUncleCountByBlockHash", (1, 1), count_by_hash),
    Method::new("eth_getUncleByBlockNumberAndIndex", (2, 2), by_number_and_index),
    Method::new("eth_getUncleByBlockHashAndIndex", (2, 2), by_hash_and_index),
];

fn count_by_number(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    let block = ctx.block(BlockRef::Tag(p.block_tag(0)?), reads)?;
    Ok(count(uncle_free(block)?, |_| 0))
}

fn count_by_hash(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    let block = ctx.block(BlockRef::Hash(p.hash(0)?), reads)?;
    Ok(count(uncle_free(block)?, |_| 0))
}

fn by_number_and_index(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    let block = uncle_free(ctx.block(BlockRef::Tag(p.block_tag(0)?), reads)?)?;
    p.quantity(1)?;
    Ok(block.map_or(Reply::Miss, |_| Reply::json("null")))
}

fn by_hash_and_index(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    let block = uncle_free(ctx.block(BlockRef::Hash(p.hash(0)?), reads)?)?;
    p.quantity(1)?;
    Ok(block.map_or(Reply::Miss, |_| Reply::json("null")))
}

/// The block, if it has no uncles. neve stores no uncle headers, so uncle
/// answers are authoritative only for blocks whose `sha3Uncles` is the hash
/// of the empty list (every block since the merge); others are misses.
fn uncle_free(block: Option<Block>) -> Result<Option<Block>, Unread> {
    const EMPTY: &[u8] =
        b"\"sha3Uncles\":\"0x1dcc4de8dec75d7aab85b567b6ccd41ad312451b948a7413f0a142fd40d49347\"";
    let Some(block) = block else {
        return Ok(None);
    };
    let header = block.hashes_only()?;
    Ok(header
        .windows(EMPTY.len())
        .any(|w| w == EMPTY)
        .then_some(block))
}
