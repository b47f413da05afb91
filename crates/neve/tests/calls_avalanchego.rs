//! Calls executed over verified state against avalanchego's C-chain, whose
//! EVM is coreth's: `eth_call` and `eth_estimateGas` through neve equal
//! avalanchego's answers at heights of the tail and by hash (token reads and
//! transfers, reverts, panics, halts, value and fee fields, state
//! overrides under coreth's storage key rule, the environment with
//! coreth's `PREVRANDAO` and coinbase, its deprecated native-asset
//! contracts and P256VERIFY), through a neve mirroring that neve too. What
//! neve cannot answer as coreth does is 421: warp, block overrides, one
//! storage cell reached by both its keys, `eth_createAccessList`, the fee
//! methods (coreth's oracle is its own), `eth_simulateV1` and traces.

mod support;

use std::time::Duration;

use neve_upstream::{RpcClient, quantity};
use serde_json::{Value, json};
use support::calls::*;
use support::*;

/// The address of avalanchego's prefunded key, funded on the C-chain.
const FUNDED: &str = "0x8db97c7cece249c2b98bdc0226cc4c2a57bf52fc";

/// coreth's precompiles beyond Ethereum's, by address.
const NATIVE_ASSET_CALL: &str = "0100000000000000000000000000000000000002";
const NATIVE_ASSET_BALANCE: &str = "0100000000000000000000000000000000000001";
const WARP: &str = "0x0200000000000000000000000000000000000005";

/// Reaches `address` with `opcode` (CALL 0xf1 with no value, DELEGATECALL
/// 0xf4) and returns the success flag and the gas left after it.
fn reach(opcode: &str, address: &str) -> String {
    let value = if opcode == "f1" { "5f" } else { "" };
    format!("0x5f5f5f5f{value}73{address}5a{opcode}5f525a60205260405ff3")
}

/// STATICCALLs P256VERIFY with 160 zero bytes (no valid signature):
/// returns the success flag, the gas left and the output word.
const P256_PROBE: &str = "0x6020604060a05f6101005afa5f525a60205260605ff3";

/// SSTORE(1 << 248, 5), then returns SLOAD(`key`): under coreth's key rule
/// slot 0 and slot 1 << 248 are one cell.
fn write_high_then_read(key: &str) -> String {
    format!("0x6005600160f81b55{key}545f5260205ff3")
}

/// A key with the low bit of its first byte set, and its cell's key.
fn high_key(low: u8) -> (String, String) {
    (
        format!("0x01{}{low:02x}", "0".repeat(60)),
        format!("0x{}{low:02x}", "0".repeat(62)),
    )
}

/// The same call is a miss now and after the fetches it may start: neve
/// does not answer it, a front end asks the node.
async fn missed(neve: &RpcClient, method: &str, params: Value) {
    for _ in 0..3 {
        let (status, answer) = call(neve, method, &params).await;
        assert_eq!(status, 421, "{method} {params}: {answer}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every kind of call coreth and neve answer alike, at `at`.
async fn compare_at(
    neve: &RpcClient,
    node: &RpcClient,
    at: Value,
    token: &str,
    holders: &[String],
    slots: &[String],
) {
    for holder in holders {
        let transfer_from = json!({"from": holder, "to": token, "input": transfer(STRANGER, 5)});
        same(neve, node, "eth_call", json!([transfer_from, at])).await;
        same(neve, node, "eth_estimateGas", json!([transfer_from, at])).await;
    }
    same(
        neve,
        node,
        "eth_call",
        json!([{"from": STRANGER, "to": token, "input": transfer(&holders[0], 1)}, at]),
    )
    .await;
    let sload = PROBES[8].1;
    for slot in slots {
        // The slot, and the key coreth reads the same cell under.
        let high = format!("0x01{}", &slot[4..]);
        for key in [slot, &high] {
            same(
                neve,
                node,
                "eth_call",
                json!([{"to": token, "input": key}, at, {token: {"code": sload}}]),
            )
            .await;
        }
    }
    compare_probes(neve, node, &at, FUNDED).await;
    // coreth's own: the native-asset contracts, P256VERIFY, storage keys.
    let (high, low) = high_key(0);
    for code in [
        reach("f1", NATIVE_ASSET_CALL),
        reach("f4", NATIVE_ASSET_CALL),
        reach("f1", NATIVE_ASSET_BALANCE),
        P256_PROBE.to_string(),
        // Written and read by the same key: one cell, one key.
        write_high_then_read("600160f81b"),
    ] {
        let probe = json!({PROBE: {"code": code}});
        same(neve, node, "eth_call", json!([{"to": PROBE}, at, probe])).await;
        same(
            neve,
            node,
            "eth_estimateGas",
            json!([{"to": PROBE, "from": FUNDED}, at, probe]),
        )
        .await;
    }
    for key in [&high, &low] {
        for overrides in [
            json!({PROBE: {"code": sload, "stateDiff": {high.clone(): format!("0x{:064x}", 7)}}}),
            json!({PROBE: {"code": sload, "state": {high.clone(): format!("0x{:064x}", 7)}}}),
            json!({PROBE: {"code": sload, "state": {low.clone(): format!("0x{:064x}", 9)}}}),
        ] {
            same(
                neve,
                node,
                "eth_call",
                json!([{"to": PROBE, "input": key}, at, overrides]),
            )
            .await;
        }
    }
    for to in [
        format!("0x{NATIVE_ASSET_BALANCE}"),
        "0x0100000000000000000000000000000000000000".into(),
    ] {
        same(neve, node, "eth_call", json!([{"to": to}, at])).await;
        same(
            neve,
            node,
            "eth_call",
            json!([{"to": to, "from": FUNDED, "value": "0x1"}, at]),
        )
        .await;
    }
    let env = json!({PROBE: {"code": ENV}});
    same(neve, node, "eth_call", json!([{"to": PROBE}, at, env])).await;
    same(
        neve,
        node,
        "eth_call",
        json!([{"to": PROBE, "from": FUNDED, "value": "0x3", "gasPrice": "0x77359400"}, at, env]),
    )
    .await;
    for params in [
        json!([{"to": STRANGER, "from": STRANGER, "value": "0x1"}, at]),
        json!([{"to": STRANGER, "from": FUNDED, "value": "0x1"}, at]),
        json!([{"to": STRANGER, "gas": "0x100"}, at]),
        json!([{"to": STRANGER, "from": STRANGER, "gasPrice": "0x1"}, at]),
        json!([{"to": STRANGER, "from": FUNDED, "maxFeePerGas": "0x1"}, at]),
        json!([{"to": STRANGER, "from": FUNDED, "maxFeePerGas": "0x1", "maxPriorityFeePerGas": "0x2"}, at]),
        json!([{"to": STRANGER, "gasPrice": "0x1", "maxFeePerGas": "0x1"}, at]),
        json!([{"to": STRANGER, "chainId": "0x1"}, at]),
        json!([{"to": STRANGER, "from": STRANGER, "value": "0x5"}, at, {STRANGER: {"balance": "0x10"}}]),
        json!([{"to": token}, at, {token: {"state": {}, "stateDiff": {}}}]),
        json!([{"input": "0x600160005260206000f3"}, at]),
        json!([{"from": FUNDED, "input": "0x6001600052"}, at]),
    ] {
        same(neve, node, "eth_call", params).await;
    }
    for params in [
        json!([{"to": STRANGER, "from": FUNDED, "value": "0x1"}, at]),
        json!([{"to": STRANGER, "from": STRANGER, "value": "0x1", "gasPrice": "0x1"}, at]),
        json!([{"input": "0x600160005260206000f3", "from": FUNDED}, at]),
    ] {
        same(neve, node, "eth_estimateGas", params).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_equal_avalanchegos_and_coreths_own_are_misses() {
    let (node, avalanchego, head) = avalanchego_with_a_token().await;
    let neve = neve_following_avalanchego(&node, head).await;
    let client = RpcClient::new(&neve.url).unwrap();
    let (token, holders, slots) = token_and_holders(&avalanchego).await;
    assert!(!holders.is_empty() && !slots.is_empty());
    same(&client, &avalanchego, "eth_getChainConfig", json!([])).await;

    for height in [head, head / 2, 1 + head / 5] {
        let at = json!(quantity(height));
        compare_at(&client, &avalanchego, at, &token, &holders, &slots).await;
    }
    let block: Value = avalanchego
        .call("eth_getBlockByNumber", (quantity(head - 1), false))
        .await
        .unwrap();
    let by_hash = json!({"blockHash": block["hash"]});
    compare_at(&client, &avalanchego, by_hash, &token, &holders, &slots).await;

    // What neve does not answer as coreth does: the node's.
    let at = json!(quantity(head));
    for params in [
        json!([{"to": WARP, "input": "0x4213cf78"}, at]),
        json!([{"to": PROBE}, at, {PROBE: {"code": reach("f1", &WARP[2..])}}]),
        // Written by one key of a cell, read by the other.
        json!([{"to": PROBE}, at, {PROBE: {"code": write_high_then_read("5f")}}]),
        json!([{"to": STRANGER}, at, {}, {"number": "0x1234"}]),
        json!([{"to": STRANGER, "accessList": [{"address": WARP, "storageKeys": []}]}, at]),
    ] {
        missed(&client, "eth_call", params).await;
    }
    missed(
        &client,
        "eth_createAccessList",
        json!([{"from": FUNDED, "to": token, "input": transfer(STRANGER, 1)}, at]),
    )
    .await;
    for method in ["eth_gasPrice", "eth_maxPriorityFeePerGas", "eth_baseFee"] {
        missed(&client, method, json!([])).await;
    }
    missed(&client, "eth_feeHistory", json!([1, "latest", [50]])).await;
    // Simulated blocks are geth's, not coreth's: the node's.
    missed(
        &client,
        "eth_simulateV1",
        json!([{"blockStateCalls": [{"calls": [{"to": STRANGER}]}]}, at]),
    )
    .await;
    // Traces replay blocks under coreth's rules, which neve does not
    // follow block by block: the node's.
    missed(
        &client,
        "debug_traceBlockByNumber",
        json!([at, {"tracer": "callTracer"}]),
    )
    .await;
    missed(
        &client,
        "debug_traceCall",
        json!([{"to": STRANGER}, at, {"tracer": "callTracer"}]),
    )
    .await;
    // Nothing read disagreed with a proof.
    assert_eq!(neve.health().unwrap()["state"]["refused_proofs"], 0);

    // A neve mirroring that neve learns coreth's rules from it.
    let mirror = Neve::start_mirror(&neve.url, head).await;
    let mirrored = RpcClient::new(&mirror.url).unwrap();
    same(&mirrored, &avalanchego, "eth_getChainConfig", json!([])).await;
    compare_at(
        &mirrored,
        &avalanchego,
        json!(quantity(head - 1)),
        &token,
        &holders,
        &slots,
    )
    .await;
}
