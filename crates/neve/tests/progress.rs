//! Progress people can see: a backfill from a node, or a mirror's bootstrap
//! from another neve, whose stderr is not a terminal logs, at each
//! interval, the stored height, the head, the rate and the ETA.

mod support;

use std::time::{Duration, Instant};

use neve_devnet::faults::{Fault, FaultProxy};
use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_backfill_logs_its_height_rate_and_eta() {
    // Several batches of appends while more than the 100 blocks behind
    // that count as backfilling.
    let (geth, _) = dev_chain_of(600).await;
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
    assert_progress_line(&neve, "backfilling").await;
}

/// Waits for a progress line of `phase` with a rate, and checks its fields.
async fn assert_progress_line(neve: &Neve, phase: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let line = loop {
        if let Some(line) = neve
            .log()
            .lines()
            .find(|l| l.contains(phase) && l.contains("blocks_per_second"))
        {
            break line.to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "no {phase} line:\n{}",
            neve.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for field in ["stored=", "head=", "behind=", "eta_seconds="] {
        assert!(line.contains(field), "{field} in {line}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mirror_bootstrap_logs_its_height_rate_and_eta() {
    // More than the 128 blocks behind that make a mirror bootstrap over
    // `/blocks`, and the 100 that count as catching up.
    let (geth, top) = dev_chain_of(300).await;
    let source = Neve::start(geth.http_url(), &["--floor", "0"], top).await;
    // A slow link: the export arrives 4 KiB every 20 ms.
    let proxy = FaultProxy::start(&source.url, vec![Fault::Pass]).await;
    proxy.control().set_stream_fault(Some(Fault::Drip));
    let mirror = Neve::mirroring(&proxy, &["--progress-interval-secs", "1"]);
    assert_progress_line(&mirror, "bootstrapping").await;
}
