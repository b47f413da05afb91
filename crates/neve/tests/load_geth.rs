//! `neve load` against a real geth dev chain: thousands of transactions of
//! every pre-blob type land, and the token's `Transfer` logs are on chain.

mod support;

use neve_devnet::{GethDev, GethDevOptions};
use neve_upstream::RpcClient;
use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn load_fills_a_geth_dev_chain_with_mixed_transactions_and_logs() {
    let geth = GethDev::start(GethDevOptions {
        period: 0,
        ..Default::default()
    })
    .await
    .expect("geth dev starts");
    let output = run_neve(&["load", "--rpc", geth.http_url(), "--seconds", "15"]).await;
    let summary = expect_success(&output);
    eprintln!("{summary}");
    assert!(
        summary.contains("tx/s"),
        "summary names the rate: {summary}"
    );

    let client = RpcClient::new(geth.http_url()).unwrap();
    let blocks = blocks(&client).await;
    let types = count_types(&blocks);
    let total: usize = types.values().sum();
    assert!(
        total >= 1_000,
        "only {total} transactions on chain: {types:?}"
    );
    for ty in ["0x0", "0x1", "0x2"] {
        assert!(
            types.get(ty).copied().unwrap_or(0) > 0,
            "no type {ty} transactions: {types:?}"
        );
    }
    let creations = blocks
        .iter()
        .flat_map(|b| b["transactions"].as_array().unwrap())
        .filter(|tx| tx["to"].is_null())
        .count();
    assert!(
        creations > 1,
        "the token deployment and later creations are on chain"
    );
    let logs = transfer_logs(&client).await;
    assert!(logs.len() >= 100, "only {} Transfer logs", logs.len());
}

#[tokio::test(flavor = "multi_thread")]
async fn load_respects_a_rate_cap() {
    let geth = GethDev::start(GethDevOptions {
        period: 0,
        ..Default::default()
    })
    .await
    .expect("geth dev starts");
    let output = run_neve(&[
        "load",
        "--rpc",
        geth.http_url(),
        "--seconds",
        "4",
        "--tps",
        "50",
        "--accounts",
        "4",
    ])
    .await;
    expect_success(&output);
    let client = RpcClient::new(geth.http_url()).unwrap();
    let total: usize = count_types(&blocks(&client).await).values().sum();
    // 4 s at 50 tx/s is 200, plus setup (funding 4 senders, one deployment
    // and the dev account's grant); never anywhere near full speed.
    assert!(
        (150..=260).contains(&total),
        "{total} transactions at --tps 50 for 4 s"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn load_reports_a_clear_error_for_an_unreachable_node() {
    // Port 1 (tcpmux): privileged, nothing listens there, and no parallel
    // test can take it the way it could a freed ephemeral port.
    let output = run_neve(&["load", "--rpc", "http://127.0.0.1:1", "--seconds", "1"]).await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("eth_chainId"),
        "names the failing step: {stderr}"
    );
}
