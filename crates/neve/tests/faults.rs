//! Ingest under faults, against real geth behind a fault-injecting proxy:
//! 429 with Retry-After, 5xx, timeouts, truncated and garbage answers,
//! connections reset mid-body, batch answers out of order, a tampered block
//! and a tampered sender, the upstream down for a while (a restart), and
//! the upstream's head behind neve's. neve recovers, fills every gap,
//! refuses the tampered blocks, and never stores a wrong one.

mod support;

use std::time::{Duration, Instant};

use neve_devnet::faults::{Fault, FaultProxy};
use neve_devnet::{GethDev, GethDevOptions};
use neve_upstream::{RpcClient, quantity};
use serde_json::{Value, json};
use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn ingest_recovers_from_every_fault_and_stores_only_verified_blocks() {
    let geth = GethDev::start(GethDevOptions { period: 0 })
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
    for height in 0..=head {
        let h = quantity(height);
        for (method, params) in [
            ("eth_getBlockByNumber", json!([h, true])),
            ("eth_getBlockReceipts", json!([h])),
        ] {
            let a: Value = neve_client.call(method, params.clone()).await.unwrap();
            let b: Value = geth_client.call(method, params.clone()).await.unwrap();
            assert_eq!(a, b, "{method} {params}");
        }
    }
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
