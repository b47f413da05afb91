//! Mirrors of mirrors: geth → neve A → neve B (`--mirror-from A`) → neve C
//! (`--mirror-from B`). B and C bootstrap A's tail in bulk from `/blocks`,
//! verifying every block, then follow live; C answers every height as geth
//! does.

mod support;

use std::time::{Duration, Instant};

use neve_devnet::{GethDev, GethDevOptions};
use neve_upstream::RpcClient;
use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_chain_of_two_mirrors_bootstraps_in_bulk_and_follows_live() {
    let geth = GethDev::start(GethDevOptions {
        period: 0,
        ..Default::default()
    })
    .await
    .expect("geth dev");
    // A tail worth bootstrapping in bulk (more than one 128-block gap). How
    // many blocks a few seconds of load make depends on the machine, so
    // load in rounds until the chain is long enough.
    let mut head = 0;
    for round in 0..10 {
        let mut config = neve_load::LoadConfig::new(geth.http_url(), Duration::from_secs(6));
        config.accounts = 16;
        config.tps = Some(700);
        config.seed = 100 + round;
        head = neve_load::run(config, |_| {})
            .await
            .expect("load")
            .last_block;
        if head >= 200 {
            break;
        }
    }
    assert!(head >= 200, "a tail worth bootstrapping: {head}");

    let a = Neve::start(
        geth.http_url(),
        &["--floor", "0", "--ws-url", geth.ws_url()],
        head,
    )
    .await;
    let started = Instant::now();
    let b = Neve::start_mirror(&a.url, head).await;
    let bootstrap = started.elapsed();
    let c = Neve::start_mirror(&b.url, head).await;
    eprintln!(
        "B bootstrapped {} blocks from A in {:.2} s including process start: {:.0} blocks/s",
        head + 1,
        bootstrap.as_secs_f64(),
        (head + 1) as f64 / bootstrap.as_secs_f64()
    );
    let geth_client = RpcClient::new(geth.http_url()).unwrap();
    let c_client = RpcClient::new(&c.url).unwrap();
    assert_same_as_geth(&c_client, &geth_client, 0..=head).await;
    assert_eq!(
        c.health().unwrap()["genesis_hash"],
        a.health().unwrap()["genesis_hash"]
    );

    // Live: more blocks flow geth → A → B → C.
    let mut config = neve_load::LoadConfig::new(geth.http_url(), Duration::from_secs(3));
    config.accounts = 4;
    config.tps = Some(100);
    let report = neve_load::run(config, |_| {}).await.expect("more load");
    let deadline = Instant::now() + Duration::from_secs(90);
    while c.health().unwrap()["blocks"]["max_contiguous_height"]
        .as_u64()
        .unwrap()
        < report.last_block
    {
        assert!(Instant::now() < deadline, "C did not follow live");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_same_as_geth(&c_client, &geth_client, head..=report.last_block).await;
}
