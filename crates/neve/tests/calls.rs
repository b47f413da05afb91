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

use neve_upstream::{RpcClient, quantity};
use serde_json::{Value, json};
use support::calls::*;
use support::*;

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
    compare_probes(neve, geth, &at, funded).await;
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
    let TokenChain {
        node: _node,
        geth,
        neve,
        client,
        head,
        token,
        holders,
        slots,
    } = neve_on_a_token_chain().await;

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

    // An estimate is charged (and counted) for every probe of its search,
    // not for the one gas it answers: at least its first run at the
    // highest bound and the optimistic try, each near the answer's gas.
    let gas_total = || {
        let (_, metrics) = neve.get("/metrics").unwrap();
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("neve_call_gas_total ")?.parse::<u64>().ok())
            .expect("neve_call_gas_total in /metrics")
    };
    let charged = gas_total();
    let estimate =
        json!([{"from": holders[0], "to": token, "input": transfer(STRANGER, 2)}, "latest"]);
    let (status, answer) = call(&client, "eth_estimateGas", &estimate).await;
    assert_eq!(status, 200, "{answer}");
    let answered = u64::from_str_radix(
        answer["result"].as_str().unwrap().trim_start_matches("0x"),
        16,
    )
    .unwrap();
    let spent = gas_total() - charged;
    assert!(
        spent > answered + answered / 2,
        "an estimate of {answered} gas counted {spent}"
    );

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
