//! `debug_trace*` against the live node: on a chain of `neve load`
//! traffic (transfers, a token's calls, contract creations), every block
//! and transaction of the tail traced through neve under every tracer and
//! option equals geth's answer.

mod support;

use neve_upstream::{RpcClient, quantity};
use serde_json::{Value, json};
use support::calls::*;

/// Every tracer and option neve runs, as a trace's configuration.
fn configs() -> Vec<Value> {
    vec![
        json!({}),
        json!({"enableMemory": true, "enableReturnData": true}),
        json!({"disableStack": true, "disableStorage": true}),
        json!({"limit": 3000}),
        json!({"tracer": "callTracer"}),
        json!({"tracer": "callTracer", "tracerConfig": {"withLog": true}}),
        json!({"tracer": "callTracer", "tracerConfig": {"onlyTopCall": true}}),
        json!({"tracer": "prestateTracer"}),
        json!({"tracer": "prestateTracer", "tracerConfig": {"diffMode": true}}),
        json!({"tracer": "prestateTracer", "tracerConfig": {"disableCode": true, "disableStorage": true}}),
        json!({"tracer": "4byteTracer"}),
        json!({"tracer": "flatCallTracer"}),
        json!({"tracer": "noopTracer"}),
        json!({"tracer": "muxTracer", "tracerConfig": {"callTracer": {"withLog": true}, "4byteTracer": null, "prestateTracer": {"diffMode": true}}}),
        json!({"tracer": "callTracer", "timeout": "10s"}),
    ]
}

async fn block(client: &RpcClient, number: u64) -> Value {
    client
        .call("eth_getBlockByNumber", json!([quantity(number), false]))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn traces_equal_geths_for_every_block_and_tracer() {
    let TokenChain {
        node: _node,
        geth,
        neve: _neve,
        client,
        head,
        ..
    } = neve_on_a_token_chain().await;
    let only = std::env::var("NEVE_TRACE_CONFIG").ok();
    let mut traced = 0;
    for number in 1..=head {
        let block = block(&geth, number).await;
        let txs = block["transactions"].as_array().unwrap().clone();
        if txs.is_empty() {
            continue;
        }
        for config in configs() {
            if only
                .as_ref()
                .is_some_and(|o| serde_json::from_str::<Value>(o).unwrap() != config)
            {
                continue;
            }
            same(
                &client,
                &geth,
                "debug_traceBlockByNumber",
                json!([quantity(number), config]),
            )
            .await;
            same(
                &client,
                &geth,
                "debug_traceBlockByHash",
                json!([block["hash"], config]),
            )
            .await;
            for tx in txs.iter().step_by(17) {
                same(
                    &client,
                    &geth,
                    "debug_traceTransaction",
                    json!([tx, config]),
                )
                .await;
            }
            traced += 1;
        }
    }
    assert!(traced > 10, "{traced} blocks traced");
}

#[tokio::test(flavor = "multi_thread")]
async fn traced_calls_equal_geths_at_blocks_and_transaction_indices() {
    let TokenChain {
        node: _node,
        geth,
        neve,
        client,
        head,
        token,
        holders,
        ..
    } = neve_on_a_token_chain().await;
    let _ = &neve;
    let funded = neve_devnet::GETH_DEV_ADDRESS;
    let calls = [
        json!({"from": holders[0], "to": token, "data": transfer(&holders[1], 1)}),
        json!({"from": holders[0], "to": token, "data": transfer(&holders[1], u64::MAX)}),
        json!({"from": funded, "to": STRANGER, "value": "0x10"}),
        json!({"from": funded, "data": format!("0x600a600c600039600a6000f3{}", "602a60005260206000f3")}),
        json!({"to": PROBE}),
    ];
    let mut compared = 0;
    for number in (1..=head).rev().take(6) {
        let block = block(&geth, number).await;
        let txs = block["transactions"].as_array().unwrap().len();
        for config in configs() {
            for (i, call) in calls.iter().enumerate() {
                let mut config = config.clone();
                let object = config.as_object_mut().unwrap();
                match i % 3 {
                    0 if txs > 0 => {
                        object.insert(
                            "txIndex".into(),
                            json!(quantity((number % txs as u64) as u64)),
                        );
                    }
                    1 => {
                        let (name, code) = PROBES[(number as usize + i) % PROBES.len()];
                        object.insert("stateOverrides".into(), json!({PROBE: {"code": code}}));
                        if object.get("tracer").is_none()
                            && object.get("limit").is_none()
                            && call["to"] == PROBE
                            && name == "endless loop"
                        {
                            // A struct log past neve's cap: the node's.
                            let params = json!([call, quantity(number), config]);
                            let (status, _) =
                                support::calls::call(&client, "debug_traceCall", &params).await;
                            assert_eq!(status, 421, "{params}");
                            continue;
                        }
                    }
                    _ => {
                        object.insert(
                            "blockOverrides".into(),
                            json!({"number": quantity(number + 1)}),
                        );
                        object.insert("stateOverrides".into(), json!({PROBE: {"code": ENV}}));
                    }
                }
                same(
                    &client,
                    &geth,
                    "debug_traceCall",
                    json!([call, quantity(number), config]),
                )
                .await;
                compared += 1;
            }
        }
    }
    assert!(compared > 100, "{compared}");
}
