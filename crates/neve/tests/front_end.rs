//! neve's scaling story end to end, with the shipped front-end config
//! (`deploy/nginx/neve.conf`, included as is): nginx in front of neve A
//! (following geth) and neve B (mirroring A), with what a mirror answers
//! 421 re-sent to geth. Every answer through nginx equals geth's; `neve
//! bench` through it sees no error while B is killed mid-run; B, restarted,
//! takes requests again.

mod support;

use std::time::{Duration, Instant};

use neve_upstream::{RpcClient, quantity};
use serde_json::{Value, json};
use support::*;

/// nginx (Debian's) running `deploy/nginx/neve.conf` with this site's
/// `neve/upstreams.conf` and `neve/listen.conf`: the mirrors at `mirrors`,
/// the full node at `node` (host:port each).
struct FrontEnd {
    _nginx: Nginx,
    url: String,
}

fn host_port(url: &str) -> &str {
    url.trim_start_matches("http://").trim_end_matches('/')
}

fn start_front_end(mirrors: &[&str], node: &str) -> FrontEnd {
    let (nginx, addr) = shipped_front_end(mirrors, node);
    FrontEnd {
        _nginx: nginx,
        url: format!("http://{addr}"),
    }
}

/// JSON-RPC calls answered `ok` by a neve, from its `/metrics`.
fn answered(neve: &Neve) -> u64 {
    rpc_calls(&neve.addr, Some("ok")).unwrap()
}

/// Every count of an error outcome in `neve bench`'s results.
fn error_outcomes(results: &Value) -> Vec<String> {
    const ERRORS: [&str; 5] = [
        "transport_errors",
        "status_5xx",
        "status_4xx",
        "malformed",
        "rpc_errors",
    ];
    let mut found = Vec::new();
    let mut stack = vec![results];
    while let Some(value) = stack.pop() {
        match value {
            Value::Object(map) => {
                for (key, v) in map {
                    if ERRORS.contains(&key.as_str()) && v.as_u64().unwrap_or(0) > 0 {
                        found.push(format!("{key}: {v}"));
                    }
                    stack.push(v);
                }
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn two_mirrors_behind_nginx_answer_as_geth_and_survive_losing_one() {
    let (geth, head) = chain_with_logs().await;
    // Both as README's Deploying says to run mirrors behind a front end.
    let a = Neve::start(
        geth.http_url(),
        &[
            "--floor",
            "0",
            "--ws-url",
            geth.ws_url(),
            "--shed-when-behind",
            "on",
        ],
        head,
    )
    .await;
    let mut b = Neve::start_with(
        &[
            "--mirror-from",
            &a.url,
            "--floor",
            "0",
            "--shed-when-behind",
            "on",
        ],
        head,
    )
    .await;
    let front = start_front_end(&[&a.addr, &b.addr], host_port(geth.http_url()));
    let through = RpcClient::new(&front.url).unwrap();
    let direct = RpcClient::new(geth.http_url()).unwrap();

    // Every answer through the front end is geth's: blocks and receipts
    // from the mirrors, and what they answer 421 (state at `pending`,
    // a block past the head) from geth.
    let served_before = answered(&a) + answered(&b);
    assert_same_as_geth(&through, &direct, 0..=head).await;
    for (method, params) in [
        (
            "eth_getBalance",
            json!([format!("0x{}", "00".repeat(20)), "pending"]),
        ),
        (
            "eth_getBlockByNumber",
            json!([quantity(head + 1000), false]),
        ),
        ("eth_chainId", json!([])),
    ] {
        assert_eq!(
            answer(&through, method, params.clone()).await,
            answer(&direct, method, params.clone()).await,
            "{method} {params}"
        );
    }
    let served = answered(&a) + answered(&b) - served_before;
    assert!(
        served >= 5 * (head + 1),
        "the mirrors answered the block reads: {served}"
    );

    // neve bench through the front end while B is killed mid-run.
    let out = tempfile::tempdir().unwrap();
    let target = format!("front={}", front.url);
    let out_dir = out.path().display().to_string();
    let bench = tokio::spawn(async move {
        run_neve(&[
            "bench",
            "--target",
            &target,
            "--workload",
            "mix:seeds-read",
            "--conns",
            "4",
            "--warmup",
            "0.5",
            "--duration",
            "4",
            "--pool",
            "200",
            "--out",
            &out_dir,
            // Null results of the mix (a receipt not yet mined, say) flag
            // the run; what this checks is that no call failed.
            "--allow-flagged",
        ])
        .await
    });
    let (a_before, b_before) = (answered(&a), answered(&b));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!bench.is_finished(), "B is killed while the bench runs");
    let b_served = answered(&b) - b_before;
    b.kill();
    let output = bench.await.unwrap();
    expect_success(&output);
    let results = read_json(&out.path().join("results.json"));
    let errors = error_outcomes(&results);
    assert!(errors.is_empty(), "clients saw errors: {errors:?}");
    // The share of the bench's calls the mirrors answered themselves.
    let calls: u64 = results["workloads"][0]["targets"][0]["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            p["outcomes"]["ok"].as_u64().unwrap() + p["outcomes"]["null_results"].as_u64().unwrap()
        })
        .sum();
    let mirrors = answered(&a) - a_before + b_served;
    eprintln!(
        "front end: {calls} measured calls; the mirrors answered {mirrors} calls (warm-up included)"
    );
    assert!(
        mirrors * 2 > calls,
        "the mirrors answered most: {mirrors} of {calls}"
    );

    // The mix's calls, through the front end with B down, are answered 200
    // and as geth answers them.
    // The newest block with a transaction (the chain may end on empty ones).
    let mut with_tx = head;
    let tx = loop {
        let params = json!([quantity(with_tx), true]);
        let block = answer(&direct, "eth_getBlockByNumber", params).await;
        match block["result"]["transactions"].get(0) {
            Some(tx) => break tx.clone(),
            None => with_tx -= 1,
        }
    };
    let (sender, hash) = (tx["from"].clone(), tx["hash"].clone());
    for (method, params) in [
        ("eth_getBalance", json!([sender, "latest"])),
        ("eth_getBalance", json!([sender, quantity(head / 2)])),
        ("eth_blockNumber", json!([])),
        ("eth_getBlockByNumber", json!(["latest", false])),
        ("eth_getBlockByNumber", json!([quantity(head / 2), true])),
        ("eth_chainId", json!([])),
        ("net_version", json!([])),
        (
            "eth_getLogs",
            json!([{"fromBlock": quantity(head.saturating_sub(5)), "toBlock": quantity(head)}]),
        ),
        ("eth_getTransactionReceipt", json!([hash])),
        ("eth_getTransactionByHash", json!([hash])),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let (status, through_answer) = through.post(body.to_string().into()).await.unwrap();
        let (_, direct_answer) = direct.post(body.to_string().into()).await.unwrap();
        assert_eq!(status, 200, "{method} {params}");
        assert_eq!(
            serde_json::from_slice::<Value>(&through_answer).unwrap(),
            serde_json::from_slice::<Value>(&direct_answer).unwrap(),
            "{method} {params}"
        );
    }

    // B comes back on the same address and store and takes requests again.
    b.restart();
    b.wait_for_height(head, Duration::from_secs(60)).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while b.get("/health/ready").map(|(s, _)| s) != Some(200) {
        assert!(
            Instant::now() < deadline,
            "B never became ready:\n{}",
            b.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before = answered(&b);
    let deadline = Instant::now() + Duration::from_secs(20);
    while answered(&b) == before {
        assert!(Instant::now() < deadline, "B never rejoined the pool");
        let _ = answer(&through, "eth_getBlockByNumber", json!(["0x1", false])).await;
    }
}
