//! Verified state reads against avalanchego's C-chain, whose account leaf
//! carries a fifth item (`isMultiCoin`) that `eth_getProof`'s JSON does not
//! show: neve verifies the leaf as the trie holds it and answers balances,
//! nonces, code, storage and proofs equal to avalanchego's.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use neve_devnet::{AVALANCHEGO_PREFUNDED_KEY, Avalanchego};
use neve_upstream::{RpcClient, quantity};
use serde_json::{Value, json};
use support::*;

async fn same(neve: &RpcClient, node: &RpcClient, method: &str, params: Value) {
    let body = json!({"jsonrpc":"2.0","id":1,"method":method,"params":params}).to_string();
    let (_, expected) = node.post(body.clone().into()).await.unwrap();
    let expected: Value = serde_json::from_slice(&expected).unwrap();
    let (mut status, mut got) = neve.post(body.clone().into()).await.unwrap();
    if status.as_u16() == 421 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        (status, got) = neve.post(body.into()).await.unwrap();
    }
    let got: Value = serde_json::from_slice(&got).unwrap();
    assert_eq!(status.as_u16(), 200, "{method} {params}: {got}");
    assert!(expected.get("result").is_some(), "avalanchego: {expected}");
    assert_eq!(got["result"], expected["result"], "{method} {params}");
}

#[tokio::test(flavor = "multi_thread")]
async fn state_reads_equal_avalanchegos() {
    let (node, client, head) = avalanchego_with_a_token().await;
    let neve = neve_following_avalanchego(&node, head).await;
    let mirror = RpcClient::new(&neve.url).unwrap();

    let mut accounts = BTreeSet::new();
    for block in blocks(&client).await {
        for tx in block["transactions"].as_array().unwrap() {
            accounts.insert(tx["from"].as_str().unwrap().to_string());
            if let Some(to) = tx["to"].as_str() {
                accounts.insert(to.to_string());
            }
        }
    }
    let logs = transfer_logs(&client).await;
    let token = logs[0]["address"].as_str().unwrap().to_string();
    let slot = logs[0]["topics"][2].as_str().unwrap().to_string();
    let accounts: Vec<String> = accounts.into_iter().take(6).collect();
    for height in [head / 2, head] {
        let at = quantity(height);
        for account in &accounts {
            same(&mirror, &client, "eth_getBalance", json!([account, at])).await;
            same(
                &mirror,
                &client,
                "eth_getTransactionCount",
                json!([account, at]),
            )
            .await;
            same(&mirror, &client, "eth_getProof", json!([account, [], at])).await;
        }
        same(&mirror, &client, "eth_getCode", json!([token, at])).await;
        same(
            &mirror,
            &client,
            "eth_getStorageAt",
            json!([token, slot, at]),
        )
        .await;
        same(
            &mirror,
            &client,
            "eth_getProof",
            json!([token, [slot, "0x1"], at]),
        )
        .await;
    }
    let health = neve.health().unwrap();
    eprintln!("state: {}", health["state"]);
    assert_eq!(
        health["state"]["refused_proofs"], 0,
        "coreth's proofs verify"
    );
}

/// issue 32.12: coreth clears the low bit of a slot key's first byte before
/// every contract read and write (its multicoin balances live beside the
/// slots with that bit set). A contract that writes a slot with the bit
/// clear and one with it set: `eth_getStorageAt` and `eth_getProof` through
/// neve equal avalanchego's for keys either way, cold (fetched) and warm.
#[tokio::test(flavor = "multi_thread")]
async fn storage_keys_either_side_of_coreths_normalization_equal_avalanchegos() {
    let node = Avalanchego::start().await.expect("avalanchego starts");
    let rpc = node.c_chain_rpc_url();
    // SSTORE(0x01, 0x2a); SSTORE(0x01 << 248, 0x2b); STOP (no runtime code:
    // the account keeps its storage).
    let init = [
        0x60, 0x2a, 0x60, 0x01, 0x55, 0x60, 0x2b, 0x60, 0x01, 0x60, 0xf8, 0x1b, 0x55, 0x00,
    ];
    let contract = neve_load::deploy(&rpc, AVALANCHEGO_PREFUNDED_KEY, &init)
        .await
        .expect("the contract deploys");
    let contract = format!("{contract:#x}");
    let client = RpcClient::new(&rpc).unwrap();
    let head = head(&client).await;
    let neve = neve_following_avalanchego(&node, head).await;
    let mirror = RpcClient::new(&neve.url).unwrap();
    let high = format!("0x01{}", "0".repeat(62));
    let high_one = format!("0x01{}1", "0".repeat(61));
    let one_padded = format!("0x{}1", "0".repeat(63));
    let at = quantity(head);
    // First asked with nothing held: the proofs are fetched and verified.
    for round in ["cold", "warm"] {
        eprintln!("{round}");
        for slot in ["0x0", "0x1", &high, &high_one] {
            same(
                &mirror,
                &client,
                "eth_getStorageAt",
                json!([contract, slot, at]),
            )
            .await;
        }
        same(
            &mirror,
            &client,
            "eth_getProof",
            json!([contract, [high, high_one, "0x0", "0x1", one_padded], at]),
        )
        .await;
    }
    let node_value: String = client
        .call("eth_getStorageAt", json!([contract, high, at]))
        .await
        .unwrap();
    assert_eq!(
        node_value,
        format!("0x{}2b", "0".repeat(62)),
        "avalanchego answers the normalized slot's value"
    );
    let health = neve.health().unwrap();
    assert_eq!(health["state"]["refused_proofs"], 0, "{}", health["state"]);
}
