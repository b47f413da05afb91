//! Receipts: a transaction's receipt by its hash, and a block's receipts
//! by height, tag or hash. Each answer is a stored record's bytes; a
//! transaction or block not stored is a miss.

use crate::params::Params;
use crate::rpc::{Context, Method, NoReply, Reads, Reply};

pub(crate) const METHODS: &[Method] = &[
    Method::new("eth_getTransactionReceipt", (1, 1), receipt),
    Method::new("eth_getBlockReceipts", (1, 1), block_receipts),
];

fn receipt(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    Ok(match ctx.transaction(&p.hash(0)?, reads)? {
        Some((block, index)) => block.receipt(index)?.map_or(Reply::Miss, Reply::bytes),
        None => Reply::Miss,
    })
}

fn block_receipts(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    Ok(match ctx.block(p.block_ref(0)?, reads)? {
        Some(block) => Reply::bytes(block.receipts()?),
        None => Reply::Miss,
    })
}
