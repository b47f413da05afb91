//! Calls executed over verified state against the live node: on a chain
//! with a token and its holders, `eth_call` and `eth_estimateGas` through
//! neve equal geth's answers (results and errors, byte for byte) at
//! `latest`, at heights of the tail and by block hash, for token reads and
//! transfers from holders and strangers, reverts with reasons, panics,
//! halts, value calls with and without funds, too little gas, fee fields,
//! state and block overrides, and an environment-echoing contract; through
//! a neve mirroring that neve too. A repeated call at `latest` needs the
//! node for nothing, and malformed calls get -32602 and fetch nothing.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use neve_upstream::{RpcClient, quantity};
use serde_json::{Value, json};
use support::*;

/// A never-used address.
const STRANGER: &str = "0x00000000000000000000000000000000000c0ffe";
/// Where the probes' code is put with a state override.
const PROBE: &str = "0x00000000000000000000000000000000000000aa";

/// Echoes the environment: NUMBER, TIMESTAMP, COINBASE, PREVRANDAO,
/// GASLIMIT, CHAINID, BASEFEE, BLOBBASEFEE, GASPRICE, ORIGIN, CALLER,
/// CALLVALUE, BLOCKHASH(NUMBER-1), SELFBALANCE and GAS, a word each.
const ENV: &str = "0x43600052426020524160405244606052456080524660a0524860c0524a60e0523a6101005232610120523361014052346101605260014303406101805247\
6101a0525a6101c0526101e06000f3";

/// Probes by name: each is the whole runtime of an account.
const PROBES: &[(&str, &str)] = &[
    ("env", ENV),
    // Error("nope").
    (
        "revert",
        "0x6308c379a060e01b60005260206004526004602452636e6f706560e01b60445260646000fd",
    ),
    // Panic(0x11).
    ("panic", "0x634e487b7160e01b600052601160045260246000fd"),
    ("empty revert", "0x5f5ffd"),
    ("endless loop", "0x5b5f56"),
    ("invalid", "0xfe"),
    ("undefined opcode", "0x0c"),
    ("stack underflow", "0x01"),
    // Returns SLOAD(calldata[0..32]).
    ("sload", "0x5f35545f5260205ff3"),
];

/// The JSON-RPC answer and HTTP status of one call.
async fn call(client: &RpcClient, method: &str, params: &Value) -> (u16, Value) {
    let body = json!({"jsonrpc":"2.0","id":7,"method":method,"params":params}).to_string();
    let (status, bytes) = client.post(body.into()).await.unwrap();
    (status.as_u16(), serde_json::from_slice(&bytes).unwrap())
}

/// neve's answer equals geth's, result or error (a 421 is asked again:
/// the fetches it started warm the store).
async fn same(neve: &RpcClient, geth: &RpcClient, method: &str, params: Value) {
    let (_, expected) = call(geth, method, &params).await;
    let (mut status, mut got) = call(neve, method, &params).await;
    for _ in 0..10 {
        if status != 421 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        (status, got) = call(neve, method, &params).await;
    }
    assert_eq!(status, 200, "{method} {params}: {got}");
    assert_eq!(got, expected, "{method} {params}");
}

/// The token, holders (senders of transfers) and the slots of holders'
/// balances, from the chain's logs.
async fn token_and_holders(geth: &RpcClient) -> (String, Vec<String>, Vec<String>) {
    let logs = transfer_logs(geth).await;
    let token = logs[0]["address"].as_str().unwrap().to_string();
    let topic_address = |topic: &Value| format!("0x{}", &topic.as_str().unwrap()[26..]);
    let holders: BTreeSet<String> = logs
        .iter()
        .map(|l| topic_address(&l["topics"][1]))
        .collect();
    let slots: BTreeSet<String> = logs
        .iter()
        .map(|l| l["topics"][2].as_str().unwrap().to_string())
        .collect();
    (
        token,
        holders.into_iter().take(4).collect(),
        slots.into_iter().take(4).collect(),
    )
}

/// `transfer(to, amount)` calldata.
fn transfer(to: &str, amount: u64) -> String {
    format!(
        "0xa9059cbb{:0>64}{amount:064x}",
        to.trim_start_matches("0x")
    )
}

/// Every kind of call, at `at`.
async fn compare_at(
    neve: &RpcClient,
    geth: &RpcClient,
    at: Value,
    token: &str,
    holders: &[String],
    slots: &[String],
) {
    let funded = neve_devnet::GETH_DEV_ADDRESS;
    for holder in holders {
        same(
            neve,
            geth,
            "eth_call",
            json!([{"from": holder, "to": token, "input": transfer(STRANGER, 5)}, at]),
        )
        .await;
    }
    same(
        neve,
        geth,
        "eth_call",
        json!([{"from": STRANGER, "to": token, "input": transfer(&holders[0], 1)}, at]),
    )
    .await;
    // Token reads: its balances through a reader put over its code.
    for slot in slots {
        same(
            neve,
            geth,
            "eth_call",
            json!([{"to": token, "input": slot}, at, {token: {"code": PROBES[8].1}}]),
        )
        .await;
    }
    for (_, code) in PROBES {
        let probe = json!({PROBE: {"code": code}});
        same(neve, geth, "eth_call", json!([{"to": PROBE}, at, probe])).await;
        same(
            neve,
            geth,
            "eth_call",
            json!([{"to": PROBE, "from": funded, "value": "0x1", "gas": "0x100000"}, at, probe]),
        )
        .await;
        same(
            neve,
            geth,
            "eth_call",
            json!([{"to": PROBE, "from": funded, "gasPrice": "0x3b9aca00"}, at, probe]),
        )
        .await;
        same(neve, geth, "eth_call", json!([{"to": PROBE, "from": funded, "maxFeePerGas": "0x77359400", "maxPriorityFeePerGas": "0x2"}, at, probe])).await;
        same(
            neve,
            geth,
            "eth_estimateGas",
            json!([{"to": PROBE, "from": funded}, at, probe]),
        )
        .await;
    }
    let env = json!({PROBE: {"code": ENV}});
    same(neve, geth, "eth_call", json!([{"to": PROBE}, at, env, {"number": "0x1234", "time": "0x99", "feeRecipient": STRANGER, "baseFeePerGas": "0x7", "prevRandao": format!("0x{}", "11".repeat(32)), "gasLimit": "0x5555", "blobBaseFee": "0x3"}])).await;
    for params in [
        // Value with and without funds, too little gas, fee fields.
        json!([{"to": STRANGER, "from": STRANGER, "value": "0x1"}, at]),
        json!([{"to": STRANGER, "from": funded, "value": "0x1"}, at]),
        json!([{"to": STRANGER, "gas": "0x100"}, at]),
        json!([{"to": STRANGER, "from": STRANGER, "gasPrice": "0x1"}, at]),
        json!([{"to": STRANGER, "from": funded, "maxFeePerGas": "0x1"}, at]),
        json!([{"to": STRANGER, "from": funded, "maxFeePerGas": "0x1", "maxPriorityFeePerGas": "0x2"}, at]),
        json!([{"to": STRANGER, "gasPrice": "0x1", "maxFeePerGas": "0x1"}, at]),
        // Overrides.
        json!([{"to": STRANGER, "from": STRANGER, "value": "0x5"}, at, {STRANGER: {"balance": "0x10"}}]),
        json!([{"to": token, "input": slots[0]}, at, {token: {"code": PROBES[8].1, "stateDiff": {slots[0].clone(): format!("0x{:064x}", 7)}}}]),
        json!([{"to": token, "input": slots[0]}, at, {token: {"code": PROBES[8].1, "state": {}}}]),
        json!([{"to": token}, at, {token: {"state": {}, "stateDiff": {}}}]),
        // Creation.
        json!([{"input": "0x600160005260206000f3"}, at]),
        json!([{"from": funded, "input": "0x6001600052"}, at]),
    ] {
        same(neve, geth, "eth_call", params).await;
    }
    // Access lists, from funded senders (geth prices them with its
    // oracle's fee defaults first, so an unfunded sender is refused).
    for holder in holders.iter().take(2) {
        for params in [
            json!([{"from": holder, "to": token, "input": transfer(STRANGER, 1)}, at]),
            json!([{"from": holder, "to": PROBE, "input": slots[0]}, at, {PROBE: {"code": PROBES[8].1}}]),
            json!([{"from": holder, "to": PROBE, "gas": "0x186a0"}, at, {PROBE: {"code": PROBES[1].1}}]),
            json!([{"from": holder, "input": "0x600160005260206000f3"}, at]),
            json!([{"from": holder, "to": token, "input": transfer(STRANGER, 1), "gasPrice": "0x3b9aca00"}, at]),
        ] {
            same(neve, geth, "eth_createAccessList", params).await;
        }
    }
    for params in [
        json!([{"to": STRANGER, "from": funded, "value": "0x1"}, at]),
        json!([{"to": STRANGER, "from": STRANGER, "value": "0x1", "gasPrice": "0x1"}, at]),
        json!([{"input": "0x600160005260206000f3", "from": funded}, at]),
        json!([{"from": holders[0], "to": token, "input": transfer(STRANGER, 5)}, at]),
    ] {
        same(neve, geth, "eth_estimateGas", params).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_equal_geths_at_latest_in_the_tail_by_hash_and_through_a_mirror() {
    let (geth_node, head) = chain_with_logs().await;
    let geth = RpcClient::new(geth_node.http_url()).unwrap();
    let neve = Neve::start(geth_node.http_url(), &["--floor", "0"], head).await;
    let client = RpcClient::new(&neve.url).unwrap();
    let (token, holders, slots) = token_and_holders(&geth).await;
    assert!(!holders.is_empty() && !slots.is_empty());

    // The chain grows while calls are compared, so `latest` is asked of
    // both at a height both hold: the tail's own heights, and by hash.
    for height in [head, head / 2, 1 + head / 5] {
        compare_at(
            &client,
            &geth,
            json!(quantity(height)),
            &token,
            &holders,
            &slots,
        )
        .await;
    }
    let block: Value = geth
        .call("eth_getBlockByNumber", (quantity(head - 1), false))
        .await
        .unwrap();
    let by_hash = json!({"blockHash": block["hash"]});
    compare_at(&client, &geth, by_hash, &token, &holders, &slots).await;
    // Asked again at the same block, the answers come from the memo, and
    // are still geth's: results, reverts and errors alike.
    let memo = |outcome: &str| {
        let (_, metrics) = neve.get("/metrics").unwrap();
        let line = format!("neve_calls_total{{outcome=\"{outcome}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(line.as_str())?.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {line}in /metrics"))
    };
    let kept = memo("memo");
    compare_at(
        &client,
        &geth,
        json!(quantity(head)),
        &token,
        &holders,
        &slots,
    )
    .await;
    assert!(memo("memo") > kept, "nothing answered from the memo");
    assert!(memo("local") > 0, "no call ran on held state");

    // The fee methods at the same head (the dev chain seals only on
    // transactions, so the head holds still). geth's oracle answers a
    // block with nothing to sample with its own previous answer, which
    // depends on who asked it what before; so the suggestions are
    // compared when the 20 blocks sampled all hold transactions.
    let mut sampled_all = true;
    for height in head.saturating_sub(19)..=head {
        let block: Value = geth
            .call("eth_getBlockByNumber", (quantity(height), false))
            .await
            .unwrap();
        sampled_all &= !block["transactions"].as_array().unwrap().is_empty();
    }
    let mut methods = vec!["eth_blobBaseFee", "eth_baseFee"];
    if sampled_all {
        methods.extend(["eth_gasPrice", "eth_maxPriorityFeePerGas"]);
    } else {
        eprintln!("an empty block among the newest 20: the suggested tip is geth's history");
    }
    for method in methods {
        same(&client, &geth, method, json!([])).await;
    }
    for (count, newest, percentiles) in [
        (json!(1), json!("latest"), json!([])),
        (json!("0x5"), json!("latest"), json!([10, 50, 90])),
        (
            json!(20),
            json!(quantity(head - 3)),
            json!([0, 25.5, 99.9, 100]),
        ),
        (json!("0x400"), json!(quantity(head / 2)), json!([50])),
        (json!(0), json!("latest"), json!([])),
    ] {
        same(
            &client,
            &geth,
            "eth_feeHistory",
            json!([count, newest, percentiles]),
        )
        .await;
    }
    for bad in [json!([1, "latest", [50, 10]]), json!([1, "latest", [101]])] {
        same(&client, &geth, "eth_feeHistory", bad).await;
    }

    // At `latest` (no new blocks now: the dev chain seals on transactions).
    let read = json!([{"from": holders[0], "to": token, "input": transfer(STRANGER, 1)}, "latest"]);
    same(&client, &geth, "eth_call", read.clone()).await;
    // The keys it read are hot: asked again, the node is asked nothing.
    let upstream = || neve.health().unwrap()["state"]["upstream_calls"].clone();
    let before = upstream();
    let (status, _) = call(&client, "eth_call", &read).await;
    assert_eq!(status, 200);
    assert_eq!(upstream(), before, "a repeated call at latest fetched");

    // Malformed calls: -32602, and nothing fetched for them.
    for params in [
        json!(["0x12", "latest"]),
        json!([{"to": "0x12"}, "latest"]),
        json!([{"to": STRANGER, "gas": "12"}, "latest"]),
        json!([{"to": STRANGER, "value": 5}, "latest"]),
        json!([{"to": STRANGER}, "0xzz"]),
        json!([{"to": STRANGER}, "latest", {STRANGER: {"balance": "1"}}]),
        json!([]),
    ] {
        let (status, answer) = call(&client, "eth_call", &params).await;
        assert_eq!(status, 200, "{params}");
        assert_eq!(answer["error"]["code"], -32602, "{params}: {answer}");
    }
    assert_eq!(upstream(), before, "malformed calls fetched");
    // Not neve's to answer: pending.
    let (status, _) = call(&client, "eth_call", &json!([{"to": STRANGER}, "pending"])).await;
    assert_eq!(status, 421);

    // A neve mirroring that neve learns the chain's rules from it and
    // executes the same calls over state it verified itself.
    let mirror = Neve::start_mirror(&neve.url, head).await;
    let mirrored = RpcClient::new(&mirror.url).unwrap();
    same(&mirrored, &geth, "eth_config", json!([])).await;
    compare_at(
        &mirrored,
        &geth,
        json!(quantity(head - 2)),
        &token,
        &holders,
        &slots,
    )
    .await;
    assert_eq!(mirror.health().unwrap()["state"]["refused_proofs"], 0);
}
