//! Progress people can see: a backfill whose stderr is not a terminal logs,
//! at each interval, the stored height, the head, the rate and the ETA.

mod support;

use std::time::{Duration, Instant};

use neve_devnet::{GethDev, GethDevOptions};
use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_backfill_logs_its_height_rate_and_eta() {
    let geth = GethDev::start(GethDevOptions { period: 0 })
        .await
        .expect("geth dev");
    let client = neve_upstream::RpcClient::new(geth.http_url()).unwrap();
    // Several batches of appends while more than the 100 blocks behind
    // that count as backfilling.
    while head(&client).await < 600 {
        let mut load = neve_load::LoadConfig::new(geth.http_url(), Duration::from_secs(2));
        load.accounts = 2;
        load.tps = Some(200);
        neve_load::run(load, |_| {}).await.expect("load");
    }
    // Slow answers keep the backfill going for a while.
    let (_proxy, neve) = slow_backfill(
        geth.http_url(),
        Duration::from_millis(20),
        &[
            "--fetch-concurrency",
            "1",
            "--upstream-timeout-ms",
            "2000",
            "--progress-interval-secs",
            "1",
        ],
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let line = loop {
        if let Some(line) = neve
            .log()
            .lines()
            .find(|l| l.contains("backfilling") && l.contains("blocks_per_second"))
        {
            break line.to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "no progress line:\n{}",
            neve.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for field in ["stored=", "head=", "behind=", "eta="] {
        assert!(line.contains(field), "{field} in {line}");
    }
}
