//! Helpers shared by the integration tests: run the real `neve` binary and
//! read the chain back over RPC.

#![allow(dead_code)] // each test binary uses its own subset

use std::process::Output;

use neve_upstream::{RpcClient, parse_quantity, quantity};
use serde_json::Value;

/// Runs `neve ARGS…` to completion off the async runtime and returns its output.
pub async fn run_neve(args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_neve"))
            .args(&args)
            .output()
            .expect("neve runs")
    })
    .await
    .expect("join")
}

/// Asserts success and returns stdout, showing stderr on failure.
pub fn expect_success(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "neve failed with {}\nstdout:\n{stdout}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

pub async fn head(client: &RpcClient) -> u64 {
    let head: String = client.call("eth_blockNumber", ()).await.unwrap();
    parse_quantity(&head).unwrap()
}

/// Every block from 1 to the head with full transactions.
pub async fn blocks(client: &RpcClient) -> Vec<Value> {
    let head = head(client).await;
    let mut blocks = Vec::new();
    let heights: Vec<u64> = (1..=head).collect();
    // Small chunks: geth caps a batch response at 25 MB and these blocks
    // carry hundreds of full transactions each.
    for chunk in heights.chunks(4) {
        let calls: Vec<(&str, (String, bool))> = chunk
            .iter()
            .map(|n| ("eth_getBlockByNumber", (quantity(*n), true)))
            .collect();
        for item in client.batch(&calls).await.unwrap() {
            blocks.push(serde_json::from_str(item.unwrap().get()).unwrap());
        }
    }
    blocks
}

/// Transactions per envelope type ("0x0", "0x1", "0x2") over `blocks`.
pub fn count_types(blocks: &[Value]) -> std::collections::BTreeMap<String, usize> {
    let mut types = std::collections::BTreeMap::new();
    for block in blocks {
        for tx in block["transactions"].as_array().unwrap() {
            *types
                .entry(tx["type"].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
    }
    types
}

/// Logs with the ERC-20 `Transfer` topic between block 1 and the head.
pub async fn transfer_logs(client: &RpcClient) -> Vec<Value> {
    let topic = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef";
    client
        .call(
            "eth_getLogs",
            [serde_json::json!({"fromBlock": "0x1", "toBlock": "latest", "topics": [topic]})],
        )
        .await
        .unwrap()
}
