//! Raw data: a block, its header, its receipts and a transaction as the
//! upstream's RLP, stored as it sent it. A block stored without raw data
//! (an upstream that offers none) is a miss.

use bytes::Bytes;
use neve_store::{Block, Unread};

use crate::params::Params;
use crate::rpc::{Context, Method, NoReply, Reads, Reply};

pub(crate) const METHODS: &[Method] = &[
    Method::new("debug_getRawBlock", (1, 1), raw_block),
    Method::new("debug_getRawHeader", (1, 1), raw_header),
    Method::new("debug_getRawReceipts", (1, 1), raw_receipts),
    Method::new("debug_getRawTransaction", (1, 1), raw_transaction),
];

fn raw_block(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    Ok(raw(ctx.block(p.block_ref(0)?, reads)?, Block::raw_block)?)
}

fn raw_header(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    Ok(raw(ctx.block(p.block_ref(0)?, reads)?, Block::raw_header)?)
}

fn raw_receipts(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    Ok(raw(
        ctx.block(p.block_ref(0)?, reads)?,
        Block::raw_receipts,
    )?)
}

fn raw_transaction(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    Ok(match ctx.transaction(&p.hash(0)?, reads)? {
        Some((block, index)) => match block.raw_transaction(index)? {
            Some(hex) if !hex.is_empty() => Reply::Result(vec![
                Bytes::from_static(b"\"0x"),
                hex,
                Bytes::from_static(b"\""),
            ]),
            _ => Reply::Miss,
        },
        None => Reply::Miss,
    })
}

/// Raw data as the upstream sent it; a block stored without it is a miss.
fn raw(block: Option<Block>, f: impl Fn(&Block) -> Result<Bytes, Unread>) -> Result<Reply, Unread> {
    Ok(match block.map(|b| f(&b)).transpose()? {
        Some(bytes) if !bytes.is_empty() => Reply::bytes(bytes),
        _ => Reply::Miss,
    })
}
