//! Comparing what neve stored with what the node answers.

#![allow(dead_code)] // each test binary uses its own subset

use neve_ingest::{Follower, IngestConfig, StartHeight};
use neve_store::{Durability, Reader, StoreConfig};
use neve_upstream::{RpcClient, quantity};
use serde_json::Value;

pub async fn follower(url: &str, dir: &std::path::Path, floor: StartHeight) -> Follower {
    let client = RpcClient::new(url).unwrap();
    let store = StoreConfig {
        durability: Durability::OsBuffered,
        ..StoreConfig::default()
    };
    Follower::connect(
        client,
        dir,
        store,
        IngestConfig {
            floor,
            ..IngestConfig::default()
        },
    )
    .await
    .expect("follower connects")
}

/// Syncs until the store reaches the upstream's head.
pub async fn catch_up(follower: &mut Follower) {
    for _ in 0..200 {
        let outcome = follower.sync_once().await.expect("sync step");
        if outcome.caught_up {
            return;
        }
    }
    panic!("did not catch up");
}

fn parse(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).expect("stored bytes are JSON")
}

async fn call(client: &RpcClient, method: &str, params: Value) -> Value {
    client
        .call(method, params)
        .await
        .unwrap_or_else(|e| panic!("{method}: {e}"))
}

/// Every stored block, transaction, receipt and raw encoding in `heights`
/// equals the node's answer, as parsed JSON.
pub async fn assert_store_matches_node(
    reader: &Reader,
    client: &RpcClient,
    heights: std::ops::RangeInclusive<u64>,
    raw: bool,
) {
    for height in heights {
        let block = reader
            .block(height)
            .unwrap_or_else(|| panic!("height {height} not stored"));
        let number = quantity(height);
        assert_eq!(
            parse(&block.full().unwrap()),
            call(
                client,
                "eth_getBlockByNumber",
                serde_json::json!([number, true])
            )
            .await,
            "block {height} full"
        );
        assert_eq!(
            parse(&block.hashes_only().unwrap()),
            call(
                client,
                "eth_getBlockByNumber",
                serde_json::json!([number, false])
            )
            .await,
            "block {height} hashes"
        );
        assert_eq!(
            parse(&block.receipts().unwrap()),
            call(client, "eth_getBlockReceipts", serde_json::json!([number])).await,
            "receipts {height}"
        );
        for index in 0..block.tx_count() {
            let hash = format!("0x{}", hex(&block.tx_hash(index).unwrap()));
            let (found, at) = reader
                .transaction(&block.tx_hash(index).unwrap())
                .expect("tx indexed");
            assert_eq!((found.height(), at), (height, index));
            assert_eq!(
                parse(&block.transaction(index).unwrap().unwrap()),
                call(
                    client,
                    "eth_getTransactionByHash",
                    serde_json::json!([hash])
                )
                .await,
                "tx {hash}"
            );
            assert_eq!(
                parse(&block.receipt(index).unwrap().unwrap()),
                call(
                    client,
                    "eth_getTransactionReceipt",
                    serde_json::json!([hash])
                )
                .await,
                "receipt {hash}"
            );
            if raw {
                let expected =
                    call(client, "debug_getRawTransaction", serde_json::json!([hash])).await;
                let stored =
                    String::from_utf8(block.raw_transaction(index).unwrap().unwrap().to_vec())
                        .unwrap();
                assert_eq!(
                    Value::String(format!("0x{stored}")),
                    expected,
                    "raw tx {hash}"
                );
            }
        }
        if raw {
            for (method, stored) in [
                ("debug_getRawHeader", block.raw_header().unwrap()),
                ("debug_getRawBlock", block.raw_block().unwrap()),
                ("debug_getRawReceipts", block.raw_receipts().unwrap()),
            ] {
                assert_eq!(
                    parse(&stored),
                    call(client, method, serde_json::json!([number])).await,
                    "{method} {height}"
                );
            }
        }
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
