//! Chain info: the chain's identity, the mirror's one peer, how far it has
//! synced and the height `latest` stands for. Answered from what neve
//! knows of the chain and its upstream, without reading a record.

use bytes::Bytes;

use crate::params::{BlockTag, Params};
use crate::rpc::{Context, Method, Reads, Reply, Stop, hex_quantity};

pub(crate) const METHODS: &[Method] = &[
    Method::new("eth_chainId", (0, 0), chain_id),
    Method::new("net_version", (0, 0), net_version),
    // Proxies (dshackle, proxyd) probe these to keep a backend in
    // their pool. A mirror's one peer is its upstream: 1 while
    // neve follows it and the last exchange succeeded.
    Method::new("net_listening", (0, 0), net_listening),
    Method::new("net_peerCount", (0, 0), net_peer_count),
    Method::new("web3_clientVersion", (0, 0), client_version),
    Method::new("eth_syncing", (0, 0), syncing),
    Method::new("eth_blockNumber", (0, 0), block_number),
];

fn chain_id(ctx: &Context, _: &Params<'_>, _: Reads) -> Result<Reply, Stop> {
    Ok(Reply::bytes(ctx.chain_id.clone()))
}

fn net_version(ctx: &Context, _: &Params<'_>, _: Reads) -> Result<Reply, Stop> {
    Ok(Reply::bytes(ctx.net_version.clone()))
}

fn client_version(ctx: &Context, _: &Params<'_>, _: Reads) -> Result<Reply, Stop> {
    Ok(Reply::bytes(ctx.client_version.clone()))
}

fn net_listening(_: &Context, _: &Params<'_>, _: Reads) -> Result<Reply, Stop> {
    Ok(Reply::bytes(Bytes::from_static(b"true")))
}

fn net_peer_count(ctx: &Context, _: &Params<'_>, _: Reads) -> Result<Reply, Stop> {
    Ok(Reply::bytes(Bytes::from_static(
        if ctx.chain.following() && ctx.chain.upstream_connected() {
            b"\"0x1\""
        } else {
            b"\"0x0\""
        },
    )))
}

fn block_number(ctx: &Context, _: &Params<'_>, _: Reads) -> Result<Reply, Stop> {
    Ok(match ctx.resolve(BlockTag::Latest) {
        Some(height) => Reply::json(hex_quantity(height)),
        None => Reply::Miss,
    })
}

fn syncing(ctx: &Context, _: &Params<'_>, _: Reads) -> Result<Reply, Stop> {
    let stats = ctx.reader.stats();
    Ok(
        match (ctx.chain.upstream_head(), stats.max_contiguous_height) {
            (Some(head), Some(max))
                if head > max + ctx.config.latest_lag
                    && ctx.resolve(BlockTag::Latest).is_none() =>
            {
                Reply::json(format!(
                    "{{\"startingBlock\":{},\"currentBlock\":{},\"highestBlock\":{}}}",
                    hex_quantity(stats.min_height.unwrap_or(max)),
                    hex_quantity(max),
                    hex_quantity(head)
                ))
            }
            (_, Some(_)) => Reply::json("false"),
            // Nothing stored yet: still syncing from the start.
            (head, None) => Reply::json(format!(
                "{{\"startingBlock\":\"0x0\",\"currentBlock\":\"0x0\",\"highestBlock\":{}}}",
                hex_quantity(head.unwrap_or(0))
            )),
        },
    )
}
