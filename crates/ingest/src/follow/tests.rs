use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use neve_store::{Durability, Identity, Store, StoreConfig};
use neve_upstream::RpcClient;

use super::*;
use crate::status::unix_ms;
use crate::testing::{ok, response, upstream};

/// A follower of `url` over a new store in `dir`, opened as after a
/// start that could not reach the upstream: never heard from yet. Its
/// floor is block 1, so a head of 0 leaves nothing to fetch.
async fn follower_of(url: &str, dir: &Path) -> Follower {
    let identity = Identity {
        chain_id: 1337,
        genesis_hash: [7; 32],
    };
    let store = StoreConfig {
        durability: Durability::OsBuffered,
        ..StoreConfig::default()
    };
    drop(Store::open(dir, identity, store.clone()).unwrap());
    let config = IngestConfig {
        floor: StartHeight::Height(1),
        ..IngestConfig::default()
    };
    let client = RpcClient::new(url).unwrap();
    Follower::offline(client, dir, store, config, "not reached yet".into())
        .await
        .unwrap()
        .expect("a store is there")
}

/// Issue 42 (4): a provider over quota answers `eth_blockNumber` with
/// 200 and a JSON-RPC error, a proxy with its page; neither, nor a
/// body cut short nor a result of another shape, is contact, so the
/// silence bound runs on and `latest` turns 421. A head is.
#[tokio::test]
async fn answers_with_200_that_are_not_a_head_are_not_contact() {
    let not_a_head = [
        r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32005,"message":"daily request limit reached"}}"#,
        "<html><body><h1>Over quota</h1></body></html>",
        r#"{"jsonrpc":"2.0","id":0,"result":"0x1"#,
        r#"{"jsonrpc":"2.0","id":0,"result":null}"#,
        r#"{"jsonrpc":"2.0","id":0,"result":{"number":"0x1"}}"#,
        r#"{"jsonrpc":"2.0","id":0,"result":"latest"}"#,
    ];
    for body in not_a_head {
        let (url, requests) = upstream(move |_| ok(body)).await;
        let dir = tempfile::tempdir().unwrap();
        let mut follower = follower_of(&url, dir.path()).await;
        let status = follower.status();
        assert!(follower.sync_once().await.is_err(), "{body}");
        assert!(requests.load(Ordering::SeqCst) > 0);
        assert_eq!(
            status.last_contact_unix_ms.load(Ordering::Relaxed),
            0,
            "{body} counted as contact"
        );
        assert!(!status.connected.load(Ordering::Relaxed), "{body}");
    }
    let (url, _) = upstream(|body| {
        if body.contains("eth_blockNumber") {
            ok(r#"{"jsonrpc":"2.0","id":0,"result":"0x0"}"#)
        } else {
            ok(r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32601,"message":"no"}}"#)
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut follower = follower_of(&url, dir.path()).await;
    follower.sync_once().await.unwrap();
    assert!(
        follower
            .status()
            .last_contact_unix_ms
            .load(Ordering::Relaxed)
            > 0
    );
}

/// Issue 42 (5): a 429 with `Retry-After: 86400` pauses every request
/// for the 5 minute clamp; the follower asks for the head past the
/// pause every [`PAUSED_PROBE_EVERY`], so a provider that recovers is
/// followed again within a couple of seconds, not minutes. Until then
/// only those probes reach it.
#[tokio::test]
async fn a_paused_upstream_is_probed_and_followed_again_soon_after_it_recovers() {
    let recovered = Arc::new(AtomicBool::new(false));
    let served = recovered.clone();
    let (url, requests) = upstream(move |body| {
        if !served.load(Ordering::SeqCst) {
            response(
                "429 Too Many Requests",
                &["retry-after: 86400"],
                r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32005,"message":"daily request limit reached"}}"#,
            )
        } else if body.contains("eth_blockNumber") {
            ok(r#"{"jsonrpc":"2.0","id":0,"result":"0x0"}"#)
        } else {
            ok(r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32601,"message":"no"}}"#)
        }
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let follower = follower_of(&url, dir.path()).await;
    let (status, pacing) = (follower.status(), follower.client().pacing().clone());
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(follower.run(
        Arc::new(tokio::sync::Notify::new()),
        Duration::from_millis(100),
        shutdown,
    ));
    until("paused", Duration::from_secs(5), || pacing.is_paused()).await;
    assert!(pacing.paused_for().unwrap() > Duration::from_secs(290));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    // The refusal, then a probe every 1 to 1.25 s: at most three more.
    let sent = requests.load(Ordering::SeqCst);
    assert!((2..=4).contains(&sent), "{sent} requests while paused");
    assert_eq!(status.last_contact_unix_ms.load(Ordering::Relaxed), 0);
    recovered.store(true, Ordering::SeqCst);
    let since = unix_ms();
    let took = until("followed again", Duration::from_secs(3), || {
        !pacing.is_paused() && status.last_contact_unix_ms.load(Ordering::Relaxed) >= since
    })
    .await;
    assert!(took <= *PAUSED_PROBE_EVERY.start() * 2, "{took:?}");
    // And steps follow again: the head is asked at the poll's pace.
    let after = requests.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(requests.load(Ordering::SeqCst) >= after + 3);
    stop.send(true).unwrap();
    running.await.unwrap();
}

/// Waits until `done`, failing past `within`; how long it took.
async fn until(what: &str, within: Duration, done: impl Fn() -> bool) -> Duration {
    let started = std::time::Instant::now();
    while !done() {
        assert!(started.elapsed() < within, "not {what} within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    started.elapsed()
}

#[test]
fn the_probe_period_is_a_block_interval_within_its_bounds() {
    assert_eq!(probe_period(None), Duration::from_secs(1));
    assert_eq!(
        probe_period(Some(Duration::from_millis(250))),
        Duration::from_secs(1)
    );
    assert_eq!(
        probe_period(Some(Duration::from_secs(2))),
        Duration::from_secs(2)
    );
    assert_eq!(
        probe_period(Some(Duration::from_secs(12))),
        Duration::from_secs(5)
    );
}
