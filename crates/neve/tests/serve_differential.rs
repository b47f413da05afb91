//! Differential checks against the live node: for every height in neve's
//! tail, every served method answers as geth does; and over WebSocket, a
//! real reorg sends the removed logs again with `removed: true`.

mod support;

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use neve_devnet::{GethDev, GethDevOptions};
use neve_upstream::{RpcClient, quantity};
use serde_json::{Value, json};
use support::*;
use tokio_tungstenite::tungstenite::Message;

const TRANSFER: &str = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef";

#[tokio::test(flavor = "multi_thread")]
async fn every_method_at_every_height_answers_as_geth_does() {
    let geth = GethDev::start(GethDevOptions {
        period: 0,
        ..Default::default()
    })
    .await
    .expect("geth dev");
    let mut config = neve_load::LoadConfig::new(geth.http_url(), Duration::from_secs(5));
    config.accounts = 16;
    config.tps = Some(800);
    let report = neve_load::run(config, |_| {}).await.expect("load");
    let neve = Neve::start(
        geth.http_url(),
        &["--floor", "0", "--ws-url", "none"],
        report.last_block,
    )
    .await;
    let (g, n) = (
        RpcClient::new(geth.http_url()).unwrap(),
        RpcClient::new(&neve.url).unwrap(),
    );
    let mut compared = 0;
    let mut same = |what: String, a: Value, b: Value| {
        assert_eq!(a, b, "{what}");
        compared += 1;
    };
    let mut sampled_transactions = 0;
    for height in 0..=report.last_block {
        let h = quantity(height);
        let block: Value = g.call("eth_getBlockByNumber", (&h, false)).await.unwrap();
        let hash = block["hash"].as_str().unwrap().to_string();
        let txs: Vec<String> = block["transactions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap().to_string())
            .collect();
        let mut calls: Vec<(&str, Value)> = vec![
            ("eth_getBlockByNumber", json!([h, false])),
            ("eth_getBlockByNumber", json!([h, true])),
            ("eth_getBlockByHash", json!([hash, true])),
            ("eth_getBlockTransactionCountByNumber", json!([h])),
            ("eth_getBlockTransactionCountByHash", json!([hash])),
            ("eth_getUncleCountByBlockNumber", json!([h])),
            ("eth_getBlockReceipts", json!([h])),
            ("eth_getBlockReceipts", json!([{"blockHash": hash}])),
            ("eth_getLogs", json!([{"blockHash": hash}])),
            ("debug_getRawHeader", json!([h])),
            ("debug_getRawBlock", json!([h])),
            ("debug_getRawReceipts", json!([h])),
            (
                "eth_getTransactionByBlockNumberAndIndex",
                json!([h, quantity(txs.len() as u64)]),
            ),
        ];
        for (i, tx) in txs.iter().enumerate().step_by(7) {
            sampled_transactions += 1;
            calls.push(("eth_getTransactionByHash", json!([tx])));
            calls.push(("eth_getTransactionReceipt", json!([tx])));
            calls.push(("debug_getRawTransaction", json!([tx])));
            calls.push((
                "eth_getTransactionByBlockHashAndIndex",
                json!([hash, quantity(i as u64)]),
            ));
        }
        for (method, params) in calls {
            let (a, b) = (
                answer(&g, method, params.clone()).await,
                answer(&n, method, params.clone()).await,
            );
            same(format!("{method} {params}"), a, b);
        }
    }
    // Log filters over ranges: by topic, by address list, by topic alternatives.
    let token = format!("{}", report.token).to_lowercase();
    for (from, to) in [
        (0, report.last_block),
        (report.last_block / 3, report.last_block / 2),
    ] {
        // One sender's transfers: in a block, runs of matching logs broken
        // by other senders' (each run is one slice of the log section).
        let transfers = answer(
            &g,
            "eth_getLogs",
            json!([{"fromBlock": quantity(from), "toBlock": quantity(to), "topics": [TRANSFER]}]),
        )
        .await;
        let sender = transfers["result"][0]["topics"][1].clone();
        assert!(sender.is_string(), "{transfers}");
        for filter in [
            json!({"fromBlock": quantity(from), "toBlock": quantity(to), "topics": [TRANSFER, sender]}),
            json!({"fromBlock": quantity(from), "toBlock": quantity(to), "topics": [TRANSFER]}),
            json!({"fromBlock": quantity(from), "toBlock": quantity(to), "address": [token, "0x0000000000000000000000000000000000000001"]}),
            json!({"fromBlock": quantity(from), "toBlock": quantity(to), "topics": [null, null, [TRANSFER, "0x0000000000000000000000000000000000000000000000000000000000000001"]]}),
        ] {
            let params = json!([filter]);
            let (a, b) = (
                answer(&g, "eth_getLogs", params.clone()).await,
                answer(&n, "eth_getLogs", params.clone()).await,
            );
            same(format!("eth_getLogs {params}"), a, b);
        }
    }
    // The generator stops waiting for its pool after a while, so geth may
    // still be sealing: give neve the time to reach geth's head.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut neve_head = answer(&n, "eth_blockNumber", json!([])).await;
        let geth_head = answer(&g, "eth_blockNumber", json!([])).await;
        neve_head["id"] = geth_head["id"].clone();
        if geth_head == neve_head || std::time::Instant::now() > deadline {
            same("eth_blockNumber".into(), geth_head, neve_head);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for method in ["eth_chainId", "net_version", "eth_syncing"] {
        let (a, b) = (
            answer(&g, method, json!([])).await,
            answer(&n, method, json!([])).await,
        );
        same(method.into(), a, b);
    }
    eprintln!(
        "{compared} answers compared over {} heights",
        report.last_block + 1
    );
    // 13 calls per height, and the load put transactions in most blocks.
    assert!(compared > 13 * report.last_block as usize, "{compared}");
    assert!(sampled_transactions >= 50, "{sampled_transactions}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reorg_sends_removed_logs_to_log_subscribers() {
    let geth = GethDev::start(GethDevOptions {
        period: 0,
        ..Default::default()
    })
    .await
    .expect("geth dev");
    let client = RpcClient::new(geth.http_url()).unwrap();
    let grow = |seconds| {
        let mut config = neve_load::LoadConfig::new(geth.http_url(), Duration::from_secs(seconds));
        config.accounts = 4;
        config.tps = Some(200);
        neve_load::run(config, |_| {})
    };
    grow(2).await.expect("growth");
    let head = parse_head(&client).await;
    let neve = Neve::start(
        geth.http_url(),
        &["--floor", "0", "--ws-url", geth.ws_url()],
        head,
    )
    .await;

    let (mut socket, _) =
        tokio_tungstenite::connect_async(neve.url.replacen("http://", "ws://", 1))
            .await
            .unwrap();
    let subscribe = json!({"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["logs",{"topics":[TRANSFER]}]});
    socket
        .send(Message::Text(subscribe.to_string().into()))
        .await
        .unwrap();
    let reply: Value = match socket.next().await.unwrap().unwrap() {
        Message::Text(text) => serde_json::from_str(&text).unwrap(),
        other => panic!("{other:?}"),
    };
    assert!(
        reply["result"].as_str().unwrap().starts_with("0x"),
        "{reply}"
    );

    // Rewind geth to just below the last block with a Transfer log, so the
    // reorg is sure to remove one, and grow a different chain.
    let logs: Vec<Value> = client
        .call(
            "eth_getLogs",
            [json!({"fromBlock": "0x0", "toBlock": quantity(head), "topics": [TRANSFER]})],
        )
        .await
        .unwrap();
    let last_logged = parse_quantity_value(&logs.last().expect("transfers logged")["blockNumber"]);
    let fork = last_logged - 1;
    let _: Value = client
        .call("debug_setHead", [quantity(fork)])
        .await
        .unwrap();
    grow(2).await.expect("second growth");

    let mut removed = 0;
    let mut added = 0;
    // Generous: CI shares two cores with other tests' nodes.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while removed == 0 || added == 0 {
        let Ok(message) = tokio::time::timeout_at(deadline, socket.next()).await else {
            panic!(
                "notifications stopped at {removed} removed, {added} added; neve: {}\n{}",
                neve.health().unwrap_or_default(),
                neve.log()
            );
        };
        let message = message.unwrap().unwrap();
        let Message::Text(text) = message else {
            continue;
        };
        let note: Value = serde_json::from_str(&text).unwrap();
        let log = &note["params"]["result"];
        assert_eq!(log["topics"][0], TRANSFER);
        if log["removed"] == true {
            removed += 1;
            assert!(
                parse_quantity_value(&log["blockNumber"]) > fork,
                "only logs above the fork point are removed"
            );
        } else {
            added += 1;
        }
    }
}

async fn parse_head(client: &RpcClient) -> u64 {
    let head: String = client.call("eth_blockNumber", ()).await.unwrap();
    neve_upstream::parse_quantity(&head).unwrap()
}

fn parse_quantity_value(value: &Value) -> u64 {
    neve_upstream::parse_quantity(value.as_str().unwrap()).unwrap()
}
