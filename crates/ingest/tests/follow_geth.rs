//! Following real geth: the conformance chain from genesis (every fork up to
//! Osaka, every transaction type), a dev chain under `neve load`, and a real
//! reorg made with `debug_setHead`. In each case every stored block,
//! transaction, receipt and raw encoding equals geth's answer.

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use neve_devnet::conformance::fixtures_dir;
use neve_devnet::{GethConformance, GethDev, GethDevOptions};
use neve_ingest::StartHeight;
use neve_upstream::{RpcClient, parse_quantity};
use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn mirrors_the_conformance_chain_from_genesis_and_verifies_every_block() {
    let geth = GethConformance::start(&fixtures_dir())
        .await
        .expect("geth on the conformance chain");
    let dir = tempfile::tempdir().unwrap();
    let mut follower = follower(geth.http_url(), dir.path(), StartHeight::Height(0)).await;
    assert!(follower.capabilities().block_receipts && follower.capabilities().raw);
    catch_up(&mut follower).await;
    let status = follower.status();
    assert_eq!(
        status.refused_blocks.load(Ordering::Relaxed),
        0,
        "{:?}",
        status.last_error()
    );
    assert_eq!(status.finalized(), Some(0x36));
    assert_eq!(status.safe(), Some(0x36));
    let reader = follower.reader();
    assert_eq!(reader.stats().min_height, Some(0));
    assert_eq!(reader.stats().max_contiguous_height, Some(0x36));
    let client = RpcClient::new(geth.http_url()).unwrap();
    assert_store_matches_node(&reader, &client, 0..=0x36, true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn follows_a_dev_chain_under_load_and_matches_it() {
    let geth = GethDev::start(GethDevOptions {
        period: 0,
        ..Default::default()
    })
    .await
    .expect("geth dev");
    let dir = tempfile::tempdir().unwrap();
    let mut follower = follower(geth.http_url(), dir.path(), StartHeight::Height(0)).await;
    let mut config = neve_load::LoadConfig::new(geth.http_url(), Duration::from_secs(6));
    config.accounts = 16;
    config.max_in_flight = 1500;
    let load = tokio::spawn(neve_load::run(config, |_| {}));
    // Follow while the chain grows.
    while !load.is_finished() {
        follower.sync_once().await.expect("sync during load");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let report = load.await.unwrap().expect("load ran");
    catch_up(&mut follower).await;
    let reader = follower.reader();
    let max = reader.stats().max_contiguous_height.unwrap();
    assert!(
        max >= report.last_block,
        "stored up to {max}, chain reached {}",
        report.last_block
    );
    let client = RpcClient::new(geth.http_url()).unwrap();
    assert_store_matches_node(&reader, &client, 0..=max, true).await;
    let txs: u32 = (0..=max).map(|h| reader.block(h).unwrap().tx_count()).sum();
    assert!(txs >= 1000, "only {txs} transactions stored");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_real_reorg_rolls_back_and_reingests_the_new_chain() {
    let geth = GethDev::start(GethDevOptions {
        period: 0,
        ..Default::default()
    })
    .await
    .expect("geth dev");
    let client = RpcClient::new(geth.http_url()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut follower = follower(geth.http_url(), dir.path(), StartHeight::Height(0)).await;
    let grow = |seconds| {
        let mut config = neve_load::LoadConfig::new(geth.http_url(), Duration::from_secs(seconds));
        config.accounts = 4;
        config.tps = Some(200);
        neve_load::run(config, |_| {})
    };
    grow(2).await.expect("first growth");
    catch_up(&mut follower).await;
    let reader = follower.reader();
    let old_max = reader.stats().max_contiguous_height.unwrap();
    let old_hash = reader.block(old_max - 2).unwrap().hash();

    // Rewind geth below our tip; what it mines next replaces the old blocks.
    let _: serde_json::Value = client
        .call("debug_setHead", [neve_upstream::quantity(old_max - 3)])
        .await
        .unwrap();
    grow(2).await.expect("second growth");
    catch_up(&mut follower).await;

    let status = follower.status();
    assert!(status.reorgs.load(Ordering::Relaxed) >= 1, "reorg noticed");
    let head: String = client.call("eth_blockNumber", ()).await.unwrap();
    let head = parse_quantity(&head).unwrap();
    // geth may seal the load's last transactions after the catch-up
    // looked: follow those too before comparing.
    while reader.stats().max_contiguous_height.unwrap_or(0) < head {
        catch_up(&mut follower).await;
    }
    assert_ne!(
        reader.block(old_max - 2).unwrap().hash(),
        old_hash,
        "replaced by the new chain"
    );
    assert_store_matches_node(&reader, &client, 0..=head, true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn tampered_blocks_fail_verification() {
    use neve_ingest::decode::{RawParts, decode};
    use neve_ingest::verify::{VerifyError, verify};

    let geth = GethConformance::start(&fixtures_dir())
        .await
        .expect("geth on the conformance chain");
    let client = RpcClient::new(geth.http_url()).unwrap();
    // A block with several transactions and logs.
    let mut chosen = None;
    for height in 1..=0x36u64 {
        let block: serde_json::Value = client
            .call(
                "eth_getBlockByNumber",
                (neve_upstream::quantity(height), true),
            )
            .await
            .unwrap();
        if block["transactions"].as_array().unwrap().len() >= 2 {
            chosen = Some(height);
            break;
        }
    }
    let number = neve_upstream::quantity(chosen.expect("a block with transactions"));
    let full = client
        .call_raw("eth_getBlockByNumber", (&number, true))
        .await
        .unwrap()
        .get()
        .to_owned();
    let receipts = client
        .call_raw("eth_getBlockReceipts", [&number])
        .await
        .unwrap()
        .get()
        .to_owned();
    let check =
        |full: &str, receipts: &str| verify(&decode(full, receipts, RawParts::default()).unwrap());
    assert_eq!(check(&full, &receipts), Ok(()));

    let mut block: serde_json::Value = serde_json::from_str(&full).unwrap();
    block["gasUsed"] = "0x1".into();
    assert!(matches!(
        check(&block.to_string(), &receipts),
        Err(VerifyError::BlockHash { .. })
    ));

    let mut block: serde_json::Value = serde_json::from_str(&full).unwrap();
    block["transactions"][1]["value"] = "0x7777".into();
    assert!(matches!(
        check(&block.to_string(), &receipts),
        Err(VerifyError::TxHash { index: 1, .. })
    ));

    let mut parsed: serde_json::Value = serde_json::from_str(&receipts).unwrap();
    parsed[0]["cumulativeGasUsed"] = "0x1".into();
    assert!(matches!(
        check(&full, &parsed.to_string()),
        Err(VerifyError::ReceiptsRoot { .. })
    ));
}
