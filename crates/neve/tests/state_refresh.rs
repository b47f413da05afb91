//! State kept fresh per block (issue 26): each new block's touched keys are
//! proved at its root in one batch, so keys clients read at `latest` stay
//! answerable without a proof per key per block; a mirror refreshes from
//! its upstream neve's `neve_getTouchedKeys` instead of tracing.

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use neve_upstream::{RpcClient, quantity};
use serde_json::{Value, json};
use support::*;

/// The state counters of a neve's `/health`.
fn counters(neve: &Neve) -> Value {
    neve.health().unwrap()["state"].clone()
}

fn count(state: &Value, key: &str) -> u64 {
    state[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} in {state}"))
}

/// Waits until `neve` has stored `blocks` more blocks.
async fn wait_blocks(neve: &Neve, blocks: u64) {
    let now = neve.health().unwrap()["blocks"]["max_contiguous_height"]
        .as_u64()
        .unwrap();
    neve.wait_for_height(now + blocks, Duration::from_secs(60))
        .await;
    // The refresh of the newest block runs just after it is stored.
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// Reads every address's balance at `latest`; each must be answered.
async fn read_latest(client: &RpcClient, addresses: &[String]) {
    for address in addresses {
        let answer = answer(client, "eth_getBalance", json!([address, "latest"])).await;
        assert!(answer["result"].is_string(), "{address}: {answer}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn hot_keys_stay_answerable_from_per_block_refreshes_directly_and_through_a_mirror() {
    let geth_node = neve_devnet::GethDev::start(neve_devnet::GethDevOptions {
        period: 1,
        ..Default::default()
    })
    .await
    .expect("geth dev");
    let geth = RpcClient::new(geth_node.http_url()).unwrap();
    // Traffic throughout: every block touches accounts.
    let mut load = neve_load::LoadConfig::new(geth_node.http_url(), Duration::from_secs(60));
    load.accounts = 16;
    load.tps = Some(40);
    let traffic = tokio::spawn(neve_load::run(load, |_| {}));
    while head(&geth).await < 4 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let neve = Neve::start(
        geth_node.http_url(),
        &["--floor", "0", "--ws-url", geth_node.ws_url()],
        head(&geth).await,
    )
    .await;
    let client = RpcClient::new(&neve.url).unwrap();
    // Keys clients read: the accounts of recent transactions.
    let mut addresses = BTreeSet::new();
    let top = head(&geth).await;
    for height in top.saturating_sub(3)..=top {
        let block = answer(
            &geth,
            "eth_getBlockByNumber",
            json!([quantity(height), true]),
        )
        .await;
        for tx in block["result"]["transactions"].as_array().unwrap() {
            addresses.insert(tx["from"].as_str().unwrap().to_string());
            if let Some(to) = tx["to"].as_str() {
                addresses.insert(to.to_string());
            }
        }
    }
    let addresses: Vec<String> = addresses.into_iter().take(24).collect();
    assert!(addresses.len() >= 4, "{addresses:?}");
    read_latest(&client, &addresses).await;
    wait_blocks(&neve, 2).await;

    let before = counters(&neve);
    wait_blocks(&neve, 4).await;
    read_latest(&client, &addresses).await;
    let after = counters(&neve);
    eprintln!("before: {before}\nafter: {after}");
    let delta = |key: &str| count(&after, key) - count(&before, key);
    assert!(delta("refreshed_blocks") >= 4, "every block refreshed");
    // What the refresh did not cover was fetched key by key: nothing.
    let fallback = delta("prefetch_calls") - delta("refresh_calls");
    assert!(
        fallback <= 2,
        "{fallback} proofs fetched key by key over {} blocks",
        delta("refreshed_blocks")
    );
    assert_eq!(
        delta("upstream_calls"),
        0,
        "the reads at `latest` were answered from refreshed nodes"
    );
    // The answers are geth's.
    let stored = neve.health().unwrap()["blocks"]["max_contiguous_height"]
        .as_u64()
        .unwrap();
    for address in &addresses {
        let params = json!([address, quantity(stored)]);
        assert_eq!(
            answer(&client, "eth_getBalance", params.clone()).await,
            answer(&geth, "eth_getBalance", params).await
        );
    }

    // The source says what its tip touched, for mirrors.
    let tip = answer(
        &client,
        "eth_getBlockByNumber",
        json!([quantity(stored), false]),
    )
    .await;
    let touched = answer(
        &client,
        "neve_getTouchedKeys",
        json!([tip["result"]["hash"]]),
    )
    .await;
    assert!(
        touched["result"].as_object().is_some_and(|t| !t.is_empty()),
        "{touched}"
    );

    // A mirror refreshes from it, without tracing.
    let mirror = Neve::start_mirror(&neve.url, stored).await;
    let mirrored = RpcClient::new(&mirror.url).unwrap();
    read_latest(&mirrored, &addresses).await;
    wait_blocks(&mirror, 2).await;
    let before = counters(&mirror);
    wait_blocks(&mirror, 3).await;
    read_latest(&mirrored, &addresses).await;
    let after = counters(&mirror);
    eprintln!("mirror before: {before}\nmirror after: {after}");
    let delta = |key: &str| count(&after, key) - count(&before, key);
    assert!(
        delta("refreshed_blocks") >= 3,
        "the mirror refreshed per block"
    );
    let fallback = delta("prefetch_calls") - delta("refresh_calls");
    assert!(fallback <= 2, "{fallback} key-by-key proofs on the mirror");
    drop(mirror);

    // A restart comes back warm: the hot keys were saved on stop, read
    // back at start and refreshed before clients read them again.
    let mut neve = neve;
    neve.terminate();
    tokio::task::block_in_place(|| neve.wait_exit(Duration::from_secs(20)))
        .unwrap_or_else(|| panic!("neve did not stop:\n{}", neve.log()));
    let saved = std::fs::read_to_string(neve.store.join("hot-keys")).unwrap_or_default();
    assert!(
        saved.lines().count() >= addresses.len(),
        "the hot keys were saved: {saved}"
    );
    neve.restart();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !neve.log().contains("hot keys read back") {
        assert!(
            Instant::now() < deadline,
            "no hot keys read back:\n{}",
            neve.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_blocks(&neve, 2).await;
    let before = counters(&neve);
    read_latest(&client, &addresses).await;
    let after = counters(&neve);
    assert_eq!(
        count(&after, "upstream_calls"),
        count(&before, "upstream_calls"),
        "after the restart, reads at `latest` were answered from refreshed nodes: {after}"
    );
    traffic.abort();
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline && !traffic.is_finished() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
