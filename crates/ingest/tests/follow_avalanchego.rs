//! Following avalanchego's C-chain: its header (with `extDataHash`,
//! `blockGasCost`, …) verifies, and every stored block, transaction and
//! receipt equals the node's answer.

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use neve_devnet::{AVALANCHEGO_PREFUNDED_KEY, Avalanchego};
use neve_ingest::StartHeight;
use neve_upstream::RpcClient;
use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn mirrors_the_c_chain_under_load_and_matches_it() {
    let node = Avalanchego::start().await.expect("avalanchego starts");
    let rpc = node.c_chain_rpc_url();
    let mut config = neve_load::LoadConfig::new(&rpc, Duration::from_secs(5));
    config.funder_key = Some(AVALANCHEGO_PREFUNDED_KEY.into());
    config.accounts = 8;
    neve_load::run(config, |_| {}).await.expect("load ran");

    let dir = tempfile::tempdir().unwrap();
    let mut follower = follower(&rpc, dir.path(), StartHeight::Height(0)).await;
    catch_up(&mut follower).await;
    let status = follower.status();
    assert_eq!(
        status.refused_blocks.load(Ordering::Relaxed),
        0,
        "{:?}",
        status.last_error()
    );
    let reader = follower.reader();
    let max = reader.stats().max_contiguous_height.unwrap();
    assert!(max >= 3, "funding, deployment and traffic blocks: {max}");
    let client = RpcClient::new(&rpc).unwrap();
    let raw = follower.capabilities().raw;
    assert_store_matches_node(&reader, &client, 0..=max, raw).await;
    let txs: u32 = (0..=max).map(|h| reader.block(h).unwrap().tx_count()).sum();
    assert!(txs > 100, "only {txs} transactions stored");
}
