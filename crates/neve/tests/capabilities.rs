//! `eth_capabilities` is true at every instant: while blocks keep coming
//! and the tail keeps being pruned, every height it advertises for blocks
//! and state is answered, unless the head has since moved the window past
//! it (what `deleteStrategy` tells a router to expect).

mod support;

use std::time::{Duration, Instant};

use neve_devnet::{GethDev, GethDevOptions};
use neve_upstream::{RpcClient, parse_quantity, quantity};
use serde_json::{Value, json};
use support::*;

const RETAIN: u64 = 12;

async fn capabilities(client: &RpcClient) -> Value {
    answer(client, "eth_capabilities", json!([])).await["result"].clone()
}

fn height(value: &Value) -> u64 {
    parse_quantity(value.as_str().expect("a quantity")).expect("a quantity")
}

/// Whether the window advertised now has moved past `h` since.
async fn window_moved_past(client: &RpcClient, h: u64) -> bool {
    let now = capabilities(client).await;
    h + RETAIN < height(&now["head"]["number"]) + 1
}

#[tokio::test(flavor = "multi_thread")]
async fn every_advertised_height_is_served_while_the_tail_moves() {
    let geth = GethDev::start(GethDevOptions {
        period: 0,
        ..Default::default()
    })
    .await
    .expect("geth dev");
    let mut warmup = neve_load::LoadConfig::new(geth.http_url(), Duration::from_secs(2));
    warmup.accounts = 2;
    warmup.tps = Some(20);
    neve_load::run(warmup, |_| {}).await.expect("warm-up load");
    let retain = RETAIN.to_string();
    let neve = Neve::start(
        geth.http_url(),
        &[
            "--floor",
            "0",
            "--retain-blocks",
            &retain,
            "--segment-blocks",
            "4",
        ],
        RETAIN,
    )
    .await;
    let client = RpcClient::new(&neve.url).unwrap();
    let mut trickle = neve_load::LoadConfig::new(geth.http_url(), Duration::from_secs(8));
    trickle.accounts = 2;
    trickle.tps = Some(10);
    let load = tokio::spawn(neve_load::run(trickle, |_| {}));

    let (mut rounds, mut pruned_seen, mut first_oldest) = (0, false, None);
    let deadline = Instant::now() + Duration::from_secs(8);
    while Instant::now() < deadline {
        let caps = capabilities(&client).await;
        let head = height(&caps["head"]["number"]);
        let oldest = height(&caps["blocks"]["oldestBlock"]);
        assert_eq!(
            caps["blocks"]["deleteStrategy"],
            json!({"type": "window", "retentionBlocks": quantity(RETAIN)})
        );
        for resource in ["tx", "receipts", "logs"] {
            assert_eq!(caps[resource], caps["blocks"], "{resource}");
        }
        pruned_seen |= first_oldest.is_some_and(|first| oldest > first);
        first_oldest.get_or_insert(oldest);
        let block = answer(
            &client,
            "eth_getBlockByNumber",
            json!([quantity(head), false]),
        )
        .await;
        assert_eq!(
            block["result"]["hash"], caps["head"]["hash"],
            "the head is served"
        );
        for h in oldest..=head {
            let block = answer(&client, "eth_getBlockByNumber", json!([quantity(h), false])).await;
            if block["result"].is_null() || block.get("error").is_some() {
                assert!(
                    window_moved_past(&client, h).await,
                    "height {h} advertised in {caps} is not served: {block}"
                );
            }
        }
        // State at the oldest height it advertises (geth is an archive).
        let state_oldest = height(&caps["state"]["oldestBlock"]);
        assert_eq!(caps["state"], caps["stateproofs"]);
        let balance = answer(
            &client,
            "eth_getBalance",
            json!([format!("0x{}", "00".repeat(20)), quantity(state_oldest)]),
        )
        .await;
        if balance.get("result").is_none() {
            assert!(
                window_moved_past(&client, state_oldest).await,
                "state at {state_oldest} advertised in {caps}: {balance}"
            );
        }
        rounds += 1;
    }
    load.await.unwrap().expect("load");
    assert!(rounds > 5, "{rounds} rounds");
    assert!(pruned_seen, "the tail was pruned while it was read");
}
