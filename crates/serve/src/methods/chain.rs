//! Chain info: the chain's identity, the mirror's one peer, how far it has
//! synced and the height `latest` stands for. Answered from what neve
//! knows of the chain and its upstream, without reading a record.

use bytes::Bytes;

use crate::params::{BlockTag, Params};
use crate::rpc::{Context, Method, NoReply, Reads, Reply, hex_quantity};

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

fn chain_id(ctx: &Context, _: &Params<'_>, _: Reads) -> Result<Reply, NoReply> {
    Ok(Reply::bytes(ctx.chain_id.clone()))
}

fn net_version(ctx: &Context, _: &Params<'_>, _: Reads) -> Result<Reply, NoReply> {
    Ok(Reply::bytes(ctx.net_version.clone()))
}

fn client_version(ctx: &Context, _: &Params<'_>, _: Reads) -> Result<Reply, NoReply> {
    Ok(Reply::bytes(ctx.client_version.clone()))
}

fn net_listening(_: &Context, _: &Params<'_>, _: Reads) -> Result<Reply, NoReply> {
    Ok(Reply::bytes(Bytes::from_static(b"true")))
}

fn net_peer_count(ctx: &Context, _: &Params<'_>, _: Reads) -> Result<Reply, NoReply> {
    Ok(Reply::bytes(Bytes::from_static(
        if ctx.chain.following() && ctx.chain.upstream_connected() {
            b"\"0x1\""
        } else {
            b"\"0x0\""
        },
    )))
}

fn block_number(ctx: &Context, _: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    Ok(match ctx.resolve(BlockTag::Latest, reads) {
        Some(height) => Reply::json(hex_quantity(height)),
        None => Reply::Miss,
    })
}

fn syncing(ctx: &Context, _: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    let stats = ctx.reader.stats();
    let reply = match (ctx.chain.upstream_head(), stats.max_contiguous_height) {
        (Some(head), Some(max))
            if head > max + ctx.config.latest_lag
                && ctx.resolve(BlockTag::Latest, reads).is_none() =>
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
    };
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::config::{ChainView, UpstreamHealth};
    use crate::server::tests::{answer, runtime, server_configured};

    /// An upstream whose head is `0` and was announced `1` ago; neve holds
    /// blocks 0 to 9.
    struct Announced(u64, Duration);

    impl ChainView for Announced {
        fn upstream_head(&self) -> Option<u64> {
            Some(self.0)
        }
        fn safe(&self) -> Option<u64> {
            None
        }
        fn finalized(&self) -> Option<u64> {
            None
        }
        fn upstream_health(&self) -> UpstreamHealth {
            UpstreamHealth::default()
        }
        fn upstream_head_age(&self) -> Option<Duration> {
            Some(self.1)
        }
    }

    /// In the moment between the upstream announcing block 10 and neve
    /// storing it, `latest` is block 9 for the grace, then a miss; never a
    /// block more than one behind.
    #[test]
    fn latest_is_the_block_before_a_new_head_only_for_the_grace() {
        let runtime = runtime();
        let head = r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}"#;
        let syncing = r#"{"jsonrpc":"2.0","id":1,"method":"eth_syncing","params":[]}"#;
        let fresh = Duration::from_millis(100);
        let stale = Duration::from_secs(2);
        for (upstream, age, grace, answered) in [
            (10, fresh, crate::config::DEFAULT_LATEST_GRACE, true),
            (10, stale, crate::config::DEFAULT_LATEST_GRACE, false),
            (10, fresh, Duration::ZERO, false),
            (11, fresh, crate::config::DEFAULT_LATEST_GRACE, false),
            (9, stale, crate::config::DEFAULT_LATEST_GRACE, true),
        ] {
            let (server, _dir) = server_configured(Arc::new(Announced(upstream, age)), |config| {
                config.latest_grace = grace;
            });
            let case = format!("upstream at {upstream}, announced {age:?} ago, grace {grace:?}");
            let (status, body) = answer(&server, &runtime, head);
            if answered {
                assert_eq!(status, 200, "{case}: {body}");
                assert!(body.contains(r#""result":"0x9""#), "{case}: {body}");
                assert!(
                    answer(&server, &runtime, syncing).1.contains("false"),
                    "{case}"
                );
            } else {
                assert_eq!(status, 421, "{case}: {body}");
                assert!(
                    answer(&server, &runtime, syncing)
                        .1
                        .contains("highestBlock"),
                    "{case}"
                );
            }
        }
    }
}
