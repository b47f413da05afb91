//! `neve load` against a real avalanchego local network: funded from the
//! prefunded key, the C-chain makes blocks with the generator's transactions.

mod support;

use neve_devnet::{AVALANCHEGO_LOCAL_CHAIN_ID, AVALANCHEGO_PREFUNDED_KEY, Avalanchego};
use neve_upstream::{RpcClient, parse_quantity};
use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn load_makes_avalanchego_produce_blocks_with_transactions_and_logs() {
    let node = Avalanchego::start().await.expect("avalanchego starts");
    let rpc = node.c_chain_rpc_url();
    let client = RpcClient::new(&rpc).unwrap();
    let chain_id: String = client.call("eth_chainId", ()).await.unwrap();
    assert_eq!(parse_quantity(&chain_id), Some(AVALANCHEGO_LOCAL_CHAIN_ID));

    let output = run_neve(&[
        "load",
        "--rpc",
        &rpc,
        "--seconds",
        "10",
        "--funder-key",
        AVALANCHEGO_PREFUNDED_KEY,
        "--accounts",
        "16",
    ])
    .await;
    eprintln!("{}", expect_success(&output));

    let blocks = blocks(&client).await;
    let with_txs = blocks
        .iter()
        .filter(|b| !b["transactions"].as_array().unwrap().is_empty())
        .count();
    assert!(
        with_txs > 0,
        "no block with transactions among {}",
        blocks.len()
    );
    // avalanchego's own header fields pass through its RPC.
    assert!(
        blocks.last().unwrap().get("blockGasCost").is_some(),
        "C-chain block fields present"
    );
    assert!(
        !transfer_logs(&client).await.is_empty(),
        "token Transfer logs on the C-chain"
    );
}
