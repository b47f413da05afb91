//! Hardening, against live nodes: requests judged as geth judges them (the
//! same table sent to both), WebSocket sessions under the connection limit
//! and the idle timeout, `eth_getLogs` bombs held to their budget while
//! another client is served, and upstream bodies and `/blocks` streams that
//! never end or stall, and serving and ingest threads kept to the CPUs
//! they are given.

mod support;

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use neve_devnet::faults::{Fault, FaultProxy};
use neve_devnet::{GethDev, GethDevOptions};
use neve_upstream::RpcClient;
use serde_json::{Value, json};
use support::*;
use tokio_tungstenite::tungstenite::Message;

/// Status and body (parsed; `Null` when empty).
async fn post_raw(client: &RpcClient, body: &str) -> (u16, Value) {
    let (status, bytes) = client
        .post(body.to_string().into())
        .await
        .expect("answered");
    let value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).expect("a JSON answer")
    };
    (status.as_u16(), value)
}

#[tokio::test(flavor = "multi_thread")]
async fn neve_refuses_and_accepts_requests_as_geth_does() {
    let geth = GethDev::start(GethDevOptions {
        period: 0,
        ..Default::default()
    })
    .await
    .expect("geth dev");
    let neve = Neve::start(geth.http_url(), &["--floor", "0"], 0).await;
    let geth_client = RpcClient::new(geth.http_url()).unwrap();
    let neve_client = RpcClient::new(&neve.url).unwrap();
    let genesis = answer(&geth_client, "eth_getBlockByNumber", json!(["0x0", false])).await;
    let hash = genesis["result"]["hash"].as_str().unwrap().to_string();
    let upper_hash = format!("0X{}", &hash[2..]);
    let account = "0x0000000000000000000000000000000000000001";
    let requests = [
        // Envelopes geth refuses.
        r#"{"id":1,"method":"eth_chainId","params":[]}"#.to_string(),
        r#"{"jsonrpc":"1.0","id":1,"method":"eth_chainId","params":[]}"#.into(),
        r#"{"jsonrpc":2,"id":1,"method":"eth_chainId","params":[]}"#.into(),
        r#"{"jsonrpc":"2.0","id":{"a":1},"method":"eth_chainId","params":[]}"#.into(),
        r#"{"jsonrpc":"2.0","id":[1],"method":"eth_chainId","params":[]}"#.into(),
        r#"{"jsonrpc":"2.0","id":1,"params":[]}"#.into(),
        r#"{"jsonrpc":"2.0","id":1,"method":"","params":[]}"#.into(),
        // Parameter counts geth refuses.
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[1]}"#.into(),
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":["latest"]}"#.into(),
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["0x0"]}"#.into(),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByHash","params":["{hash}"]}}"#),
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["0x0",false,1]}"#
            .into(),
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_getLogs","params":[]}"#.into(),
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBlockReceipts","params":[]}"#.into(),
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_getTransactionByBlockNumberAndIndex","params":["0x0"]}"#.into(),
        r#"{"jsonrpc":"2.0","id":1,"method":"debug_getRawHeader","params":[]}"#.into(),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["{account}","latest",1]}}"#),
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":{}}"#.into(),
        // What geth accepts.
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#.into(),
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":null}"#.into(),
        r#"{"jsonrpc":"2.0","id":null,"method":"eth_chainId","params":[]}"#.into(),
        r#"{"jsonrpc":"2.0","id":"x","method":"eth_chainId","params":[]}"#.into(),
        r#"{"jsonrpc":"2.0","id":1.5,"method":"eth_chainId","params":[]}"#.into(),
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["0X0",false]}"#
            .into(),
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByHash","params":["{upper_hash}",true]}}"#),
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_getLogs","params":[{"fromBlock":"0X0","toBlock":"0X0"}]}"#.into(),
        // Notifications: no answer at all.
        r#"{"jsonrpc":"2.0","method":"eth_chainId","params":[]}"#.into(),
        r#"[{"jsonrpc":"2.0","method":"eth_chainId"}]"#.into(),
        r#"[{"jsonrpc":"2.0","method":"eth_chainId"},{"jsonrpc":"2.0","id":3,"method":"eth_chainId"}]"#.into(),
        r#"[{"jsonrpc":"2.0","id":1,"method":"eth_chainId"},{"id":2,"method":"eth_chainId"}]"#.into(),
    ];
    for request in &requests {
        let from_geth = post_raw(&geth_client, request).await;
        let from_neve = post_raw(&neve_client, request).await;
        assert_eq!(from_neve, from_geth, "{request}");
    }
}

/// Whether a new connection is turned away at the connection limit (neve
/// answers 503 without reading the request, and closes).
fn refused(addr: &str) -> bool {
    use std::io::Read;
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 503")
}

/// Opens a WebSocket session, asking again while neve answers 503: the
/// slot of a connection the test itself just closed (the start-up health
/// probe, a `refused` probe) is freed when neve's side of it ends, which on
/// a busy machine can come after the next connect.
async fn connect_when_a_slot_is_free(
    url: &str,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    let started = Instant::now();
    loop {
        match tokio_tungstenite::connect_async(url).await {
            Ok((ws, _)) => return ws,
            Err(tokio_tungstenite::tungstenite::Error::Http(response))
                if response.status() == 503 && started.elapsed() < Duration::from_secs(5) =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("a WebSocket session: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn websocket_sessions_hold_a_connection_slot_and_silent_ones_are_closed() {
    let geth = GethDev::start(GethDevOptions {
        period: 0,
        ..Default::default()
    })
    .await
    .expect("geth dev");
    let neve = Neve::start(
        geth.http_url(),
        &[
            "--floor",
            "0",
            "--max-connections",
            "3",
            "--idle-timeout",
            "2",
        ],
        0,
    )
    .await;
    let ws_url = neve.url.replacen("http://", "ws://", 1);
    let mut live = Vec::new();
    for _ in 0..2 {
        live.push(connect_when_a_slot_is_free(&ws_url).await);
    }
    // The third never reads, so never answers a ping.
    let mut silent = connect_when_a_slot_is_free(&ws_url).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(refused(&neve.addr), "three sessions hold all three slots");

    // The live sessions answer pings (they read); the silent one is closed
    // after the idle timeout and its slot freed.
    let readers: Vec<_> = live
        .into_iter()
        .map(|ws| {
            let (mut sink, mut stream) = ws.split();
            tokio::spawn(async move {
                let mut answers = Vec::new();
                let request = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;
                let started = Instant::now();
                while started.elapsed() < Duration::from_secs(8) {
                    if let Ok(Some(Ok(message))) =
                        tokio::time::timeout(Duration::from_millis(500), stream.next()).await
                        && let Message::Text(text) = message
                    {
                        answers.push(text.to_string());
                    }
                }
                sink.send(Message::Text(request.into())).await.unwrap();
                let reply = tokio::time::timeout(Duration::from_secs(5), stream.next())
                    .await
                    .expect("an answer after 8 s")
                    .expect("still open")
                    .expect("a message");
                (answers, reply.into_text().unwrap().to_string())
            })
        })
        .collect();
    let freed = Instant::now();
    loop {
        if !refused(&neve.addr) {
            break;
        }
        assert!(
            freed.elapsed() < Duration::from_secs(15),
            "the silent session kept its slot"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match silent.next().await {
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the silent session was closed by neve");
    for reader in readers {
        let (_, reply) = reader.await.unwrap();
        assert!(reply.contains("\"result\":\"0x"), "{reply}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_never_reads_its_answers_loses_its_connection() {
    let (geth, top) = dev_chain_of(40).await;
    let neve = Neve::start(
        geth.http_url(),
        &["--max-connections", "1", "--idle-timeout", "2"],
        top,
    )
    .await;
    // Pipelined exports of the whole tail until neither the answers nor
    // the requests fit the sockets' buffers any more; the socket stays
    // open and is never read.
    let addr = neve.addr.clone();
    let (stream, sent) = tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let request = format!("GET /blocks?from=0&to={top} HTTP/1.1\r\nhost: neve\r\n\r\n");
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream
            .set_write_timeout(Some(Duration::from_secs(1)))
            .unwrap();
        let mut sent = 0;
        while sent < 1_000_000 && stream.write_all(request.as_bytes()).is_ok() {
            sent += 1;
        }
        (stream, sent)
    })
    .await
    .unwrap();
    assert!(
        sent < 1_000_000,
        "neve stopped taking requests it cannot answer"
    );
    let stuck = Instant::now();
    // Its slot is freed once neve has waited the idle timeout for it to read.
    while refused(&neve.addr) {
        assert!(
            stuck.elapsed() < Duration::from_secs(15),
            "a client that never reads kept its slot"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The probe's own connection may hold the one slot for a moment.
    let client = RpcClient::new(&neve.url).unwrap();
    let call = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;
    let served = Instant::now();
    loop {
        if let Ok((status, _)) = client.post(call.into()).await {
            assert_eq!(status, 200, "others are served");
            break;
        }
        assert!(served.elapsed() < Duration::from_secs(10), "never served");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(stream);
}

/// p99 of `eth_getBlockByNumber` over random heights, one at a time.
async fn block_p99(client: &RpcClient, head: u64, requests: usize) -> Duration {
    let mut times = Vec::with_capacity(requests);
    for i in 0..requests {
        let height = (i as u64 * 7919) % (head + 1);
        let started = Instant::now();
        let _ = client
            .call_raw(
                "eth_getBlockByNumber",
                json!([format!("0x{height:x}"), false]),
            )
            .await
            .expect("a block");
        times.push(started.elapsed());
    }
    times.sort();
    times[times.len() * 99 / 100]
}

#[tokio::test(flavor = "multi_thread")]
async fn log_query_bombs_spend_their_budget_while_other_clients_are_served() {
    let (geth, neve) = neve_mirroring_a_chain_with_logs().await;
    let head = support::head(&RpcClient::new(geth.http_url()).unwrap()).await;
    let client = RpcClient::new(&neve.url).unwrap();
    let idle_p99 = block_p99(&client, head, 400).await;
    let rss_before = neve.rss_anon_bytes();

    let bomb = format!(
        "[{}]",
        vec![r#"{"jsonrpc":"2.0","id":1,"method":"eth_getLogs","params":[{"fromBlock":"0x0","toBlock":"latest"}]}"#; 1000]
            .join(",")
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let bombers: Vec<_> = (0..3)
        .map(|_| {
            let (client, bomb, stop) = (client.clone(), bomb.clone(), stop.clone());
            tokio::spawn(async move {
                let (mut batches, mut refused) = (0, 0);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let (_, answer) = client.post(bomb.clone().into()).await.expect("answered");
                    let answer: Value = serde_json::from_slice(&answer).expect("JSON");
                    batches += 1;
                    refused += answer
                        .as_array()
                        .expect("a batch answer")
                        .iter()
                        .filter(|a| {
                            // The request's log budget, or the batch's
                            // answer bytes (--max-batch-answer-bytes).
                            let message = a["error"]["message"].as_str().unwrap_or_default();
                            (a["error"]["code"] == -32005 && message.contains("budget"))
                                || (a["error"]["code"] == -32003 && message == "response too large")
                        })
                        .count();
                }
                (batches, refused)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let loaded_p99 = block_p99(&client, head, 400).await;
    let rss_during = neve.rss_anon_bytes();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut refused = 0;
    for bomber in bombers {
        let (batches, r) = bomber.await.unwrap();
        assert!(batches > 0);
        refused += r;
    }
    eprintln!(
        "block p99 idle {idle_p99:?}, under log bombs {loaded_p99:?}; anonymous RSS {} → {} MiB; {refused} queries over budget",
        rss_before >> 20,
        rss_during >> 20
    );
    assert!(refused > 0, "whole-range bombs exceed the budget");
    // Before the budget and off-worker scans, one such batch held a worker
    // for 7.7 s and anonymous memory reached 360 MiB. This guards against
    // that kind of stall only: on two shared cores, three bombers and this
    // test's own parsing of their answers put p99 at 104 ms in one CI run
    // (idle: 3 ms); what the bombs cost a client is measured by
    // scripts/abuse.sh (HARDENING.md), not here.
    assert!(
        loaded_p99 < Duration::from_millis(1000),
        "p99 {loaded_p99:?} under log bombs"
    );
    assert!(
        rss_during < 200 << 20,
        "anonymous RSS {} MiB",
        rss_during >> 20
    );
}

/// Regression (hardening: probing): a probe that failed once left every
/// later block stored without its raw data, for good.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_probe_is_retried_and_blocks_keep_their_raw_data() {
    let (geth, head) = chain_with_logs().await;
    let proxy = FaultProxy::start(geth.http_url(), vec![Fault::Pass]).await;
    proxy
        .control()
        .set_fail_matching(Some("debug_getRawHeader"));
    let neve = Neve::behind(&proxy, &[]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.control().set_fail_matching(None);
    neve.wait_for_height(head, Duration::from_secs(60)).await;
    assert_eq!(neve.health().unwrap()["upstream"]["raw_data"], true);
    let geth_client = RpcClient::new(geth.http_url()).unwrap();
    let neve_client = RpcClient::new(&neve.url).unwrap();
    for height in [1, head / 2, head] {
        for method in ["debug_getRawBlock", "debug_getRawReceipts"] {
            let params = json!([format!("0x{height:x}")]);
            assert_eq!(
                answer(&neve_client, method, params.clone()).await,
                answer(&geth_client, method, params).await,
                "{method} at {height}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endless_upstream_body_is_cut_off_and_following_resumes() {
    let (geth, head) = chain_with_logs().await;
    let proxy = FaultProxy::start(geth.http_url(), vec![Fault::Pass]).await;
    let neve = Neve::start(
        proxy.url(),
        &[
            "--floor",
            "0",
            "--ws-url",
            "none",
            "--upstream-max-body-bytes",
            "1048576",
        ],
        head,
    )
    .await;
    proxy.control().set_override(Some(Fault::Endless));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let health = neve.health().unwrap();
        if health["upstream"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("over 1048576 bytes"))
        {
            break;
        }
        assert!(Instant::now() < deadline, "no body cap: {health}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        neve.rss_anon_bytes() < 128 << 20,
        "anonymous RSS {} MiB",
        neve.rss_anon_bytes() >> 20
    );
    let mut config = neve_load::LoadConfig::new(geth.http_url(), Duration::from_secs(2));
    config.accounts = 2;
    config.tps = Some(50);
    let report = neve_load::run(config, |_| {}).await.expect("more load");
    proxy.control().set_override(None);
    neve.wait_for_height(report.last_block, Duration::from_secs(60))
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mirror_bootstrap_survives_a_stalled_and_an_endless_blocks_stream() {
    let geth = GethDev::start(GethDevOptions {
        period: 0,
        ..Default::default()
    })
    .await
    .expect("geth dev");
    let mut head = 0;
    for round in 0..10 {
        let mut config = neve_load::LoadConfig::new(geth.http_url(), Duration::from_secs(4));
        config.accounts = 16;
        config.tps = Some(700);
        config.seed = 300 + round;
        head = neve_load::run(config, |_| {})
            .await
            .expect("load")
            .last_block;
        if head >= 150 {
            break;
        }
    }
    assert!(head >= 150, "a tail worth bootstrapping: {head}");
    let a = Neve::start(geth.http_url(), &["--floor", "0"], head).await;
    let proxy = FaultProxy::start(&a.url, vec![Fault::Pass]).await;
    proxy.control().set_stream_fault(Some(Fault::Stall));
    let b = Neve::mirroring(&proxy, &["--upstream-timeout-ms", "2000"]);
    let wait_for_log = |needle: &'static str| {
        let b = &b;
        async move {
            let deadline = Instant::now() + Duration::from_secs(40);
            while !b.log().contains(needle) {
                assert!(Instant::now() < deadline, "no {needle:?} in:\n{}", b.log());
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    wait_for_log("/blocks stalled").await;
    proxy.control().set_stream_fault(Some(Fault::Endless));
    wait_for_log("/blocks line longer than").await;
    assert!(
        b.rss_anon_bytes() < 192 << 20,
        "anonymous RSS {} MiB",
        b.rss_anon_bytes() >> 20
    );
    proxy.control().set_stream_fault(None);
    b.wait_for_height(head, Duration::from_secs(120)).await;
    let geth_client = RpcClient::new(geth.http_url()).unwrap();
    let b_client = RpcClient::new(&b.url).unwrap();
    for height in [0, head / 2, head] {
        let params = json!([format!("0x{height:x}"), true]);
        assert_eq!(
            answer(&b_client, "eth_getBlockByNumber", params.clone()).await,
            answer(&geth_client, "eth_getBlockByNumber", params).await
        );
    }
}

/// A small tmpfs mounted for one test, unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(bytes: u64) -> SmallDisk {
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("mount runs");
        assert!(
            status.success(),
            "mounting a tmpfs needs root (CI runs as root): {status}"
        );
        SmallDisk { dir }
    }

    fn resize(&self, bytes: u64) {
        let status = std::process::Command::new("mount")
            .args(["-o", &format!("remount,size={bytes}")])
            .arg(self.dir.path())
            .status()
            .expect("mount runs");
        assert!(status.success(), "remount: {status}");
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// A full disk: neve keeps serving what it stored, says why it stopped
/// storing, and resumes when space returns, with nothing damaged.
#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_stops_storing_not_serving_and_storing_resumes_when_space_returns() {
    let (geth, head) = chain_with_logs().await;
    let disk = SmallDisk::mount(1 << 20);
    let store = disk.dir.path().join("store");
    let neve = Neve::spawn_in(
        Some(&store),
        &[
            "--upstream",
            geth.http_url(),
            "--floor",
            "0",
            "--ws-url",
            "none",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let health = loop {
        if let Some(health) = neve.health()
            && health["storage"]["write_error"].is_string()
        {
            break health;
        }
        assert!(
            Instant::now() < deadline,
            "the disk never filled:\n{}",
            neve.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let error = health["storage"]["write_error"].as_str().unwrap();
    assert!(error.contains("No space left"), "{error}");
    assert_eq!(health["status"], "degraded");
    let stored = health["blocks"]["max_contiguous_height"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        stored < head,
        "1 MiB holds part of the chain: {stored} of {head}"
    );

    // What is stored is still served, and is geth's.
    let geth_client = RpcClient::new(geth.http_url()).unwrap();
    let neve_client = RpcClient::new(&neve.url).unwrap();
    for height in 0..=stored {
        let params = json!([format!("0x{height:x}"), true]);
        assert_eq!(
            answer(&neve_client, "eth_getBlockByNumber", params.clone()).await,
            answer(&geth_client, "eth_getBlockByNumber", params).await
        );
    }
    // Space returns: storing resumes where it stopped.
    disk.resize(256 << 20);
    neve.wait_for_height(head, Duration::from_secs(60)).await;
    let health = neve.health().unwrap();
    assert!(health["storage"]["write_error"].is_null(), "{health}");
    for height in 0..=head {
        let params = json!([format!("0x{height:x}"), true]);
        assert_eq!(
            answer(&neve_client, "eth_getBlockByNumber", params.clone()).await,
            answer(&geth_client, "eth_getBlockByNumber", params).await,
            "height {height}"
        );
    }
    drop(neve);
    // Reopened, the store has every block: nothing stored was damaged.
    let reopened = Neve::spawn_in(
        Some(&store),
        &["--upstream", geth.http_url(), "--ws-url", "none"],
    );
    reopened
        .wait_for_height(head, Duration::from_secs(30))
        .await;
    let reopened_client = RpcClient::new(&reopened.url).unwrap();
    let params = json!(["0x1", true]);
    assert_eq!(
        answer(&reopened_client, "eth_getBlockByNumber", params.clone()).await,
        answer(&geth_client, "eth_getBlockByNumber", params).await
    );
}

/// A reorg while neve is still backfilling (geth rewound below what neve
/// stored, then mining another chain): neve rolls back and ends with
/// exactly geth's chain.
#[tokio::test(flavor = "multi_thread")]
async fn a_reorg_during_backfill_ends_with_exactly_the_nodes_chain() {
    let (geth, head) = chain_with_logs().await;
    // Slow answers keep the backfill going while the chain changes under it.
    let (proxy, neve) = slow_backfill(
        geth.http_url(),
        Duration::from_millis(150),
        &["--fetch-concurrency", "2"],
    )
    .await;
    neve.wait_for_height(head / 4, Duration::from_secs(120))
        .await;
    let stored = neve.health().unwrap()["blocks"]["max_contiguous_height"]
        .as_u64()
        .unwrap();
    assert!(stored < head, "still backfilling: {stored} of {head}");
    // A few blocks below what neve has: well within the deepest reorg it
    // follows (64), however far the backfill gets meanwhile.
    let rewind_to = stored.saturating_sub(3);
    let geth_client = RpcClient::new(geth.http_url()).unwrap();
    let _: Value = geth_client
        .call("debug_setHead", [format!("0x{rewind_to:x}")])
        .await
        .unwrap();
    let mut config = neve_load::LoadConfig::new(geth.http_url(), Duration::from_secs(3));
    config.accounts = 3;
    config.tps = Some(60);
    config.seed = 77;
    let report = neve_load::run(config, |_| {}).await.expect("the new chain");
    proxy.control().set_override(Some(Fault::Pass));
    let new_head = support::head(&geth_client).await;
    assert!(new_head >= report.last_block);
    let neve_client = RpcClient::new(&neve.url).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let theirs = answer(
            &geth_client,
            "eth_getBlockByNumber",
            json!([format!("0x{new_head:x}"), false]),
        )
        .await;
        let ours = answer(
            &neve_client,
            "eth_getBlockByNumber",
            json!([format!("0x{new_head:x}"), false]),
        )
        .await;
        if ours == theirs {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "neve did not converge:\n{}",
            neve.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let metrics = neve.get("/metrics").unwrap().1;
    assert!(
        metrics.contains("neve_ingest_reorgs_total ")
            && !metrics.contains("neve_ingest_reorgs_total 0\n"),
        "the reorg was followed"
    );
    for height in 0..=new_head {
        for (method, params) in [
            (
                "eth_getBlockByNumber",
                json!([format!("0x{height:x}"), true]),
            ),
            ("eth_getBlockReceipts", json!([format!("0x{height:x}")])),
        ] {
            assert_eq!(
                answer(&neve_client, method, params.clone()).await,
                answer(&geth_client, method, params.clone()).await,
                "{method} {params}"
            );
        }
    }
}

/// A neve catching up, run as behind a front end (`--shed-when-behind on`),
/// answers JSON-RPC 503 with -32001 and `Retry-After`, unread, so nginx
/// tries the next mirror; health and metrics still answer; caught up, it
/// serves.
#[tokio::test(flavor = "multi_thread")]
async fn a_neve_catching_up_sheds_reads_when_asked_and_serves_once_caught_up() {
    let (geth, top) = dev_chain_of(200).await;
    let (_proxy, neve) = slow_backfill(
        geth.http_url(),
        Duration::from_millis(20),
        &["--fetch-concurrency", "1", "--shed-when-behind", "on"],
    )
    .await;
    let neve_client = RpcClient::new(&neve.url).unwrap();
    let call = r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["0x0",false]}"#;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    // The client library takes a 503 for an error (it would retry later).
    let (retry_after, body) = loop {
        if let Err(neve_upstream::RpcError::Http {
            status: 503,
            retry_after,
            snippet,
            ..
        }) = neve_client.post(call.into()).await
        {
            break (retry_after, snippet);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never shed while catching up:\n{}",
            neve.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(retry_after, Some(1));
    assert!(body.contains("-32001"), "{body}");
    assert!(body.contains("blocks behind"), "{body}");
    assert_eq!(neve.get("/health").map(|(s, _)| s), Some(200));
    assert_eq!(neve.get("/health/ready").map(|(s, _)| s), Some(503));
    let (_, metrics) = neve.get("/metrics").unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("neve_http_shed_total ") && !l.ends_with(" 0")),
        "counted"
    );
    neve.wait_for_height(top, Duration::from_secs(120)).await;
    let (status, _) = neve_client.post(call.into()).await.unwrap();
    assert_eq!(status, 200, "caught up, it serves");
}

/// Each thread of process `pid` by name, with the CPUs it may run on.
fn threads_and_cpus(pid: u32) -> Vec<(String, String)> {
    let mut threads = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let task = task.unwrap().path();
        let (Ok(name), Ok(status)) = (
            std::fs::read_to_string(task.join("comm")),
            std::fs::read_to_string(task.join("status")),
        ) else {
            continue; // the thread ended meanwhile
        };
        let cpus = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim()
            .to_string();
        threads.push((name.trim().to_string(), cpus));
    }
    threads
}

#[tokio::test(flavor = "multi_thread")]
async fn serving_and_ingest_threads_keep_to_the_cpus_they_are_given() {
    let (geth, top) = dev_chain_of(40).await;
    let cpus = core_affinity_list();
    // Two CPUs of this machine, apart when it has two.
    let (serve, ingest) = (cpus[0], cpus[cpus.len() - 1]);
    let (serve, ingest) = (serve.to_string(), ingest.to_string());
    let neve = Neve::start(
        geth.http_url(),
        &["--serve-cpus", &serve, "--ingest-cpus", &ingest],
        top,
    )
    .await;
    let client = RpcClient::new(&neve.url).unwrap();
    assert_same_as_geth(&client, &RpcClient::new(geth.http_url()).unwrap(), 0..=top).await;
    let threads = threads_and_cpus(neve.pid());
    let on = |prefix: &str| -> Vec<&String> {
        threads
            .iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .map(|(_, cpus)| cpus)
            .collect()
    };
    let workers = on("tokio-rt-worker");
    assert_eq!(workers.len(), 1, "one worker per serving CPU: {threads:?}");
    assert!(workers.iter().all(|c| **c == serve), "{threads:?}");
    let ingest_threads = on("neve-ingest");
    assert!(
        ingest_threads.len() >= 2,
        "ingest's runtime and CPU pool: {threads:?}"
    );
    assert!(ingest_threads.iter().all(|c| **c == ingest), "{threads:?}");
    // A new block's work at the tip runs beside serving, at its priority.
    let tip_threads = on("neve-tip");
    assert_eq!(tip_threads.len(), 2, "the tip's threads: {threads:?}");
    assert!(tip_threads.iter().all(|c| **c == serve), "{threads:?}");

    // A list with no CPU this process may use is refused at start.
    let output = run_neve(&[
        "serve",
        "--upstream",
        geth.http_url(),
        "--ingest-cpus",
        "1023",
    ])
    .await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--ingest-cpus 1023: no CPU of the list"),
        "{stderr}"
    );
}

/// The CPUs this process may run on.
fn core_affinity_list() -> Vec<usize> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim();
    list.split(',')
        .flat_map(|part| match part.split_once('-') {
            Some((a, b)) => (a.parse().unwrap()..=b.parse().unwrap()).collect::<Vec<usize>>(),
            None => vec![part.parse().unwrap()],
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn newblocks_notifications_are_charged_to_their_client() {
    let (geth, top) = dev_chain_of(5).await;
    let neve = Neve::start(
        geth.http_url(),
        &["--ws-url", geth.ws_url(), "--client-rate", "20"],
        top,
    )
    .await;
    let ws_url = neve.url.replacen("http://", "ws://", 1);
    let (mut ws, _) = tokio_tungstenite::connect_async(&ws_url).await.unwrap();
    // 64 subscriptions to whole blocks on one socket: every block is 64
    // copies, each charged to this address.
    for id in 0..64 {
        let subscribe = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"eth_subscribe","params":["newBlocks"]}}"#
        );
        ws.send(Message::Text(subscribe.into())).await.unwrap();
        let _ = ws.next().await.unwrap().unwrap();
    }
    let client = RpcClient::new(&neve.url).unwrap();
    let call = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;
    // The subscriptions' own cost is paid off first: a plain call goes
    // through again.
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.post(call.into()).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "never out of the subscriptions' debt"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for _ in 0..10 {
        assert!(
            client.post(call.into()).await.is_ok(),
            "a paced call is refused"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Blocks keep coming while the socket reads its notifications; the
    // address's plain calls are soon refused for the debt.
    let mut load = neve_load::LoadConfig::new(geth.http_url(), Duration::from_secs(6));
    load.accounts = 2;
    load.tps = Some(100);
    let traffic = tokio::spawn(neve_load::run(load, |_| {}));
    let reader = tokio::spawn(async move {
        let mut bytes = 0usize;
        while let Ok(Some(Ok(message))) =
            tokio::time::timeout(Duration::from_secs(3), ws.next()).await
        {
            bytes += message.len();
        }
        bytes
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let refused = loop {
        match client.post(call.into()).await {
            Err(neve_upstream::RpcError::Http { status: 429, .. }) => break true,
            _ if Instant::now() > deadline => break false,
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    let _ = traffic.await;
    let received = reader.await.unwrap();
    assert!(
        received > 64 * 1000,
        "notifications received: {received} bytes"
    );
    assert!(refused, "64 copies of every block were not charged");
}
