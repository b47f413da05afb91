//! Ingest under faults, against real geth behind a fault-injecting proxy:
//! 429 with Retry-After, 5xx, timeouts, truncated and garbage answers,
//! connections reset mid-body, batch answers out of order, a tampered block
//! and a tampered sender, the upstream down for a while (a restart), and
//! the upstream's head behind neve's; a WebSocket that drops every two
//! seconds, geth itself killed and restarted, and an upstream without
//! `eth_getBlockReceipts`; a lie about each served field no hash covers;
//! a provider over its quota (200 with an error, then 429 for a day).
//! neve recovers, fills every gap, refuses the tampered blocks, and never
//! stores a wrong one.

mod support;

use std::time::{Duration, Instant};

use neve_devnet::faults::{CuttingProxy, Fault, FaultProxy, FieldLie};
use neve_devnet::{GethDev, GethDevOptions};
use neve_upstream::RpcClient;
use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn ingest_recovers_from_every_fault_and_stores_only_verified_blocks() {
    let geth = GethDev::start(GethDevOptions {
        period: 0,
        ..Default::default()
    })
    .await
    .expect("geth dev");
    let mut warmup = neve_load::LoadConfig::new(geth.http_url(), Duration::from_secs(2));
    warmup.accounts = 4;
    warmup.tps = Some(60);
    neve_load::run(warmup, |_| {}).await.expect("warm-up load");

    use Fault::*;
    // Every kind of fault, each followed by seven clean requests.
    let faults = [
        TooManyRequests,
        ServerError,
        Truncate,
        Garbage,
        TamperBlock,
        Slow(Duration::from_millis(1500)),
        Reset,
        Reorder,
    ];
    let schedule: Vec<Fault> = faults
        .iter()
        .flat_map(|f| std::iter::once(*f).chain([Pass; 7]))
        .collect();
    let proxy = FaultProxy::start(geth.http_url(), schedule).await;
    let neve = Neve::start(
        proxy.url(),
        &[
            "--floor",
            "0",
            "--ws-url",
            "none",
            "--upstream-timeout-ms",
            "1000",
            "--fetch-concurrency",
            "4",
        ],
        1,
    )
    .await;

    // Blocks keep coming while the faults play out.
    let mut trickle = neve_load::LoadConfig::new(geth.http_url(), Duration::from_secs(8));
    trickle.accounts = 4;
    trickle.tps = Some(30);
    let load = tokio::spawn(neve_load::run(trickle, |_| {}));
    // A lie no hash catches: who sent a transaction.
    proxy.control().tamper_sender();
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.control().set_down(true); // a restart
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.control().set_down(false);
    proxy.control().set_head_lag(10); // back, but behind what neve has
    tokio::time::sleep(Duration::from_secs(1)).await;
    proxy.control().set_head_lag(0);
    let report = load.await.unwrap().expect("load");

    let geth_client = RpcClient::new(geth.http_url()).unwrap();
    let head: String = geth_client.call("eth_blockNumber", ()).await.unwrap();
    let head = neve_upstream::parse_quantity(&head).unwrap();
    assert!(head >= report.last_block);
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let stored = neve
            .health()
            .and_then(|h| h["blocks"]["max_contiguous_height"].as_u64())
            .unwrap_or(0);
        if stored >= head {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "neve stuck at {stored} of {head}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        proxy.control().faults_served() >= 6,
        "faults were served: {}",
        proxy.control().faults_served()
    );

    // Every stored block is geth's block: nothing tampered got in.
    let neve_client = RpcClient::new(&neve.url).unwrap();
    assert_same_as_geth(&neve_client, &geth_client, 0..=head).await;
    let (_, metrics) = neve.get("/metrics").unwrap();
    let refused: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("neve_ingest_refused_blocks_total "))
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(proxy.control().tampered() >= 1, "a block was tampered with");
    assert!(refused >= 1, "the tampered block was refused and counted");
    assert!(
        proxy.control().senders_tampered() >= 1,
        "a sender was changed"
    );
    assert!(
        neve.log().contains("claims sender"),
        "the changed sender was refused: {}",
        neve.log()
    );
}

fn refused_blocks(neve: &Neve) -> u64 {
    let (_, metrics) = neve.get("/metrics").unwrap();
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("neve_ingest_refused_blocks_total "))
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// Issue 24 item 5: each served field that no hash covers (a receipt's
/// `gasUsed`, `effectiveGasPrice`, `from`, `to`, `contractAddress`; the
/// block's `size`, `uncles`, `withdrawals`; a typed transaction's
/// `gasPrice`; `debug_getRawReceipts`), a field nothing verifies and a key
/// given twice: each lie told by the upstream is refused, counted and
/// named in the log, and every stored block is geth's.
#[tokio::test(flavor = "multi_thread")]
async fn a_lie_in_any_served_field_is_refused_and_counted() {
    let geth = GethDev::start(GethDevOptions {
        period: 0,
        ..Default::default()
    })
    .await
    .expect("geth dev");
    blocks_for(&geth, 1).await;
    let proxy = FaultProxy::start(geth.http_url(), vec![Fault::Pass]).await;
    let neve = Neve::start(proxy.url(), &["--floor", "0", "--ws-url", "none"], 1).await;
    let mut trickle = neve_load::LoadConfig::new(geth.http_url(), Duration::from_secs(120));
    trickle.accounts = 4;
    trickle.tps = Some(10);
    let load = tokio::spawn(neve_load::run(trickle, |_| {}));

    let receipt = |field| FieldLie::Digit {
        after: "\"cumulativeGasUsed\"",
        field,
    };
    let lies = [
        (receipt("gasUsed"), "gasUsed is"),
        (receipt("effectiveGasPrice"), "effectiveGasPrice is"),
        (receipt("from"), "from is"),
        (receipt("to"), "to is"),
        (
            FieldLie::Replace {
                from: "\"contractAddress\":null",
                to: "\"contractAddress\":\"0x0000000000000000000000000000000000000001\"",
            },
            "contractAddress is",
        ),
        (
            FieldLie::Digit {
                after: "",
                field: "size",
            },
            "size is",
        ),
        (
            FieldLie::Replace {
                from: "\"uncles\":[]",
                to: "\"uncles\":[\"0x1111111111111111111111111111111111111111111111111111111111111111\"]",
            },
            "uncles is",
        ),
        (
            FieldLie::Replace {
                from: "\"withdrawals\":[]",
                to: "\"withdrawals\":[{\"index\":\"0x0\",\"validatorIndex\":\"0x0\",\"address\":\"0x0000000000000000000000000000000000000001\",\"amount\":\"0x1\"}]",
            },
            "withdrawals do not hash",
        ),
        (
            // A dynamic-fee transaction's: the price it paid.
            FieldLie::DigitBefore {
                before: "\"maxPriorityFeePerGas\"",
                field: "gasPrice",
            },
            "gasPrice is",
        ),
        (
            FieldLie::Digit {
                after: "\"result\":[\"0x",
                field: "",
            },
            "raw receipts",
        ),
        (
            FieldLie::Replace {
                from: "\"transactions\":[{",
                to: "\"transactions\":[{\"neveUnchecked\":\"0x1\",",
            },
            "neveUnchecked is not verified",
        ),
        (
            FieldLie::Replace {
                from: "\"cumulativeGasUsed\":",
                to: "\"gasUsed\":\"0x0\",\"cumulativeGasUsed\":",
            },
            "appears twice",
        ),
    ];
    for (lie, named) in lies {
        let (told, refused) = (proxy.control().field_lies(), refused_blocks(&neve));
        proxy.control().tell(lie);
        let deadline = Instant::now() + Duration::from_secs(30);
        while proxy.control().field_lies() == told || refused_blocks(&neve) == refused {
            assert!(
                Instant::now() < deadline,
                "{lie:?} was not told or not refused"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let log = neve.log();
        assert!(log.contains(named), "{lie:?} refused as {named:?}:\n{log}");
    }
    load.abort();

    let geth_client = RpcClient::new(geth.http_url()).unwrap();
    let head = head(&geth_client).await;
    neve.wait_for_height(head, Duration::from_secs(60)).await;
    let neve_client = RpcClient::new(&neve.url).unwrap();
    assert_same_as_geth(&neve_client, &geth_client, 0..=head).await;
}

/// Blocks at 20 tx/s for `seconds`, sent to geth directly.
async fn blocks_for(geth: &GethDev, seconds: u64) {
    let mut trickle = neve_load::LoadConfig::new(geth.http_url(), Duration::from_secs(seconds));
    trickle.accounts = 4;
    trickle.tps = Some(20);
    neve_load::run(trickle, |_| {}).await.expect("load");
}

#[tokio::test(flavor = "multi_thread")]
async fn ingest_rides_out_a_dropping_websocket_and_a_killed_geth() {
    let geth = GethDev::start(GethDevOptions {
        period: 0,
        ..Default::default()
    })
    .await
    .expect("geth dev");
    blocks_for(&geth, 2).await;
    // newHeads through a connection reset every two seconds.
    let ws = CuttingProxy::start(geth.ws_url(), Duration::from_secs(2)).await;
    let ws_url = ws.url("ws");
    let neve = Neve::start(
        geth.http_url(),
        &[
            "--floor",
            "0",
            "--ws-url",
            &ws_url,
            "--upstream-timeout-ms",
            "1000",
        ],
        1,
    )
    .await;
    blocks_for(&geth, 5).await;
    // geth killed while neve follows it, then started again on its chain.
    geth.kill_and_restart().await.expect("geth restarts");
    blocks_for(&geth, 5).await;

    let geth_client = RpcClient::new(geth.http_url()).unwrap();
    let head = head(&geth_client).await;
    neve.wait_for_height(head, Duration::from_secs(90)).await;
    assert!(ws.cuts() >= 3, "the WebSocket was cut {} times", ws.cuts());
    let log = neve.log();
    assert!(
        log.matches("subscribed to newHeads").count() >= 3,
        "neve subscribed again after each drop:\n{log}"
    );
    let neve_client = RpcClient::new(&neve.url).unwrap();
    assert_same_as_geth(&neve_client, &geth_client, 0..=head).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_without_block_receipts_is_followed_receipt_by_receipt() {
    let (geth, _) = chain_with_logs().await;
    // geth behind a proxy that answers eth_getBlockReceipts as a node
    // without it does (-32601); everything else reaches geth.
    let proxy = FaultProxy::start(geth.http_url(), vec![Fault::Pass]).await;
    proxy
        .control()
        .set_lacking_method(Some("eth_getBlockReceipts"));
    let neve = Neve::start(proxy.url(), &["--floor", "0", "--ws-url", "none"], 1).await;

    let geth_client = RpcClient::new(geth.http_url()).unwrap();
    let head = head(&geth_client).await;
    neve.wait_for_height(head, Duration::from_secs(90)).await;
    assert!(
        proxy.control().faults_served() > 0,
        "neve asked for eth_getBlockReceipts and was refused"
    );
    // Its receipts, gathered one transaction at a time, are geth's.
    let neve_client = RpcClient::new(&neve.url).unwrap();
    assert_same_as_geth(&neve_client, &geth_client, 0..=head).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_that_caps_batches_is_followed_in_batches_it_accepts() {
    // geth answering at most two calls a batch (as providers cap them),
    // behind a proxy without eth_getBlockReceipts: every block's receipts
    // go out one call each, in batches of two.
    let (geth, head) = chain_with_logs_on(neve_devnet::GethDevOptions {
        batch_request_limit: Some(2),
        ..Default::default()
    })
    .await;
    let proxy = FaultProxy::start(geth.http_url(), vec![Fault::Pass]).await;
    proxy
        .control()
        .set_lacking_method(Some("eth_getBlockReceipts"));
    let neve = Neve::start(proxy.url(), &["--floor", "0", "--ws-url", "none"], head).await;
    let (_, metrics) = neve.get("/metrics").unwrap();
    assert!(
        metrics.contains("\nneve_upstream_max_batch 2\n"),
        "the limit was learnt:\n{metrics}"
    );
    assert!(
        neve.log().contains("sending smaller batches"),
        "{}",
        neve.log()
    );
    let geth_client = RpcClient::new(geth.http_url()).unwrap();
    let neve_client = RpcClient::new(&neve.url).unwrap();
    assert_same_as_geth(&neve_client, &geth_client, 0..=head).await;
}

/// Issue 42.4 and 42.5: a provider over its quota, answering 200 with a
/// JSON-RPC error, then 429 with `Retry-After: 86400`, on a chain of 1 s
/// blocks: neither counts as contact, so `latest` is 421 (and readiness
/// 503) within three block intervals and a little; while paused neve
/// probes, so it follows again within seconds of the provider's
/// recovery, not after the pause's five-minute clamp.
#[tokio::test(flavor = "multi_thread")]
async fn a_provider_over_quota_is_not_followed_stale_and_is_followed_again_within_seconds() {
    let geth = GethDev::start(GethDevOptions {
        period: 1,
        ..Default::default()
    })
    .await
    .expect("geth dev");
    let geth_client = RpcClient::new(geth.http_url()).unwrap();
    while head(&geth_client).await < 4 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let proxy = FaultProxy::start(geth.http_url(), vec![Fault::Pass]).await;
    let neve = Neve::behind(&proxy, &[]);
    neve.wait_for_height(4, Duration::from_secs(60)).await;
    let client = RpcClient::new(&neve.url).unwrap();
    // And a neve mirroring it: the chain's staleness reaches it too.
    let mirror = Neve::start_mirror(&neve.url, 4).await;
    let mirrored = RpcClient::new(&mirror.url).unwrap();
    let status_of = |client: &RpcClient| {
        let client = client.clone();
        async move {
            let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "eth_blockNumber"});
            match client.post(body.to_string().into()).await {
                Ok((status, _)) => status.as_u16(),
                Err(error) => panic!("{error:?}"),
            }
        }
    };
    let latest_status = || status_of(&client);
    // Following: latest answered, by both.
    let deadline = Instant::now() + Duration::from_secs(20);
    while latest_status().await != 200 || status_of(&mirrored).await != 200 {
        assert!(Instant::now() < deadline, "never following");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (fault, what) in [
        (Fault::OverQuota, "200 with a JSON-RPC error"),
        (Fault::RetryTomorrow, "429 with Retry-After: 86400"),
    ] {
        proxy.control().set_override(Some(fault));
        let started = Instant::now();
        loop {
            if latest_status().await == 421 {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_millis(5_500),
                "latest still 200 {:?} into {what}: {}",
                started.elapsed(),
                neve.health().unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        eprintln!("{what}: latest 421 after {:?}", started.elapsed());
        let (status, _) = neve.get("/health/ready").unwrap();
        assert_eq!(status, 503, "ready while {what}");
        // The mirror follows a neve that does not follow: 421 too.
        let stale = Instant::now();
        while status_of(&mirrored).await != 421 {
            assert!(
                stale.elapsed() < Duration::from_millis(5_500),
                "the mirror's latest still 200 {:?} after its source's was 421 ({what})",
                stale.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // 421 it stays, however long the answers go on.
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(latest_status().await, 421, "latest again during {what}");
        proxy.control().set_override(None);
        let recovered = Instant::now();
        while latest_status().await != 200 {
            assert!(
                recovered.elapsed() < Duration::from_secs(8),
                "not following {:?} after the provider recovered from {what}",
                recovered.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        eprintln!(
            "{what}: following again {:?} after recovery",
            recovered.elapsed()
        );
        while status_of(&mirrored).await != 200 {
            assert!(
                recovered.elapsed() < Duration::from_secs(12),
                "the mirror not following {:?} after recovery from {what}",
                recovered.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // At the node's head, not the frozen one.
        let at = head(&client).await;
        assert!(head(&geth_client).await <= at + 2, "behind the node");
    }
}
