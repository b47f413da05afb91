//! `--admin-listen`: neve's operator endpoints (/health, /health/ready,
//! /metrics, /blocks) are served on the admin port only, which answers
//! JSON-RPC and WebSocket too; the public port answers JSON-RPC and
//! WebSocket and 404 for the rest. A mirror follows through the admin port
//! (`--mirror-from http://ADMIN`). The shipped front end
//! (`deploy/nginx/neve.conf`, included as is) passes clients JSON-RPC and
//! WebSocket upgrades and nothing else, even to a mirror that serves its
//! operator endpoints on its one port.

mod support;

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use neve_devnet::free_ports;
use neve_upstream::{RpcClient, quantity};
use serde_json::{Value, json};
use support::*;
use tokio_tungstenite::tungstenite::Message;

/// `/health` of the neve whose operator endpoints are at `addr`, parsed.
fn health(addr: &str) -> Option<Value> {
    match http_get(addr, "/health")? {
        (200, body) => serde_json::from_str(&body).ok(),
        _ => None,
    }
}

/// Waits until the neve with operator endpoints at `addr` has stored
/// `height` and is ready; panics with `neve`'s log after 180 s.
async fn wait_ready(addr: &str, height: u64, neve: &Neve) {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let stored = health(addr)
            .and_then(|h| h["blocks"]["max_contiguous_height"].as_u64())
            .is_some_and(|h| h >= height);
        if stored && http_get(addr, "/health/ready").map(|(s, _)| s) == Some(200) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "neve did not store {height} and become ready:\n{}",
            neve.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// eth_chainId over a WebSocket to `ws://addr/`.
async fn chain_id_over_websocket(addr: &str) -> String {
    let (mut socket, _) = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_tungstenite::connect_async(format!("ws://{addr}/")),
    )
    .await
    .expect("the upgrade is answered in 10 s")
    .unwrap_or_else(|e| panic!("WebSocket upgrade at {addr}: {e}"));
    let call = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;
    socket.send(Message::Text(call.into())).await.unwrap();
    loop {
        let message = tokio::time::timeout(Duration::from_secs(10), socket.next())
            .await
            .expect("an answer over the socket in 10 s");
        if let Some(Ok(Message::Text(text))) = message {
            let answer: Value = serde_json::from_str(&text).unwrap();
            return answer["result"].as_str().unwrap().to_owned();
        }
        assert!(matches!(message, Some(Ok(_))), "socket ended: {message:?}");
    }
}

/// The value of the metric line `name VALUE` in `metrics`.
fn metric(metrics: &str, name: &str) -> Option<u64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread")]
async fn operator_endpoints_are_on_the_admin_port_only_and_the_front_end_hides_them() {
    let (geth, top) = dev_chain_of(3).await;
    let direct = RpcClient::new(geth.http_url()).unwrap();
    let chain_id: String = direct.call("eth_chainId", ()).await.unwrap();
    let [admin_port] = free_ports();
    let admin = format!("127.0.0.1:{admin_port}");
    // As deploy/nginx/neve.conf says to run mirrors behind it.
    let neve = Neve::spawn(&[
        "--upstream",
        geth.http_url(),
        "--floor",
        "0",
        "--ws-url",
        geth.ws_url(),
        "--shed-when-behind",
        "on",
        "--admin-listen",
        &admin,
    ]);
    wait_ready(&admin, top, &neve).await;

    // The public port: JSON-RPC and WebSocket, 404 for the rest.
    let export = format!("/blocks?from=0&to={top}");
    for path in ["/health", "/health/ready", "/metrics", export.as_str()] {
        let (status, body) = http_get(&neve.addr, path).expect("the public port answers");
        assert_eq!(status, 404, "{path} on the public port: {body}");
    }
    let public = RpcClient::new(&neve.url).unwrap();
    assert_eq!(head(&public).await, top);
    assert_eq!(chain_id_over_websocket(&neve.addr).await, chain_id);

    // The admin port: everything.
    let (status, metrics) = http_get(&admin, "/metrics").unwrap();
    assert_eq!(status, 200, "{metrics}");
    assert!(
        metric(&metrics, "neve_store_max_height").is_some_and(|h| h >= top),
        "neve's metrics on the admin port:\n{metrics}"
    );
    let stored = health(&admin).expect("/health on the admin port");
    assert!(
        stored["blocks"]["max_contiguous_height"]
            .as_u64()
            .is_some_and(|h| h >= top),
        "{stored}"
    );
    assert_eq!(http_get(&admin, "/health/ready").map(|(s, _)| s), Some(200));
    let (status, lines) = http_get(&admin, &export).unwrap();
    assert_eq!(status, 200, "{lines}");
    let lines: Vec<&str> = lines.lines().filter(|l| !l.is_empty()).collect();
    let lowest = stored["blocks"]["min_height"].as_u64().unwrap();
    assert_eq!(
        lines.len() as u64,
        top + 1 - lowest,
        "one line a block, {lowest} to {top}"
    );
    for line in &lines {
        serde_json::from_str::<Value>(line).expect("each line is a JSON document");
    }
    let at_admin = RpcClient::new(&format!("http://{admin}")).unwrap();
    assert_eq!(head(&at_admin).await, top);
    let newest = json!([quantity(top), false]);
    assert_eq!(
        answer(&at_admin, "eth_getBlockByNumber", newest.clone()).await,
        answer(&direct, "eth_getBlockByNumber", newest).await
    );
    assert_eq!(chain_id_over_websocket(&admin).await, chain_id);

    // A mirror of it, through the admin port: bootstraps and follows.
    let mirror = Neve::start_with(
        &[
            "--mirror-from",
            &format!("http://{admin}"),
            "--floor",
            "0",
            "--shed-when-behind",
            "on",
        ],
        top,
    )
    .await;
    assert_eq!(
        mirror.health().unwrap()["genesis_hash"],
        stored["genesis_hash"]
    );
    let mirrored = RpcClient::new(&mirror.url).unwrap();
    assert_same_as_geth(&mirrored, &direct, top.saturating_sub(5)..=top).await;
    // Without --admin-listen, its one port serves everything.
    assert_eq!(mirror.get("/metrics").map(|(s, _)| s), Some(200));

    // The front end, over both: clients get JSON-RPC and WebSocket, and
    // none of the operator endpoints, not even from the mirror that serves
    // them on the port nginx sends to (each is asked more often than there
    // are mirrors, so round-robin reaches both).
    let node = geth.http_url().trim_start_matches("http://");
    let (_front, front) = shipped_front_end(&[&neve.addr, &mirror.addr], node);
    let through = RpcClient::new(&format!("http://{front}")).unwrap();
    for _ in 0..4 {
        assert_eq!(head(&through).await, top);
    }
    assert_eq!(
        answer(&through, "eth_chainId", json!([])).await["result"],
        chain_id.as_str()
    );
    assert_eq!(chain_id_over_websocket(&front).await, chain_id);
    for path in ["/health", "/health/ready", "/metrics", export.as_str()] {
        for _ in 0..4 {
            let (status, body) = http_get(&front, path).expect("nginx answers");
            assert_eq!(status, 404, "{path} through the front end: {body}");
            assert!(!body.contains("neve_"), "{path}: {body}");
        }
    }
}
