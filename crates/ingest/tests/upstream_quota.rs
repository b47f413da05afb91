//! Issue 42: a provider over quota, between neve's ingest and a real geth
//! making a block a second. It first answers every request with 200 and a
//! JSON-RPC error (-32005), then with 429 and `Retry-After: 86400`, then
//! serves again. Ingest must stop claiming to follow within three block
//! intervals of the last answer that served (so `latest` is 421 and
//! readiness down), send the paused provider only a probe a second, and
//! follow again, the stored tip at geth's head, within a few seconds of the
//! recovery. (`IngestView::following` is what serving's `ChainView`
//! answers `latest` and readiness from, line for line.)

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use neve_devnet::{GethDev, GethDevOptions};
use neve_ingest::{IngestConfig, IngestView, StartHeight, supervise};
use neve_store::{Durability, StoreConfig};
use neve_upstream::{RedactedUrl, RpcClient, parse_quantity};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the proxy answers.
const SERVE: u8 = 0;
const QUOTA_ERROR: u8 = 1;
const RETRY_TOMORROW: u8 = 2;

/// A proxy in front of `node`: forwards each JSON-RPC request while `mode`
/// is [`SERVE`], else answers as a provider over quota does. Counts the
/// requests it read. One request a connection (`connection: close`).
async fn quota_proxy(node: &str, mode: Arc<AtomicU8>) -> (String, Arc<AtomicU64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let node = RpcClient::new(node).unwrap();
    let requests = Arc::new(AtomicU64::new(0));
    let seen = requests.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let (node, mode, seen) = (node.clone(), mode.clone(), seen.clone());
            tokio::spawn(async move {
                let Some(body) = read_request(&mut socket).await else {
                    return;
                };
                seen.fetch_add(1, Ordering::SeqCst);
                let (status, extra, body) = match mode.load(Ordering::SeqCst) {
                    SERVE => match node.post(Bytes::from(body)).await {
                        Ok((status, body)) => (status.to_string(), "", body.to_vec()),
                        Err(_) => ("502 Bad Gateway".into(), "", Vec::new()),
                    },
                    QUOTA_ERROR => (
                        "200 OK".into(),
                        "",
                        br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32005,"message":"daily request limit reached"}}"#.to_vec(),
                    ),
                    _ => (
                        "429 Too Many Requests".into(),
                        "retry-after: 86400\r\n",
                        b"daily request limit reached".to_vec(),
                    ),
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\n{extra}content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(&body).await;
            });
        }
    });
    (url, requests)
}

/// The body of the request on `socket`.
async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    let mut read = Vec::new();
    let mut buffer = [0u8; 16 << 10];
    loop {
        let n = socket.read(&mut buffer).await.ok()?;
        if n == 0 {
            return None;
        }
        read.extend_from_slice(&buffer[..n]);
        let Some(end) = read.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let length = String::from_utf8_lossy(&read[..end])
            .lines()
            .find_map(|line| {
                let line = line.to_ascii_lowercase();
                line.strip_prefix("content-length:")
                    .and_then(|v| v.trim().parse::<usize>().ok())
            })
            .unwrap_or(0);
        if read.len() >= end + 4 + length {
            return Some(read[end + 4..end + 4 + length].to_vec());
        }
    }
}

async fn head_of(node: &RpcClient) -> u64 {
    let head: String = node.call("eth_blockNumber", ()).await.unwrap();
    parse_quantity(&head).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_over_quota_is_not_followed_within_three_blocks_and_is_again_within_seconds() {
    let geth = GethDev::start(GethDevOptions {
        period: 1,
        ..Default::default()
    })
    .await
    .expect("geth dev");
    let node = RpcClient::new(geth.http_url()).unwrap();
    let mode = Arc::new(AtomicU8::new(SERVE));
    let (url, requests) = quota_proxy(geth.http_url(), mode.clone()).await;
    let client = RpcClient::new(&url).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = StoreConfig {
        durability: Durability::OsBuffered,
        ..StoreConfig::default()
    };
    let follower = supervise::start(
        client.clone(),
        dir.path().to_path_buf(),
        store,
        IngestConfig {
            // Not genesis: its time is the genesis file's, not the pace's.
            floor: StartHeight::Height(1),
            ..IngestConfig::default()
        },
    )
    .await
    .expect("follower");
    let reader = follower.reader();
    let view = IngestView::new(follower.status(), RedactedUrl::of(&url), client.clone());
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(supervise::supervise(
        follower,
        Arc::new(tokio::sync::Notify::new()),
        Duration::from_millis(100),
        shutdown,
    ));
    let stored = || reader.stats().max_contiguous_height.unwrap_or(0);
    // Followed: the tip at geth's head, and the chain's pace learnt.
    let started = Instant::now();
    loop {
        let head = head_of(&node).await;
        if view.following() && stored() >= head && head >= 5 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "never caught up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Three intervals of about a second (geth may seal one late).
    let bound = view.silence_bound();
    assert!(
        bound >= Duration::from_secs(3) && bound < Duration::from_millis(3_500),
        "{bound:?}"
    );

    // Over quota, answered with 200: not contact, so not followed within
    // three intervals (plus a poll and the sampling's slack).
    mode.store(QUOTA_ERROR, Ordering::SeqCst);
    let quota = Instant::now();
    while view.following() {
        assert!(
            quota.elapsed() < bound + Duration::from_millis(600),
            "still following after {:?} of errors answered with 200",
            quota.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let frozen = stored();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!view.following());

    // A day's Retry-After: still not followed, and only probes sent, about
    // one a second.
    mode.store(RETRY_TOMORROW, Ordering::SeqCst);
    // The follower's next step (its backoff after errors is 5 s at most)
    // meets the 429.
    let refused = Instant::now();
    while !client.pacing().is_paused() {
        assert!(refused.elapsed() < Duration::from_secs(8), "never refused");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let paused_from = requests.load(Ordering::SeqCst);
    let pause = Instant::now();
    while pause.elapsed() < Duration::from_secs(8) {
        assert!(!view.following());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let sent = requests.load(Ordering::SeqCst) - paused_from;
    assert!((5..=10).contains(&sent), "{sent} requests in 8 s of pause");
    assert!(client.pacing().is_paused());
    assert_eq!(stored(), frozen);

    // Served again: followed, at geth's head, within a few seconds.
    mode.store(SERVE, Ordering::SeqCst);
    let recovery = Instant::now();
    let head_then = head_of(&node).await;
    loop {
        if view.following() && stored() >= head_then && !client.pacing().is_paused() {
            break;
        }
        assert!(
            recovery.elapsed() < Duration::from_secs(4),
            "not following {:?} after the provider recovered (stored {}, head {head_then})",
            recovery.elapsed(),
            stored()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "followed again {:?} after recovery, {} blocks caught up",
        recovery.elapsed(),
        head_then - frozen
    );
    stop.send(true).unwrap();
    running.await.unwrap();
}
