//! SIGTERM drains: a request in flight is answered in full, no new
//! connection is taken, neve exits 0 within the drain timeout, and the
//! store it closed reopens with every block.

mod support;

use std::time::{Duration, Instant};

use neve_devnet::faults::{Fault, FaultProxy};
use neve_upstream::{RpcClient, quantity};
use serde_json::json;
use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_finishes_what_is_in_flight_and_closes_the_store_cleanly() {
    let (geth, head) = chain_with_logs().await;
    let proxy = FaultProxy::start(geth.http_url(), vec![Fault::Pass]).await;
    let mut neve = Neve::start(
        proxy.url(),
        &[
            "--floor",
            "0",
            "--ws-url",
            "none",
            "--state-fetch-timeout-ms",
            "5000",
        ],
        head,
    )
    .await;
    // A state read whose proof comes through a slow upstream is still
    // being answered when SIGTERM arrives.
    proxy
        .control()
        .set_override(Some(Fault::Slow(Duration::from_millis(1500))));
    let params = json!([format!("0x{}", "11".repeat(20)), quantity(head)]);
    let url = neve.url.clone();
    let asked = params.clone();
    let in_flight = tokio::spawn(async move {
        answer(&RpcClient::new(&url).unwrap(), "eth_getBalance", asked).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let signalled = Instant::now();
    neve.terminate();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        std::net::TcpStream::connect(&neve.addr).is_err(),
        "no new connection is taken while draining"
    );
    let answered = in_flight.await.unwrap();
    let geth_client = RpcClient::new(geth.http_url()).unwrap();
    assert_eq!(
        answered,
        answer(&geth_client, "eth_getBalance", params).await,
        "the request in flight was answered in full"
    );
    let status = tokio::task::block_in_place(|| neve.wait_exit(Duration::from_secs(15)))
        .unwrap_or_else(|| panic!("neve did not exit:\n{}", neve.log()));
    assert!(status.success(), "{status}:\n{}", neve.log());
    assert!(
        signalled.elapsed() < Duration::from_secs(12),
        "within the drain timeout"
    );
    let log = neve.log();
    assert!(log.contains("draining") && log.contains("drained"), "{log}");

    // The store it closed opens at once with every block.
    let reopened = Neve::spawn_in(
        Some(&neve.store),
        &["--upstream", geth.http_url(), "--ws-url", "none"],
    );
    reopened
        .wait_for_height(head, Duration::from_secs(30))
        .await;
    let client = RpcClient::new(&reopened.url).unwrap();
    assert_same_as_geth(&client, &geth_client, 0..=head).await;
}

/// The drain is bounded: a request whose body never arrives (it would hold
/// its connection for the body timeout, 30 s) does not keep neve from
/// exiting once `--drain-timeout` has passed.
#[tokio::test(flavor = "multi_thread")]
async fn the_drain_gives_up_after_its_timeout() {
    use std::io::Write;
    let (geth, head) = chain_with_logs().await;
    let mut neve = Neve::start(
        geth.http_url(),
        &["--floor", "0", "--ws-url", "none", "--drain-timeout", "2"],
        head,
    )
    .await;
    let mut stuck = std::net::TcpStream::connect(&neve.addr).unwrap();
    stuck
        .write_all(b"POST / HTTP/1.1\r\nhost: neve\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"jsonrpc\"")
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let signalled = Instant::now();
    neve.terminate();
    let status = tokio::task::block_in_place(|| neve.wait_exit(Duration::from_secs(15)))
        .unwrap_or_else(|| panic!("neve did not exit:\n{}", neve.log()));
    let took = signalled.elapsed();
    assert!(status.success(), "{status}:\n{}", neve.log());
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(10),
        "waited for the stuck request up to the drain timeout, no longer: {took:?}"
    );
    assert!(neve.log().contains("drain timed out"), "{}", neve.log());
    drop(stuck);
}
