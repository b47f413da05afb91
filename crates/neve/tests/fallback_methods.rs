//! Issue 32 (8): the default `--fallback-methods` names methods exactly,
//! and each name is one a real geth serves: asked of a live geth with no
//! parameters, none answers "method not found" (-32601). A misspelt or
//! retired name would otherwise forward nothing and go unnoticed.

use neve_devnet::{GethDev, GethDevOptions};
use neve_upstream::{RpcClient, RpcError};
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn every_default_fallback_method_is_one_geth_serves() {
    let geth = GethDev::start(GethDevOptions {
        period: 0,
        ..Default::default()
    })
    .await
    .expect("geth dev");
    let client = RpcClient::new(geth.http_url()).unwrap();
    let methods: Vec<&str> = neve_serve::DEFAULT_FALLBACK_METHODS.split(',').collect();
    assert!(methods.len() > 40, "the list names methods one by one");
    for method in methods {
        assert!(
            !method.contains('*') && !method.starts_with('!'),
            "{method}: the default names methods exactly"
        );
        match client.call_raw(method, json!([])).await {
            Err(RpcError::Rpc {
                code: -32601,
                message,
            }) => {
                panic!("geth does not serve {method}: {message}")
            }
            Ok(_) | Err(RpcError::Rpc { .. }) => {}
            Err(other) => panic!("{method}: {other}"),
        }
    }
    // And what it must not forward, geth does serve: the list leaves them
    // out on purpose, not by accident of a pattern.
    for method in ["debug_traceBlockFromFile", "debug_traceBlock", "eth_resend"] {
        if let Err(RpcError::Rpc {
            code: -32601,
            message,
        }) = client.call_raw(method, json!([])).await
        {
            panic!("{method} is no longer geth's ({message}): drop it from the doc");
        }
    }
}
