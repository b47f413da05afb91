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
